"""How the apex handles flow: ``initialize`` again, losses scaled in other functions, dual (apex or
native) setups, sibling modules and the pair of modules (:mod:`ampmigrate.apex.links`), files
without ``initialize``.
"""

from __future__ import annotations

import functools

import libcst as cst

from ampmigrate.apex.common import (
    _argument,
    _code,
    _Setup,
    _statements,
    initialize_arguments,
    is_path,
    without_optimizer,
)
from ampmigrate.apex.linkbase import _listed
from ampmigrate.apex.verdict import (
    APEX,
    fp16_optimizer_built,
    initialized_through_parameter,
    library_trainer,
    never_called,
    never_initialized_here,
    unreached,
    without_initialize,
)


class Handles:
    """The handles stage of ``_Planner`` (mixed into it)."""

    def _reinitialize(self, first: cst.Call, extra: cst.Call) -> None:
        """``a, b = amp.initialize(a, b, <same options>)`` again (allennlp does it before
        ``amp.load_state_dict``, as apex's docs advised), or the same call as a bare statement
        (synthnn's ``load``: O1 returns the objects it is given, so the result it drops is
        them): a no-op for native AMP, so it goes. Any other second initialize blocks."""
        statement = self.statement(extra)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        same = (
            isinstance(small, cst.Assign | cst.Expr)
            and self._same_objects(first, extra)
            and len(statement.body) == 1
            and small.value is extra
            and _code(self.module, extra.with_changes(func=first.func)) == _code(self.module, first)
        )
        if same and isinstance(small, cst.Assign):
            targets = _code(self.module, small.targets[0].target).replace(" ", "").strip("()")
            values = [_code(self.module, a.value) for a in extra.args if not a.keyword][:2]
            same = targets == ",".join(values)
        if same:
            self._remove_statement(statement)
            self.repeated.add(extra)
            elsewhere = self.function(extra) is not self.function(first)
            looped = any(
                isinstance(a, cst.For | cst.While) and self.within(a, self.function(extra))
                for a in self.ancestors(extra)
            )
            if elsewhere or looped:
                function = self._function_name(self.function(extra))
                where = "in a loop" if looped else f"in `{function}`"
                before = (
                    ""
                    if looped
                    else f"; where `{function}` runs before the first `amp.initialize` (line "
                    f"{self.line(first)}) has, or without it, apex's casts were on from that "
                    "line, while the autocast regions follow the GradScaler made in place of "
                    "the first"
                )
                self.plan.notes.append(
                    f"the repeated `amp.initialize` at line {self.line(extra)} ({where}) goes: "
                    "behaviour change: apex made new loss scalers at each `initialize`, so its "
                    "loss scale restarted at 2**16 each time that line ran; the GradScaler "
                    f"keeps its scale{before}"
                )
            return
        if _argument(extra, "optimizers", 1) is None and self.function(extra) is not (
            self.function(first)
        ):  # evaluation only, in another function (a test branch): an autocast region
            before = len(self.plan.problems)
            self._inference_only(extra, extra=True)
            if len(self.plan.problems) == before:
                return
            del self.plan.problems[before:]  # said below, with what the rewrite handles
        given = _argument(extra, "optimizers", 1)
        if given is None or (isinstance(given, cst.List | cst.Tuple) and not given.elements):
            model = _argument(extra, "models", 0)
            shown = f"`{_code(self.module, model)}`" if model is not None else "a model"
            level = _argument(extra, "opt_level", 2)
            if isinstance(level, cst.SimpleString) and level.evaluated_value in ("O2", "O3"):
                self.problem(
                    extra,
                    f"`amp.initialize` is called again, for {shown} without an optimizer at "
                    f"opt_level {level.evaluated_value} (inference in float16: apex cast the "
                    "model itself, which autocast does not do): delete it and call "
                    "`model.half()` with half inputs there, by hand",
                )
                return
            arms = next(
                (a for a in self.ancestors(extra) if isinstance(a, cst.IfExp)
                 and self.within(first, a)),
                None,
            )  # fmt: skip
            why = (
                f"in the other arm of the conditional expression at line {self.line(arms)}"
                " (one of the two runs)"
                if arms is not None
                else "again"
            )
            self.problem(
                extra,
                f"`amp.initialize` is called {why}, for {shown} without an optimizer (a model "
                "apex only casts: an evaluation-only model, an EMA or teacher copy): the "
                "rewrite handles one `initialize` and an evaluation-only one in another "
                "function that rebinds its model and runs it in the same block; delete this one "
                "and run that model's forward under "
                '`torch.amp.autocast("cuda", dtype=torch.float16)`, by hand',
            )
            return
        if self.function(extra) is not self.function(first):
            names = [self._function_name(self.function(c)) for c in (first, extra)]
            self.problem(
                extra,
                f"`amp.initialize` is called in `{names[0]}` and again in `{names[1]}`: the "
                "rewrite handles one training `initialize` per file; give each its own "
                "GradScaler where it initializes, by hand",
            )
            return
        branches = next(
            (h for h in self.ancestors(first) if isinstance(h, cst.If) and h.orelse is not None
             and {self.within(first, h.body), self.within(extra, h.body)} == {True, False}
             and self.within(extra, h)),
            None,
        )  # fmt: skip
        if branches is not None:
            self.problem(
                extra,
                f"`amp.initialize` is called in both branches of the `if` at line "
                f"{self.line(branches)}, so one of them runs: the rewrite places one "
                "`initialize`; make one GradScaler before that `if` (with each branch's options "
                "where they differ) by hand",
            )
            return
        self.problem(
            extra,
            "`amp.initialize` is called more than once: each call replaced apex's loss "
            "scalers, so one loss scale served every optimizer, and one GradScaler does "
            "(`scaler.scale(loss).backward()`, then `scaler.step(o)` and `scaler.update()` at "
            "each step, as apex updated its scale at each `scale_loss` exit); place it by hand",
        )

    def _merged(self, initialize: list[cst.Call]) -> list[cst.Call]:
        """The ``initialize`` calls right after the first, in its block, that initialize other
        models and optimizers with the same options, each rebinding what it is given
        (``[mi], opt_mi = amp.initialize([mi], opt_mi, opt_level="O1")``): apex replaced its
        loss scalers at each call, so one scale served them all, as one ``initialize`` of the
        lists does; they are planned as that one."""
        first = initialize[0]
        located = self.block_of(self.statement(first))
        if located is None or not self._rebinds_own(first):
            return []
        branched = self._branches(initialize)
        if branched is None:
            branched = self._split(initialize)
        if branched is not None:
            return branched
        block, index = located
        options = self._options(first)
        merged: list[cst.Call] = []
        models = {_code(self.module, _argument(first, "models", 0))}
        pending = list(initialize[1:])
        for statement in _statements(block)[index + 1 :]:
            if not pending:
                break
            call = pending[0]
            if self.statement(call) is statement:
                if not self._rebinds_own(call) or self._options(call) != options:
                    break
                merged.append(pending.pop(0))
                models.add(_code(self.module, _argument(call, "models", 0)))
            elif not self._sets_up(statement, models):
                break
        return merged

    def _sets_up(self, statement: cst.CSTNode, models: set[str]) -> bool:
        """A statement between two ``initialize`` calls that only builds the next model and
        optimizer (inpainting's generator, then its discriminator): no backward, step or
        gradient reset, no apex call, no forward of a model initialized before it."""
        if not isinstance(statement, cst.SimpleStatementLine):
            return False
        for node in self._subtree(statement):
            if not isinstance(node, cst.Call):
                continue
            func = _code(self.module, node.func)
            if (
                func in models
                or func.rpartition(".")[2] in ("backward", "step", "zero_grad")
                or any(q.startswith(APEX) for q in self.qualified(node.func))
            ):
                return False
        return True

    def _companions(self, initialize: list[cst.Call]) -> list[cst.Call]:
        """``teacher = amp.initialize(teacher, opt_level="O1")`` beside the training
        ``initialize`` of the same function, with the same options, under the same tests
        (DG-Net's frozen teacher): it only turned on O1's casts, which the training call
        turns on as well, process-wide; it goes, and its model's forwards are the
        initialized models' (in a region, or named in a note)."""
        training = [c for c in initialize if not without_optimizer(initialize_arguments(c)[0])]
        found = []
        for call in initialize:
            if call in training or any(a.star for a in call.args):
                continue
            statement = self.statement(call)
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            models = _argument(call, "models", 0)
            if not (
                isinstance(small, cst.Assign)
                and len(statement.body) == 1
                and len(small.targets) == 1
                and small.value is call
                and (
                    (is_path(models)
                     and _code(self.module, small.targets[0].target) == _code(self.module, models))
                    or (isinstance(models, cst.Call)  # `crit = amp.initialize(Loss().cuda())`
                        and isinstance(small.targets[0].target, cst.Name))
                )
            ):  # fmt: skip
                continue
            tests = self._tests_around(call)
            if any(
                self._beside(t, call)
                and self._options(t) == self._options(call)
                and self._tests_around(t) == tests
                for t in training
            ):
                found.append(call)
        return found

    def _beside(self, training: cst.Call, call: cst.Call) -> bool:
        """``call`` runs where the training ``initialize`` has run or runs next to it: the same
        function, or another method of the class whose ``__init__`` holds the training call
        (a vocoder loaded later: ``self.vocoder = amp.initialize(self.vocoder)``)."""
        home, other = self.function(training), self.function(call)
        if home is other:
            return True
        holder = self.parent(self.parent(home)) if isinstance(home, cst.FunctionDef) else None
        return (
            isinstance(holder, cst.ClassDef)
            and home.name.value == "__init__"
            and isinstance(other, cst.FunctionDef)
            and self.method_of(call, holder) is other
            and is_path(_argument(call, "models", 0))
            and _code(self.module, _argument(call, "models", 0)).startswith("self.")
        )

    def _tests_around(self, call: cst.Call) -> list[str]:
        """The tests of the ``if``s around ``call`` in its function, innermost first."""
        function = self.function(call)
        return [
            _code(self.module, a.test)
            for a in self.ancestors(call)
            if isinstance(a, cst.If) and self.within(call, a.body) and self.function(a) is function
        ]

    def _branches(self, initialize: list[cst.Call]) -> list[cst.Call] | None:
        """``if t: m, o = amp.initialize(m, o, ...)`` ``else: [m, n], o = amp.initialize([m, n],
        o, ...)``: both branches hold only ``initialize`` calls that rebind what they are given,
        with the same options and the same optimizer, so one of them always runs and the
        scaler is the same either way (under O1 apex's casts are global: every forward after
        either call is cast, whichever models were listed). The ``if`` is planned as one
        ``initialize`` of all the models (``self.branched``); the calls after the first are
        returned as merged. None: not this shape."""
        statement = self.statement(initialize[0])
        holder = self.parent(self.parent(statement))
        if not (
            isinstance(holder, cst.If)
            and isinstance(holder.orelse, cst.Else)
            and not isinstance(self.parent(holder), cst.If)
            and isinstance(holder.body, cst.IndentedBlock)
            and isinstance(holder.orelse.body, cst.IndentedBlock)
            and holder.body.body[0] is statement
        ):
            return None
        statements = [*holder.body.body, *holder.orelse.body.body]
        calls = initialize[: len(statements)]
        if len(calls) < len(statements) or len(holder.orelse.body.body) == 0:
            return None
        optimizer = _code(self.module, _argument(initialize[0], "optimizers", 1))
        options = self._options(initialize[0])
        for each, call in zip(statements, calls, strict=True):
            if (
                self.statement(call) is not each
                or not self._rebinds_own(call)
                or self._options(call) != options
                or _code(self.module, _argument(call, "optimizers", 1)) != optimizer
            ):
                return None
        self.branched = holder
        return calls[1:]

    def _split(self, initialize: list[cst.Call]) -> list[cst.Call] | None:
        """``if train: ...; [if T:] m, o = amp.initialize(m, o, ...)`` ``else: [if T:] m =
        amp.initialize(m, ...)`` (the Hugging Face-era ``do_train`` / ``do_predict`` scripts):
        one call on each path of the ``if``, the same options, the second for the same model
        with the same optimizer or none (evaluation only). One of them ran, under the same
        test ``T``: one GradScaler made before that ``if``, enabled by ``T``, serves either
        path, and a scaler no loss goes through changes nothing (``self.split``: the ``if``,
        the two statements that go with their ``if T:``, and ``T``). None: not this shape."""
        if len(initialize) != 2:
            return None
        first, second = initialize

        def guarded(call: cst.Call) -> tuple[cst.CSTNode, cst.BaseExpression | None]:
            statement = self.statement(call)
            holder = self.parent(self.parent(statement))
            if (
                isinstance(holder, cst.If)
                and holder.orelse is None
                and isinstance(holder.body, cst.IndentedBlock)
                and all(s is statement or self._imports_apex(s) for s in holder.body.body)
                and not isinstance(self.parent(holder), cst.If)
            ):  # (`if args.fp16: from apex import amp` and the call: the import goes too)
                return holder, holder.test
            return statement, None

        (one, test), (other, again) = guarded(first), guarded(second)
        outer = self.parent(self.parent(one))
        small = self.statement(second).body[0]
        model = _argument(second, "models", 0)
        optimizer = _argument(second, "optimizers", 1)
        if not (
            isinstance(outer, cst.If)
            and isinstance(outer.orelse, cst.Else)
            and not isinstance(self.parent(outer), cst.If)
            and isinstance(outer.body, cst.IndentedBlock)
            and isinstance(outer.orelse.body, cst.IndentedBlock)
            and one in outer.body.body
            and other in outer.orelse.body.body
            and (test is None) == (again is None)
            and (test is None or _code(self.module, test) == _code(self.module, again))
            and self._options(first) == self._options(second)
            and (self._rebinds_own(second) or (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and small.value is second
                and optimizer is None
                and isinstance(model, cst.Name)
                and _code(self.module, small.targets[0].target) == model.value
            ))
            and _code(self.module, model) == _code(self.module, _argument(first, "models", 0))
            and (optimizer is None or _code(self.module, optimizer)
                 == _code(self.module, _argument(first, "optimizers", 1)))
        ):  # fmt: skip
            return None
        self.split = (outer, one, other, test)
        return [second]

    def _imports_apex(self, statement: cst.BaseStatement) -> bool:
        """``from apex import amp`` or ``import apex``, alone on its line."""
        if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
            return False
        small = statement.body[0]
        if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
            return _code(self.module, small.module).partition(".")[0] == "apex"
        return isinstance(small, cst.Import) and all(
            _code(self.module, a.name).partition(".")[0] == "apex" for a in small.names
        )

    def _options(self, call: cst.Call) -> list[str]:
        """What the call sets up besides its models and optimizers (``verbosity`` only says
        whether apex prints: calls that differ in it alone set up the same)."""
        return sorted(
            f"{a.keyword.value}={_code(self.module, a.value)}"
            for a in call.args
            if a.keyword is not None
            and a.keyword.value not in ("models", "optimizers", "verbosity")
        )

    def _rebinds_own(self, call: cst.Call) -> bool:
        """``a, b = amp.initialize(a, b, ...)``: a statement of its own that binds back the
        model(s) and optimizer it is given, spelled alike."""
        statement = self.statement(call)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        positional = [a for a in call.args if a.keyword is None]
        if not (
            isinstance(small, cst.Assign)
            and len(statement.body) == 1
            and len(small.targets) == 1
            and small.value is call
            and len(positional) == 2
            and not any(a.star for a in call.args)
        ):
            return False
        target = _code(self.module, small.targets[0].target).replace(" ", "").strip("()")
        given = ",".join(_code(self.module, a.value) for a in positional).replace(" ", "")
        return target == given

    def _same_objects(self, first: cst.Call, extra: cst.Call) -> bool:
        """``extra`` initializes what ``first`` did: later in the same function, or the same
        ``self.`` attributes in another method of the class (allennlp's restore)."""
        one, other = self.function(first), self.function(extra)
        if one is other:
            return self.order[id(extra)] > self.order[id(first)]
        holder = self.parent(self.parent(one)) if isinstance(one, cst.FunctionDef) else None
        args = [a.value for a in extra.args if not a.keyword]
        return (
            isinstance(holder, cst.ClassDef)
            and isinstance(other, cst.FunctionDef)
            and self.parent(self.parent(other)) is holder
            and bool(args)
            and all(_code(self.module, a).startswith("self.") for a in args)
        )

    def _broken(self) -> str:
        if self.link.kept is not None:
            return (
                f"this file and {self.link.other(self.role, self.path)} (which share "
                f"{self.link.named} and keep apex's module as `.{self.link.kept}`) can only be "
                f"rewritten together, and they are not: {self.link.broken}"
            )
        return (
            f"this file and {self.link.other(self.role)} ({self.link.named}, with the "
            "`amp.initialize` that feeds them) can only be rewritten together, and they are "
            f"not: {self.link.broken}"
        )

    def _linked_setup(self, names: tuple[str, ...] | None = None) -> _Setup | None:
        """The functions of a link (the training function, checkpoint helpers; ``names``: a
        runner's checkpoint functions): each gets a ``scaler`` parameter, which every module
        that calls them passes (``_pass_to_linked`` there, in the same run)."""
        names = self.link.functions if names is None else names
        functions = [
            s for s in self.module.body if isinstance(s, cst.FunctionDef) and s.name.value in names
        ]
        named = _listed([f"`{f.name.value}`" for f in functions])  # (in the file's order)
        if len(functions) != len(names) or self.free_name("scaler") != "scaler":
            used = next(
                (n for n in self.nodes if isinstance(n, cst.Name) and n.value == "scaler"), None
            )
            where = f" at line {self.line(used)}" if used is not None else ""
            self.problem(
                self.plan.anchor,
                f"{named} cannot take a new `scaler` parameter, the keyword the other files "
                f"pass it by (this file already uses the name `scaler`{where}): pass the "
                "GradScaler by hand",
            )
            return None
        self.name = "scaler"
        for function in functions:
            self.threaded.add(function)
            self._refuse_wrapped(function)
            self.plan.edits[function.params] = self._add_parameter
        if self.role == "callee":  # one linked function calling another hands its own scaler
            for name in names:  # on (the link counted these calls as passing it: _checked)
                for ref in self._references(name):
                    call = self.parent(ref)
                    if (
                        isinstance(call, cst.Call)
                        and call.func is ref
                        and self.function(call) in functions
                    ):
                        self.plan.edits[call] = self._pass_scaler
        plural = "each get" if len(functions) > 1 else "gets"
        by = self.link.other(self.role)
        if self.role == "state":
            by = f"the runner `{self.link.runner}` ({self.link.shown(self.link.state[0])})"
        self.plan.notes.append(
            f"{named} {plural} a `scaler` parameter, passed by {by} in the same run"
        )
        home = next((f for f in functions if f.name.value == self.link.trains), functions[0])
        models = {self.link.model} if self.link.model else set()
        return _Setup(home, home, models, None, by_scaler=True)

    def _pass_to_linked(self, setup: _Setup, init: cst.Call) -> list[cst.Call]:
        """The initializing side of a link: pass the GradScaler at each call of the linked
        functions (the pre-pass counted them; a different count here blocks); those calls."""
        if isinstance(setup.home, cst.FunctionDef):
            # the module-level functions of this file that call the linked ones, reached from
            # the initializing function (IsotonicDataAugmentation's `main` -> its own
            # `train_and_evaluate` -> `distill.kd`, the 45th review): they take the scaler too
            spelled = set(self.link.spellings[0])
            relays = [
                f for f in self.module.body
                if isinstance(f, cst.FunctionDef) and f is not setup.home
                and f not in self.threaded
                and any(isinstance(n, cst.Call) and _code(self.module, n.func) in spelled
                        for n in self._subtree(f))
            ]  # fmt: skip
            if relays:
                self._thread(relays, setup.home)
        threaded = [f for f in self.threaded if not self.within(f, setup.home)]
        if setup.home is self.module:  # a script's code: the functions it runs afterwards
            threaded += [f for f in self._run_after(setup.statement) if f not in threaded]
        calls = [
            n
            for n in self._subtree(setup.home)
            if isinstance(n, cst.Call)
            and self.order[id(n)] > self.order[id(setup.statement)]
            and _code(self.module, n.func) in self.link.spellings[0]
        ]
        calls += [  # (in the functions the scaler is threaded through: links._reached)
            n
            for f in threaded
            for n in self._subtree(f)
            if isinstance(n, cst.Call)
            and _code(self.module, n.func) in self.link.spellings[0]
            and n not in calls
        ]
        if len(calls) != self.link.calls[0]:
            self.problem(
                init,
                self._scaled_elsewhere(init)
                if self.link.trains
                else f"{self.link.named} ({self.link.other(self.role)}) must be given the "
                "GradScaler where the scaler exists, after `amp.initialize` in this function: "
                "pass it by hand",
            )
            return []
        for call in calls:  # the linked functions' parameter is `scaler` (_linked_setup)
            value = self.access(self.function(call))
            if value is None:
                self.problem(call, "this call cannot reach the GradScaler to pass it")
                return []
            self.plan.edits[call] = functools.partial(
                self._pass_scaler, keyword="scaler", value=value
            )
        spelled = [f"`{s}`" for s in self.link.spellings[0]]
        verb = "is" if len(spelled) == 1 else "are"
        self.plan.notes.append(
            f"the GradScaler is passed to {' and '.join(spelled)} ({self.link.other(self.role)}), "
            f"which {verb} rewritten in the same run"
        )
        return calls

    def _run_after(self, statement: cst.CSTNode) -> list[cst.FunctionDef]:
        """The module-level functions that module-level code after ``statement`` calls by
        name, and those they call in turn (``links._reached`` for a script's code): they read
        its module-level GradScaler."""
        defs: dict[str, cst.FunctionDef] = {}
        for f in self.module.body:
            if isinstance(f, cst.FunctionDef):
                defs[f.name.value] = f if f.name.value not in defs else None
        pending = [
            n
            for s in self.module.body
            if not isinstance(s, cst.FunctionDef | cst.ClassDef)
            for n in self._subtree(s)
            if isinstance(n, cst.Call) and self.order[id(n)] > self.order[id(statement)]
        ]
        reached: list[cst.FunctionDef] = []
        while pending:
            call = pending.pop()
            function = defs.get(call.func.value) if isinstance(call.func, cst.Name) else None
            if function is None or function in reached:
                continue
            reached.append(function)
            pending += [n for n in self._subtree(function) if isinstance(n, cst.Call)]
        return reached

    def _no_initialize(self, calls: dict[str, list[cst.Call]]) -> None:
        """A module that only uses the scaler (a checkpoint helper, a ``do_train`` called from
        another file): the rewrite needs the GradScaler passed in; say exactly where."""
        tree = self.syntax
        through = initialized_through_parameter(tree)
        wrapped = fp16_optimizer_built(tree)
        for member, group in calls.items():
            for call in group:
                function = self.function(call)
                where = (
                    f"`{function.name.value}`"
                    if isinstance(function, cst.FunctionDef)
                    else "module-level code"
                )
                method = (
                    isinstance(function, cst.FunctionDef)
                    and isinstance(self.parent(self.parent(function)), cst.ClassDef)
                    and [p.name.value for p in function.params.params[:1]] == ["self"]
                )
                if (
                    isinstance(function, cst.FunctionDef)
                    and self.parent(function) is self.module
                    and unreached(tree, function.name.value, self.path)
                ):
                    self.problem(call, never_called(where, member, function.name.value))
                    continue
                owner = self.parent(self.parent(function)) if method else None
                library = (
                    library_trainer(self.qualified(b.value) for b in owner.bases)
                    if isinstance(owner, cst.ClassDef)
                    else None
                )
                outer = (
                    self.function(self.parent(function))
                    if isinstance(function, cst.FunctionDef) and not method
                    else None
                )
                closure_of = outer.name.value if isinstance(outer, cst.FunctionDef) else None
                self.problem(
                    call,
                    never_initialized_here(
                        without_initialize(
                            where, member, method, through, wrapped, library, closure_of
                        ),
                        self.path,
                    ),
                )
