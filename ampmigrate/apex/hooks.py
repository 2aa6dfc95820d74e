"""apex O1 in a runner's hooks (mmcv style): a script initializes amp and hands the model and
optimizer to a runner from a library; the runner runs the forward and calls a hook of the
project (``after_train_iter(self, runner)``), which scales ``runner.outputs["loss"]`` and steps
``runner.optimizer``. No call of the project links the two files (:mod:`ampmigrate.apex.links`
pairs them through apex's process-wide state); each gets the half of apex it held:

- the hook: a GradScaler of its own, made at the end of ``__init__`` and switched by the test the
  scaled backward runs under (``self.use_fp16``), so its other path steps plainly as it did;
- the script: ``initialize`` goes (the model it was given stays, ``model.cuda()``), and every
  statement after it in its function runs in one autocast region, as apex O1's patched torch
  functions did from ``initialize`` on: the runner's forward passes, validation included.
"""

from __future__ import annotations

import functools

import libcst as cst

from ampmigrate.apex.common import (
    _code,
    _Setup,
    _statements,
    defined_method,
    is_docstring,
    is_path,
    read_names,
)
from ampmigrate.apex.linkbase import _listed

# methods that only read what they are called on (`options.get("training").get("fp16")`)
_READS = frozenset({"get", "keys", "values", "items", "copy", "count", "index", "format"})


