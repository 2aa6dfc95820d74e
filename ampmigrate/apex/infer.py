"""apex O1 for inference: ``model = amp.initialize(model, opt_level="O1")``, no optimizer.

apex O1 patched torch's functions from ``initialize`` on, so every later forward ran in float16
where autocast runs it in float16. Nothing is scaled, so there is no GradScaler: the native
equivalent is an autocast region over the code that runs the model. autocast is dynamically
scoped (it covers the functions called inside it), so one region from the first to the last
statement of the function that uses the model covers every forward reached from there. The
rewrite is refused where that is not the whole story: the model leaves the function (returned,
stored on an object), a backward would run inside the region, or the level is not O1.

The same holds where ``initialize`` is given an optimizer that nothing can scale a loss for: no
``amp.scale_loss`` in the file, none in the modules it imports, and the optimizer is only asked
for its methods after it (never handed on, stored, returned), so apex only cast there.
"""

from __future__ import annotations

import libcst as cst

from ampmigrate.apex.common import _argument, initialize_arguments, without_optimizer
from ampmigrate.apex.forwards import _WRAPS
from ampmigrate.apex.initialize import _main_guard
from ampmigrate.apex.regions import _QUIET_METHODS, _unpacked
from ampmigrate.apex.users import users_on_disk
from ampmigrate.apex.verdict import APEX

_KNOWN = {"models", "opt_level", "verbosity", "enabled"}
# arguments an initialize that scales nothing ignores (the scale's), or that O1 fixes to None
_IDLE = {"loss_scale", "min_loss_scale", "max_loss_scale", "num_losses", "keep_batchnorm_fp32"}


