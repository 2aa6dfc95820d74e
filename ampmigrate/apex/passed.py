"""apex's module handed to a function as an argument: ``train(model, optimizer, amp)`` where
``train`` calls ``amp_handle.scale_loss(...)``, or ``restart_from_checkpoint(path, amp=apex.amp)``
for a helper that restores the state of whatever it is given. The GradScaler takes the module's
place everywhere else, so it is handed there instead, where what the function does with it has a
GradScaler form.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import libcst as cst

from ampmigrate.apex.common import _code, _Setup
from ampmigrate.apex.links import keeps_state_only, users_on_disk
from ampmigrate.apex.verdict import SUPPORTED, used_as_value


@dataclass
class _Handed:
    """One argument that hands apex's module over, and what it becomes."""

    node: cst.CSTNode  # the `amp` expression
    arg: cst.Arg
    call: cst.Call
    keyword: str | None  # the keyword it is passed under from now on (None: as it was)


class PassedHandles:
    """The passed-handle stage of ``_Planner`` (mixed into it)."""

    def _refuse_passed(self, why: str | None) -> None:
        for node in self.passed:
            self._not_handed(node, why)

    def _not_handed(self, node: cst.CSTNode, why: str | None) -> None:
        call = self.parent(self.parent(node))
        self.problem(
            node, used_as_value(_code(self.module, node), _code(self.module, call.func), why)
        )

    def _through_params(self, setup: _Setup, calls: dict[str, list[cst.Call]]) -> set[cst.Call]:
        """Plan each function given apex's module: the calls it makes through its parameter
        become the GradScaler's (added to ``calls``); the arguments are handed the GradScaler
        once it is known how each call site reaches it (``_hand_scaler``). The calls planned;
        ``passed`` keeps the arguments refused."""
        planned: set[cst.Call] = set()
        functions: dict[int, str | None] = {}  # why a function cannot take it (None: it can)
        refused = []
        for node in self.passed:
            arg, call = self.parent(node), self.parent(self.parent(node))
            why = self._handed(setup, node, arg, call, calls, planned, functions)
            if why is not None:
                refused.append(node)
                self._not_handed(node, why)
        self.passed = refused
        return planned

    def _handed(self, setup, node, arg, call, calls, planned, functions) -> str | None:
        """Why ``call`` cannot be handed the GradScaler for ``node`` (None: it is planned)."""
        if self.order[id(call)] < self.order[id(setup.statement)]:
            return "it is called before `amp.initialize`, where there is no GradScaler yet"
        function = self._local_function(call.func)
        parameter = self._receiver(function, call, arg) if function is not None else None
        if parameter is None and arg.keyword is not None:
            return self._state_keeper(node, arg, call)
        if function is None:
            return "it is not a function of this file called by its name"
        if parameter is None:
            return f"no parameter of `{function.name.value}` receives it"
        key = id(function)
        if key not in functions:
            functions[key] = self._takes_scaler(function, parameter, calls, planned)
        if functions[key] is not None:
            return functions[key]
        now = self.stored_access[id(function)]
        renamed = now != parameter.name.value and arg.keyword is not None
        self.handed.append(_Handed(node, arg, call, now if renamed else None))
        return None

    def _local_function(self, func: cst.BaseExpression) -> cst.FunctionDef | None:
        """The module-level function of this file that ``func`` names (None: not one)."""
        if not isinstance(func, cst.Name) or self.qualified(func) != {func.value}:
            return None
        found = [
            f
            for f in self.module.body
            if isinstance(f, cst.FunctionDef) and f.name.value == func.value
        ]
        return found[0] if len(found) == 1 else None

    def _receiver(
        self, function: cst.FunctionDef, call: cst.Call, arg: cst.Arg
    ) -> cst.Param | None:
        """The parameter of ``function`` that ``arg`` of ``call`` fills (None: none by name)."""
        params = function.params
        if arg.keyword is not None:
            return next(
                (p for p in (*params.params, *params.kwonly_params)
                 if p.name.value == arg.keyword.value),
                None,
            )  # fmt: skip
        before = call.args[: call.args.index(arg)]
        if any(a.keyword is not None or a.star for a in before):
            return None
        positional = [*params.posonly_params, *params.params]
        return positional[len(before)] if len(before) < len(positional) else None

    def _takes_scaler(self, function, parameter, calls, planned) -> str | None:
        """Why ``function`` cannot take the GradScaler through ``parameter`` (None: it does;
        its calls through the parameter are planned, and the parameter takes the scaler's
        name where nothing in the function has it)."""
        name, taken = parameter.name.value, function.name.value
        through: list[cst.Call] = []
        names: set[str] = set()
        for node in self._subtree(function):
            if not isinstance(node, cst.Name):
                continue
            names.add(node.value)
            if node.value != name or node is parameter.name:
                continue
            parent = self.parent(node)
            if (isinstance(parent, cst.Attribute) and parent.attr is node) or (
                isinstance(parent, cst.Arg) and parent.keyword is node
            ):
                continue
            holder = self.parent(parent)
            if (
                isinstance(parent, cst.Attribute)
                and parent.value is node
                and isinstance(holder, cst.Call)
                and holder.func is parent
                and parent.attr.value in SUPPORTED - {"initialize"}
            ):
                through.append(holder)
                continue
            return f"`{taken}` uses `{name}` at line {self.line(node)} other than to call apex"
        given = {id(n) for n in self.passed}
        for ref in self._references(taken):
            call = self.parent(ref)
            if not (isinstance(call, cst.Call) and call.func is ref):
                return f"`{taken}` is used at line {self.line(ref)} other than by a call"
            arg = next(
                (a for a in call.args if self._receiver(function, call, a) is parameter), None
            )
            if arg is None or id(arg.value) not in given:
                return f"`{taken}` is called at line {self.line(call)} without apex's module"
        if self.path is not None:
            outside = users_on_disk(self.path, [taken])
            if outside is None:
                return "there are too many files around it to find who calls it"
            if outside:
                other, line, _ = outside[0]
                shown = os.path.relpath(other, os.path.dirname(os.path.abspath(self.path)))
                return f"`{taken}` is also used at {shown}:{line}"
        new = name if name == self.name or self.name in names else self.name
        if new != name:
            self.plan.edits[parameter.name] = lambda _u: cst.Name(new)
        for use in through:
            calls.setdefault(use.func.attr.value, []).append(use)
            planned.add(use)
            self.stored_access[id(self.function(use))] = new
        self.stored_access[id(function)] = new
        renamed = f" (its parameter `{name}` is now `{new}`)" if new != name else ""
        self.plan.notes.append(
            f"`{taken}` is handed the GradScaler where it was handed apex's module{renamed}; "
            "its calls through it become the GradScaler's"
        )
        return None

    def _state_keeper(self, node: cst.CSTNode, arg: cst.Arg, call: cst.Call) -> str | None:
        """``helper(..., amp=apex.amp)`` where ``helper`` only saves or restores the state of
        what its ``**`` keywords give it: it is handed the GradScaler under the scaler's own
        key, which is where this rewrite keeps the scaler's state."""
        keyword = arg.keyword.value
        qualified = sorted(self.qualified(call.func))
        if len(qualified) != 1:
            shown = _code(self.module, call.func)
            if not qualified:
                return f"`{shown}` is bound by no import or definition of this file"
            return f"`{shown}` may name more than one function here"
        if any(a.keyword is not None and a.keyword.value == self.name for a in call.args):
            return f"it is also given `{self.name}=`"
        if qualified[0].startswith("builtins."):  # `dict(amp=amp)`: a value kept, used later
            return (
                f"it is kept in what `{qualified[0].removeprefix('builtins.')}(...)` builds, "
                "whose later uses the rewrite does not follow"
            )
        why = keeps_state_only(self.path, self.text, qualified[0], keyword)
        if why is not None:
            return why
        self.handed.append(_Handed(node, arg, call, self.name))
        self.plan.notes.append(
            f"`{_code(self.module, call.func)}` only saves or restores the state of what it is "
            f'given: it is given the GradScaler as `{self.name}=` (the checkpoint key "'
            f"{self.name}\") where it was given apex's module as `{keyword}=`"
        )
        return None

    def _hand_scaler(self) -> None:
        """Hand each planned call the GradScaler, as its call site reaches it."""
        for handed in self.handed:
            access = self.access(handed.call)
            if access is None:
                self._not_handed(handed.node, "the GradScaler does not reach this call")
                continue
            value = cst.parse_expression(access)
            self.plan.edits[handed.node] = lambda _u, v=value: v
            if handed.keyword is not None:
                self.plan.edits[handed.arg.keyword] = lambda _u, k=handed.keyword: cst.Name(k)
