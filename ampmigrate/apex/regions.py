"""The autocast regions: the forward pass and loss of every scaled backward, found from the data
flow, and the invariant that no initialized model runs outside one.
"""

from __future__ import annotations

import ast
import builtins
import functools
import os
import re
from collections.abc import Iterable

import libcst as cst

from ampmigrate.apex.common import (
    Loop,
    _argument,
    _bare,
    _code,
    _is_call_of,
    _Setup,
    _statements,
    calls_up,
    is_path,
    read_names,
)
from ampmigrate.apex.keeps import RETURNS_SELF
from ampmigrate.apex.links import derived_on_disk, module_definition, module_function
from ampmigrate.apex.verdict import APEX

# how a float32 note ends: what keeps apex's float16 there
_KEEP = 'wrap it in `torch.amp.autocast("cuda", dtype=torch.float16)` to keep apex\'s precision'

# what only a module has: read through a name, they make it a holder of modules
_MODULE_READS = frozenset({"parameters", "named_parameters", "train", "eval", "modules",
                           "children"})  # fmt: skip

# builtins that never call a model they are handed
_HARMLESS = frozenset({"print", "len", "isinstance", "str", "repr", "type", "id", "getattr",
                       "hasattr", "setattr", "vars", "dir"})  # fmt: skip


# calls that take the model without running it: wrappers built on it, a save of it
_WRAPS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel", "torch.save", "copy.deepcopy",
    "apex.parallel.DistributedDataParallel", "apex.parallel.distributed.DistributedDataParallel",
    "apex.parallel.convert_syncbn_model", "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
    "torch.compile", "functools.partial",
})  # fmt: skip
# methods of a model that run no forward pass
_QUIET_METHODS = frozenset({
    "state_dict", "load_state_dict", "parameters", "named_parameters", "buffers",
    "named_buffers", "modules", "named_modules", "children", "named_children", "train", "eval",
    "to", "cuda", "cpu", "half", "float", "zero_grad", "requires_grad_",
})  # fmt: skip


def _runs_parameter(function: ast.FunctionDef, call: cst.Call, names: set[str], module) -> bool:
    """The function of a module on disk that ``call`` runs may run the model it is handed:
    the parameter that receives it is called, handed to another call (but a builtin), or
    asked for a method that may run a forward (``model.generate``; not ``state_dict``)."""
    params = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if params[:1] in (["self"], ["cls"]):
        return True  # (a method: which object it is bound to is not followed)
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if any(a.star for a in call.args):
        return True
    received = {
        params[i] for i, a in enumerate(positional)
        if i < len(params) and module.code_for_node(a.value) in names
    } | {
        a.keyword.value for a in call.args
        if a.keyword is not None and module.code_for_node(a.value) in names
    }  # fmt: skip
    if not received:
        return True
    received |= _ast_aliases(function, received)
    for node in ast.walk(function):
        if not isinstance(node, ast.Call):
            continue
        chain, attrs = node.func, []
        while isinstance(chain, ast.Attribute):
            attrs.append(chain.attr)
            chain = chain.value
        if isinstance(chain, ast.Name) and chain.id in received:
            if not attrs or attrs[0] not in _QUIET_METHODS:
                return True  # `model(x)`, `model.generate(...)`, `model.module(x)`
            continue
        handed = [*node.args, *(k.value for k in node.keywords)]
        if any(isinstance(a, ast.Name) and a.id in received for a in handed) and not (
            isinstance(node.func, ast.Name) and node.func.id in _HARMLESS
        ):
            return True
    return False


def _ast_aliases(function: ast.FunctionDef, names: set[str]) -> set[str]:
    """:func:`_aliases` on ``ast``: ``model_eval = model.module if distributed else model``."""

    def picks(value: ast.expr, known: set[str]) -> bool:
        if isinstance(value, ast.IfExp):
            return picks(value.body, known) or picks(value.orelse, known)
        if isinstance(value, ast.BoolOp):
            return any(picks(v, known) for v in value.values)
        while isinstance(value, ast.Attribute):
            if value.attr in _SETTINGS:
                return False
            value = value.value
        return isinstance(value, ast.Name) and value.id in known

    bound = [
        (n.targets[0].id, n.value) for n in ast.walk(function)
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    ]  # fmt: skip
    return _grown(bound, names, picks)


def _grown(bound: list[tuple[str, object]], names: set[str], picks) -> set[str]:
    """The names of ``bound`` (name, value) whose value ``picks`` one of ``names`` or of the
    names found so far, to a fixed point."""
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for target, value in bound:
            if target not in found | names and picks(value, names | found):
                found.add(target)
                grew = True
    return found


