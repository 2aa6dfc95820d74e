"""apex beside native AMP, chosen at run time through two flags on the object.

The Hugging Face 4.x ``Trainer`` and its many copies pick a backend once, in ``__init__``:
``if self.fp16_backend == "amp": self.use_amp = True; self.scaler = GradScaler() else:
self.use_apex = True``, and every later branch asks a flag (``if self.use_apex:
amp.initialize(...)``, ``elif self.use_apex: with amp.scale_loss(...)``, ``amp.master_params(...)
if self.use_apex else model.parameters()``). The native branches already are apex O1's
equivalent, written by the same authors: the migration is to let apex's choice run them. This
mode makes the choice run the native arm, folds every test of the apex flag (now always
false), and is taken only when no apex call is left afterwards; otherwise the O1 planner runs
as usual and says why it refuses.
"""

from __future__ import annotations

import os
import re

import libcst as cst

from ampmigrate.apex.common import _code, initialize_arguments
from ampmigrate.apex.guards import _branch
from ampmigrate.apex.links import _project_files, _read
from ampmigrate.replace import ReplaceNodes


def _self_attribute(node: cst.CSTNode) -> str | None:
    """``self.use_apex`` -> ``use_apex``."""
    if (
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Name)
        and node.value.value == "self"
    ):
        return node.attr.value
    return None


def _truth(node: cst.BaseExpression) -> bool | None:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