class InferenceOnly:
    """The planner's mode for ``amp.initialize`` without an optimizer."""

    def _casts_alone(self, init: cst.Call) -> bool:
        """``model, opt = amp.initialize(model, opt, ...)`` where no code can scale a loss with
        ``opt``: nothing this file imports on disk calls apex (but the layers whose casts move
        with it: 58b's scene-graph test script), and every later use of ``opt``
        asks it for an attribute (``opt.step()``, ``opt.zero_grad()``); at module level, no
        other file of the project imports it either."""
        optimizer = _argument(init, "optimizers", 1)
        statement = self.statement(init)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        layers = self.casts.layers if self.casts is not None and not self.casts.broken else ()
        if not (
            self.siblings is not None  # (read: a file on disk)
            and all(s.path in layers for s in self.siblings)  # (58b: casts that move with it)
            and self.link is None
            and isinstance(optimizer, cst.Name)
            and isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Tuple)
            and [_name(e.value) for e in small.targets[0].target.elements]
            == [_name(_argument(init, "models", 0)), optimizer.value]
        ):
            return False
        home = self.function(init)
        scope = home if isinstance(home, cst.FunctionDef) else self.module
        body = scope.body.body if isinstance(scope, cst.FunctionDef) else scope.body
        if any(self.facts(s).backward for s in body):
            return False  # it trains: the regions go around its forwards, not the whole run
        for node in self._subtree(scope):
            if isinstance(node, cst.Global | cst.Nonlocal) and optimizer.value in {
                n.name.value for n in node.names
            }:
                return False
            if not (isinstance(node, cst.Name) and node.value == optimizer.value):
                continue
            parent = self.parent(node)
            if node is optimizer or self.within(node, small.targets[0]):
                continue
            if isinstance(parent, cst.AssignTarget) and isinstance(
                self.parent(parent), cst.Assign
            ):  # bound (`opt = torch.optim.SGD(...)`): what it is bound to is not handed on
                continue
            if not (isinstance(parent, cst.Attribute) and parent.value is node):
                return False  # handed on, stored or returned: a loss may be scaled with it
        if scope is self.module:
            return users_on_disk(self.path, [optimizer.value]) == []
        return True

    def _off_alone(self, init: cst.Call) -> bool:
        """``amp.initialize(..., opt_level="O0")`` with no other apex amp call in the file or
        what it imports: apex at O0 ran float32, cast nothing and scaled nothing (its loss
        scale 1.0), so the migration is to delete the call; the models and optimizers it
        returned are the ones it was given. False: not this shape (planned as usual)."""
        statement = self.statement(init)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        args, _ = initialize_arguments(init)
        if (
            self.siblings != []
            or self.link is not None
            or len(statement.body) != 1
            or not isinstance(small, cst.Assign | cst.Expr)
            or any(a.star for a in init.args)
            or set(args) - {"models", "optimizers", "opt_level", "loss_scale", "verbosity"}
        ):
            return False
        if isinstance(small, cst.Expr) or _same_names(self.module, small, args):
            kept = []
        elif args.get("optimizers") is not None:
            kept = self._rebind(small, args.get("models"), args.get("optimizers"))
            if not kept:
                return False  # (what it binds is not the names it was given: not followed)
        elif len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
            model = self.module.code_for_node(args["models"])
            kept = [cst.parse_statement(f"{small.targets[0].target.value} = {model}\n")]
        else:
            return False
        if kept:
            self.plan.edits[statement] = lambda _u: cst.FlattenSentinel(kept)
        else:
            self._remove_statement(statement)
        self.plan.min_torch = None  # nothing new is written
        self.plan.summary = (
            'apex at opt_level "O0" runs in float32, casts nothing and scales nothing: '
            "`amp.initialize` goes (it returned the models and optimizers it was given)"
        )
        return True

    def _casting_together(self, initialize: list[cst.Call], calls: dict) -> bool:
        """Several ``m = amp.initialize(m, opt_level="O1")`` for inference in one function,
        each under the same test as the first or none (SemanticPalette's testers, the 71st
        review): apex O1's casts are on for the process from the first that runs, so the later
        ones add nothing, and one region after the first covers every model's forwards."""
        if len(initialize) < 2 or set(calls) != {"initialize"} or self.kept or self.merged:
            return False
        first = initialize[0]
        test = self._held_by(first)
        for call in initialize:
            args, _ = initialize_arguments(call)
            level = args.get("opt_level")
            if not (
                without_optimizer(args)
                and set(args) == {"models", "opt_level"}
                and isinstance(level, cst.SimpleString)
                and level.evaluated_value == "O1"
                and self.function(call) is self.function(first)
                and not any(a.star for a in call.args)
            ):
                return False
            if call is first:
                continue
            statement = self.statement(call)
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            if not (
                len(statement.body) == 1
                and isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
                and isinstance(args["models"], cst.Name)
                and small.targets[0].target.value == args["models"].value
                and self._held_by(call) == test
                and self.order[id(call)] > self.order[id(first)]
            ):
                return False
        return True

    def _rebound_after(self, holder: cst.If) -> cst.CSTNode | None:
        """A target assigned after ``holder`` in its function that ``holder``'s test reads
        (``use_amp = False`` after ``if use_amp: initialize``, the 73rd review: the region's
        `enabled=use_amp` then read False where apex's casts were on)."""
        code = self.module.code_for_node
        read = {
            code(n) for n in self._subtree(holder.test) if isinstance(n, cst.Name | cst.Attribute)
        }
        scope = self.function(holder)
        after = self.order[id(holder)]
        for node in self._subtree(scope):
            target = (
                node.target
                if isinstance(node, cst.AssignTarget | cst.AugAssign | cst.AnnAssign)
                else None
            )
            for each in _unpacked([target]) if target is not None else ():
                if code(each) in read and self.order.get(id(each), -1) > after:
                    return each
        return None

    def _held_by(self, init: cst.Call) -> str | None:
        """The test of the ``if`` whose body holds ``init``'s statement (None: none)."""
        holder = self.parent(self.parent(self.statement(init)))
        if isinstance(holder, cst.If) and not _main_guard(self.module, holder):
            return self.module.code_for_node(holder.test)
        return None

    def _inference_only(
        self, init: cst.Call, extra: bool = False, also: list[cst.Call] | tuple = ()
    ) -> None:
        """``extra``: a second ``initialize``, for evaluation only, in another function than the
        training one (a script's test branch): its region is the rest of its own block, and the
        plan's summary stays the training one's. ``also``: later inference ``initialize`` calls
        of the same function and test (``_casting_together``), which go."""
        code = self.module.code_for_node
        args, _ = initialize_arguments(init)
        models = args.get("models")
        level = args.get("opt_level")
        switch = None  # the level's test where it is O1 or O0 (a flag, the setting)
        given = args.get("optimizers")
        for part in (models, given):  # (YOLO-V3's `eval.py`: an optimizer never made)
            broken = self._raises_name_error(
                init, part, "fix the original", local=True
            ) or self._never_set(part)
            if broken is not None:
                self.problem(init, broken)
                return
        alone = (
            "without an optimizer (inference only)"
            if without_optimizer(args)
            else f"whose optimizer `{code(given)}` no loss is scaled with (it only casts)"
        )
        if isinstance(level, cst.SimpleString) or level is None:
            if not (isinstance(level, cst.SimpleString) and level.evaluated_value == "O1"):
                self.problem(
                    init,
                    f"`amp.initialize` {alone} at "
                    f"opt_level `{code(level) if level is not None else 'O1 (implicit)'}`: only "
                    '"O1" (a literal, or a level the setting `apex-opt-level` declares O1) '
                    'maps to `torch.amp.autocast("cuda", dtype=torch.float16)` around the '
                    "forward; O2/O3 cast the model (`model.half()` and half inputs)",
                )
                return
        else:  # a level from a flag or a config, which the setting speaks for
            blockers = len(self.plan.problems)
            switch = self._level_switch(level, init)
            if switch is None and len(self.plan.problems) == blockers:
                switch = self._level_choices(level, init)
            if len(self.plan.problems) > blockers:
                return
        o1 = (isinstance(level, cst.SimpleString) and level.evaluated_value == "O1") or (
            self.declared is not None
        )
        for key in sorted(set(args) & _IDLE):
            value = code(args[key])
            if key == "keep_batchnorm_fp32" and not o1 and value != "None":
                continue
            del args[key]
            self.plan.notes.append(
                f"`{key}={value}` goes: "
                + (
                    "nothing is scaled here, so no loss scale is used"
                    if key != "keep_batchnorm_fp32"
                    else "it was None wherever apex O1 ran (O1 raises on any other value)"
                    + ("" if value == "None" or not self.declared else
                       f", every run being declared O1 or O0 ({self.declared}), and does "
                       "nothing under O0, whose model stays float32")
                )
            )  # fmt: skip
        if any(a.star for a in init.args) or set(args) - _KNOWN - {"optimizers"}:
            listed = (
                ", ".join(f"`{k}`" for k in sorted(set(args) - _KNOWN - {"optimizers"}))
                or "`*args`"
            )
            self.problem(
                init,
                f"`amp.initialize` {alone} sets {listed}, which an autocast "
                "region cannot express: migrate it by hand",
            )
            return
        statement = self.statement(init)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        optimizer = _argument(init, "optimizers", 1)
        rebinds = optimizer is not None or (
            isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
            and isinstance(models, cst.Name)
            and small.targets[0].target.value == models.value
        )
        listed = _listed_models(models, small, optimizer)
        if (
            not (isinstance(models, cst.Name) or listed)
            or len(statement.body) != 1
            or not (rebinds or listed or isinstance(small, cst.Expr))
        ):
            self.problem(init, "`amp.initialize` for inference is not `model = amp.initialize("
                         'model, opt_level="O1")`: migrate it by hand')  # fmt: skip
            return
        names = [*(listed or [models.value]), *(code(_argument(c, "models", 0)) for c in also)]
        name = "`, `".join(names)  # (as messages show it, in backquotes: `fe`, `c1`)
        target = small.targets[0].target if isinstance(small, cst.Assign) else None
        if isinstance(target, cst.Tuple | cst.List) and not listed:
            second = [e.value for e in target.elements][1:]
            kept = optimizer is not None and [code(optimizer)] == [code(v) for v in second]
            scope = self.scopes.get(statement)
            unread = (  # `model, _ = amp.initialize(model, [])`: nothing reads the `[]`
                len(second) == 1
                and isinstance(second[0], cst.Name)
                and scope is not None
                and not scope.accesses[second[0].value]
            )
            if not kept and not unread:
                self.problem(init, f"`amp.initialize` for inference binds `{code(target)}`, "
                             "whose optimizers are read later: migrate it by hand")  # fmt: skip
                return
        holder = self.parent(self.parent(statement))
        condition = None
        top = statement
        if extra:
            after_block = self._run_after_block(statement, names)
            if after_block is not None:
                self.problem(
                    after_block,
                    f"`{name}` is run after the block of its evaluation-only `amp.initialize` "
                    f"(line {self.line(init)}), where apex O1 cast it too: wrap it by hand",
                )
                return
        elif isinstance(holder, cst.If) and not _main_guard(self.module, holder):
            test = code(holder.test)
            # the other arms: `elif` tests and every body (`elif use_amp and not HAVE:
            # print(...)`, the 53rd review's frame-field evaluation)
            tests, bodies, arm = [holder.test], [*holder.body.body], holder.orelse
            while isinstance(arm, cst.If):
                tests.append(arm.test)
                bodies += arm.body.body
                arm = arm.orelse
            bodies += arm.body.body if isinstance(arm, cst.Else) else []
            plain_else = holder.orelse is not None and not (
                any(self.facts(t).calls for t in tests) or self._changes(test, bodies)
            )  # (`if has_amp: initialize else: print(...)`, the 43rd review's efficientdet:
            if self._is_elif(holder):  # (the 56th review: it was said to call something)
                self.problem(
                    init,
                    "`amp.initialize` for inference sits in an `elif` arm: the region after "
                    "it would have to repeat every earlier test of the chain; wrap the "
                    "forwards by hand",
                )
                return
            if holder.orelse is not None and not plain_else:
                self.problem(  # the region after it is enabled by the same test)
                    init,
                    "`amp.initialize` for inference sits in an if/else or elif whose test "
                    "calls something or that changes what it reads: the region after it could "
                    "not ask the same question; wrap the forwards by hand",
                )
                return
            rebound = self._rebound_after(holder)
            if rebound is not None:
                self.problem(
                    init,
                    f"`amp.initialize` for inference runs under `if {test}:`, and line "
                    f"{self.line(rebound)} assigns `{code(rebound)}` again after it: the "
                    "autocast region, which would ask the same test later, would not see what "
                    "`initialize` saw (apex's casts stayed on); keep the test's value first "
                    "(`amp_on = ...`) and wrap the forwards by hand",
                )
                return
            condition = test
            top = holder
        if optimizer is not None and not without_optimizer(args):
            self.plan.notes.append(
                f"`{code(optimizer)}` is never given to `amp.scale_loss` (nor to any code that "
                "could call it): apex only cast the forward passes, so no GradScaler is needed"
            )
        if "enabled" in args:  # apex switched off is plain float32: autocast off too
            enabled = code(args["enabled"])
            condition = f"({condition}) and ({enabled})" if condition else enabled
        if switch is not None and switch is not True:  # O0 is apex off: autocast off too
            level_test = code(switch)
            condition = f"({condition}) and ({level_test})" if condition else level_test
        located = self.block_of(top)
        if located is None:
            self.problem(init, "`amp.initialize` for inference is nested in a block")
            return
        block, index = located
        owner = self.owner(block)
        if (
            not extra
            and owner is not None
            and not isinstance(owner, cst.FunctionDef)
            and not (isinstance(owner, cst.If) and _main_guard(self.module, owner))
        ):
            head = (
                f"`if {code(owner.test)}:`"
                if isinstance(owner, cst.If)
                else f"`{type(owner).__name__.lower()}` block"
            )
            where = (
                f"sits in `if {code(top.test)}:`, itself in"
                if isinstance(top, cst.If)
                else "is nested in"
            )
            self.problem(
                init,
                f"`amp.initialize` for inference {where} {head} (line {self.line(owner)}): "
                "the autocast region would have to follow that block's paths; make one flag "
                "of the tests and wrap the forwards by hand",
            )
            return
        after = list(block.body)[index + 1 :]
        holders = self._holders(after, names)
        uses = [i for i, s in enumerate(after) if self._runs_model(s, holders)]
        if not uses:
            self.problem(init, f"`{name}` is not run after `amp.initialize` in this function")
            return
        run = after[uses[0] : uses[-1] + 1]
        # a call of this file's function that trains (KD-DocRE: `evaluate(...)`, then
        # `train(args, model, ...)` after an evaluation-only `initialize`) stays outside: no
        # backward may run in a region, and the rewrite gives that function's own forwards
        # their regions
        runs: list[list[cst.BaseStatement]] = [[]]
        for s in run:
            if self._trains(s):
                runs.append([])
            else:
                runs[-1].append(s)
        runs = [r for r in runs if any(self._runs_model(s, holders) for s in r)]
        if not runs:
            self.problem(init, f"`{name}` is run after `amp.initialize` only by calls of this "
                         "file's functions that train it: migrate by hand")  # fmt: skip
            return
        run = [s for r in runs for s in r]
        blockers = len(self.plan.problems)
        for s in after:
            for node in self._subtree(s):
                if (
                    isinstance(node, cst.Return)
                    and node.value is not None
                    and any(  # the model itself, not only its outputs (`[net(x) for ...]`)
                        isinstance(n, cst.Name)
                        and n.value in names
                        and not (isinstance(p := self.parent(n), cst.Call) and p.func is n)
                        for n in self._subtree(node.value)
                    )
                ):
                    self.problem(
                        node,
                        f"the model `{name}` is returned: its forwards after this function "
                        "were cast by apex O1 too; wrap them by hand",
                    )
                elif isinstance(node, cst.AssignTarget) and not isinstance(
                    node.target, cst.Name | cst.Tuple | cst.List
                ):
                    assign = self.parent(node)
                    if set(names) & self.facts(assign.value).used:
                        self.problem(node, f"the model `{name}` is stored in "
                                     f"`{code(node.target)}`: its later forwards were cast "
                                     "by apex O1 too; wrap them by hand")  # fmt: skip
        for s in run:
            if self.facts(s).backward:
                self.problem(s, "a `backward()` would run inside the autocast region: migrate "
                             "by hand")  # fmt: skip
            if s in self.plan.edits:
                self.problem(s, "the region would cover a statement the rewrite also changes: "
                             "migrate by hand")  # fmt: skip
        if len(self.plan.problems) > blockers:
            return
        self._remove_statement(statement)
        for later in also:
            self._remove_statement(self.statement(later))
            self.plan.notes.append(
                f"the `amp.initialize` at line {self.line(later)} (for "
                f"`{code(_argument(later, 'models', 0))}`) goes too: apex O1's casts were on for "
                f"the whole process from line {self.line(init)}, under the same test, and "
                "the region covers that model's forwards as well"
            )
        for part in runs:
            handed = any(
                isinstance(n, cst.Call)
                and any(isinstance(a.value, cst.Name) and a.value.value in names for a in n.args)
                for s in part
                for n in self._subtree(s)
            )
            if handed:  # the code the model is handed to may train it (see _wrap)
                self.uncached.add(id(part[0]))
        self._wrap(block, runs, condition)
        first, last = self.line(run[0]), self.line(run[-1])
        if extra:
            self.wrapped.update(id(s) for s in run)
            lines = ", ".join(
                f"{self.line(r[0])}" if r[0] is r[-1] else f"{self.line(r[0])}-{self.line(r[-1])}"
                for r in runs
            )
            lines = f"line {lines}" if len(run) == 1 else f"lines {lines}"
            self.plan.notes.append(
                f"the evaluation-only `amp.initialize` at line {self.line(init)} goes, and "
                f"the statements at {lines}, which use `{name}` after it, run under "
                '`torch.amp.autocast("cuda", dtype=torch.float16)`, as apex O1 cast them'
            )
            return
        self.plan.min_torch = (1, 12)  # torch.amp.autocast("cuda", ...) only (AMP101's floor)
        self.plan.summary = (
            (
                "apex O1 for inference (no optimizer) can be rewritten to torch.amp: "
                if without_optimizer(args)
                else "apex O1 that only casts (no loss is scaled) can be rewritten to torch.amp: "
            )
            + "`amp.initialize` goes, and the statements that use the model run under "
            '`torch.amp.autocast("cuda", dtype=torch.float16'
            + (f", enabled={condition})`" if condition else ")`")
        )
        self.plan.notes.append(
            f"behaviour change: the autocast region covers "
            f"{f'line {first}' if first == last else f'lines {first}-{last}'} of the original "
            "(from the first to the last statement that uses the model, and what they call); "
            "apex O1 also cast torch calls after it, until the process ended"
        )

    def _trains(self, statement: cst.CSTNode) -> bool:
        """``statement`` calls a function of this file that scales a loss with apex: the
        rewrite gives it a GradScaler and regions of its own. (One with a plain backward only
        stays in the region: apex O1 cast its forwards, which nothing else would.)"""
        defined = {d.name.value: d for d in self.module.body if isinstance(d, cst.FunctionDef)}
        for node in self._subtree(statement):
            if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)):
                continue
            function = defined.get(node.func.value)
            if function is not None and any(
                isinstance(n, cst.Call)
                and any(q.startswith(APEX + ".scale_loss") for q in self.qualified(n.func))
                for n in self._subtree(function)
            ):
                return True
        return False

    def _run_after_block(self, statement: cst.CSTNode, names: list[str]) -> cst.CSTNode | None:
        """A statement of the enclosing function, after the one that holds ``statement``, that
        runs one of the models ``names`` (None: none)."""
        function = self.function(statement)
        if not isinstance(function, cst.FunctionDef):
            return None
        body = list(function.body.body)
        top = next((s for s in body if s is statement or self.within(statement, s)), None)
        if top is None or top is statement:
            return None
        return next((s for s in body[body.index(top) + 1 :] if self._runs_model(s, names)), None)

    def _never_set(self, given: cst.BaseExpression | None) -> str | None:
        """``self.optimizer`` handed to ``initialize`` in a method of a class with no base
        class, whose attribute nothing in the file sets (YOLO-V3's `Evaluate`): the original
        raises AttributeError there. Why, or None."""
        if not (
            isinstance(given, cst.Attribute)
            and isinstance(given.value, cst.Name)
            and given.value.value == "self"
        ):
            return None
        holder = next((a for a in self.ancestors(given) if isinstance(a, cst.ClassDef)), None)
        if holder is None or any(
            self.module.code_for_node(b.value) != "object" for b in holder.bases
        ):
            return None
        attribute = given.attr.value
        own = self.statement(
            given
        )  # (`self.m, self.optimizer = amp.initialize(...)` binds it after)
        if any(
            (isinstance(n, cst.Attribute) and n.attr.value == attribute and self._assigned_to(n)
             and self.statement(n) is not own)
            or (isinstance(n, cst.Name)
             and n.value in ("setattr", "vars", "__getattr__", "__dict__"))
            for n in self.nodes
        ):  # fmt: skip
            return None
        return (
            f"`amp.initialize` is given `{self.module.code_for_node(given)}`, which nothing in "
            f"this file sets (`{holder.name.value}` has no base class): that call raises "
            "AttributeError, so the original's mixed-precision path cannot run as written; "
            "fix the original before migrating"
        )

    def _assigned_to(self, node: cst.CSTNode) -> bool:
        """``node`` is assigned to: a target, alone or in a tuple or list of targets
        (``self.model, self.optimizer = model, optimizer``: the 53rd review's false "nothing
        in this file sets" it), of ``=``, ``+=``, an annotation, ``for`` or ``with ... as``."""
        parent = self.parent(node)
        while isinstance(parent, cst.Element | cst.StarredElement | cst.Tuple | cst.List):
            node, parent = parent, self.parent(parent)
        if isinstance(parent, cst.AssignTarget):
            return True
        if isinstance(parent, cst.AugAssign | cst.AnnAssign | cst.For):
            return parent.target is node
        return isinstance(parent, cst.AsName)

    def _holders(self, after: list[cst.BaseStatement], names: list[str]) -> list[str]:
        """``names`` and the names ``after`` binds to what holds the model: a wrapper or an
        object built on it (``model_w = DataParallel(model)``, ``extract = Extract(model_w)``,
        person-reid's feature extraction), or the model itself (``net = model.module``). Their
        calls run its forward, which apex O1 cast. Not what calling the model returns."""
        found = list(names)
        for statement in after:
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            if not (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
            ):
                continue
            value = small.value
            while isinstance(value, cst.Attribute):
                value = value.value
            handed = isinstance(value, cst.Call) and any(
                isinstance(a.value, cst.Name) and a.value.value in found for a in value.args
            )
            if handed or (isinstance(value, cst.Name) and value.value in found):
                found.append(small.targets[0].target.value)
        return found

    def _runs_model(self, statement: cst.CSTNode, names: list[str]) -> bool:
        """``statement`` calls the model, a method of it that may run a forward
        (``model.encode_q(x)``), or hands it to a call (which may run it); ``model.eval()``,
        ``model.to(...)`` and the other quiet methods run no forward."""
        for node in self._subtree(statement):
            if not isinstance(node, cst.Call):
                continue
            func = node.func
            if isinstance(func, cst.Name) and func.value in names:
                return True
            attributes = []
            while isinstance(func, cst.Attribute):
                attributes.append(func.attr.value)
                func = func.value
            if (
                attributes
                and isinstance(func, cst.Name)
                and func.value in names
                and not _QUIET_METHODS.intersection(attributes)
            ):
                return True  # `model.encode_q(x)`, `model.module.generate(x)`: submodules run
            qualified = self.qualified(node.func)
            if qualified and qualified <= _WRAPS:
                continue  # `DistributedDataParallel(model)`, `torch.save(model)`: no forward
            if any(isinstance(a.value, cst.Name) and a.value.value in names for a in node.args):
                return True
        return False