class Regions:
    """The regions stage of ``_Planner`` (mixed into it)."""

    def _regions(self, setup: _Setup) -> None:
        """Wrap the forward pass and loss of every scaled backward in autocast (see the
        module docstring); then check the invariant: no initialized model is called before the
        backward outside a region."""
        forbidden: dict[int, str | None] = {}
        edited = set(map(id, self.plan.edits))

        def blocked(statement: cst.CSTNode) -> str | None:
            """What keeps ``statement`` out of a region (None: nothing). A plain nested
            ``def`` does not (Bengaliai's `def rand_bbox` in the cutmix branch): defining it
            runs nothing; its body, with a backward or a rewritten line, is read like the rest.
            A class body runs where it is defined, and so do decorators."""
            if id(statement) not in forbidden:
                why = None
                for n in self._subtree(statement):
                    if _is_call_of(n, "backward"):
                        why = "the backward"
                    elif id(n) in edited:
                        why = "another rewritten line"
                    elif isinstance(n, cst.ClassDef):
                        why = f"the class definition `{n.name.value}`"
                    elif isinstance(n, cst.FunctionDef) and n.decorators:
                        why = f"the decorated definition of `{n.name.value}`"
                    if why is not None:
                        break
                forbidden[id(statement)] = why
            return forbidden[id(statement)]

        chosen: dict[cst.CSTNode, tuple[set[int], set[int], str | None]] = {}
        checks: list[tuple[cst.CSTNode, str, str | None]] = []
        for scale, expression, function, enabled in self.requests:
            loss = _code(self.module, expression)
            # a loss kept on the object (`self.loss = ...`, a GAN trainer's) is read as such
            plain = isinstance(expression, cst.Name) or (
                isinstance(expression, cst.Attribute) and isinstance(expression.value, cst.Name)
            )
            needed = {loss} if plain else self.facts(expression).used
            # a loss handed in by the callers (the function runs no forward itself: DistilBERT's
            # `optimize(loss)` that takes `loss.mean()` first): its regions are the callers'
            handed = (
                isinstance(function, cst.FunctionDef)
                and not self.facts(function.body, setup.models).model_calls
            )
            if not handed and self._region_before(scale, needed, function, enabled, setup, chosen):
                checks.append((function, loss, enabled))
                continue
            callers = [  # the loss is a parameter: its forward runs in each caller, before
                (statement, argument, caller, self._enabled_at(setup, caller, statement))
                for statement, argument, caller in self._loss_callers(expression, function)
            ]  # (False: the scaler that follows apex's switch does not reach that caller)
            if (
                callers
                and all(on is not False for *_, on in callers)
                and all(
                    self._region_before(
                        statement, set(self.facts(argument).used), caller, on, setup, chosen
                    )
                    for statement, argument, caller, on in callers
                )
            ):
                checks += [(caller, _code(self.module, argument), on)
                           for _, argument, caller, on in callers]  # fmt: skip
                continue
            if handed and self._region_before(scale, needed, function, enabled, setup, chosen):
                checks.append((function, loss, enabled))
                continue
            self.problem(scale, self._uncomputed(scale, expression, loss, function))
            checks.append((function, loss, enabled))
        wrapped: set[int] = set(self.wrapped)  # (an evaluation-only initialize's region)
        planned: dict[cst.CSTNode, tuple[list[list[cst.BaseStatement]], str | None]] = {}
        for block, (indices, feeds, enabled) in chosen.items():
            body = _statements(block)
            runs: list[list[int]] = []
            for i in sorted(indices):
                if self._before_handed_initialize(body[i]):
                    continue  # (apex cast nothing there yet)
                why = blocked(body[i])
                if why is not None:
                    if i in feeds and self.facts(body[i], setup.models).model_calls:
                        self.problem(
                            body[i],
                            f"the forward pass shares a statement with {why}: split it so "
                            "autocast can cover only the forward",
                        )
                    continue
                if runs and runs[-1][-1] == i - 1:
                    runs[-1].append(i)
                else:
                    runs.append([i])
            runs = [r for r in runs if feeds & set(r)]
            for run in runs:
                wrapped.update(id(body[i]) for i in run)
            planned[block] = ([[body[i] for i in run] for run in runs], enabled)
        seen: set[int] = set()
        for function, loss, enabled in checks:
            body = function.body if isinstance(function, cst.FunctionDef) else function
            for call in self.facts(body, setup.models).model_calls:
                if id(call) in seen or self.function(call) is not function:
                    continue
                seen.add(id(call))
                if any(id(a) in wrapped for a in self.ancestors(call)):
                    continue
                if self._before_handed_initialize(call):
                    continue
                before = self._before_initialize(call)
                if before == "first":
                    continue  # (apex cast nothing there yet)
                # Another forward of the model in the training function (in-loop validation):
                # apex O1 ran it in float16 too, so its simple statement gets a region.
                if self._own_region(call, enabled, planned, wrapped, blocked, setup):
                    if before == "looped":
                        self.note_once(
                            f"`{_code(self.module, call.func)}(...)` at line {self.line(call)} "
                            "runs before `amp.initialize` in the loop that holds both: apex ran "
                            "it in float32 on the first pass and in float16 on the later ones; "
                            "it runs in float16 on every pass now"
                        )
                    note = (
                        "other calls of the model in the training function (e.g. validation) "
                        "get their own autocast region, as apex O1 ran them in float16, with "
                        "the statements right after that compute from their outputs (a "
                        "validation loss)"
                    )
                    self.note_once(note)
                else:
                    self.problem(
                        call,
                        f"`{_code(self.module, call.func)}(...)` runs in the function that scales "
                        f"`{loss}` but not in the autocast region of its forward (apex O1 ran it "
                        "in float16 too): wrap it in `torch.amp.autocast` by hand",
                    )
        self._method_forwards(setup, checks, planned, wrapped, blocked)
        self._handed_on(setup, planned, wrapped, blocked)
        self.wrapped = wrapped  # the statements the regions hold (_forwards_elsewhere)
        for block, (runs, enabled) in planned.items():
            order = {id(s): i for i, s in enumerate(_statements(block))}
            self._wrap(block, sorted(runs, key=lambda r: order[id(r[0])]), enabled)

    def _before_handed_initialize(self, node: cst.CSTNode) -> bool:
        """``node`` runs in the function that initializes through its parameter, before
        that ``initialize``: apex cast nothing there yet (``passed.Initializers``)."""
        found = self.initializer
        return (
            found is not None
            and self.function(node) is found.function
            and self.order[id(node)] < self.order[id(found.init)]
        )

    def _before_initialize(self, node: cst.CSTNode) -> str | None:
        """Where ``node`` runs before this file's ``amp.initialize``, in the same function:
        "first" where nothing runs it again after (apex cast nothing there yet), "looped"
        where a loop holds both (apex cast it from its second pass on); None otherwise."""
        init = self.plan.anchor
        if (
            init not in self.initialize_calls
            or self.function(node) is not self.function(init)
            or self.order[id(node)] > self.order[id(init)]
        ):
            return None
        loops = (cst.For, cst.While)
        shared = {id(a) for a in self.ancestors(init) if isinstance(a, loops)}
        return "looped" if any(id(a) in shared for a in self.ancestors(node)) else "first"

    def _own_region(self, call, enabled, planned, wrapped, blocked, setup) -> bool:
        """The simple statement of ``call`` (a forward outside the regions) gets a region of its
        own, with the statements right after it that compute from it; False where it cannot
        (a compound statement, one the rewrite changes, one a region holds)."""
        statement = self.statement(call)
        located = self.block_of(statement)
        if not (
            isinstance(statement, cst.SimpleStatementLine)
            and located is not None
            and not blocked(statement)
            and id(statement) not in wrapped
        ):
            return False
        run = self._with_consumers(statement, located, blocked, wrapped, setup)
        runs, _ = planned.setdefault(located[0], ([], enabled))
        runs.append(run)
        wrapped.update(id(s) for s in run)
        return True

    def _with_consumers(self, statement, located, blocked, wrapped, setup) -> list:
        """``statement`` (a lone call of the model) and the simple statements right after it in
        its block that read what the run binds (deepcam's ``loss_val = criterion(outputs_val,
        ...)``, the 34th review: left outside, a class-weighted loss got float16 logits and
        raised, where apex O1 cast its cross entropy to float32). The run stops at the first
        statement that reads none of it, backpropagates or is rewritten."""
        block, index = located
        body = _statements(block)
        run = [statement]
        bound = set(self.facts(statement, setup.models).assigned)
        for following in body[index + 1 :]:
            if (
                not isinstance(following, cst.SimpleStatementLine)
                or blocked(following)
                or id(following) in wrapped
                or not bound & self.facts(following, setup.models).used
                or any(isinstance(n, cst.Return) for n in self._subtree(following))
            ):
                break
            run.append(following)
            bound |= self.facts(following, setup.models).assigned
        return run

    def _method_forwards(self, setup: _Setup, checks, planned, wrapped, blocked) -> None:
        """A method or submodule of an initialized model called in a function that scales, after
        ``initialize`` and outside the regions (an RL agent's ``agent.act()``, which runs
        ``self.net(...)``; ``dqn.module.choose_action(n)``; ``model.encoder(x)``): apex O1 cast
        the forwards it runs, so its simple statement gets a region of its own, as another call
        of the model does; where it cannot (a compound statement), the float32 run is stated.
        Methods that run no forward (``state_dict``, ``eval``, ``parameters`` ...) are left."""
        stated: list[str] = []
        seen: set[int] = set()
        for function, _, enabled in checks:
            body = function.body if isinstance(function, cst.FunctionDef) else function
            for call in self._subtree(body):
                if (
                    not isinstance(call, cst.Call)
                    or id(call) in seen
                    or self.function(call) is not function
                    or not _model_method(call.func, setup.models, self.module)
                    or any(id(a) in wrapped for a in self.ancestors(call))
                    or (function is setup.home
                        and self.order[id(call)] < self.order[id(setup.statement)])
                ):  # fmt: skip
                    continue
                seen.add(id(call))
                if self._own_region(call, enabled, planned, wrapped, blocked, setup):
                    stated.append(f"`{_code(self.module, call.func)}(...)` (line "
                                  f"{self.line(call)}): a region of its own")  # fmt: skip
                else:
                    stated.append(f"`{_code(self.module, call.func)}(...)` (line "
                                  f"{self.line(call)}): {_KEEP}")  # fmt: skip
        if stated:
            self.plan.notes.append(
                "a method or submodule of the initialized model called outside the forward's "
                "region may run its forward, which apex O1 cast to float16: "
                + "; ".join(stated[:4])
                + (f"; and {len(stated) - 4} more" if len(stated) > 4 else "")
            )

    def _uncomputed(self, scale, expression, loss: str, function) -> str:
        """Why no region precedes ``scale``: the loss is not computed in the function, or it is
        computed there from values other code makes (``loss_D = self.loss_D_A + self.loss_D_B``
        after ``self.backward_D_A()``, a CycleGAN-style helper that runs the forward and stores
        its loss): then the forwards are in that code."""
        wrap = '`torch.amp.autocast("cuda", dtype=torch.float16)`'
        name = expression.value if isinstance(expression, cst.Name) else None
        made = [
            n
            for n in self._subtree(function)
            if isinstance(n, cst.Assign)
            and name is not None
            and name in self.facts(n).assigned
            and self.order.get(id(n), -1) < self.order[id(scale)]
        ]
        if not made:
            return (
                f"`{loss}` is not computed before its `scale_loss` in this function: place "
                f"{wrap} around the forward by hand"
            )
        read = sorted({_code(self.module, n) for n in self._subtree(made[-1].value)
                       if isinstance(n, cst.Attribute | cst.Name)
                       and not isinstance(self.parent(n), cst.Attribute)})  # fmt: skip
        shown = ", ".join(f"`{r}`" for r in read[:4]) or "values"
        return (
            f"`{loss}` is computed at line {self.line(made[-1])} from {shown}, which other "
            "code makes (such as a helper that runs a forward and keeps its loss): the "
            "forwards run there, where no region of this rewrite reaches; place "
            f"{wrap} around them by hand"
        )

    def _region_before(self, scale, needed: set[str], function, enabled, setup, chosen) -> bool:
        """Pick the statements before ``scale`` (in its block and the blocks around it, up to
        ``function``) that compute ``needed``, from the forward on; False: none calls
        anything."""
        current: cst.CSTNode = scale
        picked = False
        while True:
            located = self.block_of(current)
            if located is None:
                break
            block, index = located
            body = _statements(block)
            feeding, calling, forward = [], [], []
            for i in range(index - 1, -1, -1):
                facts = self.facts(body[i], setup.models)
                if (facts.assigned | _filled(body[i]) | _stored_attributes(body[i])) & needed:
                    bound = _rebound(body[i])
                    if bound:  # what it binds comes from here, not from before it
                        needed -= bound
                        needed |= self.facts(body[i].body[0].value, setup.models).used
                    else:
                        needed |= facts.used
                    feeding.append(i)
                    calling += [i] if facts.calls else []
                    forward += [i] if facts.model_calls else []
            if calling:  # from the forward (or the first call feeding the loss) on
                picked = True
                indices, feeds, _ = chosen.setdefault(block, (set(), set(), enabled))
                start = min(forward or calling)
                early = [i for i in calling if i < start and self._gradless(body[i])]
                if early and not any(
                    self.facts(body[j]).backward for j in range(min(early), start)
                ):  # a teacher or frozen encoder feeding the loss: apex O1 cast it too
                    start = min(early)
                indices.update(range(start, max(calling) + 1))
                feeds.update(feeding)
                self._gradless_before(body, [i for i in calling if i < start], setup.models)
            owner = self.owner(block)
            if owner is None or owner is function or (isinstance(owner, Loop) and picked):
                break
            current = owner
        return picked

    def _loss_callers(
        self, expression, function
    ) -> list[tuple[cst.CSTNode, cst.CSTNode, cst.CSTNode]]:
        """``scale_loss(loss, ...)`` where ``loss`` is a parameter of a module-level function
        of this file: each call of it here, as (statement, what it passes for ``loss``, the
        calling function); [] unless every call passes an expression without calls and
        nothing else reads the function (a caller elsewhere computes its loss where no region
        reaches)."""
        if not (isinstance(expression, cst.Name) and isinstance(function, cst.FunctionDef)):
            return []
        method = isinstance(self._holder(function), cst.ClassDef)
        nested = self._enclosing(function) is not None  # a closure, called where defined
        if function not in self.module.body and not method and not nested:
            return []
        params = [p.name.value for p in function.params.params][1 if method else 0 :]
        if (
            expression.value not in params
            or function.params.star_arg is not cst.MaybeSentinel.DEFAULT
        ):
            return []
        index = params.index(expression.value)
        name = function.name.value
        found = []
        if method or nested:  # `self.optimize(loss)` from its class's methods (DistilBERT)
            sites = self._call_sites(function)
            calls = [call for call, _ in sites] if sites else []
            if not calls:
                return []
        else:
            calls = []
            for node in self.nodes:
                if not (isinstance(node, cst.Name) and node.value == name) or node is function.name:
                    continue
                call = self.parent(node)
                if not (isinstance(call, cst.Call) and call.func is node):
                    return []  # handed on or rebound: its callers are not all here
                calls.append(call)
        for call in calls:
            keyword = next(
                (a for a in call.args if a.keyword and a.keyword.value == params[index]), None
            )
            positional = [a for a in call.args if a.keyword is None]
            if any(a.star for a in call.args):
                return []
            argument = keyword or (positional[index] if index < len(positional) else None)
            if argument is None or any(  # `loss / accum` is read as its names; a call could
                isinstance(n, cst.Call) for n in self._subtree(argument.value)
            ):  # be a forward, in the statement the region must end before
                return []
            caller = self.function(call)
            if caller is function or not isinstance(caller, cst.FunctionDef | cst.Module):
                return []
            found.append((self.statement(call), argument.value, caller))
        return found

    def _gradless(self, statement: cst.CSTNode) -> bool:
        """A ``with torch.no_grad():`` block, or a simple statement that calls an object (a
        frozen encoder: ``feat = encoder(x)``): a forward apex O1 cast that no region held."""
        return self._no_grad(statement) or bool(self._objects_called(statement))

    def _no_grad(self, statement: cst.CSTNode) -> bool:
        return isinstance(statement, cst.With) and any(
            _code(self.module, item.item).replace(" ", "")
            in ("torch.no_grad()", "torch.inference_mode()")
            for item in statement.items
        )

    def _gradless_before(self, body: list, indices: list[int], models: set[str]) -> None:
        """A ``with torch.no_grad():`` block that feeds the loss from before the region (an EMA
        or teacher forward): apex O1 cast it through its global patching, it runs in float32
        now; stated, as the region starts at the initialized model's forward."""
        for i in sorted(indices):
            statement = body[i]
            if self._no_grad(statement):
                note = (
                    f"behaviour change: the `torch.no_grad()` block at line {self.line(statement)} "
                    "feeds the loss from before the autocast region (a forward apex O1 cast, "
                    f"such as an EMA or teacher model's) and runs in float32 now: {_KEEP}"
                )
                self.note_once(note)
                continue
            if not isinstance(statement, cst.SimpleStatementLine):
                self._called_inside(statement, models)
                continue
            for called in self._holders_called(statement, models):
                note = (
                    f"behaviour change: `{called}(...)` at line {self.line(statement)} feeds the "
                    f"loss from before the autocast region, and `{called.partition('.')[0]}` "
                    "holds modules (this file reads their parameters or mode): the method may run "
                    "their forwards, which apex O1 cast through its global patching: they run "
                    f"in float32 now: {_KEEP}"
                )
                self.note_once(note)
            for called in self._objects_called(statement):
                note = (
                    f"behaviour change: `{called}(...)` at line {self.line(statement)} feeds the "
                    "loss from before the autocast region (a model not given to "
                    "`amp.initialize`, such as a frozen encoder, whose ops on apex O1's cast "
                    "lists, a matmul or a convolution, it cast through its global patching) and "
                    f"runs those in float32 now: {_KEEP} (an object that runs none, such as an "
                    "elementwise data transform, is unchanged)"
                )
                self.note_once(note)

    def _called_inside(self, statement: cst.CSTNode, models: set[str]) -> None:
        """The objects called in a compound statement that feeds the loss from before the
        region (ESRGAN's `if self.cri_fea:` around its perceptual network's forwards): the
        same change as for a simple one, stated once for the block."""
        lines: dict[str, list[int]] = {}
        for simple in self._subtree(statement):
            if isinstance(simple, cst.SimpleStatementLine):
                for called in self._objects_called(simple) + self._holders_called(simple, models):
                    lines.setdefault(called, []).append(self.line(simple))
        if not lines:
            return
        listed = _listed_lines(lines)
        note = (
            f"behaviour change: the block at line {self.line(statement)} feeds the loss from "
            f"before the autocast region and calls objects not given to `amp.initialize` "
            f"({listed}), which apex O1 cast through its global patching: they run in float32 "
            f"now: {_KEEP}"
        )
        self.note_once(note)

    def _objects_called(self, statement: cst.CSTNode) -> list[str]:
        """The names in a simple ``statement`` that are called as objects: a parameter or a
        variable (``encoder(x)``, ``pretrained_model(**inputs)``), not a function or class of
        this module, an import or a builtin."""
        if not isinstance(statement, cst.SimpleStatementLine):
            return []
        defined = {
            d.name.value for d in self.module.body if isinstance(d, cst.FunctionDef | cst.ClassDef)
        }
        found = []
        owner = self._method_self(statement)
        for node in self._subtree(statement):
            if isinstance(node, cst.Call) and owner is not None:  # `self.clf(x)` in a method
                func = node.func
                if (
                    isinstance(func, cst.Attribute)
                    and isinstance(func.value, cst.Name)
                    and func.value.value == owner[0]
                    and func.attr.value not in owner[1]
                    and _code(self.module, func) not in found
                ):
                    found.append(_code(self.module, func))
                    continue
            if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)):
                continue
            name = node.func.value
            if name in defined or hasattr(builtins, name) or name in found:
                continue
            if any("." in q and "<locals>" not in q for q in self.qualified(node.func)):
                continue  # imported (`torch.randn` as `randn`)
            if self._imported(name):
                continue
            found.append(name)
        return found

    def _holders_called(self, statement: cst.CSTNode, models: set[str]) -> list[str]:
        """The methods called in a simple ``statement`` on a name that holds modules: one
        whose parameters or mode this file reads (``kb.extractor.parameters()``,
        ``kb.train()``), such as a knowledge-base object whose ``train_batch`` runs its own
        network (shiquanyang/unilm): apex O1 cast those forwards too. Not ``models``, the
        ones given to ``initialize``, whose forwards the regions hold."""
        if not isinstance(statement, cst.SimpleStatementLine):
            return []
        found = []
        for node in self._subtree(statement):
            func = node.func if isinstance(node, cst.Call) else None
            if (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Name)
                and func.attr.value not in _MODULE_READS
                and func.value.value in self._module_holders - models
                and _code(self.module, func) not in found
            ):
                found.append(_code(self.module, func))
        return found

    @functools.cached_property
    def _module_holders(self) -> frozenset[str]:
        """The names whose modules this file reads (``x.parameters()``, ``x.m.eval()``),
        less the imports (a module is no object)."""
        found = set()
        for node in self.nodes:
            func = node.func if isinstance(node, cst.Call) else None
            if isinstance(func, cst.Attribute) and func.attr.value in _MODULE_READS:
                owner = func.value
                if isinstance(owner, cst.Attribute):
                    owner = owner.value
                if isinstance(owner, cst.Name) and not self._imported(owner.value):
                    found.add(owner.value)
        return frozenset(found)

    def _method_self(self, statement: cst.CSTNode) -> tuple[str, set[str]] | None:
        """In a method: the name of its object parameter and what the class body defines
        (its methods, read through that parameter, are no objects called)."""
        function = self.function(statement)
        holder = self.parent(self.parent(function)) if function is not self.module else None
        if not isinstance(holder, cst.ClassDef) or not function.params.params:
            return None
        if any(_code(self.module, d.decorator) == "staticmethod" for d in function.decorators):
            return None
        defined = {
            target
            for s in holder.body.body
            for target in (
                {s.name.value} if isinstance(s, cst.FunctionDef | cst.ClassDef)
                else self.facts(s).assigned
            )
        }  # fmt: skip
        return function.params.params[0].name.value, defined

    def _imported(self, name: str) -> bool:
        return any(
            isinstance(n, cst.ImportAlias)
            and (n.asname.name.value if n.asname else _code(self.module, n.name)) == name
            for n in self.nodes
        )

    def _forwards_elsewhere(self, setup: _Setup) -> None:
        """apex O1 cast every forward after ``initialize``; the regions cover the functions
        that scale a loss. A same-file function that the initializing function hands the model
        to afterwards (itself, or an object it stored it on: ``args.model = model``) and that
        calls it there runs that forward in float32 now: a behaviour change, stated."""
        home = setup.home
        if self.hooked("caller"):
            return
        self._before_in_loop(setup)
        defined = {f.name.value: f for f in self.module.body if isinstance(f, cst.FunctionDef)}
        if not isinstance(home, cst.FunctionDef):  # a script's main block initializes
            requested = {id(f) for _, _, f, _ in self.requests}
            self._evaluations(defined, requested, {})
            self._direct_forwards(setup, requested, set())
            return
        models = {m for m in setup.models if "." not in m}
        holders: dict[str, set[str]] = {}  # `args` -> the attributes it holds the model in
        for node in self._subtree(home):  # `test_model = ema.module if args.ema else model`
            if (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Name)
                and self.order.get(id(node), -1) > self.order[id(setup.statement)]
                and any(
                    isinstance(n, cst.Name) and n.value in models for n in self._subtree(node.value)
                )
                and not isinstance(node.value, cst.Call)
            ):
                models = models | {node.targets[0].target.value}
        for node in self._subtree(home):
            if (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Attribute)
                and isinstance(node.targets[0].target.value, cst.Name)
                and _code(self.module, node.value) in models
            ):
                target = node.targets[0].target
                holders.setdefault(target.value.value, set()).add(target.attr.value)
        requested = {id(f) for _, _, f, _ in self.requests}  # the functions that scale
        scaling = requested | {id(home)}
        after = self.order[id(setup.statement)]
        named: dict[str, int] = {}
        calls: dict[str, int] = {}  # where `home` calls each, outside the regions
        for node in self._subtree(home):
            if not (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Name)
                and self.order.get(id(node), -1) > after
            ):
                continue
            callee = defined.get(node.func.value)
            if callee is None or id(callee) in scaling or callee.name.value in named:
                continue
            if any(id(a) in self.wrapped for a in self.ancestors(node)):
                continue  # handed on in a region of its own (_handed_on)
            params = [p.name.value for p in callee.params.params]
            spelled = set()
            for i, arg in enumerate(node.args):
                name = arg.keyword.value if arg.keyword else params[i] if i < len(params) else None
                value = _code(self.module, arg.value)
                if name is None or arg.star:
                    continue
                spelled |= {name} if value in models else set()
                spelled |= {f"{name}.{a}" for a in holders.get(value, ())}
            forward = next(
                (c for c in self._subtree(callee.body)
                 if isinstance(c, cst.Call) and _code(self.module, c.func) in spelled),
                None,
            )  # fmt: skip
            if forward is not None:
                named[callee.name.value] = self.line(forward)
                calls[callee.name.value] = self.line(node)
        if named:
            listed = ", ".join(
                f"`{n}` (line {line}; called at line {calls[n]})" for n, line in named.items()
            )
            self.plan.notes.append(
                f"behaviour change: the model's forward in {listed}, which "
                f"`{home.name.value}` calls after `amp.initialize` outside the autocast regions, "
                f"runs in float32 there now (apex O1 cast every forward from `initialize` on): "
                f"{_KEEP}"
            )
        self._evaluations(defined, scaling, named)
        self._direct_forwards(setup, requested, set(named))
        self._returned_model(setup, models, _KEEP)
        self._handed_by_methods(setup, requested)
        self._kept_on_an_outside_object(setup)

    def _kept_on_an_outside_object(self, setup: _Setup) -> None:
        """The initialized model kept on an object the class holds but does not make
        (``self.trainer.model`` in a callback the trainer drives, vega): the object's owner
        runs the model's forward elsewhere (its validation), which apex O1 cast and which
        runs in float32 now; the rewrite wraps the forwards of this file only: stated (the
        45th review: "validation loses its float16 casts with no note")."""
        holder = self._holder(setup.home) if isinstance(setup.home, cst.FunctionDef) else None
        if not isinstance(holder, cst.ClassDef):
            return
        made = {
            _code(self.module, t.target)
            for n in self._subtree(holder.body)
            if isinstance(n, cst.Assign) and isinstance(n.value, cst.Call)
            and isinstance(n.value.func, cst.Name)
            and any(isinstance(c, cst.ClassDef) and c.name.value == n.value.func.value
                    for c in self.module.body)
            for t in n.targets
        }  # fmt: skip
        for model in sorted(setup.models):
            parts = model.split(".")
            owner = ".".join(parts[:2])
            if len(parts) < 3 or parts[0] != "self" or owner in made:
                continue
            self.note_once(
                f"behaviour change: the model is kept on `{owner}` (`{model}`), an object this "
                "class does not make: code outside this file that holds it (its owner's "
                "validation, say) ran the model's forward under apex's casts, and runs it in "
                f"float32 now; the rewrite wraps the forwards of this file only: {_KEEP}"
            )

    def _handed_by_methods(self, setup: _Setup, scaling: set[int]) -> None:
        """A method of the class that initializes hands the model it trains to other code
        outside the regions (detectron2's ``build_hooks``: ``hooks.PreciseBN(..., self.model,
        ...)``, an ``EvalHook`` around ``self.test(cfg, self.model)``): apex O1 cast every
        forward that code runs, and they run in float32 now; stated, not placed (a hook runs
        them later, from the library's loop)."""
        home = setup.home
        holder = self._holder(home) if isinstance(home, cst.FunctionDef) else None
        if not isinstance(holder, cst.ClassDef):
            return
        stored = self._stored_models(setup)
        attrs: set[str] = set()  # what the regions call through the object: `self.model(x)`
        for node in self._subtree(holder.body):
            if not (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and isinstance(node.func.value, cst.Name)
                and any(id(a) in self.wrapped for a in self.ancestors(node))
            ):
                continue
            owner = self._method_self(node)
            method = self.method_of(node, holder) if owner is None else None
            if method is not None and method.params.params:  # (in a closure of a method)
                owner = self._method_self(method.body)
            if owner is not None and node.func.value.value == owner[0]:
                attrs |= {node.func.attr.value} - owner[1]
        after = self.order[id(setup.statement)]
        found: list[str] = []
        for node in self._subtree(holder.body):
            if not isinstance(node, cst.Call) or id(self.function(node)) in scaling:
                continue
            if self.function(node) is home and self.order[id(node)] < after:
                continue
            if node in self.initialize_calls:
                continue  # (`self.amp.initialize(...)`: apex's own, through a kept module)
            if any(id(a) in self.wrapped for a in self.ancestors(node)):
                continue
            if id(self._own_method(node)) in scaling:
                continue  # (`self._training_step(model, ...)`: its forward has its region)
            if not node.args:
                continue  # (it is handed nothing)
            owner = self._method_self(node)
            spelled = {f"{owner[0]}.{a}" for a in attrs} if owner is not None else set()
            if owner is None and self.function(node) is not home:  # a nested function
                spelled = {f"self.{a}" for a in attrs}
            names = spelled | ({m for m in stored if "." not in m} if self.function(node) is home
                               else set())  # fmt: skip
            # a local bound to it (`evalmodel = self.model` in one arm, YOLOX's `after_epoch`,
            # the 42nd review: its evaluation ran in float32 with no note)
            names |= self._model_aliases(self.function(node), spelled | stored)
            if not any(_code(self.module, a.value) in names for a in node.args):
                continue
            if calls_up(self.module, node, "__init__", holder):
                continue  # the base class keeps it (`SimpleTrainer(model, ...)`)
            if not self._may_run(node, None, names, {}, 0):
                continue
            found.append(f"`{_code(self.module, node.func)}(...)` (line {self.line(node)})")
        if found:
            self.plan.notes.append(
                f"behaviour change: the model it trains is handed to {', '.join(found[:4])}"
                + (f" and {len(found) - 4} more" if len(found) > 4 else "")
                + " outside the autocast regions: a forward that code runs (a hook, an "
                "evaluation) ran in float16 under apex O1, which cast every forward from "
                f"`initialize` on, and runs in float32 now: {_KEEP}"
            )

    def _evaluations(self, defined: dict, scaling: set[int], named: dict[str, int]) -> None:
        """A function that hands what its regions run (``nets``, for ``nets["base"](x)``) to
        another function of the file that runs it too, outside the regions (``validate(args,
        loader, nets)`` in the epoch loop): apex O1 cast that evaluation, it runs in float32
        now; stated."""
        found: dict[str, tuple[int, str]] = {}
        for function in self.nodes:  # (run: empty where no region holds a call of a parameter)
            if not isinstance(function, cst.FunctionDef):
                continue
            own = {p.name.value for p in function.params.params} - {"self", "cls"}
            run = {  # parameters called in the regions: `model(x)`, `nets["base"](x)`
                root
                for node in self._subtree(function.body)
                if isinstance(node, cst.Call)
                and any(id(a) in self.wrapped for a in self.ancestors(node))
                and (root := _called_root(node.func)) in own
            }
            for node in self._subtree(function.body):
                if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)):
                    continue
                callee = defined.get(node.func.value)
                if (
                    callee is None
                    or id(callee) in scaling
                    or callee.name.value in named
                    or any(id(a) in self.wrapped for a in self.ancestors(node))
                ):
                    continue
                params = [p.name.value for p in callee.params.params]
                handed = {
                    (a.keyword.value if a.keyword else params[i])
                    for i, a in enumerate(node.args)
                    if not a.star
                    and (a.keyword is not None or i < len(params))
                    and isinstance(a.value, cst.Name)
                    and a.value.value in run
                }
                forward = next(
                    (c for c in self._subtree(callee.body)
                     if isinstance(c, cst.Call) and _called_root(c.func) in handed),
                    None,
                )  # fmt: skip
                if forward is not None:
                    found[callee.name.value] = (self.line(forward), function.name.value)
        if found:
            listed = ", ".join(f"`{n}` (line {line}, called from `{f}`)"
                               for n, (line, f) in found.items())  # fmt: skip
            self.plan.notes.append(
                f"behaviour change: the forward in {listed} runs outside the autocast regions, "
                f"in float32 now (apex O1 cast every forward from `initialize` on): {_KEEP}"
            )
            named.update({n: line for n, (line, _) in found.items()})

    def _assigned_here(self, function: cst.CSTNode) -> set[str]:
        """The plain names ``function`` assigns itself (not its parameters): locals. Not a
        name rebound to what it held, wrapped (``model = torch.nn.DataParallel(model)``,
        ``model = model.module``: ORConvQA's helpers): that is still the model it was given."""
        if not isinstance(function, cst.FunctionDef):
            return set()
        return {
            n.target.value
            for n in self._subtree(function.body)
            if isinstance(n, cst.AssignTarget)
            and isinstance(n.target, cst.Name)
            and self.function(n) is function
            and n.target.value not in self.facts(self.parent(n).value).used
        }

    def _direct_forwards(self, setup: _Setup, scaling: set[int], named: set[str]) -> None:
        """A call of an initialized model (``self.discriminator(...)``,
        ``self.generator.forward_train(...)``) outside every region, in a function that scales
        no loss (those are checked by ``_regions``), and not before ``initialize``: apex O1 cast
        it, it runs in float32 now; stated."""
        home = setup.home
        after = self.order[id(setup.statement)]
        wrapped = self.wrapped
        covered: dict[int, bool] = {}  # per function: every call of it runs in a region
        found: dict[str, int] = {}
        elsewhere: set[str] = set()  # functions this file never calls
        via: dict[str, str] = {}  # functions handed to a call instead (`Engine(inference)`)
        halves: dict[str, cst.Call | None] = {}  # per function: the `.half()` it makes, if any
        holder = self._holder(home) if isinstance(home, cst.FunctionDef) else None
        holder = holder if isinstance(holder, cst.ClassDef) else None
        stored = self._stored_models(setup)
        functions: dict[str, cst.CSTNode] = {}
        aliases: dict[int, set[str]] = {}  # per function: `model = self._state.model`
        for node in self.nodes:
            if not isinstance(node, cst.Call):
                continue
            func = _code(self.module, node.func)
            base, _, attr = func.rpartition(".")
            function = self.function(node)
            if id(function) not in aliases:
                aliases[id(function)] = self._model_aliases(function, stored)
            models = stored | aliases[id(function)]
            if (
                func not in models
                and not (base in models and _may_forward(attr))
                and not _submodule_of(node.func, models, self.module)
            ):
                continue
            if id(function) in scaling:
                continue  # a function that scales a loss: _regions checks its forwards
            if function is home and self.order[id(node)] < after:
                continue  # (in a loop that holds `initialize`: _before_in_loop)
            if any(id(a) in wrapped for a in self.ancestors(node)):
                continue
            if (
                function is not home
                and func not in aliases[id(function)]
                and func in self._assigned_here(function)
            ):
                continue  # its own local of that name (`model = MODEL_CLASSES[t][1]`): not it
            if id(function) not in covered:
                covered[id(function)] = self._called_in_regions(function, home=home)
            if covered[id(function)]:
                continue
            where = function.name.value if isinstance(function, cst.FunctionDef) else "module"
            if where not in named and where not in halves:  # (each function looked at once)
                halves[where] = next(
                    (n for n in self._subtree(function) if _is_call_of(n, "half")
                     and self.function(n) is function
                     and _code(self.module, n.func.value) not in models),
                    None,
                )  # fmt: skip
                halved = halves[where]
            else:
                halved = None
            if halved is not None:  # (WaveGlow's `run_test`: `mel = mel.half()`, then `infer`)
                self.problem(
                    node,
                    f"`{where}` runs the initialized model outside the autocast regions on an "
                    f"input it makes half (`{_code(self.module, halved)}` at line "
                    f"{self.line(halved)}): apex O1 cast per op, so that ran; with float32 "
                    "weights and no autocast it raises; wrap it in "
                    '`torch.amp.autocast("cuda", dtype=torch.float16)` by hand',
                )
            if where not in named:
                found.setdefault(where, self.line(node))
                functions.setdefault(where, function)
                handed = self._handed_as_value(function)
                if handed:
                    via[where] = handed
                elif (
                    isinstance(function, cst.FunctionDef)
                    and not self._called_here(function)
                    and (holder is None or self.method_of(function, holder) is not function)
                ):  # (a method of the class that initializes runs on an initialized object)
                    elsewhere.add(where)
        listed = ", ".join(
            (f"`{n}` (line {line}" + (f", {via[n]}" if n in via else "")
             + self._outside_calls(functions[n]) + ")")
            if n != "module"
            else f"module-level code (line {line})"
            for n, line in found.items()
            if n not in elsewhere
        )  # fmt: skip
        if listed:
            self.plan.notes.append(
                f"behaviour change: the initialized model's forward in {listed} is outside the "
                "autocast regions and runs in float32 now (apex O1 cast every forward after "
                f"`initialize`): {_KEEP}"
            )
        if holder is not None:
            self._inherited_forwards(holder, stored)
            self._derived_forwards(holder, stored)
        listed = ", ".join(f"`{n}` (line {found[n]})" for n in sorted(elsewhere))
        if listed:
            self.plan.notes.append(
                f"behaviour change where another module calls it after `amp.initialize`: the "
                f"model's forward in {listed}, which this file never calls, is outside the "
                "autocast regions (apex O1 cast every forward after `initialize`, in the whole "
                f"process; a caller that never initialized amp ran it in float32 and still "
                f"does): {_KEEP} there"
            )

    def _before_in_loop(self, setup: _Setup) -> None:
        """Forwards of the model before ``initialize`` in a loop that holds it, and calls
        handed the model there: on every pass after the first they ran after an
        ``initialize``, whose casts apex O1 had switched on for the whole process (the 56c and
        58th reviews' k-fold loops: `model(x)`, `warm(model)`, a fresh model or not); they
        run in float32 now: stated."""
        init = self.plan.anchor
        if init not in self.initialize_calls:
            return
        places = []  # (the loop, where `initialize` runs in it, the names of the model there)
        loop = self._loop_around(init, init)
        if loop is not None:
            places.append((loop, self.order[id(setup.statement)], set(setup.models)))
        home = self.function(init)
        for node in self.nodes if isinstance(home, cst.FunctionDef) else ():
            if not (  # (`setup(model, opt)` in a k-fold loop: 58a's F10)
                isinstance(node, cst.Call) and isinstance(node.func, cst.Name)
                and node.func.value == home.name.value and self.function(node) is not home
            ):  # fmt: skip
                continue
            outer = next(
                (a for a in self.ancestors(node) if isinstance(a, cst.For | cst.While)), None
            )
            if outer is not None and self.function(outer) is self.function(node):
                names = {a.value.value for a in node.args if isinstance(a.value, cst.Name)}
                places.append((outer, self.order[id(self.statement(node))], names))
        for loop, at, models in places:
            self._before_in(loop, at, models)

    def _before_in(self, loop: cst.CSTNode, at: int, models: set[str]) -> None:
        start = self.order[id(loop)]
        models = models | self._aliases_in(loop, models, set())  # (`net = model`, `dp = DP(m)`)

        def root(node: cst.CSTNode) -> cst.CSTNode:  # `model.eval()`, `model[0]`, `.forward`
            while True:
                if isinstance(node, cst.Subscript) or (
                    isinstance(node, cst.Attribute) and node.attr.value in ("forward", "module")
                ):
                    node = node.value
                elif (
                    isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                    and node.func.attr.value in RETURNS_SELF
                ):  # fmt: skip
                    node = node.func.value
                else:
                    return node

        found = []
        for node in self.nodes:
            if not (isinstance(node, cst.Call) and start < self.order[id(node)] < at):
                continue
            func = _code(self.module, node.func)
            if _code(self.module, root(node.func)) in models and not (
                isinstance(node.func, cst.Attribute) and node.func.attr.value in RETURNS_SELF
            ):
                found.append(f"`{func}(...)` at line {self.line(node)} runs the model")
            elif any(_code(self.module, root(a.value)) in models for a in node.args) and not (
                any(q in _WRAPS for q in self.qualified(node.func))
            ):  # (a wrapper bound to a name: its calls are the model's, said above)
                found.append(
                    f"`{func}(...)` at line {self.line(node)} is handed the model and may run it"
                )
        if found:
            self.note_once(
                f"behaviour change: before `amp.initialize` in the loop at line "
                f"{self.line(loop)}, {', '.join(found)}: on every pass after the first, apex O1 "
                "cast those forwards (its casts, once switched on, stay on in the process); "
                f"they run in float32 now: {_KEEP}"
            )

    def _outside_calls(self, function: cst.CSTNode) -> str:
        """Where a function some of whose calls run in the regions is called outside them (DPR's
        `_do_biencoder_fwd_pass`: the training call is in a region, the validation call is not):
        those lines, as the note's precision; "" when no call of it is in a region."""
        refs = self._refs(function) if isinstance(function, cst.FunctionDef) else None
        if not refs:
            return ""
        outside = [r for r in refs if not self._covered_reference(r, 0)]
        if not outside or len(outside) == len(refs):
            return ""
        lines = ", ".join(str(self.line(r)) for r in outside)
        return (
            f", when called at line{'s' if len(outside) > 1 else ''} {lines}; its other calls "
            "run in a region"
        )

    def _inherited_forwards(self, holder: cst.ClassDef, models: set[str]) -> None:
        """A base class in a module on disk whose methods run the model the subclass
        initializes (``Agent.act``: ``self.net(obs)``): apex O1 cast those forwards too, they
        run in float32 now; stated with where they are (the file's own classes are covered
        by ``_direct_forwards``)."""
        if self.path is None:
            return
        own = {
            s.name.value for s in holder.body.body if isinstance(s, cst.FunctionDef)
        }  # (an override replaces the base's method)
        attributes = {m for m in models if m.startswith("self.")}
        found: list[str] = []
        for base in holder.bases:
            for qualified in sorted(self.qualified(base.value)):
                located = module_definition(self.path, qualified)
                if located is None or not isinstance(located[1], ast.ClassDef):
                    continue
                path, cls = located
                shown = os.path.relpath(path, os.path.dirname(os.path.abspath(self.path)))
                found += _running_methods(cls, attributes, own, shown)
                break
        if found:
            self.plan.notes.append(
                f"behaviour change: the initialized model's forward in {', '.join(found)}, a "
                "method of a base class in another module, is outside the autocast regions and "
                "runs in float32 now (apex O1 cast every forward after `initialize`): "
                f"{_KEEP} there"
            )

    def _derived_forwards(self, holder: cst.ClassDef, models: set[str]) -> None:
        """Classes of other modules on disk derived from ``holder`` whose own methods run the
        model it initializes, where ``holder`` never calls them inside its regions
        (elektronn3's ``TripletNetTrainer.run``, an entry point of its own; an override of a
        method the base calls outside them): apex O1 cast those forwards too, they run in
        float32 now; stated with where they are. A module that calls apex amp itself is
        planned on its own (a class family); a method the base calls only inside its regions
        runs in them, so it is not named."""
        attributes = {m for m in models if m.startswith("self.")}
        if self.path is None or not attributes:
            return
        # the methods the base calls only inside its regions (an override the base calls
        # outside them, elektronn3's `Noise2VoidTrainer._train_step`, runs in float32 too)
        wrapped = getattr(self, "wrapped", set())
        inside: dict[str, bool] = {}
        for n in self._subtree(holder):
            if isinstance(n, cst.Attribute) and isinstance(self.parent(n), cst.Call):
                held = any(id(a) in wrapped for a in self.ancestors(n))
                inside[n.attr.value] = inside.get(n.attr.value, True) and held
        called = {name for name, held in inside.items() if held}
        found: list[str] = []
        for other, file, data, derived in derived_on_disk(self.path, holder.name.value):
            if file.members or b"apex" in data:
                continue
            shown = os.path.relpath(other, os.path.dirname(os.path.abspath(self.path)))
            for cls in derived:
                found += _running_methods(cls, attributes, called, shown)
        if found:
            self.plan.notes.append(
                f"behaviour change: the initialized model's forward in {', '.join(found)}, a "
                f"method of a class derived from `{holder.name.value}` in another module, is "
                "outside the autocast regions and runs in float32 now (apex O1 cast every "
                f"forward after `initialize`): {_KEEP} there"
            )

    def _handed_as_value(self, function: cst.CSTNode) -> str:
        """Where this file hands ``function`` to a call as a value (ignite's ``evaluator =
        Engine(inference)``, run by the trainer's event handlers): '' where it does not."""
        if not isinstance(function, cst.FunctionDef):
            return ""
        name = function.name.value
        for node in self.nodes:
            if isinstance(node, cst.Name) and node.value == name and node is not function.name:
                arg = self.parent(node)
                call = self.parent(arg) if isinstance(arg, cst.Arg) else None
                if isinstance(call, cst.Call) and arg.value is node:
                    return (
                        f"handed to `{_code(self.module, call.func)}(...)` at line "
                        f"{self.line(call)}, which may run it after `initialize`"
                    )
        return ""

    def _stored_models(self, setup: _Setup) -> set[str]:
        """The spellings of the initialized models, with the places the initializing function
        stores them after ``initialize``: ``self.model = model`` gives ``self.model``,
        ``self._state = TrainerState(model=model)`` gives ``self._state.model``, so a method that
        runs ``self._state.model(x)`` runs the model apex cast."""
        models = set(setup.models)
        after = self.order[id(setup.statement)]
        for node in self._subtree(setup.home):
            if (  # `model = self.model` before it: O1 returns the model it is given
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Name)
                and node.targets[0].target.value in setup.models
                and isinstance(node.value, cst.Attribute)
                and is_path(node.value)
                and self.order.get(id(node), after) < after
                and self.function(node) is setup.home
            ):
                models.add(_code(self.module, node.value))
            if not (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Attribute)
                and self.order.get(id(node), -1) > after
            ):
                continue
            target = _code(self.module, node.targets[0].target)
            value = node.value
            if _code(self.module, value) in models or self._wraps_model(value, models):
                models.add(target)  # (`self.ema = copy.deepcopy(model)`: run as the model)
            elif isinstance(value, cst.Call):
                models |= {
                    f"{target}.{a.keyword.value}"
                    for a in value.args
                    if a.keyword is not None and _code(self.module, a.value) in models
                }
        return models | self._bound_from_return(setup.home, models)

    def _bound_from_return(self, home: cst.CSTNode, models: set[str]) -> set[str]:
        """Where the callers of a module-level ``home`` that returns the models keep them
        (``self.model, self.optimizer = setup(net, optimizer)``: ``self.model``)."""
        if not isinstance(home, cst.FunctionDef) or self.parent(home) is not self.module:
            return set()
        places = {  # the positions of the returned tuple that hold a model
            i
            for n in self._subtree(home.body)
            if isinstance(n, cst.Return) and self.function(n) is home
            and isinstance(n.value, cst.Tuple)
            for i, e in enumerate(n.value.elements)
            if _code(self.module, e.value) in models
        }  # fmt: skip
        if any(  # `return amp.initialize(model, opt, ...)`: (model, opt) (the 56th review)
            isinstance(n, cst.Return) and n.value in self.initialize_calls
            and _argument(n.value, "optimizers", 1) is not None
            for n in self._subtree(home.body)
        ):  # fmt: skip
            places.add(0)
        calls = [self.parent(r) for r in self._references(home.name.value)]
        return self.bound_at([c for c in calls if isinstance(c, cst.Call)], places)

    def bound_at(self, calls: list[cst.Call], places: set[int] | tuple[int, ...]) -> set[str]:
        """What ``a, b = call(...)`` binds at ``places`` of the tuple, for each of ``calls``."""
        bound = set()
        for call in calls:
            assign = self.parent(call)
            if not (isinstance(assign, cst.Assign) and assign.value is call):
                continue
            for target in (t.target for t in assign.targets):
                if isinstance(target, cst.Tuple | cst.List):
                    bound |= {
                        _code(self.module, e.value)
                        for i, e in enumerate(target.elements) if i in places
                    }  # fmt: skip
        return bound

    def _wraps_model(self, value: cst.CSTNode, models: set[str]) -> bool:
        """``value`` wraps or copies a model (``DataParallel(model)``, ``torch.compile(model)``,
        ``copy.deepcopy(model)``): calling it runs the model's forward."""
        if not (isinstance(value, cst.Call) and value.args):
            return False
        qualified = self.qualified(value.func)
        return (
            bool(qualified)
            and qualified <= _WRAPS - {"torch.save"}
            and _code(self.module, value.args[0].value) in models
        )

    def _model_aliases(self, function: cst.CSTNode, models: set[str]) -> set[str]:
        """The local names ``function`` gives a stored model (``model = self._state.model``)
        or a model it is handed (``model_eval = model.module if distributed else model``)."""
        if not isinstance(function, cst.FunctionDef):
            return set()
        key = (id(function), frozenset(models))
        if key not in self._aliases_of:
            self._aliases_of[key] = (function, self._find_aliases(function, models))
        return set(self._aliases_of[key][1])

    @functools.cached_property
    def _aliases_of(self) -> dict[tuple[int, frozenset[str]], tuple[cst.CSTNode, set[str]]]:
        return {}

    def _find_aliases(self, function: cst.FunctionDef, models: set[str]) -> set[str]:
        stored = {
            node.targets[0].target.value
            for node in self._subtree(function.body)
            if isinstance(node, cst.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
            and "." in (code := _code(self.module, node.value))
            and code in models
        }
        plain = {m for m in models if "." not in m}
        return stored | _aliases(self._subtree(function.body), plain | stored)

    def _called_in_regions(
        self, function: cst.CSTNode, depth: int = 0, home: cst.CSTNode | None = None
    ) -> bool:
        """Every call of ``function`` in this file runs in an autocast region, which covers
        what it calls: directly, through a name bound to it (``eval_func = eval_F1 if ... else
        eval_ACC``) whose every call does, or from functions whose every call does. ``home``:
        the function that initializes; a call in the other branch of the ``if`` around each
        call of it (`if args.do_train: train(...) else: evaluate(fresh_model)`) runs where apex
        was never initialized, and counts for nothing."""
        if not isinstance(function, cst.FunctionDef) or depth > 3:
            return False
        refs = self._refs(function)
        if refs is None:
            return False
        starts = self._refs(home) if isinstance(home, cst.FunctionDef) else None
        if starts and refs:
            reached = [r for r in refs if not all(self._exclusive(r, s) for s in starts)]
            if not reached:
                return True
            refs = reached
        return bool(refs) and all(self._covered_reference(r, depth) for r in refs)

    def _called_here(self, function: cst.FunctionDef) -> bool:
        """``function``'s name is read in this file (a call, or handed on)."""
        refs = self._refs(function)
        if refs is None:  # (a nested function: read as an attribute, as a method would be)
            name = function.name.value
            return any(isinstance(n, cst.Attribute) and n.attr.value == name for n in self.nodes)
        return bool(refs)

    def _refs(self, function: cst.FunctionDef) -> list[cst.CSTNode] | None:
        """Where this file reads ``function``'s name: a module-level function's name, a
        method's attribute (``self.penalty(x)``), a closure's name in the function that
        defines it (mobile_centernet's `test_epoch()` in its epoch loop); None for a closure
        whose name that function binds again."""
        name = function.name.value
        if self.parent(function) is self.module or (
            not isinstance(self.parent(self.parent(function)), cst.ClassDef)
            and self.function(self.parent(function)) is self.module
        ):  # (also one defined in `if __name__ == "__main__":`, mup's `evaluate`)
            return list(self._references(name))
        if isinstance(self.parent(self.parent(function)), cst.ClassDef):
            return list(self.spelled[1].get(name, ()))
        outer = self.function(self.parent(function))
        if not isinstance(outer, cst.FunctionDef) or name in self._assigned_here(outer):
            return None
        return [n for n in self._references(name) if self.within(n, outer.body)]

    def _covered_reference(self, ref: cst.CSTNode, depth: int) -> bool:
        if any(id(a) in self.wrapped for a in self.ancestors(ref)):
            return True
        parent = self.parent(ref)
        if isinstance(parent, cst.Call) and parent.func is ref:
            return self._called_in_regions(self.function(parent), depth + 1)
        holder = parent
        while isinstance(holder, cst.IfExp):  # `f = a if kind == "a" else b`
            holder = self.parent(holder)
        target = holder.targets[0].target if isinstance(holder, cst.Assign) else None
        if len(getattr(holder, "targets", ())) != 1 or not isinstance(target, cst.Name):
            return False
        uses = [
            n
            for n in self._subtree(self.function(holder))
            if isinstance(n, cst.Name)
            and n.value == target.value
            and not isinstance(self.parent(n), cst.AssignTarget)  # (another binding of it)
        ]
        return bool(uses) and all(
            isinstance(self.parent(u), cst.Call)
            and self.parent(u).func is u
            and self._covered_reference(u, depth + 1)
            for u in uses
        )

    def _handed_on(self, setup: _Setup, planned: dict, wrapped: set[int], blocked) -> None:
        """The model travels through the functions on the way to the one that scales
        (``train`` -> ``train_epoch`` -> ``train_step``); where one of them hands it to code that
        may run it (``evaluate(model, ...)``, ``Evaluator(self.model).evaluate()``: a validation
        pass) while training, apex O1 cast that forward too. The statement gets a region
        (autocast covers what it calls), enabled as the scaler is; in the initializing function,
        from the loop that trains on (what comes before it, such as ``DDP(model)``, runs no
        forward)."""
        spellings = set(setup.models)
        defined = {s.name.value: s for s in self.module.body if isinstance(s, cst.FunctionDef)}
        scaling = {id(f) for _, _, f, _ in self.requests}
        # the file that initializes for another's training functions: its calls of them
        # train (the GradScaler passed there), what it hands the model to besides may run it
        linked = set(self.link.spellings[0]) if self.linked_caller() else set()
        if linked:
            scaling.add(id(setup.home))
        functions = [*defined.values(), *(f for _, _, f, _ in self.requests), setup.home]
        grew = True
        while grew:  # the same-file functions that lead to a scaled backward
            grew = False
            for function in defined.values():
                if id(function) not in scaling and any(
                    isinstance(n, cst.Call) and isinstance(n.func, cst.Name)
                    and id(defined.get(n.func.value)) in scaling
                    for n in self._subtree(function)
                ):  # fmt: skip
                    scaling.add(id(function))
                    grew = True
        start = self._training_start(setup, scaling, defined, linked)
        handed, carried, seen = [], [], set()
        lambdas: list[cst.Call] = []
        for function in functions:
            if id(function) not in scaling or id(function) in seen:
                continue
            seen.add(id(function))  # (a script's module-level loop: the module)
            body = function if function is self.module else function.body
            carriers = self._carriers(body, spellings)
            names = spellings | set(carriers)
            # (`test_model = model` in one arm of an `if`, the EMA model in the other: apex O1
            # cast either forward; the 63rd review's D1, FixMatch)
            names |= _aliases(self._subtree(body), names)
            names |= _held(self._subtree(body), names)  # (`for m in (model, ema)`, 65th D1)
            for node in self._subtree(body):
                if not isinstance(node, cst.Call) or self.function(node) is not function:
                    continue
                if (
                    function is setup.home
                    and self.order[id(node)] < start
                    and not self._leaves_before_training(node, setup)
                ):
                    continue
                if any(isinstance(a, cst.Lambda) for a in self.ancestors(node)):
                    lambdas.append(node)  # defining it runs nothing (the 43rd review's
                    continue  # callback: a region there covered no forward)
                callee = defined.get(node.func.value) if isinstance(node.func, cst.Name) else None
                if (callee is not None and id(callee) in scaling) or (
                    _code(self.module, node.func) in linked
                ):
                    continue
                carrier = _carrier_call(node.func, carriers)
                if carrier is None and not (
                    any(_of_model(a.value, names) for a in node.args)
                    and self._may_run(node, callee, names, defined, 0)
                ):
                    continue
                statement = self.statement(node)
                located = self.block_of(statement)
                if (
                    not isinstance(statement, cst.SimpleStatementLine)
                    or located is None
                    or blocked(statement)
                    or id(statement) in wrapped
                    or any(id(a) in wrapped for a in self.ancestors(statement))
                ):
                    continue
                enabled = self._enabled_at(setup, function, statement)
                if enabled is False:
                    continue
                runs, _ = planned.setdefault(located[0], ([], enabled))
                runs.append([statement])
                self.uncached.add(id(statement))  # the code it is handed to may train it
                wrapped.add(id(statement))
                shown = f"`{_code(self.module, node.func)}(...)` (line {self.line(node)}"
                if carrier is None:
                    handed.append(f"{shown})")
                else:
                    made = carriers[carrier]
                    carried.append(f"{shown}; `{carrier}` is built on the model at line {made})")
        for node in lambdas:
            if any(_of_model(a.value, spellings) for a in node.args):
                handed_later = f"`{_code(self.module, node.func)}(...)` (line {self.line(node)})"
                self.plan.notes.append(
                    f"behaviour change: a lambda hands the model to {handed_later}: where "
                    "code calls it later outside the autocast regions, that forward runs in "
                    f"float32 now (apex O1 cast every forward after `initialize`): {_KEEP}"
                )
        if handed:
            self.plan.notes.append(
                f"the model is handed to code that may run it at {', '.join(handed)}: each "
                "such statement gets its own autocast region, as apex O1 cast those forwards "
                "too"
            )
        if carried:
            self.plan.notes.append(
                f"an object built on the model may run it at {', '.join(carried)}: each such "
                "statement gets its own autocast region, as apex O1 cast every forward after "
                "`initialize`"
            )

    def _leaves_before_training(self, node: cst.CSTNode, setup: _Setup) -> bool:
        """``node`` comes after ``initialize``, in an ``if`` whose body ends the function
        before the training loop (``if args.evaluate: validate(model, ...); return``): an
        evaluation-only run, whose forwards apex O1 cast too (the 41st review: NAIC's
        ``test(...)`` there ran in float32, and the note named the callee's forward)."""
        if self.order[id(node)] < self.order[id(setup.statement)]:
            return False
        for holder in self.ancestors(node):
            if holder is setup.home:
                return False
            if (
                isinstance(holder, cst.If)
                and self.order[id(holder)] > self.order[id(setup.statement)]
                and self.within(node, holder.body)
                and isinstance(last := holder.body.body[-1], cst.SimpleStatementLine)
                and (isinstance(last.body[-1], cst.Return) or self._exits(last.body[-1]))
            ):
                return True
        return False

    def _exits(self, small: cst.BaseSmallStatement) -> bool:
        """``sys.exit(...)``, ``exit()``, ``quit()``: the program ends there."""
        return (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and bool(
                self.qualified(small.value.func)
                & {"sys.exit", "builtins.exit", "builtins.quit", "os._exit"}
            )
        )

    def _carriers(self, body: cst.CSTNode, models: set[str]) -> dict[str, int]:
        """The local names bound to an object built on the model, with the line: a wrapper or
        a copy of it (``dp = DataParallel(model)``, ``ema = copy.deepcopy(model)``) or an
        instance of a class given it (``seg = Segmentor(model)``). apex O1 cast every forward
        after ``initialize``, also the ones these run (``dp(x)``, ``seg.evaluate(x)``)."""
        classes = {s.name.value for s in self.module.body if isinstance(s, cst.ClassDef)}
        found: dict[str, int] = {}
        for node in self._subtree(body):
            if not (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Name)
                and isinstance(node.value, cst.Call)
                and node.targets[0].target.value not in models
                and any(_of_model(a.value, models) for a in node.value.args)
            ):
                continue
            last = _code(self.module, node.value.func).rpartition(".")[2]
            if any(q.startswith("apex.amp") for q in self.qualified(node.value.func)):
                continue
            if self._wraps_model(node.value, models) or last in classes or last[:1].isupper():
                found.setdefault(node.targets[0].target.value, self.line(node))
        return found

    def _training_start(
        self, setup: _Setup, scaling: set[int], defined: dict, linked: set[str]
    ) -> int:
        """Where training starts in the initializing function: the outermost loop that holds
        a scaled backward or a call on the way to one, else right after ``initialize`` (where
        it initializes for another file's training functions, ``linked``, what it runs before
        calling them is an evaluation apex cast too, such as a baseline score)."""
        home = setup.home
        after = self.order[id(setup.statement)]
        if not isinstance(home, cst.FunctionDef) or linked:
            return after
        for node in self._subtree(home.body):
            if not isinstance(node, Loop) or self.order[id(node)] < after:
                continue
            for inner in self._subtree(node):
                scales = isinstance(inner, cst.With) and any(
                    inner is w for w, _, _, _ in self.requests
                )
                calls = (
                    isinstance(inner, cst.Call)
                    and isinstance(inner.func, cst.Name)
                    and id(defined.get(inner.func.value)) in scaling
                )
                if scales or calls:
                    return self.order[id(node)]
        return after

    def _condition_moves(self, setup: _Setup) -> bool:
        """Code after ``initialize`` in its function may rebind what the condition reads (a
        loop variable of the same name, `fp16 = 0 if i > 1 else fp16`, a `global`): a region
        that read the condition again would switch off where the GradScaler, made once, stays
        on (the 45th review); the regions ask the scaler there instead."""
        key = id(setup)
        if key not in self.condition_moves:
            home = setup.home
            end = self.ends.get(id(setup.statement), self.order[id(setup.statement)] + 1)
            after = [  # (what follows the statement that makes it; inside it, other checks)
                n for n in self._subtree(home) if self.order.get(id(n), -1) >= end - 1
            ]  # fmt: skip
            read = read_names(cst.parse_expression(setup.condition))
            bound: set[str] = set()
            for n in after:
                if isinstance(n, cst.For | cst.CompFor):
                    bound |= {t.value for t in self._subtree(n.target) if isinstance(t, cst.Name)}
                elif isinstance(n, cst.AsName):
                    bound |= {t.value for t in self._subtree(n.name) if isinstance(t, cst.Name)}
                elif isinstance(n, cst.NamedExpr) and isinstance(n.target, cst.Name):
                    bound.add(n.target.value)
                elif isinstance(n, cst.Global | cst.Nonlocal):
                    bound |= {g.name.value for g in n.names}
            statements = [n for n in after if isinstance(n, cst.SimpleStatementLine)]
            self.condition_moves[key] = bool(read & bound) or self._changes(
                setup.condition, statements
            )
        return self.condition_moves[key]

    def _enabled_at(self, setup: _Setup, function: cst.CSTNode, statement: cst.CSTNode):
        """The ``enabled=`` of a region at ``statement`` in ``function``: the condition where
        ``initialize`` was, the scaler's switch elsewhere (the condition's names may not exist
        there; a module-level scaler sets ``by_scaler``). None: always on; False: the scaler
        does not reach it, so no region can follow apex's switch there."""
        if not setup.condition and not setup.by_scaler:
            return None
        if function is setup.home and not setup.by_scaler and not self._condition_moves(setup):
            return setup.condition
        access = self.access(statement)
        return f"{access}.is_enabled()" if access is not None else False

    def _may_run(self, call: cst.Call, callee, names: set[str], defined: dict, depth: int) -> bool:
        """``call`` hands the model to code that may call it: code outside this file, or a
        function of it whose parameter is called or handed on (its methods run no forward)."""
        if callee is None:
            func = _code(self.module, call.func)
            own = any(func.startswith(f"{n}.") for n in names)  # `model.to(...)`
            text = isinstance(call.func, cst.Attribute) and isinstance(
                call.func.value, cst.SimpleString | cst.FormattedString | cst.ConcatenatedString
            )  # `"step {}".format(model)`, `" ".join(...)`: text made of it
            if func in _HARMLESS or own or text or func.startswith("os.path."):
                return False
            # (a name no import binds, `torch` from a star import: its spelling is its name)
            qualified = self.qualified(call.func) or {func}
            if all(q in _WRAPS or q.startswith(APEX) for q in qualified):
                return False  # a wrapper built on it (DDP), a save; apex's own calls go
            found = [module_function(self.path, q) for q in qualified] if self.path else []
            if found and all(f is not None for f in found):
                return any(_runs_parameter(f, call, names, self.module) for f in found)
            return True
        if depth > 3:
            return True
        params = [p.name.value for p in callee.params.params]
        positional = [a for a in call.args if a.keyword is None and not a.star]
        received = {
            params[i]
            for i, a in enumerate(positional)
            if i < len(params) and _of_model(a.value, names)
        } | {
            a.keyword.value
            for a in call.args
            if a.keyword is not None and _of_model(a.value, names)
        }
        received |= _aliases(self._subtree(callee.body), received)
        for node in self._subtree(callee.body):
            if not isinstance(node, cst.Call) or any(
                q.startswith(APEX) for q in self.qualified(node.func)
            ):  # (`amp.initialize` goes with the rewrite)
                continue
            chain, attributes = node.func, []
            while isinstance(chain, cst.Attribute):
                attributes.append(chain.attr.value)
                chain = chain.value
            if isinstance(chain, cst.Name) and chain.value in received:
                if not attributes or attributes[0] not in _QUIET_METHODS:
                    return True  # `model(x)`, `model.bert(x)`, `model.module.generate(...)`
                continue
            if (
                isinstance(chain, cst.Call)
                and attributes
                and attributes[-1] not in _QUIET_METHODS
                and any(
                    isinstance(a.value, cst.Name) and a.value.value in received for a in chain.args
                )
            ):  # `_unwrap(model).encode(x)`: a helper that may hand it back (cryodrgn, 42nd
                return True  # review: the evaluation ran in float32 with no note)
            if any(isinstance(a.value, cst.Name) and a.value.value in received for a in node.args):
                inner = defined.get(node.func.value) if isinstance(node.func, cst.Name) else None
                if self._may_run(node, inner, received, defined, depth + 1):
                    return True
        return False

    def _as_bool(self, text: str) -> str:
        """``text`` as autocast's ``enabled=``, which takes only a bool (``set_autocast_enabled():
        argument 'enabled' must be bool, not int``, where a GradScaler takes any truth value):
        as written where it is one for sure (a comparison, a ``not``, a call of ``bool`` or
        ``is_enabled()``, a ``store_true`` flag, a name only ever bound to True or False), else
        in ``bool(...)`` (the 43rd review: `--fp16` of `type=int` raised at the first forward)."""
        try:
            expression = cst.parse_expression(text)
        except cst.ParserSyntaxError:
            return text
        return text if self._surely_bool(expression) else f"bool({text})"

    def _surely_bool(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Comparison) or (
            isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not)
        ):
            return True
        if isinstance(node, cst.BooleanOperation):
            return self._surely_bool(node.left) and self._surely_bool(node.right)
        if isinstance(node, cst.Call):
            func = _code(self.module, node.func)
            return func in _BOOL_CALLS or func.rpartition(".")[2] in _BOOL_METHODS
        if isinstance(node, cst.Name) and node.value in ("True", "False"):
            return True
        if isinstance(node, cst.Attribute | cst.Name):
            name = node.attr.value if isinstance(node, cst.Attribute) else node.value
            if isinstance(node, cst.Attribute) and (flag := self._flag_of(name)) is not None:
                action = _argument(flag[1], "action", 99)
                return isinstance(action, cst.SimpleString) and action.evaluated_value in (
                    "store_true",
                    "store_false",
                )
            spelled = _code(self.module, node)
            params = [p for p in self.nodes if isinstance(p, cst.Param) and p.name.value == spelled]
            if any(p.default is None for p in params):  # (`fp16: bool`)
                return all(
                    p.annotation is not None
                    and _code(self.module, p.annotation.annotation) == "bool"
                    for p in params
                )
            values = [
                n.value
                for n in self.nodes
                if isinstance(n, cst.Assign)
                and any(_code(self.module, t.target) == spelled for t in n.targets)
            ] + [p.default for p in params]
            return bool(values) and all(
                isinstance(v, cst.Name) and v.value in ("True", "False") for v in values
            )
        return False

    def _switched_autocast(self, run: list[cst.BaseStatement]) -> cst.Arg | None:
        """The ``enabled=`` argument of a torch autocast region among ``run``'s statements that
        can be off (native AMP's own, beside apex's path), if any; one in an arm of an ``if``
        there is native AMP's arm beside apex's (odtk's `if with_apex: ... else: with
        autocast(...)`), not around apex's forward."""
        for statement in run:
            if not isinstance(statement, cst.With):
                continue
            for item in statement.items:
                node = item.item
                if not (isinstance(node, cst.Call) and any(
                    q.startswith("torch.") and q.endswith(".autocast")
                    for q in self.qualified(node.func)
                )):  # fmt: skip
                    continue
                for arg in node.args:
                    if (
                        arg.keyword is not None
                        and arg.keyword.value == "enabled"
                        and not (isinstance(arg.value, cst.Name) and arg.value.value == "True")
                    ):
                        return arg
        return None

    def _wrap(self, block: cst.CSTNode, runs: list[list[cst.BaseStatement]], enabled) -> None:
        """One ``with autocast`` per run; the block regroups its updated statements. A run in
        ``uncached`` (by its first statement) hands the model to code that may step an
        optimizer on it: autocast keeps its float16 copies of the weights until the outermost
        region exits, so there it keeps none (``cache_enabled=False``; regions inside inherit
        it), where a cached copy would not see the steps."""
        if not runs:
            return
        for run in runs:
            inner = self._switched_autocast(run)
            same = (  # (the same switch as the region's: never off on apex's path)
                inner is not None
                and enabled
                and _bare(_code(self.module, inner.value))
                in {_bare(str(enabled)), _bare(self._as_bool(enabled))}
            )
            if inner is not None and not same:
                switch = _code(self.module, inner.value)
                self.problem(
                    inner,
                    f"native AMP's autocast region here (`enabled={switch}`) would sit inside "
                    "the region placed for apex's path, and where its switch is false it turns "
                    "autocast off there, so apex's path would run in float32 (apex O1 cast "
                    "it): apex beside native AMP; let apex's setting turn the native path on "
                    "and delete the apex branches, by hand",
                )
                return
        flag = f", enabled={self._as_bool(enabled)}" if enabled else ""
        templates = {
            cached: cst.ensure_type(
                cst.parse_statement(
                    'with torch.amp.autocast("cuda", dtype=torch.float16'
                    f"{'' if cached else ', cache_enabled=False'}{flag}):\n    pass\n"
                ),
                cst.With,
            )
            for cached in (True, False)
        }
        updated: dict[int, cst.CSTNode] = {}

        def keep(u: cst.CSTNode, statement: cst.CSTNode) -> cst.CSTNode:
            updated[id(statement)] = u
            return u

        for run in runs:
            for statement in run:
                self.plan.edits[statement] = lambda u, s=statement: keep(u, s)

        def regroup(u: cst.CSTNode) -> cst.CSTNode:
            starts = {id(updated[id(r[0])]): r for r in runs}
            skip = {id(updated[id(s)]) for r in runs for s in r[1:]}
            body = []
            for statement in u.body:
                run = starts.get(id(statement))
                if run is not None:
                    inner = [updated[id(s)] for s in run]
                    template = templates[id(run[0]) not in self.uncached]
                    body.append(
                        template.with_changes(
                            body=template.body.with_changes(
                                body=[inner[0].with_changes(leading_lines=()), *inner[1:]]
                            ),
                            leading_lines=inner[0].leading_lines,
                        )
                    )
                elif id(statement) not in skip:
                    body.append(statement)
            return u.with_changes(body=body)

        previous = self.plan.edits.get(block)
        self.plan.edits[block] = regroup if previous is None else lambda u: regroup(previous(u))