class BackendSwitch:
    """The planner's mode for apex chosen beside native AMP by a flag on ``self``."""

    def _backend_switched(self, init: cst.Call) -> str | None:
        """The rewritten module's code, or None (not this mode: nothing planned)."""
        for flag in self._apex_flags(init):
            chosen = self._choice(flag)
            if chosen is None:
                continue
            switch, native, apex = chosen
            code = self._run_native(init, flag, switch, native, apex)
            if code is not None:
                return code
        return None

    def _apex_flags(self, init: cst.Call) -> list[str]:
        """The ``self`` attributes tested by the ``if``s whose body holds ``initialize``."""
        flags: list[str] = []
        for outer in self.ancestors(init):
            if isinstance(outer, cst.If) and self.within(init, outer.body):
                flags += [
                    name
                    for node in self._subtree(outer.test)
                    if (name := _self_attribute(node)) is not None and name not in flags
                ]
        return flags

    def _assignments(self, flag: str) -> list[tuple[cst.CSTNode, bool | None]] | None:
        """Every store into ``self.<flag>`` in the file with its value (None: not a literal
        True/False); None where one is not a plain assignment."""
        found: list[tuple[cst.CSTNode, bool | None]] = []
        for node in self.nodes:
            if isinstance(node, cst.AugAssign | cst.AnnAssign) and (
                _self_attribute(node.target) == flag
            ):
                return None
            if isinstance(node, cst.Assign) and any(
                _self_attribute(t.target) == flag for t in node.targets
            ):
                if len(node.targets) != 1:
                    return None
                found.append((node, _truth(node.value)))
        return found

    def _choice(self, flag: str) -> tuple[cst.If, cst.IndentedBlock, cst.CSTNode] | None:
        """The ``if``/``elif``/``else`` chain that sets the apex flag in one arm and turns
        native AMP on in another (another flag set true, a GradScaler made): (its first
        ``if``, the native arm's block, the apex arm: its ``If`` or ``Else``). None: not that
        shape."""
        stores = self._assignments(flag)
        if not stores or any(value is None for _, value in stores):
            return None
        on = [node for node, value in stores if value]
        if len(on) != 1:
            return None
        statement = self.statement(on[0])
        if self.block_of(statement) is None:
            return None
        block = self.parent(statement)
        arm = self.parent(block)
        if not isinstance(arm, cst.If | cst.Else) or arm.body is not block:
            return None
        # the apex arm only sets the flag (and raises where apex is missing)
        for other in block.body:
            if other is statement:
                continue
            last = other.body.body[-1] if isinstance(other, cst.If) else None
            if not (
                isinstance(other, cst.If)
                and other.orelse is None
                and isinstance(last, cst.SimpleStatementLine)
                and isinstance(last.body[-1], cst.Raise)
            ):  # (a guard that raises where apex is missing, its message built first)
                return None
        root = self.parent(arm) if isinstance(arm, cst.Else) else arm
        while self._is_elif(root):
            root = self.parent(root)
        arms: list[cst.CSTNode] = [root]
        while isinstance(arms[-1], cst.If) and arms[-1].orelse is not None:
            arms.append(arms[-1].orelse)
        for other in arms:
            native = other.body
            if other is arm or not isinstance(native, cst.IndentedBlock):
                continue
            sets_native = any(
                isinstance(n, cst.Assign)
                and len(n.targets) == 1
                and _self_attribute(n.targets[0].target) not in (None, flag)
                and _truth(n.value) is True
                for n in self._subtree(native)
            )
            if sets_native and "GradScaler" in _code(self.module, native):
                return root, native, arm
        return None

    def _set_elsewhere(self, flag: str) -> str | None:
        """Another file of the project that stores anything but False into ``.<flag>`` (a
        subclass turning apex on): the fold would not hold there."""
        if self.path is None:
            return None
        files = _project_files(self.path) or []
        pattern = re.compile(rf"\.{re.escape(flag)}\s*=\s*(?!False\b)[^=\s]".encode())
        here = os.path.abspath(self.path)
        for file in files:
            if os.path.abspath(file) == here:
                continue
            if pattern.search(_read(file)):
                return file
        return None

    def _run_native(
        self,
        init: cst.Call,
        flag: str,
        switch: cst.If,
        native: cst.IndentedBlock,
        apex: cst.If | cst.Else,
    ) -> str | None:
        saved = (dict(self.plan.edits), set(self.removed), list(self.plan.notes))
        problems = list(self.plan.problems)
        if isinstance(switch.orelse, cst.Else) and not self.facts(switch.test).calls:
            # `if <native chosen>: ... else: <apex>`: the native arm's statements alone
            first = native is switch.body
            self.plan.edits[switch] = lambda u: _branch(u, u.body if first else u.orelse.body)
        else:  # an arm of a longer chain: the apex arm does what the native arm does
            self.plan.edits[apex] = lambda u: u.with_changes(body=native)
        reads = [
            node
            for node in self.nodes
            if _self_attribute(node) == flag and not isinstance(self.parent(node), cst.AssignTarget)
        ]
        folded = 0
        for node in reads:
            test = self._test_holding(node)
            if test is not None and not self.facts(test).calls:
                self._fold(node, False, "where apex was the chosen backend")
                folded += 1
        code = self.module.visit(ReplaceNodes(self.plan.edits)).code
        if self._apex_left(code):
            self.plan.edits, self.removed, self.plan.notes = saved
            self.plan.problems = problems
            return None
        # what was reported so far (apex imports and members) is all in the path that goes;
        # the level is what is left to decide
        level, refusals = self._level_of(init)
        chooser = _code(self.module, switch.test)
        if refusals:
            refusals[-1] += (
                f" (the rest would be rewritten: apex is chosen beside native AMP at run time, "
                f"by `self.{flag}`, set by the `if {chooser}:` at line {self.line(switch)}; once "
                "the level is O1, the choice of apex can run the native arm, whose autocast and "
                "GradScaler are apex O1's equivalent)"
            )
        elsewhere = self._set_elsewhere(flag)
        if elsewhere is not None:
            shown = os.path.relpath(elsewhere, os.path.dirname(os.path.abspath(self.path)))
            refusals.append(
                f"line {self.line(switch)}: apex is chosen beside native AMP at run time, by "
                f"`self.{flag}`, and {shown} sets `.{flag}` too (a subclass or another "
                "object choosing apex): letting the choice of apex run the native arm here "
                f"would not reach it; migrate {shown}'s choice with this file's, by hand"
            )
        self.plan.problems = refusals
        self.plan.min_torch = None  # nothing new is written: the native path stays
        if self.plan.problems:
            return code
        self.plan.summary = (
            f"apex.amp beside native AMP, chosen at run time by `self.{flag}`: the choice of "
            "apex runs the native path (autocast + GradScaler), apex O1's equivalent"
        )
        self.plan.notes.append(
            f"in the `if {chooser}:` at line {self.line(switch)}, the arm that chose apex does "
            f"what the native arm does, and `self.{flag}` is never true now: {folded} test(s) "
            "of it were folded and the apex branches went (behaviour change: a run that chose "
            "apex trains with the native path, autocast + GradScaler; one without apex "
            "installed no longer raises; a log line may still name apex"
            + (
                "; checkpoints saved under apex hold its loss-scale format: convert them with "
                "`ampmigrate convert-checkpoint`)"
                if any(
                    isinstance(n, cst.Call)
                    and {"apex.amp.state_dict", "apex.amp.load_state_dict"}
                    & set(self.qualified(n.func))
                    for n in self.nodes
                )
                else ")"
            )
        )
        if level != "O1":
            self.plan.notes.append(level)
        return code

    def _level_of(self, init: cst.Call) -> tuple[str, list[str]]:
        """("O1", []) where ``initialize``'s level is O1 for sure; the setting's note where the
        setting declares it; the blockers where neither."""
        level = initialize_arguments(init)[0].get("opt_level")
        if level is None or (isinstance(level, cst.SimpleString) and level.evaluated_value == "O1"):
            return "O1", []
        blockers = len(self.plan.problems)
        notes = len(self.plan.notes)
        if isinstance(level, cst.SimpleString):
            switch = None
            self.problem(
                init,
                f"opt_level {level.evaluated_value}: only O1 (autocast + GradScaler) exists in "
                "torch.amp; O2/O3 cast the model, which native AMP does not do (switch to O1 "
                "first if that is acceptable)",
            )
        else:
            switch = self._level_switch(level, init)
            if switch is None and len(self.plan.problems) == blockers:
                switch = self._level_choices(level, init)
        del self.plan.notes[notes:]
        refusals = self.plan.problems[blockers:]
        del self.plan.problems[blockers:]
        if refusals or switch is None:
            spelled = _code(self.module, level)
            return "", refusals or [
                f"line {self.line(init)}: opt_level `{spelled}` is not provably O1"
            ]
        if switch is True:
            return "O1", []
        return (
            f"behaviour change: opt_level `{_code(self.module, level)}` is taken as O1, as the "
            f"setting `apex-opt-level` ({self.declared}) declares; a run given another level "
            "now trains on the native path too (mixed precision; O0 was float32, O2/O3 cast "
            "the model)"
        ), []

    def _test_holding(self, node: cst.CSTNode) -> cst.BaseExpression | None:
        """The whole test of the ``if``, ``elif`` or conditional expression that ``node`` is
        (part of, through ``and``/``or``/``not``); None where it is read otherwise."""
        expr: cst.CSTNode = node
        while isinstance(self.parent(expr), cst.BooleanOperation) or (
            isinstance(self.parent(expr), cst.UnaryOperation)
            and isinstance(self.parent(expr).operator, cst.Not)
        ):
            expr = self.parent(expr)
        parent = self.parent(expr)
        if isinstance(parent, cst.If | cst.IfExp) and parent.test is expr:
            return expr
        return None
