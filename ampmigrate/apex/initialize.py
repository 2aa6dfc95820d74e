"""``amp.initialize`` -> the GradScaler: its options, the opt-level switch, and what it tells the
rest of the plan.
"""

from __future__ import annotations

import itertools

import libcst as cst

from ampmigrate.apex.common import (
    _KNOWN_KWARGS,
    _argument,
    _code,
    _optimizers,
    _Setup,
    _statements,
    initialize_arguments,
    is_path,
    without_optimizer,
)
from ampmigrate.apex.siblings import main_test
from ampmigrate.apex.verdict import APEX, not_o1
from ampmigrate.replace import ReplaceNodes

# values of apex's options that O1 accepts and that change nothing there (its `Properties`
# setter: a `cast_model_type` other than these raises under O1, as any non-None
# `keep_batchnorm_fp32` or `master_weights` does)
_O1_OWN = {
    "patch_torch_functions": {"True"},
    "cast_model_type": {"None", "False", "torch.float32", "torch.float"},
}


def _main_guard(module: cst.Module, node: cst.If) -> bool:
    """``if __name__ == "__main__":``"""
    return main_test(_code(module, node.test))


# what apex's `check_models` refuses before `amp.initialize`: torch's parallel wrappers (its
# test for its own DDP looked up `'apex_DDP' in sys.modules`, never true: that one passed)
_WRAPPERS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
})  # fmt: skip


def _loose(test: cst.BaseExpression) -> bool:
    """``test`` needs parentheses as an operand of ``and`` (``a or b``, ``x if c else y``)."""
    if isinstance(test, cst.BooleanOperation):
        return not isinstance(test.operator, cst.And)
    return isinstance(test, cst.IfExp | cst.Lambda | cst.NamedExpr)


