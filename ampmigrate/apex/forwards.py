"""The forwards of an initialized model outside the statements of its loss: methods of the
class that run it, evaluations, aliases and stored models, subclasses that override a forward;
each must run in a region (apex O1 cast every forward after ``initialize``) or block."""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Iterable

import libcst as cst

from ampmigrate.apex.common import (
    _argument,
    _bare,
    _code,
    _is_call_of,
    _Setup,
    calls_up,
    is_path,
)
from ampmigrate.apex.keeps import RETURNS_SELF
from ampmigrate.apex.ondisk import module_definition
from ampmigrate.apex.regions import _KEEP, _member, _runs_none
from ampmigrate.apex.users import derived_on_disk, users_on_disk

# calls that take the model without running it: wrappers built on it, a save of it
_WRAPS = frozenset({
    "torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel", "torch.save", "copy.deepcopy",
    "apex.parallel.DistributedDataParallel", "apex.parallel.distributed.DistributedDataParallel",
    "apex.parallel.convert_syncbn_model", "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
    "torch.compile", "functools.partial",
})  # fmt: skip


_AUTOCASTS = frozenset({
    "torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast",
    "torch.amp.autocast_mode.autocast",
})  # fmt: skip


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


def _called_root(func: cst.BaseExpression) -> str | None:
    """The name a call is rooted at where it calls that value itself or an item of it
    (``model(x)``, ``nets["base"](x)``), not a method of it (``optimizer.step()``)."""
    while isinstance(func, cst.Subscript):
        func = func.value
    return func.value if isinstance(func, cst.Name) else None


# attributes of a model that hold its settings, not submodules (`model.args.beta`, HF's
# `model.config`): what is reached through them runs no forward
_SETTINGS = frozenset({"args", "config", "cfg", "hparams", "device", "dtype", "training"})


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
    if isinstance(value, cst.List | cst.Tuple | cst.Set | cst.Dict):  # (`f([model])`: c7)
        return any(_of_model(e.value, names) for e in value.elements)
    while isinstance(value, cst.Attribute | cst.Subscript):  # (`nets["main"]`, `model[0]`)
        if isinstance(value, cst.Attribute) and value.attr.value in _SETTINGS:
            return False
        if _dotted(value) in names:  # (`self.model`, `self.nets[k]`: a model an object holds)
            return True
        value = value.value
    return isinstance(value, cst.Name) and value.value in names


def _dotted(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, as spelled; None for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr.value}" if head is not None else None
    return None


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


class Forwards:
    """Mixed into ``_Planner`` after ``Regions``."""

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
        reachable: dict[str, int] = {}  # covered here, public to code outside the file
        public: dict[int, bool] = {}
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
            if self._in_own_autocast(node):
                continue  # (the project's own float16 region: the 83rd review's 15)
            if (
                function is not home
                and func not in aliases[id(function)]
                and func in self._assigned_here(function)
            ):
                continue  # its own local of that name (`model = MODEL_CLASSES[t][1]`): not it
            if id(function) not in covered:
                covered[id(function)] = self._called_in_regions(function, home=home)
            if covered[id(function)]:
                if id(function) not in public:
                    public[id(function)] = self._callable_elsewhere(function)
                if public[id(function)]:
                    reachable.setdefault(function.name.value, self.line(node))
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
        listed = ", ".join(f"`{n}` (line {line})" for n, line in sorted(reachable.items()))
        if listed:  # (transform-and-tell's `batch_loss`, which allennlp's validation calls)
            self.plan.notes.append(
                f"behaviour change where code outside this file calls it after "
                f"`amp.initialize`: the model's forward in {listed} runs inside the autocast "
                "regions of this file's calls of it, and in float32 in any other call (apex O1 "
                f"cast every forward after `initialize`, in the whole process): {_KEEP} there"
            )
        self._returned_elsewhere(home, stored)
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
        (``self.model, self.optimizer = setup(net, optimizer)``: ``self.model``), or of a
        method called through ``self`` (3DC-Seg's ``self.model, self.opt = self.setup()``,
        the 80th review: its evaluation's forward went unstated)."""
        if not isinstance(home, cst.FunctionDef):
            return set()
        holder = self.parent(self.parent(home))
        if self.parent(home) is not self.module and not isinstance(holder, cst.ClassDef):
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
        if isinstance(holder, cst.ClassDef):
            refs = [
                r
                for r in self.spelled[1].get(home.name.value, ())
                if isinstance(r.value, cst.Name) and r.value.value == "self"
                and self.within(r, holder)
            ]  # fmt: skip
        else:
            refs = list(self._references(home.name.value))
        calls = [self.parent(r) for r in refs]
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

    def _in_own_autocast(self, node: cst.CSTNode) -> bool:
        """``node`` runs in a ``with`` of torch's own autocast, in float16 and not switched:
        the forward is cast there already, apex or not."""
        for above in self.ancestors(node):
            if not isinstance(above, cst.With):
                continue
            for item in above.items:
                call = item.item
                if not isinstance(call, cst.Call) or not any(
                    q in _AUTOCASTS for q in self.qualified(call.func)
                ):
                    continue
                keywords = {a.keyword.value: a.value for a in call.args if a.keyword}
                dtype = keywords.get("dtype")
                if "enabled" not in keywords and (
                    dtype is None or _code(self.module, dtype) in ("torch.float16", "torch.half")
                ):
                    return True
        return False

    def _returned_elsewhere(self, home: cst.CSTNode, models: set[str]) -> None:
        """A module-level ``home`` that returns the initialized model, called by another
        module (the 82nd review's g13: `m = train.main(True); m(x)` in `run_all.py`): apex O1
        cast that forward, the process-wide patch still on; it runs in float32 now. Stated."""
        if not isinstance(home, cst.FunctionDef) or self.parent(home) is not self.module:
            return
        returned = next(
            (
                n for n in self._subtree(home.body)
                if isinstance(n, cst.Return) and n.value is not None
                and self.function(n) is home
                and any(
                    _code(self.module, e) in models
                    for e in ([x.value for x in n.value.elements]
                              if isinstance(n.value, cst.Tuple) else [n.value])
                )
            ),
            None,
        )  # fmt: skip
        if returned is None or self.path is None:
            return
        linked = {os.path.abspath(f) for f in self.link.files} if self.link else set()
        users = [  # (a linked importer gets its own regions: DPR's trainers)
            u for u in users_on_disk(self.path, [home.name.value]) or []
            if os.path.abspath(u[0]) not in linked
        ]  # fmt: skip
        if users:
            folder = os.path.dirname(os.path.abspath(self.path))
            other, line, _ = users[0]
            self.plan.notes.append(
                f"behaviour change where another module runs what `{home.name.value}` returns: "
                f"the initialized model (returned at line {self.line(returned)}; "
                f"{os.path.relpath(other, folder)}:{line} calls `{home.name.value}`) runs its "
                "forwards there outside any autocast region, in float32 now (apex O1 cast every "
                f"forward after `initialize`, in the whole process): {_KEEP} there"
            )

    def _callable_elsewhere(self, function: cst.CSTNode) -> bool:
        """``function`` may be called by code outside this file: a public method (its objects
        may be handed to a framework's callbacks), or a public module-level function another
        module on disk names."""
        name = function.name.value if isinstance(function, cst.FunctionDef) else "_"
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            return False  # (a dunder, `__call__`, is called from outside: the 83rd review)
        if isinstance(self.parent(self.parent(function)), cst.ClassDef):
            return True
        if self.parent(function) is not self.module or self.path is None:
            return False
        return bool(users_on_disk(self.path, [function.name.value]))

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
