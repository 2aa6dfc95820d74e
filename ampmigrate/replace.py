"""Replace nodes of a tree by functions of their updated selves.

How every fix is applied, and how the apex rewrite applies its plan: a replacement is keyed by a
node of the tree being visited and built from the node's updated form, so nested replacements
compose (an argument rewritten on its own survives the rewrite of the call around it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import libcst as cst

Build = Callable[[cst.CSTNode], cst.CSTNode | cst.FlattenSentinel | cst.RemovalSentinel]


def _detached(lines: tuple[cst.EmptyLine, ...] | list[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The leading lines of a statement up to its last blank line, when they hold a comment:
    commented-out code or a note about what came before, which a removal must not take along
    (the comment right above the statement, with no blank line between, goes with it)."""
    last = max((i for i, line in enumerate(lines) if line.comment is None), default=-1)
    kept = list(lines[: last + 1])
    return kept if any(line.comment is not None for line in kept) else []


class ReplaceNodes(cst.CSTTransformer):
    def __init__(self, builds: Mapping[cst.CSTNode, Build]) -> None:
        super().__init__()
        self._builds = builds
        self._orphans: dict[int, list[cst.EmptyLine]] = {}  # removed statement -> kept lines
        self._left: dict[int, object] = {}  # statement -> what replaced it

    def on_leave(self, original_node, updated_node):
        build = self._builds.get(original_node)
        result = build(updated_node) if build else updated_node
        if isinstance(original_node, cst.IndentedBlock | cst.Module) and self._orphans:
            result = self._adopt(original_node, result)
        if isinstance(original_node, cst.IndentedBlock):
            result = self._close_up(original_node, result)
        if isinstance(original_node, cst.BaseStatement):
            self._left[id(original_node)] = result
            if isinstance(result, cst.RemovalSentinel):
                kept = _detached(getattr(original_node, "leading_lines", ()))
                if kept:
                    self._orphans[id(original_node)] = kept
        return result

    def _close_up(self, original, updated):
        """A block whose first statement was removed starts at the next one, without the
        blank lines that separated the two (``def f():`` then a blank line is not code anyone
        writes); its comments stay."""
        body = getattr(updated, "body", None)
        if not (
            isinstance(updated, cst.IndentedBlock)
            and body
            and original.body
            and isinstance(self._left.get(id(original.body[0])), cst.RemovalSentinel)
        ):
            return updated
        first = body[0]
        lines = list(getattr(first, "leading_lines", ()))
        at = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
        if at == 0:
            return updated
        return updated.with_changes(body=[first.with_changes(leading_lines=lines[at:]), *body[1:]])

    def _adopt(self, original, updated):
        """Give the comments of removed statements of ``original``'s body to the statement
        that now follows them, or to the block's footer."""
        if not isinstance(updated, cst.IndentedBlock | cst.Module):
            return updated
        body = list(updated.body)
        pending: list[cst.EmptyLine] = []
        for statement in original.body:
            lines = self._orphans.pop(id(statement), None)
            if lines is not None:
                pending += lines
                continue
            if not pending:
                continue
            made = self._left.get(id(statement), statement)
            if isinstance(made, cst.FlattenSentinel):
                made = next(iter(made.nodes), None)
            at = next((i for i, s in enumerate(body) if s is made), None)
            if at is None:
                continue
            body[at] = made.with_changes(leading_lines=[*pending, *made.leading_lines])
            pending = []
        if pending:
            return updated.with_changes(body=body, footer=[*pending, *updated.footer])
        return updated.with_changes(body=body)