def _called_root(func: cst.BaseExpression) -> str | None:
    """The name a call is rooted at where it calls that value itself or an item of it
    (``model(x)``, ``nets["base"](x)``), not a method of it (``optimizer.step()``)."""
    while isinstance(func, cst.Subscript):
        func = func.value
    return func.value if isinstance(func, cst.Name) else None


# attributes of a model that hold its settings, not submodules (`model.args.beta`, HF's
# `model.config`): what is reached through them runs no forward
_SETTINGS = frozenset({"args", "config", "cfg", "hparams", "device", "dtype", "training"})


def _carrier_call(func: cst.BaseExpression, carriers: dict[str, int]) -> str | None:
    """The carrier a call may run the model through (``dp(x)``, ``seg.evaluate(x)``; not
    ``ema.state_dict()`` nor ``ema.module.to(device)``): its name, else None."""
    root = _called_root(func)
    if root is not None:
        return root if root in carriers else None
    attributes = []
    while isinstance(func, cst.Attribute):
        attributes.append(func.attr.value)
        func = func.value
    if not (isinstance(func, cst.Name) and func.value in carriers):
        return None
    if attributes[-1] in _SETTINGS or any(a in _QUIET_METHODS for a in attributes):
        return None
    return func.value


def _running_methods(cls: ast.ClassDef, attributes: set[str], skip: set[str], shown: str) -> list:
    """The methods of ``cls`` (a class on disk, in the file ``shown``), but those named in
    ``skip``, that run a model held in one of ``attributes``: "`Class.method` (file:line)"."""
    found = []
    for method in cls.body:
        if not isinstance(method, ast.FunctionDef) or method.name in skip:
            continue
        call = next(
            (c for c in ast.walk(method)
             if isinstance(c, ast.Call) and _runs_attribute(c.func, attributes)),
            None,
        )  # fmt: skip
        if call is not None:
            found.append(f"`{cls.name}.{method.name}` ({shown}:{call.lineno})")
    return found


