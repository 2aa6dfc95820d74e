"""The autocast regions: the forward pass and loss of every scaled backward, found from the data
flow, and the invariant that no initialized model runs outside one.
"""

from __future__ import annotations

import builtins
import functools

import libcst as cst

from ampmigrate.apex.common import (
    Loop,
    _code,
    _is_call_of,
    _Setup,
    _statements,
)

# how a float32 note ends: what keeps apex's float16 there
_KEEP = 'wrap it in `torch.amp.autocast("cuda", dtype=torch.float16)` to keep apex\'s precision'

# what only a module has: read through a name, they make it a holder of modules
_MODULE_READS = frozenset({"parameters", "named_parameters", "train", "eval", "modules",
                           "children"})  # fmt: skip

# builtins that never call a model they are handed
_HARMLESS = frozenset({"print", "len", "isinstance", "str", "repr", "type", "id", "getattr",
                       "hasattr", "setattr", "vars", "dir"})  # fmt: skip
# methods of a model that run no forward pass
_QUIET_METHODS = frozenset({
    "state_dict", "load_state_dict", "parameters", "named_parameters", "buffers",
    "named_buffers", "modules", "named_modules", "children", "named_children", "train", "eval",
    "to", "cuda", "cpu", "half", "float", "zero_grad", "requires_grad_",
})  # fmt: skip


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
                parent = self.parent(node)
                if isinstance(parent, cst.Attribute) and parent.attr is node:
                    continue  # (`scaled.backward()` beside a helper named `backward`: 75th review)
                made = self.calls_through(node)  # (`b = partial(f, fp16)`: b's calls)
                if made is None:
                    return []  # handed on or rebound: its callers are not all here
                calls += made
        for call in calls:
            args = self.given_args(call)
            keyword = next(
                (a for a in args if a.keyword and a.keyword.value == params[index]), None
            )
            positional = [a for a in args if a.keyword is None]
            if any(a.star for a in args):
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
    if isinstance(statement, cst.With) and isinstance(statement.body, cst.IndentedBlock):
        # (`with torch.no_grad(): inputs["teacher_logits"] = teacher(x)`: unilm's xtune, the
        # 74th review: the teacher stayed out of the region)
        return set().union(*(_filled(s) for s in statement.body.body))
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


def _runs_none(attr: str) -> bool:
    """``model.<attr>`` is torch's own, or named like it, and runs no forward (``state_dict``,
    ``named_modules``, ``register_buffer``, a private helper)."""
    return (
        attr in _QUIET_METHODS
        or attr in _NO_FORWARD
        or attr.startswith(("_", "named_", "register_", "set_", "get_"))
    )


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


def _listed_lines(lines: dict[str, list[int]]) -> str:
    """```a(...)` (line 3), `b(...)` (lines 5, 6)``: what a note names, in order."""
    return ", ".join(
        f"`{called}(...)` (line{'s' if len(at) > 1 else ''} {', '.join(map(str, at))})"
        for called, at in lines.items()
    )
