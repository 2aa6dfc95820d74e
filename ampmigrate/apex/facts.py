"""Tree helpers of the apex O1 planner, and the data-flow facts of a statement (names it binds and
reads, calls it makes).
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from collections.abc import Iterable, Iterator

import libcst as cst
from libcst._nodes.internal import CodegenState

from ampmigrate.apex.common import _code, _is_call_of, _statements, _targets
from ampmigrate.cstnames import qualified_names

_NEWLINE = re.compile(r"\r\n?|\n")  # what libcst's PositionProvider counts as a line break


class Walk(dict):
    """Each node's parent, the map ``ParentNodeProvider`` builds from ``children``, filled by
    one visit that also keeps every node in source order (``nodes``, the module first) and
    where each one's subtree ends there (``ends``, by ``id``): the planner's walks become
    slices instead of a libcst visit each."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__()
        self.nodes: list[cst.CSTNode] = []
        self.ends: dict[int, int] = {}
        module.visit(_Walker(self))


class _Walker(cst.CSTVisitor):
    def __init__(self, walk: Walk) -> None:
        super().__init__()
        self.walk, self.stack = walk, []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.walk[node] = self.stack[-1]
        self.walk.nodes.append(node)
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()
        self.walk.ends[id(original_node)] = len(self.walk.nodes)

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        pass

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        pass


class SpelledIndent(cst.CSTTransformer):
    """Every block that takes the module's default indent gets it written out."""

    def __init__(self, indent: str) -> None:
        super().__init__()
        self.indent = indent

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        if updated_node.indent is None:
            return updated_node.with_changes(indent=self.indent)
        return updated_node


class _Positions(CodegenState):
    """A code generation pass that records where each node is, as ``PositionProvider`` does
    (a statement's own start, not its leading lines; a suite from its first statement), in
    plain tuples: that provider's ``CodePosition`` objects, regex split of every token and
    generator-based context managers make it cost six plain code generations, this pass one
    and a half (0.20 s -> 0.05 s on a 63 KB file)."""

    def __init__(self, module: cst.Module) -> None:
        super().__init__(
            default_indent=module.default_indent, default_newline=module.default_newline
        )
        self.line, self.column = 1, 0
        self.ranges: dict[cst.CSTNode, tuple[int, int, int, int]] = {}
        self.open: list[tuple[int, int]] = []

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        if "\n" in value or "\r" in value:
            segments = _NEWLINE.split(value)
            self.line += len(segments) - 1
            self.column = len(segments[-1])
        else:
            self.column += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.open.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.open.pop()
        if node not in self.ranges:  # a syntactic range recorded inside stays
            self.ranges[node] = (*start, self.line, self.column)

    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> _Syntactic:
        return _Syntactic(self, node, start_node, end_node)


class _Syntactic:
    """``record_syntactic_position`` of ``_Positions``: ``node`` spans the code generated
    inside, or starts where ``start`` starts and ends where ``end`` ends."""

    __slots__ = ("begun", "end", "node", "positions", "start")

    def __init__(
        self,
        positions: _Positions,
        node: cst.CSTNode,
        start: cst.CSTNode | None,
        end: cst.CSTNode | None,
    ) -> None:
        self.positions, self.node, self.start, self.end = positions, node, start, end

    def __enter__(self) -> None:
        self.begun = (self.positions.line, self.positions.column)

    def __exit__(self, *exc: object) -> None:
        state, ranges = self.positions, self.positions.ranges
        start = ranges[self.start][:2] if self.start is not None else self.begun
        end = ranges[self.end][2:] if self.end is not None else (state.line, state.column)
        ranges[self.node] = (*start, *end)


@functools.lru_cache(maxsize=1)
def positions(module: cst.Module) -> dict[cst.CSTNode, tuple[int, int, int, int]]:
    """Where each node of ``module`` is, as ``PositionProvider`` gives it: start line, start
    column, end line, end column (lines from 1, columns from 0). Kept for the last module:
    the planner's messages and the finding's place both read it."""
    state = _Positions(module)
    module._codegen(state)
    return state.ranges


class _Facts:
    """Names a statement binds and reads, and the calls it makes (data flow of the loss)."""

    def __init__(self, module: cst.Module, models: set[str], node: cst.CSTNode) -> None:
        self.module, self.models, self.node = module, models, node
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


_FACT_VISITS = {
    getattr(cst, name.removeprefix("visit_")): method
    for name, method in vars(_Facts).items()
    if name.startswith("visit_")
}


_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)


