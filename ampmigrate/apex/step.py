"""The backward and the step: ``amp.scale_loss`` -> ``scaler.scale(loss).backward()``,
``opt.step()`` -> ``scaler.step(opt)`` + ``scaler.update()``, gradient accumulation and several
optimizers in turn.
"""

from __future__ import annotations

import ast
import builtins
import functools
import itertools
import os
import textwrap
from collections.abc import Iterator, Sequence

import libcst as cst

from ampmigrate.apex.clip import _HOLDS_GRADIENTS
from ampmigrate.apex.common import (
    Loop,
    _argument,
    _code,
    _is_call_of,
    _Setup,
    _statements,
    given_at,
    is_path,
    wrapping_decorator,
)
from ampmigrate.apex.users import users_on_disk
from ampmigrate.apex.verdict import APEX
from ampmigrate.apex.wrappers import wrapper_step
from ampmigrate.replace import ReplaceNodes

# calls whose result is a gradient norm (an overflow makes it inf or nan)
_NORMS = ("clip_grad_norm_", "clip_grad_norm", "get_total_norm", "grad_norm")
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

_EXITS = (cst.Continue, cst.Return, cst.Raise, cst.Break)


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

    def _unscaled_steps(self) -> None:
        """apex ran a plain ``optimizer.step()`` when no scaled backward had happened since the
        last step (a NaN loss whose backward is skipped while the step keeps its gradient
        accumulation schedule); ``GradScaler.step`` raises there instead (``_scale is None``
        before the first ``scale``, "No inf checks were recorded" once ``zero_grad`` cleared the
        gradients). A step that a backward precedes on every path from the start of the loop
        iteration (or of the function) needs nothing; the others are guarded by
        ``_guard_steps``."""
        for key, steps in self.steps.items():
            withs = self.scaled.get(key, [])
            for step in steps:
                if withs and not self._backward_before(step, withs):
                    self.unsure[step] = withs[0]

    def _guard_steps(self) -> None:
        """Where a step may come with no scaled backward since the last one, the rewrite asks
        the optimizer: gradients present were made by a scaled backward (every backward of the
        mixed-precision path is scaled) and ``scaler.step`` unscales them as apex had; none
        present is apex's plain step on no gradients. An ``unscale_`` placed before such a step
        (for a clip) asks the same: unguarded, it would run on the plain path too and leave the
        scaler waiting for an ``update()``; nothing between it and the step makes gradients."""
        opts = {id(s): opt for (_, opt), steps in self.steps.items() for s in steps}
        unscaled = []
        for step in self.unsure:
            if self.before_step[step] or step in self.served:
                opt = opts[id(step)]
                access = self.access(step)
                self.guarded_unscales[f"{access}.unscale_({opt})\n"] = opt
                unscaled.append(step)
            self.guarded.add(step)
        if self.guarded:
            self.plan.notes.append(
                f"the step at {self.lines(self.guarded)} can come with no "
                "scaled backward since the previous one (the scaled backward sits in a branch, "
                "or in a loop that may run no time): apex stepped plainly there, "
                "`scaler.step` would raise, so the rewrite steps "
                "through the scaler only when the optimizer holds gradients (all made by a "
                "scaled backward) and plainly otherwise"
                + (", and unscales them for the clip before it under the same test"
                   if unscaled else "")
            )  # fmt: skip

    def _discarded_overflows(self) -> None:
        """A step under a test of the iteration (``if math.isfinite(norm): opt.step()``) while
        the gradients are cleared whatever the test says: apex lowered its loss scale at every
        ``scale_loss`` exit, stepped or not, but ``scaler.update()`` under that test never runs
        after an overflow (the overflowing gradients are cleared unseen), so the scale never
        drops and every later step overflows too. Gradient accumulation (the gradients kept
        until the step) is not this: the step sees their overflow."""
        for (function, opt), steps in self.steps.items():
            for step in steps:
                loop = next(
                    (a for a in self.ancestors(step) if isinstance(a, Loop | cst.FunctionDef)),
                    None,
                )
                guards = []
                for ancestor in self.ancestors(step):
                    if ancestor is loop:
                        break
                    if isinstance(ancestor, cst.If):
                        guards.append(ancestor)
                withs = self.scaled.get((function, opt), [])
                if not isinstance(loop, Loop) and guards:
                    self._stepped_on_outcome(step, guards[-1], withs, opt)
                withs = [w for w in withs if isinstance(loop, Loop) and self.within(w, loop)]
                if not guards or not withs:
                    continue  # (a step outside the iteration that scales: a warm-up step)
                guard = guards[-1]
                test = _code(self.module, guard.test)
                if isinstance(guard.orelse, cst.Else) and all(
                    any(self.within(s, arm) for s in steps) for arm in (guard.body, guard.orelse)
                ):
                    continue  # (a step on both arms: every path steps)
                if any(self.within(w, guard) for w in withs) or all(
                    any(_code(self.module, a.test) == test
                        for a in self.ancestors(w) if isinstance(a, cst.If))
                    for w in withs
                ):  # fmt: skip
                    continue  # (the test of the scaled backward's own branch: no scale then)
                if not self.facts(guard.test).used & self.facts(loop).assigned:
                    continue  # a switch the iteration does not change (apex's path or not)
                # what clears this optimizer's gradients: its own `zero_grad()` first, else one
                # of something else (a model's); another optimizer's clears only its own
                others = {o for f, o in self.steps if f == function and o != opt}
                clears = {  # (each a `x.zero_grad()`, by `x`)
                    c: _code(self.module, c.func.value)
                    for c in self._clears(loop)
                    if not self._tested(c, loop)
                }
                clears = {c: x for c, x in clears.items() if x not in others}
                cleared = next((c for c, x in clears.items() if x == opt), next(iter(clears), None))
                if cleared is None:
                    continue
                if self._update_after_test(step, guard, opt, test, cleared):
                    continue
                if not self.within(step, guard.body):  # in its `else:` (or an `elif`)
                    test = f"not ({test})"
                self.problem(
                    step,
                    f"`{_code(self.module, step.body[0].value)}` runs only when `{test}`, while "
                    f"the gradients are cleared either way (line {self.line(cleared)}): apex "
                    "lowered its loss scale at every `scale_loss` exit whose gradients "
                    "overflowed, stepped or not, but a GradScaler sees an overflow only at "
                    f"`scaler.step` under `{test}`, so the overflows cleared without a step "
                    "never lower its scale (and where an overflow makes the test false, as a "
                    "non-finite norm does, the scale never drops and every later step is "
                    "skipped); place `scaler.update()` after the test, with an inf check "
                    "(`scaler.unscale_(optimizer)`) on the path that skips the step, by hand",
                )

    def _skipped_steps(self) -> None:
        """A ``continue``, ``break`` or ``return`` between the scaled backward (or the call
        of the helper that scales) and the step leaves the iteration with no step and no
        ``scaler.update()`` (the 44th review: `if norm > limit: continue` after a clip): apex
        lowered its loss scale at every ``scale_loss`` exit, stepped or not, and an
        ``unscale_`` placed before the clip raises at the next iteration's, its ``update()``
        never run. Refused, saying what to place."""
        for key, steps in self.steps.items():
            scaled = [*self.scaled.get(key, []), *self.delegates]
            for step in steps:
                function = self.function(step)
                loop = next(
                    (a for a in self.ancestors(step) if isinstance(a, Loop | cst.FunctionDef)),
                    None,
                )
                inside = loop if isinstance(loop, Loop) else function
                starts = [
                    self.order[id(w)]
                    for w in scaled
                    if self.function(w) is function
                    and self.within(w, inside)
                    and self.order[id(w)] < self.order[id(step)]
                ]
                if not starts:
                    continue
                start, end = min(starts), self.order[id(step)]
                # the gradients cleared at the top of every iteration, before its backward
                # (not kept for the step, as gradient accumulation keeps them)
                cleared = isinstance(loop, Loop) and any(
                    not self._tested(c, loop) and self.order[id(c)] < start
                    for c in self._clears(loop)
                )
                for node in self.nodes[start + 1 : end]:
                    if not isinstance(node, cst.Continue | cst.Break | cst.Return):
                        continue
                    if self.function(node) is not function or any(
                        self.within(node, w) for w in scaled
                    ):
                        continue
                    around = next(
                        (a for a in self.ancestors(node) if isinstance(a, Loop | cst.FunctionDef)),
                        None,
                    )
                    if not isinstance(node, cst.Return) and around is not loop:
                        continue  # (a loop of its own inside the iteration)
                    if any(
                        start < self.order[id(s)] < self.order[id(node)]
                        and not self._parting_if(s, node)
                        for s in steps
                    ):
                        continue  # (after a step on its own path)
                    unscaled = any(  # (an unscale_ placed for a gradient read before it)
                        start < self.order[id(r)] < self.order[id(node)]
                        and not self._parting_if(r, node)
                        for r in self.unscales
                    )
                    if not (cleared or unscaled):
                        self._note_accumulation()  # (the step sees the gradients it kept)
                        continue
                    word = type(node).__name__.lower()
                    opt = key[1]
                    self.problem(
                        node,
                        f"`{word}` leaves "
                        + ("the function" if word == "return" else "the iteration")
                        + f" after the scaled backward and before the step of `{opt}` (line "
                        f"{self.line(step)}): apex lowered its loss scale at the `scale_loss` "
                        "exit, stepped or not, but on that path no `scaler.update()` runs, so "
                        "an overflow there never lowers the GradScaler's scale (and an "
                        f"`unscale_` placed before it raises at the next one); place "
                        f"`scaler.update()` before it, after `scaler.unscale_({opt})` where "
                        "none ran on that path, by hand",
                    )
                    break

    def _stepped_on_outcome(
        self, step: cst.CSTNode, guard: cst.If, withs: list[cst.CSTNode], opt: str
    ) -> None:
        """A function run once per iteration by its caller (a trainer's ``train_one_step``)
        that steps only when a value computed after its scaled backward allows it (``if
        math.isfinite(norm):``, the 43rd review's aps-shaped trainer): where an overflow makes
        the test false, ``scaler.update()`` under it never runs, the scale never drops, and
        if the caller clears the gradients every later step overflows too; apex lowered its
        scale at each ``scale_loss`` exit. Who clears the gradients on that path is not in
        this function: refused, saying what to place."""
        before = [
            w
            for w in withs
            if self.function(w) is self.function(step)
            and self.order[id(w)] < self.order[id(guard)]
            and not self.within(w, guard)
        ]
        if not before:
            return
        start = max(self.order[id(w)] for w in before)
        assigned: set[str] = set()  # what the gradients' values give after the backward
        for node in self.nodes[start + 1 : self.order[id(guard)]]:
            if (
                isinstance(node, cst.SimpleStatementLine)
                and self.function(node) is self.function(step)
                and any(
                    (isinstance(n, cst.Attribute) and n.attr.value == "grad")
                    or (isinstance(n, cst.Call) and _code(self.module, n.func).endswith(_NORMS))
                    for n in self._subtree(node)
                )
            ):
                assigned |= self.facts(node).assigned
        if not self.facts(guard.test).used & assigned:
            return  # (a switch, a window count: not what an overflow decides)
        test = _code(self.module, guard.test)
        self.problem(
            step,
            f"`{_code(self.module, step.body[0].value)}` runs only when `{test}`, computed after "
            "the scaled backward, and no `scaler.update()` runs where it is false: after an "
            "overflow that makes it false the GradScaler's scale never drops (apex lowered its "
            "scale at each `scale_loss` exit, stepped or not), so where the caller clears the "
            "gradients every later step overflows again; place `scaler.update()` on both paths "
            f"(with `scaler.unscale_({opt})` on the one that skips the step), by hand",
        )

    def _update_after_test(
        self, step: cst.CSTNode, guard: cst.If, opt: str, test: str, cleared: cst.CSTNode
    ) -> bool:
        """``if test: opt.step()`` with nothing else in the ``if`` (no ``else``), the step a
        plain one of one optimizer that no ``unscale_`` serves: ``scaler.step`` stays under the
        test, the ``else:`` checks the gradients for an overflow (``scaler.unscale_``) and
        ``scaler.update()`` follows the ``if``, so the scale drops at every overflow and grows
        at every clean iteration, stepped or not, as apex's did at each ``scale_loss`` exit.
        False where the shape is not this (refused by the caller)."""
        if (
            guard.orelse is not None
            or _statements(guard.body) != [step]
            or self.block_of(guard) is None
            or step in self.guarded
            or step in self.branch_guards
            or any(step in g for g in self.groups)
            or guard in self.plan.edits
        ):
            return False
        access = self.access(step)
        check = f"{access}.unscale_({opt})\n"
        if check in self.unscales.values() or check in self.guarded_unscales:
            return False  # (a second unscale_ before one update() raises)
        self.updated_after.add(step)

        def build(u: cst.If) -> cst.FlattenSentinel:
            otherwise = cst.parse_statement(
                "if _:\n    pass\nelse:  # the overflow check apex made at each `scale_loss` "
                f"exit\n    {check}"
            ).orelse
            return cst.FlattenSentinel(
                [
                    u.with_changes(orelse=otherwise),
                    *cst.parse_module(self._updated(access, "")).body,
                ]
            )

        self.plan.edits[guard] = build
        self.plan.notes.append(
            f"the step at line {self.line(step)} runs only when `{test}`, while the gradients "
            f"are cleared either way (line {self.line(cleared)}): `{access}.step({opt})` stays "
            f"under that test, the `else:` checks the gradients for an overflow "
            f"(`{access}.unscale_({opt})`) and `{access}.update()` follows the `if`, so the "
            "scale drops at every overflow and grows at every clean iteration, stepped or not, "
            "as apex's did at each `scale_loss` exit"
        )
        return True

    def _cleared_backwards(self) -> None:
        """A scaled backward whose gradients are cleared before the step (the first pass of
        free adversarial training: its input's gradient is read, then ``zero_grad()``): apex
        checked its overflow at that ``scale_loss`` exit and skipped the step; the GradScaler
        checks only the gradients the step gets. Said, as it changes only what an overflow
        there does."""
        for (function, opt), steps in self.steps.items():
            withs = sorted(self.scaled.get((function, opt), []), key=lambda w: self.order[id(w)])
            for first, later in itertools.pairwise(withs):
                loop = next((a for a in self.ancestors(first) if isinstance(a, Loop)), None)
                if loop is None or not self.within(later, loop):
                    continue
                start, end = self.order[id(first)], self.order[id(later)]
                cleared = next(
                    (c for c in self._clears(loop) if start < self.order[id(c)] < end), None
                )
                stepped = any(start < self.order[id(s)] < end for s in steps)
                if cleared is not None and not stepped:
                    self.plan.notes.append(
                        f"behaviour change: the gradients of the scaled backward at line "
                        f"{self.line(first)} are cleared at line {self.line(cleared)} before the "
                        "step; an overflow there no longer skips the step (apex checked it at "
                        "that `scale_loss` exit): the GradScaler checks what the step gets"
                    )

    def _read_scales(self, init: cst.Call | None) -> None:
        """``amp._amp_state.loss_scalers[0].loss_scale()`` (a logged loss scale) becomes
        ``scaler.get_scale()``, where both hold the same value: after the step in the same
        block, as apex updated its scale at the ``scale_loss`` exit and a GradScaler only at
        ``update()``; one scale (no ``num_losses``)."""
        step_blocks = [
            (located[0], self.order[id(s)])
            for group in self.steps.values()
            for s in group
            if (located := self.block_of(s)) is not None
        ]
        for call in self.scale_reads:
            func = call.func
            holder = func.value if isinstance(func, cst.Attribute) else None
            index = holder.slice[0].slice if isinstance(holder, cst.Subscript) else None
            statement = self.statement(call)
            located = self.block_of(statement)
            why = None
            if call.args or not (
                isinstance(index, cst.Index) and _code(self.module, index.value) == "0"
            ):
                why = "only `loss_scalers[0].loss_scale()` is the GradScaler's `get_scale()`"
            elif init is not None and _argument(init, "num_losses", 99) is not None:
                why = "apex kept one scale per loss (`num_losses`), a GradScaler keeps one"
            elif located is None or not any(
                block is located[0] and at < self.order[id(statement)] for block, at in step_blocks
            ):
                why = (
                    "it is not read after the step in the step's block: apex updated its scale "
                    "when `scale_loss` exited, a GradScaler does at `update()`, so the two "
                    "differ between them; read `scaler.get_scale()` after `scaler.update()`"
                )
            access = self.access(call)
            if why is None and access is None:
                continue  # _scope said why
            if why is not None:
                self.problem(call, f"`{_code(self.module, call.func)}()`: {why}, by hand")
                continue
            read = cst.parse_expression(f"{access}.get_scale()")
            self.plan.edits[call] = lambda _u, read=read: read

    def _clears(self, loop: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """The ``zero_grad()`` calls in ``loop``."""
        for node in self._subtree(loop):
            if isinstance(node, cst.Call) and _is_call_of(node, "zero_grad"):
                yield node

    def _accumulation_note(self) -> None:
        """A step that may run less often than its scaled backward (under an ``if`` the
        backward is not under, or outside a loop the backward is in): gradient accumulation.
        apex updated its loss scale at every ``scale_loss`` exit, GradScaler does at each
        ``update()``, once per step: stated, as the scale's course differs. Two scaled
        backwards that reach one step (two losses, or the helper that scales called twice)
        are the same."""
        delayed = any(  # (`delay_unscale=`: apex skipped that exit's check and update)
            isinstance(n, cst.Arg) and n.keyword is not None and n.keyword.value == "delay_unscale"
            for n in self.nodes
        )
        for key, withs in self.scaled.items() if not delayed else ():
            ordered = sorted(withs, key=lambda w: self.order[id(w)])
            steps = self.steps.get(key, [])
            for first, second in itertools.pairwise(ordered):
                if (
                    self.function(first) is self.function(second)
                    and not self._exclusive(first, second)
                    and not any(
                        self.order[id(first)] < self.order[id(s)] < self.order[id(second)]
                        for s in steps
                    )
                    and any(self.order[id(s)] > self.order[id(second)] for s in steps)
                ):
                    self._note_accumulation()
                    return
        for key, withs in self.scaled.items():
            for step in self.steps.get(key, []):
                if step in self.updated_after:
                    continue  # (`update()` follows the step's test: once per iteration)
                above_step = list(self.ancestors(step))
                ids = [id(a) for a in above_step]
                for scaled in withs:
                    above = list(self.ancestors(scaled))
                    at = next((i for i, a in enumerate(above) if id(a) in ids), None)
                    if at is None:
                        continue
                    # below the innermost node around both: the step's side, the backward's
                    between = above_step[: ids.index(id(above[at]))]
                    inner = above[:at]
                    if any(isinstance(a, cst.If) for a in between) or any(
                        isinstance(a, cst.For | cst.While) for a in inner
                    ):
                        self._note_accumulation()
                        return

    def _note_accumulation(self) -> None:
        note = (
            "behaviour change with gradient accumulation: the GradScaler updates its loss "
            "scale once per optimizer step, where apex did at every `scale_loss` exit (every "
            "micro-batch): the scale grows after 2000 steps rather than 2000 micro-batches and "
            "halves once per overflowing step rather than per overflowing micro-batch, so the "
            "steps skipped after an overflow can differ"
        )
        self.note_once(note)

    def _tested(self, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
        """``node`` runs under a test of ``loop``'s iteration (an accumulation window's)."""
        for ancestor in self.ancestors(node):
            if ancestor is loop:
                return False
            if isinstance(ancestor, cst.If):
                return True
        return False

    def _plain_backwards(self, setup: _Setup) -> None:
        """A plain ``x.backward()`` that can run while apex is on added unscaled gradients to
        gradients apex had already unscaled (an adversarial or auxiliary loss): it is scaled
        too, so ``scaler.step`` unscales their sum as apex had added it, where nothing but the
        scaler's step reads those gradients (``_unscalable``). One in the other branch of an
        ``if`` around a scaled backward is that backward's path with mixed precision off, and
        keeps its meaning, where the test proves it (``_off_path``); otherwise the scaler may
        be on there, and the step that follows both (``scaler.step``) would find no scaled
        loss (``_exclusive_plain_backwards``)."""
        every = [w for withs in self.scaled.values() for w in withs]
        self._exclusive_plain_backwards(setup, every)
        for (_, opt), withs in self.scaled.items():
            function = self.function(withs[0])
            access = self.access(function)
            for node, calls in self._backward_lines(function):
                near = next((w for w in withs if not self._exclusive(node, w)), None)
                if near is None or any(
                    self.within(node, w) or self._exclusive(node, w) for w in every
                ):
                    continue
                call = calls[0]
                loss = _code(self.module, call.func.value)
                why, other = self._unscalable(node, call, function, opt, access)
                if why is None:
                    self._scale_plain(node, call, access, opt)
                    enabled = next(
                        (e for _, _, f, e in self.requests if f is self.function(node)),
                        self._enabled_at(setup, self.function(node), node),
                    )  # (a helper's caller that backpropagates too: the scaler's switch there)
                    if enabled is not False:  # its loss is computed in a region too: apex O1
                        self.requests.append((node, call.func.value, function, enabled))
                    continue
                remedy = (
                    f"keep it unscaled, as `{other}` is a plain step of its gradients (scaled, "
                    "they would reach it multiplied by the scale); where they are cleared before "
                    f"`{opt}`'s next step (a `zero_grad` over its parameters) the rest of the "
                    f"rewrite holds, and where they are not, keep them off `{opt}`'s step, "
                    "by hand"
                    if other is not None
                    else f"scale it (`scaler.scale({loss}).backward()`) or keep it off the "
                    "mixed-precision path, by hand"
                )
                self.problem(
                    node,
                    f"`{_code(self.module, call)}` is not scaled and can run while apex is on, "
                    f"in the same call as the scaled backward at line {self.line(near)}: apex "
                    "had unscaled that one's gradients before these were added; under "
                    "GradScaler, if they reach "
                    f"`{opt}`'s step, `scaler.step` divides them by the scale too, and the "
                    f"rewrite cannot scale this backward as well because {why}: {remedy}",
                )
            self._hidden_backwards(setup, function, withs, every, opt)

    def _hidden_backwards(
        self, setup: _Setup, function, withs: list, every: list, opt: str
    ) -> None:
        """A call in ``function`` of code that runs a plain backward (see ``Callees``) outside
        the span from a scaled backward to ``opt``'s step (inside it, ``_grad_readers`` puts
        ``unscale_`` before the call): its gradients may reach the step, and scaling them would
        change that code, so the rewrite refuses. One in the other branch of an ``if`` whose
        test keeps the scaler off there is the plain path."""
        on: set[str] | None = None
        for node in self._subtree(function):
            if not isinstance(node, cst.Call) or any(self.within(node, w) for w in every):
                continue
            if self.function(node) is not function or self.dead(node):
                continue
            if self._before_step(node, function, withs, opt):
                continue  # (between the scaled backward and the step: `unscale_` goes before it)
            hidden = self._runs_plain_backward(node)
            if hidden is None or self._cleared_there(node, hidden, setup, opt):
                continue
            apart = [w for w in withs if self._exclusive(node, w)]
            if apart and len(apart) == len(withs):
                if on is None:
                    on = self._in_scope(
                        function, self._switch_terms(setup, self.access(function)), setup
                    )
                if any(self._off_path(node, self._separating(node, w), on) is None for w in apart):
                    continue
            where = (
                f"line {hidden.line}"
                if hidden.path is None
                else f"{os.path.relpath(hidden.path, os.path.dirname(os.path.abspath(self.path)))}"
                f":{hidden.line}"
            )
            self.problem(
                node,
                f"`{_code(self.module, node)}` runs a plain `{hidden.code}` ({where}) that can "
                f"run while apex is on, in the same function as the scaled backward at line "
                f"{self.line(withs[0])} but not between it and `{opt}`'s step: apex kept these "
                "gradients apart from the scaled ones (it unscaled those as `scale_loss` "
                f"exited); under GradScaler, where they reach `{opt}`'s step (not cleared "
                "before it), `scaler.step` divides them by the scale too, and the rewrite does "
                "not scale a backward inside the function it calls: scale it there (pass it the "
                "GradScaler), or call it between the scaled backward and the step (where the "
                "rewrite unscales first), by hand",
            )

    def _cleared_there(self, call: cst.Call, hidden, setup: _Setup, opt: str) -> bool:
        """The code ``call`` runs clears, right after its plain backward, the gradients of
        what ``call`` hands it as the model or ``opt`` (``evaluate_dev(model, ...)`` whose
        ``loss.backward()`` is followed by ``model.zero_grad()``): none reach the step."""
        found = self._callee(call) if hidden.cleared else None
        if found is None or not isinstance(found[0], ast.FunctionDef):
            return False
        params = [a.arg for a in (*found[0].args.posonlyargs, *found[0].args.args)]
        given = {params[i]: a.value for i, a in enumerate(call.args) if a.keyword is None
                 and not a.star and i < len(params)}  # fmt: skip
        given.update((a.keyword.value, a.value) for a in call.args if a.keyword is not None)
        models = set(setup.models)
        return any(
            name in given and _code(self.module, given[name]) in models | {opt}
            for name in hidden.cleared
        )

    def _before_step(self, node: cst.CSTNode, function, withs: list, opt: str) -> bool:
        """``node`` comes after a scaled backward of ``opt`` that it can run with, and before a
        step of ``opt`` in the same function (``Unscale._grad_readers`` takes it)."""
        at = self.order[id(node)]
        steps = self.steps.get((id(function), opt), [])
        return any(self.order[id(w)] < at and not self._exclusive(node, w) for w in withs) and any(
            self.order[id(s)] > at for s in steps
        )

    def _exclusive_plain_backwards(self, setup: _Setup, every: list[cst.With]) -> None:
        """The plain backwards in the other branch of an ``if`` around a scaled backward whose
        test does not prove the scaler off there (``scale_loss`` only `if distributed and
        use_amp:`, the scaler on under `use_amp`): the step after the ``if`` asks the same
        test (``_branch_guard``, exact); else the plain backward is scaled, with the change
        stated, where ``_unscalable`` allows; refused with the reason where neither does."""
        for (_, opt), withs in self.scaled.items():
            function = self.function(withs[0])
            access = self.access(function)
            on: set[str] | None = None  # the switch's terms, computed on first need
            for node, calls in self._backward_lines(function):
                apart = [w for w in withs if self._exclusive(node, w)]
                if not apart or any(self.within(node, w) for w in every):
                    continue
                # each `if` that separates it from a scaled backward, innermost first: one
                # whose test keeps the scaler off there is enough
                branches = sorted(
                    ((self._separating(node, w), w) for w in apart),
                    key=lambda pair: -len(list(self.ancestors(pair[0]))),
                )
                if on is None:
                    on = self._in_scope(function, self._switch_terms(setup, access), setup)
                tests = [self._off_path(node, branch, on) for branch, _ in branches]
                if None in tests:
                    continue
                (branch, other), test = branches[0], tests[0]
                call = calls[0]
                loss = _code(self.module, call.func.value)
                native = self._native_scaled(call)
                if native is None and self._branch_guard(
                    node, branch, other, opt, function, access
                ):
                    continue
                if native is not None:
                    through, made = native
                    where = (
                        f"through `{through}`; the file makes a GradScaler of its own"
                        if made
                        else f"through `{through}`, a name this file never binds: that branch "
                        "raises NameError if it runs"
                    )
                    remedy = (
                        "let apex's setting turn the native path on and delete the apex "
                        "branches, by hand"
                        if made
                        else "delete the native branches that cannot run (or give them their "
                        "scaler and delete apex's), by hand"
                    )
                    self.problem(
                        node,
                        f"`{_code(self.module, call)}` is native AMP's scaled backward ({where}), "
                        f"in the other branch of the `if {test}:` around apex's at line "
                        f"{self.line(other)}: apex beside native AMP under a switch of its own, "
                        "which the rewrite does not follow (it keeps the native path where one "
                        f"switch picks between the two); {remedy}",
                    )
                    continue
                why, _ = self._unscalable(node, call, function, opt, access)
                if why is None:
                    self._scale_plain(node, call, access, opt, test)
                    continue
                switch = (
                    f"the scaler is on under `{setup.condition}`"
                    if setup.condition
                    else "the scaler's switch is set where `initialize` was"
                    if setup.by_scaler
                    else "the scaler is always on"
                )
                self.problem(
                    node,
                    f"`{_code(self.module, call)}` is not scaled, in the other branch of the `if "
                    f"{test}:` around the scaled backward at line {self.line(other)}, and that "
                    f"test is not known to keep mixed precision off there ({switch}; a flag "
                    "set beside `initialize` is not followed): where it does not, "
                    f"`scaler.step({opt})` would find no scaled loss (it raises, or divides "
                    f"unscaled gradients by the scale) where apex stepped plainly; the rewrite "
                    f"cannot scale it (`scaler.scale({loss}).backward()`) because {why}: test "
                    "the scaler's switch there, by hand",
                )

    def _native_scaler(self, receiver: cst.BaseExpression) -> bool:
        """``receiver`` is a torch GradScaler the file makes and scales a backward through
        (``self.scaler`` of ``self.scaler.scale(loss).backward()``): its calls are native
        AMP's own, never a step of apex's scaled gradients."""
        if self.native_receivers is None:
            self.native_receivers = {
                found[0]
                for n in self.nodes
                if isinstance(n, cst.Call)
                and isinstance(n.func, cst.Attribute)
                and n.func.attr.value == "backward"
                and (found := self._native_scaled(n)) is not None
                and found[1]
            }
        return _code(self.module, receiver) in self.native_receivers

    def _native_scaled(self, backward: cst.Call) -> tuple[str, bool] | None:
        """``scaler.scale(loss).backward()`` in a file that makes a torch GradScaler of its own,
        or through a name the file never binds (a native arm left dead beside apex's): the
        scaler it goes through and whether the file makes one (None: another backward)."""
        scaled = backward.func.value if isinstance(backward.func, cst.Attribute) else None
        if not (
            isinstance(scaled, cst.Call)
            and isinstance(scaled.func, cst.Attribute)
            and scaled.func.attr.value == "scale"
            and len(scaled.args) == 1
            and is_path(scaled.func.value)
        ):
            return None
        made = any(
            q.startswith("torch.") and q.endswith("GradScaler")
            for n in self.nodes
            if isinstance(n, cst.Call)
            for q in self.qualified(n.func)
        )
        through = _code(self.module, scaled.func.value)
        if made or _never_bound(self.syntax, through.partition(".")[0]):
            return through, made
        return None

    def _branch_guard(
        self, node, branch: cst.If, scaled: cst.With, opt: str, function, access
    ) -> bool:
        """The step after the ``if`` (its one ``opt.step()``, later in the same block, nothing
        placed before it) steps through the scaler where the test sends the iteration to the
        scaled backward, and plainly where it sends it to the plain one, as apex did on each:
        exact where the test calls nothing and nothing in between rebinds what it reads."""
        steps = self.steps.get((id(function), opt), [])
        located = self.block_of(branch)
        if access is None or len(steps) != 1 or located is None:
            return False
        step = steps[0]
        body = _statements(located[0]) or []
        index = located[1]
        after = next((i for i, s in enumerate(body) if s is step), None)
        if after is None or after <= index or self.before_step.get(step) or step in self.unsure:
            return False
        folded = branch.test.visit(ReplaceNodes(self.plan.edits))  # (`or amp is None` goes)
        try:
            test = ast.parse(f"({_code(self.module, folded)})", mode="eval").body
        except SyntaxError:
            return False
        if any(isinstance(n, ast.Call | ast.NamedExpr | ast.Await) for n in ast.walk(test)):
            return False
        read = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        between = "\n".join(_code(self.module, s) for s in body[index:after])
        try:
            stores = [
                n
                for n in ast.walk(ast.parse(textwrap.dedent(between)))
                if isinstance(n, ast.Name | ast.Attribute | ast.Subscript)
                and isinstance(n.ctx, ast.Store)
            ]
        except SyntaxError:
            return False
        written = {_root(n) for n in stores}
        if read & written:
            return False
        shown = ast.unparse(test)
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        scaled_on = (
            shown
            if self.within(scaled, branch.body)
            else ast.unparse(test.operand)  # (`if not x:` holds the plain one: the step's is `x`)
            if negated
            else f"not ({shown})"
        )
        self.branch_guards[step] = scaled_on
        self.plan.notes.append(
            f"the step at line {self.line(step)} goes through the scaler only where "
            f"`{scaled_on}` holds (the branch with the scaled backward) and is `{opt}.step()` "
            f"where it does not (the plain `backward()` at line {self.line(node)}, which may "
            "run with the scaler on: apex stepped plainly there)"
        )
        return True

    def _called_under(self, setup: _Setup) -> set[str]:
        """The terms of the test of the ``if`` around every call of the function that
        initializes (`if "--amp" in sys.argv: model, opt = setup(model, opt)`): the scaler is
        on only where one held."""
        home = setup.home
        if not isinstance(home, cst.FunctionDef):
            return set()
        tests = set()
        for node in self.nodes:
            if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)):
                continue
            if node.func.value != home.name.value:
                continue
            around = next((a for a in self.ancestors(node) if isinstance(a, cst.If)), None)
            if around is None or not self.within(node, around.body):
                return set()
            tests.add(_code(self.module, around.test))
        return set(_terms(tests.pop(), ast.And)) if len(tests) == 1 else set()

    def _separating(self, node: cst.CSTNode, scaled: cst.With) -> cst.If:
        return next(
            a for a in self.ancestors(node) if isinstance(a, cst.If) and self.within(scaled, a)
        )

    def _off_path(self, node: cst.CSTNode, branch: cst.If, on: set[str]) -> str | None:
        """None where ``branch``, the ``if`` that separates the plain backward at ``node``
        from a scaled one, runs the plain one only with the scaler off: its test holds
        wherever the scaler's switch does (one of whose terms ``on`` holds each `and` term of
        one of the test's `or` terms). Else the test, as written, for the reason."""
        # as the rewrite has it: availability terms folded (`or amp is None` goes)
        shown = _code(self.module, branch.test.visit(ReplaceNodes(self.plan.edits)))
        try:
            test = ast.parse(f"({shown})", mode="eval").body
        except SyntaxError:
            return shown
        if self.within(node, branch.body):  # the plain one runs where the test holds
            if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
                return shown
            test = test.operand
        for option in _terms(ast.unparse(test), ast.Or):
            if set(_terms(option, ast.And)) <= on:
                return None
        return shown

    def _switch_terms(self, setup: _Setup, access: str | None) -> set[str]:
        """What holds wherever the scaler is on: the `and` terms of its switch (`args.fp16`
        and `args.level == "O1"`), their stored copies (`self.fp16 = fp16`, also in a tuple
        assignment), `scaler.is_enabled()`, and the test around every call of the function
        that initializes."""
        on = set(_terms(setup.condition, ast.And)) if setup.condition else set()
        stored = {
            _code(self.module, target)
            for n in self._subtree(setup.home)
            if isinstance(n, cst.Assign) and len(n.targets) == 1
            for target, value in _pairs(n.targets[0].target, n.value)
            if isinstance(target, cst.Attribute) and _code(self.module, value) in on
        }
        enabled = {f"{access}.is_enabled()"} if access else set()
        # a helper whose callers step: they show each term of its tests on with their scaler
        shown = (
            {t for t, _, _ in self.link.delegated.switch} if self.delegating("callee") else set()
        )
        found = on | stored | enabled | shown | self._called_under(setup) | self._passed(setup, on)
        return found - self._set_after(setup, on)

    def _set_after(self, setup: _Setup, on: set[str]) -> set[str]:
        """The attributes this file assigns after ``initialize`` (in a function that calls
        the one that initializes: after that call; but the copies of the switch stored beside
        ``initialize``). `args.fp16 = use and epoch != 1` before a call, or `self.fp16` reset
        each epoch (the 62nd review's q07c, q12c), is not the switch the scaler was made
        with; NVIDIA BERT's `args.fp16 = args.fp16 or args.amp` before the call is."""
        anchor = self.order.get(id(self.plan.anchor), len(self.nodes))
        starts: dict[int, int] = {}  # by function: where what it assigns may follow initialize

        def start(function: cst.CSTNode) -> int:
            if id(function) not in starts:
                home = setup.home
                calls = [
                    self.order[id(n)]
                    for n in self._subtree(function)
                    if isinstance(home, cst.FunctionDef)
                    and isinstance(n, cst.Call)
                    and isinstance(n.func, cst.Name)
                    and n.func.value == home.name.value
                    and self.function(n) is function
                ]
                starts[id(function)] = min(calls) if calls and function is not home else anchor
            return starts[id(function)]

        return {
            _code(self.module, target)
            for n in self.nodes
            if isinstance(n, cst.Assign | cst.AugAssign | cst.AnnAssign)
            and self.order[id(n)] > start(self.function(n))
            and not (  # (`self.fp16 = fp16` beside `initialize`: a copy of the switch)
                isinstance(n, cst.Assign)
                and self.function(n) is setup.home
                and _code(self.module, n.value) in on
            )
            for target in (
                [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
            )
            if isinstance(target, cst.Attribute)
        }

    def _passed(self, setup: _Setup, on: set[str]) -> set[str]:
        """A term of the switch that is a parameter of the function that initializes, given
        the same argument at every call of it in this file (`setup(net, opt, args.fp16)`):
        that argument, and its copy on an object made beside the call (`self.args = args`:
        `self.args.fp16`). In an importer of a function that initializes (apex.shared), the
        terms that function's switch reads among its parameters."""
        home = setup.home
        if self.link and self.link.shared and self.role == "caller":
            return self._given(self.link.functions[0], dict(self.link.switch))
        if not isinstance(home, cst.FunctionDef) or self.parent(home) is not self.module:
            return set()
        listed = [p.name.value for p in (*home.params.posonly_params, *home.params.params)]
        return self._given(home.name.value, {t: listed.index(t) for t in on & set(listed)})

    def _in_scope(
        self, function: cst.CSTNode, on: set[str], setup: _Setup, seen: frozenset = frozenset()
    ) -> set[str]:
        """The terms of ``on`` (what holds wherever the scaler is on, as the function that
        makes it reads them) as they read in ``function``, a module-level function or a
        method: a parameter that every call hands on under its own name, from a caller where
        its terms hold, keeps them; one given anything else (``fp16=False``, ``fp16 and
        epoch > 0``, its default), rebound, starred, or whose calls are not all seen (passed
        as a value) loses them, as does a local it assigns; a parameter every call gives the
        same term (``fp16=args.fp16``; ``args`` where ``args.fp16`` is one; a literal True)
        is one. Where the terms are read (the function that initializes, one that calls it, a
        closure) they are taken as they are spelled."""
        method = isinstance(function, cst.FunctionDef) and isinstance(
            self.parent(self.parent(function)), cst.ClassDef
        )
        if (
            function is setup.home
            or not isinstance(function, cst.FunctionDef)
            or (self.parent(function) is not self.module and not method)
            or (self.link and self.link.shared and self.role == "caller")
            or self._calls_home(function, setup)
        ):  # (the terms of what is given the function that initializes are read where it is
            return on  # called: in an importer of a setup function, in `main` (NVIDIA's BERT))
        seen |= {id(function)}
        params = function.params
        listed = [p.name.value for p in (*params.posonly_params, *params.params)]
        listed = listed[1:] if method else listed  # (`self.step(x)` gives no `self`)
        where = {n: i for i, n in enumerate(listed)} | {
            p.name.value: -1 for p in params.kwonly_params
        }
        differs = set(self.facts(function.body).assigned) | {
            star.name.value
            for star in (params.star_arg, params.star_kwarg)
            if isinstance(star, cst.Param)
        }
        calls = self._calls_of(function, method)
        added: set[str] = set()
        for name, at in where.items():
            if calls is None or name in differs:
                differs.add(name)
                continue
            given = {_code(self.module, v) if (v := given_at(c, name, at)) else None for c in calls}
            value = given.pop() if len(given) == 1 else None
            scopes = [
                self._in_scope(c, on, setup, seen) if id(c) not in seen else on
                for c in (self.function(call) for call in calls)
            ]  # (the argument means the same where each call is)
            if value == name and all(
                t in scope for scope in scopes for t in on if name in _names_in(t)
            ):
                continue  # (handed on as it is: `train(model, args)`)
            differs.add(name)
            if value == "True":  # (a literal True holds wherever anything does)
                added.add(name)
            elif value is not None and all(_holds(value, scope) for scope in scopes):
                added |= {name} if _holds(value, on) else set()
                added |= {name + t[len(value) :] for t in on if t.startswith(value + ".")}
        return {t for t in on if not _names_in(t) & differs} | added

    def _called_elsewhere(self, name: str) -> bool:
        """Another file of the project on disk, not one of this file's link (rewritten with
        it, its calls checked there), uses this file's function ``name`` (or there are too
        many files to tell): once per name."""
        if self.path is None:
            return False
        if name not in self._elsewhere:
            linked = {*self.link.callers, self.link.callee} if self.link else set()
            users = users_on_disk(self.path, [name])
            self._elsewhere[name] = users is None or any(u not in linked for u, _, _ in users)
        return self._elsewhere[name]

    @functools.cached_property
    def _elsewhere(self) -> dict[str, bool]:
        return {}

    def _calls_of(self, function: cst.FunctionDef, method: bool) -> list[cst.Call] | None:
        """Every call of ``function`` in this file, by its name (a method: through the first
        parameter of a method of its class); None where a use is anything else, or a call
        stars its arguments, or a decorator's wrapper is what its callers call."""
        if wrapping_decorator(self.module, function) is not None:
            return None
        name = function.name.value
        calls = []
        if not method:
            for ref in self._references(name):
                call = self.parent(ref)
                if not (isinstance(call, cst.Call) and call.func is ref):
                    return None
                calls.append(call)
            if self._called_elsewhere(name):
                return None  # (called from other files too: W1's fine-tuning pass, `fp16=False`)
        else:
            owner = self.parent(self.parent(function))
            for node in self.nodes:
                if not (isinstance(node, cst.Attribute) and node.attr.value == name):
                    continue
                call, caller = self.parent(node), self.function(node)
                first = (
                    caller.params.params[0].name.value
                    if isinstance(caller, cst.FunctionDef) and caller.params.params
                    else None
                )
                if not (
                    isinstance(call, cst.Call)
                    and call.func is node
                    and isinstance(node.value, cst.Name)
                    and node.value.value == first
                    and self.parent(self.parent(caller)) is owner
                ):
                    return None
                calls.append(call)
        return None if any(a.star for c in calls for a in c.args) else calls

    def _calls_home(self, function: cst.FunctionDef, setup: _Setup) -> bool:
        """``function`` itself calls the function that initializes (by its name)."""
        home = setup.home
        return isinstance(home, cst.FunctionDef) and any(
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Name)
            and n.func.value == home.name.value
            and self.function(n) is function
            for n in self._subtree(function)
        )

    def _given(self, function: str, params: dict[str, int]) -> set[str]:
        """What every call of ``function`` in this file gives each of ``params`` (name: its
        position, -1 keyword-only) where all give the same, with its copies on an object
        made beside the call."""
        calls = []
        for ref in self._references(function):
            call = self.parent(ref)
            if not (isinstance(call, cst.Call) and call.func is ref) or any(
                a.star for a in call.args
            ):
                return set()
            calls.append(call)
        found = set()
        for term, at in params.items():
            given = set()
            for call in calls:
                keyword = [a.value for a in call.args if a.keyword and a.keyword.value == term]
                positional = [a.value for a in call.args if a.keyword is None]
                value = keyword or (positional[at : at + 1] if at >= 0 else [])
                given.add(_code(self.module, value[0]) if value else None)
            if len(given) != 1 or None in given:
                continue
            passed = given.pop()
            found.add(passed)
            root, dot, rest = passed.partition(".")
            for call in calls:  # `self.args = args` in the function that calls it
                caller = self.function(call)
                found |= {
                    f"{_code(self.module, t.target)}{dot}{rest}"
                    for n in self._subtree(caller)
                    if isinstance(n, cst.Assign) and isinstance(n.value, cst.Name)
                    and n.value.value == root and dot
                    for t in n.targets if isinstance(t.target, cst.Attribute)
                }  # fmt: skip
        return found

    def _backward_lines(self, function: cst.CSTNode) -> list[tuple[cst.CSTNode, list]]:
        """The simple statements of ``function`` that call ``x.backward()``, with those calls."""
        found = []
        for node in self.nodes:
            if not isinstance(node, cst.SimpleStatementLine) or self.function(node) is not function:
                continue
            if self.dead(node):
                continue  # (it ran where apex was not installed, and goes)
            calls = [
                s.value
                for s in node.body
                if isinstance(s, cst.Expr) and _is_call_of(s.value, "backward")
            ]
            if calls:
                found.append((node, calls))
        return found

    def _unscalable(self, node, call: cst.Call, function, opt: str, access: str | None):
        """Why scaling the plain backward at ``node`` would not give apex's sum (None: it
        would). Its gradients must go to ``opt``'s scaled step and to nothing else: the next
        step after it, in its loop iteration, is ``opt``'s; no other optimizer steps after
        it there (an LR scheduler's step reads no gradient); no ``unscale_`` (a gradient read)
        comes between the scaled backward and it, as the step would not unscale again. With
        the reason, the plain step of another optimizer that takes its gradients first."""
        if access is None:
            return "this function cannot reach the GradScaler", None
        if any(a.keyword is None or a.keyword.value not in ("retain_graph",) for a in call.args):
            return "it is given arguments other than `retain_graph`", None
        steps = self.steps.get((id(function), opt), [])
        # the iteration that steps: the innermost loop around it holding a step of `opt` (an
        # inner loop of adversarial backwards is part of one step)
        loop = next(
            (a for a in self.ancestors(node)
             if isinstance(a, Loop) and any(self.within(s, a) for s in steps)),
            None,
        )  # fmt: skip
        later = {  # the step statements after it, in its iteration: their step call
            n: step
            for n in self.nodes[self.order[id(node)] + 1 :]
            if isinstance(n, cst.SimpleStatementLine)
            and (step := next((s.value for s in n.body if isinstance(s, cst.Expr)
                               and _is_call_of(s.value, "step")), None)) is not None
            and self.function(n) is function
            and (loop is None or self.within(n, loop))
        }  # fmt: skip
        first = next(iter(later), None)
        if first not in steps:
            shown = _code(self.module, later[first]) if later else None
            where = f" (`{shown}` comes first)" if later else ""
            return f"`{opt}.step()` is not the next step after it{where}", shown
        other = next(
            (
                n
                for n, step in later.items()
                if n not in steps and "sched" not in _code(self.module, step.func.value).lower()
            ),
            None,
        )
        if other is not None:
            return (
                f"`{_code(self.module, later[other])}` at line {self.line(other)} steps after "
                "it and may read its gradients (apex left them unscaled there)"
            ), None
        read = next(
            (
                u
                for u in self.unscales
                if self.function(u) is function
                and u not in steps
                and self.order[id(u)] < self.order[id(node)]
            ),
            None,
        )
        if read is not None:
            return (
                f"the gradients are unscaled for a read at line {self.line(read)} before it, "
                "and the step would not unscale them again"
            ), None
        return None, None

    def _scale_plain(
        self, node: cst.SimpleStatementLine, call: cst.Call, access: str, opt, branch: str = ""
    ):
        """``loss.backward()`` -> ``scaler.scale(loss).backward()``: the sum the scaler unscales
        at the step is apex's sum of two unscaled gradients."""
        index = next(
            i for i, s in enumerate(node.body) if isinstance(s, cst.Expr) and s.value is call
        )
        loss = _code(self.module, call.func.value)

        def build(u: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
            expr = u.body[index]
            scaled = cst.parse_expression(f"{access}.scale(_)").with_changes(
                args=[cst.Arg(expr.value.func.value)]
            )
            value = expr.value.with_changes(func=expr.value.func.with_changes(value=scaled))
            return u.with_changes(
                body=[*u.body[:index], expr.with_changes(value=value), *u.body[index + 1 :]]
            )

        self.plan.edits[node] = build
        if branch:
            self.plan.notes.append(
                f"`{loss}.backward()` (line {self.line(node)}), in the other branch of the `if "
                f"{branch}:` around the scaled backward, is scaled too "
                f"(`{access}.scale({loss}).backward()`): that test does not keep the scaler off "
                f"there, and `{opt}`'s step after both is the scaler's, which needs a scaled "
                "loss; with the scaler off it is the plain backward it was (behaviour change "
                "where the scaler is on there: apex stepped on these gradients unscaled; now "
                "the loss scale applies, and an overflow skips the step)"
            )
            return
        self.plan.notes.append(
            f"`{loss}.backward()` (line {self.line(node)}) is scaled too "
            f"(`{access}.scale({loss}).backward()`): apex had unscaled the scaled backward's "
            "gradients before it added these unscaled, and the GradScaler unscales their sum "
            f"at `{opt}`'s step (behaviour change: this backward now runs under the loss scale, "
            "and an overflow in it skips the step and lowers the scale, as one in the other "
            "backward does; apex stepped on it)"
        )

    def _backward_before(self, step: cst.CSTNode, withs: list[cst.With]) -> bool:
        """Whether a backward surely runs before ``step`` in the same loop iteration (or
        function call): some earlier statement of a block around it, inside the innermost
        loop or function, backpropagates on every path through it."""
        node = step
        while True:
            block = self.parent(node)
            body = _statements(block)
            if body is None:
                return False
            index = next(i for i, s in enumerate(body) if s is node)
            if any(self._surely_backward(s, withs) for s in body[:index]):
                return True
            owner = self.owner(block)
            while isinstance(self.parent(owner), cst.If):  # an elif: climb to its `if`
                owner = self.parent(owner)
            if owner is None or isinstance(owner, Loop | cst.FunctionDef | cst.ClassDef):
                return False
            node = owner

    def _surely_backward(self, statement: cst.CSTNode, withs: list[cst.With], exits=_EXITS) -> bool:
        """``statement`` backpropagates on every path through it that goes on: a scaled
        backward (or the call of a helper that surely does one), a plain ``x.backward()`` (the
        branch where apex was off), or a ``with``/``if``-``else`` whose every branch does."""
        if any(statement is w for w in withs):
            delegated = self.delegates.get(statement)
            return delegated is None or self._backs_every_path(*delegated)
        if isinstance(statement, cst.SimpleStatementLine | cst.SimpleStatementSuite):
            return any(isinstance(s, cst.Expr) and _is_call_of(s.value, "backward")
                       for s in statement.body)  # fmt: skip
        blocks: list[cst.CSTNode] = []
        if isinstance(statement, cst.With):
            blocks = [statement.body]
        elif isinstance(statement, cst.If):
            current = statement
            while isinstance(current, cst.If):
                blocks.append(current.body)
                current = current.orelse
            if current is None:  # no `else`: the path through none of the branches
                return False
            blocks.append(current.body)
        return bool(blocks) and all(self._leaves_or_backward(b, withs, exits) for b in blocks)

    def _leaves_or_backward(self, block: cst.CSTNode, withs: list[cst.With], exits=_EXITS) -> bool:
        """A branch that backpropagates, or that leaves (``exits``: ``continue``, ``return``,
        ``raise``, ``break`` never reach a step later in the same iteration)."""
        lines = [block] if isinstance(block, cst.SimpleStatementSuite) else list(block.body)
        last = lines[-1] if lines else None
        simple = isinstance(last, cst.SimpleStatementLine | cst.SimpleStatementSuite)
        leaves = simple and isinstance(last.body[-1], exits)
        return leaves or any(self._surely_backward(s, withs, exits) for s in lines)

    def _steps_in_turn(self, scales: list[cst.Call]) -> None:
        """Several optimizers, one scale: each optimizer's ``scaler.step`` + ``update()`` must
        come before another optimizer's loss is scaled, or the ``update()`` changes the scale
        that the other's gradients were made with before they are unscaled."""
        events: dict[int, list[tuple[int, str, str, cst.CSTNode]]] = {}
        for call in scales:
            opt = _argument(call, "optimizers", 1)
            if opt is None:
                continue
            texts = _group(self.module, opt) or [_code(self.module, opt)]
            statement = self.statement(call)
            function = self.function(call)
            if not all((id(function), text) in self.steps for text in texts):
                continue  # its steps were not followed (a blocker of its own says why)
            events.setdefault(id(function), []).append(
                (self.order[id(statement)], "scale", texts, statement)
            )
            for text in texts:
                for step in self.steps.get((id(function), text), []):
                    events[id(function)].append((self.order[id(step)], "step", [text], step))
        for found in events.values():
            pending: dict[str, cst.CSTNode] = {}
            for _, kind, opts, node in sorted(found, key=lambda e: e[0]):
                if kind == "step":
                    pending.pop(opts[0], None)
                    continue
                shown = ", ".join(f"`{o}`" for o in opts)
                other = next((o for o, n in pending.items() if o not in opts
                              and not self._exclusive(n, node)), None)  # fmt: skip
                if other is not None and self._stepped_together(found):
                    break
                if other is not None:
                    self.problem(
                        node,
                        f"{shown}'s loss is scaled before `{other}` has stepped: the "
                        "GradScaler's `update()` after the first step would change the scale "
                        "the other's gradients were made with; step each optimizer right after "
                        "its own backward, or place the steps and one `update()` by hand",
                    )
                    return
                pending.update(dict.fromkeys(opts, node))

    def _stepped_together(self, events: list[tuple[int, str, list[str], cst.CSTNode]]) -> bool:
        """``scale_loss(l1, a)``, ``scale_loss(l2, b)``, then ``a.step()`` and ``b.step()`` in
        one block (two students of one teacher, SAC's twin critics: PyTorch's documented
        recipe for several optimizers): ``scaler.step`` for each and one ``update()`` after the
        last. The function's scales and steps fall into such runs, each closed once every
        optimizer it scaled has stepped (SAC's policy update after the critics is a run of its
        own). False: not that shape (nothing planned)."""
        ordered = sorted(events, key=lambda e: e[0])
        runs: list[list[tuple[int, str, list[str], cst.CSTNode]]] = []
        current: list[tuple[int, str, list[str], cst.CSTNode]] = []
        for event in ordered:
            if event[1] == "scale" and any(kind == "step" for _, kind, _, _ in current):
                return False  # (a loss scaled while the run's steps are under way)
            current.append(event)
            scales = sum(kind == "scale" for _, kind, _, _ in current)
            if event[1] == "step" and 2 * scales == len(current):
                runs.append(current)
                current = []
        if current or not any(len(run) > 2 for run in runs):
            return False
        planned = [self._run_together(run) for run in runs if len(run) > 2]
        if any(p is None for p in planned):
            return False
        for nodes, stepped in planned:  # type: ignore[misc]
            self.groups.append(nodes)  # (all but the last step without `update()`)
            shown = ", ".join(f"`{o}`" for o in stepped)
            self.plan.notes.append(
                f"behaviour change: the losses of {shown} are scaled one after the other and "
                f"stepped together (line {self.line(nodes[0])}): `scaler.step` for each and "
                "one `update()` after the last (PyTorch's recipe for several optimizers); apex "
                "updated its one scale as each `scale_loss` exited, so an overflow in one loss "
                "halved the scale the next was scaled with (two overflows halved it twice, "
                "GradScaler halves once); each optimizer's step is still skipped when its own "
                "gradients overflow"
            )
        return True

    def _run_together(self, run: list) -> tuple[list, list[str]] | None:
        """One run of ``_stepped_together``: each scaled optimizer steps once after the scales,
        in one block, no graph kept for the next backward. Its steps and optimizers."""
        count = sum(kind == "scale" for _, kind, _, _ in run)
        scaled = [opts for _, kind, opts, _ in run if kind == "scale"]
        stepped = [opts[0] for _, kind, opts, _ in run if kind == "step"]
        if any(len(opts) != 1 for opts in scaled) or len({o[0] for o in scaled}) != count:
            return None
        if set(stepped) != {o[0] for o in scaled} or len(set(stepped)) != count:
            return None
        withs = [node for _, kind, _, node in run if kind == "scale"]
        if any(
            isinstance(n, cst.Arg) and n.keyword is not None and n.keyword.value == "retain_graph"
            for w in withs[:-1]
            for n in self._subtree(w)
        ):  # a graph the next backward goes through again: apex left the gradients that
            return None  # backward adds to the first optimizer's parameters scaled
        nodes = [node for _, kind, _, node in run if kind == "step"]
        if len({id(self.parent(n)) for n in nodes}) != 1:
            return None
        return nodes, stepped


def _pairs(target: cst.BaseExpression, value: cst.BaseExpression) -> list[tuple]:
    """What an assignment binds to what: ``a = x``, and ``a, b = x, y`` element-wise."""
    if isinstance(target, cst.Tuple | cst.List) and isinstance(value, cst.Tuple | cst.List):
        if len(target.elements) == len(value.elements):
            return [
                (t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)
            ]
        return []
    return [(target, value)]


def _never_bound(tree: ast.Module, name: str) -> bool:
    """The module binds ``name`` nowhere (assignments, parameters, imports, definitions) and
    it is no builtin; a star import may bind anything."""
    if hasattr(builtins, name):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.alias) and node.name == "*":
            return False
        bound = (
            {node.id}
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load)
            else {node.arg}
            if isinstance(node, ast.arg)
            else {node.asname or node.name.partition(".")[0]}
            if isinstance(node, ast.alias)
            else set(node.names)
            if isinstance(node, ast.Global | ast.Nonlocal)
            else {getattr(node, "name", None)}
            if isinstance(
                node,
                ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.ExceptHandler
                | ast.MatchAs | ast.MatchStar,
            )
            else set()
        )  # fmt: skip
        if name in bound:
            return False
    return True


