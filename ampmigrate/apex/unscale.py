"""``amp.master_params``: one ``scaler.unscale_`` per step, under the step's condition (a clip that
ran every micro-batch moves there).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence

import libcst as cst

from ampmigrate.apex.common import Loop, _argument, _code, _is_call_of, _statements, is_path
from ampmigrate.apex.ondisk import module_function
from ampmigrate.apex.verdict import APEX

# calls that read what they are given, never a gradient (`list(amp.master_params(opt))`)
_PARAM_READERS = frozenset({
    "list", "tuple", "len", "sum", "sorted", "numel", "state_dict", "detach", "clone", "cpu",
    "save", "dict", "print", "append", "extend", "format", "join", "item",
})  # fmt: skip


# torch functions that make a new tensor (never a parameter an optimizer holds)
_FACTORIES = frozenset({
    "zeros", "zeros_like", "ones", "ones_like", "empty", "empty_like", "full", "full_like",
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "tensor", "Variable",
})  # fmt: skip
# methods that return the same tensor or a copy of it on another device or dtype
_TENSOR_METHODS = frozenset({
    "cuda", "cpu", "to", "float", "half", "detach", "requires_grad_", "uniform_", "normal_",
    "clone", "contiguous", "zero_", "fill_",
})  # fmt: skip


def _module_reads_grad(path: str, qualified: str) -> bool:
    """The function ``qualified`` names (``[pkg.]module.name`` or ``module.Class.method``, as
    ``path`` imports it) is in a module on disk and reads gradient values (``x.grad``, not only
    writes or ``is None`` tests)."""
    node = module_function(path, qualified)
    if node is None:
        return False
    parents = {id(c): p for p in ast.walk(node) for c in ast.iter_child_nodes(p)}
    for read in ast.walk(node):
        if not (isinstance(read, ast.Attribute) and read.attr == "grad"):
            continue
        if not isinstance(read.ctx, ast.Load):
            continue
        test = parents.get(id(read))
        if (
            isinstance(test, ast.Compare)
            and all(isinstance(o, ast.Is | ast.IsNot) for o in test.ops)
            and all(isinstance(c, ast.Constant) and c.value is None for c in test.comparators)
        ):
            continue
        return True
    return False


# torch's own optimizer methods that neither read nor apply gradients (``step`` is the step;
# Horovod's ``synchronize`` all-reduces them, which commutes with the scale)
_OPTIMIZER_OWN = frozenset({
    "step", "zero_grad", "state_dict", "load_state_dict", "add_param_group", "synchronize",
    "skip_synchronize", "register_step_pre_hook", "register_step_post_hook",
})  # fmt: skip


# what reading an optimizer's settings looks like (a learning rate logged between backward and
# step): its attributes that hold no gradient and apply none
_SETTINGS = frozenset({"param_groups", "defaults", "state_dict"})


def _settings_objects(function: ast.FunctionDef) -> set[int]:
    """The nodes of ``function`` (on disk) that a settings read is made of (``opt`` in
    ``opt.param_groups``), by ``id``."""
    return {
        id(n.value)
        for n in ast.walk(function)
        if isinstance(n, ast.Attribute) and n.attr in _SETTINGS
    }


class Unscale:
    """The unscale stage of ``_Planner`` (mixed into it)."""

    def _grad_readers(
        self, calls: dict[str, list[cst.Call]], enabled: str | None, models: set[str]
    ) -> list[tuple[cst.CSTNode, str]]:
        """Statements that read gradients between a scaled backward and its step (a clip of
        ``model.parameters()``, a norm logged from ``p.grad``): apex had unscaled them when
        ``scale_loss`` exited, so each needs ``scaler.unscale_`` before it, as ``master_params``
        does. Not one in the ``else:`` of an ``if <test>:`` around a ``master_params`` clip
        (also where the clip sits in an inner ``if``) when the scaled backward itself runs
        only under an ``if <test>:`` (hf_glue's two ``if args.fp16:``), nor one in the
        ``else:`` of an ``if`` whose test is false only where the scaler is off (``enabled``,
        its condition): on that path nothing was scaled."""
        clips = [self.statement(c) for c in calls.get("master_params", [])]
        gates = {  # the tests the scaled backwards run under
            _code(self.module, a.test)
            for c in calls.get("scale_loss", [])
            for a in self.ancestors(c)
            if isinstance(a, cst.If) and self.within(c, a.body)
        }
        found: dict[cst.CSTNode, str] = {}
        backwards = []  # (the scaled statement, its function, the optimizer it scales for)
        for call in calls.get("scale_loss", []):
            optimizer = _argument(call, "optimizers", 1)
            if is_path(optimizer):
                opt = _code(self.module, optimizer)
                backwards.append((self.statement(call), self.function(call), opt))
        for statement in self.delegates:  # a helper's call that scales: its caller steps
            function = self.function(statement)
            backwards += [
                (statement, function, opt)
                for (where, opt), withs in self.scaled.items()
                if where == id(function) and statement in withs
            ]
        for scaled, function, opt in backwards:
            steps = self.steps.get((id(function), opt), [])
            after = [self.order[id(s)] for s in steps if self.order[id(s)] > self.order[id(scaled)]]
            if not after:
                self._read_before_looped_step(scaled, function, opt, steps)
                continue
            self._optimizer_handed_on(scaled, function, opt, steps)
            for node in self.nodes[self.order[id(scaled)] + 1 : min(after)]:
                if (
                    isinstance(node, cst.SimpleStatementLine)
                    and node not in clips
                    and not self.within(node, scaled)
                    and self.function(node) is function
                    and node not in found
                    and not self._switched_apart(node, scaled, function)
                    and (
                        self._reads_gradients(node)
                        or self._runs_optimizer(node, opt)
                        or self._touches_gradients(node, opt, models)
                    )
                ):
                    found[node] = opt
        off = self._switch_tests(enabled)
        return [
            (statement, opt)
            for statement, opt in found.items()
            if not any(
                isinstance(a, cst.If)
                and isinstance(a.orelse, cst.Else)
                and self.within(statement, a.orelse)
                and _code(self.module, a.test) in off
                for a in self.ancestors(statement)
            )
            and not any(
                isinstance(holder := self.parent(self.parent(clip)), cst.If)
                and _code(self.module, holder.test) in gates
                and self.within(statement, holder)
                and self._exclusive(statement, clip)
                for clip in clips
            )
            and not any(  # (DPR: the clip under `if max_norm > 0:` inside `if cfg.fp16:`)
                isinstance(holder, cst.If)
                and _code(self.module, holder.test) in gates
                and self.within(clip, holder.body)
                and isinstance(holder.orelse, cst.Else)
                and self.within(statement, holder.orelse)
                for clip in clips
                for holder in self.ancestors(clip)
            )
        ]

    def _optimizer_handed_on(
        self, scaled: cst.CSTNode, function: cst.CSTNode, opt: str, steps: list[cst.CSTNode]
    ) -> None:
        """A call given the scaled optimizer after the scaled backward, up to the last of its
        steps and the ``if`` that holds it (``if tpu: xm.optimizer_step(optimizer) else:
        optimizer.step()``, a lookahead helper): where it steps the optimizer or reads its
        gradients it gets them times the loss scale, where apex had unscaled them when
        ``scale_loss`` exited (the 41st review: a helper's step on one arm went on with the
        scale in its gradients, and the loss reached NaN). Refused unless the function it
        calls is read and only reads the optimizer's settings."""
        start = self.order[id(scaled)]
        end = start
        for step in steps:
            if self.order[id(step)] <= start:
                continue
            outer = step
            for a in self.ancestors(step):
                if a is function or self.order[id(a)] <= start:
                    break
                if isinstance(a, cst.If):
                    outer = a
            end = max(end, self.ends[id(outer)] - 1)
        names, steppers = self._optimizer_aliases(function, opt)
        first = next(s for s in steps if self.order[id(s)] > start)
        for node in self.nodes[start + 1 : end]:
            if not isinstance(node, cst.Call) or self.within(node, scaled):
                continue
            if self.function(node) is not function or any(self.within(node, s) for s in steps):
                continue
            if self._switched_apart(node, scaled, function):
                continue  # (the other arm of a switch: native AMP's own `scaler.step(opt)`)
            if isinstance(node.func, cst.Attribute) and self._native_scaler(node.func.value):
                continue  # (native AMP's GradScaler: `self.scaler.unscale_(opt)` in its arm)
            helper = self.delegates.get(self.statement(node))
            if helper is not None and self._calls_helper(node, helper[0]):
                continue  # (the helper that scales, called again: a scaled backward of its own)
            if any(  # after a step on its own path (a checkpoint saved after the step)
                start < self.order[id(s)] < self.order[id(node)] and not self._parting_if(s, node)
                for s in steps
            ):
                continue
            given = [a for a in node.args if _code(self.module, a.value) in names]
            if node in self.followed or any(n.startswith(APEX) for n in self.qualified(node.func)):
                continue  # (`amp.master_params(opt)`, also through `self.amp`: the rewrite's own)
            through = self._steps_through(node, opt, names, steppers)
            if through is not None:
                self.problem(
                    node,
                    f"`{_code(self.module, node.func)}(...)` steps `{opt}` {through}, on a path "
                    f"from its scaled backward (line {self.line(scaled)}) that the step becoming "
                    f"`scaler.step` (line {self.line(first)}) does not take: it would step "
                    "gradients still multiplied by the loss scale, where apex had unscaled "
                    f"them when `scale_loss` exited; step that path through `scaler.step({opt})` "
                    "+ `scaler.update()`, by hand",
                )
                continue
            if isinstance(holder := self.parent(self.parent(node)), cst.With) and any(
                self.within(s, holder.body) for s in steps
            ):
                continue  # (a context around the step, Horovod's `skip_synchronize`)
            if not given or self._settings_only(node, given[0]):
                continue
            where = (
                f"between its scaled backward (line {self.line(scaled)}) and the step that "
                f"becomes `scaler.step` (line {self.line(first)})"
                if self.order[id(node)] < self.order[id(first)]
                else f"after its scaled backward (line {self.line(scaled)}), on a path beside "
                f"the step that becomes `scaler.step` (line {self.line(first)})"
            )
            self.problem(
                node,
                f"`{_code(self.module, node.func)}(...)` is given `{opt}` {where}: if it steps "
                f"`{opt}` or reads its gradients, it gets them multiplied by the loss scale, where "
                "apex had unscaled them when `scale_loss` exited; step that path through "
                f"`scaler.step({opt})` + `scaler.update()` (or `scaler.unscale_({opt})` before "
                "a read), by hand",
            )

    def _optimizer_aliases(self, function: cst.CSTNode, opt: str) -> tuple[set[str], set[str]]:
        """What else in ``function`` holds the optimizer ``opt`` (``opt2 = opt``, ``opts =
        [opt]``, a loop variable over them) and the names bound to something that steps it
        (``do_step = opt.step``, ``partial(f, opt)``, a lambda or a nested ``def`` reading it):
        the 43rd review's spellings of a step beside the rewritten one."""
        names, steppers = {opt}, set()
        grew = True
        while grew:
            grew = False
            for n in self._subtree(function):
                target, value = None, None
                if (
                    isinstance(n, cst.Assign)
                    and len(n.targets) == 1
                    and isinstance(n.targets[0].target, cst.Name)
                ):
                    target, value = n.targets[0].target.value, n.value
                elif isinstance(n, cst.For) and isinstance(n.target, cst.Name):
                    target, value = n.target.value, n.iter
                elif isinstance(n, cst.FunctionDef) and n is not function:
                    if n.name.value not in steppers and self._steps_in(n.body, names):
                        steppers.add(n.name.value)
                        grew = True
                    continue
                if target is None or target in names or target in steppers:
                    continue
                code = _code(self.module, value)
                holds = code in names or (
                    isinstance(value, cst.List | cst.Tuple | cst.Set | cst.Dict | cst.Subscript)
                    and self._names_any(value, names)
                )
                steps = (
                    (isinstance(value, cst.Attribute) and value.attr.value == "step"
                     and _code(self.module, value.value) in names)
                    or (isinstance(value, cst.Lambda) and self._steps_in(value, names))
                    or (isinstance(value, cst.Call)
                        and _code(self.module, value.func).rpartition(".")[2] == "partial"
                        and self._names_any(value, names))
                )  # fmt: skip
                if holds and isinstance(n, cst.Assign | cst.For):
                    names.add(target)
                    grew = True
                elif steps:
                    steppers.add(target)
                    grew = True
        return names, steppers

    def _steps_in(self, node: cst.CSTNode, names: set[str]) -> bool:
        """``node`` steps what ``names`` hold (``o.step()``) or hands it to a call but
        apex's (a closure that only scales a loss with it steps nothing)."""
        for n in self._subtree(node):
            if not isinstance(n, cst.Call):
                continue
            func = n.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value == "step"
                and _code(self.module, func.value) in names
            ):
                return True
            if any(_code(self.module, a.value) in names for a in n.args) and not any(
                q.startswith(APEX) for q in self.qualified(func)
            ):
                return True
        return False

    def _names_any(self, node: cst.CSTNode, names: set[str]) -> bool:
        return any(
            isinstance(n, cst.Name | cst.Attribute) and _code(self.module, n) in names
            for n in self._subtree(node)
        )

    def _steps_through(
        self, call: cst.Call, opt: str, names: set[str], steppers: set[str]
    ) -> str | None:
        """How ``call`` steps ``opt`` other than as ``opt.step()`` (said in the refusal)."""
        func = call.func
        if isinstance(func, cst.Name) and func.value in steppers:
            return f"through `{func.value}`, bound to what steps it"
        if isinstance(func, cst.Attribute) and func.attr.value == "step":
            receiver = func.value
            root = receiver
            while isinstance(root, cst.Subscript):
                root = root.value
            spelled = _code(self.module, receiver)
            if spelled != opt and _code(self.module, root) in names:
                return f"as `{spelled}`, which holds it"
        if (
            isinstance(func, cst.Call)
            and _code(self.module, func.func) == "getattr"
            and func.args
            and _code(self.module, func.args[0].value) in names
        ):
            return "through `getattr`"
        return None

    def _settings_only(self, call: cst.Call, given: cst.Arg) -> bool:
        """``call`` only reads the optimizer's settings (``param_groups``, ``state_dict()``):
        torch's and the builtins' functions, or a function of this module (a method of this
        class included) or of a module on disk whose parameter for it is read no other way and
        that reads no gradient. torch_xla's (``xm.optimizer_step``, transformers' TPU arm) pass
        too: apex's ``initialize`` raised for a model whose parameters are not CUDA tensors,
        so that arm never ran with apex's scaling on."""
        names = self.qualified(call.func)
        if names and all(n.startswith(("torch.", "builtins.", "torch_xla.")) for n in names):
            return True
        method = self._own_method(call)
        found: cst.FunctionDef | ast.FunctionDef | None = method
        parts = next((n.lstrip(".").split(".") for n in names if "<locals>" not in n), None)
        if found is None and parts is not None:
            found = self._defined_here(parts)
            if found is None and self.path is not None:
                found = module_function(self.path, ".".join(parts))
        if found is None:
            return False
        if isinstance(found, ast.FunctionDef):
            params = [a.arg for a in (*found.args.posonlyargs, *found.args.args)]
        else:
            params = [p.name.value for p in (*found.params.posonly_params, *found.params.params)]
        if params and params[0] in ("self", "cls") and isinstance(call.func, cst.Attribute):
            params = params[1:]  # (called on an object: it binds the first)
        index = call.args.index(given)
        name = (
            given.keyword.value if given.keyword
            else params[index] if index < len(params) else None
        )  # fmt: skip
        if name is None:
            return False
        if isinstance(found, ast.FunctionDef):
            settings = _settings_objects(found)
            return not any(
                (isinstance(n, ast.Attribute) and n.attr == "grad")
                or (isinstance(n, ast.Name) and n.id == name and id(n) not in settings)
                for n in ast.walk(found)
            )
        if self._reads_gradients(found.body, False):
            return False
        return all(
            isinstance(parent := self.parent(n), cst.Attribute)
            and parent.value is n
            and parent.attr.value in _SETTINGS
            for n in self._subtree(found.body)
            if isinstance(n, cst.Name) and n.value == name
        )

    def _defined_here(self, parts: list[str]) -> cst.FunctionDef | None:
        """The function (or ``Class.method``) of this module named ``parts``."""
        body: Sequence[cst.CSTNode] = self.module.body
        found: cst.CSTNode | None = None
        for part in parts:
            found = next(
                (s for s in body
                 if isinstance(s, cst.FunctionDef | cst.ClassDef) and s.name.value == part),
                None,
            )  # fmt: skip
            if found is None:
                return None
            body = found.body.body if isinstance(found.body, cst.IndentedBlock) else []
        return found if isinstance(found, cst.FunctionDef) else None

    def _switched_apart(self, read: cst.CSTNode, scaled: cst.CSTNode, function) -> bool:
        """``read`` and the scaled backward sit in the two arms of an ``if`` whose test the
        function never changes (``if self.use_apex: <apex> else: <native AMP's own scaled
        backward and clip>``): no pass, nor a later call of the loop, runs one and then the
        other, so apex's unscaling never reached it."""
        common = self._parting_if(read, scaled)
        if common is None:
            return False
        tested = list(self._subtree(common.test))
        if any(isinstance(n, cst.Call | cst.Subscript | cst.NamedExpr) for n in tested):
            return False
        names = {n.value for n in tested if isinstance(n, cst.Name)}
        written, named = self._written(function)
        return not (written & ({_code(self.module, common.test)} | names) or named & names)

    @functools.cached_property
    def _written_by(self) -> dict[int, tuple[cst.CSTNode, set[str], set[str]]]:
        return {}

    def _written(self, function: cst.CSTNode) -> tuple[set[str], set[str]]:
        """What ``function`` assigns (each target as spelled) and every name in those targets;
        made once per function (a file's reads of gradients ask it again and again)."""
        cache = self._written_by
        if id(function) not in cache:
            written: set[str] = set()
            named: set[str] = set()
            for node in self._subtree(function):
                targets = (
                    [node.target] if isinstance(node, cst.AssignTarget | cst.AugAssign
                                                | cst.AnnAssign | cst.For | cst.NamedExpr)
                    else [n.asname.name for n in node.items if n.asname]
                    if isinstance(node, cst.With)
                    else []
                )  # fmt: skip
                for target in targets:
                    written.add(_code(self.module, target))
                    named |= {n.value for n in self._subtree(target) if isinstance(n, cst.Name)}
            cache[id(function)] = (function, written, named)
        return cache[id(function)][1:]

    def _runs_optimizer(self, statement: cst.CSTNode, opt: str) -> bool:
        """``opt.first_step()`` (SAM's two-step optimizers): a method of the scaled optimizer
        beyond torch's own, which the rewrite does not read: it may read or apply the
        gradients, which apex had unscaled."""
        return any(
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value not in _OPTIMIZER_OWN
            and _code(self.module, n.func.value) == opt
            for n in self._subtree(statement)
        )

    @staticmethod
    def _switch_tests(enabled: str | None) -> set[str]:
        """The tests whose falsehood turns the scaler off: its condition and each operand of
        an ``and`` it is made of (parentheses dropped)."""
        if enabled is None:
            return set()
        found: set[str] = set()
        pending = [cst.parse_expression(enabled)]
        while pending:
            node = pending.pop()
            node = node.with_changes(lpar=[], rpar=[])
            found.add(cst.Module([]).code_for_node(node))
            if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
                pending += [node.left, node.right]
        return found

    def _read_before_looped_step(self, scaled, function, opt: str, steps: list) -> None:
        """Every step of ``opt`` comes before the scaled backward (the loop steps at the top
        of its next pass): a gradient read before the step saw apex's unscaled gradients and
        would see GradScaler's scaled ones (the review's p51: a clip that no longer clipped).
        Refused, naming it."""
        first = min(steps, key=lambda s: self.order[id(s)], default=None)
        loop = next((a for a in self.ancestors(scaled) if isinstance(a, Loop)), None)
        if first is None or loop is None or not self.within(first, loop):
            return
        read = next(  # (in that loop, before the step: not the optimizer's build above it)
            (
                n
                for n in self.nodes[self.order[id(loop)] : self.order[id(first)]]
                if isinstance(n, cst.SimpleStatementLine)
                and self.function(n) is function
                and self._reads_gradients(n)
            ),
            None,
        )
        if read is not None:
            self.problem(
                read,
                f"this reads the gradients before `{opt}.step()` (line "
                f"{self.line(first)}), which comes before the scaled backward at line "
                f"{self.line(scaled)} (the next pass of the loop steps what it scaled): apex "
                "had unscaled them there, GradScaler's are still scaled; move the step after "
                f"the backward, or place `scaler.unscale_({opt})` before this read, by hand",
            )

    def _reads_gradients(self, statement: cst.CSTNode, follow: bool = True, depth: int = 0) -> bool:
        """Gradient values are read: not ``p.grad = None`` (a write) nor ``p.grad is None``
        (scaling never changes which gradients exist)."""
        for node in self._subtree(statement):
            if isinstance(node, cst.Attribute) and node.attr.value == "grad":
                parent = self.parent(node)
                if isinstance(parent, cst.AssignTarget | cst.Del) or self._fresh_tensor(node):
                    continue
                if none_test(parent):
                    continue
                return True
            if isinstance(node, cst.Call):
                if any(q.startswith("torch.nn.utils.clip_grad") for q in self.qualified(node.func)):
                    return True
                if follow and self._callee_reads_gradients(node, depth):
                    return True
                for arg in node.args:
                    value = arg.value
                    if (
                        isinstance(value, cst.Call)
                        and isinstance(value.func, cst.Attribute)
                        and (value.func.attr.value in ("parameters", "named_parameters"))
                    ):
                        return True
        return False

    def _callee_reads_gradients(self, call: cst.Call, depth: int = 0) -> bool:
        """``call`` runs a function of the project that reads gradient values (a helper that
        adds an L1 term to batch-norm gradients, a norm logger): a function of this module or
        of a module on disk next to it, a method of a class defined there included, and a
        method of this class or a base class of this module called on ``self``."""
        method = self._own_method(call)
        if method is not None:  # (two deep: DistilBERT's `iter()` -> `log_tensorboard()`)
            # `self._modify_grad()` runs the override of a subclass of this file too
            # (MedicalPro's trainers, the thirty-sixth review), and one a subclass elsewhere
            # may give a hook that does nothing here but is named for gradients
            owner = self.parent(self.parent(self.function(call)))
            overrides = [
                s
                for cls in self.derived({owner.name.value})
                for s in cls.body.body
                if isinstance(s, cst.FunctionDef) and s.name.value == method.name.value
            ] if isinstance(owner, cst.ClassDef) else []  # fmt: skip
            if "grad" in method.name.value.lower() and _does_nothing(method):
                return True
            return any(
                self._reads_gradients(m.body, depth < 1, depth + 1) for m in [method, *overrides]
            )
        names = self.qualified(call.func) or self._star_imported(call.func)
        names = {*names, *self._made_method(call)}
        for name in names:
            if name.startswith(("torch.", "builtins.")):
                continue
            parts = name.lstrip(".").split(".")
            if self._reads_grad_here(parts) or (
                self.path is not None and _module_reads_grad(self.path, name)
            ):
                return True
        return False

    def _made_method(self, call: cst.Call) -> set[str]:
        """``fgm.attack()`` where the function binds ``fgm`` once, to ``FGM(model, ...)``: the
        method of that class (``callback.adversarial.FGM.attack``), which the scope provider
        does not resolve through the object (an adversarial perturbation that reads the
        embedding's gradient between the scaled backward and the step)."""
        func = call.func
        if not (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)):
            return set()
        name = func.value.value
        binds = [
            n
            for n in self._subtree(self.function(call))
            if isinstance(n, cst.Assign)
            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in n.targets)
        ]
        if len(binds) != 1 or not isinstance(binds[0].value, cst.Call):
            return set()
        made = binds[0].value.func
        return {f"{q}.{func.attr.value}" for q in self.qualified(made) if "<locals>" not in q}

    def _star_imported(self, func: cst.BaseExpression) -> set[str]:
        """``name(...)`` or ``Class.method(...)`` that nothing in this module binds, with
        ``from m import *`` here: the names it may be in those modules (the scope provider
        resolves nothing through a star import)."""
        parts: list[str] = []
        while isinstance(func, cst.Attribute):
            parts.insert(0, func.attr.value)
            func = func.value
        if not isinstance(func, cst.Name):
            return set()
        parts.insert(0, func.value)
        scope = self.scopes.get(func)
        if scope is None or scope[func.value]:
            return set()
        found = set()
        dotted = ".".join(parts)
        for node in self.module.body:
            if not isinstance(node, cst.SimpleStatementLine):
                continue
            for small in node.body:
                if isinstance(small, cst.ImportFrom) and isinstance(small.names, cst.ImportStar):
                    dots = "." * len(small.relative)
                    module = _code(self.module, small.module) if small.module is not None else ""
                    found.add(f"{dots}{module}.{dotted}" if module else dots + dotted)
        return found

    def _own_method(self, call: cst.Call) -> cst.FunctionDef | None:
        """The method ``self.name(...)`` runs, where the calling method's class (or a base
        class defined in this module, by name) defines it."""
        func = call.func
        function = self.function(call)
        if not (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and isinstance(function, cst.FunctionDef)
            and function.params.params
            and func.value.value == function.params.params[0].name.value
        ):
            return None
        cls = self.parent(self.parent(function))
        classes = {s.name.value: s for s in self.module.body if isinstance(s, cst.ClassDef)}
        seen: set[str] = set()
        while isinstance(cls, cst.ClassDef) and cls.name.value not in seen:
            seen.add(cls.name.value)
            for statement in cls.body.body:
                if (
                    isinstance(statement, cst.FunctionDef)
                    and statement.name.value == func.attr.value
                ):
                    return statement
            bases = [b.value for b in cls.bases if isinstance(b.value, cst.Name)]
            cls = next((classes[b.value] for b in bases if b.value in classes), None)
        return None

    def _reads_grad_here(self, parts: list[str]) -> bool:
        """A function (or ``Class.method``) of this module named ``parts`` reads gradients."""
        found = self._defined_here(parts)
        return found is not None and self._reads_gradients(found.body, False)

    def _fresh_tensor(self, read: cst.Attribute) -> bool:
        """``x.grad`` of a tensor made in the iteration that reads it (``delta =
        torch.zeros_like(x, requires_grad=True)``: an adversarial perturbation of the input;
        FreeLB's ``delta = (delta + lr * g / norm).detach()`` between its scaled backwards): no
        optimizer holds it, so apex's ``scale_loss`` left its gradient scaled, as the
        GradScaler does, and its read needs no ``unscale_``. Every binding of the name in the
        outermost loop around the read makes a new tensor: a torch factory, or arithmetic
        (whose result is never a parameter), through methods that return the same tensor."""
        if not isinstance(read.value, cst.Name):
            return False
        name = read.value.value
        loops = [a for a in self.ancestors(read) if isinstance(a, Loop)]
        if not loops or self.function(loops[-1]) is not self.function(read):
            return False
        bindings = [
            n for n in self._subtree(loops[-1].body)
            if isinstance(n, cst.Assign)
            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in n.targets)
        ]  # fmt: skip
        if not any(self.order[id(b)] < self.order[id(read)] for b in bindings) or any(
            self.function(b) is not self.function(read) for b in bindings
        ):
            return False
        for binding in bindings:
            value = binding.value
            while (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute)
                and (value.func.attr.value in _TENSOR_METHODS)
            ):
                value = value.func.value
            if isinstance(value, cst.BinaryOperation):
                continue
            if not isinstance(value, cst.Call) or not any(
                q.startswith("torch.") and q.rsplit(".", 1)[-1] in _FACTORIES
                for q in self.qualified(value.func)
            ):
                return False
        handed = any(  # given to an optimizer after all (`SGD([delta])`, `add_param_group`)
            (isinstance(n, cst.Call)
            and any((isinstance(a.value, cst.Name) and a.value.value == name)
                    or any(isinstance(m, cst.Name) and m.value == name
                           for m in self._subtree(a.value))
                    for a in n.args)
            and any(q.startswith("torch.optim") for q in self.qualified(n.func)))
            or (isinstance(n, cst.Attribute) and n.attr.value == "add_param_group")
            for n in self._subtree(self.function(read))
        )  # fmt: skip
        return not handed

    def _master_params(
        self, calls: list[cst.Call], readers: list[tuple[cst.CSTNode, str]] = ()
    ) -> None:
        by_statement: dict[cst.CSTNode, list[cst.Call]] = {}
        for call in calls:
            positional = [a.value for a in call.args if not a.keyword]
            statement = self.statement(call)
            if len(call.args) != 1 or not positional:
                self.problem(call, "`amp.master_params` with other arguments than the optimizer")
                continue
            if not isinstance(statement, cst.SimpleStatementLine):
                self.problem(call, "`amp.master_params` outside a simple statement")
                continue
            opt = _code(self.module, positional[0])
            params = cst.parse_expression(
                f'(p for group in {opt}.param_groups for p in group["params"])'
            )
            self.plan.edits[call] = lambda _u, params=params: params
            if not self._params_only(statement):
                by_statement.setdefault(statement, []).append(opt)
        for statement, opt in readers:
            by_statement.setdefault(statement, []).append(opt)
        by_statement = dict(sorted(by_statement.items(), key=lambda i: self.order[id(i[0])]))
        # one unscale_ per optimizer and step: each optimizer's reads are placed on their own
        per_function: dict[tuple[int, str], list[tuple[cst.CSTNode, str]]] = {}
        functions: dict[tuple[int, str], cst.CSTNode] = {}
        for statement, opts in by_statement.items():
            function = self.function(statement)
            if self.access(function) is None:
                if not self.plan.problems:  # (_scope says why where it refuses; never silently)
                    self.problem(
                        statement,
                        f"{self._reader(statement)} reads gradients where the GradScaler "
                        "cannot be reached to unscale them first: migrate it by hand",
                    )
                continue
            if len(set(opts)) > 1:
                self.problem(
                    statement,
                    f"{self._reader(statement)} reads the gradients of several optimizers "
                    "in one statement: unscale each before it by hand",
                )
                continue
            key = (id(function), opts[0])
            functions[key] = function
            per_function.setdefault(key, []).append((statement, opts[0]))
        for key, statements in per_function.items():
            function = functions[key]
            access = self.access(function)
            clusters: list[list[tuple[cst.CSTNode, str]]] = []
            for statement, opt in statements:
                joined = [
                    c for c in clusters if any(not self._exclusive(s, statement) for s, _ in c)
                ]
                if joined:
                    joined[0].append((statement, opt))
                else:
                    clusters.append([(statement, opt)])
            for cluster in clusters:
                anchor = self._one_anchor([s for s, _ in cluster])
                opts = {o for _, o in cluster}
                if anchor is None or len(opts) > 1:
                    first, again = cluster[0][0], cluster[1][0]
                    self.problem(
                        again,
                        f"{self._reader(first)} at line {self.line(first)} and "
                        f"{self._reader(again)} at line {self.line(again)} read gradients in the "
                        "same step, where apex had unscaled them, and no one place before both "
                        "runs once per step (a backward between them, or other blocks): "
                        "`scaler.unscale_` may run only once per step; unscale (or divide by "
                        "`scaler.get_scale()`) where they are read, by hand",
                    )
                    continue
                if len(cluster) > 1:
                    listed = ", ".join(str(self.line(s)) for s, _ in cluster)
                    self.plan.notes.append(
                        f"one `{access}.unscale_` before line {self.line(anchor)} serves the "
                        f"gradient reads at lines {listed} (apex had unscaled them all when "
                        "`scale_loss` exited)"
                    )
                self._place_unscale(anchor, cluster[0][1], function, access)

    def _params_only(self, statement: cst.CSTNode) -> bool:
        """``statement`` reads the parameters ``amp.master_params`` gives, not their gradients
        (``"params": list(amp.master_params(opt))`` in a checkpoint): no ``.grad`` in it, and
        no call that may read one (a clip, a function it hands them to), so no ``unscale_``."""
        for node in self._subtree(statement):
            if isinstance(node, cst.Attribute) and node.attr.value in ("grad", "main_grad"):
                return False
            if isinstance(node, cst.Call) and not _is_call_of(node, "master_params"):
                name = _code(self.module, node.func).rpartition(".")[2]
                if name not in _PARAM_READERS:
                    return False
        return True

    def _reader(self, statement: cst.CSTNode) -> str:
        """How a blocker names a gradient read: what it is, not what it is not."""
        if "master_params" in _code(self.module, statement):
            return "`amp.master_params`"
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and isinstance(small.value.func, cst.Attribute)
        ):  # a method that reads them (`fgm.attack()`), not `print(p.grad)`
            return f"`{_code(self.module, small.value.func)}(...)`"
        return "the gradient read"

    def _one_anchor(self, statements: list[cst.CSTNode]) -> cst.CSTNode | None:
        """The statement before which one unscale_ serves every read in ``statements``: the
        first one's ancestor in the innermost block holding them all (None: no such block, or
        it holds a backward)."""
        if len(statements) == 1:
            return statements[0]
        paths = [[s, *self.ancestors(s)] for s in statements]
        for candidate in paths[0]:
            body = _statements(candidate)
            if body is None or not all(any(n is candidate for n in p) for p in paths[1:]):
                continue
            anchor = next(s for s in body if any(s is n for n in paths[0]))
            if self.facts(anchor).backward or any(
                any(q.startswith(APEX + ".scale_loss") for q in self.qualified(n))
                for n in self._subtree(anchor)
                if isinstance(n, cst.Call)
            ):
                return None
            return anchor
        return None

    def _exclusive(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """``a`` and ``b`` are in different branches of one ``if``."""
        return self._parting_if(a, b) is not None

    def _parting_if(self, a: cst.CSTNode, b: cst.CSTNode) -> cst.If | None:
        """The innermost ``if`` around both ``a`` and ``b`` when they sit in its two arms."""
        path_a = [a, *self.ancestors(a)]
        path_b = [b, *self.ancestors(b)]
        common = next(n for n in path_a if any(n is m for m in path_b))
        if not isinstance(common, cst.If):
            return None
        child_a = path_a[path_a.index(common) - 1]
        child_b = path_b[[id(n) for n in path_b].index(id(common)) - 1]
        parted = {id(child_a), id(child_b)} == {id(common.body), id(common.orelse)}
        return common if parted else None

    def _one_unscale_per_step(self) -> None:
        """Two unscale_ of one optimizer that can run in one step raise at the second: every
        such pair placed in one function must sit in different branches of an ``if`` (one per
        optimizer and step is allowed: an actor and a critic, each clipped)."""
        placed = list(self.unscales)
        for i, later in enumerate(placed):
            for earlier in placed[:i]:
                same = (
                    self.function(earlier) is self.function(later)
                    and self.unscales[earlier] == self.unscales[later]
                )
                if same and not self._exclusive(earlier, later):
                    self.problem(
                        later,
                        "`scaler.unscale_` would run twice in one step (before lines "
                        f"{min(self.line(earlier), self.line(later))} and "
                        f"{max(self.line(earlier), self.line(later))}; apex's `master_params` is "
                        "read twice): unscale once, before the first use, by hand",
                    )
                    return

    def _place_unscale(self, statement, opt: str, function, access: str, depth: int = 0) -> None:
        steps = self.steps.get((id(function), opt), [])
        unscale = f"{access}.unscale_({opt})\n"
        scaled = [
            s for (f, _), withs in self.scaled.items() for s in withs
            if f == id(function) and self.order[id(s)] < self.order[id(statement)]
        ]  # fmt: skip
        if not steps or not scaled:
            caller = self._helper_call(function, opt) if depth < 3 else None
            if caller is not None:  # a helper called once per step: unscale before the call
                call_statement, outer = caller
                self._place_unscale(call_statement, opt, outer, self.access(outer), depth + 1)
                return
            self.problem(
                statement,
                f"{self._reader(statement)} is not between a scaled backward and `{opt}.step()` "
                "in this function: place `scaler.unscale_` by hand",
            )
            return
        # a read in a loop of its own (`for p in model.parameters(): norm += p.grad...`) runs
        # once per step as that loop does: the unscale goes before the outermost such loop
        for ancestor in self.ancestors(statement):
            if ancestor is function or (
                isinstance(ancestor, Loop)
                and any(self.within(s, ancestor) for s in [*scaled, *steps])
            ):
                break
            if isinstance(ancestor, Loop):
                statement = ancestor
        at = self.order[id(statement)]
        following = [self.order[id(s)] for s in steps if self.order[id(s)] > at]
        again = next(
            (s for (f, o), withs in self.scaled.items() if f == id(function) and o == opt
             for s in withs if following and at < self.order[id(s)] < min(following)),
            None,
        )  # fmt: skip
        if again is not None:
            self.problem(
                statement,
                f"{self._reader(statement)} sits between two scaled backwards of one step "
                f"(line {self.line(again)} scales again before `{opt}.step()`): apex unscaled at "
                "each `scale_loss` exit, but after `scaler.unscale_` the GradScaler would step "
                "the later backward's gradients still scaled; migrate it by hand",
            )
            return
        current = statement
        while True:
            located = self.block_of(current)
            if located is None:
                break
            block, index = located
            later = _statements(block)[index + 1 :]
            nested = [p for p in steps if any(p is s or self.within(p, s) for s in later)]
            self.unscale_gates[statement] = nested  # (the steps its unscale serves)
            if any(self._always_steps(s, steps) for s in later):
                self.served.update(nested)
                self._unscale_before(statement, unscale)
                return
            if nested:
                self.served.update(nested)
                self._move_to_step(statement, _statements(block)[index], nested, unscale)
                return
            owner = self.owner(block)
            if owner is None or owner is function or isinstance(owner, Loop):
                break
            current = owner
        self.problem(
            statement,
            f"{self._reader(statement)} is not followed by `{opt}.step()` in the same step: "
            "place `scaler.unscale_` by hand",
        )

    def _unscale_gate(self, statement: cst.CSTNode) -> str | None:
        """The test the steps a reader's unscale serves go through the scaler under, where
        one does only under a test (``_branch_guard``, decided later): the unscale runs under
        it too, unless the reader already sits in its body."""
        tests = {self.branch_guards[s] for s in self.unscale_gates.get(statement, ())
                 if s in self.branch_guards}  # fmt: skip
        if len(tests) != 1:
            return None
        test = tests.pop()
        inside = any(
            isinstance(a, cst.If) and self.within(statement, a.body)
            and ast.unparse(ast.parse(f"({_code(self.module, a.test)})", mode="eval")) == test
            for a in self.ancestors(statement)
        )  # fmt: skip
        return None if inside else test

    def _always_steps(self, statement: cst.CSTNode, steps: list) -> bool:
        """``statement`` is a step, a ``with`` whose body always steps (Horovod's
        ``with optimizer.skip_synchronize(): optimizer.step()``), or an if/else whose every
        branch always steps."""
        if statement in steps:
            return True
        if isinstance(statement, cst.With):
            return any(self._always_steps(s, steps) for s in _statements(statement.body))
        if not isinstance(statement, cst.If) or statement.orelse is None:
            return False
        branches = [statement.body]
        orelse = statement.orelse
        if isinstance(orelse, cst.If):
            return any(self._always_steps(s, steps) for s in statement.body.body) and (
                self._always_steps(orelse, steps)
            )
        branches.append(orelse.body)
        return all(any(self._always_steps(s, steps) for s in b.body) for b in branches)


def none_test(node: cst.CSTNode) -> bool:
    """``p.grad is None`` / ``is not None``: which gradients exist, which scaling never
    changes (no read of their values)."""
    return isinstance(node, cst.Comparison) and all(
        isinstance(t.operator, cst.Is | cst.IsNot)
        and isinstance(t.comparator, cst.Name)
        and t.comparator.value == "None"
        for t in node.comparisons
    )


def _does_nothing(function: cst.FunctionDef) -> bool:
    """A hook's body: ``pass``, a docstring, ``return`` or ``...`` alone."""
    body = function.body.body if isinstance(function.body, cst.IndentedBlock) else []
    return all(
        isinstance(s, cst.SimpleStatementLine)
        and all(
            isinstance(b, cst.Pass)
            or (isinstance(b, cst.Return) and b.value is None)
            or (isinstance(b, cst.Expr) and isinstance(b.value, cst.SimpleString | cst.Ellipsis))
            for b in s.body
        )
        for s in body
    )
