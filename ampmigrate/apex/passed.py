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

from ampmigrate.apex.common import _code, _Setup, initialize_arguments, none_comparison
from ampmigrate.apex.statelinks import keeps_state_only
from ampmigrate.apex.users import users_on_disk
from ampmigrate.apex.verdict import APEX, SUPPORTED, used_as_value


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
        self.followed |= planned  # (`amp_handle.master_params(opt)`: the rewrite's own, as the
        # global `amp.master_params` is; the 66th review's TTS `check_update`)
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
            functions[key] = self._takes_scaler(function, parameter, calls, planned, setup)
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

    def _takes_scaler(self, function, parameter, calls, planned, setup) -> str | None:
        """Why ``function`` cannot take the GradScaler through ``parameter`` (None: it does;
        its calls through the parameter are planned, and the parameter takes the scaler's
        name where nothing in the function has it). A test of the parameter (``if amp:``,
        ``amp is not None``) is the scaler's ``is_enabled()`` where every call hands it a
        module that is None exactly where the GradScaler is off (``_switched_only``)."""
        name, taken = parameter.name.value, function.name.value
        through: list[cst.Call] = []
        tests: list[tuple[cst.CSTNode, bool]] = []
        names: set[str] = set()
        found = self.initializer
        planned_here = set()  # the initialize and its `if amp:`: _initializer_setup's
        if found is not None and found.function is function:
            planned_here.add(id(found.init.func.value))
            for test in found.tests:
                planned_here |= {id(n) for n in self._subtree(test.test)}
        for node in self._subtree(function):
            if not isinstance(node, cst.Name):
                continue
            names.add(node.value)
            if node.value != name or node is parameter.name or id(node) in planned_here:
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
            tested = _tested(node, parent, holder)
            if tested is not None:
                tests.append(tested)
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
        if tests:
            why = self._switched_only(function, parameter, setup)
            if why is not None:
                line = self.line(tests[0][0])
                return f"`{taken}` tests `{name}` at line {line}, and {why}"
        new = name if name == self.name or self.name in names else self.name
        if new != name:
            self.plan.edits[parameter.name] = lambda _u: cst.Name(new)
        for expr, on in tests:
            test = cst.parse_expression(f"{'' if on else 'not '}{new}.is_enabled()")
            self.plan.edits[expr] = lambda _u, t=test: t
            self.handle_tests.add(id(expr))
        for use in through:
            calls.setdefault(use.func.attr.value, []).append(use)
            planned.add(use)
            self.stored_access[id(self.function(use))] = new
        self.stored_access[id(function)] = new
        renamed = f" (its parameter `{name}` is now `{new}`)" if new != name else ""
        tested = (
            f", and its tests of it (None where apex was off) ask `{new}.is_enabled()`"
            if tests
            else ""
        )
        self.plan.notes.append(
            f"`{taken}` is handed the GradScaler where it was handed apex's module{renamed}; "
            f"its calls through it become the GradScaler's{tested}"
        )
        return None

    def _switched_by(self, setup: _Setup, switch: cst.If) -> bool:
        """The GradScaler is on exactly where ``switch`` (``if COND: from apex import amp``)
        held: ``initialize`` is in its body and has no ``enabled=`` of its own."""
        statement = setup.statement
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        call = getattr(small, "value", None)
        if not isinstance(call, cst.Call) or not self.within(statement, switch.body):
            return False
        return "enabled" not in initialize_arguments(call)[0]

    def _switch_reads(self, setup: _Setup) -> None:
        """Each test of ``amp`` bound by a switch whose test cannot be read again (``if level ==
        "O1": from apex import amp ... else: amp = None``, then ``if amp is not None:``, the 70th
        review's p11): it asks the GradScaler, on exactly where the switch held; refused where
        the GradScaler is not switched so, or cannot be reached there."""
        for expr, on, switch in self.switch_reads:
            access = self.access(expr) if self._switched_by(setup, switch) else None
            if access is None:
                self.problem(
                    expr,
                    f"`{_code(self.module, expr)}` tests `amp`, which `if "
                    f"{_code(self.module, switch.test)}:` (line {self.line(switch)}) binds to "
                    "apex's module and its `else:` to None; that test is not one the rewrite "
                    "can read again here, nor is the GradScaler (on where it held) reachable "
                    "from here: test the condition itself, then migrate",
                )
                continue
            test = cst.parse_expression(f"{'' if on else 'not '}{access}.is_enabled()")
            self.plan.edits[expr] = lambda _u, t=test: t
            self.handle_tests.add(id(expr))

    def _switched_only(self, function, parameter, setup) -> str | None:
        """Why a test of ``parameter`` is not the GradScaler's ``is_enabled()`` (None: it
        is): every argument handed to it is apex's module where a switch holds and None
        elsewhere (``if COND: from apex import amp ... else: amp = None``), the switch that
        ``amp.initialize`` runs under (in its body), which then enables the GradScaler and
        nothing else does (no ``enabled=`` of its own)."""
        for node in self.passed:
            arg, call = self.parent(node), self.parent(self.parent(node))
            if self._local_function(call.func) is not function:
                continue
            if self._receiver(function, call, arg) is not parameter:
                continue
            switch = self._switch_of(node, readable=False)
            if switch is None:
                return (
                    f"`{_code(self.module, node)}` handed to it at line {self.line(node)} is not "
                    "None exactly where apex is off (bound by `if COND: from apex import amp` "
                    "whose `else:` sets it to None)"
                )
            if not self._switched_by(setup, switch[0]):
                return (
                    f"the switch that binds `{_code(self.module, node)}` (`if {switch[1]}:`) is "
                    "not the one test that turns the GradScaler on"
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


@dataclass
class _Initializer:
    """A function that initializes apex through its parameter (unilm's s2s-ft:
    ``prepare_for_training(args, model, ckpt, amp)`` runs ``if amp: model, optimizer =
    amp.initialize(...)``), called once, by a function of this file that hands it apex's
    module (or None, with mixed precision off)."""

    function: cst.FunctionDef
    parameter: cst.Param
    init: cst.Call
    call: cst.Call  # the one call of ``function``, in ``caller``
    caller: cst.FunctionDef
    arg: cst.Arg  # what hands the module over at ``call``
    test: cst.If | None = None  # the `if amp:` around ``init`` (set by _initializer_setup)
    tests: tuple[cst.If, ...] = ()  # every `if amp:` of the function (the same)


class Initializers:
    """apex's module handed to the function that initializes it (mixed into ``_Planner``):
    the GradScaler is made in the caller, right before the call, and handed over in the
    module's place, where ``PassedHandles`` plans the function's other calls through it."""

    def _initializer(self) -> _Initializer | None:
        """The shape, found on the file's nodes (None: not this shape, the usual refusal)."""
        found = [
            n
            for n in self.nodes
            if isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value == "initialize"
            and isinstance(n.func.value, cst.Name)
        ]
        through = []
        for init in found:
            function = self.function(init)
            if not isinstance(function, cst.FunctionDef) or self.parent(function) is not (
                self.module
            ):
                continue
            params = [*function.params.posonly_params, *function.params.params]
            parameter = next((p for p in params if p.name.value == init.func.value.value), None)
            if parameter is not None:
                through.append((init, function, parameter))
        if len(through) != 1:
            return None
        init, function, parameter = through[0]
        references = list(self._references(function.name.value))
        if len(references) != 1:
            return None
        call = self.parent(references[0])
        caller = self.function(call)
        if not (
            isinstance(call, cst.Call)
            and call.func is references[0]
            and isinstance(caller, cst.FunctionDef)
            and caller is not function
            and self.parent(caller) is self.module
        ):
            return None
        arg = next((a for a in call.args if self._receiver(function, call, a) is parameter), None)
        if not (
            arg is not None
            and isinstance(arg.value, cst.Name)
            and APEX in self.qualified(arg.value)
        ):
            return None
        return _Initializer(function, parameter, init, call, caller, arg)

    def _initializer_setup(self, found: _Initializer) -> _Setup | None:
        """The GradScaler made before the call, enabled where the caller's handle was apex's
        module (the test of the ``if`` that imported it, ``None`` in its ``else:``) and the
        level is O1; the ``initialize`` goes, each ``if amp:`` of the function is that test
        (or the scaler's); the models are what the call binds where the function returns the
        initialized ones. None: refused (said here)."""
        init, function, caller = found.init, found.function, found.caller
        taken = function.name.value
        statement = self.statement(found.call)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        located = self.block_of(statement)
        if not (
            isinstance(small, cst.Assign)
            and len(statement.body) == 1
            and small.value is found.call
            and located is not None
            and located[0] is caller.body
        ):
            self.problem(
                found.call,
                f"`{taken}(...)`, which initializes amp through its parameter "
                f"`{found.parameter.name.value}`, is not an assignment of its own in the body "
                f"of `{caller.name.value}`: the GradScaler made before it would not reach every "
                "later use; call it as a statement of the function's body, by hand",
            )
            return None
        inner = self.statement(init)
        lone = inner.body[0] if isinstance(inner, cst.SimpleStatementLine) else None
        args, _ = initialize_arguments(init)
        models, optimizer = args.get("models"), args.get("optimizers")
        extra = sorted(set(args) - {"models", "optimizers", "opt_level"})
        targets = (
            [e.value for e in lone.targets[0].target.elements]
            if isinstance(lone, cst.Assign)
            and len(lone.targets) == 1
            and isinstance(lone.targets[0].target, cst.Tuple)
            else []
        )
        if (
            lone is None
            or extra
            or any(a.star for a in init.args)
            or not isinstance(models, cst.Name)
            or not isinstance(optimizer, cst.Name)
            or len(inner.body) != 1
            or lone.value is not init
            or [_code(self.module, t) for t in targets] != [models.value, optimizer.value]
        ):
            shown = (
                f"`{', '.join(extra)}=`" if extra else "anything but its own model and optimizer"
            )
            self.problem(
                init,
                f"`{taken}` initializes amp through its parameter with {shown} (line "
                f"{self.line(init)}): the rewrite follows only `model, optimizer = "
                f"{found.parameter.name.value}.initialize(model, optimizer, opt_level=...)` "
                "there; migrate it by hand",
            )
            return None
        holder = self.parent(self.parent(inner))
        if isinstance(holder, cst.If):
            test = holder.test
            if not (
                self._tests_alone(test, found.parameter.name.value)
                and holder.orelse is None
                and self.parent(self.parent(holder)) is function
            ):
                self.problem(
                    init,
                    f"`{taken}` initializes amp under `if {_code(self.module, test)}:`, not "
                    f"under a test of its parameter alone: migrate it by hand",
                )
                return None
            found.test = holder
        elif holder is not function:
            self.problem(init, f"`{taken}` initializes amp in a block other than an `if`")
            return None
        found.tests = tuple(
            n for n in self._subtree(function.body)
            if isinstance(n, cst.If) and self.function(n) is function
            and self._tests_alone(n.test, found.parameter.name.value)
        )  # fmt: skip
        level = args.get("opt_level")
        switch = None
        if level is not None:
            level = self._constant(level, init)
        if isinstance(level, cst.SimpleString) and level.evaluated_value != "O1":
            self.problem(
                init,
                f"opt_level {level.evaluated_value} in `{taken}`: only O1 (autocast + "
                "GradScaler) exists in torch.amp, and the rewrite through a parameter takes "
                "no other",
            )
            return None
        if level is not None and not isinstance(level, cst.SimpleString):
            blockers = len(self.plan.problems)
            switch = self._level_switch(level, init)
            if switch is None and len(self.plan.problems) == blockers:
                switch = self._level_choices(level, init)
            if switch is None:
                return None
            if switch is True:
                switch = None
        if switch is not None and not self._same_in_caller(switch, found):
            self.problem(
                init,
                f"the level test `{_code(self.module, switch)}` reads names of `{taken}` that "
                f"`{caller.name.value}` does not pass under the same names: the GradScaler made "
                "there cannot test it; migrate it by hand",
            )
            return None
        condition = self._handle_condition(found)
        if condition is False:
            return None
        handed = condition  # where the module was handed over (None: always)
        if switch is not None:
            level_test = _code(self.module, switch)
            condition = f"({condition}) and ({level_test})" if condition else level_test
        returned = self._returned(found, models.value)
        if returned is None:
            return None
        name = self.free_name("scaler")
        if name is None:
            self.problem(init, "no free name for the GradScaler")
            return None
        self.name = name
        enabled = f", enabled={condition}" if condition else ""
        line = cst.parse_statement(f'{name} = torch.amp.GradScaler("cuda"{enabled})\n')
        self.plan.edits[statement] = lambda u: cst.FlattenSentinel(
            [line.with_changes(leading_lines=statement.leading_lines),
             u.with_changes(leading_lines=())]
        )  # fmt: skip
        self._remove_statement(inner)
        # each `if amp:` of the function is the caller's test where the function reads it
        # under the same names (s2s-ft: `args` is passed as `args`); else the scaler's own,
        # which is that test only where no level decides too
        flag = handed is not None and self._same_in_caller(cst.parse_expression(handed), found)
        kept = [t for t in found.tests if t not in self.removed]
        for test in kept:
            self.plan.edits[test.test] = lambda _u: cst.parse_expression(
                handed if flag else f"{self.stored_access.get(id(function), name)}.is_enabled()"
            )
        others = [
            s for t in kept for s in t.body.body
            if s is not inner and found.parameter.name.value not in self.facts(s).used
        ]  # fmt: skip
        if others and switch is not None and not flag:
            self.problem(
                others[0],
                f"an `if {found.parameter.name.value}:` of `{taken}` also runs this "
                "statement, which the GradScaler's test (`is_enabled()`, off where the level "
                "is O0) would skip where apex ran it: migrate it by hand",
            )
            return None
        tested = f"`{handed}`" if flag else "the GradScaler's `is_enabled()`"
        self.plan.notes.append(
            f"`{taken}` initialized amp through its parameter `{found.parameter.name.value}` "
            f"(line {self.line(init)}), which `{caller.name.value}` hands apex's module or "
            f"None: the GradScaler is made before that call (line {self.line(found.call)})"
            + (f", enabled where `{condition}`" if condition else "")
            + ", and the `initialize` goes"
            + (f"; its `if {found.parameter.name.value}:` tests {tested}" if kept else "")
        )
        return _Setup(statement, caller, returned, condition)

    def _tests_alone(self, test: cst.BaseExpression, name: str) -> bool:
        """``test`` is ``name`` or ``name is not None``."""
        tested = test.left if isinstance(test, cst.Comparison) else test
        return (
            isinstance(tested, cst.Name)
            and tested.value == name
            and (
                test is tested
                or (
                    len(test.comparisons) == 1
                    and isinstance(test.comparisons[0].operator, cst.IsNot)
                    and _code(self.module, test.comparisons[0].comparator) == "None"
                )
            )
        )

    def _initializer_resumed(self) -> cst.Call | None:
        """The handed initialize, where the call binds its optimizer under the same name
        (what ``_resume_state`` follows from it); None: no such initialize."""
        found = self.initializer
        if found is None:
            return None
        optimizer = initialize_arguments(found.init)[0].get("optimizers")
        spelled = _code(self.module, optimizer) if optimizer is not None else None
        returned = self._returned(found, spelled, quiet=True) if spelled else None
        return found.init if returned == {spelled} else None

    def _same_in_caller(self, expression: cst.BaseExpression, found: _Initializer) -> bool:
        """Every name ``expression`` reads means the same in the caller: a parameter of the
        function that the call fills with the caller's name of that spelling, or a name
        neither function binds (a module global)."""
        params = {p.name.value: p for p in self._all_params(found.function)}
        bound = self._bound_names(found.function) | self._bound_names(found.caller)
        for node in self._subtree(expression):
            if not isinstance(node, cst.Name):
                continue
            parent = self.parent(node)
            if (isinstance(parent, cst.Attribute) and parent.attr is node) or (
                isinstance(parent, cst.Arg) and parent.keyword is node
            ):
                continue
            param = params.get(node.value)
            if param is None:
                if node.value in bound:
                    return False
                continue
            call = found.call
            given = next(
                (a for a in call.args if self._receiver(found.function, call, a) is param), None
            )
            if not (
                given is not None
                and isinstance(given.value, cst.Name)
                and given.value.value == node.value
            ):
                return False
        return True

    def _all_params(self, function: cst.FunctionDef) -> list[cst.Param]:
        p = function.params
        return [*p.posonly_params, *p.params, *p.kwonly_params]

    def _bound_names(self, function: cst.FunctionDef) -> set[str]:
        """The names ``function`` binds: its parameters and every name it stores to."""
        bound = {p.name.value for p in self._all_params(function)}
        for node in self._subtree(function.body):
            targets = cst.AssignTarget | cst.AugAssign | cst.AnnAssign | cst.For | cst.CompFor
            if isinstance(node, targets):
                bound |= {n.value for n in self._subtree(node.target) if isinstance(n, cst.Name)}
            elif isinstance(node, cst.AsName) and isinstance(node.name, cst.Name):
                bound.add(node.name.value)
            elif isinstance(node, cst.ImportAlias) and node.asname is None:
                bound.add(_code(self.module, node.name).split(".")[0])
        return bound

    def _handle_condition(self, found: _Initializer) -> str | bool | None:
        """Where the caller's handle is apex's module: the switch that imports it
        (``_switch_of``); None: imported at module level (always). False: neither (said)."""
        handle = found.arg.value
        if not any(
            isinstance(n, cst.ImportFrom | cst.Import) and handle.value in self.facts(n).used
            for n in self._subtree(found.caller.body)
        ):
            return None
        switch = self._switch_of(handle)
        if switch is not None:
            return switch[1]
        self.problem(
            found.arg,
            f"`{found.caller.name.value}` binds `{handle.value}` other than by importing apex "
            "under an `if` of its body (a flag read without a call) whose `else:` sets it to "
            f"None, so where it hands `{found.function.name.value}` apex's module is not known: "
            "migrate it by hand",
        )
        return False

    def _returned(self, found: _Initializer, model: str, quiet: bool = False) -> set[str] | None:
        """What the call binds where the function returns ``model`` (every ``return`` of it a
        tuple of the same names). None: refused (said here, unless ``quiet``)."""
        returns = [
            n for n in self._subtree(found.function.body)
            if isinstance(n, cst.Return) and self.function(n) is found.function
        ]  # fmt: skip
        shapes = {
            tuple(_code(self.module, e.value) for e in r.value.elements)
            if isinstance(r.value, cst.Tuple)
            else (_code(self.module, r.value),)
            if r.value is not None
            else ()
            for r in returns
        }
        target = self.statement(found.call).body[0].targets[0].target
        bound = (
            [_code(self.module, e.value) for e in target.elements]
            if isinstance(target, cst.Tuple | cst.List)
            else [_code(self.module, target)]
        )
        shape = next(iter(shapes)) if len(shapes) == 1 else ()
        if model not in shape or len(shape) != len(bound):
            if quiet:
                return None
            self.problem(
                found.call,
                f"`{found.function.name.value}` does not return the model it initializes "
                f"(`{model}`) the same way on every path, so which of the names "
                f"`{found.caller.name.value}` binds is the initialized model is not known: "
                "migrate it by hand",
            )
            return None
        return {b for b, r in zip(bound, shape, strict=True) if r == model}


def _tested(
    node: cst.Name, parent: cst.CSTNode, holder: cst.CSTNode | None
) -> tuple[cst.CSTNode, bool] | None:
    """``node`` as a test of whether apex is on: (the expression to replace, True where it
    holds when apex is on): ``x is not None``, ``x is None``, ``if x:``, ``not x``, ``a if x
    else b``, ``while x:``, ``assert x``. None: any other use."""
    if isinstance(parent, cst.Comparison):
        on = none_comparison(parent, node)
        return (parent, on) if on is not None else None
    if (
        isinstance(parent, cst.If | cst.While | cst.IfExp | cst.Assert) and parent.test is node
    ) or (isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not)):
        return node, True
    return None
