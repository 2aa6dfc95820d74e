"""What reads the gradients after the backward (a clip) moves to the step, with its
``scaler.unscale_`` before it, under the step's condition; a helper that reads the master params
(allennlp's ``rescale_gradients``) gets it at its one call.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import textwrap

import libcst as cst

from ampmigrate.apex.common import Loop, _code, _is_call_of, _statements
from ampmigrate.apex.norms import gradient_norm
from ampmigrate.apex.ondisk import _read, module_function, project_folder
from ampmigrate.apex.unscale import none_test

# the optimizer holds gradients only after a backward (every one of the mixed-precision path is
# scaled): the test of a guarded step and its unscale_
_HOLDS_GRADIENTS = (
    'any(p.grad is not None for group in {opt}.param_groups for p in group["params"])'
)


class Clip:
    """The clip stage of ``_Planner`` (mixed into it)."""

    def _helper_call(self, function, opt: str) -> tuple[cst.CSTNode, cst.CSTNode] | None:
        """``function`` (allennlp's ``rescale_gradients``) is called exactly once in the file,
        as a statement of a function that scales the loss and steps ``opt``, and uses
        ``master_params`` outside any loop: its one call is where unscale_ goes."""
        if not isinstance(function, cst.FunctionDef):
            return None
        name = function.name.value
        references = [
            n for n in self.nodes
            if (isinstance(n, cst.Attribute) and n.attr.value == name)
            or (isinstance(n, cst.Name) and n.value == name
                and not isinstance(self.parent(n), cst.Attribute | cst.FunctionDef))
        ]  # fmt: skip
        if len(references) != 1:
            return None
        call = self.parent(references[0])
        if not isinstance(call, cst.Call) or call.func is not references[0]:
            return None
        outer = self.function(call)
        if outer is function or not self.steps.get((id(outer), opt)):
            return None
        if any(isinstance(n, Loop) for n in self._subtree(function)):
            return None
        if self.access(outer) is None:
            return None
        return self.statement(call), outer

    def _scaled_clip(self, statement: cst.CSTNode, used: cst.Name | None, step) -> bool:
        """``clip_grad_norm_(amp.master_params(opt), max_norm)`` on every micro-batch (its
        result ``used`` there too, or not used at all): unscale_ may run once per step, so the
        clip stays where it is and works on the scaled gradients, at ``max_norm * scale``, its
        norm divided by the same scale (a power of two, 1.0 when the scaler is off): apex's
        clip of the unscaled gradients it had accumulated so far, up to float rounding, as the
        scale changes only at the step. Not where ``delay_unscale`` kept apex's gradients scaled
        at some exits (apex clipped scaled gradients at ``max_norm`` there). False: not that
        statement."""
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        kinds = cst.Assign if used is not None else cst.Expr
        call = small.value if isinstance(small, kinds) and len(statement.body) == 1 else None
        if self._delays_unscale() or not isinstance(call, cst.Call):
            return False
        if used is not None and self._norm_read(call):
            return self._scaled_norm(statement, call, used)
        if not (
            _code(self.module, call.func).rpartition(".")[2] == "clip_grad_norm_"
            and 2 <= len(call.args) <= 3
            and not any(a.star for a in call.args)
            and [a.keyword.value if a.keyword else None for a in call.args][:2]
            in ([None, None], [None, "max_norm"])
            and _is_call_of(call.args[0].value, "master_params")
        ):
            return False
        access = self.access(self.function(statement))
        if access is None:
            return False
        scale = f"{access}.get_scale()"
        max_norm = call.args[1].value

        simple = isinstance(max_norm, cst.Name | cst.Attribute | cst.Integer | cst.Float)
        bound = _code(self.module, max_norm) if simple else f"({_code(self.module, max_norm)})"

        def build(u: cst.Call) -> cst.BaseExpression:
            limit = cst.parse_expression(f"{bound} * {scale}")
            args = [*u.args]
            args[1] = args[1].with_changes(value=limit)
            clipped = u.with_changes(args=args)
            if used is None:
                return clipped
            return cst.BinaryOperation(clipped, cst.Divide(), cst.parse_expression(scale))

        self.plan.edits[call] = build
        where = (
            f"the clip of `amp.master_params` at line {self.line(statement)} runs where the step "
            f"may not follow it (`{_code(self.module, step.body[0].value)}` at line "
            f"{self.line(step)} is under a condition the clip is not: on every micro-batch, "
            "or on a path that steps otherwise), as under apex, where `scaler.unscale_` could "
            "run twice before an `update()`"
        )
        if used is None:
            self.plan.notes.append(
                f"{where}: it clips the scaled gradients at `max_norm * {scale}` (apex unscaled "
                "first; equal up to float rounding)"
            )
            return True
        self.plan.notes.append(
            f"behaviour change: {where}, and its result is used there (`{used.value}`), so it "
            f"clips the scaled gradients at `max_norm * {scale}` and divides the returned norm "
            "by the same scale (apex unscaled first; equal up to float rounding)"
        )
        return True

    def _norm_read(self, call: cst.Call) -> bool:
        """``get_grad_norm(amp.master_params(opt)[, 2])`` where ``get_grad_norm`` (defined in
        this file or a module on disk) returns a norm of the gradients: it scales with them."""
        if not call.args or call.args[0].keyword is not None or any(a.star for a in call.args):
            return False
        if not _is_call_of(call.args[0].value, "master_params"):
            return False
        if any(a.keyword is not None for a in call.args) or not all(
            isinstance(a.value, cst.Integer | cst.Float)
            and 0 < a.value.evaluated_value < float("inf")
            for a in call.args[1:]
        ):  # a norm type other than a positive literal (inf, 0) is no p-norm of this form
            return False
        qualified = self.qualified(call.func)
        if len(qualified) != 1:
            return False
        [name] = qualified
        local = [
            d for d in self.module.body if isinstance(d, cst.FunctionDef) and d.name.value == name
        ]
        if "." not in name and len(local) == 1:
            function = ast.parse(_code(self.module, local[0])).body[0]
        else:
            function = module_function(self.path, name) if self.path else None
        return isinstance(function, ast.FunctionDef) and gradient_norm(function, len(call.args))

    def _scaled_norm(self, statement: cst.CSTNode, call: cst.Call, used: cst.Name) -> bool:
        """The norm of the scaled gradients over the scale: apex's norm of the unscaled ones
        it had accumulated so far (the scale, a power of two, changes only at the step)."""
        access = self.access(self.function(statement))
        if access is None:
            return False
        scale = cst.parse_expression(f"{access}.get_scale()")
        self.plan.edits[call] = lambda u: cst.BinaryOperation(u, cst.Divide(), scale)
        self.plan.notes.append(
            f"behaviour change: the gradient norm `{used.value}` at line "
            f"{self.line(statement)} is read on every micro-batch, as under apex: it is read from "
            f"the scaled gradients and divided by `{access}.get_scale()` (apex unscaled first; "
            "equal up to float rounding)"
        )
        return True

    def _delays_unscale(self) -> bool:
        """A ``scale_loss`` of the file passes ``delay_unscale`` other than ``False``."""
        return any(
            a.keyword is not None
            and a.keyword.value == "delay_unscale"
            and _code(self.module, a.value) != "False"
            for w, _, _, _ in self.requests
            for a in w.items[0].item.args
        )

    def _unscale_statement(self, unscale: str, reader: cst.CSTNode) -> cst.BaseStatement:
        """``scaler.unscale_(opt)``, asked of the optimizer as its step is (:meth:`_guard_steps`)
        where a path reaches them with no scaled backward since the last step: no gradients
        there, apex's plain step, nothing to unscale; decided when the edit is built. Where
        the step goes through the scaler only under a test (``branch_guards``), the unscale
        runs under it too: on the other path the backward was plain while the scaler may be
        on, and an unscale there would divide unscaled gradients and leave it unstepped."""
        opt = self.guarded_unscales.get(unscale)
        if opt is not None:
            unscale = f"if {_HOLDS_GRADIENTS.format(opt=opt)}:\n    {unscale}"
        test = self._unscale_gate(reader)
        if test is not None:
            unscale = f"if {test}:\n" + textwrap.indent(unscale, "    ")
        return cst.parse_statement(unscale)

    def _unscale_before(self, statement: cst.CSTNode, unscale: str) -> None:
        if self.unscales.get(statement) == unscale:
            return  # (a helper's call: its `master_params` and its gradient reads alike)
        self.unscales[statement] = unscale
        own = self.plan.edits.get(statement)

        def insert(u: cst.CSTNode) -> cst.FlattenSentinel:
            u = own(u) if own is not None else u
            return cst.FlattenSentinel(
                [
                    self._unscale_statement(unscale, statement).with_changes(
                        leading_lines=u.leading_lines
                    ),
                    u.with_changes(leading_lines=()),
                ]
            )

        self.plan.edits[statement] = insert

    def _divided_reads(self, statement: cst.CSTNode, step: cst.CSTNode) -> bool:
        """Gradient statistics logged on every micro-batch (DistilBERT's distiller: ``iter()``
        -> ``log_tensorboard()`` logs ``param.grad.data.mean()`` and ``.std()``), where the
        step waits for the accumulation: apex had unscaled the gradients at each
        ``scale_loss`` exit, a GradScaler keeps them scaled by its one scale until the step.
        A reduction that scales with its input (mean, std, sum, a norm, max, min; of
        ``.abs()`` too) is divided by ``scaler.get_scale()`` where it is read: the value
        apex logged (1.0 with the scaler off). Only where every gradient read that
        ``statement`` reaches, through the methods of this class it calls, is such a
        reduction used as a value, and those methods run from nowhere else; False otherwise
        (the usual blocker)."""
        methods: list[cst.FunctionDef] = []
        reads: list[cst.Call] = []
        pending: list[tuple[cst.CSTNode, int]] = [(statement, 0)]
        while pending:
            node, depth = pending.pop()
            for inner in self._subtree(node):
                if isinstance(inner, cst.Call):
                    method = self._own_method(inner)
                    if method is not None:
                        if method not in methods:
                            if depth >= 2:
                                return False
                            methods.append(method)
                            pending.append((method.body, depth + 1))
                        continue
                    if self._reads_gradients(inner, follow=False) and not any(
                        isinstance(n, cst.Attribute) and n.attr.value == "grad"
                        for n in self._subtree(inner)
                    ):
                        return False  # (a clip, or parameters handed to code elsewhere)
                    if self._callee_reads_gradients(inner):
                        return False
                if not (isinstance(inner, cst.Attribute) and inner.attr.value == "grad"):
                    continue
                if none_test(self.parent(inner)):
                    continue
                read = _statistic(self, inner)
                if read is None:
                    return False
                reads.append(read)
        if not reads or not methods:
            return False
        own = {id(m) for m in methods}
        named = {m.name.value for m in methods}
        for node in self.nodes:  # each runs only from the statement or another of them
            if (
                isinstance(node, cst.Attribute)
                and node.attr.value in named
                and not self.within(node, statement)
                and id(self.function(node)) not in own
            ):
                return False  # (`self.log()` at the epoch's end, `distiller.log()` of a script)
        if self.path and _called_elsewhere(self.path, named):
            return False
        for read in reads:
            access = self.access(self.function(read))
            if access is None:
                return False
            self.plan.edits[read] = functools.partial(_divided, access=access)
        shown = ", ".join(f"`{_code(self.module, r)}`" for r in reads[:3])
        self.plan.notes.append(
            f"the gradient statistics that {self._reader(statement)} logs on every micro-batch "
            f"({shown}, line {self.line(reads[0])}) are divided by `scaler.get_scale()`: apex "
            "had unscaled the gradients at each `scale_loss` exit, the GradScaler keeps them "
            f"scaled until the step (line {self.line(step)}), and these scale with them"
        )
        return True

    def _move_to_step(self, statement, unit, nested: list, unscale: str) -> None:
        """The clip ran every micro-batch (apex unscaled at each ``scale_loss`` exit); with a
        GradScaler, unscale_ may run once per ``update()``: move it under the step's
        condition, right before the step."""
        if len(nested) != 1:
            self.problem(statement, "the clip is followed by several conditional steps")
            return
        step = nested[0]
        if self._scaled_clip(statement, None, step):
            return
        around = {id(a) for a in self.ancestors(statement)}
        arms = next(
            (a for a in self.ancestors(step) if id(a) not in around
             and isinstance(a, cst.If) and (a.orelse is not None or self._is_elif(a))),
            None,
        )  # fmt: skip
        while arms is not None and self._is_elif(arms):
            arms = self.parent(arms)  # (the chain is shown from its `if`)
        if arms is not None:  # (a vendored HF Trainer: deepspeed / TPU / native / plain step)
            self.problem(
                statement,
                f"the clip of {self._reader(statement)} runs before the `if`/`else` at line "
                f"{self.line(arms)}, one arm of which steps with "
                f"`{_code(self.module, step.body[0].value)}` (line {self.line(step)}): moved "
                "before that step, the clip would stop on the other arms' paths; place "
                "`scaler.unscale_(optimizer)` before the clip on the path this scaler scales, "
                "by hand",
            )
            return
        conditions: list[cst.BaseExpression] = []
        if self._blocks_move(unit):  # the clip shares its block with the backward
            narrowed = self._narrow(statement, unit)
            if narrowed is not None:
                unit, conditions = narrowed
        facts = self.facts(unit)
        inside = {id(n) for n in self._subtree(unit)}
        function = self.function(unit)
        reads = [
            n for n in self._subtree(function)
            if isinstance(n, cst.Name) and n.value in facts.assigned and id(n) not in inside
            and not isinstance(self.parent(n), cst.AssignTarget | cst.AnnAssign | cst.AugAssign)
        ]  # fmt: skip
        blockers = self._blocks_move(unit)
        clip = any(
            isinstance(n, cst.Call)
            and _code(self.module, n.func).rpartition(".")[2].startswith("clip_grad")
            for n in self._subtree(statement)
        )
        if not clip and not reads and not blockers:
            if self._divided_reads(statement, step):
                return
            call = next((n for n in self._subtree(statement) if isinstance(n, cst.Call)), None)
            shown = f"`{_code(self.module, call.func)}(...)`" if call is not None else "it"
            self.problem(
                statement,
                f"{shown} reads or changes gradient values on every micro-batch, while "
                f"`optimizer.step()` (line {self.line(step)}) runs under a condition: apex had "
                "unscaled the gradients it saw at each `scale_loss` exit; a GradScaler keeps them "
                "scaled until `unscale_`, which may run once per step, and moved before the step "
                "it would run once instead of at each micro-batch (a term it adds to the "
                "gradients would be added once); make it work on scaled gradients (multiply "
                "what it adds, divide what it reads, by `scaler.get_scale()`) by hand",
            )
            return
        if reads or blockers:
            own = self.facts(statement).assigned
            used = [n for n in reads if n.value in own]
            if used and self._scaled_clip(statement, used[0], step):
                return
            why = (
                f"; its result `{used[0].value}` is used at line {self.line(used[0])}"
                if used
                else "; it shares a block with the scaled backward"
                if blockers
                else f"; `{reads[0].value}` from its block is used at line {self.line(reads[0])}"
            )
            reader = self._reader(statement)
            what = (
                f"the clip of {reader}" if clip
                else reader if reader == "the gradient read"
                else f"the gradient read of {reader}"
            )  # fmt: skip
            self.problem(
                statement,
                f"{what} runs on every micro-batch while `optimizer.step()` (line "
                f"{self.line(step)}) runs under a condition{why}: move it under the step's "
                "condition (after `scaler.unscale_(optimizer)`) by hand",
            )
            return
        if id(unit) in self.moved:  # another use in the same moved block
            if unit is not statement:
                self._unscale_before(statement, unscale)
            return
        self.moved.add(id(unit))
        moved: dict[str, cst.CSTNode] = {}
        alone = len(_statements(self.block_of(unit)[0])) == 1

        def take(u: cst.CSTNode) -> cst.CSTNode | cst.RemovalSentinel:
            moved["unit"] = u.with_changes(leading_lines=())
            return cst.parse_statement("pass\n") if alone else cst.RemoveFromParent()

        def lines() -> list[cst.BaseStatement]:
            body = [self._unscale_statement(unscale, statement)] if unit is statement else []
            body.append(moved["unit"])
            for test in reversed(conditions):  # under the conditions it ran under
                header = cst.ensure_type(
                    cst.parse_statement(f"if {_code(self.module, test)}:\n    pass\n"), cst.If
                )
                body = [header.with_changes(body=header.body.with_changes(body=body))]
            return body

        if unit is not statement:
            self._unscale_before(statement, unscale)
        self.plan.edits[unit] = take
        self.before_step[step].append(lines)
        if unit is statement:
            self.unscales[step] = unscale
        around = (
            f"; the whole statement at line {self.line(unit)} moves with it, so its other "
            "branches (a clip for runs without mixed precision) run once per step too"
            if unit is not statement and not isinstance(unit, cst.SimpleStatementLine)
            else ""
        )
        self.plan.notes.append(
            f"behaviour change: apex clipped `amp.master_params` on every micro-batch (line "
            f"{self.line(statement)}); the clip now runs once per optimizer step, under the "
            f"step's condition (line {self.line(step)}), after `scaler.unscale_`{around}"
        )

    def _blocks_move(self, unit: cst.CSTNode) -> bool:
        """``unit`` holds a backward, a scaled loss or a step: it cannot move to the step."""
        inside = {id(n) for n in self._subtree(unit)}
        steps = [p for group in self.steps.values() for p in group]
        return self.facts(unit).backward or any(
            id(n) in inside for n in [*steps, *(s for s, _, _, _ in self.requests)]
        )

    def _narrow(self, statement, unit) -> tuple[cst.CSTNode, list] | None:
        """The largest statement around the clip, inside ``unit``, that can move alone, and
        the ``if`` tests (without calls) it sits under there: ``if args.fp16: <backward>;
        clip(...)`` moves as ``if args.fp16: unscale_; clip(...)``."""
        chain = [statement, *self.ancestors(statement)]
        chain = chain[: next(i for i, n in enumerate(chain) if n is unit)]
        movable = [n for n in chain if isinstance(n, cst.BaseStatement)]
        movable = [n for n in movable if not self._blocks_move(n)]
        if not movable:
            return None
        top = movable[-1]
        conditions = []
        previous = top
        for node in chain[chain.index(top) + 1 :]:
            if isinstance(node, cst.IndentedBlock):
                previous = node
                continue
            if not (isinstance(node, cst.If) and node.body is previous):
                return None
            if self.facts(node.test).calls:
                return None
            conditions.insert(0, node.test)
            previous = node
        if isinstance(unit, cst.If) and unit.body is previous and not self.facts(unit.test).calls:
            conditions.insert(0, unit.test)
        else:
            return None
        return top, conditions


def _called_elsewhere(path: str, names: set[str]) -> bool:
    """Another module of ``path``'s project calls a method of one of ``names`` (``.name(``),
    or the project is too large to look (True)."""
    folder = project_folder(path)
    pattern = re.compile(rb"\.(%s)\s*\(" % b"|".join(re.escape(n.encode()) for n in sorted(names)))
    count = 0
    for where, folders, files in os.walk(folder):
        folders[:] = sorted(d for d in folders if not d.startswith(".") and d != "__pycache__")
        for name in files:
            other = os.path.abspath(os.path.join(where, name))
            if not name.endswith(".py") or other == os.path.abspath(path):
                continue
            count += 1
            if count > 2000 or pattern.search(_read(other)):
                return True
    return False


# reductions of a gradient that scale with it (times the loss scale, a positive power of two)
_SCALING = frozenset({"mean", "std", "sum", "norm", "max", "min", "amax", "amin"})


def _statistic(planner, grad: cst.Attribute) -> cst.CSTNode | None:
    """``p.grad[.data][.abs()].<reduction>()[.item()]`` around the ``.grad`` node ``grad``,
    the value read (None: any other read)."""

    def method_call(node: cst.CSTNode) -> tuple[str | None, cst.Call | None]:
        attribute = planner.parent(node)
        call = planner.parent(attribute) if isinstance(attribute, cst.Attribute) else None
        if (
            isinstance(attribute, cst.Attribute)
            and attribute.value is node
            and isinstance(call, cst.Call)
            and call.func is attribute
            and not call.args
        ):
            return attribute.attr.value, call
        return None, None

    node: cst.CSTNode = grad
    parent = planner.parent(node)
    if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "data":
        node = parent
    name, call = method_call(node)
    if name == "abs":
        node = call
        name, call = method_call(node)
    if name not in _SCALING:
        return None
    node = call
    name, call = method_call(node)
    return call if name == "item" else node


def _divided(read: cst.BaseExpression, access: str) -> cst.BaseExpression:
    return cst.parse_expression(f"({cst.Module([]).code_for_node(read)} / {access}.get_scale())")