def _listed_models(models, small, optimizer) -> list[str]:
    """``[fe, c1, c2] = amp.initialize([fe, c1, c2], opt_level=...)`` (an inference script of
    several models, no optimizer): the names, each rebound to itself; [] for any other form."""
    if (
        optimizer is not None
        or not isinstance(models, cst.List | cst.Tuple)
        or not isinstance(small, cst.Assign)
        or len(small.targets) != 1
        or not isinstance(target := small.targets[0].target, cst.List | cst.Tuple)
    ):
        return []
    given = [e.value for e in models.elements]
    bound = [e.value for e in target.elements]
    if (
        not given
        or len(given) != len(bound)
        or any(
            not isinstance(g, cst.Name) or not isinstance(b, cst.Name) or g.value != b.value
            for g, b in zip(given, bound, strict=True)
        )
    ):
        return []
    names = [g.value for g in given]
    return names if len(set(names)) == len(names) else []


def _name(node: cst.CSTNode | None) -> str | None:
    return node.value if isinstance(node, cst.Name) else None


_INIT_KNOWN = {"enabled", "verbose", "enable_caching"}


class HandleInit:
    """The planner's mode for ``amp.init(...)``, apex's first API, in a file with no other amp
    call (maskrcnn-benchmark's ``tools/test_net.py``)."""

    def _amp_init(self, inits: list[cst.Call]) -> None:
        """``amp.init(enabled=...)`` patched torch's functions from there until the process
        ended; nothing is scaled (the handle's own ``scale_loss`` raises since 2019). So the
        rest of the function after it runs under one autocast region, where that function is
        the script's last statement (``main()`` under the ``__main__`` test): nothing ran
        after it for apex to cast."""
        code = self.module.code_for_node
        init = inits[0]
        if len(inits) > 1:
            self.problem(inits[1], f"`amp.init` is called again (line {self.line(init)})")
            return
        arguments = {
            (a.keyword.value if a.keyword else "enabled" if i == 0 else "*"): a.value
            for i, a in enumerate(init.args)
        }
        if any(a.star for a in init.args) or set(arguments) - _INIT_KNOWN:
            listed = ", ".join(f"`{k}`" for k in sorted(set(arguments) - _INIT_KNOWN))
            self.problem(init, f"`amp.init` sets {listed or '`*args`'}, which an autocast "
                         "region cannot express: migrate it by hand")  # fmt: skip
            return
        statement = self.statement(init)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        handle = (
            small.targets[0].target.value
            if isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)
            else None
        )
        located = self.block_of(statement)
        function = self.owner(located[0]) if located is not None else None
        if not (
            len(statement.body) == 1
            and (isinstance(small, cst.Expr) or handle is not None)
            and small.value is init
            and isinstance(function, cst.FunctionDef)
            and function in self.module.body
        ):
            self.problem(init, "`amp.init` is not a statement of its own in the body of a "
                         "module-level function: migrate it by hand")  # fmt: skip
            return
        if handle is not None and any(
            isinstance(n, cst.Name) and n.value == handle and n is not small.targets[0].target
            for n in self.nodes
        ):
            self.problem(init, f"the handle `{handle}` that `amp.init` returns is used: its "
                         "API has no native counterpart; migrate it by hand")  # fmt: skip
            return
        name = function.name.value
        if not self._last_run(name):
            self.problem(init, f"apex patched every torch call after `amp.init` until the "
                         f"process ended; `{name}()` is not the script's last statement "
                         "(under its `__main__` test), so code after it would leave "
                         "the autocast region: migrate it by hand")  # fmt: skip
            return
        block, index = located
        after = list(block.body)[index + 1 :]
        if not after:
            self.problem(init, "nothing runs after `amp.init` in its function")
            return
        for s in after:
            if self.facts(s).backward:
                self.problem(s, "a `backward()` would run inside the autocast region: migrate "
                             "by hand")  # fmt: skip
                return
        enabled = arguments.get("enabled")
        condition = code(enabled) if enabled is not None else None
        self._remove_statement(statement)
        self._wrap(block, [after], condition)
        first, last = self.line(after[0]), self.line(after[-1])
        self.plan.min_torch = (1, 12)
        self.plan.summary = (
            "apex O1 through `amp.init` (no loss is scaled) can be rewritten to torch.amp: "
            f"`amp.init` goes, and the rest of `{name}` runs under "
            '`torch.amp.autocast("cuda", dtype=torch.float16'
            + (f", enabled={condition})`" if condition else ")`")
        )
        self.plan.notes.append(
            f"the region covers lines {first}-{last} of the original, the rest of `{name}`, "
            f"which is the script's last statement: apex O1 cast every torch call after "
            "`amp.init` until the process ended"
        )

    def _last_run(self, name: str) -> bool:
        """``name()`` is the last statement of the module (or of its final ``if __name__ ==
        "__main__":`` block), the only use of ``name`` here, and no other file of the
        project imports it."""
        body = list(self.module.body)
        last = body[-1] if body else None
        if isinstance(last, cst.If) and last.orelse is None and _main_guard(self.module, last):
            last = last.body.body[-1] if last.body.body else None
        if not (
            isinstance(last, cst.SimpleStatementLine)
            and len(last.body) == 1
            and isinstance(last.body[0], cst.Expr)
            and isinstance(call := last.body[0].value, cst.Call)
            and isinstance(call.func, cst.Name)
            and call.func.value == name
        ):
            return False
        spelled = [n for n in self.nodes if isinstance(n, cst.Name) and n.value == name]
        if len(spelled) != 2:  # the def's name and this call
            return False
        return self.path is None or users_on_disk(self.path, [name]) == []


def _same_names(module: cst.Module, small: cst.Assign, args: dict) -> bool:
    """``a, b = amp.initialize(a, b, ...)`` (or ``a = ...(a, ...)``): it binds what it was given."""
    given = [args.get("models"), args.get("optimizers")]
    given = [module.code_for_node(g) for g in given if g is not None]
    target = small.targets[0].target
    bound = (
        [module.code_for_node(e.value) for e in target.elements]
        if isinstance(target, cst.Tuple | cst.List)
        else [module.code_for_node(target)]
    )
    return len(small.targets) == 1 and bound == given
