"""Where the step asks the switch: the test of the branch that scaled (`if fp16:`), the
functions that call the one that scales and what they pass it, a parameter that is the
switch only where every call of it is in this file."""

from __future__ import annotations

import ast
import functools
import textwrap

import libcst as cst

from ampmigrate.apex.clip import _called_elsewhere
from ampmigrate.apex.common import (
    _code,
    _is_call_of,
    _Setup,
    _statements,
    given_at,
    parameter_places,
    wrapping_decorator,
)
from ampmigrate.apex.users import users_on_disk
from ampmigrate.replace import ReplaceNodes


def _pairs(target: cst.BaseExpression, value: cst.BaseExpression) -> list[tuple]:
    """What an assignment binds to what: ``a = x``, and ``a, b = x, y`` element-wise."""
    if isinstance(target, cst.Tuple | cst.List) and isinstance(value, cst.Tuple | cst.List):
        if len(target.elements) == len(value.elements):
            return [
                (t.value, v.value) for t, v in zip(target.elements, value.elements, strict=True)
            ]
        return []
    return [(target, value)]


def _terms(text: str, op: type[ast.boolop]) -> list[str]:
    """The operands of ``text``'s top-level ``and`` (``or``), nested ones opened, each as
    ``ast.unparse`` writes it (``bool(x)``, the planner's wrapper of a switch, is ``x``)."""
    node = ast.parse(f"({text})", mode="eval").body
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "bool"
        and len(node.args) == 1
    ):
        node = node.args[0]
    return [ast.unparse(v) for v in _flat(node, op)]


def _flat(node: ast.expr, op: type[ast.boolop]) -> list[ast.expr]:
    """The operands of ``node``'s ``op``, a parenthesised one of the same kind opened:
    ``(a and b) and c`` holds ``a`` as surely as ``a and b and c`` does."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, op):
        return [t for v in node.values for t in _flat(v, op)]
    return [node]


def _root(node: ast.expr) -> str | None:
    """The name a store through attributes and subscripts writes into (``cfg["amp"]``: ``cfg``)."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _names_in(term: str) -> set[str]:
    """The names a term of a test reads (all of them, where it does not parse)."""
    try:
        return {n.id for n in ast.walk(ast.parse(term, mode="eval")) if isinstance(n, ast.Name)}
    except SyntaxError:
        return {term}


def _holds(value: str, on: set[str]) -> bool:
    """``value`` is a term of ``on``, or a conjunction of such terms (the switch itself:
    `args.fp16 and not args.cpu`, the 62nd review's d01)."""
    return value in on or set(_terms(value, ast.And)) <= on


