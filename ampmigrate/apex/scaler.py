"""Where the scaler is created and lives, and how it reaches every function that needs it (closures,
``self.<name>``, a new parameter passed at every call site).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

import libcst as cst

from ampmigrate.apex.common import (
    _NO_SPACE,
    Loop,
    _appended,
    _bare,
    _code,
    _is_call_of,
    _Setup,
    _statements,
    _targets,
    calls_up,
    defined_method,
    inner_comma,
    is_docstring,
    uncommented,
    wrapping_decorator,
)
from ampmigrate.apex.links import reaching
from ampmigrate.apex.ondisk import _read
from ampmigrate.apex.strays import _parsed
from ampmigrate.apex.users import users_on_disk


class Scaler:
    """The scaler stage of ``_Planner`` (mixed into it)."""

    def _place_scaler(
        self, setup: _Setup, small, models, optimizer, holder, switch, inner=None, nested=()
    ) -> None:
        """The GradScaler goes where ``initialize`` was, or earlier when the optimizer's state
        is restored before it (see ``_early``); its line is built at apply time, once the plan
        knows whether it is ``self.scaler``. ``inner``: the initialize statement, where
        ``setup.statement`` is a loop around it (``_pairs_loop``), which stays; ``nested``: the
        ``if``s inside ``holder`` around it, whose tests are in ``setup.condition`` too."""
        statement = setup.statement
        inner = inner or statement
        enabled = f", enabled={setup.condition}" if setup.condition else ""

        def scaler_lines(leading) -> list[cst.BaseStatement]:
            target = self.access(setup.home) or self.name
            scale = f", init_scale={self.init_scale}" if self.init_scale else ""
            code = f'{target} = torch.amp.GradScaler("cuda"{scale}{enabled})\n'
            line = cst.parse_statement(code).with_changes(leading_lines=leading)
            return [line, *(cst.parse_statement(f"{s}\n") for s in self.after_scaler)]

        assigned = self._rebind(small, models, optimizer)
        tests = [
            holder.test if isinstance(holder, cst.If) else None,
            *(n.test for n in nested),
            switch,
        ]
        anchor = self._early(setup, _code(self.module, optimizer), holder, tests)
        if anchor is not None:
            self.early = anchor
            self.plan.edits[anchor] = lambda u: cst.FlattenSentinel(
                [*scaler_lines(anchor.leading_lines), u.with_changes(leading_lines=())]
            )
            self.plan.edits[inner] = lambda _u: (
                cst.FlattenSentinel(assigned) if assigned else cst.RemoveFromParent()
            )
            rest = [s for s in getattr(holder, "body", cst.IndentedBlock([])).body
                    if s is not statement and s not in self.removed]  # fmt: skip
            if isinstance(holder, cst.If) and not rest and not assigned and self._kept_else(holder):
                self.plan.edits[holder] = _inverted
            elif isinstance(holder, cst.If) and not rest and not assigned:
                self.plan.edits[holder] = lambda _u: cst.RemoveFromParent()
                self.footers.append(holder)
            return
        if not isinstance(holder, cst.If) and inner is not statement:
            self.plan.edits[inner] = lambda _u: cst.FlattenSentinel(assigned)
            folded = self.plan.edits.get(statement)  # (`if amp is None: ... else:` folds)
            self.plan.edits[statement] = lambda u: cst.FlattenSentinel(
                [
                    *scaler_lines(statement.leading_lines),
                    *_outcome(folded, u.with_changes(leading_lines=())),
                ]
            )
            return
        if not isinstance(holder, cst.If):
            self.plan.edits[statement] = lambda _u: cst.FlattenSentinel(
                [*scaler_lines(statement.leading_lines), *assigned]
            )
            return
        # The scaler must exist on both paths: build it before the `if`, disabled when the
        # condition is false, and drop the initialize (and the if, when nothing is left).
        self.made_before = holder
        self.plan.edits[inner] = lambda _u: (
            cst.FlattenSentinel(assigned) if assigned else cst.RemoveFromParent()
        )
        rest = [s for s in holder.body.body if s is not statement and s not in self.removed]
        if rest or assigned or self._kept_else(holder):  # (an `else:` alone: `if not <test>:`)
            self.plan.edits[holder] = lambda u: cst.FlattenSentinel([
                *scaler_lines(holder.leading_lines),
                (u if rest or assigned else _inverted(u)).with_changes(leading_lines=()),
            ])  # fmt: skip
        else:
            self.plan.edits[holder] = lambda _u: cst.FlattenSentinel(
                scaler_lines(holder.leading_lines)
            )
            self.footers.append(holder)

    def _kept_else(self, holder: cst.If) -> bool:
        """``holder`` has an ``else:`` that stays once its body is emptied: not the ``amp =
        None`` of a switch that imported apex in the body (``if COND: from apex import amp
        ... else: amp = None``), which goes with every read of ``amp`` (one the rewrite
        leaves is refused)."""
        if holder.orelse is None:
            return False
        return not any(self._switch_if(holder, name) for name in self.bound)

    def _rebind(self, small, models, optimizer) -> list[cst.SimpleStatementLine]:
        """``a, b = amp.initialize(m, o)``: keep ``a, b = m, o`` unless the names are the same;
        ``return amp.initialize(m, o)``: ``return m, o`` (what O1 returns: the models and
        optimizers it is given, the models alone without optimizers)."""
        if isinstance(small, cst.Return):
            given = _code(self.module, models)
            given += f", {_code(self.module, optimizer)}" if optimizer is not None else ""
            return [cst.parse_statement(f"return {given}\n")]
        if not isinstance(small, cst.Assign):
            return []
        targets = _code(self.module, small.targets[0].target)
        values = f"{_code(self.module, models)}, {_code(self.module, optimizer)}"
        if len(small.targets) != 1 or _bare(targets).strip("()") in (
            _bare(values),
            _bare(_code(self.module, models)),
        ):
            return []
        # `wrapped = amp.initialize([g, d], [og, od])` binds the pair: `wrapped[1]` is the list
        # of optimizers; only without optimizers is the result the models alone
        source = _code(self.module, models) if optimizer is None else values
        target = small.targets[0].target
        if (
            isinstance(target, cst.Tuple)
            and len(target.elements) == 2
            and _code(self.module, target.elements[0].value) == _code(self.module, models)
        ):  # `model, [a, b] = amp.initialize(model, [...])`: only the optimizers are rebound
            targets = _code(self.module, target.elements[1].value)
            source = _code(self.module, optimizer)
        elif (
            isinstance(target, cst.Tuple)
            and len(target.elements) == 2
            and _code(self.module, target.elements[1].value) == _code(self.module, optimizer)
        ):  # `model, opt = amp.initialize(model.cuda(), opt)`: only the model is rebound
            targets = _code(self.module, target.elements[0].value)
            source = _code(self.module, models)
        if _unbracketed(targets) == _unbracketed(source):
            # (`[a, b] = [a, b]`, `(g, d), (og, od) = [g, d], [og, od]` bind nothing new: the
            # 33rd and 37th reviews' leftovers)
            return []
        return [cst.parse_statement(f"{targets} = {source}\n")]

    def _early(self, setup: _Setup, opt: str, holder, tests: list) -> cst.BaseStatement | None:
        """The statement of the function holding ``initialize`` that first restores ``opt``'s
        state before it (yolo, flowtron): the GradScaler is created right before it instead, so
        its state can be restored beside the optimizer's. Only when that is exact: the
        ``enabled`` condition has the same value there (plain names that nothing rebinds in
        between), and ``initialize`` is a statement of that function or of one ``if`` in it.
        Otherwise ``self.late`` says why and the restore stays a blocker."""
        block = setup.home.body if isinstance(setup.home, cst.FunctionDef) else self.module
        body = _statements(block) or []
        top = next((a for a in [setup.statement, *self.ancestors(setup.statement)]
                    if self.parent(a) is block), None)  # fmt: skip
        index = next((i for i, s in enumerate(body) if s is top), len(body))
        first = next((i for i in range(index) if self._restores(body[i], opt)), None)
        if first is None:
            return None
        where = f"line {self.line(body[first])}"
        if top is not setup.statement and top is not holder:
            self.late = "`amp.initialize` is nested deeper than one `if` of its function"
            return None
        if body[first] in self.plan.edits:
            self.late = f"{where} is rewritten itself"
            return None
        names = {"torch"}  # the GradScaler line reads `torch` and the condition
        for test in tests:
            for node in self._subtree(test) if test is not None else ():
                if isinstance(node, cst.Name):
                    names.add(node.value)
                elif isinstance(node, cst.BaseExpression) and not isinstance(
                    node, cst.BooleanOperation | cst.UnaryOperation | cst.Comparison
                    | cst.Integer | cst.SimpleString
                ):  # fmt: skip
                    self.late = (
                        f"the condition of `amp.initialize` reads `{_code(self.module, node)}`, "
                        f"which may change between {where} and it"
                    )
                    return None
        between = body[first:index]
        for node in self.nodes:
            declared = isinstance(node, cst.Global | cst.Nonlocal) and names & {
                n.name.value for n in node.names
            }
            if declared:
                self.late = (
                    f"`{sorted(declared)[0]}` (in the condition of `amp.initialize`) is declared "
                    f"`global`/`nonlocal` at line {self.line(node)}: a call may change it"
                )
                return None
            if (
                isinstance(node, cst.Del)
                and names & _targets(node.target)
                and any(self.within(node, s) for s in between)
            ):
                self.late = f"line {self.line(node)} deletes a name `amp.initialize` tests"
                return None
        scope = self.scopes.get(body[first])
        for name in sorted(names):
            for assignment in scope.assignments[name] if scope is not None else ():
                bound = getattr(assignment, "node", None)
                if bound is not None and any(self.within(bound, s) for s in between):
                    self.late = (
                        f"`{name}` (in the condition of `amp.initialize`) is assigned at line "
                        f"{self.line(bound)}, between {where} and it"
                    )
                    return None
        return body[first]

    def _restores(self, statement: cst.CSTNode, opt: str) -> bool:
        """``statement`` restores ``opt``'s state: itself, or by calling a module-level function
        of this file that does, given ``opt``."""
        functions = {s.name.value: s for s in self.module.body if isinstance(s, cst.FunctionDef)}

        def direct(node: cst.CSTNode) -> bool:
            return any(
                _is_call_of(n, "load_state_dict") and _code(self.module, n.func.value) == opt
                for n in self._subtree(node)
            )

        for node in self._subtree(statement):
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Name)
                and node.func.value in functions
                and any(_code(self.module, a.value) == opt for a in node.args)
                and direct(functions[node.func.value])
            ):
                return True
        return direct(statement)

    def _from_init_only(self, home: cst.FunctionDef) -> bool:
        """Every reference to the method ``home`` is a call in its class's ``__init__``: it runs
        once per object, where the object is set up (aps's ``setup_distributed(opt_level)``,
        the 43rd review: "would be made again ... each time it runs" was false)."""
        holder = self.parent(self.parent(home))
        refs = self._refs(home)
        if not isinstance(holder, cst.ClassDef) or not refs:
            return False
        init = defined_method(holder, "__init__")
        return init is not None and all(
            self.within(r, init)
            and isinstance(call := self.parent(r), cst.Call)
            and call.func is r
            and not any(isinstance(a, Loop) for a in self.ancestors(r) if self.within(a, init))
            for r in refs
        )

    def _once_per_object(self, setup: _Setup, home: cst.FunctionDef) -> None:
        """The GradScaler made where ``initialize`` was, kept on the object and read by its
        other methods: that method must make it on every call that reaches it the same way.
        Not where its switch reads one of the method's parameters (HF Trainer's
        ``_wrap_model(model, training=False)`` for an evaluation would replace it with a
        disabled one), nor where the method returns before it (its deepspeed path: the other
        methods would read an attribute never set)."""
        params = {p.name.value for p in home.params.params[1:]}
        params |= {p.name.value for p in home.params.kwonly_params}
        name = home.name.value
        # the switch's names, where the method can run again (`__init__` runs once per object)
        switch = (
            list(self._subtree(cst.parse_expression(setup.condition)))
            if setup.condition and name != "__init__" else []
        )  # fmt: skip
        read = {n.value for n in switch if isinstance(n, cst.Name)}
        if read & params and not self._from_init_only(home):
            shown = ", ".join(f"`{p}`" for p in sorted(read & params))
            self.problem(
                setup.statement,
                f"`amp.initialize` runs under `{setup.condition}`, which reads {shown}, a "
                f"parameter of `{name}`: the GradScaler kept on the object would be made again, "
                f"switched as that call says, each time `{name}` runs (a call for evaluation "
                "would turn it off); make it once, where the object is set up, by hand",
            )
        stored = {  # flags the method itself sets once it has run (`self.amp_initialized = True`)
            _code(self.module, t.target) for n in self._subtree(home.body)
            if isinstance(n, cst.Assign)
            and self.order[id(n)] > self.order[id(setup.statement)]
            and isinstance(n.value, cst.Name) and n.value.value in ("True", "False")
            for t in n.targets
        }  # fmt: skip
        guard = sorted(
            _code(self.module, n) for n in switch
            if isinstance(n, cst.Attribute) and _code(self.module, n) in stored
        )  # fmt: skip
        if guard:
            self.problem(
                setup.statement,
                f"`amp.initialize` runs under `{setup.condition}`, which reads `{guard[0]}`, "
                f"that `{name}` itself sets (a run-once guard, not a precision switch): made "
                f"before the `if`, the GradScaler would be made again, turned off, by the next "
                "call; make it once, where the object is set up, by hand",
            )
        place = self.early or self.made_before or setup.statement  # (the line comes before it)
        early = next(
            (n for n in self._subtree(home.body) if isinstance(n, cst.Return)
             and self.order[id(n)] < self.order[id(place)]
             and not self.within(n, place)
             and self.function(n) is home),
            None,
        )  # fmt: skip
        if early is not None:
            self.problem(
                early,
                f"`{name}` can return (line {self.line(early)}) before the line that would "
                "make the GradScaler its other methods read: on that path they would read an "
                "attribute never set; make it where the object is set up, by hand",
            )

    def _reaching(self, names: set[str]) -> list[str]:
        """``names`` and the module-level functions of this file that call one of them by
        name, directly or through each other (``fit`` -> ``run_epoch``): a caller elsewhere of
        any of them reaches what they read."""
        defs = [s for s in self.module.body if isinstance(s, cst.FunctionDef)]
        calls = {
            f.name.value: {
                n.func.value for n in self._subtree(f)
                if isinstance(n, cst.Call) and isinstance(n.func, cst.Name)
            }
            for f in defs
        }  # fmt: skip
        return sorted(reaching(calls, names))

    def _module_scaler_shared(self, setup: _Setup, uses: list[cst.Call]) -> None:
        """The script's code makes the GradScaler as a module name its functions read: another
        file of the project that calls one of them (``from trainer import run_epoch`` in a
        script that initializes apex itself) reads a name that file's run never made."""
        if self.path is None:
            return
        readers = {f.name.value for u in uses if (f := self.top_function(u))}
        names = self._reaching(readers)
        outside = users_on_disk(self.path, names) if names else []
        if not outside:
            return
        other, line, name = outside[0]
        shown = os.path.relpath(other, os.path.dirname(os.path.abspath(self.path)))
        self.problem(
            setup.statement,
            f"`{name}` would read{'' if name in readers else ', through what it calls,'} the "
            "GradScaler that this file's module-level code makes "
            f"(line {self.line(setup.statement)}), but {shown}:{line} calls it, where that code "
            "may not have run (a script's main block runs only when it is the script run): "
            "rewrite them together, passing the GradScaler there, by hand",
        )

    def _scope(self, setup: _Setup, uses: list[cst.Call]) -> None:
        home = self.home = setup.home
        if isinstance(home, cst.ClassDef):  # a class that gains an `__init__` (_added_init)
            self.mode, self.cls = "class", home
            return
        if home is self.module:
            self._module_scaler_shared(setup, uses)
            return
        outside = [u for u in uses if not self.within(u, home)]
        self.mode = "function"
        family = self.family_linked("caller")
        if not outside and not family:
            return
        holder = self.parent(self.parent(home))
        if isinstance(holder, cst.ClassDef) and home.params.params:
            self.mode, self.cls = "class", holder
            self.family = self.derived({holder.name.value})
            self._once_per_object(setup, home)
            self._overrides(home.name.value, home.params.params[0].name.value)
            if self._default_in_init(holder, home, uses):
                setup.by_scaler = True  # (an object that never made it casts nothing either)
            if family and self.name != "scaler":
                self.problem(
                    setup.statement,
                    f"the classes derived from `{holder.name.value}` in "
                    f"{self.link.other(self.role)} read the GradScaler as `self.scaler`, a name "
                    "in use here: make it under another name in them all by hand",
                )
            elif family:
                self.plan.notes.append(
                    f"the GradScaler is kept on the object, `self.scaler`, for the classes "
                    f"derived from `{holder.name.value}` in {self.link.other(self.role)}, "
                    "rewritten in the same run"
                )
            helpers: dict[int, bool] = {}
            for use in outside:
                if any(self.method_of(use, c) for c in (holder, *self.family)):
                    continue
                helper = self.top_function(use)
                if helper is not None:
                    if id(helper) not in helpers:
                        helpers[id(helper)] = self._class_helper(helper, (holder, *self.family))
                    if helpers[id(helper)]:
                        continue
                self.problem(
                    use,
                    f"`amp` is used outside class `{holder.name.value}`, whose "
                    "`self.scaler` replaces `amp.initialize`, in code its methods do not call "
                    "by name (or a `functools.partial` of it) alone: pass the GradScaler by "
                    "hand",
                )
            return
        pending: list[cst.FunctionDef] = []
        methods = []  # uses in a class: only module state reaches them
        for use in outside:
            top = self.top_function(use)
            if top is None:
                methods.append(use)
            else:
                pending.append(top)
        if methods and self.parent(home) is not self.module:
            for use in methods:
                self.problem(use, "`amp` is used in a class while `amp.initialize` is not")
        saved = (dict(self.plan.edits), list(self.plan.problems), list(self.plan.notes))
        readers = sorted({f.name.value for f in pending})
        self._thread(pending, home)
        unreached = methods or len(self.plan.problems) > len(saved[1])
        if unreached and self.parent(home) is self.module:
            # the functions that scale are not all reached from `home` with the scaler in hand:
            # the GradScaler becomes module state, as apex's amp state was process state
            self.plan.edits, self.plan.problems, self.plan.notes = saved
            self.threaded = set()
            self._global_scaler(setup)
            self._initialized_elsewhere(readers, home)

    def _class_helper(self, helper: cst.FunctionDef, classes: tuple) -> bool:
        """A module-level function that scales for the class that keeps ``self.scaler``
        (denoising-diffusion's ``loss_backwards``, bound by ``partial(loss_backwards,
        self.fp16)`` in the trainer, the 66th review): it takes a ``scaler`` parameter, and
        every use of it, each a call in a method of ``classes`` or the first argument of a
        ``functools.partial`` there, passes ``<self>.scaler``. False (nothing planned) where a
        use is anything else, or another file uses it."""
        name = helper.name.value
        planned: list[tuple[cst.Call, str]] = []
        for ref in self._references(name):
            call = self.parent(ref)
            if not isinstance(call, cst.Call):
                arg = call if isinstance(call, cst.Arg) else None
                call = self.parent(arg) if arg is not None else None
                if not (
                    isinstance(call, cst.Call)
                    and call.args
                    and call.args[0] is arg
                    and "functools.partial" in self.qualified(call.func)
                ):
                    return False
            elif call.func is not ref:
                return False
            method = next((m for c in classes if (m := self.method_of(call, c))), None)
            if method is None or not method.params.params:
                return False
            planned.append((call, method.params.params[0].name.value))
        if not planned or self._called_elsewhere(name) or wrapping_decorator(self.module, helper):
            return False
        if self.name in _parameter_names(helper.params):
            return False
        for call, me in planned:
            value = f"{me}.{self.name}"
            self.plan.edits[call] = lambda u, v=value: self._pass_scaler(u, value=v)
        self.plan.edits[helper.params] = self._add_parameter
        self.stored_access[id(helper)] = self.name
        self.note_once(
            f"`{name}` gets a `{self.name}` parameter, given `self.{self.name}` where the class "
            "calls it (or binds it with `functools.partial`)"
        )
        return True

    def _overrides(self, home: str, me: str) -> None:
        """A class of the family that overrides ``home`` (the method that makes the GradScaler)
        without calling it: its objects would never make the GradScaler the inherited methods
        read (under apex they ran uninitialized, unscaled); the override must call
        ``super().<home>(...)`` as a statement of its own."""
        for cls in self.family:
            method = defined_method(cls, home)
            if method is None:
                continue
            calls = any(
                isinstance(n, cst.Expr)
                and isinstance(n.value, cst.Call)
                and calls_up(self.module, n.value, home, cls)
                and self.function(n) is method
                for n in self._subtree(method.body)
            )
            if not calls:
                self.problem(
                    method,
                    f"`{cls.name.value}.{home}` overrides the method that would make "
                    f"`{me}.scaler` without calling `super().{home}(...)`: its objects would "
                    "read a GradScaler never made; make it there too, by hand",
                )

    def _default_in_init(self, holder: cst.ClassDef, home: cst.FunctionDef, uses: list) -> bool:
        """A method other than ``__init__`` makes ``self.scaler`` where ``initialize`` was
        (PrivacyQA's ``activate_fp16``) while other methods read it: an object whose driver
        never calls that method (training with fp16 off) would raise AttributeError there, where
        apex's ``scale_loss`` without ``initialize`` passed the loss through. ``__init__`` first
        makes a disabled one, which does the same (scale and step pass through); the method's
        own replaces it, and the regions follow the scaler (``is_enabled()``): such an object
        casts nothing either, as apex did not. Where the class has no ``__init__`` of its own,
        it is stated. True: the disabled default is made."""
        if home.name.value == "__init__":
            return False
        readers = {id(f): f for u in uses if isinstance(f := self.function(u), cst.FunctionDef)
                   and f is not home}  # fmt: skip
        if all(self._called_only_from(reader, home) for reader in readers.values()):
            return False  # (transformers' `_training_step`: only `train` calls it, after it)
        init = defined_method(holder, "__init__")
        if init is None or not init.params.params or init.decorators:
            self.plan.notes.append(
                f"`self.{self.name}` is made by `{home.name.value}` only: an object whose "
                f"driver never calls it reads no GradScaler (AttributeError), where apex passed "
                f"the loss through; make a disabled one where the object is set up to keep that"
            )
            return False
        me = init.params.params[0].name.value
        if any(  # `__init__` itself calls it (mt-dnn's `self._setup_optim()`): always made
            isinstance(statement, cst.SimpleStatementLine)
            and isinstance(expr := statement.body[0], cst.Expr)
            and isinstance(expr.value, cst.Call)
            and _code(self.module, expr.value.func) == f"{me}.{home.name.value}"
            for statement in init.body.body
        ):
            return False
        line = cst.parse_statement(
            f'{me}.{self.name} = torch.amp.GradScaler("cuda", enabled=False)\n'
        )
        inner = self.plan.edits.get(init.body)

        def first(u: cst.IndentedBlock) -> cst.IndentedBlock:
            u = inner(u) if inner is not None else u
            body = list(u.body)
            at = 0
            for statement in body[:2]:  # after a docstring and a `super().__init__(...)`
                simple = isinstance(statement, cst.SimpleStatementLine)
                small = statement.body[0] if simple else None
                expr = small.value if isinstance(small, cst.Expr) else None
                if isinstance(expr, cst.SimpleString | cst.ConcatenatedString) or (
                    isinstance(expr, cst.Call)
                    and _code(self.module, expr.func).replace(" ", "").startswith("super(")
                ):
                    at += 1
                else:
                    break
            return u.with_changes(body=[*body[:at], line, *body[at:]])

        self.plan.edits[init.body] = first
        self.plan.notes.append(
            f"`__init__` first makes `{me}.{self.name}` disabled, which `{home.name.value}` "
            "replaces: an object that never calls it trains as apex did without `initialize` "
            "(the loss passed through, plain steps, no casts: the autocast regions follow "
            f"`{me}.{self.name}.is_enabled()`)"
        )
        return True

    def _called_only_from(self, method: cst.FunctionDef, home: cst.FunctionDef) -> bool:
        """``method`` is called in this file, only from ``home`` (``self._training_step(...)``
        in ``train``), and its name is private: nothing else can reach it first."""
        name = method.name.value
        if not name.startswith("_") or name.startswith("__"):
            return False
        calls = [
            n for n in self.nodes
            if isinstance(n, cst.Attribute) and n.attr.value == name
        ]  # fmt: skip
        return bool(calls) and all(
            isinstance(self.parent(c), cst.Call) and self.within(c, home) for c in calls
        )

    def _global_scaler(self, setup: _Setup) -> None:
        """A disabled module-level GradScaler before ``home``, which rebinds it (``global``)
        where ``initialize`` was; every function of the file reads it, and autocast asks it."""
        home, name = setup.home, self.name
        self._called_once(home)
        self.mode, setup.by_scaler, self.global_home = "module", True, home
        placeholder = cst.parse_statement(f'{name} = torch.amp.GradScaler("cuda", enabled=False)\n')
        declaration = cst.parse_statement(f"global {name}\n")
        before = self.plan.edits.get(home)

        def define(u: cst.FunctionDef) -> cst.FlattenSentinel:
            u = before(u) if before is not None else u
            line = placeholder.with_changes(leading_lines=u.leading_lines)
            return cst.FlattenSentinel([line, u.with_changes(leading_lines=[cst.EmptyLine()] * 2)])

        inner = self.plan.edits.get(home.body)

        def declare(u: cst.IndentedBlock) -> cst.IndentedBlock:
            u = inner(u) if inner is not None else u
            body = list(u.body)
            at = 1 if body and is_docstring(body[0]) else 0
            return u.with_changes(body=[*body[:at], declaration, *body[at:]])

        self.plan.edits[home] = define
        self.plan.edits[home.body] = declare
        self.plan.notes.append(
            f"apex's amp state was process-wide, and the functions that scale the loss are not "
            f"all called from `{home.name.value}` with the GradScaler in hand: it is module "
            f"state here, `{name}` (disabled until `{home.name.value}` creates it where "
            "`amp.initialize` was; `global` there), read by every function of this file"
        )

    def _called_once(self, home: cst.FunctionDef) -> None:
        """The GradScaler is made before the ``if`` around ``initialize``, each time ``home``
        runs: a second call (``setup(critic, copt, False)`` after ``setup(model, opt, fp16)``,
        the 82nd review) would replace the module's GradScaler with one turned off, where
        apex, not initialized again, kept its amp state. Refused where the run calls it more
        than once in one file (or hands it on, or calls it in a loop)."""
        refs = list(self._references(home.name.value))
        shared = self.link.calls if self.link and self.link.shared else ()
        calls = [r for r in refs if isinstance(self.parent(r), cst.Call)]
        looped = [
            r for r in calls
            if any(isinstance(a, cst.For | cst.While) for a in self.ancestors(r))
        ]  # fmt: skip
        count = max([len(calls), *shared])  # (each importer a script of its own: DPR's two)
        if self.made_before is None:
            return  # (made where `initialize` ran: apex reset its loss scale there too, each
            # call; only one made before the `if` runs where apex did not initialize)
        if count > 1 or looped or len(calls) != len(refs):
            where = f"{count} times" if count > 1 else "in a loop" if looped else "as a value"
            self.problem(
                home,
                f"`{home.name.value}` makes the module's GradScaler where `amp.initialize` was, "
                f"and {'a file of ' if count > len(calls) else ''}this run calls it {where}: "
                "each call would make it again (turned off, "
                "or with its loss scale reset, by the next), where apex kept one amp state "
                "for the process; make the GradScaler once, by hand",
            )

    def _initialized_elsewhere(self, readers: list[str], home: cst.FunctionDef) -> None:
        """A module on disk that calls ``amp.initialize`` itself and calls this file's
        functions that would read its module GradScaler (bonito: ``cli/tune.py`` initializes
        and calls ``training.train``): under apex they used that module's amp state; the
        GradScaler they would read is made, enabled, only by ``home``, which it never calls."""
        if self.path is None or not readers:
            return
        for other, line, name in users_on_disk(self.path, self._reaching(set(readers))) or ():
            data = _read(other)
            parsed = _parsed(other, data) if b"initialize" in data else None
            if parsed is None or "initialize" not in parsed.members:
                continue
            shown = os.path.relpath(other, os.path.dirname(os.path.abspath(self.path)))
            self.problem(
                home,
                f"{shown} initializes apex amp itself and calls `{name}` ({shown}:{line}), which "
                f"would read{'' if name in readers else ', through what it calls,'} this file's "
                "GradScaler, made (enabled) only by "
                f"`{home.name.value}`: migrate them together by hand",
            )
            return

    def _thread(self, pending: list[cst.FunctionDef], home: cst.CSTNode | None) -> None:
        """Give each function in ``pending`` a scaler parameter and pass it at every call in
        the file, making the callers' functions take it too (up to ``home``)."""
        linked = self.link.functions if self.link and self.role == "callee" else ()
        while pending:
            function = pending.pop()
            if function in self.threaded or id(function) in self.stored_access:
                continue  # (one that reaches the scaler already: a parameter apex's module
                # was handed through, now the GradScaler's; a second one is a SyntaxError)
            self.threaded.add(function)
            called = False
            for ref in self._references(function.name.value):
                call = self.parent(ref)
                if not (isinstance(call, cst.Call) and call.func is ref):
                    self.problem(ref, f"`{function.name.value}` is used as a value, so the "
                                 "GradScaler cannot be passed to it")  # fmt: skip
                    continue
                caller = self.function(call)
                if caller is self.module:
                    self.problem(call, f"`{function.name.value}` is called at module level, "
                                 "where there is no GradScaler")  # fmt: skip
                    continue
                if not self.within(caller, home):
                    top = self.top_function(caller)
                    if top is None:
                        self.problem(call, f"`{function.name.value}` is called from a method")
                        continue
                    pending.append(top)
                called = True
                self.plan.edits[call] = self._pass_scaler
            if not called and function.name.value not in linked and home is not None:
                maker = f"`{home.name.value}`" if isinstance(home, cst.FunctionDef) else "it"
                # nothing in the file hands it the scaler that `home` makes: no call of it
                # runs from `home`, so a parameter would have to come from outside
                self.problem(
                    function,
                    f"`{function.name.value}` uses apex amp but is not called from "
                    f"{maker}, which makes the GradScaler, nor from any function of this file",
                )
            self._refuse_wrapped(function)
            self.plan.edits[function.params] = self._add_parameter
        unlinked = [
            f.name.value for f in sorted(self.threaded, key=lambda f: self.order[id(f)])
            if f.name.value not in linked and self.parent(f) is self.module
        ]  # fmt: skip
        outside = users_on_disk(self.path, unlinked) if self.path and unlinked else []
        for other, line, name in outside or ():  # a caller the rewrite does not update: TypeError
            shown = os.path.relpath(other, os.path.dirname(os.path.abspath(self.path)))
            self.problem(
                home if home is not None else self.module,
                f"`{name}` would get a `{self.name}` parameter, but {shown}:{line} calls it "
                "and is not rewritten with this file (it uses no apex amp): pass the "
                "GradScaler there by hand, or keep the scaler where both can read it",
            )
        for function in sorted(self.threaded, key=lambda f: self.order[id(f)]):
            if function.name.value in linked:  # _linked_setup's note says who passes it
                continue
            note = (
                f"`{function.name.value}` gets a `{self.name}` parameter, passed at every call "
                "in this file (callers in other files must pass it too)"
            )
            self.note_once(note)

    def _refuse_wrapped(self, function: cst.FunctionDef) -> None:
        """A decorated function is called through its decorator's wrapper (q17: a wrapper
        that takes the same parameters and passes `fp16 and epoch != 1` on): the parameter the
        rewrite adds reaches it only where that wrapper passes it on."""
        wrapper = wrapping_decorator(self.module, function)
        if wrapper is not None:
            self.problem(
                function,
                f"`{function.name.value}` would get a `{self.name}` parameter, but it is "
                f"decorated (`@{wrapper}`): its callers call the decorator's wrapper, which "
                "the rewrite does not follow (it may not pass a new parameter on, or may change "
                "the others): pass the GradScaler by hand",
            )

    def _references(self, name: str) -> Iterator[cst.Name]:
        """The reads of ``name``, less those a parameter of that name shadows and, where the
        module defines the name itself, those a nested def or a local import of it in a
        function around the read shadows (a closure's own name is read where it is defined)."""
        module_level = any(
            isinstance(s, cst.FunctionDef | cst.ClassDef) and s.name.value == name
            for s in self.module.body
        )
        for node in self.spelled[0].get(name, ()):
            parent = self.parent(node)
            if (
                (isinstance(parent, cst.Attribute) and parent.attr is node)
                or (isinstance(parent, cst.Arg) and parent.keyword is node)
                or isinstance(parent, cst.FunctionDef | cst.Param | cst.ImportAlias)
            ):
                continue
            if any(
                isinstance(a, cst.FunctionDef | cst.Lambda)
                and (
                    name in _parameter_names(a.params)
                    or (module_level and self._binds_inside(a, name))
                )
                for a in self.ancestors(node)
            ):  # (a parameter of that name: `load_examples(seed, evaluate=False)`, 63rd F3; a
                # nested def or a local import of it: the 65th review's s3, s4)
                continue
            yield node

    def _binds_inside(self, function: cst.FunctionDef | cst.Lambda, name: str) -> bool:
        """``function`` binds ``name`` itself: a def or class in it, or an import there."""
        if isinstance(function, cst.Lambda):
            return False
        if id(function) not in self._inner_names:  # (read per reference: once per function)
            found: set[str] = set()
            for node in self._subtree(function.body):
                if isinstance(node, cst.FunctionDef | cst.ClassDef):
                    bound = node.name
                elif isinstance(node, cst.ImportAlias):
                    bound = node.asname.name if node.asname else node.name
                else:
                    continue
                if isinstance(bound, cst.Name) and self.function(node) is function:
                    found.add(bound.value)
            self._inner_names[id(function)] = found
        return name in self._inner_names[id(function)]

    @functools.cached_property
    def _inner_names(self) -> dict[int, set[str]]:
        return {}

    def _pass_scaler(
        self, call: cst.Call, keyword: str | None = None, value: str | None = None
    ) -> cst.Call:
        """``call`` with ``<keyword>=<value>`` appended (keyword: the scaler's own name; value:
        how the call reaches the scaler, by default its name)."""
        name = cst.Name(keyword or self.name)
        reached = cst.parse_expression(value) if value else cst.Name(self.name)
        arg = cst.Arg(keyword=name, value=reached, equal=_NO_SPACE)
        return call.with_changes(args=_appended(call.args, arg))

    def _add_parameter(self, params: cst.Parameters) -> cst.Parameters:
        """A plain last parameter; keyword-only after defaults or ``*args``. The layout is kept:
        one parameter per line stays so, each line's comment stays on its line, a closing
        parenthesis on a line of its own stays there."""
        new = cst.Param(cst.Name(self.name))
        plain = not any(p.default for p in params.params) and not isinstance(
            params.star_arg, cst.Param | cst.ParamStar
        )
        slash = params.posonly_ind if isinstance(params.posonly_ind, cst.ParamSlash) else None
        if plain and params.star_kwarg is None and not params.kwonly_params:
            inner = slash.comma if slash is not None and not params.params[:-1] else None
            return params.with_changes(params=_appended(params.params, new, inner))
        star = params.star_arg if isinstance(params.star_arg, cst.Param | cst.ParamStar) else None
        if params.kwonly_params:  # after the ones there, laid out as they are
            inner = star.comma if star is not None and len(params.kwonly_params) == 1 else None
            return params.with_changes(kwonly_params=_appended(params.kwonly_params, new, inner))
        # what the new ones follow: the last parameter, or the `*args` there is
        before = [*params.posonly_params, *([slash] if slash else []), *params.params]
        before += [star] if star is not None else []
        last = before[-1] if before else None
        own = last.comma if last is not None else None
        inner = before[-2].comma if len(before) > 1 else None
        if isinstance(own, cst.Comma) and isinstance(
            own.whitespace_after, cst.ParenthesizedWhitespace
        ):
            if params.star_kwarg is not None:  # `..., **kwargs`: the new ones are inner too
                laid, end = own, uncommented(own)
            else:  # a trailing comma: the last one's line keeps its comment
                laid = inner_comma(own, inner)
                end = uncommented(own)
            marker = star if star is not None else cst.ParamStar(comma=uncommented(laid))
            return _placed(params, last, laid, marker, new.with_changes(comma=end))
        tail = getattr(last, "whitespace_after_param", None)
        if (
            star is None
            and params.star_kwarg is None
            and isinstance(last, cst.Param)
            and isinstance(tail, cst.ParenthesizedWhitespace)
        ):  # `last=None\n):`: the line break stays before the closing parenthesis
            space = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            return params.with_changes(
                params=[
                    *params.params[:-1],
                    last.with_changes(comma=space, whitespace_after_param=cst.SimpleWhitespace("")),
                ],
                star_arg=cst.ParamStar(comma=space),
                kwonly_params=[new.with_changes(whitespace_after_param=tail)],
            )
        return params.with_changes(star_arg=star or cst.ParamStar(), kwonly_params=[new])