def _runs_attribute(func: ast.expr, attributes: set[str]) -> bool:
    """``self.net(x)``, ``self.net.forward(x)``, ``self.net.generate(x)`` for a model held in
    one of ``attributes`` (``self.net``)."""
    written = ast.unparse(func)
    base, _, attr = written.rpartition(".")
    return written in attributes or (
        base in attributes and (attr.startswith("forward") or attr in _RUNS)
    )


def _aliases(nodes: Iterable[cst.CSTNode], names: set[str]) -> set[str]:
    """The local names bound to one of ``names`` (or a part of it) by an expression that
    calls nothing, among ``nodes`` (a function's): ``model_eval = model.module if
    distributed else model``, ``net = model``."""
    bound = [
        (n.targets[0].target.value, n.value) for n in nodes
        if isinstance(n, cst.Assign) and len(n.targets) == 1
        and isinstance(n.targets[0].target, cst.Name)
    ]  # fmt: skip
    return _grown(bound, names, _picks)


def _held(nodes: Iterable[cst.CSTNode], names: set[str]) -> set[str]:
    """The local names that may hold one of ``names`` (or a part of it): a loop variable
    over a literal tuple or list of them (``for m in (model, ema)``, in a comprehension too)
    or over a container that holds them (``for m in nets.values()``), a target of a tuple
    assignment (``a, b = model, ema``), a container built on them (``nets = {"main": model}``:
    ``nets["main"]`` is the model). Code handed one may run the model."""
    bound: list[tuple[str, object]] = []
    for n in nodes:
        if isinstance(n, cst.For | cst.CompFor) and isinstance(n.target, cst.Name):
            if isinstance(n.iter, cst.Tuple | cst.List):
                bound += [(n.target.value, e.value) for e in n.iter.elements]
            else:
                bound.append((n.target.value, _container(n.iter)))
        elif isinstance(n, cst.Assign) and len(n.targets) == 1:
            target, value = n.targets[0].target, n.value
            if isinstance(target, cst.Name) and isinstance(value, _DISPLAYS):
                bound += [(target.value, e.value) for e in value.elements]
            elif (
                isinstance(target, cst.Tuple)
                and isinstance(value, cst.Tuple | cst.List)
                and len(target.elements) == len(value.elements)
            ):
                bound += [
                    (t.value.value, v.value)
                    for t, v in zip(target.elements, value.elements, strict=True)
                    if isinstance(t.value, cst.Name)
                ]
    return _grown(bound, names, _picks)


