"""``amp.initialize`` -> the GradScaler: its options, the opt-level switch, and what it tells the
rest of the plan.
"""

from __future__ import annotations

import ast
import itertools
import os
from collections.abc import Iterator

import libcst as cst

from ampmigrate.apex.common import (
    _KNOWN_KWARGS,
    _argument,
    _code,
    _is_call_of,
    _optimizers,
    _Setup,
    _statements,
    initialize_arguments,
    is_path,
    without_optimizer,
)
from ampmigrate.apex.keeps import HANDS_ON, RETURNS_SELF, SHOWING, keeps, module_lookup
from ampmigrate.apex.siblings import main_test
from ampmigrate.apex.users import calls_keep_default, level_elsewhere
from ampmigrate.apex.verdict import APEX, not_o1
from ampmigrate.findings import DECLARE_LEVEL
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


# builtins that only show what they are given; wrappers of a model whose result is the model
_MODEL_WRAPPERS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel", "apex.parallel.DistributedDataParallel",
})  # fmt: skip
_WRAPPER_NAMES = frozenset({"DataParallel", "DistributedDataParallel"})  # (however imported)


def _normal(code: str) -> str:
    """``code`` as ``ast.unparse`` spells it (quotes, spaces), to compare it with the reads."""
    try:
        return ast.unparse(ast.parse(code.strip(), mode="eval"))
    except SyntaxError:
        return code


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
                "inference rewrite takes a file whose one apex call is its `amp.initialize`"
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
                    f"({_code(self.module, t)})"
                    if len(tests) > 1 and _loose(t)
                    else _code(self.module, t)
                    for t in tests
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

    def _kept_past_pass(
        self, place: cst.CSTNode, small: cst.BaseSmallStatement, init: cst.Call
    ) -> str | None:
        """Why the models that ``initialize`` gives on a pass of a loop may run after that pass
        where the rewrite does not follow them (None: they cannot): any use in the loop but a
        call of the model, its attributes, a plain name bound to it, a `return`, a wrapper
        bound to a plain name, or an argument of a function of this file or of `print`-like
        builtins (the 56th review's k-fold ensembles: `models.append(model)`, `ens = {**ens,
        fold: model}`, `heappush(h, model)`, whose later `ens[0](x)` ran in float32 with no
        word)."""
        loop = self._loop_around(place, init)
        target = small.targets[0].target if isinstance(small, cst.Assign) else None
        if loop is None or target is None:
            return None
        first = target.elements[0].value if isinstance(target, cst.Tuple | cst.List) else target
        names = {n.value for n in self._subtree(first) if isinstance(n, cst.Name)}
        own = set(map(id, self._subtree(self.statement(init))))
        aliases = self._aliases_in(loop, names, own)  # (one used before its binding, on the
        names |= aliases  # next pass: 59a's A13)
        read = self._read_after_loop(loop, aliases)
        if read is not None:
            return (
                f"`amp.initialize` runs on every pass of the loop at line {self.line(loop)}, "
                f"and `{read.value}` holds a pass's model and is read after the loop (line "
                f"{self.line(read)}), where the rewrite does not follow it: a forward of it "
                "there ran under apex O1's casts (float16) and would run in float32, outside "
                "any region; migrate by hand"
            )
        # (a use before `initialize` counts too: O1 returns the models it is given, so a
        # pass's fresh `model = build()` kept before it is the model initialized)
        for node in self._subtree(loop.body):
            if not isinstance(node, cst.Name) or node.value not in names or id(node) in own:
                continue
            parent = self.parent(node)
            if (isinstance(parent, cst.Attribute) and parent.attr is node) or (
                isinstance(parent, cst.Arg) and parent.keyword is node
            ):
                continue  # (`args.model`, `f(model=...)`: a name, not the model)
            while isinstance(parent, cst.Element | cst.Tuple | cst.List):
                parent = self.parent(parent)
            if isinstance(parent, cst.AssignTarget):
                continue  # (`best_score, best = ...` binds the alias: its reads are read)
            node, method = self._model_value(node)
            if method is None:
                node = self._either_model(node, names)
            parent = self.parent(node)
            if method is not None:
                if method not in HANDS_ON:
                    continue  # (`model.zero_grad()`, `model.fc.weight`: reads, not the model)
                parent = None  # (`model.modules()`, `model.apply(f)`: hands it on)
            elif (
                isinstance(parent, cst.Assign)
                and parent.value is node
                and all(isinstance(t.target, cst.Name) for t in parent.targets)
            ) or self._paired_target(node) is not None:  # an alias (`net = model.eval()`,
                continue  # `best_score, best = score, model`: in ``names`` already)
            if parent is not None and (
                (isinstance(parent, cst.Call) and parent.func is node)
                or isinstance(parent, cst.AssignTarget | cst.Return | cst.Expr)
                or self._stored_for_the_pass(parent, node, loop)
            ):
                continue
            call = self.parent(parent) if isinstance(parent, cst.Arg) else None
            kept = ""  # (where a function of the project keeps it: "" where none is read)
            if isinstance(call, cst.Call) and isinstance(call.func, cst.Name):
                kept = self._callee_keeps(call, parent)
                if kept is None:
                    continue
            if (
                self._wrapper_of_model(call)
                and isinstance(self.parent(call), cst.Assign)
                and all(isinstance(t.target, cst.Name) for t in self.parent(call).targets)
            ):  # (`dp = DataParallel(model)`: `dp` is in ``names`` already)
                continue
            shown = _code(self.module, self.statement(node)).strip().splitlines()[0]
            where = (
                f", which keeps it: {kept}:" if kept else " where the rewrite does not follow it:"
            )
            return (
                f"`amp.initialize` runs on every pass of the loop at line {self.line(loop)}, "
                f"and line {self.line(node)} hands its model on (`{shown}`){where} it may run "
                "after its pass (apex O1 cast those forwards too, in float16); migrate by hand"
            )
        return None

    def _aliases_in(self, loop: cst.CSTNode, names: set[str], own: set[int]) -> set[str]:
        """The plain names the loop binds to the model (`prev = model`, `net = model.eval()`,
        `dp = DataParallel(model)`), to a fixed point."""
        found = set(names)
        while True:
            more = set()
            for node in self._subtree(loop.body):
                if not (isinstance(node, cst.Name) and node.value in found and id(node) not in own):
                    continue
                value, method = self._model_value(node)
                if method is None:
                    value = self._either_model(value, found)
                holder = self.parent(value)
                if method is None and isinstance(holder, cst.Arg):  # (a wrapper's argument)
                    call = self.parent(holder)
                    wrapped = self._wrapper_of_model(call)
                    value, holder = (call, self.parent(call)) if wrapped else (value, None)
                if method is None and isinstance(holder, cst.Assign) and holder.value is value:
                    more |= {
                        t.target.value for t in holder.targets if isinstance(t.target, cst.Name)
                    }
                elif method is None and (paired := self._paired_target(value)) is not None:
                    more.add(paired)
            if more <= found:
                return found - names
            found |= more

    def _read_after_loop(self, loop: cst.CSTNode, aliases: set[str]) -> cst.Name | None:
        """The first read, after ``loop`` in its function, of a name the loop binds to its
        pass's model (`prev = model`, then `prev(x)` after the loop: the 62nd stop's probe,
        rewritten with no word before)."""
        end = self.ends[id(loop)] - 1
        for node in self._subtree(self.function(loop)):
            if not (
                isinstance(node, cst.Name) and node.value in aliases and self.order[id(node)] >= end
            ):
                continue
            parent = self.parent(node)
            if (
                isinstance(parent, cst.AssignTarget | cst.Param)
                or (isinstance(parent, cst.Attribute) and parent.attr is node)
                or (isinstance(parent, cst.Arg) and parent.keyword is node)
            ):
                continue
            return node
        return None

    def _either_model(self, value: cst.CSTNode, names: set[str]) -> cst.CSTNode:
        """``value`` or, where it is an arm of a conditional expression whose other arm is
        the model too (Hugging Face's `model.module if hasattr(model, "module") else model`),
        that expression: it carries the model on as either arm does."""
        choice = self.parent(value)
        if not isinstance(choice, cst.IfExp) or value not in (choice.body, choice.orelse):
            return value
        other = choice.orelse if value is choice.body else choice.body
        while isinstance(other, cst.Attribute) and other.attr.value == "module":
            other = other.value
        return choice if isinstance(other, cst.Name) and other.value in names else value

    def _paired_target(self, value: cst.CSTNode) -> str | None:
        """The plain name a tuple assignment binds ``value`` to, by position (`best_score,
        best = score, model`, the 60th review's over-refusal); None otherwise."""
        pair = self.parent(value)
        holder = self.parent(self.parent(pair)) if isinstance(pair, cst.Element) else None
        if not (
            isinstance(holder, cst.Assign)
            and holder.value is self.parent(pair)
            and isinstance(holder.value, cst.Tuple)
            and len(holder.targets) == 1
            and isinstance(holder.targets[0].target, cst.Tuple | cst.List)
        ):
            return None
        values, targets = holder.value.elements, holder.targets[0].target.elements
        if len(values) != len(targets) or any(
            isinstance(e, cst.StarredElement) for e in (*values, *targets)
        ):
            return None
        target = targets[list(values).index(pair)].value
        return target.value if isinstance(target, cst.Name) else None

    def _wrapper_of_model(self, call: cst.CSTNode | None) -> bool:
        """``call`` wraps a model into one that runs it (`torch.nn.DataParallel(model)`, also
        under a name the imports do not resolve; narrower than regions' ``_wraps_model``,
        whose copies and compiles the loop check refuses as handing the model on)."""
        return isinstance(call, cst.Call) and (
            any(q in _MODEL_WRAPPERS for q in self.qualified(call.func))
            or _code(self.module, call.func).rpartition(".")[2] in _WRAPPER_NAMES
        )

    def _model_value(self, node: cst.CSTNode) -> tuple[cst.CSTNode, str | None]:
        """The expression that carries the model on from ``node``: through method calls that
        return it (`model.eval()`, `model.to(device)`), to the first method that does not
        (its name; None where the model itself is used)."""
        while True:
            top = node
            while isinstance(up := self.parent(top), cst.Attribute | cst.Subscript) and (
                up.value is top
            ):
                top = up
            if top is node:
                return node, None
            above = self.parent(top)
            if not (isinstance(above, cst.Call) and above.func is top):
                first = self.parent(node)  # (`model[0]`, `dp.module`: a module of it, 59a's
                if isinstance(first, cst.Subscript) or (  # A15, A16; other reads and stores
                    isinstance(first, cst.Attribute) and first.attr.value == "module"
                ):  # are not the model)
                    node = first
                    continue
                return node, ""
            method = top.attr.value if isinstance(top, cst.Attribute) else ""
            if method not in RETURNS_SELF:
                return node, method
            node = above

    def _callee_keeps(self, call: cst.Call, arg: cst.Arg) -> str | None:
        """Where the function of this file or of a project module that ``call`` hands the
        model to (as ``arg``) may keep it past the pass (:mod:`ampmigrate.apex.keeps`; the 56c
        review's `register(m)` that appends it to a global list); "" where that function is
        not found; None where it keeps nothing."""
        lookup = module_lookup(self.path, self.syntax)
        name = call.func.value
        found = lookup(ast.Name(id=name))
        before = call.args[: call.args.index(arg)]
        if arg.star or any(a.star for a in before):
            return ""  # (its place among the parameters is not known: 58a's K09)
        home = self.function(call)
        if isinstance(home, cst.FunctionDef) and any(
            name in lookup.within(f).local  # (a parameter, a local, a nested `def`, a local
            for f in ast.walk(self.syntax)  # import of that name: 59a's A08, A09, A28)
            if isinstance(f, ast.FunctionDef) and f.name == home.name.value
        ):
            return ""  # (a local of that name, not the module's function)
        if found is None:
            return None if name in SHOWING and not lookup.bound(name) else ""
        function, lookup, file = found
        if arg.keyword is not None:
            return keeps(function, None, arg.keyword.value, lookup, file)
        index = [a for a in call.args if a.keyword is None and not a.star].index(arg)
        return keeps(function, index, None, lookup, file)

    def _stored_for_the_pass(self, parent: cst.CSTNode, node: cst.Name, loop: cst.CSTNode) -> bool:
        """``args.model = model`` (or ``args.adv = FGM(model)``): the pass's model, or what it
        builds on it, kept on an object that nothing after the loop, in the function, reads
        (UER-py's cross-validation folds; not the 56b review's `store.model = model` whose
        `store.model(x)` after the loop ran in float32). The object is used nowhere in the
        function but through its attributes, or as an argument of a call in the pass: an
        alias, a container or `__dict__` may read the model after the loop (56c)."""
        if isinstance(parent, cst.Arg) and isinstance(self.parent(parent), cst.Call):
            parent, node = self.parent(self.parent(parent)), self.parent(parent)
        if not (  # (or an object built on it: `args.adv = FGM(model)`, UER-py's)
            isinstance(parent, cst.Assign) and parent.value is node and len(parent.targets) == 1
            and isinstance(parent.targets[0].target, cst.Attribute)
            and isinstance(parent.targets[0].target.value, cst.Name)
        ):  # fmt: skip
            return False
        target = parent.targets[0].target
        base, stored = target.value.value, _code(self.module, target)
        start, end = self.order[id(loop)], self.ends[id(loop)] - 1  # (end: past the loop)
        for n in self._subtree(self.function(loop)):
            after = self.order[id(n)] >= end
            if after and isinstance(n, cst.Attribute) and _code(self.module, n) == stored:
                return False  # (the attribute read after the loop)
            if not (isinstance(n, cst.Name) and n.value == base):
                continue
            up = self.parent(n)
            if isinstance(up, cst.Attribute) and up.value is n:
                if up.attr.value.startswith("__"):
                    return False  # (`args.__dict__[...]`)
                continue  # (`args.lr`, `args.log(...)`)
            if isinstance(up, cst.Param) or (isinstance(up, cst.Attribute) and up.attr is n):
                continue
            if isinstance(up, cst.Arg) and up.value is n and not after:
                continue  # (handed to a function before the loop ends: UER-py's
                # `args = load_hyperparam(args)`, `train_model(args, ...)` in the pass)
            if isinstance(up, cst.AssignTarget) and self.order[id(n)] < start:
                continue  # (bound before the loop: `args = parser.parse_args()`)
            return False  # (aliased, put in a container, handed on after the loop, ...)
        return True

    def _loops_around(self, place: cst.CSTNode, init: cst.Call) -> Iterator[cst.For | cst.While]:
        """The loops of ``init``'s function around ``place``, innermost first."""
        home = self.function(init)
        for above in self.ancestors(place):
            if isinstance(above, cst.For | cst.While) and self.function(above) is home:
                yield above

    def _loop_around(self, place: cst.CSTNode, init: cst.Call) -> cst.For | cst.While | None:
        """The innermost loop of ``init``'s function around ``place``."""
        return next(self._loops_around(place, init), None)

    def _varies_in_loop(
        self, condition: str | None, place: cst.CSTNode, init: cst.Call
    ) -> str | None:
        """Why a GradScaler made at ``place`` on every pass of a loop, enabled by
        ``condition``, would not follow apex (None: it would): the condition reads what the
        loop changes (`if epoch == 0: amp.initialize(...)`, `enabled=fold == 0`). apex's amp
        state, once set up, stayed for the later passes; the GradScaler made again there
        would be switched off (the 56th review: every later epoch trained in float32)."""
        loops = list(self._loops_around(place, init))
        if not condition or not loops:
            return None
        try:
            tree = ast.parse(condition, mode="eval")
        except SyntaxError:
            return None
        chains = (ast.Name, ast.Attribute, ast.Subscript)
        inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, chains[1:])}
        read = {  # whole chains: `args.fp16`, `state["first"]`, not their `args`, `state`
            ast.unparse(n) for n in ast.walk(tree)
            if isinstance(n, chains) and id(n) not in inner
        }  # fmt: skip
        # what may change it beyond the loop's own writes: a `global` or `nonlocal`
        # declaration of its name anywhere, a call in the condition itself
        declared = {
            name.name.value for n in self.nodes if isinstance(n, cst.Global | cst.Nonlocal)
            for name in n.names
        }  # fmt: skip
        anyway = {r for r in read if r.partition(".")[0] in declared}
        anyway |= read if any(isinstance(n, ast.Call) for n in ast.walk(tree)) else set()
        for loop in loops:
            targets = [loop.target] if isinstance(loop, cst.For) else []
            for node in self._subtree(loop.body):
                if isinstance(node, cst.AssignTarget | cst.AugAssign | cst.AnnAssign
                              | cst.For | cst.NamedExpr):  # fmt: skip
                    targets.append(node.target)
                elif isinstance(node, cst.AsName):
                    targets.append(node.name)
            changed: set[str] = set()  # each target whole (`args.lr`: not `args`)
            while targets:
                target = targets.pop()
                if isinstance(target, cst.Tuple | cst.List):
                    targets += [e.value for e in target.elements]
                else:
                    changed.add(_code(self.module, target))
            # and a call of a method of it (`history.append(x)`, `cfg.advance()`), `setattr`
            # or `delattr` of it (the 56th review's probes)
            for node in self._subtree(loop.body):
                if not isinstance(node, cst.Call):
                    continue
                if isinstance(node.func, cst.Attribute):
                    changed.add(_code(self.module, node.func.value))
                elif isinstance(node.func, cst.Name) and node.func.value in ("setattr", "delattr"):
                    changed |= {_code(self.module, a.value) for a in node.args[:1]}
            changed = {_normal(c) for c in changed} | anyway  # (spelled as ast spells reads)
            both = sorted(  # a chain rebound, its base rebound, or a part of it changed
                r for r in read
                if any(
                    r == c or r.startswith((c + ".", c + "[")) or c.startswith((r + ".", r + "["))
                    for c in changed
                )
            )  # fmt: skip
            if both:
                return (
                    f"`amp.initialize` runs on every pass of the loop at line "
                    f"{self.line(loop)}, switched by `{condition}`, which reads `{both[0]}`, "
                    "which the loop changes: apex's amp state, once set up, stayed for the "
                    "later passes, where a GradScaler made there again would be switched off; "
                    "make one GradScaler before the loop, enabled as the runs need, by hand"
                )
        return None

    def _pairs_loop(self, statement, small, models, optimizer) -> cst.For | None:
        """``for i in ...: m, o = amp.initialize(ms[i], os[i], ...)`` with only the write-backs
        ``ms[i] = m`` / ``os[i] = o`` after it (one initialize per model/optimizer pair, as
        sentence-transformers' ``fit`` does): natively the loop only re-binds what it was given,
        so it stays with ``m, o = ms[i], os[i]``, and one GradScaler, made before it, serves
        every pair (apex kept one loss scale for all of them too). None: not this shape."""
        loop = self.parent(self.parent(statement))
        if not (
            isinstance(loop, cst.For)
            and loop.orelse is None
            and isinstance(loop.target, cst.Name)
            and isinstance(loop.body, cst.IndentedBlock)
            and loop.body.body[0] is statement
            and isinstance(small, cst.Assign)
            and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Tuple)
        ):
            return None
        index = loop.target.value
        names = [_code(self.module, e.value) for e in small.targets[0].target.elements]

        def item(node) -> str | None:  # `seq[i]`: seq
            if (
                isinstance(node, cst.Subscript)
                and len(node.slice) == 1
                and isinstance(node.slice[0].slice, cst.Index)
                and _code(self.module, node.slice[0].slice.value) == index
            ):
                return _code(self.module, node.value)
            return None

        sequences = [item(models), item(optimizer)]
        if None in sequences or len(names) != 2:
            return None
        allowed = {(f"{seq}[{index}]", name) for seq, name in zip(sequences, names, strict=True)}
        for rest in loop.body.body[1:]:
            assign = rest.body[0] if isinstance(rest, cst.SimpleStatementLine) else None
            if not (
                isinstance(assign, cst.Assign)
                and len(rest.body) == 1
                and len(assign.targets) == 1
                and (
                    _code(self.module, assign.targets[0].target),
                    _code(self.module, assign.value),
                )
                in allowed
            ):
                return None
        self.plan.notes.append(
            f"`amp.initialize` ran once per model/optimizer pair in the loop at line "
            f"{self.line(loop)}: one GradScaler, made before it, serves every pair (apex kept "
            "one loss scale for all of them too); the loop only re-binds what it is given"
        )
        return loop

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
            if self.parent(located[0]) is not outer:
                return None
            before = list(located[0].body)[: located[1]]
            if before and not self._test_holds(chain[0], before):
                return None
            if isinstance(self.parent(outer), cst.If):  # an `elif`
                return None
            chain.insert(0, outer)

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

    def _constant(self, value: cst.BaseExpression, init: cst.Call) -> cst.BaseExpression:
        """``value``, or the literal a plain name holds at ``initialize``: its one assignment
        in the same scope comes before the call (``opt_level = "O1"`` two lines above), and
        nothing else binds the name (no ``global``/``nonlocal``, no parameter, no loop)."""
        if is_path(value) and isinstance(value, cst.Subscript):
            return self._keyed_constant(value)
        if not isinstance(value, cst.Name) or value.value in ("True", "False", "None"):
            return value
        name = value.value
        if any(
            isinstance(n, cst.Global | cst.Nonlocal) and name in {m.name.value for m in n.names}
            for n in self.nodes
        ):
            return value
        _, assign = self._single_store(name, init)
        if (
            assign is not None
            and _literal(assign.value)
            and self.function(assign) is self.function(init)
        ):
            return assign.value
        return value

    def _keyed_constant(self, value: cst.Subscript) -> cst.BaseExpression:
        """``self.args["amp_level"]`` where the file binds ``self.args`` once, to a dict literal
        whose entry for that key is a literal, and changes it nowhere (no item store, no method
        call on it): that literal (HashRetrieval's ``{'amp_level': 'O2'}``, which the setting
        would otherwise have declared O1)."""
        base = _code(self.module, value.value)
        key = value.slice[0].slice.value
        stores = [
            n for n in self.nodes
            if isinstance(n, cst.AssignTarget | cst.AugAssign | cst.AnnAssign)
            and _code(self.module, n.target).startswith(base)
        ]  # fmt: skip
        changed = any(
            isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
            and _code(self.module, n.func.value) == base
            for n in self.nodes
        )  # fmt: skip
        if changed or len(stores) != 1 or _code(self.module, stores[0].target) != base:
            return value
        assign = self.parent(stores[0])
        literal = assign.value if isinstance(assign, cst.Assign) else None
        if not isinstance(literal, cst.Dict) or any(
            isinstance(e, cst.StarredDictElement) for e in literal.elements
        ):
            return value
        found = [
            e.value for e in literal.elements
            if _code(self.module, e.key) == _code(self.module, key)
            or (isinstance(e.key, cst.SimpleString) and isinstance(key, cst.SimpleString)
                and e.key.evaluated_value == key.evaluated_value)
        ]  # fmt: skip
        return found[0] if len(found) == 1 and _literal(found[0]) else value

    def _single_store(self, name: str, init: cst.Call) -> tuple[list[cst.Name], cst.Assign | None]:
        """The references to ``name`` in the scope of ``initialize`` (keyword and attribute
        names aside), and its assignment ``name = <value>`` where that is the only store of the
        name there and comes before the call (None otherwise)."""
        refs = [
            n for n in self._subtree(self.function(init))
            if isinstance(n, cst.Name) and n.value == name
            and not (isinstance(self.parent(n), cst.Arg) and self.parent(n).keyword is n)
            and not (isinstance(self.parent(n), cst.Attribute) and self.parent(n).attr is n)
        ]  # fmt: skip
        stores = [n for n in refs if not self._read(n)]
        assign = self.parent(self.parent(stores[0])) if len(stores) == 1 else None
        if (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and assign.targets[0].target is stores[0]
            and self.order[id(assign)] < self.order[id(init)]
        ):
            return refs, assign
        return refs, None

    def _level_switch(self, level: cst.CSTNode, init: cst.Call) -> cst.BaseExpression | None:
        """``level = "O1" if x else "O0"``, assigned once before ``initialize``: O0 is apex
        switched off, so the GradScaler and autocast are ``enabled=x`` (and the assignment goes
        when only ``initialize`` read it), else ``enabled=level == "O1"``. A branch naming
        another level blocks; anything else is None (taken as O1, with a note). The same
        conditional written at the keyword (``opt_level="O1" if fp16 else "O0"``, the 42nd
        review: "not provably O1", where the assigned form was taken) is that switch too."""
        if isinstance(level, cst.IfExp):
            values = _branch_levels(level)
            if self._names_another_level(init, _code(self.module, level), values):
                return None
            if sorted(v or "" for v in values) != ["O0", "O1"]:
                return None  # (one level either way, or a computed one: read as any other)
            return self._where_o1(level, values)
        if not isinstance(level, cst.Name):
            return None
        refs, assign = self._single_store(level.value, init)
        if assign is None or not isinstance(assign.value, cst.IfExp):
            return None
        levels = _branch_levels(assign.value)
        if None in levels or self._names_another_level(assign, level.value, levels):
            return None
        if set(levels) != {"O0", "O1"}:
            return None  # one level either way: the plain reading (a note) says it
        reads = [n for n in refs if n is not assign.targets[0].target]
        if len(reads) != 1 or not self.within(reads[0], init):
            return cst.parse_expression(f'{level.value} == "O1"')  # the name stays, read later
        self._remove_statement(self.statement(assign))
        return self._where_o1(assign.value, levels)

    def _names_another_level(self, node: cst.CSTNode, shown: str, levels: list) -> bool:
        """One of a switch's ``levels`` is O2 or O3: said at ``node``."""
        other = [v for v in levels if v is not None and v not in ("O0", "O1")]
        if other:
            self.problem(
                node,
                f'opt_level `{shown}` may be "{other[0]}": only O1 (autocast + GradScaler) '
                "exists in torch.amp; O2/O3 cast the model, which native AMP does not do",
            )
        return bool(other)

    def _where_o1(self, switch: cst.IfExp, levels: list) -> cst.BaseExpression:
        """The test under which ``switch`` (an O0/O1 conditional, ``levels`` its two values)
        gives O1."""
        if levels == ["O1", "O0"]:
            return switch.test
        return cst.UnaryOperation(
            cst.Not(), cst.parse_expression(f"({_code(self.module, switch.test)})")
        )

    def _flag_read(self, level: cst.BaseExpression) -> str | None:
        """The flag of this file that a computed level reads (``f"O{args.amp_level}"``)."""
        for node in self._subtree(level):
            if isinstance(node, cst.Attribute) and (flag := self._flag_of(node.attr.value)):
                return flag[0]
        return None

    def _flag_of(self, attr: str) -> tuple[str, cst.Call] | None:
        """The ``add_argument`` call of this file whose destination is ``attr`` (its long
        option, or ``attr``, and the call): ``arg = parser.add_argument`` then ``arg(...)``
        counts too."""
        aliases = {
            t.target.value
            for n in self.nodes
            if isinstance(n, cst.Assign)
            and isinstance(n.value, cst.Attribute)
            and n.value.attr.value == "add_argument"
            for t in n.targets
            if isinstance(t.target, cst.Name)
        }
        flag = None
        for node in self.nodes:
            adds = _is_call_of(node, "add_argument") or (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Name)
                and node.func.value in aliases
            )
            if isinstance(node, cst.Call) and adds:
                options = [a.value for a in node.args if not a.keyword]
                names = [o.evaluated_value for o in options
                         if isinstance(o, cst.SimpleString)]  # fmt: skip
                dest = _argument(node, "dest", 99)
                long = next((n for n in names if n.startswith("--")), None)
                derived = (
                    dest.evaluated_value if isinstance(dest, cst.SimpleString)
                    else long[2:].replace("-", "_") if long else None
                )  # fmt: skip
                if derived == attr:
                    flag = (long or attr, node)
        return flag

    def _module_constant(self, level: cst.Name) -> bool:
        """``LEVEL = "O1"`` at module level, the only binding of the name in the file (no
        parameter, local, loop variable, import or ``global`` of it): the level is O1."""
        name = level.value
        bindings = []
        for node in self.nodes:
            if isinstance(node, cst.Name) and node.value == name:
                parent = self.parent(node)
                if isinstance(
                    parent,
                    cst.AssignTarget
                    | cst.AugAssign
                    | cst.Param
                    | cst.For
                    | cst.AsName
                    | cst.NamedExpr
                    | cst.CompFor
                    | cst.NameItem,
                ):
                    bindings.append(parent)  # fmt: skip
                elif isinstance(parent, cst.Tuple | cst.List | cst.Element | cst.StarredElement):
                    return False  # (unpacked into: not followed)
            elif isinstance(node, cst.FunctionDef | cst.ClassDef) and node.name.value == name:
                return False
        if len(bindings) != 1 or not isinstance(bindings[0], cst.AssignTarget):
            return False
        assign = self.parent(bindings[0])
        return (
            isinstance(assign, cst.Assign)
            and self.parent(self.parent(assign)) is self.module
            and isinstance(assign.value, cst.SimpleString)
            and assign.value.evaluated_value == "O1"
        )

    def _level_choices(
        self, level: cst.CSTNode, init: cst.Call
    ) -> cst.BaseExpression | bool | None:
        """An opt level read from a flag is O1 only where the flag cannot say otherwise: its
        ``add_argument`` in this file has ``choices`` within O0/O1 and nothing assigns it
        again. O0 is apex switched off, so a possible O0 that no ``if <level> != "O0":``
        around ``initialize`` excludes gives ``enabled=<level> == "O1"``. Anything else
        (a config value, a parameter, a flag that accepts O2/O3) is not provably O1: O2/O3 cast
        the model and keep fp32 master weights, which torch.amp cannot express, so a rewrite
        "as O1" would change those runs. True: O1 for sure; None: refused (said here)."""
        spelled = _code(self.module, level)
        if self._pinned_o1(spelled, init):
            return True
        digit = _digit_of(level)
        counted = self._flag_of(digit.attr.value) if digit is not None else None
        if digit is not None:
            switch = self._digit_choices(digit, counted, init)
            if switch is not None:
                return switch
        attr = level.attr.value if isinstance(level, cst.Attribute) else None
        flag, reassigned = None, False
        if attr is not None:
            flag = self._flag_of(attr)
            reassigned = any(
                isinstance(n, cst.AssignTarget | cst.AugAssign)
                and isinstance(n.target, cst.Attribute)
                and n.target.attr.value == attr
                and not self.dead(n)  # (`if amp is None: args.opt_level = "O0"` goes)
                and not self._copies_flag(n, attr)
                for n in self.nodes
            )
        levels, taken = None, None
        if flag is not None and not reassigned:
            choices = _argument(flag[1], "choices", 99)
            elements = (
                choices.elements if isinstance(choices, cst.List | cst.Tuple | cst.Set) else ()
            )
            values = {e.value.evaluated_value for e in elements
                      if isinstance(e.value, cst.SimpleString)}  # fmt: skip
            if elements and len(values) == len(elements) and values <= {"O0", "O1"}:
                levels = values
        if levels is None and flag is None and self._default_everywhere(level, init):
            levels = {"O1"}
        if levels is None and isinstance(level, cst.Name) and self._module_constant(level):
            levels = {"O1"}
        if levels is None:
            if counted is not None:  # `f"O{args.level}"` of an int flag
                choices = _argument(counted[1], "choices", 99)
                origin = (
                    f'the flag `{counted[0]}` after an "O", whose choices '
                    f"`{_code(self.module, choices)}` are not within 0/1"
                    if choices is not None
                    else f'the flag `{counted[0]}` after an "O", which accepts any number '
                    "(no `choices`)"
                )
            elif flag is not None:
                choices = _argument(flag[1], "choices", 99)
                origin = (
                    f"the flag `{flag[0]}`, whose choices `{_code(self.module, choices)}` are not "
                    "within O0/O1"
                    if choices is not None
                    else f"the flag `{flag[0]}`, which accepts any level (no `choices`)"
                )
                if reassigned:
                    origin = f"the flag `{flag[0]}`, reassigned in this file"
            elif isinstance(level, cst.Name) and any(
                isinstance(p, cst.Param) and p.name.value == level.value for p in self.nodes
            ):
                origin = f"the parameter `{level.value}`: a caller may pass any level"
            elif isinstance(level, cst.Name):
                origin = f"`{spelled}`, whose value the rewrite cannot trace to O0/O1 in this file"
            elif not _plain(level) and (param := self._parameter_read(level, init)) is not None:
                default = (
                    f" (default `{_code(self.module, param.default)}`)"
                    if param.default is not None else ""
                )  # fmt: skip
                origin = (
                    f"`{spelled}`, computed from the parameter `{param.name.value}`{default}: "
                    "a caller may pass any level"
                )
            elif any(isinstance(n, cst.Call) for n in self._subtree(level)):
                origin = f"`{spelled}`, a call whose result the rewrite does not evaluate"
            elif (read := self._flag_read(level)) is not None:
                origin = f"`{spelled}`, computed from this file's flag `{read}`"
            elif not any(  # nothing here stores into it (`CONFIG = {"level": "O2"}` does)
                isinstance(n, cst.AssignTarget | cst.AugAssign | cst.AnnAssign)
                and _code(self.module, n.target).split("[")[0].split(".")[0]
                == spelled.split("[")[0].split(".")[0]
                for n in self.nodes
            ):
                origin = f"`{spelled}`, set outside this file (a config, an argument)"
            else:
                origin = f"`{spelled}`, whose value the rewrite cannot trace to O0/O1 in this file"
            branches = [
                n for n in self.nodes if isinstance(n, cst.Comparison)
                and any(self._other_level(o) for o in _operands(n))
                and spelled in {_code(self.module, o) for o in _operands(n)}
                and not self._any_level(n)
            ]  # fmt: skip
            also = (
                f"; this file itself branches on `{_code(self.module, branches[0])}` at line "
                f"{self.line(branches[0])}"
                if branches
                else ""
            )
            uncovered = also or (
                ""  # (the setting takes an int flag whose default is 0 or 1: _digit_choices)
                if counted is not None
                and _kept_int(counted[1], digit.attr.value, self.nodes)
                and _open_bit(counted[1])
                else self._uncovered(level, init, flag, reassigned)
            )
            if self.declared is None or uncovered:
                self.problem(init, self._not_o1(spelled, origin, also, uncovered, counted))
                return None
            levels, taken = {"O0", "O1"}, origin
        guards = [a.test for a in self.ancestors(init) if isinstance(a, cst.If)
                  and self.within(init, a.body)]  # fmt: skip
        excluded = any(
            isinstance(t, cst.Comparison) and _code(self.module, t.left) == spelled
            and len(t.comparisons) == 1 and isinstance(t.comparisons[0].operator, cst.NotEqual)
            and isinstance(t.comparisons[0].comparator, cst.SimpleString)
            and t.comparisons[0].comparator.evaluated_value == "O0"
            for t in guards
        )  # fmt: skip
        if taken is not None:
            trains = _argument(init, "optimizers", 1) is not None
            run = (
                f"as O1 ({'autocast + GradScaler' if trains else 'autocast'}, with fp32 weights)"
                if excluded
                else 'in float32, without mixed precision (it is on only where the level is "O1")'
            )
            self.plan.notes.append(
                f"behaviour change: opt_level `{spelled}` comes from {taken}; the setting "
                f"`apex-opt-level` ({self.declared}) takes it as O1 or O0, so a run given O2/O3 "
                f"now {'trains' if trains else 'runs'} {run}, and so does a run given a level "
                'apex raised on (a typo such as "01"), without the error'
            )
        if levels == {"O1"} or excluded:
            return True
        return cst.parse_expression(f'{spelled} == "O1"')

    def _digit_choices(
        self, digit: cst.Attribute, flag: tuple[str, cst.Call] | None, init: cst.Call
    ) -> cst.BaseExpression | bool | None:
        """``f"O{args.amp_opt_level}"`` of an int flag of this file (MS-G3D, infogcn) that
        nothing assigns again: O1 where its ``choices`` are within 0/1 (``enabled=<flag> ==
        1`` where 0 is among them), or, without ``choices``, where the setting takes the level
        as O1 or O0 and the flag's default is 0 or 1 (with the setting's note). None: neither
        (the reading of a computed level decides)."""
        if flag is None or not _kept_int(flag[1], digit.attr.value, self.nodes):
            return None
        choices = _argument(flag[1], "choices", 99)
        elements = choices.elements if isinstance(choices, cst.List | cst.Tuple | cst.Set) else ()
        values = {e.value.evaluated_value for e in elements if isinstance(e.value, cst.Integer)}
        spelled = _code(self.module, digit)
        if choices is not None:
            if not (elements and len(values) == len(elements) and values <= {0, 1}):
                return None
            return True if values == {1} else cst.parse_expression(f"{spelled} == 1")
        if self.declared is None or not _open_bit(flag[1]):
            return None
        trains = _argument(init, "optimizers", 1) is not None
        self.plan.notes.append(
            f"behaviour change: opt_level `{_code(self.module, _argument(init, 'opt_level', 2))}` "
            f"comes from the int flag `{flag[0]}`, which accepts any number (no `choices`); the "
            f"setting `apex-opt-level` ({self.declared}) takes it as O1 or O0, so a run given 2 "
            f"or 3 now {'trains' if trains else 'runs'} in float32, without mixed precision (it "
            f"is on only where `{spelled}` is 1), and so does a run given a level apex raised on, "
            "without the error"
        )
        return cst.parse_expression(f"{spelled} == 1")

    def _default_everywhere(self, level: cst.CSTNode, init: cst.Call) -> bool:
        """``def setup(model, optimizer, opt_level="O1")`` whose every call in the project
        leaves ``opt_level`` out: the level is its default, O1, at each run (with a note naming
        the calls)."""
        calls = self._default_calls(level, init, "O1")
        if calls is None:
            return False
        shown = ", ".join(calls[:4]) + (", ..." if len(calls) > 4 else "")
        function = self.function(init).name.value
        self.plan.notes.append(
            f'opt_level `{_code(self.module, level)}` is "O1" at every call of `{function}` in '
            f'the project ({shown}): each leaves it to its default "O1" or passes "O1"'
        )
        return True

    def _default_calls(
        self, value: cst.CSTNode, init: cst.Call, default: str | None
    ) -> list[str] | None:
        """Where the module-level function holding ``initialize`` is called (``file:line``),
        when ``value`` is one of its parameters, with the default ``default`` (a string, or
        None for ``None``), that the function never rebinds and that every call of it in the
        project leaves out (no keyword for it, fewer positionals, no ``*args``/``**kwargs``,
        no use other than a call), or passes that very literal. None: not so."""
        function = self.function(init)
        if (
            not isinstance(value, cst.Name)
            or not isinstance(function, cst.FunctionDef)
            or not isinstance(self.parent(function), cst.Module)
            or self.path is None
        ):
            return None
        listed = [*function.params.posonly_params, *function.params.params]
        params = [*listed, *function.params.kwonly_params]
        param = next((p for p in params if p.name.value == value.value), None)
        given = param.default if param is not None else None
        if not (
            (default is None and isinstance(given, cst.Name) and given.value == "None")
            or (isinstance(given, cst.SimpleString) and given.evaluated_value == default)
        ) or any(
            isinstance(n, cst.AssignTarget | cst.AugAssign | cst.AnnAssign)
            and isinstance(n.target, cst.Name) and n.target.value == value.value
            for n in self._subtree(function)
        ):  # fmt: skip
            return None
        position = listed.index(param) if param in listed else 10**6  # keyword-only: none
        return calls_keep_default(self.path, function.name.value, position, value.value, default)

    def _pinned_o1(self, spelled: str, init: cst.Call) -> bool:
        """``initialize`` runs only where an ``if`` around it found the level (spelled
        ``spelled``) equal to "O1" (``if c.apex_amp_level == "O1":``, mozilla/TTS, the 66th
        review), and nothing in that ``if`` assigns it before: O1 wherever it runs."""
        inner: cst.CSTNode = init
        for above in self.ancestors(init):
            if (
                isinstance(above, cst.If)
                and self.within(inner, above.body)
                and _tests_o1(self.module, above.test, spelled)
            ):
                return not any(
                    isinstance(n, cst.AssignTarget | cst.AugAssign)
                    and _code(self.module, n.target) == spelled
                    and self.order[id(n)] < self.order[id(init)]
                    for n in self._subtree(above.body)
                )
            inner = above
        return False

    def _not_o1(
        self, spelled: str, origin: str, also: str, uncovered: str, counted: tuple | None = None
    ) -> str:
        """Why an opt level is refused, and the ways out that would allow the rewrite: the
        setting apex-opt-level only where it would (``uncovered``: why it would not).
        ``counted``: the int flag the level spells after its "O"."""
        text = (
            f"opt_level `{spelled}` is not provably O1: it comes from {origin}{also}; O2/O3 "
            "cast the model and keep fp32 master weights, which torch.amp cannot express, so "
            "rewriting it as O1 changes those runs"
        )
        choices = "[0, 1]" if counted else '["O0", "O1"]'
        fix = (
            f'`opt_level="O1"`, or `choices={choices}` on its flag; where every run is O0, apex '
            "is off: delete its calls instead"
        )
        setting = f"the setting `apex-opt-level` ({self.declared})"
        if self.declared is not None and also:
            return (
                f"{text}; {setting} does not cover a file that branches on O2/O3; fix the "
                f"level ({fix}) to allow the rewrite"
            )
        if self.declared is not None:
            return (
                f"{text}; {setting} does not cover it: {uncovered}; fix the level ({fix}) to "
                "allow the rewrite"
            )
        if also or uncovered:
            return f"{text}; fix the level ({fix}) to allow the rewrite"
        return f"{text}; fix the level ({fix}), or {DECLARE_LEVEL}"

    def _parameter_read(self, level: cst.CSTNode, init: cst.Call) -> cst.Param | None:
        """The parameter of the function around ``init`` that a computed ``level`` reads
        (``"O{}".format(opt_level)``), if any."""
        function = self.function(init)
        if not isinstance(function, cst.FunctionDef):
            return None
        params = {
            p.name.value: p for p in (*function.params.params, *function.params.kwonly_params)
        }
        read = [
            n.value for n in self._subtree(level) if isinstance(n, cst.Name) and self.variable(n)
        ]
        return next((params[n] for n in read if n in params), None)

    def _copies_flag(self, target: cst.CSTNode, attr: str) -> bool:
        """``self.fp16_opt_level = self.args.fp16_opt_level``: the parsed flag's value kept
        under its own name on another object (REIC's trainers), not a new level."""
        assign = self.parent(target) if isinstance(target, cst.AssignTarget) else None
        value = assign.value if isinstance(assign, cst.Assign) else None
        return (
            isinstance(value, cst.Attribute)
            and value.attr.value == attr
            and _code(self.module, value) != _code(self.module, target.target)
        )

    def _uncovered(
        self, level: cst.CSTNode, init: cst.Call, flag: tuple | None, reassigned: bool
    ) -> str:
        """Why the setting apex-opt-level cannot take ``level`` as O1 or O0 ("": it can). It
        speaks for a level the code leaves open, read as it is: not one computed here (it is
        read again for ``enabled=``), not one this file sets to O2/O3, assigns more than once
        or after ``initialize``, not a flag whose default is O2/O3 or that this file overwrites."""
        spelled = _code(self.module, level)
        if not _plain(level):
            return (
                f"`{spelled}` is computed, not read from a name, an attribute or a constant "
                "subscript (`enabled=` reads it again)"
            )
        got = _got(level)
        if got is not None and self._other_level(got.args[1].value):
            return f"its default is `{_code(self.module, got.args[1].value)}`"
        if flag is not None and reassigned:
            return "this file assigns it after parsing its flag"
        default = _argument(flag[1], "default", 99) if flag is not None else None
        if default is not None and self._other_level(default):
            return f"the default of its flag is `{_code(self.module, default)}`"
        function = self.function(init)
        # a name: its bindings in the function of `initialize` and at module level; anything
        # else (`config.level`, `cfg["level"]`): wherever this file assigns it
        scoped = isinstance(level, cst.Name)
        # `self.opt_level` in a method: only its class (and those derived from it here) can
        # store the attribute of that object; another class's `self.opt_level` is its own
        cls = self._holder(function) if isinstance(function, cst.FunctionDef) else None
        family = None
        if (
            isinstance(cls, cst.ClassDef)
            and isinstance(level, cst.Attribute)
            and isinstance(level.value, cst.Name)
            and function.params.params
            and level.value.value == function.params.params[0].name.value
        ):
            family = [cls, *self.derived({cls.name.value})]
        stores, others = [], []
        kinds = (cst.Param, cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For,
                 cst.NamedExpr, cst.Del, cst.AsName)  # fmt: skip
        for node in self.nodes:
            if not isinstance(node, kinds):
                continue
            if (scoped and self.function(node) not in (function, self.module)) or self.dead(node):
                continue
            if family is not None and not any(self.within(node, c) for c in family):
                continue
            if scoped and isinstance(  # a class body's name (a dataclass field) is its own scope
                next((a for a in self.ancestors(node)
                      if isinstance(a, cst.FunctionDef | cst.ClassDef)), None),
                cst.ClassDef,
            ):  # fmt: skip
                continue
            if isinstance(node, cst.Param):
                if scoped and node.name.value == level.value:
                    stores.append((node, node.default))
            elif isinstance(node, cst.AssignTarget | cst.AnnAssign):
                if _code(self.module, node.target) == spelled:
                    value = self.parent(node) if isinstance(node, cst.AssignTarget) else node
                    stores.append((node, value.value))
            elif isinstance(node, cst.AugAssign | cst.For | cst.NamedExpr | cst.Del):
                if spelled in {_code(self.module, n) for n in self._subtree(node.target)}:
                    others.append(node)
            elif isinstance(node, cst.AsName) and _code(self.module, node.name) == spelled:
                others.append(node)
        for store, value in stores:
            if value is not None and self._other_level(value):
                where = self.line(store)
                return f"this file sets it to `{_code(self.module, value)}` at line {where}"
        # a name of the function given a default and then, maybe, what a config says
        # (`level = "O0"`, `if "opt_level" in cfg: level = cfg["opt_level"]`): each value it
        # may hold at `initialize` is one the setting declares O1 or O0
        local = scoped and all(
            self.function(store) is function and isinstance(store, cst.AssignTarget)
            for store, _ in stores
        )
        if (len(stores) > 1 and not local) or others:
            return f"this file assigns `{spelled}` more than once"
        late = [s for s, _ in stores if self.function(s) is function
                and self.order[id(s)] > self.order[id(init)]]  # fmt: skip
        if late:
            return f"this file assigns `{spelled}` after `amp.initialize`"
        name = spelled.rpartition(".")[2].strip("[]'\"")
        declared = self.declared is not None  # (a scan of the project: only where it counts)
        found = level_elsewhere(self.path, name) if declared and self.path and name else None
        if found is not None:
            shown = os.path.relpath(found[0], os.path.dirname(os.path.abspath(self.path)))
            return f"the project sets it to O2/O3 elsewhere: `{found[2]}` ({shown}:{found[1]})"
        return ""

    def _any_level(self, comparison: cst.Comparison) -> bool:
        """``level in ("O0", "O1", "O2", "O3")``: a test that apex is used at all, which O1
        passes as O2 does (no branch on O2/O3)."""
        return (
            len(comparison.comparisons) == 1
            and isinstance(comparison.comparisons[0].operator, cst.In | cst.NotIn)
            and any(
                isinstance(n, cst.SimpleString) and n.evaluated_value == "O1"
                for n in self._subtree(comparison.comparisons[0].comparator)
            )
        )

    def _other_level(self, node: cst.CSTNode) -> bool:
        """``node`` is, or holds, the string "O2" or "O3" (a level torch.amp cannot express)."""
        return any(
            isinstance(n, cst.SimpleString) and n.evaluated_value in ("O2", "O3")
            for n in self._subtree(node)
        )

    def _read(self, name: cst.Name) -> bool:
        """``name`` is not the target of an assignment (a plain read, a call argument...)."""
        parent = self.parent(name)
        return not isinstance(
            parent,
            cst.AssignTarget | cst.AnnAssign | cst.AugAssign | cst.For | cst.Param | cst.Element
            | cst.AsName,
        )  # fmt: skip

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


