"""Name resolution on libcst, for the one planner that still works on libcst (the apex rewrite,
:mod:`ampmigrate.apex`); everything else resolves names on ``ast`` (:mod:`ampmigrate.engine.names`).
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import Scope


def qualified_names(scope: Scope | None, node: cst.CSTNode) -> set[str]:
    """The dotted names ``node`` may refer to through the file's imports."""
    return {q.name for q in scope.get_qualified_names_for(node)} if scope is not None else set()