class Facts:
    """The facts stage of ``_Planner`` (mixed into it)."""

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def variable(self, node: cst.CSTNode) -> bool:
        """``node`` is a Name that refers to a variable: not the member of an attribute
        (``amp.scale_loss``), a keyword of a call or a parameter's name."""
        parent = self.parent(node)
        return isinstance(node, cst.Name) and not (
            (isinstance(parent, cst.Attribute) and parent.attr is node)
            or (isinstance(parent, cst.Arg) and parent.keyword is node)
            or isinstance(parent, cst.Param | cst.FunctionDef | cst.ClassDef | cst.ImportAlias)
        )

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
        """The dotted names ``node`` may refer to (asked up to three times a name: kept)."""
        found = self._qualified.get(node)
        if found is None:
            found = self._qualified[node] = qualified_names(self.scopes.get(node), node)
        return found

    @functools.cached_property
    def spelled(self) -> tuple[dict[str, list[cst.Name]], dict[str, list[cst.Attribute]]]:
        """The module's ``Name`` nodes by their value and its ``Attribute`` nodes by their
        attribute's, in source order: the stages ask for a name's uses again and again."""
        names: dict[str, list[cst.Name]] = {}
        attributes: dict[str, list[cst.Attribute]] = {}
        for node in self.nodes:
            if isinstance(node, cst.Name):
                names.setdefault(node.value, []).append(node)
            elif isinstance(node, cst.Attribute):
                attributes.setdefault(node.attr.value, []).append(node)
        return names, attributes

    @functools.cached_property
    def text(self) -> str:
        """The module's code: one code generation pass (the module is fixed while planned)."""
        return self.module.code

    @functools.cached_property
    def syntax(self) -> ast.Module:
        """The module's ``ast``, parsed once for the stages that read it (none changes it)."""
        return ast.parse(self.text)

    def line(self, node: cst.CSTNode) -> int:
        found = positions(self.module)  # computed only when a message needs a line
        if node not in found:  # (a body on its `if`'s line has none of its own: its first
            node = next((n for n in self._subtree(node) if n in found), node)  # statement's)
        return found[node][0]

    def lines(self, nodes: Iterable[cst.CSTNode]) -> str:
        """``line 5`` or ``lines 5, 9``, in source order (whatever order ``nodes`` come in)."""
        found = sorted(self.line(n) for n in nodes)
        return f"line{'s' * (len(found) > 1)} {', '.join(map(str, found))}"

    def problem(self, node: cst.CSTNode, text: str) -> None:
        self.plan.problems.append(f"line {self.line(node)}: {text}")

    def note_once(self, text: str) -> None:
        """A note that several places may state (the same shape met twice) is said once."""
        if text not in self.plan.notes:
            self.plan.notes.append(text)

    def free_name(self, preferred: str) -> str | None:
        """A name the file does not use anywhere, so the new binding shadows nothing."""
        taken = {n.value for n in self.nodes if isinstance(n, cst.Name)}
        for name in (preferred, f"grad_{preferred}", f"amp_{preferred}"):
            if name not in taken and not re.search(rf"[\"']{name}[\"']", self.text):
                return name
        return None

    def facts(self, statement: cst.CSTNode, models: set[str] = frozenset()) -> _Facts:
        """Read from the node list, not a libcst visit (which rebuilds every node it passes),
        and kept for nodes of the module: the planner asks again for the same blocks."""
        key = (id(statement), frozenset(models))
        found = self._facts.get(key)
        if found is not None and found.node is statement:
            return found
        found = _Facts(self.module, models, statement)
        nodes = list(self._subtree(statement))
        local = self._comprehension_locals(nodes)
        for node in nodes:
            visit = _FACT_VISITS.get(type(node))
            if visit is not None and id(node) not in local:
                visit(found, node)
        if self.order.get(id(statement)) is not None:
            self._facts[key] = found
        return found

    def _comprehension_locals(self, nodes: list[cst.CSTNode]) -> set[int]:
        """The reads of a comprehension's own loop variables (``[x * 2 for x in xs]``: its
        ``x``), which no statement around it binds or reads: a loop variable of the same
        name elsewhere does not flow into them. The outermost iterable runs outside."""
        local: set[int] = set()
        for node in nodes:
            if not isinstance(node, _COMPREHENSIONS):
                continue
            loops, loop = [], node.for_in
            while loop is not None:
                loops.append(loop)
                loop = loop.inner_for_in
            bound = {
                n.value for lp in loops for n in self._subtree(lp.target) if isinstance(n, cst.Name)
            }
            outer = {id(n) for n in self._subtree(node.for_in.iter)}
            local |= {
                id(n)
                for n in self._subtree(node)
                if isinstance(n, cst.Name) and n.value in bound and id(n) not in outer
            }
        return local

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

    def _move_footers(self) -> None:
        """Comments that follow a compound statement the plan removes or replaces (libcst keeps
        commented-out lines before the next statement in the footer of the last block) belong to
        what follows: they become the next statement's leading lines."""
        for statement in self.footers:
            last = statement
            while isinstance(last, cst.If) and isinstance(last.orelse, cst.If):
                last = last.orelse
            block = last.orelse.body if isinstance(getattr(last, "orelse", None), cst.Else) else (
                getattr(last, "body", None)
            )  # fmt: skip
            footer = list(block.footer) if isinstance(block, cst.IndentedBlock) else []
            located = self.block_of(statement)
            if not any(line.comment for line in footer) or located is None:
                continue
            body = _statements(located[0]) or []
            if located[1] + 1 >= len(body):
                continue
            following = body[located[1] + 1]
            previous = self.plan.edits.get(following)

            def attach(u, lines=footer, p=previous):
                u = u.with_changes(leading_lines=[*lines, *u.leading_lines])
                return p(u) if p is not None else u

            self.plan.edits[following] = attach

    def hooked(self, role: str) -> bool:
        """This file is the ``role`` side of a runner-hook link (:mod:`ampmigrate.apex.hooks`)."""
        return self._linked_as(role) and self.link.hook is not None

    def linked_caller(self) -> bool:
        """This file initializes for training functions of another file that take the
        GradScaler (a plain link: not a hook, a kept handle or a class family)."""
        link = self.link
        return (
            self._linked_as("caller")
            and link.hook is None
            and link.kept is None
            and link.family is None
            and bool(link.spellings)
            and bool(link.trains)
        )

    def delegating(self, role: str) -> bool:
        """This file is the ``role`` side of a helper that scales and leaves the step to its
        callers in other files (``Link.delegated``)."""
        return self._linked_as(role) and self.link.delegated is not None

    def family_linked(self, role: str) -> bool:
        """This file is the ``role`` side of a class family's link (``Link.family``)."""
        return self._linked_as(role) and self.link.family is not None

    def _linked_as(self, role: str) -> bool:
        """This file is the ``role`` side of a link it plans with (not broken, or broken by
        this file, which then plans as it did)."""
        link = self.link
        return link is not None and (not link.broken or self.refused_here) and self.role == role

    def derived(self, names: set[str]) -> list[cst.ClassDef]:
        """The module-level classes of this file derived from a class named in ``names``,
        directly or through each other (by the last name of each base)."""
        found: list[cst.ClassDef] = []
        names = set(names)
        grown = True
        while grown:
            grown = False
            for node in self.module.body:
                if not isinstance(node, cst.ClassDef) or node in found:
                    continue
                bases = {
                    b.value.value if isinstance(b.value, cst.Name) else b.value.attr.value
                    for b in node.bases
                    if isinstance(b.value, cst.Name | cst.Attribute) and not b.keyword
                }
                if bases & names:
                    found.append(node)
                    names.add(node.name.value)
                    grown = True
        return found

    def access(self, where: cst.CSTNode) -> str | None:
        """How code in ``where`` reaches the scaler (None: it cannot)."""
        function = where if isinstance(where, cst.FunctionDef) else self.function(where)
        for outer in (
            function,
            *(a for a in self.ancestors(function) if isinstance(a, cst.FunctionDef)),
        ):
            if id(outer) in self.stored_access:  # (a closure reads its function's parameter:
                return self.stored_access[id(outer)]  # the 68th review's p6)
        if self.mode == "module":
            return self.name
        if self.mode == "class":
            method = next(
                (m for c in (self.cls, *self.family) if c and (m := self.method_of(where, c))), None
            )
            params = method.params.params if method is not None else ()
            return f"{params[0].name.value}.{self.name}" if params else None
        if self.within(where, self.home) or any(self.within(where, f) for f in self.threaded):
            return self.name
        return None

    def _subtree(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """``node`` and every node below it, in source order: a slice of ``nodes`` for a node
        of the module, a visit for one the plan built."""
        if node is self.module:
            return iter([node, *self.nodes])
        at = self.order.get(id(node))
        if at is not None and self.nodes[at] is node:
            return iter(self.nodes[at : self.ends[id(node)] - 1])
        nodes: list[cst.CSTNode] = []

        class Collect(cst.CSTVisitor):
            def on_visit(self, n: cst.CSTNode) -> bool:
                nodes.append(n)
                return True

        node.visit(Collect())
        return iter(nodes)