def _branch_levels(switch: cst.IfExp) -> list[str | None]:
    """The level each arm of a conditional gives (None: not a string literal)."""
    return [
        b.evaluated_value if isinstance(b, cst.SimpleString) else None
        for b in (switch.body, switch.orelse)
    ]


def _operands(comparison: cst.Comparison) -> list[cst.BaseExpression]:
    return [comparison.left, *(c.comparator for c in comparison.comparisons)]


def _got(level: cst.CSTNode) -> cst.Call | None:
    """``config.get("opt_level", "O0")``: a mapping read by a constant key, with a literal
    default (a Ray Tune trainable's config dict; without one, a missing key is None, which
    apex raised on)."""
    if not (
        isinstance(level, cst.Call)
        and isinstance(level.func, cst.Attribute)
        and level.func.attr.value == "get"
        and len(level.args) == 2
        and all(a.keyword is None and not a.star for a in level.args)
        and isinstance(level.args[0].value, cst.SimpleString)
        and all(isinstance(a.value, cst.SimpleString) for a in level.args[1:])
    ):
        return None
    return level


def _digit_of(level: cst.CSTNode) -> cst.Attribute | None:
    """The attribute a level spells after its "O": ``f"O{args.level}"``, ``"O%d" % args.level``
    (``%i`` too), ``"O" + str(args.level)``; None: another expression."""
    digit = None
    if isinstance(level, cst.FormattedString) and len(level.parts) == 2:
        text, part = level.parts
        if (
            isinstance(text, cst.FormattedStringText)
            and text.value == "O"
            and isinstance(part, cst.FormattedStringExpression)
            and part.conversion is None
            and part.format_spec is None
        ):
            digit = part.expression
    elif isinstance(level, cst.BinaryOperation) and isinstance(level.left, cst.SimpleString):
        left = level.left.evaluated_value
        if isinstance(level.operator, cst.Modulo) and left in ("O%d", "O%i"):
            digit = level.right
        elif (
            isinstance(level.operator, cst.Add)
            and left == "O"
            and isinstance(level.right, cst.Call)
            and isinstance(level.right.func, cst.Name)
            and level.right.func.value == "str"
            and len(level.right.args) == 1
        ):
            digit = level.right.args[0].value
    return digit if isinstance(digit, cst.Attribute) else None


