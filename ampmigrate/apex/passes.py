"""`amp.initialize` in a loop or kept past a pass: pairs of models and optimizers initialized in
a loop over them, a model kept for a later pass (an EMA copy, an evaluation), what a loop
varies, and the models that reach `initialize` through a wrapper or a call."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import libcst as cst

from ampmigrate.apex.common import (
    _code,
)
from ampmigrate.apex.keeps import HANDS_ON, RETURNS_SELF, SHOWING, keeps, module_lookup

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


class Passes:
    """Mixed into ``_Planner`` after ``Initialize``."""

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
            changed = self._loop_writes(loop)
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

    def _loop_writes(self, loop: cst.For | cst.While) -> set[str]:
        """The chains ``loop`` may change, each whole (``args.lr``, not ``args``): what it
        assigns (and its target), and the receiver of each method it calls
        (``history.append(x)``, ``cfg.advance()``), ``setattr``/``delattr``'s object (the 56th
        review's probes). A method called through ``self`` changes the instance: even a
        ``staticmethod`` may reach it by routes no reading here follows (the 77th and 79th
        reviews: ``self`` in a list or a lambda, ``getattr``, a global, an override in another
        module), so the 75th review's cail2019 keeps that reason beside its true one."""
        targets = [loop.target] if isinstance(loop, cst.For) else []
        calls = []
        for node in self._subtree(loop.body):
            if isinstance(node, cst.AssignTarget | cst.AugAssign | cst.AnnAssign
                          | cst.For | cst.NamedExpr):  # fmt: skip
                targets.append(node.target)
            elif isinstance(node, cst.AsName):
                targets.append(node.name)
            elif isinstance(node, cst.Call):
                calls.append(node)
        changed: set[str] = set()
        while targets:
            target = targets.pop()
            if isinstance(target, cst.Tuple | cst.List):
                targets += [e.value for e in target.elements]
            else:
                changed.add(_code(self.module, target))
        for node in calls:
            if isinstance(node.func, cst.Attribute):
                changed.add(_code(self.module, node.func.value))
            elif isinstance(node.func, cst.Name) and node.func.value in ("setattr", "delattr"):
                changed |= {_code(self.module, a.value) for a in node.args[:1]}
        return changed

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
