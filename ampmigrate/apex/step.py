"""The backward and the step: ``amp.scale_loss`` -> ``scaler.scale(loss).backward()``,
``opt.step()`` -> ``scaler.step(opt)`` + ``scaler.update()``, gradient accumulation and several
optimizers in turn.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ampmigrate.apex.clip import _HOLDS_GRADIENTS
from ampmigrate.apex.common import (
    Loop,
    _code,
    _is_call_of,
    _Setup,
    _statements,
    is_path,
)
from ampmigrate.apex.verdict import APEX
from ampmigrate.apex.wrappers import wrapper_step

# tensor methods that compute from what they are called on and run no module's forward
_TENSOR_ONLY = frozenset({
    "mean", "sum", "float", "double", "half", "detach", "clone", "contiguous", "squeeze",
    "unsqueeze", "view", "reshape", "abs", "pow", "sqrt", "exp", "log", "to", "cuda", "div",
    "mul", "add", "sub", "neg", "nanmean", "nansum",
})  # fmt: skip
_GUARD = f"""\
if {_HOLDS_GRADIENTS}:
    {{access}}.step({{opt}})
    {{access}}.update()
else:  # no backward since the last step (apex stepped plainly here)
    {{opt}}.step()
"""


_BRANCH = """\
if {test}:
    {access}.step({opt})
    {access}.update()
else:  # the branch without a scaled backward (apex stepped plainly)
    {opt}.step()