def _kept_int(flag: cst.Call, attr: str, nodes) -> bool:
    """``flag`` is an int flag (stored as ``attr``) that nothing in ``nodes`` assigns again."""
    kind = _argument(flag, "type", 99)
    return (
        isinstance(kind, cst.Name)
        and kind.value == "int"
        and not any(
            isinstance(n, cst.AssignTarget | cst.AugAssign)
            and isinstance(n.target, cst.Attribute)
            and n.target.attr.value == attr
            for n in nodes
        )
    )


def _open_bit(flag: cst.Call) -> bool:
    """``flag`` has no ``choices`` and its default is none, 0 or 1: the setting may read it
    as a level's number."""
    default = _argument(flag, "default", 99)
    return _argument(flag, "choices", 99) is None and (
        default is None or (isinstance(default, cst.Integer) and default.evaluated_value in (0, 1))
    )


def _plain(level: cst.CSTNode) -> bool:
    """``level`` reads a value without computing one: a chain of names, attributes and
    subscripts by a constant (``args.opt_level``, ``config["amp"]["opt_level"]``), or a
    ``.get`` of such a mapping by a constant key."""
    if (got := _got(level)) is not None:
        level = got.func.value  # type: ignore[attr-defined]
    while isinstance(level, cst.Attribute | cst.Subscript):
        if isinstance(level, cst.Subscript) and not (
            len(level.slice) == 1
            and isinstance(level.slice[0].slice, cst.Index)
            and isinstance(level.slice[0].slice.value, cst.SimpleString | cst.Integer)
        ):
            return False
        level = level.value
    return isinstance(level, cst.Name)


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


def _tests_o1(module: cst.Module, test: cst.BaseExpression, spelled: str) -> bool:
    """``test`` is true only where ``spelled`` is "O1": ``x == "O1"`` (either way round),
    ``x in ("O1",)``, or one operand of an ``and`` that is."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _tests_o1(module, test.left, spelled) or _tests_o1(module, test.right, spelled)
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return False
    target = test.comparisons[0]
    left, right = test.left, target.comparator
    if isinstance(target.operator, cst.Equal):
        pairs = ((left, right), (right, left))
        return any(
            _code(module, a) == spelled
            and isinstance(b, cst.SimpleString)
            and b.evaluated_value == "O1"
            for a, b in pairs
        )
    if isinstance(target.operator, cst.In) and isinstance(right, cst.Tuple | cst.List | cst.Set):
        values = [e.value for e in right.elements]
        return (
            _code(module, left) == spelled
            and bool(values)
            and all(isinstance(v, cst.SimpleString) and v.evaluated_value == "O1" for v in values)
        )
    return False