class RunnerHooks:
    """The runner-hook stage of ``_Planner`` (mixed into it)."""

    def _hook_setup(self, calls: dict[str, list[cst.Call]]) -> _Setup | None:
        """The hook side: ``self.scaler`` made at the end of the class's ``__init__``, enabled
        by the one test every scaled backward runs under, where ``__init__`` sets it."""
        cls = next(
            (s for s in self.module.body
             if isinstance(s, cst.ClassDef) and s.name.value == self.link.hook),
            None,
        )  # fmt: skip
        init = defined_method(cls, "__init__") if cls is not None else None
        if init is None and cls is not None and isinstance(cls.body, cst.IndentedBlock):
            return self._added_init(cls, calls)
        suite = init is not None and isinstance(init.body, cst.SimpleStatementSuite)
        if init is None or not init.params.params or suite:
            self.problem(
                self.plan.anchor,
                f"the class `{self.link.hook}` has no `__init__(self, ...)` block to make "
                "its GradScaler in: make `self.scaler` there by hand",
            )
            return None
        me = init.params.params[0].name.value
        if any(
            isinstance(n, cst.Attribute)
            and n.attr.value == "scaler"
            and isinstance(n.value, cst.Name)
            and n.value.value == me
            for n in self._subtree(cls)
        ):
            self.problem(
                self.plan.anchor,
                f"`{me}.scaler` is already used in `{self.link.hook}`: make its GradScaler "
                "under another name by hand",
            )
            return None
        self.name = "scaler"
        switch = self._hook_switch(calls.get("scale_loss", []), cls, init, me)
        if switch is False:
            return None
        enabled = f", enabled={switch}" if switch else ""
        line = cst.parse_statement(f'{me}.scaler = torch.amp.GradScaler("cuda"{enabled})\n')
        if any(isinstance(n, cst.Return) for n in self._subtree(init.body)):
            self.problem(
                init,
                f"`{self.link.hook}.__init__` returns early: make `self.scaler` there by hand",
            )
            return None
        previous = self.plan.edits.get(init.body)

        def append(u: cst.IndentedBlock) -> cst.IndentedBlock:
            u = previous(u) if previous is not None else u
            return u.with_changes(body=[*u.body, line])

        self.plan.edits[init.body] = append
        switched = f" (enabled by `{switch}`, the test its scaled backward runs under)"
        self.plan.notes.append(
            f"the class `{self.link.hook}`, which scales the loss, makes its own GradScaler in "
            "`__init__`"
            + (switched if switch else "")
            + f"; {self.link.other(self.role)} casts, in the same run"
        )
        last = _statements(init.body)[-1]
        return _Setup(last, init, set(), switch)

    def _added_init(self, cls: cst.ClassDef, calls: dict[str, list[cst.Call]]) -> _Setup | None:
        """A class that scales and has no ``__init__`` of its own (fast-reid's ``AMPTrainer``
        inherits its trainer's): it gains one that passes everything on to its base's and then
        makes ``self.scaler``, always on (no flag of its own can switch it: its objects ran
        only where the script had initialized amp, or raised in ``scale_loss``)."""
        scaled = calls.get("scale_loss", [])
        if any(
            isinstance(a, cst.If) and self.within(c, a.body) and self.within(a, cls)
            for c in scaled
            for a in self.ancestors(c)
        ):
            self.problem(
                scaled[0],
                f"the scaled backward of `{cls.name.value}` runs under an `if`, and the class "
                "has no `__init__` that sets a flag to switch its GradScaler: make "
                "`self.scaler` by hand",
            )
            return None
        derived = [
            c.name.value for c in self.derived({cls.name.value}) if defined_method(c, "__init__")
        ]
        if derived:
            self.problem(
                self.plan.anchor,
                f"`{cls.name.value}` has no `__init__` to make its GradScaler in, and "
                f"{_listed([f'`{d}`' for d in derived])}, derived from it, define their own: "
                "make `self.scaler` where each is built, by hand",
            )
            return None
        if any(
            isinstance(n, cst.Attribute) and n.attr.value == "scaler" for n in self._subtree(cls)
        ):
            self.problem(
                self.plan.anchor,
                f"`.scaler` is already used in `{cls.name.value}`: make its GradScaler under "
                "another name by hand",
            )
            return None
        self.name = "scaler"
        init = cst.parse_statement(
            "def __init__(self, *args, **kwargs):\n"
            "    super().__init__(*args, **kwargs)\n"
            '    self.scaler = torch.amp.GradScaler("cuda")\n'
        )
        body = list(cls.body.body)
        at = 1 if body and is_docstring(body[0]) else 0
        placed = init.with_changes(leading_lines=[cst.EmptyLine(indent=False)] if at else [])

        def add(u: cst.IndentedBlock) -> cst.IndentedBlock:
            items = list(u.body)
            if not at and items:
                items[0] = items[0].with_changes(
                    leading_lines=[cst.EmptyLine(indent=False), *items[0].leading_lines]
                )
            return u.with_changes(body=[*items[:at], placed, *items[at:]])

        self.plan.edits[cls.body] = add
        self.plan.notes.append(
            f"the class `{cls.name.value}`, which scales the loss, gains an `__init__` that "
            "passes its arguments on and makes its own GradScaler (always on: apex raised in "
            f"its `scale_loss` where nothing had initialized amp); {self.link.other(self.role)} "
            "casts, in the same run"
        )
        return _Setup(body[at] if at < len(body) else body[0], cls, set(), None)

    def _state_setup(self) -> _Setup | None:
        """A module of the hook link's amp state (``Link.state``): the runner class reaches
        the hook's GradScaler as ``self.scaler``, a property it gains that looks it up on the
        runner's hooks (apex's state was the process's; the hook holds the scaler now), and
        passes it to the checkpoint functions; a module of those functions gives each a
        ``scaler`` parameter."""
        cls = next(
            (s for s in self.module.body
             if isinstance(s, cst.ClassDef) and s.name.value == self.link.runner),
            None,
        )  # fmt: skip
        if cls is None:
            return self._linked_setup(self.link.helpers)
        if self.free_name("scaler") != "scaler" or isinstance(cls.body, cst.SimpleStatementSuite):
            self.problem(
                self.plan.anchor,
                f"the runner `{cls.name.value}` cannot gain a `scaler` property (the name is "
                "in use here): hand it the hook's GradScaler by hand",
            )
            return None
        self.mode, self.cls, self.name = "class", cls, "scaler"
        spellings = set(self.link.helper_spellings)
        for node in self._subtree(cls):
            if isinstance(node, cst.Call) and _code(self.module, node.func) in spellings:
                self.plan.edits[node] = functools.partial(
                    self._pass_scaler, keyword="scaler", value=self.access(node)
                )
        hook = self.link.hook
        found = cst.parse_statement(
            "@property\n"
            "def scaler(self):\n"
            "    # apex kept one loss scale for the whole process; the GradScaler that\n"
            f"    # replaces it is that of the hook scaling the loss ({hook}),\n"
            "    # registered on this runner (a disabled one where there is none)\n"
            "    return next(\n"
            '        (hook.scaler for hook in self.hooks if hasattr(hook, "scaler")),\n'
            '        torch.amp.GradScaler("cuda", enabled=False),\n'
            "    )\n"
        ).with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        self.plan.edits[cls.body] = lambda u: u.with_changes(body=[*u.body, found])
        helpers = _listed([f"`{n}`" for n in self.link.helpers]) if self.link.helpers else ""
        self.plan.notes.append(
            f"the runner `{cls.name.value}` reaches the GradScaler of the hook `{hook}` on its "
            "registered hooks (its new `scaler` property), which must be registered before "
            "`resume` (a runner without that hook saves and loads a disabled GradScaler's empty "
            "state)" + (f", and passes it to {helpers}" if helpers else "")
        )
        return _Setup(_statements(cls.body)[0], self.module, set(), None, by_scaler=True)

    def _hook_switch(self, scaled: list[cst.Call], cls, init, me: str) -> str | bool | None:
        """The test every scaled backward of the hook runs under (None: they always run);
        False, with the blocker, where ``__init__`` cannot give the scaler that switch: it
        must be ``self.<flag>`` set in ``__init__`` and nowhere else in the class."""
        tests = set()
        for call in scaled:
            statement = self.statement(call)
            holder = self.parent(self.parent(statement))
            tests.add(
                _code(self.module, holder.test)
                if isinstance(holder, cst.If) and self.within(statement, holder.body)
                else None
            )
        if tests == {None}:
            return None
        shown = " and ".join(f"`if {t}:`" for t in sorted(t for t in tests if t))
        test = tests.pop() if len(tests) == 1 else None
        flag = cst.parse_expression(test) if test else None
        if not (
            isinstance(flag, cst.Attribute)
            and isinstance(flag.value, cst.Name)
            and flag.value.value == me
        ):
            function = self.function(scaled[0])
            method = function.name.value if isinstance(function, cst.FunctionDef) else "it"
            self.problem(
                scaled[0],
                f"the scaled backward{'s' if len(scaled) > 1 else ''} of `{cls.name.value}` "
                f"run{'' if len(scaled) > 1 else 's'} under {shown}, not under a flag its "
                "`__init__` sets (`if self.fp16:`), so a GradScaler made there could not be "
                "switched off where apex was: it and its forwards' autocast would be on "
                "wherever the class is used, also where nothing initializes amp (apex ran "
                f"those forwards in float32); give `{method}` a `scaler` parameter that the "
                "callers that initialize amp pass (None elsewhere), by hand",
            )
            return False
        stores = [  # (also an element of a tuple target: PointRCNN's `self.model,
            n  # self.optimizer, self.use_amp = model, optimizer, use_amp`)
            for n in self._subtree(cls)
            if isinstance(n, cst.AssignTarget | cst.AugAssign | cst.AnnAssign)
            and test in _target_codes(self.module, n.target)
        ]
        if not stores or any(not self.within(n, init) for n in stores):
            self.problem(
                scaled[0],
                f"`{test}` is not set in `__init__` alone, so the GradScaler made there cannot "
                "be switched by it: make it by hand",
            )
            return False
        return test

    def _changes(self, condition: str, statements: list[cst.CSTNode]) -> bool:
        """One of ``statements`` may change what ``condition`` reads: it assigns to a name it
        reads (or to an item or attribute of one), or calls a method of one."""
        expression = cst.parse_expression(condition)
        read = read_names(expression)
        # the attribute paths it reads (`args.use_apex`); a store to another attribute of the
        # same object (`args.batch_size = ...`) leaves them as they were
        paths = {
            _code(self.module, n) for n in self._subtree(expression)
            if isinstance(n, cst.Attribute) and is_path(n)
        }  # fmt: skip
        heads = {id(n.value) for n in self._subtree(expression) if isinstance(n, cst.Attribute)}
        bare = {  # names it reads otherwise than as the head of an attribute
            n.value for n in self._subtree(expression)
            if isinstance(n, cst.Name) and id(n) not in heads
        }  # fmt: skip

        def root(node: cst.CSTNode) -> str | None:
            while isinstance(node, cst.Attribute | cst.Subscript):
                node = node.value
            return node.value if isinstance(node, cst.Name) else None

        def touches(target: cst.BaseExpression) -> bool:
            if root(target) not in read:
                return False
            if not (isinstance(target, cst.Attribute) and is_path(target)):
                return True  # an item of what it reads, or the name itself
            path = _code(self.module, target)
            return root(target) in bare or any(
                p == path or p.startswith(path + ".") or path.startswith(p + ".") for p in paths
            )

        for statement in statements:
            for node in self._subtree(statement):
                if isinstance(node, cst.AssignTarget | cst.AugAssign) and (
                    touches(node.target) or self.facts(node).assigned & read
                ):
                    return True
                if (
                    isinstance(node, cst.Call)
                    and isinstance(node.func, cst.Attribute)
                    and root(node.func.value) in read
                    and node.func.attr.value not in _READS
                ):
                    return True
        return False

    def _casts_only(
        self, setup: _Setup, small, models, optimizer, holder, inner, chain: list[cst.If]
    ) -> None:
        """The script side: ``initialize`` goes (its model expression stays bound), and the rest
        of its function runs in autocast, enabled by the condition ``initialize`` ran under
        (the tests of ``chain``, the nested ``if``s around it, outermost first)."""
        assigned = self._rebind(small, models, optimizer)
        self.plan.edits[inner] = lambda _u: (
            cst.FlattenSentinel(assigned) if assigned else cst.RemoveFromParent()
        )
        top = holder if isinstance(holder, cst.If) else setup.statement
        if isinstance(holder, cst.If):
            rest = [s for s in holder.body.body if s is not inner and s not in self.removed]
            if not rest and not assigned and holder.orelse is None:
                self.plan.edits[holder] = lambda _u: cst.RemoveFromParent()
                self.footers.append(holder)
            after = [s for h in chain or [holder] for s in h.body.body
                     if s is not inner and s not in chain]  # fmt: skip
            if self._changes(setup.condition, after):
                self.problem(
                    setup.statement,
                    f"`{setup.condition}` is changed inside its `if`: autocast after it could "
                    "not be switched by the value apex was: migrate this file by hand",
                )
                return
        home = setup.home
        if isinstance(home, cst.FunctionDef) and home.name.value == "__init__":
            self.problem(
                setup.statement,
                "`amp.initialize` runs in a constructor, `__init__`: the training it sets up "
                "runs later, in other methods, where an autocast region after `initialize` "
                "would not reach (apex's casts lasted from `initialize` on): place the region "
                "around the training by hand",
            )
            return
        body = _statements(home.body) if isinstance(home, cst.FunctionDef) else None
        if body is None or top not in body:
            where = (
                "is not a statement of its function's body (or of an `if` there)"
                if isinstance(home, cst.FunctionDef)
                else "runs at module level, not in a function"
            )
            self.problem(
                setup.statement,
                f"`amp.initialize` {where}: the autocast region that replaces apex's casts "
                "from it on cannot be placed; migrate this file by hand",
            )
            return
        tail = body[body.index(top) + 1 :]
        if not tail:
            self.problem(
                setup.statement,
                "nothing runs after `amp.initialize` in its function: the runner that trains "
                "is driven elsewhere, where the autocast region has to go; migrate by hand",
            )
            return
        returned = next(
            (n for s in tail for n in self._subtree(s)
             if isinstance(n, cst.Return) and n.value is not None and self.function(n) is home),
            None,
        )  # fmt: skip
        if returned is not None:  # (the 70th review's p27: `return AMPTrainer(model, ...)`)
            self.problem(
                returned,
                f"`{home.name.value}` returns `{_code(self.module, returned.value)}` after "
                "`amp.initialize`: its caller may run the training with it after it returns, "
                "where an autocast region after `initialize` would not reach (apex's casts "
                "lasted from `initialize` on): place the region around the training by hand",
            )
            return
        if any(s in self.plan.edits for s in tail):
            self.problem(
                tail[0],
                "a statement after `amp.initialize` is rewritten too: place the autocast "
                "region by hand",
            )
            return
        nested = next(
            (n for s in tail for n in self._subtree(s)
             if isinstance(n, cst.Name | cst.Attribute)
             and _code(self.module, n).endswith("autocast")),
            None,
        )  # fmt: skip
        if nested is not None:
            self.problem(
                nested,
                f"`{_code(self.module, nested)}` is used after `amp.initialize`: apex cast there "
                "whatever autocast said, so an autocast region around it would not give apex's "
                "casts where that one turns them off; migrate this file by hand",
            )
            return
        condition = setup.condition
        if condition is not None:
            parsed = cst.parse_expression(condition)
            boolean = isinstance(parsed, cst.Comparison | cst.UnaryOperation) or (
                isinstance(parsed, cst.Call) and _code(self.module, parsed.func) == "bool"
            )
            condition = condition if boolean else f"bool({condition})"
        self.uncached.add(id(tail[0]))  # the runner's optimizer steps inside
        self._wrap(home.body, [tail], condition)
        self.plan.notes.append(
            f"everything after `amp.initialize` in `{home.name.value}` runs in one autocast "
            "region (the forward passes of the runner or trainer it drives), as apex O1's casts "
            "did from "
            "`initialize` on, with autocast's cache of float16 weights off "
            "(`cache_enabled=False`): the optimizer steps inside the region, and a cached copy "
            "would not see its updates (apex cleared its cache at each `scale_loss` exit); "
            f"the casts end when `{home.name.value}` returns, where apex's lasted "
            "for the rest of the process, and code the runner runs that turns autocast off "
            "itself runs in float32 there, where apex cast it regardless"
        )


def _target_codes(module: cst.Module, target: cst.BaseExpression) -> list[str]:
    """What an assignment target stores to, as spelled: itself, or each element of a tuple
    or list target (nested ones too)."""
    if isinstance(target, cst.Tuple | cst.List):
        return [c for e in target.elements for c in _target_codes(module, e.value)]
    return [_code(module, target)]
