"""Tree helpers of the apex O1 planner, and the data-flow facts of a statement (names it binds and
reads, calls it makes).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ampmigrate.apex.common import _code, _is_call_of, _statements, _targets
from ampmigrate.cstnames import qualified_names


class _Facts(cst.CSTVisitor):
    """Names a statement binds and reads, and the calls it makes (data flow of the loss)."""

    def __init__(self, module: cst.Module, models: set[str]) -> None:
        super().__init__()
        self.module, self.models = module, models
        self.assigned: set[str] = set()
        self.used: set[str] = set()
        self.calls = False
        self.model_calls: list[cst.Call] = []
        self.backward = False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.assigned |= _targets(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.assigned |= _targets(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.assigned |= _targets(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self.assigned |= _targets(node.name)

    def visit_Name(self, node: cst.Name) -> None:
        self.used.add(node.value)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        self.calls |= isinstance(node.operator, cst.MatrixMultiply)  # autocast casts `@`

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.assigned |= _targets(node.target)
        self.calls |= isinstance(node.operator, cst.MatrixMultiplyAssign)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls = True
        func = _code(self.module, node.func)
        base, _, attr = func.rpartition(".")
        if func in self.models or (base in self.models and attr in ("forward", "module")):
            self.model_calls.append(node)
        if _is_call_of(node, "backward"):
            self.backward = True


class Facts:
    """The facts stage of ``_Planner`` (mixed into it)."""

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def function(self, node: cst.CSTNode) -> cst.CSTNode:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef | cst.Module):
                return ancestor
        return self.module

    def within(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        return node is outer or any(a is outer for a in self.ancestors(node))

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement:
        """The statement (simple line or compound) that contains ``node``."""
        current = node
        while not isinstance(current, cst.BaseStatement):
            current = self.parent(current)
        return current

    def block_of(self, statement: cst.CSTNode) -> tuple[cst.CSTNode, int] | None:
        """The block holding ``statement`` and its index there (an ``elif`` climbs to its
        ``if``)."""
        while statement is not None:
            block = self.parent(statement)
            body = _statements(block) if block is not None else None
            if body is not None:
                return block, next(i for i, s in enumerate(body) if s is statement)
            if not isinstance(block, cst.If):
                return None
            statement = block
        return None

    def owner(self, block: cst.CSTNode) -> cst.CSTNode | None:
        """The statement whose body ``block`` is (None for the module)."""
        for ancestor in self.ancestors(block):
            if isinstance(ancestor, cst.BaseStatement):
                return ancestor
        return None

    def qualified(self, node: cst.CSTNode) -> set[str]:
        return qualified_names(self.scopes.get(node), node)

    def line(self, node: cst.CSTNode) -> int:
        if self._positions is None:  # resolved only when a message needs a line
            wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
            self._positions = wrapper.resolve(PositionProvider)
        return self._positions[node].start.line

    def problem(self, node: cst.CSTNode, text: str) -> None:
        self.plan.problems.append(f"line {self.line(node)}: {text}")

    def free_name(self, preferred: str) -> str | None:
        """A name the file does not use anywhere, so the new binding shadows nothing."""
        taken = {n.value for n in self.nodes if isinstance(n, cst.Name)}
        for name in (preferred, f"grad_{preferred}", f"amp_{preferred}"):
            if name not in taken and not re.search(rf"[\"']{name}[\"']", self.module.code):
                return name
        return None

    def facts(self, statement: cst.CSTNode, models: set[str] = frozenset()) -> _Facts:
        found = _Facts(self.module, models)
        statement.visit(found)
        return found

    def top_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The module-level function around ``node`` (None in a class or at module level)."""
        outer = None
        for ancestor in [node, *self.ancestors(node)]:
            if isinstance(ancestor, cst.FunctionDef):
                outer = ancestor
            elif isinstance(ancestor, cst.ClassDef):
                return None
        return outer

    def method_of(self, node: cst.CSTNode, cls: cst.ClassDef) -> cst.FunctionDef | None:
        """The method of ``cls`` around ``node``."""
        nodes = [node, *self.ancestors(node)]
        for inner, outer in itertools.pairwise(nodes):
            if outer is cls.body and isinstance(inner, cst.FunctionDef):
                return inner
        return None

    def access(self, where: cst.CSTNode) -> str | None:
        """How code in ``where`` reaches the scaler (None: it cannot)."""
        if self.mode == "module":
            return self.name
        if self.mode == "class":
            method = self.method_of(where, self.cls)
            params = method.params.params if method is not None else ()
            return f"{params[0].name.value}.{self.name}" if params else None
        if self.within(where, self.home) or any(self.within(where, f) for f in self.threaded):
            return self.name
        return None

    def _subtree(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        nodes: list[cst.CSTNode] = []

        class Collect(cst.CSTVisitor):
            def on_visit(self, n: cst.CSTNode) -> bool:
                nodes.append(n)
                return True

        node.visit(Collect())
        return iter(nodes)