def _terms(text: str, op: type[ast.boolop]) -> list[str]:
    """The operands of ``text``'s top-level ``and`` (``or``), nested ones opened, each as
    ``ast.unparse`` writes it (``bool(x)``, the planner's wrapper of a switch, is ``x``)."""
    node = ast.parse(f"({text})", mode="eval").body
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "bool"
        and len(node.args) == 1
    ):
        node = node.args[0]
    return [ast.unparse(v) for v in _flat(node, op)]


def _flat(node: ast.expr, op: type[ast.boolop]) -> list[ast.expr]:
    """The operands of ``node``'s ``op``, a parenthesised one of the same kind opened:
    ``(a and b) and c`` holds ``a`` as surely as ``a and b and c`` does."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, op):
        return [t for v in node.values for t in _flat(v, op)]
    return [node]


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


def _root(node: ast.expr) -> str | None:
    """The name a store through attributes and subscripts writes into (``cfg["amp"]``: ``cfg``)."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _names_in(term: str) -> set[str]:
    """The names a term of a test reads (all of them, where it does not parse)."""
    try:
        return {n.id for n in ast.walk(ast.parse(term, mode="eval")) if isinstance(n, ast.Name)}
    except SyntaxError:
        return {term}


def _holds(value: str, on: set[str]) -> bool:
    """``value`` is a term of ``on``, or a conjunction of such terms (the switch itself:
    `args.fp16 and not args.cpu`, the 62nd review's d01)."""
    return value in on or set(_terms(value, ast.And)) <= on
