"""What analysis produces: findings, optionally with a fix, and their serialisable form."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ampmigrate.catalog import Safety

if TYPE_CHECKING:  # libcst is imported only once a file passes the prefilter
    import libcst as cst


@dataclass(frozen=True)
class ImportEdit:
    """An import to drop once it is unused: ``import module as asname`` or
    ``from module import obj as asname``."""

    module: str
    obj: str | None = None
    asname: str | None = None


@dataclass
class Fix:
    """Replace ``target`` (a node of the original tree) by ``build(updated_target)``.

    Building from the *updated* node lets nested fixes compose: an argument fixed on its own
    line survives the rewrite of the call around it.
    """

    safety: Safety
    target: cst.CSTNode
    build: Callable[[cst.CSTNode], cst.CSTNode]
    add_imports: frozenset[str] = frozenset()  # "module", or "module:name" for a from-import
    remove_imports: tuple[ImportEdit, ...] = ()
    min_torch: tuple[int, ...] = ()  # the oldest torch the rewritten code runs on


@dataclass
class Finding:
    code: str
    message: str
    node: cst.CSTNode
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
