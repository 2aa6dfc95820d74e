"""What apex did on overflow and between steps: a step skipped where the scaled gradients
overflowed (the GradScaler skips it too, and says so once), a step taken on apex's outcome,
backwards cleared before the step, accumulation over micro-batches and its note."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import libcst as cst

from ampmigrate.apex.common import (
    Loop,
    _argument,
    _code,
    _is_call_of,
    _statements,
)

# calls whose result is a gradient norm (an overflow makes it inf or nan)
_NORMS = ("clip_grad_norm_", "clip_grad_norm", "get_total_norm", "grad_norm")


class Overflows:
    """Mixed into ``_Planner`` after ``Step``."""

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
