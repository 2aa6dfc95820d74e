"""apex behind a torch-version gate: the path that runs only on a torch too old for torch.amp.

Code written for torch 1.5 and 1.6 alike (the transformers 3.x Trainer and its many copies)
chooses once, at import: ``if version.parse(torch.__version__) < version.parse("1.6"): from
apex import amp; _use_apex = True else: _use_native_amp = True``, and every later branch asks
the flag. On any torch that has ``torch.amp`` the test is false, the flags are constants, and
every apex call sits in a branch that never runs: the migration is to delete that path, not to
translate it. This mode folds the gate and the flags (exactly: a test of a name whose value
never changes after import), drops an ``elif`` that repeats an earlier test of its chain, and
is taken only when no apex call is left afterwards; otherwise the O1 planner runs as usual.
"""

from __future__ import annotations

import ast
import re

import libcst as cst

from ampmigrate.apex.common import flag_assignment
from ampmigrate.replace import ReplaceNodes

# every torch that has native AMP's device-generic API is at least this
_NATIVE = (1, 10)
_PARSERS = {"parse", "Version", "LooseVersion", "StrictVersion", "parse_version"}
_TEXT_ORDER = {
    cst.LessThan: lambda version, bound: version < bound,
    cst.LessThanEqual: lambda version, bound: version <= bound,
    cst.GreaterThan: lambda version, bound: version > bound,
    cst.GreaterThanEqual: lambda version, bound: version >= bound,
}
_WHICH = {
    cst.LessThan: lambda native, bound: native < bound,
    cst.LessThanEqual: lambda native, bound: native <= bound,
    cst.GreaterThan: lambda native, bound: native > bound,
    cst.GreaterThanEqual: lambda native, bound: native >= bound,
}


def _version(text: str) -> tuple[int, ...] | None:
    match = re.fullmatch(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in match.groups() if g is not None) if match else None


def _branch(branch: cst.CSTNode | None) -> list[cst.BaseStatement]:
    """The statements of an ``if``'s body or ``else`` (none for an ``elif`` or no branch)."""
    if isinstance(branch, cst.Else):
        branch = branch.body
    return list(branch.body) if isinstance(branch, cst.IndentedBlock) else []


def _inner_statements(node: cst.CSTNode) -> list[cst.BaseStatement]:
    """The statements directly in a compound statement's blocks (its body, ``else``,
    handlers, ``finally``)."""
    found = []
    for child in node.children:
        if isinstance(child, cst.BaseStatement):
            found.append(child)
        else:
            found += _inner_statements(child)
    return found


