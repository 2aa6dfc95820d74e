"""What analysis produces: findings, optionally with a fix, and their serialisable form.

A fix is planned on ``ast`` positions as text edits (``Edit``) plus the imports it needs or makes
unused; the apex planner alone still plans on libcst nodes (``cst_target``/``cst_build``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ampmigrate.catalog import Safety

# the way out an apex refusal offers where its opt level alone blocks it and the setting would
# allow it; `check` and `fix` count the findings whose one blocker ends so (a summary hint)
DECLARE_LEVEL = (
    'declare that every run of the project uses O1 (or O0) with `apex-opt-level = "O1"` in '
    "[tool.ampmigrate], to allow the rewrite"
)


@dataclass(frozen=True)
class ImportEdit:
    """An import to drop once it is unused: ``import module as asname`` or
    ``from module import obj as asname``."""

    module: str
    obj: str | None = None
    asname: str | None = None


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` of the decoded source by ``text`` (character offsets, from
    ``Source.span``/``Source.offset``; never ast's UTF-8 byte columns)."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class Span:
    """A reported place that is not an ``ast`` node: 1-based lines, 1-based character columns,
    the end exclusive (as libcst's positions + 1)."""

    line: int
    col: int
    end_line: int
    end_col: int


@dataclass
class Fix:
    """What applying a finding's fix means.

    ``edits`` are non-overlapping text edits; fixes whose edits overlap another applied fix's
    wait for the next pass. ``add_imports`` are added ("module" or "module:name" for a
    from-import), ``remove_imports`` dropped if unused once the edits are made. Only the apex
    planner sets ``cst_target``/``cst_build``: replace that libcst node (of ``cst_module``, the
    tree the planner was given) by ``cst_build(updated_node)``.
    """

    safety: Safety
    edits: tuple[Edit, ...] = ()
    add_imports: frozenset[str] = frozenset()
    remove_imports: tuple[ImportEdit, ...] = ()
    min_torch: tuple[int, ...] = ()  # the oldest torch the rewritten code runs on
    cst_target: Any = None
    cst_build: Callable[[Any], Any] | None = None
    cst_module: Any = None


@dataclass
class Finding:
    code: str
    message: str
    node: ast.AST | Span  # where it is reported
    fix: Fix | None = None


@dataclass(frozen=True)
class Diagnostic:
    """A finding as reported: plain data, picklable across worker processes."""

    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    code: str
    message: str
    fix: Safety | None = None
    fixed: bool = field(default=False, compare=False)
    cell: int | None = None

    @property
    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.col, self.code)