_DISPLAYS = (cst.Dict, cst.List, cst.Tuple, cst.Set)


def _container(iterated: cst.BaseExpression) -> cst.BaseExpression:
    """The container a loop walks: ``nets`` for ``nets``, ``nets.values()``, ``nets.items()``
    (the model among the values either way)."""
    if (
        isinstance(iterated, cst.Call)
        and not iterated.args
        and isinstance(iterated.func, cst.Attribute)
        and iterated.func.attr.value in {"values", "items"}
    ):
        return iterated.func.value
    return iterated


def _picks(value: cst.BaseExpression, names: set[str]) -> bool:
    """``value`` is one of ``names`` (or a part of it) on some path: a conditional
    expression's branch, an operand of ``or``/``and``."""
    if isinstance(value, cst.IfExp):
        return _picks(value.body, names) or _picks(value.orelse, names)
    if isinstance(value, cst.BooleanOperation):
        return _picks(value.left, names) or _picks(value.right, names)
    return _of_model(value, names)


def _of_model(value: cst.CSTNode, names: set[str]) -> bool:
    """``value`` is the model (one of its ``names``) or a part of it reached by attributes or
    subscripts (``model.module`` unwrapped from DataParallel, ``model.encoder``, ``nets["g"]``
    of a container built on it): handing it on hands code a forward that apex O1 cast."""
    while isinstance(value, cst.Attribute | cst.Subscript):  # (`nets["main"]`, `model[0]`)
        if isinstance(value, cst.Attribute) and value.attr.value in _SETTINGS:
            return False
        value = value.value
    return isinstance(value, cst.Name) and value.value in names