class Initialize:
    """The initialize stage of ``_Planner`` (mixed into it)."""

    def _initialize(self, init: cst.Call) -> _Setup | None:
        """``model, opt = amp.initialize(model, opt, ...)`` -> ``scaler = GradScaler(...)``.
        Problems that do not stop the rest of the plan are only recorded."""
        if any(a.star for a in init.args):
            self.problem(init, "`amp.initialize` gets `*args`/`**kwargs`: spell them out")
            return None
        args, positional_note = initialize_arguments(init)
        if positional_note is not None:
            self.plan.notes.append(positional_note)
        for key in ("opt_level", "loss_scale", "keep_batchnorm_fp32", "master_weights"):
            if key in args:
                args[key] = self._constant(args[key], init)
        models = args.get("models")
        optimizer = args.get("optimizers")
        level = args.get("opt_level")
        for given in (models, optimizer):  # (SVTAS's test script: an optimizer never made)
            broken = self._raises_name_error(init, given, "fix the original", local=True)
            if broken is not None:
                self.problem(init, broken)
                return None
        wrapped = self._wrapped_before(init, models)
        if wrapped is not None:  # (the other blockers are said with it)
            self.problem(init, wrapped)
        if without_optimizer(args):
            others = sorted(self.line(c) for c in self.initialize_calls if c is not init)
            why = (
                f", one of {len(others) + 1} in this file (also line"
                f"{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}): the "
                "inference rewrite takes a file whose one apex call is its `amp.initialize`, "
                'or several `m = amp.initialize(m, opt_level="O1")` of plain names under one '
                "test in one function"
                if others
                else ""
            )
            self.problem(
                init,
                f"`amp.initialize` without an optimizer (inference only){why}: nothing is "
                "scaled, so no GradScaler; delete it and run the forward under "
                '`torch.amp.autocast("cuda", dtype=torch.float16)` (O1), or call `model.half()` '
                "and feed half inputs (O2/O3), by hand",
            )
            return None
        # `keep_batchnorm_fp32=None`, `patch_torch_functions=True`, `cast_model_type=
        # torch.float32` and the like are what O1 accepts and does anyway: nothing is set
        unknown = sorted(
            k for k in set(args) - _KNOWN_KWARGS
            if _code(self.module, args[k]).replace(" ", "") not in _O1_OWN.get(k, {"None"})
        )  # fmt: skip
        switched = [k for k in unknown if k == "patch_torch_functions"]
        for key in switched:
            self.problem(
                init,
                f"`amp.initialize` is given `patch_torch_functions="
                f"{_code(self.module, args[key])}`: False turns O1's casts off (apex then only "
                "scales the loss), which the rewrite does not follow; pass True or drop it",
            )
        unknown = [k for k in unknown if k not in switched]
        bounds = [k for k in unknown if k in ("min_loss_scale", "max_loss_scale")]
        for key in bounds:
            self._scale_bound(init, key, args[key])
        unknown = [k for k in unknown if k not in bounds]
        fixed = [k for k in unknown if _literal(args[k])]
        if fixed:
            listed = ", ".join(f"`{k}`" for k in fixed)
            self.problem(init, f"`amp.initialize` sets {listed}, which O1 cannot express")
        for key in (k for k in unknown if not _literal(args[k])):
            value = _code(self.module, args[key])
            literal_o1 = (
                isinstance(level, cst.SimpleString) and level.evaluated_value == "O1"
            ) or (
                key == "keep_batchnorm_fp32"
                and self._default_calls(args[key], init, None) is not None
                and (level is None or self._default_calls(level, init, "O1") is not None)
            )  # both parameters left at their defaults (None, "O1") by every call
            if key == "keep_batchnorm_fp32" and (literal_o1 or self.declared is not None):
                self.plan.notes.append(
                    f"`keep_batchnorm_fp32={value}` goes: it was None wherever apex O1 trained "
                    "(O1 raises on any other value)"
                    + ("" if literal_o1 else f", every run being declared O1 or O0 "
                       f"({self.declared}), and does nothing under O0, whose model stays float32")
                )  # fmt: skip
                continue
            self.problem(
                init,
                f"`amp.initialize` sets `{key}={value}`: GradScaler has no bound on its scale "
                "(apex's `min_loss_scale`/`max_loss_scale` have no torch.amp counterpart)"
                if key in ("min_loss_scale", "max_loss_scale")
                else f"`amp.initialize` is given `{key}={value}`, which this file does not fix "
                "to None, False or torch.float32: under O1 apex accepts only those there (another "
                "type raises: it belongs to O2/O3's model casts); pass one of them or drop it"
                if key == "cast_model_type"
                else f"`amp.initialize` is given `{key}={value}`, which this file does not fix "
                "to None: under O1 apex accepts only None there (any other value raises or "
                "belongs to O2/O3's model casts); pass None or drop it",
            )
        if "num_losses" in args and not self._one_loss_scale(args["num_losses"]):
            self.plan.notes.append(
                f"behaviour change: apex kept one loss scale per loss (`num_losses="
                f"{_code(self.module, args['num_losses'])}`, `loss_id=`); the one GradScaler "
                "keeps one scale for all of them, so an overflow in any loss lowers it for all "
                "(each optimizer's step is still skipped only when its own gradients overflow), "
                "and it grows after 2000 `update()` calls counted across them all: where an "
                "iteration updates after each of several optimizers' steps, it grows that many "
                "times as often as each of apex's scales did"
            )
        given_scale = args.get("loss_scale")
        scaled_at_o0 = given_scale is not None and not (
            isinstance(given_scale, cst.Integer | cst.Float) and float(given_scale.value) == 1.0
        )  # apex O0's own scale is a static 1.0; `loss_scale=` overrides it, so O0 scaled
        literal = isinstance(given_scale, cst.Integer | cst.Float | cst.SimpleString)
        o0_scaled_text = (
            (
                "at O0 apex still scaled the loss here: `loss_scale="
                if literal
                else "at O0 apex still scaled the loss wherever a run gives it a value (not None): "
                "`loss_scale="
            )
            + f"{_code(self.module, given_scale) if given_scale is not None else ''}` overrides "
            "O0's static 1.0, so it trained in float32 with that loss scale (dynamic: steps "
            "with inf/NaN gradients skipped and the scale lowered), where a GradScaler switched "
            "off with the level at O0 steps them; migrate by hand (a GradScaler on at O0 too, "
            "autocast only at O1)"
        )
        if isinstance(level, cst.SimpleString):
            if level.evaluated_value == "O0" and scaled_at_o0:
                self.problem(init, o0_scaled_text)
            elif level.evaluated_value == "O0":
                # apex switched off: float32, a static scale of 1.0 that never skips a step,
                # which is a GradScaler made with enabled=False (its regions off alike)
                args["enabled"] = cst.Name("False")
                self.plan.notes.append(
                    "opt_level O0 is apex switched off (float32, a loss scale of 1.0 that never "
                    "skips a step): the GradScaler is made with `enabled=False` and the autocast "
                    "regions are off, which is the same; set both on to train in mixed precision"
                )
            elif level.evaluated_value != "O1":
                self.problem(init, not_o1(level.evaluated_value))
        elif level is None:  # O1 is apex's default (before June 2019 apex raised without one)
            if positional_note is None:
                self.plan.notes.append("`amp.initialize` has no opt_level: apex's default, O1")
        else:
            blockers = len(self.plan.problems)
            switch = self._level_switch(level, init)
            if switch is None and len(self.plan.problems) == blockers:
                switch = self._level_choices(level, init)
            if switch is not None and switch is not True and scaled_at_o0:
                self.problem(init, f"opt_level `{_code(self.module, level)}` may be O0, and "
                             + o0_scaled_text)  # fmt: skip
            elif switch is not None and switch is not True and "enabled" not in args:
                args["enabled"] = switch
            elif switch is not None and switch is not True:
                args["enabled"] = cst.parse_expression(
                    f"({_code(self.module, args['enabled'])}) and {_code(self.module, switch)}"
                )
        self._half_parameters(optimizer, init)
        scale = args.get("loss_scale")
        dynamic = scale is None or (
            (isinstance(scale, cst.SimpleString) and scale.evaluated_value == "dynamic")
            or (isinstance(scale, cst.Name) and scale.value == "None")  # O1's default: dynamic
            or self._default_calls(scale, init, "dynamic") is not None  # a parameter left so
        )
        if not dynamic and _literal(scale):
            self.problem(init, "a static `loss_scale`: GradScaler is always dynamic")
        elif not dynamic and not is_path(scale):
            self.problem(init, self._not_dynamic(scale))
        elif not dynamic:
            self.scale_guard = scale
        statement = self.statement(init)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        # `model, opt = amp.initialize(model.cuda(), opt)`: initialize returns the model it
        # is given, so the rewrite keeps `model, opt = model.cuda(), opt` (_rebind)
        assigned = isinstance(small, cst.Assign) and len(small.targets) == 1 and small.value is init
        # O1 returns each model it is given as it is: a list of them is a model each (GANs:
        # `[netD, netG], [optD, optG] = amp.initialize([netD, netG], [optD, optG])`)
        listed = (
            [e.value for e in models.elements] if isinstance(models, cst.List | cst.Tuple) else None
        )
        if listed is not None and (not listed or not all(is_path(m) for m in listed)):
            self.problem(
                init,
                "a list of models in `amp.initialize` that are not all names, attributes or "
                'constant-key subscripts (`self.models["G"]`): '
                "bind each to a name first",
            )
            return None
        if not is_path(models) and not assigned and listed is None:
            self.problem(
                init,
                f"`amp.initialize` is given the model `{_code(self.module, models)}` and its "
                "result is not assigned: assign it (`model, optimizer = amp.initialize(...)`)",
            )
            return None
        if small is None or len(statement.body) != 1 or getattr(small, "value", None) is not init:
            self.problem(init, "`amp.initialize` is not a statement of its own")
            return None
        if isinstance(small, cst.AnnAssign | cst.AugAssign) or (
            isinstance(small, cst.Assign) and len(small.targets) != 1
        ):  # what O1 returns would have to be bound the same way (`a = b = m, o`): not done
            self.problem(
                init,
                "`amp.initialize`'s result is bound by an annotated, augmented or chained "
                "assignment (`a = b = amp.initialize(...)`): bind it with one plain "
                "assignment first",
            )
            return None
        loop = self._pairs_loop(statement, small, models, optimizer)
        if not _optimizers(optimizer) and loop is None:
            self.problem(
                init,
                f"the optimizer `{_code(self.module, optimizer)}` of `amp.initialize` is "
                "not a name, an attribute or a constant-key subscript: bind it to a name first",
            )
            return None
        inner, statement = statement, loop or statement  # the loop is placed as one statement
        if self.branched is not None:  # both branches initialize: the `if` goes as one
            inner = statement = self.branched
        chain: list[cst.If] = []  # the `if`s around initialize, outermost first
        otherwise: cst.Else | None = None  # initialize's `else:` (see _else_of)
        if self.split is not None:  # one initialize on each path of an `if`: before it
            holder, _, _, test = self.split
            condition = _code(self.module, test) if test is not None else None
            self._remove_statement(statement)  # (with its `if T:`, emptied)
        else:
            holder = self.parent(self.parent(statement))
            condition = None
            alone = statement is inner and self.branched is None
            available = self._availability_if(holder, inner) if alone else None
            if available is not None:
                # `if amp is None: <fall back> else: amp.initialize(...)`, or `if amp is not
                # None:` in the switch's `if`: the availability `if` gives way to the branch
                # that holds initialize; it is placed as one statement, as a loop around it is
                statement = available
                holder = self.parent(self.parent(statement))
            if isinstance(holder, cst.If) and holder in self.dissolved:
                outer = self.parent(self.parent(holder))
                if isinstance(outer, cst.If | cst.Else) and not (
                    isinstance(outer, cst.If) and _main_guard(self.module, outer)
                ):  # (nnUNet: `if self.fp16: if not self.amp_initialized: if amp is not None:`)
                    beside = [
                        s for s in _statements(holder.body)
                        if s is not inner and not self._only_initializes(s)
                    ]  # fmt: skip
                    if alone and beside:  # (the 66th review: the nesting was not the obstacle)
                        self.problem(
                            init,
                            f"`amp.initialize` shares its `if {_code(self.module, holder.test)}:`"
                            f" with `{_code(self.module, beside[0]).strip()}` (line "
                            f"{self.line(beside[0])}): the branch would give way to the "
                            "GradScaler made where `initialize` was, and what else it runs has "
                            "to stay on the path it ran on; move that statement out of the "
                            "branch (or make the GradScaler there) by hand",
                        )
                        return None
                    self.problem(
                        init,
                        f"`amp.initialize` sits in `if {_code(self.module, holder.test)}:`, "
                        f"itself in the `if` at line {self.line(outer)}: the GradScaler must "
                        "exist on every path, enabled by the tests around it; create it before "
                        "the outer one by hand",
                    )
                    return None
            if isinstance(holder, cst.If) and (
                _main_guard(self.module, holder) or holder in self.dissolved
            ):  # the script's main block, or `if amp is not None:` (true now): no condition
                holder = None
            arms = self._elif_tests(holder) if isinstance(holder, cst.If) else None
            if arms is not None:  # `if A: ... elif B: initialize`: enabled where not A and B
                top, earlier = arms
                last = _code(self.module, holder.test)
                if not isinstance(holder.test, cst.Comparison | cst.UnaryOperation):
                    last = f"bool({last})"  # (autocast takes only a bool)
                condition = " and ".join(
                    [f"not ({_code(self.module, t)})" for t in earlier] + [last]
                )
                self._remove_statement(statement)
                holder = top
            elif isinstance(holder, cst.If):
                # an `else:` stays (the scaler is built before the `if`, disabled there; an
                # `if` left with no body becomes `if not <test>:` over it); an `elif` chain is
                # not taken apart where a test calls something or the chain is nested
                if (
                    not (holder.orelse is None or isinstance(holder.orelse, cst.Else))
                    or self.block_of(holder) is None
                    or isinstance(self.parent(holder), cst.If)
                ):
                    self.problem(init, self._chain_refused(holder))
                    return None
                chain = self._if_chain(holder)  # (a loop's body holds the scaler on every path)
                if chain is None:
                    outer = self.owner(self.block_of(holder)[0])
                    self.problem(
                        init,
                        f"`amp.initialize` sits in an `if` nested in another `if` (line "
                        f"{self.line(outer)}) after statements that may change its test or "
                        "leave the block (`return`, `break`, `continue`), or in its `else:`: the "
                        "GradScaler must exist on every path, enabled by all the tests together; "
                        "create it before the outer one by hand",
                    )
                    return None
                # with the availability checks folded (`amp is not None and x` is `x`); nested
                # tests right after each other are `and`ed, in the order they ran
                tests = [h.test.visit(ReplaceNodes(self.plan.edits)) for h in chain]
                condition = " and ".join(
                    self._arm_test(chain, i, t, len(tests) > 1) for i, t in enumerate(tests)
                )
                if len(tests) > 1 and not isinstance(
                    tests[-1], cst.Comparison | cst.UnaryOperation
                ):  # `a and b` is `b` when `a` holds: autocast takes only a bool
                    condition = f"bool({condition})"
                if len(chain) > 1:
                    self._drop_emptied(
                        chain, statement if statement is inner else None, small, models, optimizer
                    )
                    holder = chain[0]  # the GradScaler goes before the outermost `if`
            elif isinstance(holder, cst.Else):
                flipped = self._else_of(holder) if "enabled" not in args else None
                if flipped is None:
                    self.problem(
                        init,
                        "`amp.initialize` sits in the `else:` of an `elif`, of an `if` nested "
                        "in another block, or of one whose test calls something or may be "
                        "changed by its body: the GradScaler must exist on both paths, enabled "
                        "where that test is false; create it before the `if` by hand",
                    )
                    return None
                otherwise, (holder, condition) = holder, flipped
            elif not (
                holder is None
                or isinstance(holder, cst.FunctionDef)
                or self.parent(statement) is self.module
                or isinstance(holder, cst.For)
            ):
                self.problem(init, "`amp.initialize` is nested in a block other than an `if`")
                return None
        enabled = args.get("enabled")
        if enabled is not None:
            text = _code(self.module, enabled)
            condition = f"({condition}) and ({text})" if condition else text
            if text == "False" or text.endswith(") and False"):
                condition = "False"  # (O0: off on every path)
        level_text = _code(self.module, level) if level is not None else None
        if condition is not None and level_text is not None and level_text in condition:
            tests = [*(h.test for h in chain), enabled]
            if not condition.startswith("bool(") and any(
                _code(self.module, t) == level_text for t in tests if t is not None
            ):
                # `if args.fp16:` where args.fp16 is the opt level ("" or "O1"): autocast
                # takes only a bool
                condition = f"bool({condition})"
        place = chain[0] if chain else statement
        varying = self._varies_in_loop(condition, place, init) or self._kept_past_pass(
            place, small, init
        )
        if varying is not None:
            self.problem(init, varying)
            return None
        name = self.free_name("scaler")
        if name is None:
            self.problem(init, "no free name for the GradScaler")
            return None
        self.name = name
        targets = set()
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
            elements = target.elements if isinstance(target, cst.Tuple | cst.List) else [target]
            if elements:
                first = elements[0]
                first = first.value if isinstance(first, cst.Element) else first
                each = first.elements if isinstance(first, cst.Tuple | cst.List) else None
                if listed is not None and each is not None:  # `[a, b], opts = ...`
                    targets |= {_code(self.module, e.value) for e in each}
                else:
                    targets.add(_code(self.module, first))
        spelled = {_code(self.module, m) for m in (listed or [models])}
        for extra in self.merged:  # more models, the same options: one GradScaler for all
            more = _argument(extra, "models", 0)
            items = more.elements if isinstance(more, cst.List | cst.Tuple) else [more]
            spelled |= {
                _code(self.module, m.value if isinstance(m, cst.Element) else m) for m in items
            }
            if self.branched is None:
                self._remove_statement(self.statement(extra))
        if self.branched is not None:
            self.plan.notes.append(
                f"`amp.initialize` is called in both branches of the `if` at line "
                f"{self.line(self.branched)}, with the same options and optimizer: one of them "
                "always ran, so one GradScaler, made where that `if` was, serves either path "
                "(apex O1 cast every forward after it, whichever models it was given, as "
                "autocast does)"
            )
        elif self.split is not None:
            outer, _, _, test = self.split
            other = self.merged[0]
            alone = _argument(other, "optimizers", 1) is None
            self.plan.notes.append(
                f"`amp.initialize` is called on each path of the `if` at line "
                f"{self.line(outer)} (line {self.line(init)}, and line {self.line(other)}"
                + (" for the model alone" if alone else "")
                + "): one of them ran"
                + (f", under `{_code(self.module, test)}`" if test is not None else "")
                + ", so one GradScaler, made before that `if`, serves either path (one that "
                "scales no loss changes nothing; apex O1 cast every forward after either call, "
                "as autocast does)"
            )
        elif self.merged:
            self.plan.notes.append(
                f"the `amp.initialize` calls at {self.lines(self.merged)} "
                "initialize more models and optimizers with the same options: apex replaced its "
                "loss scalers at each call, so one loss scale served them all, and one GradScaler "
                "does (each step followed by `update()`, as apex updated at each `scale_loss` exit)"
            )
        setup = _Setup(statement, self.function(init), {*spelled, *targets}, condition)
        if self.hooked("caller"):
            if self.scale_guard is not None:  # (the hook's GradScaler is made in its module)
                self.problem(init, self._not_dynamic(self.scale_guard))
            self._casts_only(setup, small, models, optimizer, holder, inner, chain)
            return setup
        guard = self.scale_guard
        inside = isinstance(holder, cst.If) and guard is not None
        if inside and self._set_in(guard, holder, statement):
            self.problem(init, self._not_dynamic(guard))  # (not readable where the scaler goes)
            guard = None
        if (
            isinstance(holder, cst.If)
            and enabled is not None
            and self._set_in(enabled, holder, statement)
        ):
            if guard is not None:
                self.problem(init, self._not_dynamic(guard))
            # the switch is computed inside the `if`: the GradScaler goes where initialize was,
            # a disabled one before the `if` (the other path), and autocast asks the scaler
            setup.condition = _code(self.module, enabled)
            self._initial_scale(statement, "num_losses" in args)
            self._place_scaler(setup, small, models, optimizer, None, enabled, inner)
            self._disabled_before(setup, holder)
            setup.condition, setup.by_scaler = None, True
            return setup
        self._initial_scale(statement, "num_losses" in args)
        self._place_scaler(setup, small, models, optimizer, holder, enabled, inner, chain[1:])
        if guard is not None:
            self._static_scale_guard(init, guard, setup.condition)
        if otherwise is not None and not self._rebind(small, models, optimizer):
            left = [s for s in otherwise.body.body if s is not inner and s not in self.removed]
            if not left:  # `else: pass` is no `else`
                self.plan.edits[otherwise] = lambda _u: cst.RemoveFromParent()
                placed = self.plan.edits.get(holder)
                if placed is not None and all(
                    isinstance(s, cst.SimpleStatementLine)
                    and all(isinstance(i, cst.Pass) for i in s.body)
                    for s in holder.body.body
                ):  # and `if T: pass` with a test that calls nothing does nothing
                    self.plan.edits[holder] = lambda u: cst.FlattenSentinel(
                        list(placed(u).nodes)[:-1]
                    )
        return setup

    def _one_loss_scale(self, losses: cst.BaseExpression) -> bool:
        """apex used one loss scale: ``num_losses=1``, or every ``scale_loss`` (all in this
        file, which no other module shares) uses loss id 0."""
        if isinstance(losses, cst.Integer) and losses.evaluated_value == 1:
            return True
        if self.link is not None:
            return False
        for node in self.nodes:
            if isinstance(node, cst.Call) and f"{APEX}.scale_loss" in self.qualified(node.func):
                given = _argument(node, "loss_id", 2)
                if given is not None and not (
                    isinstance(given, cst.Integer) and given.evaluated_value == 0
                ):
                    return False
        return True

    def _wrapped_before(self, init: cst.Call, models: cst.BaseExpression | None) -> str | None:
        """``model = torch.nn.DataParallel(model)`` (or torch's DDP, not apex's: ``_WRAPPERS``)
        on ``initialize``'s path in the function, before ``amp.initialize(model, ...)``: apex's
        ``check_models`` raises RuntimeError on such a model (MotionRGBD-PAMI), so the
        original's mixed-precision path never ran. Why, or None."""
        if not isinstance(models, cst.Name | cst.Attribute):
            return None
        spelled = _code(self.module, models)
        function = self.function(init)
        found = None
        for node in self._subtree(function):
            if (
                isinstance(node, cst.Assign)
                and self.function(node) is function
                and self.order[id(node)] < self.order[id(init)]
                and any(_code(self.module, t.target) == spelled for t in node.targets)
            ):
                found = node  # the last binding before it
        value = found.value if found is not None else None
        if not isinstance(value, cst.Call) or not self.within(
            init, self.parent(self.statement(found))
        ):  # (a wrap in a branch of its own, cmt's `else:` beside apex's DDP: not on its path)
            return None
        wrapper = next((q for q in sorted(self.qualified(value.func)) if q in _WRAPPERS), None)
        if wrapper is None:
            return None
        return (
            f"`amp.initialize` is given `{spelled}`, which line {self.line(found)} wraps in "
            f"`{wrapper}`: apex's `initialize` raises RuntimeError on a parallel wrapper "
            "(wrap after it), so the original's mixed-precision path cannot run as written "
            "(where that line runs); fix the original before migrating"
        )

    def _availability_if(self, holder: cst.CSTNode, inner: cst.CSTNode) -> cst.If | None:
        """The availability test around ``inner`` whose branch holding it is what runs now
        (the ``else:`` of ``amp is None``; the body of ``amp is not None`` in another ``if``,
        at a function's top level its body just stays), where that branch holds nothing but
        initialize calls, which all go."""
        if isinstance(holder, cst.Else) and self.parent(holder) in self.folded_else:
            available = self.parent(holder)
        elif (
            isinstance(holder, cst.If)
            and holder in self.dissolved
            and isinstance(self.parent(self.parent(holder)), cst.If)
            and self.parent(holder) is self.parent(self.parent(holder)).body
        ):
            available = holder
        else:
            return None
        for statement in _statements(holder.body):
            if statement is not inner and not self._only_initializes(statement):
                return None
        return available

    def _only_initializes(self, statement: cst.CSTNode) -> bool:
        """``statement`` is one ``amp.initialize`` call (assigned or not), which goes."""
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        return (
            len(getattr(statement, "body", ())) == 1
            and isinstance(small, cst.Assign | cst.Expr)
            and small.value in self.initialize_calls
        )

    def _else_of(self, otherwise: cst.Else) -> tuple[cst.If, str] | None:
        """``if T: ... else: amp.initialize(...)``: the ``if`` and ``not T``, where the
        GradScaler can be made before it, enabled by ``not T``: a plain ``if`` (no ``elif``,
        not nested in another block's condition) whose test calls nothing and whose body leaves
        the test as it was (so the test read again later means the same)."""
        owner = self.parent(otherwise)
        if (
            not isinstance(owner, cst.If)
            or isinstance(self.parent(owner), cst.If)  # an `elif`
            or self.block_of(owner) is None
            or self._if_chain(owner) != [owner]
            or self.facts(owner.test).calls
            or self._changes(_code(self.module, owner.test), list(owner.body.body))
        ):
            return None
        test = owner.test
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            kept = test.expression
            text = _code(self.module, kept).strip()
            if isinstance(kept, cst.Comparison | cst.UnaryOperation):
                return owner, text
            return owner, f"bool({text.removeprefix('(').removesuffix(')')})"
        text = _code(self.module, test).strip()
        plain = isinstance(test, cst.Name | cst.Attribute | cst.Subscript)
        return owner, f"not {text}" if plain else f"not ({text})"

    def _initial_scale(self, statement: cst.BaseStatement, losses: bool) -> None:
        """``amp._amp_state.loss_scalers[0]._loss_scale = X`` after ``initialize``, in its
        block, with no call between them that could scale a loss first (ViT-pytorch, NVIDIA's
        BERT): apex's initial loss scale, which is GradScaler's ``init_scale=X`` (both then
        double it after 2000 steps without overflow and halve it on one). With ``num_losses``
        apex kept several scales: left to the blocker that names ``_amp_state``."""
        located = self.block_of(statement)
        if located is None or losses:
            return
        block, index = located
        body = _statements(block)
        for at, later in enumerate(body[index + 1 :], index + 1):
            assign = self._scale_assignment(later)
            if assign is None:
                if any(isinstance(n, cst.Call) for n in self._subtree(later)):
                    return  # a call may scale a loss first: the scale set later is not initial
                continue
            value = assign.value
            names = {n.value for n in self._subtree(value) if isinstance(n, cst.Name)}
            bound = {  # names the block binds before it: the scaler is made earlier
                n.value
                for s in body[:at]
                for n in self._subtree(s)
                if isinstance(n, cst.Name) and isinstance(self.parent(n), cst.AssignTarget)
            }
            if names & bound or any(
                isinstance(n, cst.Call | cst.Lambda) for n in self._subtree(value)
            ):
                return
            self.init_scale = _code(self.module, value)
            self.removed.add(later)
            self.plan.edits[later] = lambda _u: cst.RemoveFromParent()
            self.plan.notes.append(
                f"apex's initial loss scale, set at line {self.line(later)}, is the "
                f"GradScaler's `init_scale={self.init_scale}` (both double it after 2000 steps "
                "without overflow and halve it on one)"
            )
            return

    def _scale_assignment(self, statement: cst.BaseStatement) -> cst.Assign | None:
        """``statement`` is ``<apex.amp>._amp_state.loss_scalers[0]._loss_scale = X`` alone."""
        assign = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if not (isinstance(assign, cst.Assign) and len(statement.body) == 1):
            return None
        target = assign.targets[0].target if len(assign.targets) == 1 else None
        state = next(
            (n for n in self._subtree(target)
             if isinstance(n, cst.Attribute) and n.attr.value == "_amp_state"),
            None,
        ) if target is not None else None  # fmt: skip
        if (
            state is not None
            and _code(self.module, target)
            .replace(" ", "")
            .endswith("._amp_state.loss_scalers[0]._loss_scale")
            and any(q == APEX + "._amp_state" for q in self.qualified(state))
        ):
            return assign
        return None

    def _elif_tests(self, holder: cst.If) -> tuple[cst.If, list[cst.BaseExpression]] | None:
        """``holder`` is an arm of a plain ``if`` chain with an ``elif`` (not nested in
        another ``if``, none of the tests up to its own calls anything): the chain's first
        ``if`` and the tests of the arms before it, which must all be false for it to run
        (CellLineDR's `if args.g > 1: DataParallel elif args.amp: initialize`, torchdistill's
        `elif` after its accelerator branch, the 42nd review; AdaVAE's `if args.do_train:
        initialize elif args.do_gen: ...`, the 44th); None otherwise (an ``if`` with at most an
        ``else:`` is not a chain)."""
        if not self._is_elif(holder) and not isinstance(holder.orelse, cst.If):
            return None
        top, earlier = self._chain_above(holder)
        if (
            self.block_of(top) is None
            or self._if_chain(top) != [top]
            or any(self.facts(t).calls for t in [*earlier, holder.test])
        ):
            return None
        return top, earlier

    def _chain_above(self, holder: cst.If) -> tuple[cst.If, list[cst.BaseExpression]]:
        """The first ``if`` of the chain ``holder`` is an ``elif`` of (``holder`` itself where
        it is none) and the tests of the arms before ``holder``, in order."""
        earlier: list[cst.BaseExpression] = []
        top = holder
        while self._is_elif(top):
            top = self.parent(top)
            earlier.insert(0, top.test)
        return top, earlier

    def _chain_refused(self, holder: cst.If) -> str:
        """Why ``initialize`` in an arm of an ``if``/``elif`` chain stays (``_elif_tests``
        took it otherwise): the test that calls something, or the ``if`` around the chain."""
        top, earlier = self._chain_above(holder)
        tests = [*earlier, holder.test]
        where = "before the `if`, enabled where its arm runs, by hand"
        calling = next((t for t in tests if self.facts(t).calls), None)
        if calling is not None:
            return (
                f"`amp.initialize` sits in an if/elif chain whose test "
                f"`{_code(self.module, calling)}` calls something: read again where the "
                f"GradScaler is made, before the `if`, it could differ; create the GradScaler "
                + where
            )
        located = self.block_of(top)
        outer = self.owner(located[0]) if located is not None else None
        kinds = {cst.If: "if", cst.Else: "else", cst.For: "for", cst.While: "while",
                 cst.With: "with", cst.Try: "try"}  # fmt: skip
        kind = kinds.get(type(outer), "block")
        inside = f"the `{kind}` at line {self.line(outer)}" if outer is not None else "a block"
        return (
            f"`amp.initialize` sits in an if/elif chain inside {inside}, whose tests and the "
            "statements before the chain decide whether it runs: create the GradScaler " + where
        )

    def _if_chain(self, holder: cst.If) -> list[cst.If] | None:
        """``holder`` and the ``if``s it is nested in, outermost first, where each inner one
        sits in the body of the one around it, after statements that keep its test (so ``a and
        b`` is the same test): None when one is not, or sits in an ``else:`` or is an
        ``elif``."""
        chain = [holder]
        while True:
            located = self.block_of(chain[0])
            outer = self.owner(located[0]) if located is not None else None
            if (
                not isinstance(outer, cst.If)
                or _main_guard(self.module, outer)
                or outer in self.dissolved
            ):  # (a script's main block, `if amp is not None:`: no condition on precision)
                return chain
            if self.parent(located[0]) is not outer and not (
                self._else_arm(located[0], outer)
                and not any(  # (the tests inside run again in `enabled=`: no calls, the
                    isinstance(n, cst.Call | cst.NamedExpr)  # 83rd review's 13)
                    for h in chain
                    for n in self._subtree(h.test)
                )
            ):
                return None
            before = list(located[0].body)[: located[1]]
            if before and not self._test_holds(chain[0], before):
                return None
            if isinstance(self.parent(outer), cst.If):  # an `elif`
                return None
            chain.insert(0, outer)

    def _else_arm(self, block: cst.CSTNode, outer: cst.If) -> bool:
        """``block`` is the ``else:`` of ``outer``, whose test calls nothing (the 74th and 80th
        reviews' DTennant: `if num_gpus > 1: ... else: ...; if cfg.FP16: initialize`): the path
        there is ``not (<test>)``, read as well before the ``if`` as at it."""
        otherwise = self.parent(block)
        return (
            isinstance(otherwise, cst.Else)
            and outer.orelse is otherwise
            and not any(isinstance(n, cst.Call | cst.NamedExpr) for n in self._subtree(outer.test))
        )

    def _arm_test(
        self, chain: list[cst.If], index: int, test: cst.BaseExpression, joined: bool
    ) -> str:
        """The text of ``chain[index]``'s test as the path to ``initialize`` takes it (``joined``
        to others by ``and``): negated where the next ``if`` of the chain sits in its
        ``else:``."""
        text = _code(self.module, test)
        nested = chain[index + 1] if index + 1 < len(chain) else None
        if nested is not None and self.within(nested, chain[index].orelse):
            return f"not ({text})"
        return f"({text})" if joined and _loose(test) else text

    def _test_holds(self, inner: cst.If, before: list[cst.CSTNode]) -> bool:
        """The statements ``before`` the nested ``inner`` in its outer ``if`` (mmdetection's
        ``if apex is None: raise ...``, ``optimizer = build_optimizer(...)``) leave its test as
        it was and always reach it (no ``return``, ``break`` or ``continue``): the test means
        the same read right after the outer one."""
        if any(
            isinstance(n, cst.Return | cst.Break | cst.Continue)
            for s in before
            for n in self._subtree(s)
        ):
            return False
        return not self._changes(_code(self.module, inner.test), before)

    def _not_dynamic(self, scale: cst.BaseExpression) -> str:
        return (
            f'`loss_scale={_code(self.module, scale)}` is not provably "dynamic" here (a '
            "caller or config may give a static scale): GradScaler is always dynamic; pass "
            '`loss_scale="dynamic"` or drop it'
        )

    def _static_scale_guard(self, init: cst.Call, scale: cst.BaseExpression, condition) -> None:
        """``loss_scale=args.loss_scale``: None and "dynamic" are apex's dynamic scale, which
        the GradScaler is; any other value was a static scale, which it cannot be. The runs
        that pass one stop where the GradScaler is made, instead of training differently."""
        if self.early is not None:
            self.problem(init, self._not_dynamic(scale))  # (made before `scale` is read)
            return
        value = _code(self.module, scale)
        test = f'{value} not in (None, "dynamic")'
        if condition:
            loose = _loose(cst.parse_expression(condition.strip()))
            test = f"({condition}) and {test}" if loose else f"{condition} and {test}"
        self.after_scaler.append(
            f"if {test}:\n    raise ValueError(\n"
            f'        f"static loss scale {{{value}!r}}: GradScaler is always dynamic"\n    )'
        )
        self.plan.notes.append(
            f"behaviour change: `loss_scale={value}` is apex's dynamic scale where it is None or "
            '"dynamic", as the GradScaler is; a run that gives it another value (a static '
            "scale, which the GradScaler cannot keep) now stops with ValueError where the "
            "GradScaler is made"
        )

    def _drop_emptied(
        self, chain: list[cst.If], removed: cst.CSTNode | None, small, models, optimizer
    ) -> None:
        """The nested ``if``s left with an empty body once ``initialize`` (``removed``) goes
        go too, innermost first (the outermost one is the placing code's)."""
        if removed is None or self._rebind(small, models, optimizer):
            return
        gone = {removed}
        for nested in reversed(chain[1:]):
            kept = [s for s in nested.body.body if s not in gone and s not in self.removed]
            if kept or nested.orelse is not None:
                return
            gone.add(nested)
            self.removed.add(nested)
            self.plan.edits[nested] = lambda _u: cst.RemoveFromParent()

    def _set_in(self, expression: cst.CSTNode, holder: cst.If, statement: cst.CSTNode) -> bool:
        """A name ``expression`` reads is assigned in ``holder``'s body before ``statement``."""
        read = {n.value for n in self._subtree(expression) if isinstance(n, cst.Name)}
        before = itertools.takewhile(lambda s: s is not statement, holder.body.body)
        return any(self.facts(s).assigned & read for s in before)

    def _disabled_before(self, setup: _Setup, holder: cst.If) -> None:
        def build(u: cst.CSTNode) -> cst.FlattenSentinel:
            target = self.access(setup.home) or self.name
            line = cst.parse_statement(f'{target} = torch.amp.GradScaler("cuda", enabled=False)\n')
            kept = [cst.parse_statement(f"{s}\n") for s in self.after_scaler]
            return cst.FlattenSentinel(
                [
                    line.with_changes(leading_lines=u.leading_lines),
                    *kept,
                    u.with_changes(leading_lines=()),
                ]
            )

        previous = self.plan.edits.get(holder)
        self.plan.edits[holder] = build if previous is None else lambda u: build(previous(u))

    def _half_parameters(self, optimizer: cst.BaseExpression | None, init: cst.Call) -> None:
        """An optimizer built in this scope over a tensor or model made float16 here
        (``dtype=torch.half``, ``.half()``, directly or through a name): apex O1 stepped its
        float16 gradients, GradScaler refuses to unscale them (``ValueError: Attempting to
        unscale FP16 gradients``), so the rewrite would raise at its first step."""
        if not isinstance(optimizer, cst.Name):
            return
        function = self.function(init)
        scope = function if isinstance(function, cst.FunctionDef) else self.module
        assigned: dict[str, list[cst.BaseExpression]] = {}
        halved: dict[str, cst.CSTNode] = {}
        for node in self._subtree(scope):
            if isinstance(node, cst.Assign) and self.function(node) is function:
                for target in node.targets:
                    if isinstance(target.target, cst.Name):
                        assigned.setdefault(target.target.value, []).append(node.value)
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value == "half"
                and isinstance(node.func.value, cst.Name)
            ):
                halved.setdefault(node.func.value.value, node)

        def dtype(value: cst.CSTNode, depth: int = 0) -> cst.CSTNode | None:
            """``torch.half``/``torch.float16``, directly or through a name."""
            if isinstance(value, cst.Attribute) and value.attr.value in ("half", "float16"):
                return value
            if isinstance(value, cst.Name) and depth < 2:
                for bound in assigned.get(value.value, []):
                    if (found := dtype(bound, depth + 1)) is not None:
                        return found
            return None

        def half(expression: cst.CSTNode, depth: int = 0) -> cst.CSTNode | None:
            """Where the tensors ``expression`` yields were made float16: only what they are
            made from is followed (the receiver of ``.parameters()``/``.half()``/``.to(...)``,
            the elements of a list, a wrapper's first argument, a ``dtype=``), never an input
            a call is given (``torch.jit.trace(model, example.half())``: SSD's)."""
            if isinstance(expression, cst.List | cst.Tuple):
                for element in expression.elements:
                    if (found := half(element.value, depth)) is not None:
                        return found
                return None
            if isinstance(expression, cst.IfExp):
                return half(expression.body, depth) or half(expression.orelse, depth)
            if isinstance(expression, cst.Attribute):
                if expression.attr.value in ("half", "float16"):
                    return expression
                return half(expression.value, depth)
            if isinstance(expression, cst.Call):
                for arg in expression.args:
                    keyword = arg.keyword.value if arg.keyword is not None else None
                    if keyword == "dtype" and (found := dtype(arg.value)) is not None:
                        return found
                func = expression.func
                if isinstance(func, cst.Attribute) and func.attr.value == "to":
                    for arg in expression.args:
                        if arg.keyword is None and (found := dtype(arg.value)) is not None:
                            return found
                found = half(func.value, depth) if isinstance(func, cst.Attribute) else None
                positional = [a for a in expression.args if a.keyword is None and not a.star]
                if found is None and positional:  # `DDP(model)`, `torch.jit.trace(model, x)`
                    found = half(positional[0].value, depth)
                return found
            if isinstance(expression, cst.Name) and depth < 2:
                if expression.value in halved:
                    return halved[expression.value]
                for value in assigned.get(expression.value, []):
                    if (found := half(value, depth + 1)) is not None:
                        return found
            return None

        for built in assigned.get(optimizer.value, []):
            if not isinstance(built, cst.Call) or not built.args:
                continue
            where = half(built.args[0].value)
            if where is not None:
                self.problem(
                    init,
                    f"the optimizer `{optimizer.value}` updates "
                    f"`{_code(self.module, built.args[0].value)}`, which is float16 here (line "
                    f"{self.line(where)}): apex O1 stepped float16 gradients, GradScaler "
                    "refuses to unscale them (`ValueError: Attempting to unscale FP16 "
                    "gradients`); keep what it updates in float32 by hand",
                )
                return

    def _scale_bound(self, init: cst.Call, key: str, node: cst.BaseExpression) -> None:
        """apex's dynamic scale kept within ``min_loss_scale`` / ``max_loss_scale``: its floor
        applied when an overflow halved the scale, its ceiling when growth doubled it, each
        at the update. After each ``scaler.update()``, a scale past the bound is set back to
        it (``scaler.update(bound)``): the same scale at every step, and the growth count
        restarts where apex's did. apex capped its initial 2**16 too (``min(max_loss_scale,
        2**16)``): a lower ceiling is also GradScaler's ``init_scale``."""
        value = _number(node)
        floor = key == "min_loss_scale"
        shown = f"`{key}={_code(self.module, node)}`"
        if value is not None and floor and value == 0:  # apex tests `if self._min_loss_scale:`
            self.plan.notes.append(f"{shown} goes: apex sets no floor for 0")
            return
        if value is None or value <= 0:
            self.problem(
                init,
                f"`amp.initialize` sets {shown}: GradScaler has no bound on its scale, and the "
                "rewrite keeps apex's only where it is a positive number written here; keep it "
                "by hand after each `scaler.update()`",
            )
            return
        self.bounds.append(("<" if floor else ">", repr(value)))
        capped = not floor and value < 2.0**16 and self.init_scale is None
        if capped:
            self.init_scale = repr(value)
        self.plan.notes.append(
            f"{shown} is kept: after each `scaler.update()`, a scale "
            f"{'below' if floor else 'above'} {value!r} is set back to it "
            f"(`scaler.update({value!r})`), as apex's {'floor' if floor else 'ceiling'} did "
            "(`scaler.get_scale()` reads the scale once per step)"
            + (
                f", and it is the GradScaler's `init_scale={value!r}`, as apex began at the "
                "lower of it and 2**16"
                if capped
                else ""
            )
        )


def _number(node: cst.BaseExpression) -> float | None:
    """The value of a literal int or float, or a power of two of them (``2**24``; None:
    another expression)."""
    if isinstance(node, cst.Integer | cst.Float):
        return float(node.evaluated_value)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
        base, exponent = _number(node.left), _number(node.right)
        if base is not None and exponent is not None and abs(exponent) <= 64:
            return base**exponent
    return None


def _literal(node: cst.BaseExpression) -> bool:
    """A value the argument holds in every run (a static loss scale, ``True``)."""
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    if isinstance(node, cst.Name):
        return node.value in ("True", "False", "None")
    return isinstance(node, cst.Integer | cst.Float | cst.SimpleString | cst.ConcatenatedString)