def _parameter_names(params: cst.Parameters) -> set[str]:
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return {p.name.value for p in every}


def _placed(
    params: cst.Parameters,
    last: cst.CSTNode,
    laid: cst.Comma,
    marker: cst.Param | cst.ParamStar,
    new: cst.Param,
) -> cst.Parameters:
    """``params`` with ``last`` (the last parameter or ``*args``) given the comma ``laid``,
    ``marker`` as its ``*`` (or ``*args``, which is ``last`` itself) and ``new`` keyword-only."""
    if last is params.star_arg:
        return params.with_changes(star_arg=last.with_changes(comma=laid), kwonly_params=[new])
    if isinstance(last, cst.ParamSlash):
        return params.with_changes(
            posonly_ind=last.with_changes(comma=laid), star_arg=marker, kwonly_params=[new]
        )
    listed = "params" if params.params else "posonly_params"
    items = list(getattr(params, listed))
    items[-1] = last.with_changes(comma=laid)
    return params.with_changes(**{listed: items}, star_arg=marker, kwonly_params=[new])


def _inverted(node: cst.If) -> cst.If:
    """``if t: <emptied> else: <body>`` as ``if not t: <body>``; ``if t: <emptied> elif
    u: ...`` as ``if not t:`` over ``if u: ...``."""
    test = node.test
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        negated = test.expression.with_changes(lpar=[], rpar=[])
    else:
        simple = isinstance(test, cst.Name | cst.Attribute | cst.Call | cst.Subscript)
        inner = test if simple or test.lpar else test.with_changes(
            lpar=[cst.LeftParen()], rpar=[cst.RightParen()]
        )  # fmt: skip
        negated = cst.UnaryOperation(operator=cst.Not(), expression=inner)
    if isinstance(node.orelse, cst.If):
        body = cst.IndentedBlock(body=[node.orelse.with_changes(leading_lines=())])
        return node.with_changes(test=negated, body=body, orelse=None)
    return node.with_changes(test=negated, body=node.orelse.body, orelse=None)


def _unbracketed(code: str) -> str:
    """``code`` without its layout, its lists read as tuples and its outer parentheses: the
    same names in the same nesting compare equal (the names are paths: no call is read)."""
    return _bare(code).replace("[", "(").replace("]", ")").strip("()")


def _outcome(edit, node: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements ``node`` becomes under an earlier edit of the plan (none: itself)."""
    if edit is None:
        return [node]
    done = edit(node)
    if isinstance(done, cst.FlattenSentinel):
        return list(done.nodes)
    return [] if isinstance(done, cst.RemovalSentinel) else [done]
