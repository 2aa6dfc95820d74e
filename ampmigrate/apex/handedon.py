"""Code the model is handed to while it trains (``evaluate(model, ...)``, an object built on the
model, a lambda): apex O1 cast those forwards too, so each such statement gets its own region,
enabled as the scaler is; where training starts, and what the switch is there."""

from __future__ import annotations

import ast
from collections.abc import Iterable

import libcst as cst

from ampmigrate.apex.common import (
    Loop,
    _argument,
    _code,
    _Setup,
    read_names,
)
from ampmigrate.apex.forwards import (
    _SETTINGS,
    _WRAPS,
    _aliases,
    _called_root,
    _grown,
    _of_model,
    _picks,
)
from ampmigrate.apex.ondisk import module_function
from ampmigrate.apex.regions import _HARMLESS, _KEEP, _QUIET_METHODS
from ampmigrate.apex.verdict import APEX


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
    received |= {  # (`for n in nets: n(x)`: the 68th review's c7, a container handed on)
        t.id
        for node in ast.walk(function)
        if isinstance(node, ast.For | ast.comprehension)
        and any(isinstance(n, ast.Name) and n.id in received for n in ast.walk(node.iter))
        for t in ast.walk(node.target)
        if isinstance(t, ast.Name)
    }
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
                bound += [(n.target.value, c) for c in _containers(n.iter)]
        elif isinstance(n, cst.For | cst.CompFor) and isinstance(n.target, cst.Tuple | cst.List):
            # (`for i, m in enumerate(nets)`, `for k, m in nets.items()`, `for name, m in
            # pairs`: any name of the target may hold the model; the 68th review's c1, c3, c6)
            bound += _unpacked(n.target, n.iter)
        elif (
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Attribute)
            and n.func.attr.value in _FILLED_BY
            and isinstance(n.func.value, cst.Name)
        ):  # (`nets.append(model)`: c4)
            bound += [(n.func.value.value, a.value) for a in n.args]
        elif isinstance(n, cst.Assign) and len(n.targets) == 1:
            target, value = n.targets[0].target, n.value
            if isinstance(target, cst.Name) and isinstance(value, _DISPLAYS):
                bound += [(target.value, e.value) for e in value.elements]
            elif isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
                bound.append((target.value.value, value))  # (`snap["m"] = model`: c4)
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


def _unpacked(target: cst.Tuple | cst.List, iterated: cst.BaseExpression) -> list:
    """(name, container) for each name of a loop's tuple target that may hold an element of a
    container: by position for ``zip(a, b)``, the second for ``enumerate(c)`` and
    ``c.items()``, every name for anything else (a list of pairs)."""
    names = [e.value.value if isinstance(e.value, cst.Name) else None for e in target.elements]
    func = iterated.func if isinstance(iterated, cst.Call) else None
    if isinstance(func, cst.Name) and func.value == "zip" and len(iterated.args) == len(names):
        return [
            (name, c)
            for name, a in zip(names, iterated.args, strict=True)
            if name is not None
            for c in _containers(a.value)
        ]
    if (
        len(names) == 2
        and names[1] is not None
        and (
            (isinstance(func, cst.Name) and func.value == "enumerate")
            or (isinstance(func, cst.Attribute) and func.attr.value == "items")
        )
    ):
        return [(names[1], c) for c in _containers(iterated)]
    return [(name, c) for name in names if name is not None for c in _containers(iterated)]


# a container's methods that put what they are given in it
_FILLED_BY = frozenset({"append", "extend", "insert", "add", "update", "setdefault"})
# what walks the elements of the containers it is given (`enumerate(nets)`, `zip(names, nets)`)
_WALKERS = frozenset({"enumerate", "zip", "reversed", "sorted", "list", "tuple", "filter", "iter"})
_VIEWS = frozenset({"values", "items"})


