"""How the apex handles flow: ``initialize`` again, losses scaled in other functions, dual (apex or
native) setups, sibling modules and the pair of modules (:mod:`ampmigrate.apex.links`), files
without ``initialize``.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Iterator

import libcst as cst

from ampmigrate.apex.casts import (
    CAST_MEMBERS,
    _convertible,
    _read,
    cast_modules_under,
    loads_by_name,
    never_casts,
    outside_casts,
)
from ampmigrate.apex.common import (
    _argument,
    _code,
    _is_call_of,
    _Setup,
    _statements,
    initialize_arguments,
    is_path,
    without_optimizer,
)
from ampmigrate.apex.links import _listed
from ampmigrate.apex.ondisk import _project_files, project_folder
from ampmigrate.apex.siblings import _Graph, apex_siblings, initializing_imports, star_may_bind
from ampmigrate.apex.users import apex_subclasses, user_texts, users_on_disk
from ampmigrate.apex.verdict import (
    APEX,
    SUPPORTED,
    fp16_optimizer_built,
    initialized_through_parameter,
    library_trainer,
    never_called,
    never_initialized_here,
    no_rewrite,
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

    @functools.cached_property
    def _stores(self) -> dict[str, list[cst.Call]]:
        """``args.amp = amp``: apex's module kept on an object, by where it is kept, with the
        calls this file makes through it (``args.amp.scale_loss(...)``); read once, as the
        module does not change while it is planned."""
        stores: dict[str, list[cst.Call]] = {}
        for node in self.nodes:
            if (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Attribute)
                and isinstance(node.value, cst.Name | cst.Attribute)
                and "apex.amp" in self.qualified(node.value)
            ):
                stores[_code(self.module, node.targets[0].target)] = []
        for node in self.nodes:
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
                calls = stores.get(_code(self.module, node.func.value))
                if calls is not None:
                    calls.append(node)
        return stores

    def _through_stores(self, setup: _Setup, calls: dict[str, list[cst.Call]]) -> set[cst.Call]:
        """``args.amp = amp`` after ``initialize`` and ``args.amp.scale_loss(...)`` in the file:
        the GradScaler takes the module's place as the value kept there (``args.scaler =
        scaler``, right after it is made, so it is there on both paths as the disabled scaler
        is), and each call through it becomes the scaler's. Only where every function that
        calls through it has the object as a parameter that every call in the file fills with
        that same object after the store. The calls now planned; a store that cannot be
        followed keeps its blocker."""
        planned: set[cst.Call] = set()
        for where, node in self.kept.items():
            why = self._kept_why(setup, where, node)
            if why is not None:
                self.problem(node, self._stored(node, where, why))
                continue
            root = where.partition(".")[0]
            statement = self.statement(node)
            self.plan.edits[statement] = lambda _u: cst.RemoveFromParent()
            self.after_scaler.append(f"{root}.{self.name} = {self.name}")
            through = self._stores.get(where, [])
            for call in (c for c in through if c not in self.initialize_calls):
                member = call.func.attr.value
                calls.setdefault(member, []).append(call)
                planned.add(call)
                function = self.function(call)
                if function is not setup.home and not self.within(function, setup.home):
                    self.stored_access[id(function)] = f"{root}.{self.name}"
            callers = (
                "the other methods reach it through their `self`"
                if self._instance_store(setup, root) is not None
                else f"callers in other files must give `{root}` the same way"
            )
            self.plan.notes.append(
                f"`{where} = amp` becomes `{root}.{self.name} = {self.name}`, made where the "
                f"GradScaler is (both paths have it); the calls through `{where}` become its "
                f"({callers})"
            )
        self.followed |= planned
        return planned

    def _kept_read_elsewhere(self, attribute: str) -> tuple[str, int] | None:
        """Another file of the project that calls apex through ``<object>.<attribute>``
        (``t.amp.scale_loss(...)`` in an engine that receives the trainer) and imports no apex
        itself (a sibling script keeping apex's module on its own `args` is its own process's):
        (it as shown, the line); None where none does."""
        members = "|".join(sorted(SUPPORTED))
        pattern = re.compile(rf"\.{re.escape(attribute)}\.(?:{members})\(".encode())
        for shown, data in self._other_files():
            found = pattern.search(data)
            if found is not None and not re.search(rb"^\s*(from apex\b|import apex\b)", data, re.M):
                return shown, data.count(b"\n", 0, found.start()) + 1
        return None
        here = os.path.abspath(self.path)
        pattern = re.compile(
            rf"\.{re.escape(attribute)}\.(?:scale_loss|master_params|state_dict|"
            rf"load_state_dict|initialize)\(".encode()
        )
        for file in _project_files(self.path) or []:
            if os.path.abspath(file) == here:
                continue
            data = _read(file)
            found = pattern.search(data)
            if found is not None and not re.search(rb"^\s*(from apex\b|import apex\b)", data, re.M):
                shown = os.path.relpath(file, os.path.dirname(here))
                return shown, data.count(b"\n", 0, found.start()) + 1
        return None

    def _other_files(self) -> Iterator[tuple[str, bytes]]:
        """The project's other files on disk, as shown from this one, with their bytes."""
        if self.path is None:
            return
        here = os.path.abspath(self.path)
        for file in _project_files(self.path) or []:
            if os.path.abspath(file) != here:
                yield os.path.relpath(file, os.path.dirname(here)), _read(file)

    def _cleared(self, target: cst.Attribute) -> bool:
        """``target`` is stored None (``self.amp = None``, or a place of ``self.model,
        self.amp = [None, None]``, RetinaNet's reset in ``__init__``): no apex call could go
        through that value, so it is no read of the module kept there."""
        holder = self.parent(target)
        value = None
        if isinstance(holder, cst.AssignTarget):
            value = self.parent(holder).value
        elif isinstance(holder, cst.Element):
            sequence = self.parent(holder)
            outer = self.parent(sequence)
            assign = self.parent(outer) if isinstance(outer, cst.AssignTarget) else None
            given = assign.value if isinstance(assign, cst.Assign) else None
            if isinstance(given, cst.List | cst.Tuple) and len(given.elements) == len(
                sequence.elements
            ):
                value = given.elements[list(sequence.elements).index(holder)].value
        return isinstance(value, cst.Name) and value.value == "None"

    def _kept_why(self, setup: _Setup, where: str, node: cst.CSTNode) -> str | None:
        """Why the scaler cannot take the place of apex's module kept at ``where`` (None: it
        can)."""
        root, _, attribute = where.partition(".")
        statement = self.statement(node)
        init = setup.statement
        if "." in attribute or not root.isidentifier():
            return f"only `name.attribute` is followed, not `{where}`"
        if self.early is not None:
            return "the GradScaler is made before the optimizer's restore, where it may not exist"
        if self.parent(statement) is not self.parent(init):
            return "it is not kept in the block of `amp.initialize`"
        # kept before `initialize` too: apex raised on any use but `initialize` before it
        # (its amp state was not set up), so the GradScaler made there takes its place
        block = _statements(self.parent(statement)) or []
        first, last = sorted((block.index(init), block.index(statement)))
        if any(root in self.facts(s).assigned for s in block[first + 1 : last]):
            return f"`{root}` is bound again between `amp.initialize` and it"
        through = [c for c in self._stores.get(where, []) if c not in self.initialize_calls]
        linked = self.link is not None and self.link.kept == attribute and not self.link.broken
        if not through and not linked:
            other = next(
                (n for n in self.nodes if isinstance(n, cst.Call)
                 and isinstance(n.func, cst.Attribute)
                 and isinstance(n.func.value, cst.Attribute)
                 and n.func.value.attr.value == attribute
                 and _code(self.module, n.func.value) != where),
                None,
            )  # fmt: skip
            if other is not None:  # (argus: a helper keeps it on the model, whose class calls
                spelled = _code(self.module, other.func.value)  # through `self.amp`)
                return (
                    f"the calls through `.{attribute}` in this file are made on another "
                    f"spelling (`{spelled}` at line {self.line(other)}), which this rewrite "
                    "does not follow to it"
                )
            return "nothing in this file calls through it, and code outside this file may"
        members = {c.func.attr.value for c in through}
        if members - (SUPPORTED - {"initialize"}):
            listed = ", ".join(f"`{m}`" for m in sorted(members - SUPPORTED))
            return f"it is used for {listed or '`initialize`'}, which has no GradScaler form here"
        funcs = {id(c.func.value) for c in self._stores.get(where, [])}
        for other in self.nodes:
            if (
                isinstance(other, cst.Attribute)
                and other.attr.value == self.name
                and _code(self.module, other.value) == root
            ):
                return f"`{root}.{self.name}` is already used in this file"
            if (
                isinstance(other, cst.Attribute)
                and other.attr.value == attribute
                and _code(self.module, other) == where
                and id(other) not in funcs
                and not (
                    isinstance(self.parent(other), cst.AssignTarget)
                    and self.statement(other) is statement
                )
                and not self._cleared(other)
            ):
                return f"`{where}` is read at line {self.line(other)} other than to call apex"
            if (
                isinstance(other, cst.SimpleString)
                and other.evaluated_value == attribute
                and isinstance(self.parent(other), cst.Arg)
            ):
                return f"`{where}` may be read by name at line {self.line(other)}"
        other = None if linked else self._kept_read_elsewhere(attribute)
        if other is not None:  # (the 46th review: a partial migration there raised)
            return (
                f"{other[0]} calls apex through `.{attribute}` at its line {other[1]}, on the "
                "object it is kept on, and would not find it there once it holds the GradScaler"
            )
        users = {id(self.function(c)) for c in through}
        if not linked and self.path is not None:
            names = [f.name.value for f in self.module.body if isinstance(f, cst.FunctionDef)
                     and id(f) in users]  # fmt: skip
            outside = users_on_disk(self.path, names) if names else []
            if outside is None:
                return "there are too many files around it to find who calls its functions"
            if outside:
                other, line, name = outside[0]
                shown = os.path.relpath(other, os.path.dirname(os.path.abspath(self.path)))
                return (
                    f"`{name}` is also used at {shown}:{line}, which must give it `{root}` with "
                    "the GradScaler: rewrite them in one run"
                )
        cls = self._instance_store(setup, root)
        for call in through:
            function = self.function(call)
            if function is setup.home or self.within(function, setup.home):
                if self.order[id(call)] < self.order[id(statement)]:
                    return f"it is called through at line {self.line(call)} before it is kept"
                continue
            if cls is not None:
                method = self.method_of(call, cls)
                if (
                    method is None
                    or method.params.params[:1] == []
                    or (method.params.params[0].name.value != root)
                ):
                    return (
                        f"`{where}` is read at line {self.line(call)} outside the methods of "
                        f"`{cls.name.value}`"
                    )
                continue
            why = self._carries(function, root, setup, statement, users)
            if why is not None:
                return why
        return None

    def _instance_store(self, setup: _Setup, root: str) -> cst.ClassDef | None:
        """The class whose method holds ``initialize`` when ``root`` is that method's first
        parameter (``self.amp = amp``): its other methods reach the store through their own
        ``self`` (None: not such a store)."""
        home = setup.home
        cls = self.parent(self.parent(home)) if isinstance(home, cst.FunctionDef) else None
        if (
            isinstance(cls, cst.ClassDef)
            and home.params.params
            and home.params.params[0].name.value == root
        ):
            return cls
        return None

    def _carries(self, function, root: str, setup: _Setup, store, users: set[int]) -> str | None:
        """Why ``function`` may see another ``root`` than the one the store filled (None: each
        call in the file passes that one, after the store or from a function that does)."""
        if not isinstance(function, cst.FunctionDef):
            return f"`{root}.amp` is called through at module level"
        params = [p.name.value for p in function.params.params]
        if root not in params or root in self.facts(function.body).assigned:
            return f"`{function.name.value}` does not take `{root}` as a parameter"
        holder = self.parent(self.parent(function))
        method = isinstance(holder, cst.ClassDef)
        index = params.index(root) - (1 if method else 0)
        name = function.name.value
        found = 0
        for node in self.nodes:
            if not isinstance(node, cst.Name) or node.value != name or node is function.name:
                continue
            parent = self.parent(node)
            if method:
                if not (isinstance(parent, cst.Attribute) and parent.attr is node):
                    continue
                call, func = self.parent(parent), parent
            else:
                if isinstance(parent, cst.Attribute) and parent.attr is node:
                    continue
                call, func = parent, node
            if not (isinstance(call, cst.Call) and call.func is func):
                return f"`{name}` is used at line {self.line(node)} other than by a call"
            positional = [a.value for a in call.args if not a.keyword and not a.star]
            keywords = {a.keyword.value for a in call.args if a.keyword}
            if (
                method
                and len(positional) <= index
                and root not in keywords
                and not any(a.star for a in call.args)
            ):
                continue  # it cannot bind `root`: another class's method of that name
            given = {a.keyword.value: a.value for a in call.args if a.keyword}.get(
                root, positional[index] if 0 <= index < len(positional) else None
            )
            if not (isinstance(given, cst.Name) and given.value == root):
                return f"`{name}` is called at line {self.line(call)} without `{root}`"
            caller = self.function(call)
            if caller is setup.home:
                if self.order[id(call)] < self.order[id(store)]:
                    return f"`{name}` is called at line {self.line(call)} before the store"
            elif id(caller) not in users:
                return (
                    f"`{name}` is called at line {self.line(call)} from a function that is not "
                    f"given `{root}` by the store"
                )
            found += 1
        if not found:
            return f"`{name}` is not called in this file"
        return None

    def _function_name(self, function: cst.CSTNode) -> str:
        """``train``, ``Trainer.__init__`` (a method, with its class), or module-level code."""
        if not isinstance(function, cst.FunctionDef):
            return "module-level code"
        holder = self._holder(function)
        prefix = f"{holder.name.value}." if isinstance(holder, cst.ClassDef) else ""
        return prefix + function.name.value

    def _stored(self, node: cst.CSTNode, where: str, why: str | None = None) -> str:
        """The blocker for ``where = amp``: what is called through it, why the GradScaler
        cannot take its place (``why``; None: this file does not initialize amp once), and
        what that looks like by hand."""
        calls = self._stores.get(where, [])
        listed = ", ".join(
            f"`{_code(self.module, c.func)}` at line {self.line(c)}" for c in calls[:4]
        )
        through = f" and called through it ({listed})" if calls else ""
        because = why or "this file does not initialize amp exactly once"
        scaler = where.rsplit(".", 1)[0] + ".scaler"
        return (
            f"`{_code(self.module, node)}` is kept as `{where}`{through}: the GradScaler cannot "
            f"take its place there, as {because}; put it there by hand (`{scaler} = scaler`, "
            f"`{scaler}.scale(loss).backward()`, `{scaler}.step(optimizer)` + "
            f"`{scaler}.update()`, `{scaler}.state_dict()`)"
        )

    def _outside_base(self, init: cst.Call) -> str | None:
        """The blocker where ``initialize`` sits under a test of a ``self`` attribute that
        this file never sets, in a class whose base comes from an installed package (a
        subclass of transformers' ``Trainer``, whose ``use_apex`` the base sets and under
        which it scales the loss): None where that is not so."""
        klass = next((a for a in self.ancestors(init) if isinstance(a, cst.ClassDef)), None)
        if klass is None or self.path is None:
            return None
        tested = set(self._apex_flags(init))
        stored = {
            t.target.attr.value
            for t in self.nodes
            if isinstance(t, cst.AssignTarget) and isinstance(t.target, cst.Attribute)
        }
        # (a mixed-precision switch: `self.training` is nn.Module's mode, no backend choice)
        unset = sorted(n for n in tested - stored if re.search(r"apex|amp|fp16|half", n))
        folder = project_folder(self.path)
        for base in klass.bases:
            names = [q for q in self.qualified(base.value) if "." in q]
            top = names[0].partition(".")[0] if names else None
            if (
                not unset
                or top is None
                or any(os.path.exists(os.path.join(folder, top + end)) for end in ("", ".py"))
            ):
                continue
            hint = (
                " (transformers' `Trainer` does, in `training_step`: choose its native backend, "
                '`fp16_backend="amp"`)'
                if top == "transformers"
                else ""
            )
            return (
                f"no `amp.scale_loss` in this file: `{klass.name.value}` subclasses "
                f"`{names[0]}`, which is not in the run, and `self.{unset[0]}`, the test around "
                "`amp.initialize`, is never set in this file (the base class sets it, or code "
                "that holds the object): the base class may choose apex and scale the loss "
                f"under it itself{hint}, which the rewrite cannot change; choose "
                "the base class's native path, then delete the apex branches here, by hand"
            )
        return None

    def _scaled_elsewhere(self, init: cst.Call) -> str:
        """The blocker for a file that initializes but scales the loss in another file: name
        the calls that receive the optimizer, where the GradScaler has to be passed."""
        broken = self._unbound_use() or self._never_set(_argument(init, "optimizers", 1))
        if broken is not None:
            return broken
        unresolved = self._unresolved_scaling()
        if unresolved is not None:
            return unresolved
        value = next(
            (
                n
                for n in self.nodes
                if isinstance(n, cst.Attribute | cst.Name)
                and not (isinstance(self.parent(n), cst.Call) and self.parent(n).func is n)
                and not isinstance(self.parent(n), cst.Attribute)
                and APEX + ".scale_loss" in self.qualified(n)
            ),
            None,
        )
        if value is not None:
            holder = self.parent(self.parent(value))
            how = (
                f"handed to `{_code(self.module, holder.func)}(...)`"
                if isinstance(self.parent(value), cst.Arg) and isinstance(holder, cst.Call)
                else "used as a value"
            )
            return (
                f"`{_code(self.module, value)}` is {how} at line {self.line(value)}, and the "
                "loss is scaled "
                "where that value is called, which the rewrite does not follow: replace each "
                "`with <it>(loss) as scaled: scaled.backward()` by "
                "`scaler.scale(loss).backward()`, the step by `scaler.step(optimizer)` + "
                "`scaler.update()`, by hand"
            )
        text = (
            "no `amp.scale_loss` in this file: the loss is scaled in another file; create the "
            "GradScaler here and pass it there"
        )
        handed = next(  # apex's module itself handed on (`{"amp": amp}`, `criterion(amp)`)
            (
                n
                for n in self.nodes
                if isinstance(n, cst.Name)
                and APEX in self.qualified(n)
                and not isinstance(self.parent(n), cst.Attribute)
                and not self._in_import(n)
                and not self._availability_test(n)
            ),
            None,
        )
        if handed is not None:
            return (
                f"no `amp.scale_loss` in this file: apex's `{handed.value}` itself is handed on "
                f"at line {self.line(handed)}, and the code that receives it may scale the loss "
                "with it, which the rewrite does not follow: migrate the two together by hand"
            )
        timm_scaler = next(
            (
                n for n in self.nodes
                if isinstance(n, cst.Name | cst.Attribute)
                and any(q.startswith("timm.") and q.endswith(".ApexScaler")
                        for q in self.qualified(n))
                and not self._in_import(n)
            ),
            None,
        )  # fmt: skip
        if timm_scaler is not None:
            return (
                "no `amp.scale_loss` in this file: the loss is scaled by timm's "
                f"`ApexScaler` (line {self.line(timm_scaler)}), which calls `amp.scale_loss` "
                "inside timm, outside the run: use timm's `NativeScaler` there (the same "
                "call; it keeps a `torch.amp.GradScaler`), run the forward under "
                '`torch.amp.autocast("cuda", dtype=torch.float16)` and delete '
                "`amp.initialize`, by hand"
            )
        outside = self._outside_base(init)
        if outside is not None:
            return outside
        if (
            self.siblings == []
            and not self.scaling_subclasses  # (they scale: "nothing scales" would be false)
            and self.path is not None
            and os.path.isfile(self.path)
        ):
            scaling = self._importers_that_scale(init)
            if scaling:
                return (
                    f"no `amp.scale_loss` in this file: {scaling} takes "
                    f"`{self.function(init).name.value}` from this file and scales the loss "
                    "with what it returns; the rewrite pairs a file that initializes with the "
                    "modules it imports, not with its importers: migrate the two together by "
                    "hand (the GradScaler made here and returned with the model and optimizer, "
                    "or made there)"
                )
            initializing = initializing_imports(self.path)
            if initializing:
                folder = os.path.dirname(os.path.abspath(self.path))
                listed = _listed([
                    f"{os.path.relpath(p, folder)} (`amp.{m}` at its line {n})"
                    for p, m, n in initializing
                ])  # fmt: skip
                return (
                    f"no `amp.scale_loss` in this file, but {listed}, which it imports, "
                    "initializes apex amp itself and calls it: apex keeps one amp state for "
                    "the whole process, which both set up and use; migrate them together by hand"
                )
            # nothing it imports calls apex: perhaps nothing scales at all
            return (
                "no `amp.scale_loss` in this file, and none of the modules it imports that are "
                "on disk calls apex amp: if no other code scales the loss, apex only casts here "
                "(O1's autocast, no loss scaling): delete `amp.initialize` and run the forward "
                'under `torch.amp.autocast("cuda", dtype=torch.float16)`, by hand; if other code '
                "does, create the GradScaler here and pass it there"
            )
        args = {a.keyword.value: a.value for a in init.args if a.keyword}
        positional = [a.value for a in init.args if not a.keyword]
        optimizer = args.get("optimizers", positional[1] if len(positional) > 1 else None)
        if optimizer is None:
            return text
        name = _code(self.module, optimizer)
        home = self.function(init)
        stepped = [
            n for n in self._subtree(home)
            if isinstance(n, cst.Call) and _is_call_of(n, "step")
            and _code(self.module, n.func.value) == name
        ]  # fmt: skip
        if stepped:  # its step is here: `scaler.step` there needs the GradScaler here too
            text += (
                f", and make `{name}.step()` (line {self.line(stepped[0])}) "
                f"`scaler.step({name})` + `scaler.update()`"
            )
        calls = [
            n for n in self._subtree(home)
            if isinstance(n, cst.Call) and self.order[id(n)] > self.order[id(init)]
            and any(_code(self.module, a.value) == name for a in n.args)
            and not _is_call_of(n, "step")
            and not any(q.startswith(APEX + ".") for q in self.qualified(n.func))
        ]  # fmt: skip  # (apex's own calls take no scaler: `initialize` again, the 53rd review)
        if not calls:
            return text
        toward = [c for c in calls if self._toward_sibling(c)]
        listed = ", ".join(
            f"`{_code(self.module, c.func)}` (line {self.line(c)})" for c in (toward or calls)[:3]
        )
        if toward or len(calls) == 1:  # (the one way the optimizer leaves)
            return f"{text} (it receives `{name}` through {listed}: add a `scaler` argument there)"
        more = f" and {len(calls) - 3} more" if len(calls) > 3 else ""
        return (
            f"{text} (it receives `{name}` through {listed}{more}: the call that leads to the "
            "scaling needs a `scaler` argument too)"
        )

    def _unresolved_scaling(self) -> str | None:
        """A ``.scale_loss(...)`` call on something that is not apex's amp as far as the
        rewrite resolves (elektronn3's ``self.amp_handle.scale_loss``, left over from apex's
        first API, ``amp_handle = amp.init()``): the loss is scaled here, through it."""
        call = next(
            (
                n for n in self.nodes
                if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                and n.func.attr.value == "scale_loss"
                and not any(q.startswith(APEX + ".") for q in self.qualified(n.func))
            ),
            None,
        )  # fmt: skip
        if call is None:
            return None
        holder = _code(self.module, call.func.value)
        assigned = next(
            (
                t for t in self.nodes
                if isinstance(t, cst.Name | cst.Attribute) and _code(self.module, t) == holder
                and self._assigned_to(t)
            ),
            None,
        )  # fmt: skip
        where = (
            f"which line {self.line(assigned)} assigns"
            if assigned is not None
            else "which nothing in this file assigns (as written, that call raises; apex's "
            "first API kept such a handle: `amp_handle = amp.init()`)"
        )
        return (
            f"the loss is scaled at line {self.line(call)} through `{holder}.scale_loss(...)`, "
            f"{where}: the rewrite does not take `{holder}` for apex's amp; write "
            "`amp.scale_loss(...)` there (or migrate by hand)"
        )

    def _toward_sibling(self, call: cst.Call) -> bool:
        """``call`` calls into a module of the run that calls apex amp (a sibling): its
        qualified name names that module's file."""
        for qualified in self.qualified(call.func):
            parts = qualified.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                tail = os.path.join(*parts[:cut])
                if any(
                    os.path.splitext(s.path)[0].endswith(os.sep + tail)
                    or s.path.endswith(os.path.join(tail, "__init__.py"))
                    for s in self.siblings or ()
                ):
                    return True
        return False

    def _availability_test(self, node: cst.Name) -> bool:
        """``amp`` read by an availability test (``if amp is not None:``, ``if amp:``, ``not
        amp``, an ``and``): not handed on."""
        parent = self.parent(node)
        if isinstance(parent, cst.Comparison):
            return parent.left is node and all(
                isinstance(c.operator, cst.Is | cst.IsNot) for c in parent.comparisons
            )
        return isinstance(parent, cst.If | cst.BooleanOperation | cst.UnaryOperation)

    def _importers_that_scale(self, init: cst.Call) -> str | None:
        """The project files that import the function holding ``init`` (a set-up helper that
        returns the initialized pair: OVANet's ``get_models``) and call ``amp.scale_loss``:
        "train.py (line 12)"; None when it is not a module-level function or none does."""
        home = self.function(init)
        if not isinstance(home, cst.FunctionDef) or self.parent(home) is not self.module:
            return None
        folder = os.path.dirname(os.path.abspath(self.path))
        shown = [
            f"{os.path.relpath(file, folder)} (line {line})"
            for file, line, text in user_texts(self.path, [home.name.value])
            if "scale_loss" in text
        ]
        return ", ".join(dict.fromkeys(shown)) or None

    def _unbound_use(self) -> str | None:
        """An ``amp.scale_loss`` (or another amp call) in a function that cannot see the name
        apex was imported as: the import binds it only inside another function (``main``), so
        the original's mixed-precision path raises NameError there. That is the true reason,
        not a loss scaled in another file."""
        homes = {
            id(self.function(n))
            for n in self.nodes
            if isinstance(n, cst.ImportFrom | cst.Import) and self._apex_import(n)
        }
        if id(self.module) in homes or any(
            isinstance(n, cst.Global) and {g.name.value for g in n.names} & self.bound
            for n in self.nodes
        ):  # a module-level binding or a `global` gives it
            return None
        published = next((n for n in self.nodes if _publishes(n, self.bound)), None)
        if published is not None:  # `globals()["amp"] = amp`: module state, by a dict store
            return (
                f"apex's module is made a module global through `globals()` at line "
                f"{self.line(published)} and called from other functions, which the rewrite "
                "does not follow (no import or `global` binds it there): bind it with a "
                "module-level import or `global` first, or migrate by hand"
            )
        stars = [  # a star import may give it: followed where its module is on disk
            n for n in self.nodes
            if isinstance(n, cst.ImportFrom) and isinstance(n.names, cst.ImportStar)
        ]  # fmt: skip
        for node in self.nodes:
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value in SUPPORTED - {"initialize"}
                and isinstance(node.func.value, cst.Name)
                and node.func.value.value in self.bound
                and not any(id(a) in homes for a in self.ancestors(node))
            ):
                name = node.func.value.value
                function = self.function(node)
                inside = (
                    f"`{function.name.value}`" if isinstance(function, cst.FunctionDef) else "it"
                )
                star = next((n for n in stars if self._star_may_bind(n, name)), None)
                if star is not None:
                    return (
                        f"`{_code(self.module, node.func)}` at line {self.line(node)} reads "
                        f"`{name}`, which the apex import binds only inside another function, "
                        f"not in {inside}; only the star import at line {self.line(star)} could "
                        "bind it there (if it does not, that call raises NameError): the "
                        "rewrite cannot tell which `amp` it calls; import it at module level "
                        "before migrating, or migrate it by hand"
                    )
                return (
                    f"`{_code(self.module, node.func)}` at line {self.line(node)} reads `{name}`, "
                    f"which the apex import binds only inside another function, not in {inside}: "
                    "that call raises NameError, so the original's mixed-precision path cannot "
                    f"run as written; import `{name}` at module level (or fix the original) "
                    "before migrating"
                )
        return None

    def _star_may_bind(self, node: cst.ImportFrom, name: str) -> bool:
        if self.path is None:
            return True
        statement = ast.parse(_code(self.module, node).strip()).body[0]
        return star_may_bind(self.path, statement, name)

    def _apex_import(self, node: cst.Import | cst.ImportFrom) -> bool:
        if isinstance(node, cst.ImportFrom):
            return node.module is not None and _code(self.module, node.module).startswith("apex")
        return any(_code(self.module, a.name).startswith("apex") for a in node.names)

    def _dual(self, init: cst.Call) -> bool:
        """apex beside native AMP (timm's ``--apex-amp``/``--native-amp``): ``if use_amp ==
        "apex": <initialize, a scaler object, logs> elif use_amp == "native": <autocast,
        a native scaler>``, with no other apex amp call in the file. Native AMP is apex O1's
        equivalent, so the apex branch goes and its value runs the native branch
        (``if use_amp in ("apex", "native"):``). False: not this shape."""
        statement = self.statement(init)
        holder = self.parent(self.parent(statement))
        if not isinstance(holder, cst.If) or self.parent(statement) is not holder.body:
            return False
        root = holder
        while self._is_elif(root):
            root = self.parent(root)
        if self.block_of(root) is None:
            return False
        chain = [root]
        while isinstance(chain[-1].orelse, cst.If):
            chain.append(chain[-1].orelse)

        def compared(branch: cst.If) -> tuple[str, cst.SimpleString] | None:
            t = branch.test
            if (
                isinstance(t, cst.Comparison)
                and len(t.comparisons) == 1
                and isinstance(t.comparisons[0].operator, cst.Equal)
                and isinstance(t.comparisons[0].comparator, cst.SimpleString)
            ):
                return _code(self.module, t.left), t.comparisons[0].comparator
            return None

        apex_at = chain.index(holder)
        apex_test = compared(holder)
        if apex_test is None or "apex" not in str(apex_test[1].evaluated_value).lower():
            return False
        subject = apex_test[0]
        native_at = next(
            (
                i
                for i, branch in enumerate(chain)
                if i != apex_at
                and (found := compared(branch)) is not None
                and found[0] == subject
                and "apex" not in str(found[1].evaluated_value).lower()
                and any(w in _code(self.module, branch.body) for w in ("autocast", "Scaler"))
            ),
            None,
        )
        if native_at is None:
            return False
        others = [x for x in holder.body.body if x is not statement]
        if any(n.value in self.bound for x in others for n in self._subtree(x)
               if isinstance(n, cst.Name)):  # fmt: skip
            return False
        first, second = sorted((apex_at, native_at))
        listed = ", ".join(_code(self.module, compared(chain[i])[1]) for i in (first, second))
        test = cst.parse_expression(f"{subject} in ({listed})")

        def rebuild(u: cst.If) -> cst.If:
            branches = [u]
            while isinstance(branches[-1].orelse, cst.If):
                branches.append(branches[-1].orelse)
            tail = branches[-1].orelse
            kept = [
                b.with_changes(test=test) if i == native_at else b
                for i, b in enumerate(branches)
                if i != apex_at
            ]
            node = tail
            for branch in reversed(kept):
                node = branch.with_changes(orelse=node)
            return node.with_changes(leading_lines=u.leading_lines)

        self.plan.edits[root] = rebuild
        values = [compared(holder)[1], compared(chain[native_at])[1]]
        self.plan.min_torch = None  # nothing new is written: the native branch stays
        self.plan.summary = (
            "apex.amp beside native AMP can be rewritten to native AMP alone: the apex branch "
            "goes, the native one (autocast + GradScaler) takes its place"
        )
        self.plan.notes.append(
            f"the apex branch (line {self.line(holder)}) goes and "
            f"`{subject} == {_code(self.module, values[0])}` runs the native branch, apex O1's "
            "native equivalent (behaviour change: what it did besides `amp.initialize` there, "
            "such as its own scaler object, goes with it; checkpoints saved under apex hold "
            "its loss-scale format: convert them with `ampmigrate convert-checkpoint`)"
        )
        return True

    def _siblings(self, role: str | None, rewritten: ast.Module | None = None) -> None:
        """A module this file imports (directly or through others) that calls apex amp without
        initializing it shares this file's amp state (a checkpoint module saving
        ``amp.state_dict()``): migrating this file alone leaves it calling apex, which is gone
        or uninitialized then. The whole component is migrated or none of it. ``rewritten``:
        this file as the plan leaves it, whose imports and names are read instead."""
        if self.path is None:
            return
        # (a broken link's files: its own blocker says they move together or not at all)
        linked = set(self.link.files) if self.link else set()
        if self.link is not None and self.link.family is not None:  # (a part of a family's
            # link sees its own two files; the others are rewritten with it too: nnUNet's
            # grandchild imports its parent's module, the 66th review)
            linked |= {f for f, *_ in apex_subclasses(self.link.callers[0], self.link.family)}
        folder = os.path.dirname(os.path.abspath(self.path))
        graph = _Graph()  # (the import edges, read once for both walks)
        if rewritten is not None:
            before = {s.path: s for s in apex_siblings(self.path)}
            graph.trees[os.path.abspath(self.path)] = rewritten
        self.siblings = apex_siblings(self.path, graph)
        if rewritten is not None:
            kept = {s.path for s in self.siblings}
            for sibling in (s for path, s in before.items() if path not in kept):
                self.plan.notes.append(
                    f"{os.path.relpath(sibling.path, folder)} calls `amp.{sibling.member}` at its "
                    f"line {sibling.line} in code that only the apex branch reached: the rewrite "
                    "no longer uses it, and it keeps its own finding"
                )
        casts = self.casts if self.casts is not None and not self.casts.broken else None
        reached = {sibling.path for sibling in self.siblings}
        self._loaded_casts(casts, reached, folder, graph)
        self._outside_casts(folder, graph)
        unseen = [f for f in casts.layers if f not in reached] if casts is not None else []
        if unseen and os.path.abspath(self.path) in casts.initializing:
            listed = _listed([f"{os.path.relpath(f, folder)}" for f in unseen])
            loader = loads_by_name(self.path)
            where = (
                "this file imports"
                if loader is None or loader == os.path.abspath(self.path)
                else f"{os.path.relpath(loader, folder)}, which this file imports, imports"
            )
            self.plan.notes.append(
                f"{where} modules by a computed name (`importlib.import_module`), so this file "
                f"may run the apex casts of {listed}, which no import of it reaches: they get "
                "their torch.amp forms in this run too (see their AMP303 findings)"
            )
        plain = never_casts(self.text.encode())
        for sibling in self.siblings:
            if sibling.path in linked:
                continue
            if plain and sibling.member in CAST_MEMBERS:
                continue  # (apex's casts acted only under O1; at this file's O2/O3 they were
                # plain calls, and its finding says why it stays on apex)
            if casts is not None and sibling.path in casts.layers:
                self.plan.notes.append(
                    f"{os.path.relpath(sibling.path, folder)}'s `amp.{sibling.member}` at its line "
                    f"{sibling.line} gets its torch.amp form in this run (see its AMP303 "
                    "finding): the two are migrated together"
                )
                continue
            shown = os.path.relpath(sibling.path, folder)
            held = self.casts if self.casts is not None and self.casts.broken else None
            if held is not None and sibling.path in held.layers:
                # its casts have a rewrite, written with this file's: no step of its own (the
                # 42nd review: "has no O1 rewrite ... replace it first" sent users to do by
                # hand what the run does once the real blocker is gone)
                cast = f"{shown}'s `amp.{sibling.member}` at its line {sibling.line}"
                if held.broken_by == os.path.abspath(self.path):
                    self.plan.notes.append(
                        f"{cast} gets its torch.amp form in the same run as this file, once "
                        "this file's blockers are gone"
                    )
                else:
                    self.problem(
                        self.plan.anchor,
                        f"{cast} gets its torch.amp form only together with every file that "
                        f"initializes amp and reaches it: {held.broken}",
                    )
                continue
            via = os.path.relpath(sibling.importer, folder)
            uses = f"calls `amp.{sibling.member}`"
            if sibling.member in SUPPORTED:
                how = (
                    "migrate the two together (the GradScaler passed there, "
                    "`scaler.state_dict()` for `amp.state_dict()`) or neither; the rewrite "
                    "links two files of one run only where this one calls the one function "
                    "of that file that scales, directly or through functions of that file "
                    "that hand it the model and the optimizer as they are (or a helper that "
                    "only scales the loss and optimizer it is given, its caller stepping; or a "
                    "runner's hook ties them, or a class family whose base class "
                    "initializes), not through a "
                    "closure that function returns, an object it builds or a base class it "
                    "derives from, so in such a shape by hand"
                )
                count = sum(  # (one for inference only beside it, a teacher's, is allowed;
                    1 for n in self.nodes  # `optimizers=None` is one: 58b's ClassyVision)
                    if isinstance(n, cst.Call) and APEX + ".initialize" in self.qualified(n.func)
                    and not without_optimizer(initialize_arguments(n)[0])
                )  # fmt: skip
                if count > 1:  # (a link's caller initializes once: HPA's k-fold and single run)
                    how = (
                        f"this file calls `amp.initialize` with an optimizer {count} times, and "
                        "the rewrite links a file that calls it once: make one GradScaler that "
                        "each of them "
                        "reaches (apex kept one loss scaler for all), pass it at each call "
                        "there, and migrate the two together by hand"
                    )
            elif sibling.member == "amp":  # `return amp`: hands out the module itself
                uses = "returns apex's amp module"
                how = "hand out a GradScaler there instead and migrate the two together"
            elif sibling.member in ("float_function", "disable_casts") and not _convertible(
                sibling.path, _read(sibling.path)
            ):  # casts move with this file where their form is one the rewrite takes (STEP:
                how = (  # an alias with an ImportError fallback is not)
                    f"its `amp.{sibling.member}` is not in a form the rewrite takes with this "
                    f"file (`@amp.{sibling.member}` on a function, `name = amp."
                    f"{sibling.member}(f)`, `with amp.disable_casts():`, under a plain "
                    "`from apex import amp`; not an alias of it, nor one an `except "
                    "ImportError:` replaces): write it in such a form, or migrate it by hand "
                    "(AMP301's guidance)"
                )
            else:  # a cast helper: no scaler involved, its native form is AMP301's
                how = f"replace its `amp.{sibling.member}` first ({no_rewrite(sibling.member)})"
            self.problem(
                self.plan.anchor,
                f"{shown} (imported by {via} at line {sibling.import_line}) {uses} "
                f"at its line {sibling.line} and does not initialize "
                "amp: it relies on the amp state this file sets up and would still call apex "
                f"after this file alone were migrated; {how}",
            )
        self._subclasses(linked, folder)

    def _subclasses(self, linked: set[str], folder: str) -> None:
        """A class whose method initializes amp, subclassed in another module that calls apex
        amp (nnU-Net: the base trainer initializes, each variant's ``run_iteration`` scales):
        the variants share its amp state, which no import of this file reaches."""
        anchor = self.plan.anchor
        if self.family_linked("caller") or (
            not isinstance(anchor, cst.Call)
            or APEX + ".initialize" not in self.qualified(anchor.func)
        ):  # (a family's link holds every derived module that scales: the pre-pass found them)
            return
        owner = next((a for a in self.ancestors(anchor) if isinstance(a, cst.ClassDef)), None)
        if owner is None:
            return
        found = [
            f"`{name}` in {os.path.relpath(other, folder)} (line {line}; `{member}` at its "
            f"line {at})"
            for other, line, name, member, at in apex_subclasses(self.path, owner.name.value)
            if other not in linked
        ]
        self.scaling_subclasses = found
        if found:
            self.problem(
                anchor,
                f"classes derived from `{owner.name.value}` in other modules that call apex amp "
                f"({_listed(found)}) rely on the amp state this class's `amp.initialize` sets "
                "up and would still call apex after this file alone were migrated; migrate the "
                "class family together (the GradScaler kept on the object, `self.scaler`) or "
                "neither",
            )

    def _outside_casts(self, folder: str, graph: _Graph) -> None:
        """A package outside the run that the program imports casts through apex in its layers
        (an installed maskrcnn-benchmark's ``ROIAlign``): apex's casts there switched on with
        this file's ``initialize``; with apex gone, autocast hands those layers float16."""
        mine = os.path.abspath(self.path)
        for module, package, line, where in outside_casts(self.path, graph):
            via = (
                "this file imports"
                if module == mine
                else f"{os.path.relpath(module, folder)}, which this file imports, imports"
            )
            self.problem(
                self.plan.anchor,
                f"{via} `{package}` (line {line}), a package outside this run: {where}. Once "
                "this file initialized amp, apex gave those layers float32 arguments; with apex "
                "gone, autocast hands them float16, which their kernels may not take. Migrate "
                "the package's casts first (`ampmigrate fix` on it: each becomes "
                '`torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)`) or '
                "keep apex",
            )

    def _loaded_casts(self, casts, reached: set[str], folder: str, graph: _Graph) -> None:
        """This file (or a module it imports) imports modules by a computed name, and a module
        of its folder's tree casts through apex (``@amp.float_function``) where no import of
        this file reaches it: apex cast there once this file initialized amp. It can move only
        with that module, in one run (the pre-pass then joins them; see ``casts``)."""
        loader = loads_by_name(self.path, graph)
        if loader is None:
            return
        joined = set(casts.layers) if casts is not None else set()
        mine = os.path.abspath(self.path)
        left = [
            f for f in cast_modules_under(
                os.path.commonpath([os.path.dirname(mine), os.path.dirname(loader)])
            )
            if f != mine and f not in reached and f not in joined
        ]  # fmt: skip
        if not left:
            return
        shown = _listed([os.path.relpath(f, folder) for f in left[:4]])
        via = (
            "this file imports"
            if loader == mine
            else f"{os.path.relpath(loader, folder)}, which this file imports, imports"
        )
        self.problem(
            self.plan.anchor,
            f"{via} modules by a computed name (`importlib.import_module`), and {shown} "
            f"{'casts' if len(left) == 1 else 'cast'} through apex (`amp.float_function` and "
            "the like), which no import of this file reaches: apex cast there once this file "
            "initialized amp, and rewritten alone this file would leave those casts inactive "
            "(float16 under autocast); migrate them in one run with it (their casts become "
            "`torch.amp.custom_fwd`), or neither",
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


def _publishes(node: cst.CSTNode, names: set[str]) -> bool:
    """``globals()["amp"] = ...`` or ``globals().update(amp=...)`` for one of ``names``."""
    if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Subscript):
        target = node.target
        key = target.slice[0].slice if len(target.slice) == 1 else None
        return (
            _is_globals(target.value)
            and isinstance(key, cst.Index)
            and isinstance(key.value, cst.SimpleString)
            and key.value.evaluated_value in names
        )
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return (
            node.func.attr.value == "update"
            and _is_globals(node.func.value)
            and any(
                (a.keyword is not None and a.keyword.value in names) or a.star for a in node.args
            )
        )
    return False


def _is_globals(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == "globals"
        and not node.args
    )