class VersionGates:
    """The planner's mode for apex that only runs on torch older than native AMP."""

    def _parsed(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """``version.parse(x)`` / ``LooseVersion(x)`` -> ``x``."""
        if not isinstance(node, cst.Call) or len(node.args) != 1 or node.args[0].keyword:
            return None
        name = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        name = node.func.value if isinstance(node.func, cst.Name) else name
        return node.args[0].value if name in _PARSERS else None

    def _bound(self, test: cst.Comparison) -> str:
        """The version a gate compares with, as written (``1.6``)."""
        text = self._string_gate(test)
        if text is not None:
            return text
        return str(self._parsed(test.comparisons[0].comparator).evaluated_value)

    def _gate_value(self, test: cst.BaseExpression) -> bool | None:
        """The value of ``test`` on every torch that has native AMP, when it compares the
        parsed torch version with a literal (a plain string comparison is not a version test:
        ``"1.10" < "1.6"``)."""
        if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
            return None
        target = test.comparisons[0]
        text = self._string_gate(test)
        if text is not None:  # `torch.__version__ >= "1.6"`: text order, on torch >= 2.0
            which = _TEXT_ORDER.get(type(target.operator))
            answers = {which(f"2.{minor}.0", text) for minor in range(0, 100)} if which else ()
            return next(iter(answers)) if len(answers) == 1 else None
        left, right = self._parsed(test.left), self._parsed(target.comparator)
        if left is None or right is None or not isinstance(right, cst.SimpleString):
            return None
        if self.module.code_for_node(left).replace(" ", "") != "torch.__version__":
            return None
        bound = _version(str(right.evaluated_value))
        which = _WHICH.get(type(target.operator))
        if bound is None or which is None:
            return None
        # the same answer for the oldest native-AMP torch and for any later one
        now, later = which(_NATIVE, bound), which((99, 0), bound)
        return now if now == later else None

    def _string_gate(self, test: cst.Comparison) -> str | None:
        """The version ``torch.__version__`` is compared with as text (``>= "1.6"``), else
        None (the siim2021 detector, the 80th review)."""
        right = test.comparisons[0].comparator
        if not isinstance(right, cst.SimpleString) or _version(str(right.evaluated_value)) is None:
            return None
        if self.module.code_for_node(test.left).replace(" ", "") != "torch.__version__":
            return None
        return str(right.evaluated_value)

    def _version_gated(self) -> str | None:
        """Fold the gates and flags; keep the result only when no apex call survives it. The
        folded module's code, or None (not this mode: nothing planned)."""
        gates = [
            (n, v)
            for n in self.nodes
            if isinstance(n, cst.If)
            and isinstance(self.parent(n), cst.Module | cst.IndentedBlock)
            and (v := self._gate_value(n.test)) is not None
            and self._holds_apex(n)
        ]  # other version gates are not this migration's business
        if not gates:
            return None
        saved = (dict(self.plan.edits), set(self.removed), list(self.plan.notes))
        problems = list(self.plan.problems)
        old = "on a torch older than the version test names, with apex installed or not"
        for gate, value in gates:
            self._fold(gate.test, value, old)
        constants = self._constants([(g, v) for g, v in gates if self.parent(g) is self.module])
        folded = 0
        for node in self.nodes:
            if (
                isinstance(node, cst.Name)
                and node.value in constants
                and self._reads_global(node)
                and self._pure_test(node)
            ):
                self._fold(node, constants[node.value], old)
                folded += 1
        repeated = self._repeated_branches(constants)
        code = self.module.visit(ReplaceNodes(self.plan.edits)).code
        if self._apex_left(code):
            self.plan.edits, self.removed, self.plan.notes = saved
            self.plan.problems = problems
            return None
        # what was reported so far (apex imports and members) is all in the path that goes
        self.plan.problems = []
        lines = ", ".join(str(self.line(g)) for g, _ in gates)
        self.plan.min_torch = None  # nothing new is written: the native path stays
        bounds = sorted({self._bound(g.test) for g, _ in gates})
        # (a test of the version as text, `torch.__version__ >= "1.6"`, is constant from
        # torch 2.0 on; on 1.10 to 1.13 "1.10" sorts before "1.6" and it took the apex path)
        texts = sorted(  # the torch 1.x releases with torch.amp whose text order differs
            {
                f"1.{minor}"
                for g, value in gates
                if self._string_gate(g.test) is not None
                for minor in range(10, 14)
                if _TEXT_ORDER[type(g.test.comparisons[0].operator)](
                    f"1.{minor}.0", self._string_gate(g.test)
                )
                != value
            },
            key=lambda v: int(v.partition(".")[2]),
        )
        text_gate = any(self._string_gate(g.test) is not None for g, _ in gates)
        self.plan.summary = (
            "apex.amp runs here only on a torch older than native AMP: the version test "
            f"(line {lines}) is constant on every torch with torch.amp"
            + (" from 2.0 on (it compares the version as text)" if text_gate else "")
            + ", so the apex path goes and the native one stays"
        )
        self.plan.notes.append(
            f"behaviour change: the path for torch older than {' / '.join(bounds)} (apex) is "
            "gone"
            + (
                f", and for torch {' / '.join(texts)}, where the text comparison took it too "
                "(as text, a two-digit minor sorts before a one-digit one): the native one "
                "runs there now; from torch 2.0 on"
                if texts
                else "; on any later torch"
            )
            + " the program runs exactly as before"
            + (f"; {folded} test(s) of the flags it set were folded" if folded else "")
            + (f"; {repeated} `elif` that repeated an earlier test went" if repeated else "")
        )
        if self.unbound_flags:
            listed = ", ".join(f"`{f}`" for f in self.unbound_flags)
            self.plan.notes.append(
                f"{listed}, set only on the old torch, was unbound on a later one: a test that "
                "reached it raised NameError there; folded to False, it now takes the native "
                "path"
            )
        return code

    def _holds_apex(self, gate: cst.If) -> bool:
        """The gate imports apex or calls it."""
        for node in self._subtree(gate):
            if isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative:
                if self.module.code_for_node(node.module).partition(".")[0] == "apex":
                    return True
            elif isinstance(node, cst.Import):
                if any(self.module.code_for_node(a.name).partition(".")[0] == "apex"
                       for a in node.names):  # fmt: skip
                    return True
            elif isinstance(node, cst.Call) and any(
                q.startswith("apex.") for q in self.qualified(node.func)
            ):
                return True
        return False

    def _constants(self, gates: list[tuple[cst.If, bool]]) -> dict[str, bool]:
        """Module flags whose value after import is fixed once the gates are folded: bound
        only by ``name = True``/``False`` at the top of the module or of a gate's branch,
        and never declared ``global`` in a function."""
        if re.search(r"setattr\(\s*sys\.modules|globals\(\)\s*(\[|\.update)|__dict__\s*\[",
                     self.text):  # fmt: skip
            return {}  # a module attribute set by name (49a): no flag is sure to stay
        kept: dict[int, list[cst.BaseStatement]] = {}
        for gate, value in gates:
            branch = gate.body if value else gate.orelse
            if isinstance(branch, cst.If):  # an elif chain: not taken apart here
                return {}
            kept[id(gate)] = _branch(branch)
        flat: list[cst.BaseStatement] = []
        for statement in self.module.body:
            flat += kept.get(id(statement), [statement])
        values: dict[str, bool] = {}
        simple: set[int] = set()
        for statement in flat:
            flag = self._flag(statement)
            if flag is not None:
                values[flag[0]] = flag[1]
                simple.add(id(statement))
        dropped: set[str] = set()  # flags only the path for the old torch sets
        for gate, value in gates:
            for branch in (gate.body, gate.orelse):
                for statement in _branch(branch):
                    if (flag := self._flag(statement)) is not None:
                        simple.add(id(statement))
                        if branch is not (gate.body if value else gate.orelse):
                            dropped.add(flag[0])
        # (hyperformer, the 47th review: `_use_apex = True` in the old torch's arm and no
        # `_use_apex = False` before it: on a newer torch the name is unbound, and a test that
        # reached it raised NameError; False is what every run that got past it saw)
        self.unbound_flags = sorted(dropped - set(values))
        values.update(dict.fromkeys(self.unbound_flags, False))
        for node in self.nodes:
            if isinstance(node, cst.Global):
                for name in node.names:
                    values.pop(name.name.value, None)
        for statement in self._module_statements():
            if id(statement) in simple:
                continue
            for name in self.facts(statement).assigned & set(values):
                values.pop(name, None)
        self.unbound_flags = [f for f in self.unbound_flags if f in values]
        return values

    def _flag(self, statement: cst.CSTNode) -> tuple[str, bool] | None:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        return flag_assignment(statement.body[0])

    def _module_statements(self):
        """Every simple statement that runs at module level (not inside a def or a class)."""
        pending = list(self.module.body)
        while pending:
            statement = pending.pop()
            if isinstance(statement, cst.SimpleStatementLine):
                yield statement
            elif not isinstance(statement, cst.FunctionDef | cst.ClassDef):
                pending += _inner_statements(statement)

    def _reads_global(self, name: cst.Name) -> bool:
        """A read of the module's flag in a function (run after import), not a local."""
        functions = [a for a in self.ancestors(name) if isinstance(a, cst.FunctionDef)]
        return bool(functions) and not any(
            name.value in self.facts(f.body).assigned for f in functions
        )

    def _pure_test(self, name: cst.Name) -> bool:
        """``name`` is (part of) an ``if`` test without calls: folding it drops no effect."""
        test = self._test_holding(name)
        return (
            test is not None
            and isinstance(self.parent(test), cst.If)
            and not self.facts(test).calls
        )

    def _test_holding(self, node: cst.CSTNode) -> cst.BaseExpression | None:
        """The whole test of the ``if``, ``elif`` or conditional expression that ``node`` is
        (part of, through ``and``/``or``/``not``); None where it is read otherwise."""
        expr: cst.CSTNode = node
        while isinstance(self.parent(expr), cst.BooleanOperation) or (
            isinstance(self.parent(expr), cst.UnaryOperation)
            and isinstance(self.parent(expr).operator, cst.Not)
        ):
            expr = self.parent(expr)
        parent = self.parent(expr)
        if isinstance(parent, cst.If | cst.IfExp) and parent.test is expr:
            return expr
        return None

    def _folded(self, expr: cst.BaseExpression, constants: dict[str, bool]) -> str | bool:
        """``expr`` with the constant flags folded: True, False or the code that is left."""
        if isinstance(expr, cst.Name) and expr.value in constants:
            return constants[expr.value]
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            inner = self._folded(expr.expression, constants)
            return (not inner) if isinstance(inner, bool) else f"not ({inner})"
        if isinstance(expr, cst.BooleanOperation):
            left = self._folded(expr.left, constants)
            right = self._folded(expr.right, constants)
            conjunction = isinstance(expr.operator, cst.And)
            for a, b in ((left, right), (right, left)):
                if isinstance(a, bool):
                    return b if a == conjunction else a
            return f"({left}) {'and' if conjunction else 'or'} ({right})"
        return self.module.code_for_node(expr).strip()

    def _repeated_branches(self, constants: dict[str, bool]) -> int:
        """``if c: ... elif c: ...``: the second branch never runs; it goes."""
        count = 0
        for node in self.nodes:
            if not isinstance(node, cst.If) or isinstance(self.parent(node), cst.If):
                continue
            seen: set[str] = set()
            previous, branch = None, node
            while isinstance(branch, cst.If):
                text = self._folded(branch.test, constants)
                if isinstance(text, str) and text in seen and not self.facts(branch.test).calls:
                    self._drop_branch(previous, branch)
                    count += 1
                elif isinstance(text, str):
                    seen.add(text)
                previous, branch = branch, branch.orelse
        return count

    def _drop_branch(self, previous: cst.If, branch: cst.If) -> None:
        if branch.orelse is not None:
            own = self.plan.edits.get(branch)
            self.plan.edits[branch] = lambda u: (own(u) if own is not None else u).orelse
            return
        before = self.plan.edits.get(previous)

        def cut(u: cst.If) -> cst.If:
            u = before(u) if before is not None else u
            return u.with_changes(orelse=None)

        self.plan.edits[previous] = cut

    def _apex_left(self, code: str) -> bool:
        """The folded module still reads a name only apex bound, or imports apex."""
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return True
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in self.bound:
                return True
            if (
                isinstance(node, ast.ImportFrom)
                and not node.level
                and (node.module or "").partition(".")[0] == "apex"
            ):
                return True
            if isinstance(node, ast.Import) and any(
                a.name.partition(".")[0] == "apex" for a in node.names
            ):
                return True
        return False