def _containers(iterated: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The containers a loop walks: ``nets`` for ``nets``, ``nets.values()``, ``nets.items()``
    (the model among the values either way), ``enumerate(nets)``, ``zip(names, nets)``,
    ``nets[:2]`` and the like (each argument of such a call)."""
    func = iterated.func if isinstance(iterated, cst.Call) else None
    if isinstance(func, cst.Attribute) and not iterated.args and func.attr.value in _VIEWS:
        return [func.value]
    if isinstance(func, cst.Name) and func.value in _WALKERS:
        return [c for a in iterated.args for c in _containers(a.value)]
    if isinstance(iterated, cst.Subscript):  # (`nets[:1]`)
        return [iterated.value]
    return [iterated]


# calls whose result is a bool (autocast's `enabled=` takes nothing else)
_BOOL_CALLS = frozenset({"bool", "isinstance", "issubclass", "hasattr", "callable", "any", "all"})
_BOOL_METHODS = frozenset({"is_enabled", "is_available", "startswith", "endswith", "isfinite"})


class HandedOn:
    """Mixed into ``_Planner`` after ``Regions``."""

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
        riders = self._riding_methods(functions, scaling)
        functions += riders
        riding = {id(m) for m in riders}
        handed, carried, seen = [], [], set()
        lambdas: list[cst.Call] = []
        for function in functions:
            if (id(function) not in scaling and id(function) not in riding) or (
                id(function) in seen
            ):
                continue
            seen.add(id(function))  # (a script's module-level loop: the module)
            body = function if function is self.module else function.body
            carriers = self._carriers(body, spellings)
            names = spellings | set(carriers) | self._held_by_object(function, spellings)
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
                if (
                    carrier is None
                    and not (
                        any(_of_model(a.value, names) for a in node.args)
                        and self._may_run(node, callee, names, defined, 0)
                    )
                    # (`[n(x) for n in nets]`: a forward of what a name holds, the 68th
                    # review's c2; not a method of it, `n.zero_grad()`)
                    and not (
                        isinstance(node.func, cst.Name) and node.func.value in names - spellings
                    )
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

    def _riding_methods(self, functions: list, scaling: set[int]) -> list[cst.FunctionDef]:
        """Methods of a scaling method's class that it calls (``self.validate()`` after the step,
        the 68th review's c9) and that nothing else in the file calls: they run while the model
        trains, so what they hand the model to may run a forward apex O1 cast."""
        found: list[cst.FunctionDef] = []
        for function in functions:
            cls = self._holder(function) if isinstance(function, cst.FunctionDef) else None
            if id(function) not in scaling or not isinstance(cls, cst.ClassDef):
                continue
            for method in cls.body.body:
                if (
                    not isinstance(method, cst.FunctionDef)
                    or id(method) in scaling
                    or method in found
                    or not method.params.params
                ):
                    continue
                uses = [  # (in the whole file: `runner.validate()` in `main` runs it too)
                    n for n in self.nodes
                    if isinstance(n, cst.Attribute) and n.attr.value == method.name.value
                ]  # fmt: skip
                if uses and all(
                    isinstance(self.parent(u), cst.Call)
                    and self.parent(u).func is u
                    and id(self.function(u)) in scaling
                    for u in uses
                ):
                    found.append(method)
        return found

    def _held_by_object(self, function: cst.CSTNode, spellings: set[str]) -> set[str]:
        """The attributes of a method's object that its class fills with the model
        (``self.nets = {"main": self.model, "ema": self.ema}``): ``self.nets[k]`` is it."""
        cls = self._holder(function) if isinstance(function, cst.FunctionDef) else None
        if not isinstance(cls, cst.ClassDef):
            return set()
        return {
            _code(self.module, n.targets[0].target)
            for n in self._subtree(cls)
            if isinstance(n, cst.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0].target, cst.Attribute)
            and isinstance(n.value, cst.Dict | cst.List | cst.Tuple | cst.Set)
            and _of_model(n.value, spellings)
        }

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
        if depth > 3 or any(a.star and _of_model(a.value, names) for a in call.args):
            return True  # (`f(*nets)`: which parameter takes the model is not followed; 68th c4)
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