def _rebound(statement: cst.CSTNode) -> set[str]:
    """The names ``x = ...`` (``a, b = ...``) alone on its line binds whatever they held (none
    for an augmented assignment, which reads them, or a subscript or attribute target)."""
    if not (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Assign)
    ):
        return set()
    names: set[str] = set()
    for target in statement.body[0].targets:
        node = target.target
        elements = (
            [e.value for e in node.elements] if isinstance(node, cst.Tuple | cst.List) else [node]
        )
        if not all(isinstance(e, cst.Name) for e in elements):
            return set()
        names |= {e.value for e in elements}
    return names


# methods that fill a container in place (`losses.append(vgg(out, y))`)
_FILLING = frozenset({"append", "extend", "update", "insert", "add", "setdefault"})


def _stored_attributes(statement: cst.CSTNode) -> set[str]:
    """``self.loss = ...``: the attributes a simple statement assigns, as spelled."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return set()
    module = cst.Module([])
    return {
        module.code_for_node(t.target)
        for small in statement.body if isinstance(small, cst.Assign)
        for t in small.targets
        if isinstance(t.target, cst.Attribute) and isinstance(t.target.value, cst.Name)
    }  # fmt: skip


def _filled(statement: cst.CSTNode) -> set[str]:
    """The local containers a simple statement fills in place, feeding what later reads them
    (pix2pixHD's `G_losses["VGG"] = criterionVGG(fake, real)` before `sum(G_losses.values())`):
    the root name of a subscript or attribute target, or of a filling method's object. Not
    `self`: its attributes are the object's state, not a loss being built."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return set()
    found: set[str] = set()
    for small in statement.body:
        inside: list[cst.BaseExpression] = []  # what the statement writes into
        if isinstance(small, cst.Assign):  # (`d["a"], d["b"] = pair(out)` fills `d` too)
            inside = [t.value for t in _unpacked([t.target for t in small.targets]) if _member(t)]
        elif isinstance(small, cst.AugAssign | cst.AnnAssign) and _member(small.target):
            inside = [small.target.value]
        elif (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and isinstance(small.value.func, cst.Attribute)
            and small.value.func.attr.value in _FILLING
        ):
            inside = [small.value.func.value]
        for root in inside:
            while _member(root):
                root = root.value
            if isinstance(root, cst.Name) and root.value not in ("self", "cls"):
                found.add(root.value)
    return found


def _unpacked(targets: list[cst.BaseExpression]) -> list[cst.BaseExpression]:
    """Assignment targets with tuples and lists (nested, starred) taken apart."""
    out: list[cst.BaseExpression] = []
    for target in targets:
        if isinstance(target, cst.Tuple | cst.List):
            out += _unpacked([e.value for e in target.elements])
        elif isinstance(target, cst.StarredElement):
            out += _unpacked([target.value])
        else:
            out.append(target)
    return out


def _member(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Subscript | cst.Attribute)


# methods of a model that run its forward (`self.model.inference(text)`)
_RUNS = frozenset({"inference", "infer", "generate", "sample", "predict", "encode", "decode"})
# a model's attribute named as a submodule (SemanticPalette's `model.seg_model(x)`): a forward
# (not a verb's object: `model.load_model(state)` loads weights, bert_nli, the 34th review)
_SUBMODULE = re.compile(
    r"^(?!(load|save|set|get|init|build|freeze|unfreeze|print|log|reset|copy|export|restore)_)"
    r".*(model|net|encoder|decoder|generator|discriminator|backbone)$"
)


def _may_forward(attr: str) -> bool:
    """``model.<attr>(...)`` may run the model's forward: any method but torch's own that run
    none (the 42nd review: `model.eval_volume(...)` in a checkpoint helper ran in float32 with
    no note, while `model.encode(...)` had one)."""
    return (
        attr.startswith("forward")
        or attr in _RUNS
        or bool(_SUBMODULE.search(attr))
        or not (_runs_none(attr) or attr.startswith(("load_", "save_", "print_", "to_")))
    )


def _runs_none(attr: str) -> bool:
    """``model.<attr>`` is torch's own, or named like it, and runs no forward (``state_dict``,
    ``named_modules``, ``register_buffer``, a private helper)."""
    return (
        attr in _QUIET_METHODS
        or attr in _NO_FORWARD
        or attr.startswith(("_", "named_", "register_", "set_", "get_"))
    )


# calls whose result is a bool (autocast's `enabled=` takes nothing else)
_BOOL_CALLS = frozenset({"bool", "isinstance", "issubclass", "hasattr", "callable", "any", "all"})
_BOOL_METHODS = frozenset({"is_enabled", "is_available", "startswith", "endswith", "isfinite"})


# methods of a module that run no forward (besides _QUIET_METHODS)
_NO_FORWARD = frozenset({
    "apply", "register_buffer", "register_parameter", "register_module", "add_module",
    "register_forward_hook", "register_forward_pre_hook", "register_backward_hook",
    "register_full_backward_hook", "get_submodule", "get_parameter", "get_buffer",
    "share_memory", "type", "double", "bfloat16", "extra_repr", "save_pretrained",
    "tie_weights", "init_weights", "resize_token_embeddings", "num_parameters", "freeze",
    "unfreeze", "save", "load", "print", "summary", "reset_parameters", "set_grad",
    # DistributedDataParallel's own (`with model.no_sync(): loss.backward()`, ANCE)
    "no_sync", "join", "join_hook", "register_comm_hook",
    "gradient_checkpointing_enable", "gradient_checkpointing_disable",
})  # fmt: skip


def _model_method(func: cst.BaseExpression, models: set[str], module: cst.Module) -> bool:
    """``agent.act``, ``dqn.module.choose_action``, ``model.encoder``: a method or submodule of
    an initialized model (through DataParallel's ``.module``) that may run a forward; not the
    model itself, its ``forward`` (those are ``model_calls``) or a method that runs none. The
    model as a helper or a conditional hands it back counts (``_unwrap(model).encode(x)``,
    ``getattr(model, "module", model)(x)``, the 43rd review: those ran in float32, unnamed)."""
    if isinstance(func, cst.Call | cst.IfExp | cst.BooleanOperation):
        return _handed_back(func, models, module)  # (`_unwrap(model)(x)`)
    if not isinstance(func, cst.Attribute):
        return False
    attr, owner = func.attr.value, func.value
    if isinstance(owner, cst.Attribute) and owner.attr.value == "module":
        if _code(module, owner) in models:
            return False  # (`model.module(x)`: the model itself)
        owner = owner.value
    return (
        (_code(module, owner) in models or _handed_back(owner, models, module))
        and attr not in ("forward", "module")
        and not _runs_none(attr)
    )


def _handed_back(node: cst.BaseExpression, models: set[str], module: cst.Module) -> bool:
    """``node`` may be the model: a call given it (a helper that unwraps it) but apex's, a
    settings read or a builtin that makes something else of it, or a conditional (``model.module
    if ... else model``) with it on one side."""
    if isinstance(node, cst.IfExp):
        sides = [node.body, node.orelse]
    elif isinstance(node, cst.BooleanOperation):
        sides = [node.left, node.right]
    elif isinstance(node, cst.Call):
        func = _code(module, node.func)
        if (
            func in _HARMLESS - {"getattr"}
            or func.startswith(("amp.", "apex."))
            or func.rpartition(".")[2][:1].isupper()  # (a class built on it: a carrier's)
        ):
            return False
        sides = [a.value for a in node.args]
    else:
        return False
    for side in sides:
        spelled = _code(module, side)
        if spelled in models or spelled.removesuffix(".module") in models:
            return True
    return False


def _submodule_of(func: cst.BaseExpression, models: set[str], module: cst.Module) -> bool:
    """``model.layers["enc"](x)``: a call of a submodule picked by subscript from a model's
    attribute (its forward runs in the model's precision)."""
    if not isinstance(func, cst.Subscript):
        return False
    root = func.value
    while _member(root):
        if _code(module, root) in models:
            return True
        root = root.value
    return False


def _listed_lines(lines: dict[str, list[int]]) -> str:
    """```a(...)` (line 3), `b(...)` (lines 5, 6)``: what a note names, in order."""
    return ", ".join(
        f"`{called}(...)` (line{'s' if len(at) > 1 else ''} {', '.join(map(str, at))})"
        for called, at in lines.items()
    )
