"""Plain backwards beside the scaled one: a call of code that runs one (its gradients reach the
step divided by the scale under GradScaler, where apex had kept them apart), a backward in the
other branch of the switch, native AMP's own GradScaler beside apex, and the backwards that
cannot be scaled where they are (a loss stepped by several optimizers in turn)."""

from __future__ import annotations

import ast
import builtins
import os

import libcst as cst

from ampmigrate.apex.common import (
    Loop,
    _argument,
    _code,
    _is_call_of,
    _Setup,
    _statements,
    is_path,
)
from ampmigrate.apex.step import _group

_EXITS = (cst.Continue, cst.Return, cst.Raise, cst.Break)


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


class Backwards:
    """Mixed into ``_Planner`` after ``Step``."""

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
                cleared = (
                    self._cleared_next_time(node, function, opt, setup.models, withs)
                    if other is not None
                    else None
                )
                if cleared is not None:  # (TTS's stopnet: stepped plainly by its own optimizer)
                    self.plan.notes.append(
                        f"`{_code(self.module, call)}` (line {self.line(node)}) stays plain: "
                        f"`{other}` steps its gradients plainly, as under apex, and "
                        f"`{_code(self.module, cleared.body[0].value)}` (line "
                        f"{self.line(cleared)}) clears those that reach `{opt}`'s parameters "
                        "before its next scaled step"
                    )
                    enabled = self._enabled_at(setup, function, node)
                    if enabled is not False:  # its loss is computed in a region too: apex O1
                        self.requests.append((node, call.func.value, function, enabled))
                    continue
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
        loop = self._stepping_loop(node, steps)
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

    def _stepping_loop(self, node: cst.CSTNode, steps: list) -> cst.CSTNode | None:
        """The iteration that steps: the innermost loop around ``node`` holding one of ``steps``
        (an inner loop of adversarial backwards is part of one step)."""
        return next(
            (a for a in self.ancestors(node)
             if isinstance(a, Loop) and any(self.within(s, a) for s in steps)),
            None,
        )  # fmt: skip

    def _cleared_next_time(
        self, node, function, opt: str, models: set[str], withs: list
    ) -> cst.CSTNode | None:
        """A plain backward after ``opt``'s last step of its iteration (the next step, another
        optimizer's, is plain): the ``<opt or model>.zero_grad()`` statement of the loop body
        (or of the function, called once per step) that runs in every iteration before its
        scaled backwards and steps, or after this backward, so gradients this backward leaves
        on ``opt``'s parameters never reach its scaled step. None: no such statement."""
        steps = self.steps.get((id(function), opt), [])
        loop = self._stepping_loop(node, steps)
        home = loop if loop is not None else function
        mine = [s for s in steps if self.within(s, home)]
        scaled = [w for w in withs if self.within(w, home)]
        if not mine or any(self.order[id(s)] > self.order[id(node)] for s in mine):
            return None
        first = min(self.order[id(n)] for n in (*mine, *scaled))
        for statement in _statements(home.body) or []:
            # before the iteration's scaled work, or after this backward (the 70th review's
            # p37: `optimizer.zero_grad()` closing the iteration)
            if (
                first <= self.order[id(statement)]
                and not self.order[id(statement)] > self.order[id(node)]
            ):
                continue
            small = statement.body if isinstance(statement, cst.SimpleStatementLine) else ()
            call = small[0].value if len(small) == 1 and isinstance(small[0], cst.Expr) else None
            if (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "zero_grad"
                and _code(self.module, call.func.value) in {opt, *models}
            ):
                return statement
        return None

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
