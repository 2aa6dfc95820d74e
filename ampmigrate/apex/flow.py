"""Where apex's on-switch flows: a flag set true beside ``amp.initialize`` (``use_amp = True``)
tells other code that apex amp is live. Code in this file that reads it is rewritten with the
plan; code outside the run is not, and a library that receives the flag may call apex itself
(timm's ``CheckpointSaver.save_checkpoint(..., use_amp=use_amp)`` saved ``amp.state_dict()``
and restored it on resume). After the rewrite that code would still call apex, with apex amp
never initialized, and the scaler's state would not be in its checkpoints: the rewrite is
refused, naming each such call."""

from __future__ import annotations

import re

import libcst as cst

from ampmigrate.apex.common import flag_assignment

# the keyword a library's mixed-precision switch goes by (`use_amp=`, `fp16=`, `apex=`)
_PRECISION = re.compile(r"amp|apex|fp16|half|mixed|precision", re.IGNORECASE)
# timm 0.1's `CheckpointSaver` methods that take `use_amp` and then save `amp.state_dict()`
_TIMM_SAVING = frozenset({"save_checkpoint", "save_recovery"})


class SwitchFlow:
    """The planner's check that apex's on-switch stays inside the code being rewritten."""

    def _switch_leaks(self, statement: cst.CSTNode) -> None:
        holder = self.parent(self.parent(statement))
        if not isinstance(holder, cst.If):
            return
        flags = {
            flag[0]
            for line in holder.body.body
            if line is not statement and isinstance(line, cst.SimpleStatementLine)
            for small in line.body
            if (flag := flag_assignment(small)) is not None and flag[1]
        }
        if not flags:
            return
        defined = {
            node.name.value: node
            for node in self.module.body
            if isinstance(node, cst.FunctionDef | cst.ClassDef)
        }
        # the functions of a link are rewritten in the same run, each given the GradScaler
        linked = set(self.link.spellings[0]) if self.role == "caller" and self.link.calls else set()
        carriers = {(id(self.function(statement)), flag) for flag in flags}
        pending = list(carriers)
        reported: set[int] = set()
        while pending:
            scope, _ = pending.pop()
            for call in self.nodes:
                if not isinstance(call, cst.Call) or id(self.function(call)) != scope:
                    continue
                for index, arg in enumerate(call.args):
                    value = arg.value
                    if not (isinstance(value, cst.Name) and (scope, value.value) in carriers):
                        continue
                    callee = (
                        defined.get(call.func.value) if isinstance(call.func, cst.Name) else None
                    )
                    if isinstance(callee, cst.FunctionDef):
                        param = self._receiving(callee, arg, index)
                        if param is not None and (id(callee), param) not in carriers:
                            carriers.add((id(callee), param))
                            pending.append((id(callee), param))
                        continue
                    if (
                        isinstance(callee, cst.ClassDef)
                        or id(call) in reported
                        or self.module.code_for_node(call.func) in linked
                    ):
                        continue  # a class of this file: its code is rewritten with the plan
                    if arg.keyword is None or not _PRECISION.search(arg.keyword.value):
                        continue  # `print(use_amp)`, a log line: not a library's amp switch
                    reported.add(id(call))
                    if self._timm_saver(call, arg):
                        continue
                    self.problem(
                        call,
                        f"`{self.module.code_for_node(call.func)}(...)` is given "
                        f"`{value.value}`, which is true when apex amp is initialized, and is "
                        "defined outside this file: it may call apex amp itself (timm's "
                        "`CheckpointSaver` saves `amp.state_dict()` when `use_amp` is true), "
                        "which the rewrite cannot change; give it the GradScaler's state "
                        "instead, or migrate that code too",
                    )

    def _timm_saver(self, call: cst.Call, arg: cst.Arg) -> bool:
        """``saver.save_checkpoint(..., use_amp=use_amp)`` on timm's ``CheckpointSaver``
        (timm 0.1, imported from ``timm.utils``): given True it saves ``amp.state_dict()``,
        which raises once apex is no longer initialized (or installed); it is given False, and
        its checkpoints hold no loss scale (stated). Only those two methods and that keyword
        of that library: a switch handed to any other code may turn on its own precision."""
        if not (
            isinstance(call.func, cst.Attribute)
            and call.func.attr.value in _TIMM_SAVING
            and arg.keyword.value == "use_amp"
            and self._imports_timm_saver()
        ):
            return False
        self.plan.edits[arg.value] = lambda _u: cst.Name("False")
        if not self.timm_noted:
            self.timm_noted = True
            self.plan.notes.append(
                "behaviour change: timm's `CheckpointSaver` (the library, timm 0.1) is given "
                "`use_amp=False` at its `save_checkpoint`/`save_recovery` calls: given True it "
                "saved `amp.state_dict()`, which raises once apex is not initialized; its "
                "checkpoints now hold no loss scale, so a resume from them restarts the "
                "GradScaler at its initial scale"
            )
        return True

    def _imports_timm_saver(self) -> bool:
        """``CheckpointSaver`` comes from ``timm.utils`` (by name or ``*``) and this file does
        not define one."""
        found = False
        for node in self.nodes:
            if isinstance(node, cst.ClassDef | cst.FunctionDef) and (
                node.name.value == "CheckpointSaver"
            ):
                return False
            if isinstance(node, cst.ImportFrom) and node.module is not None:
                module = self.module.code_for_node(node.module)
                if module not in ("timm.utils", "timm.utils.checkpoint_saver"):
                    continue
                names = node.names
                found = (
                    found
                    or isinstance(names, cst.ImportStar)
                    or any(
                        a.evaluated_name == "CheckpointSaver" and a.asname is None for a in names
                    )
                )
        return found

    def _receiving(self, function: cst.FunctionDef, arg: cst.Arg, index: int) -> str | None:
        """The parameter of ``function`` that ``arg`` (the ``index``-th argument) binds."""
        params = function.params
        if arg.keyword is not None:
            names = [p.name.value for p in [*params.params, *params.kwonly_params]]
            return arg.keyword.value if arg.keyword.value in names else None
        if arg.star:
            return None
        positional = [*params.posonly_params, *params.params]
        return positional[index].name.value if index < len(positional) else None