"""


# out-of-place tensor methods: each returns a new tensor and leaves its input as it was
_IDLE = frozenset({
    "clamp", "clip", "float", "half", "double", "detach", "clone", "abs", "mean", "sum",
    "item", "cpu", "to", "view", "reshape", "squeeze", "unsqueeze", "neg", "sqrt", "log",
})  # fmt: skip


class Step:
    """The step stage of ``_Planner`` (mixed into it)."""

    def _forward_free(self, loss: cst.BaseExpression) -> bool:
        """``loss`` calls nothing that may run a forward: no call at all, or only tensor
        methods on what it reads (``loss.mean() / accum``, the 42nd review's Kaggle script,
        refused as "calls something")."""
        return all(
            isinstance(n.func, cst.Attribute) and n.func.attr.value in _TENSOR_ONLY
            for n in self._subtree(loss)
            if isinstance(n, cst.Call)
        )

    def _scale_loss(self, call: cst.Call, setup: _Setup) -> None:
        statement = self.statement(call)
        function = self.function(call)
        access = self.access(function)
        if not isinstance(statement, cst.With) or len(statement.items) != 1:
            self.problem(call, "`amp.scale_loss` is not the only item of a `with`")
            return
        item = statement.items[0]
        if item.item is not call or item.asname is None:
            self.problem(call, "`amp.scale_loss` without `as name`")
            return
        alias = _code(self.module, item.asname.name)
        positional = [a.value for a in call.args if not a.keyword]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword}
        loss = keywords.get("loss", positional[0] if positional else None)
        optimizer = keywords.get("optimizers", positional[1] if len(positional) > 1 else None)
        extra = set(keywords) - {"loss", "optimizers", "delay_unscale", "loss_id"}
        if extra or len(positional) > 2:
            listed = ", ".join(f"`{k}`" for k in sorted(extra)) or "a third positional argument"
            self.problem(call, f"`amp.scale_loss` with {listed}: migrate this call by hand")
            return
        broken = self._raises_name_error(
            call, optimizer, "pass the optimizer `amp.initialize` returned (fix the original)"
        )
        broken = broken or self._never_initialized(call, optimizer)
        if broken is not None:
            self.problem(call, broken)
            return
        hooked = self.hooked("callee")  # a runner's loss: the runner's caller casts
        if loss is None or (
            not isinstance(loss, cst.Name) and not hooked and not self._forward_free(loss)
        ):  # `stats["loss"] / accum` is followed by its names; a call could be a forward
            self.problem(
                call,
                "`amp.scale_loss` of an expression that calls something (it may run a forward, "
                "which autocast must cover): assign the loss to a name first (`loss = ...`)",
            )
            if is_path(optimizer) and access is not None:
                self._steps(_code(self.module, optimizer), access, function, call)  # all blockers
            return
        group = _group(self.module, optimizer)
        if group is None and not is_path(optimizer):
            several = isinstance(optimizer, cst.List | cst.Tuple)
            self.problem(
                call,
                "`amp.scale_loss` for several optimizers at once that are not all names, "
                "attributes or constant-key subscripts: after the backward, `scaler.step(o)` "
                "for each and one `scaler.update()`; place them by hand"
                if several
                else f"`amp.scale_loss` for the optimizer `{_code(self.module, optimizer)}`, "
                "neither a name, an attribute nor a constant-key subscript (the rewrite follows "
                "an optimizer by its spelling to its step): bind it to a name first, "
                "or migrate by hand",
            )
            return
        suite = statement.body if isinstance(statement.body, cst.SimpleStatementSuite) else None
        if suite is not None:  # `with amp.scale_loss(...) as s: s.backward()` on one line
            first = cst.SimpleStatementLine(
                body=suite.body[:1], trailing_whitespace=suite.trailing_whitespace
            )
            body = [first, *suite.body[1:]]
        else:
            body = list(statement.body.body)
        # `s.clamp(lo, hi)` on its own line: an out-of-place method whose result is dropped
        # does nothing; it goes with the block (the rest is judged without it)
        idle = [s for s in body if self._idle_on(s, alias)] if suite is None else []
        body = [s for s in body if s not in idle]
        first = body[0] if body else None
        backward = first.body[0] if isinstance(first, cst.SimpleStatementLine) else None
        if not (
            isinstance(backward, cst.Expr)
            and _is_call_of(backward.value, "backward")
            and _code(self.module, backward.value.func.value) == alias
        ) or any(alias in _code(self.module, s) for s in body[1:]):
            self.problem(call, "the `scale_loss` block does more than `backward()`")
            return
        later = self._read_after(statement, alias, function)
        inside = next((x for x in body[1:] if self._reads_gradients(x)), None)
        clips = inside is not None and any(
            isinstance(n, cst.Call)
            and _code(self.module, n.func).rpartition(".")[2].startswith("clip_grad")
            for n in self._subtree(inside)
        )
        changes = inside is not None and any(
            self._changes_gradients(x) for x in body[body.index(inside) :]
        )  # (`grads = [p.grad for p in ...]`, then `all_reduce(grads)`)
        if changes and not clips:
            writing = [
                n
                for s in body[body.index(inside) :]
                for n in self._subtree(s)
                if isinstance(n, cst.Call) and self._changes_gradients(n)
            ]  # (the innermost names it: `dist.all_reduce`, not `works.append` around it)
            call = next(
                (n for n in writing if not any(m is not n and self.within(m, n) for m in writing)),
                None,
            )
            shown = f" (`{_code(self.module, call.func)}(...)`)" if call is not None else ""
            self.problem(
                inside,
                f"this code changes gradients{shown} inside the `amp.scale_loss` block, where "
                "apex's gradients are still scaled (apex unscales them when the block exits) "
                "and hold this backward's gradients alone (apex set the ones accumulated "
                "before aside until the exit): kept right after `scaler.scale(loss).backward()` "
                "it sees GradScaler's scaled gradients, accumulated ones included, which gives "
                "apex's result only if what it does commutes with the scale (a sum or an "
                "all-reduce does; a clip or a threshold does not) and nothing was accumulated "
                "before: place it by hand",
            )
        elif changes:
            self.problem(
                inside,
                "this gradient read is inside the `amp.scale_loss` block, where apex's "
                "gradients are still scaled (apex unscales them when the block exits): the "
                "original clips scaled gradients (at max_norm over the scale); the rewrite "
                "would either clip unscaled ones, which changes training, or keep a clip "
                "AMP203 flags: move it after the block first (the usual intent)",
            )
        elif inside is not None:
            self.problem(
                inside,
                "this gradient read is inside the `amp.scale_loss` block, where apex's "
                "gradients are still scaled (apex unscales them when the block exits): kept "
                "right after `scaler.scale(loss).backward()` it would read the same scaled "
                "values, but AMP203 flags a read there, so the rewrite does not keep it; move "
                "it after the block (it then reads unscaled gradients) or keep it and accept "
                "AMP203, by hand",
            )
        if access is None:
            return  # _scope said why
        new_backward = backward.value.with_changes(
            func=backward.value.func.with_changes(
                value=cst.parse_expression(f"{access}.scale({_code(self.module, loss)})")
            )
        )
        head = first.with_changes(
            body=[backward.with_changes(value=new_backward)], leading_lines=statement.leading_lines
        )
        kept: list[cst.BaseStatement] = []
        if later is not None:  # (vokenization logs `scaled_loss.item()` after the step)
            kept = [
                cst.parse_statement(
                    f"{alias} = {access}.scale({_code(self.module, loss)})\n"
                ).with_changes(leading_lines=statement.leading_lines)
            ]
            head = first.with_changes(leading_lines=())
            self.plan.notes.append(
                f"`{alias}`, apex's scaled loss, is read after its block (line "
                f"{self.line(later)}): it is bound to `{access}.scale({_code(self.module, loss)})`"
                ", the loss times the scale its backward used, as apex's was"
            )
        # the rest of the body as updated (it may hold other edits, e.g. a region)
        # (by index: after the backward, the first statement kept, all but the idle ones)
        rest = [] if suite is not None else [
            i for i, s in enumerate(statement.body.body) if s not in idle
        ][1:]  # fmt: skip
        self.plan.edits[statement] = lambda u: cst.FlattenSentinel(
            [*kept, head, *(u.body.body[i] for i in rest)]
        )
        for gone in idle:
            self.plan.notes.append(
                f"`{_code(self.module, gone).strip()}` in the `scale_loss` block at line "
                f"{self.line(gone)} did nothing (an out-of-place method of the scaled loss "
                "whose result is dropped): it goes with the block"
            )
        for opt in group or [_code(self.module, optimizer)]:
            self.scaled.setdefault((id(function), opt), []).append(statement)
            self._steps(opt, access, function, call)
        if group is not None:
            self._one_update(group, function, call)
        if not hooked and not self._stepped_elsewhere(function):  # (there: the callers' regions)
            enabled = self._enabled_at(setup, function, statement)
            self.requests.append((statement, loss, function, enabled))

    def _idle_on(self, statement: cst.CSTNode, alias: str) -> bool:
        """``statement`` is ``alias.m(...)`` alone, ``m`` a tensor method that returns a new
        tensor and changes nothing (its arguments call nothing): dropping it changes nothing."""
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return False
        expr = statement.body[0]
        call = expr.value if isinstance(expr, cst.Expr) else None
        return (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and isinstance(call.func.value, cst.Name)
            and call.func.value.value == alias
            and call.func.attr.value in _IDLE
            and not any(self.facts(a.value).calls for a in call.args)
        )

    def _one_update(self, group: list[str], function: cst.CSTNode, call: cst.Call) -> None:
        """``scale_loss(loss, [a, b])``: one scale for both, so ``scaler.step`` for each and a
        single ``update()`` after the last (an ``update()`` between them would change the scale
        the other's gradients are unscaled with). Each optimizer steps once, in one block."""
        steps = [self.steps.get((id(function), opt), []) for opt in group]
        if not all(steps):
            return  # (_steps said which has no step)
        shown = ", ".join(f"`{o}`" for o in group)
        nodes = sorted((found[0] for found in steps), key=lambda n: self.order[id(n)])
        following = self._following_steps(call, steps)
        nodes = following or nodes  # (each optimizer also steps after other scaled backwards)
        if following is None and any(len(found) != 1 for found in steps):
            opt, found = next((o, f) for o, f in zip(group, steps, strict=True) if len(f) != 1)
            lines = ", ".join(str(self.line(n)) for n in found)
            why = (
                f"`amp.scale_loss` for {shown}: `{opt}` steps at lines {lines} of this function "
                "(on different paths, or more than once), and the rewrite places the one "
                "`scaler.update()` they share only after a single step of each; place the steps "
                "and the update by hand"
            )
        elif len({id(self.parent(n)) for n in nodes}) != 1:
            why = (
                f"the steps of {shown} (scaled together) are in different blocks: one "
                "`scaler.update()` after the last cannot follow them; place it by hand"
            )
        elif any(_is_call_of(n, "master_params") for n in self._subtree(function)):
            why = (
                "`amp.master_params` beside a loss scaled for several optimizers at once: "
                "unscale each optimizer before its clip and step them by hand"
            )
        else:
            why = None
        if why is not None:
            self.problem(call, why)
            return
        self.groups.append(nodes)  # (all but the last step without `update()`)
        self.plan.notes.append(
            f"behaviour change: the loss scaled for {shown} at "
            f"line {self.line(call)} is stepped with `scaler.step` for each and one `update()`; "
            "apex skipped every one of these steps when any of their gradients overflowed, "
            "GradScaler skips each optimizer whose own gradients did (PyTorch's documented "
            "behaviour for several optimizers; the scale halves as before)"
        )

    def _following_steps(self, call: cst.Call, steps: list[list]) -> list | None:
        """The step of each optimizer of a group that follows its ``scale_loss`` block in that
        block's own statements, before any other backward (Maximum Classifier Discrepancy:
        ``scale_loss(loss1, [fe, c])`` then ``fe.step(); c.step()``, later ``scale_loss(loss2,
        fe)`` then ``fe.step()``): those steps share the group's one ``update()``; a later step
        of one of them follows its own scaled backward. None: some optimizer has several
        steps and no such one."""
        if all(len(found) == 1 for found in steps):
            return None
        located = self.block_of(self.statement(call))
        if located is None:
            return None
        block, index = located
        picked: dict[int, cst.CSTNode] = {}  # by the optimizer's place in the group
        for statement in _statements(block)[index + 1 :]:
            if any(_is_call_of(n, "backward") for n in self._subtree(statement)):
                break
            mine = [i for i, found in enumerate(steps) if statement in found]
            if any(i in picked for i in mine):
                return None  # (one steps twice before the others: not the group's shape)
            picked.update(dict.fromkeys(mine, statement))
            if len(picked) == len(steps):
                return list(picked.values())
        return None

    def _sure_groups(self) -> None:
        """A step of a group that may come without the scaled backward (``_unscaled_steps``)
        would be guarded on its own, apart from the one update: refused."""
        for nodes in self.groups:
            unsure = next((n for n in nodes if n in self.unsure), None)
            if unsure is not None:
                self.problem(
                    unsure,
                    f"{self._unsure(self.unsure[unsure], unsure)}, and this step shares one "
                    "`scaler.update()` with the other optimizers scaled with it: place the "
                    "steps and the update by hand",
                )

    def _changes_gradients(self, statement: cst.CSTNode) -> bool:
        """``statement`` may change the gradients it reads: a clip, an in-place method, or a
        call that is not a builtin (only ``print(p.grad)``-like reads are known not to)."""
        for node in self._subtree(statement):
            if not isinstance(node, cst.Call):
                continue
            name = _code(self.module, node.func)
            if name in ("print", "len", "float", "str", "repr", "format", "sum", "max", "min",
                        "range", "enumerate", "zip", "list", "isinstance"):  # fmt: skip
                continue
            if isinstance(node.func, cst.Attribute) and node.func.attr.value in (
                "item", "norm", "abs", "sum", "mean", "max", "min", "tolist", "format",
                "info", "debug", "warning", "log", "append", "cpu", "detach", "clone",
                "parameters", "named_parameters", "values", "items", "keys",
            ):  # fmt: skip
                continue
            return True
        return False

    def _never_initialized(self, call: cst.Call, given) -> str | None:
        """``scale_loss(loss, opt)`` where ``opt`` is a local its function builds with a
        ``torch.optim`` constructor and hands to nothing (not to ``amp.initialize``, not to a
        helper): apex reads ``opt._amp_stash``, which only ``initialize`` sets, so the call
        raised AttributeError (head-network-distillation, the 34th review: the rewrite trained
        where the original could not). Why, or None."""
        function = self.function(call)
        if not isinstance(given, cst.Name) or not isinstance(function, cst.FunctionDef):
            return None
        name, made = given.value, None
        for node in self._subtree(function.body):
            if not (isinstance(node, cst.Name) and node.value == name) or node is given:
                continue
            parent = self.parent(node)
            if isinstance(parent, cst.Attribute) and parent.value is node:
                continue  # `opt.step()`, `opt.param_groups`
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                continue  # `self.opt`: another name
            target = self.parent(parent) if isinstance(parent, cst.AssignTarget) else None
            if (
                isinstance(target, cst.Assign)
                and parent.target is node
                and len(target.targets) == 1
                and isinstance(target.value, cst.Call)
                and any(q.startswith("torch.optim.") for q in self.qualified(target.value.func))
                and made is None
                and self.order[id(target)] < self.order[id(call)]
            ):
                made = target
                continue
            return None  # handed on, rebound or read otherwise: it may reach `initialize`
        if made is None:
            return None
        return (
            f"`amp.scale_loss` is given `{name}`, which `{function.name.value}` builds at line "
            f"{self.line(made)} (`{_code(self.module, made.value.func)}(...)`) and never gives "
            "to `amp.initialize`: apex reads the `_amp_stash` that only `initialize` sets on an "
            "optimizer, so that call raised AttributeError, and the original's mixed-precision "
            "path cannot run as written; pass the optimizer `amp.initialize` returned (fix the "
            "original) before migrating"
        )

    def _raises_name_error(
        self, call: cst.Call, given: cst.BaseExpression | None, remedy: str, local: bool = False
    ) -> str | None:
        """Why ``call`` (an apex amp call) raises NameError in the original where it is given
        ``given``: a path whose head nothing binds for the code that reads it, or (``local``:
        ``call``'s statement binds it) a local that only that statement binds, after reading
        it. None: it does not."""
        unbound = self._unbound_head(given)
        only = self._bound_only_by(given, call) if local and unbound is None else None
        if unbound is None and only is None:
            return None
        function = self.function(call)
        where = f"`{function.name.value}`" if isinstance(function, cst.FunctionDef) else "it"
        why = (
            f"`{unbound}` is bound nowhere {where} can read it (no parameter, local, module "
            "name or builtin)"
            if unbound is not None
            else f"`{only}` is a local of {where} that only this statement binds, after reading it"
        )
        member = _code(self.module, call.func).rpartition(".")[2]
        return (
            f"`amp.{member}` is given `{_code(self.module, given)}`, but {why}: that call raises "
            f"NameError, so the original's mixed-precision path cannot run as written; {remedy} "
            "before migrating"
        )

    def _bound_only_by(self, given: cst.BaseExpression | None, call: cst.Call) -> str | None:
        """``model, optimizer = amp.initialize(model, optimizer)`` in a function where nothing
        else binds ``optimizer``: a local read before it is bound (UnboundLocalError, a
        NameError). The name, or None."""
        if not isinstance(given, cst.Name) or not isinstance(self.function(call), cst.FunctionDef):
            return None
        scope = self.scopes.get(given)
        if scope is None or type(scope).__name__ != "FunctionScope":
            return None
        statement = self.statement(call)
        if any(  # (`global optimizer`: the module's, bound elsewhere)
            isinstance(n, cst.Global | cst.Nonlocal)
            and any(d.name.value == given.value for d in n.names)
            for n in self._subtree(self.function(call))
        ):
            return None
        found = scope.assignments[given.value]
        if found and all(
            isinstance(a.node, cst.CSTNode) and self.within(a.node, statement) for a in found
        ):
            return given.value
        return None

    def _unbound_head(self, expression: cst.BaseExpression | None) -> str | None:
        """The name an ``a.b.c`` path starts from, where nothing binds it for the code that
        reads it (None: bound, or not such a path)."""
        head = expression
        while isinstance(head, cst.Attribute):
            head = head.value
        if not isinstance(head, cst.Name):
            return None
        scope = self.scopes.get(head)
        if scope is None or head.value in scope:
            return None
        stars = any(  # a star import may bind anything
            isinstance(n, cst.ImportFrom) and isinstance(n.names, cst.ImportStar)
            for n in self.nodes
        )
        return None if stars else head.value

    def _aliases(self, opt: str, function: cst.CSTNode) -> set[str]:
        """Other names of the optimizer ``opt`` in ``function``: ``optimizer = self.optimizer``
        where neither is bound otherwise, but ``opt`` by ``amp.initialize`` (which returns the
        optimizer it is given)."""
        if not isinstance(function, cst.FunctionDef):
            return set()
        found: set[str] = set()
        others = 0
        for node in self._subtree(function.body):
            if not isinstance(node, cst.Assign):
                continue
            targets = [  # each name it binds: `model, optimizer = ...` binds two
                _code(self.module, e.value if isinstance(e, cst.Element) else e)
                for t in node.targets
                for e in (t.target.elements if isinstance(t.target, cst.Tuple | cst.List)
                          else [t.target])
            ]  # fmt: skip
            value = node.value
            initialized = isinstance(value, cst.Call) and any(
                q.startswith(APEX) for q in self.qualified(value.func)
            )
            if initialized:
                continue
            plain = is_path(value)
            if targets == [opt] and plain:
                found.add(_code(self.module, value))
            elif opt in targets or found & set(targets):
                others += 1
        if others or len(found) != 1:
            return set()
        alias = next(iter(found))
        rebound = any(
            isinstance(n, cst.AssignTarget) and _code(self.module, n.target) == alias
            for n in self._subtree(function.body)
        )
        return set() if rebound else found

    def _read_after(self, block: cst.With, alias: str, function) -> cst.Name | None:
        """A read of ``alias`` after ``block`` in ``function``, before anything binds it again
        (another ``with amp.scale_loss(...) as alias``)."""
        end = self.ends[id(block)] - 1
        for node in self._subtree(function):
            if self.order.get(id(node), -1) < end or not isinstance(node, cst.Name):
                continue
            if node.value != alias or not self.variable(node):
                continue
            if isinstance(self.parent(node), cst.AsName | cst.AssignTarget):
                return None  # bound again from here on
            if self._drop_del(node):
                return None  # unbound from here on
            return node
        return None

    def _drop_del(self, node: cst.Name) -> bool:
        """``del scaled_loss`` after its block (a habit to free memory): the rewrite binds no
        such name, so the statement goes (``del a, scaled_loss`` keeps ``a``). False: not a
        ``del`` of the name."""
        parent = self.parent(node)
        element = parent if isinstance(parent, cst.Element) else None
        holder = self.parent(element) if element is not None else parent
        delete = self.parent(holder) if element is not None else holder
        if not isinstance(delete, cst.Del):
            return False
        statement = self.statement(delete)
        if element is None or len(holder.elements) == 1:
            if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
                return False
            self._remove_statement(statement)
            return True
        at = list(holder.elements).index(element)

        def without(u: cst.Del) -> cst.Del:
            kept = [e for i, e in enumerate(u.target.elements) if i != at]
            if len(kept) == 1:  # `del a` (a one-element tuple would keep its comma)
                return u.with_changes(target=kept[0].value)
            last = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return u.with_changes(target=u.target.with_changes(elements=[*kept[:-1], last]))

        self.plan.edits[delete] = without
        return True

    def _steps(self, opt: str, access: str, function: cst.CSTNode, call: cst.Call) -> None:
        if self._find_steps(opt, access, function, 0):
            return
        dead = self.dead_steps.get(opt)
        if dead:  # (PyABSA: `if amp: <scaled backward> else: loss.backward(); opt.step()`)
            self.problem(
                call,
                f"`{opt}` is stepped only at {self.lines(dead)}, in code that ran where apex "
                "was not installed and goes with it: apex's own path scaled the backward and "
                f"never stepped `{opt}` (with apex, the model did not train); step it after "
                "the scaled backward too, then migrate",
            )
            return
        if isinstance(function, cst.FunctionDef) and self._call_sites(function) == []:
            name = function.name.value
            elsewhere = next(
                (n for n in self._subtree(self.module) if isinstance(n, cst.Call)
                 and _code(self.module, n.func) == f"{opt}.step"),
                None,
            )  # fmt: skip
            seen = ""
            if elsewhere is not None:
                around = self.function(elsewhere)
                where = f" in `{around.name.value}`" if isinstance(around, cst.FunctionDef) else ""
                seen = f" (this file steps it at line {self.line(elsewhere)}{where})"
            self.problem(
                call,
                f"no `{opt}.step()` statement in `{name}`, which scales the loss, and no call "
                f"of `{name}` in this file: its callers are in other modules, which decide "
                f"what step follows it{seen}; the rewrite does not follow them across files, "
                "and scaled gradients must be stepped through `scaler.step`: migrate by hand",
            )
            return
        self.problem(
            call,
            f"no `{opt}.step()` statement in the function that scales the loss, nor in every "
            "function that calls it in this file: scaled gradients must be stepped through "
            "`scaler.step`",
        )

    def _find_steps(self, opt: str, access: str, function: cst.CSTNode, depth: int) -> bool:
        """Plan the steps of ``opt`` that follow a scaled backward in ``function``: its own
        ``opt.step()`` statements, a wrapper's, or those of the functions that call it
        (:mod:`ampmigrate.apex.delegate`). False: none found."""
        key = (id(function), opt)
        if key in self.steps:
            return bool(self.steps[key]) or key in self.stepped_by_callers
        found = self.steps[key] = []
        names = {opt, *self._aliases(opt, function)}

        def stepping(smalls: Sequence[cst.BaseSmallStatement]) -> bool:
            return any(
                isinstance(small, cst.Expr)
                and _is_call_of(small.value, "step")
                and _code(self.module, small.value.func.value) in names
                for small in smalls
            )

        for node in self.nodes:
            if (
                isinstance(node, cst.SimpleStatementSuite)
                and self.function(node) is function
                and stepping(node.body)
            ):  # `if it % 2: opt.step(); opt.zero_grad()` (the 43rd review: was "no step")
                found.append(node)
                self.before_step[node] = []  # (found, never replaced: the file is refused)
                self.problem(
                    node,
                    f"`{opt}.step()` is on the line of the `if`, `else:` or loop that holds it: "
                    "put that body on lines of its own, where `scaler.step` + "
                    "`scaler.update()` can take its place",
                )
                continue
            if (
                isinstance(node, cst.SimpleStatementLine)
                and len(node.body) > 1
                and self.function(node) is function
                and stepping(node.body)
            ):  # `opt.step(); opt.zero_grad()` (the 34th review: was "no `opt.step()`")
                found.append(node)
                first = node.body[0]
                if (
                    stepping([first]) and not first.value.args and not self.dead(node)
                ):  # the step first: the statements after it go on lines of their own
                    tail = [_code(self.module, small).strip() for small in node.body[1:]]
                    comment = node.trailing_whitespace.comment
                    if comment is not None:
                        tail[-1] += f"  {comment.value}"
                    self._replace_step(node, access, opt, tail)
                    continue
                self.problem(
                    node,
                    f"`{opt}.step()` shares its line with other statements (`;`) that run "
                    "before it: put it on a line of its own, where `scaler.step` + "
                    "`scaler.update()` can take its place",
                )
                continue
            if not (
                isinstance(node, cst.SimpleStatementLine)
                and len(node.body) == 1
                and isinstance(node.body[0], cst.Expr)
                and _is_call_of(node.body[0].value, "step")
                and _code(self.module, node.body[0].value.func.value) in names
                and self.function(node) is function
            ):
                continue
            if self.dead(node):  # (in the branch that ran without apex: it goes)
                self.dead_steps.setdefault(opt, []).append(node)
                continue
            if node.body[0].value.args:
                given = node.body[0].value.args
                closure = len(given) == 1 and (
                    isinstance(given[0].value, cst.Lambda)
                    or (given[0].keyword is not None and given[0].keyword.value == "closure")
                )
                self.problem(
                    node,
                    f"`{opt}.step(...)` with a closure (GradScaler.step takes none)"
                    if closure
                    else f"`{opt}.step(...)` is given arguments (a closure, which GradScaler.step "
                    "cannot take, or the optimizer's own): place `scaler.step` by hand",
                )
                continue
            found.append(node)
            self._replace_step(node, access, opt)
        if not found:
            found += self._wrapper_steps(opt, access, function)
        if not found and (
            self._stepped_elsewhere(function) or self._caller_steps(opt, function, depth)
        ):
            self.stepped_by_callers.add(key)
        return bool(found) or key in self.stepped_by_callers

    def _replace_step(
        self, node: cst.CSTNode, access: str, opt: str, tail: Sequence[str] = ()
    ) -> None:
        """Plan ``node`` (a step statement) as what other stages put before it, then
        ``scaler.step`` + ``scaler.update()`` (the guarded form where a path reaches it
        without a scaled backward; no update before the last optimizer of a group), then
        ``tail``: decided when the edit is built, once every stage has planned."""
        self.before_step[node] = []

        def build(_u):
            update = f"    {access}.update()\n"
            step = (
                [cst.parse_statement(_GUARD.format(access=access, opt=opt).replace(
                    update, self._updated(access, "    ")
                ))]
                if node in self.guarded
                else [cst.parse_statement(_BRANCH.format(
                    test=self.branch_guards[node], access=access, opt=opt
                ).replace(update, self._updated(access, "    ")))]
                if node in self.branch_guards
                else [
                    cst.parse_statement(f"{access}.step({opt})\n"),
                    *([] if any(node in g[:-1] for g in self.groups)
                      or node in self.updated_after
                      else cst.parse_module(self._updated(access, "")).body),
                ]
            )  # fmt: skip
            lines = [
                *[s for make in self.before_step[node] for s in make()],
                *step,
                *[cst.parse_statement(line + "\n") for line in tail],
            ]
            lines[0] = lines[0].with_changes(leading_lines=node.leading_lines)
            return cst.FlattenSentinel(lines)

        self.plan.edits[node] = build

    def _updated(self, access: str, indent: str) -> str:
        """``scaler.update()``, then apex's bounds on the scale (``self.bounds``) kept."""
        lines = [f"{access}.update()"]
        for test, value in self.bounds:
            lines += [f"if {access}.get_scale() {test} {value}:", f"    {access}.update({value})"]
        return "".join(f"{indent}{line}\n" for line in lines)

    def _wrapper_steps(self, opt: str, access: str, function: cst.CSTNode) -> list[cst.CSTNode]:
        """``holder.step()`` where ``opt`` is ``holder.attribute`` and ``holder`` an optimizer
        wrapper whose ``step`` runs ``self.attribute.step()`` and then only calls of its own
        methods (:mod:`ampmigrate.apex.wrappers`): written out, so that ``scaler.step`` makes
        the inner step apex had patched, and the rest runs after it as before."""
        holder, dot, attribute = opt.partition(".")
        if not (
            dot
            and holder.isidentifier()
            and attribute.isidentifier()
            and isinstance(function, cst.FunctionDef)
            and function in self.module.body
        ):
            return []
        calls = [
            node
            for node in self._subtree(function.body)
            if isinstance(node, cst.SimpleStatementLine)
            and len(node.body) == 1
            and isinstance(node.body[0], cst.Expr)
            and _is_call_of(node.body[0].value, "step")
            and not node.body[0].value.args
            and _code(self.module, node.body[0].value.func.value) == holder
        ]
        if not calls:
            return []
        wrapper = wrapper_step(self.syntax, self.path, function.name.value, holder, attribute)
        if wrapper is None:
            return []
        made, tail = wrapper
        for node in calls:
            self._replace_step(node, access, opt, tail)
            self.plan.notes.append(
                f"`{holder}.step()` at line {self.line(node)} is written out from `{made}.step`: "
                f"`{access}.step({opt})` (skipped on overflow, as apex's patched step was), "
                f"`{access}.update()`"
                + "".join(f", then `{line}`" for line in tail)
                + " as that method ran them"
            )
        return calls

    def _unsure(self, scaled: cst.CSTNode, step: cst.CSTNode) -> str:
        """Why ``scaled`` may not run before ``step``: the outermost branch or loop around it
        that does not hold the step too."""
        why = "it sits in a block that may not run before the step"
        for ancestor in self.ancestors(scaled):
            if self.within(step, ancestor):
                break
            if isinstance(ancestor, cst.If):
                why = f"it sits in a branch of the `if` at line {self.line(ancestor)}"
            elif isinstance(ancestor, Loop):
                why = (
                    f"it sits in the loop at line {self.line(ancestor)}, which the rewrite "
                    "cannot show runs at least once"
                )
        return why


def _group(module: cst.Module, optimizer: cst.CSTNode | None) -> list[str] | None:
    """``[a, b]`` given to ``scale_loss``: the optimizers' spellings when there are several and
    each is a distinct name or attribute (None otherwise)."""
    if not isinstance(optimizer, cst.List | cst.Tuple) or len(optimizer.elements) < 2:
        return None
    if any(isinstance(e, cst.StarredElement) for e in optimizer.elements):
        return None
    values = [e.value for e in optimizer.elements]
    if not all(is_path(v) for v in values):
        return None
    texts = [_code(module, v) for v in values]
    return texts if len(set(texts)) == len(texts) else None