class Switches:
    """Mixed into ``_Planner`` after ``Step``."""

    def _branch_guard(
        self, node, branch: cst.If, scaled: cst.With, opt: str, function, access
    ) -> bool:
        """The step after the ``if`` (its one ``opt.step()``, later in the same block, nothing
        placed before it) steps through the scaler where the test sends the iteration to the
        scaled backward, and plainly where it sends it to the plain one, as apex did on each:
        exact where the test calls nothing and nothing in between rebinds what it reads."""
        steps = self.steps.get((id(function), opt), [])
        located = self.block_of(branch)
        if access is None or len(steps) != 1 or located is None:
            return False
        step = steps[0]
        body = _statements(located[0]) or []
        index = located[1]
        after = next((i for i, s in enumerate(body) if s is step), None)
        if after is None or after <= index or self.before_step.get(step) or step in self.unsure:
            return False
        folded = branch.test.visit(ReplaceNodes(self.plan.edits))  # (`or amp is None` goes)
        try:
            test = ast.parse(f"({_code(self.module, folded)})", mode="eval").body
        except SyntaxError:
            return False
        if any(isinstance(n, ast.Call | ast.NamedExpr | ast.Await) for n in ast.walk(test)):
            return False
        read = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        between = "\n".join(_code(self.module, s) for s in body[index:after])
        try:
            stores = [
                n
                for n in ast.walk(ast.parse(textwrap.dedent(between)))
                if isinstance(n, ast.Name | ast.Attribute | ast.Subscript)
                and isinstance(n.ctx, ast.Store)
            ]
        except SyntaxError:
            return False
        written = {_root(n) for n in stores}
        if read & written:
            return False
        shown = ast.unparse(test)
        negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
        scaled_on = (
            shown
            if self.within(scaled, branch.body)
            else ast.unparse(test.operand)  # (`if not x:` holds the plain one: the step's is `x`)
            if negated
            else f"not ({shown})"
        )
        self.branch_guards[step] = scaled_on
        self.plan.notes.append(
            f"the step at line {self.line(step)} goes through the scaler only where "
            f"`{scaled_on}` holds (the branch with the scaled backward) and is `{opt}.step()` "
            f"where it does not (the plain `backward()` at line {self.line(node)}, which may "
            "run with the scaler on: apex stepped plainly there)"
        )
        return True

    def _called_under(self, setup: _Setup) -> set[str]:
        """The terms of the test of the ``if`` around every call of the function that
        initializes (`if "--amp" in sys.argv: model, opt = setup(model, opt)`): the scaler is
        on only where one held."""
        home = setup.home
        if not isinstance(home, cst.FunctionDef):
            return set()
        tests = set()
        for node in self.nodes:
            if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)):
                continue
            if node.func.value != home.name.value:
                continue
            around = next((a for a in self.ancestors(node) if isinstance(a, cst.If)), None)
            if around is None or not self.within(node, around.body):
                return set()
            tests.add(_code(self.module, around.test))
        return set(_terms(tests.pop(), ast.And)) if len(tests) == 1 else set()

    def _separating(self, node: cst.CSTNode, scaled: cst.With) -> cst.If:
        return next(
            a for a in self.ancestors(node) if isinstance(a, cst.If) and self.within(scaled, a)
        )

    def _off_path(self, node: cst.CSTNode, branch: cst.If, on: set[str]) -> str | None:
        """None where ``branch``, the ``if`` that separates the plain backward at ``node``
        from a scaled one, runs the plain one only with the scaler off: its test holds
        wherever the scaler's switch does (one of whose terms ``on`` holds each `and` term of
        one of the test's `or` terms). Else the test, as written, for the reason."""
        # as the rewrite has it: availability terms folded (`or amp is None` goes)
        shown = _code(self.module, branch.test.visit(ReplaceNodes(self.plan.edits)))
        try:
            test = ast.parse(f"({shown})", mode="eval").body
        except SyntaxError:
            return shown
        if self.within(node, branch.body):  # the plain one runs where the test holds
            if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
                return shown
            test = test.operand
        for option in _terms(ast.unparse(test), ast.Or):
            if set(_terms(option, ast.And)) <= on:
                return None
        return shown

    def _switch_terms(self, setup: _Setup, access: str | None) -> set[str]:
        """What holds wherever the scaler is on: the `and` terms of its switch (`args.fp16`
        and `args.level == "O1"`), their stored copies (`self.fp16 = fp16`, also in a tuple
        assignment), `scaler.is_enabled()`, and the test around every call of the function
        that initializes."""
        on = set(_terms(setup.condition, ast.And)) if setup.condition else set()
        stored = {
            _code(self.module, target)
            for n in self._subtree(setup.home)
            if isinstance(n, cst.Assign) and len(n.targets) == 1
            for target, value in _pairs(n.targets[0].target, n.value)
            if isinstance(target, cst.Attribute) and _code(self.module, value) in on
        }
        enabled = {f"{access}.is_enabled()"} if access else set()
        # a helper whose callers step: they show each term of its tests on with their scaler
        shown = (
            {t for t, _, _ in self.link.delegated.switch} if self.delegating("callee") else set()
        )
        found = on | stored | enabled | shown | self._called_under(setup) | self._passed(setup, on)
        return found - self._set_after(setup, on)

    def _set_after(self, setup: _Setup, on: set[str]) -> set[str]:
        """The attributes this file assigns after ``initialize`` (in a function that calls
        the one that initializes: after that call; but the copies of the switch stored beside
        ``initialize``). `args.fp16 = use and epoch != 1` before a call, or `self.fp16` reset
        each epoch (the 62nd review's q07c, q12c), is not the switch the scaler was made
        with; NVIDIA BERT's `args.fp16 = args.fp16 or args.amp` before the call is."""
        anchor = self.order.get(id(self.plan.anchor), len(self.nodes))
        starts: dict[int, int] = {}  # by function: where what it assigns may follow initialize

        def start(function: cst.CSTNode) -> int:
            if id(function) not in starts:
                home = setup.home
                calls = [
                    self.order[id(n)]
                    for n in self._subtree(function)
                    if isinstance(home, cst.FunctionDef)
                    and isinstance(n, cst.Call)
                    and isinstance(n.func, cst.Name)
                    and n.func.value == home.name.value
                    and self.function(n) is function
                ]
                starts[id(function)] = min(calls) if calls and function is not home else anchor
            return starts[id(function)]

        return {
            _code(self.module, target)
            for n in self.nodes
            if isinstance(n, cst.Assign | cst.AugAssign | cst.AnnAssign)
            and self.order[id(n)] > start(self.function(n))
            and not (  # (`self.fp16 = fp16` beside `initialize`: a copy of the switch)
                isinstance(n, cst.Assign)
                and self.function(n) is setup.home
                and _code(self.module, n.value) in on
            )
            for target in (
                [t.target for t in n.targets] if isinstance(n, cst.Assign) else [n.target]
            )
            if isinstance(target, cst.Attribute)
        }

    def _passed(self, setup: _Setup, on: set[str]) -> set[str]:
        """A term of the switch that is a parameter of the function that initializes, given
        the same argument at every call of it in this file (`setup(net, opt, args.fp16)`):
        that argument, and its copy on an object made beside the call (`self.args = args`:
        `self.args.fp16`). In an importer of a function that initializes (apex.shared), the
        terms that function's switch reads among its parameters."""
        home = setup.home
        if self.link and self.link.shared and self.role == "caller":
            return self._given(self.link.functions[0], dict(self.link.switch))
        if not isinstance(home, cst.FunctionDef) or self.parent(home) is not self.module:
            return set()
        listed = [p.name.value for p in (*home.params.posonly_params, *home.params.params)]
        return self._given(home.name.value, {t: listed.index(t) for t in on & set(listed)})

    def _in_scope(
        self, function: cst.CSTNode, on: set[str], setup: _Setup, seen: frozenset = frozenset()
    ) -> set[str]:
        """The terms of ``on`` (what holds wherever the scaler is on, as the function that
        makes it reads them) as they read in ``function``, a module-level function or a
        method: a parameter that every call hands on under its own name, from a caller where
        its terms hold, keeps them; one given anything else (``fp16=False``, ``fp16 and
        epoch > 0``, its default), rebound, starred, or whose calls are not all seen (passed
        as a value) loses them, as does a local it assigns; a parameter every call gives the
        same term (``fp16=args.fp16``; ``args`` where ``args.fp16`` is one; a literal True)
        is one. Where the terms are read (the function that initializes, one that calls it, a
        closure) they are taken as they are spelled."""
        method = isinstance(function, cst.FunctionDef) and isinstance(
            self.parent(self.parent(function)), cst.ClassDef
        )
        if (
            function is setup.home
            or not isinstance(function, cst.FunctionDef)
            or (self.parent(function) is not self.module and not method)
            or (self.link and self.link.shared and self.role == "caller")
            or self._calls_home(function, setup)
        ):  # (the terms of what is given the function that initializes are read where it is
            return on  # called: in an importer of a setup function, in `main` (NVIDIA's BERT))
        seen |= {id(function)}
        params = function.params
        # (`self.step(x)` gives no `self`)
        where = {n: at for n, (at, _) in parameter_places(function, method).items()}
        differs = set(self.facts(function.body).assigned) | {
            star.name.value
            for star in (params.star_arg, params.star_kwarg)
            if isinstance(star, cst.Param)
        }
        calls = self._calls_of(function, method)
        added: set[str] = set()
        for name, at in where.items():
            if calls is None or name in differs:
                differs.add(name)
                continue
            given = {
                _code(self.module, v) if (v := given_at(self.as_given(c), name, at)) else None
                for c in calls
            }
            value = given.pop() if len(given) == 1 else None
            scopes = [
                self._in_scope(c, on, setup, seen) if id(c) not in seen else on
                for c in (self.function(call) for call in calls)
            ]  # (the argument means the same where each call is)
            if value == name and all(
                t in scope for scope in scopes for t in on if name in _names_in(t)
            ):
                continue  # (handed on as it is: `train(model, args)`)
            differs.add(name)
            if value == "True":  # (a literal True holds wherever anything does)
                added.add(name)
            elif value is not None and all(_holds(value, scope) for scope in scopes):
                added |= {name} if _holds(value, on) else set()
                added |= {name + t[len(value) :] for t in on if t.startswith(value + ".")}
        return {t for t in on if not _names_in(t) & differs} | added

    def _called_elsewhere(self, name: str) -> bool:
        """Another file of the project on disk, not one of this file's link (rewritten with
        it, its calls checked there), uses this file's function ``name`` (or there are too
        many files to tell): once per name."""
        if self.path is None:
            return False
        if name not in self._elsewhere:
            linked = {*self.link.callers, self.link.callee} if self.link else set()
            users = users_on_disk(self.path, [name])
            self._elsewhere[name] = users is None or any(u not in linked for u, _, _ in users)
        return self._elsewhere[name]

    @functools.cached_property
    def _elsewhere(self) -> dict[str, bool]:
        return {}

    def _calls_of(self, function: cst.FunctionDef, method: bool) -> list[cst.Call] | None:
        """Every call of ``function`` in this file, by its name (a method: through the first
        parameter of a method of its class); None where a use is anything else, or a call
        stars its arguments, or a decorator's wrapper is what its callers call."""
        if wrapping_decorator(self.module, function) is not None:
            return None
        name = function.name.value
        calls = []
        if not method:
            for ref in self._references(name):
                made = self.calls_through(ref)
                if made is None:
                    return None
                calls += made
            if self._called_elsewhere(name):
                return None  # (called from other files too: W1's fine-tuning pass, `fp16=False`)
        else:
            owner = self.parent(self.parent(function))
            for node in self.nodes:
                if not (isinstance(node, cst.Attribute) and node.attr.value == name):
                    continue
                call, caller = self.parent(node), self.function(node)
                first = (
                    caller.params.params[0].name.value
                    if isinstance(caller, cst.FunctionDef) and caller.params.params
                    else None
                )
                if not (
                    isinstance(call, cst.Call)
                    and call.func is node
                    and isinstance(node.value, cst.Name)
                    and (
                        (node.value.value == first and self.parent(self.parent(caller)) is owner)
                        or self._instance_of(node.value, owner)
                    )
                ):
                    return None
                calls.append(call)
            if self.path and _called_elsewhere(self.path, {name}):
                return None  # (another module calls a method of that name: any level)
        return None if any(a.star for c in calls for a in c.args) else calls

    def _instance_of(self, name: cst.Name, owner: cst.CSTNode) -> bool:
        """``name`` holds an object the class ``owner`` makes: its one binding where it is read
        is ``name = Owner(...)`` (``t = Trainer(model, optimizer)``, then ``t.setup("O1")``)."""
        scope = self.scopes.get(name)
        bound = list(scope[name.value]) if scope is not None else []
        if not isinstance(owner, cst.ClassDef) or len(bound) != 1:
            return False
        target = getattr(bound[0], "node", None)
        statement = self.parent(self.parent(target)) if isinstance(target, cst.Name) else None
        return (
            isinstance(statement, cst.Assign)
            and len(statement.targets) == 1
            and statement.targets[0].target is target
            and isinstance(statement.value, cst.Call)
            and isinstance(statement.value.func, cst.Name)
            and statement.value.func.value == owner.name.value
        )

    def _calls_home(self, function: cst.FunctionDef, setup: _Setup) -> bool:
        """``function`` itself calls the function that initializes (by its name)."""
        home = setup.home
        return isinstance(home, cst.FunctionDef) and any(
            isinstance(n, cst.Call)
            and isinstance(n.func, cst.Name)
            and n.func.value == home.name.value
            and self.function(n) is function
            for n in self._subtree(function)
        )

    def _given(self, function: str, params: dict[str, int]) -> set[str]:
        """What every call of ``function`` in this file gives each of ``params`` (name: its
        position, -1 keyword-only) where all give the same, with its copies on an object
        made beside the call."""
        calls = []
        for ref in self._references(function):
            call = self.parent(ref)
            if not (isinstance(call, cst.Call) and call.func is ref) or any(
                a.star for a in call.args
            ):
                return set()
            calls.append(call)
        found = set()
        for term, at in params.items():
            given = set()
            for call in calls:
                keyword = [a.value for a in call.args if a.keyword and a.keyword.value == term]
                positional = [a.value for a in call.args if a.keyword is None]
                value = keyword or (positional[at : at + 1] if at >= 0 else [])
                given.add(_code(self.module, value[0]) if value else None)
            if len(given) != 1 or None in given:
                continue
            passed = given.pop()
            found.add(passed)
            root, dot, rest = passed.partition(".")
            for call in calls:  # `self.args = args` in the function that calls it
                caller = self.function(call)
                found |= {
                    f"{_code(self.module, t.target)}{dot}{rest}"
                    for n in self._subtree(caller)
                    if isinstance(n, cst.Assign) and isinstance(n.value, cst.Name)
                    and n.value.value == root and dot
                    for t in n.targets if isinstance(t.target, cst.Attribute)
                }  # fmt: skip
        return found

    def _backward_lines(self, function: cst.CSTNode) -> list[tuple[cst.CSTNode, list]]:
        """The simple statements of ``function`` that call ``x.backward()``, with those calls."""
        found = []
        for node in self.nodes:
            if not isinstance(node, cst.SimpleStatementLine) or self.function(node) is not function:
                continue
            if self.dead(node):
                continue  # (it ran where apex was not installed, and goes)
            calls = [
                s.value
                for s in node.body
                if isinstance(s, cst.Expr) and _is_call_of(s.value, "backward")
            ]
            if calls:
                found.append((node, calls))
        return found
