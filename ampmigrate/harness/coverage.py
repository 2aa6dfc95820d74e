"""Which rewritten sites a run executed: a MATCH says nothing about code that never ran.

A site is the node a fix rewrote, in the migrated tree: the innermost expression (or statement)
that holds the fixed finding's replacement, as a source span (line, column, end line, end
column). The bootstrap reports the spans in which some bytecode instruction ran (instruction
positions, PEP 657), so an untaken arm of a conditional expression, or a call after a ``return``
on the same line, is "not run". Where a fix cannot be followed to one node, and for
``--against`` / ``--migrated`` (changed lines, not fixes), a site is the changed statement(s),
as spans of whole lines.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from ampmigrate.findings import Diagnostic

# What makes a changed line an AMP line for --against (besides a finding on it).
AMP_WORDS = re.compile(
    r"autocast|GradScaler|\bamp\b|scaler|mixed_precision|float16|bfloat16|\.half\(|fp16|bf16"
    r"|loss_scale",
    re.IGNORECASE,
)


WHOLE_LINE = 1 << 30  # an end column past any line's end


class Span(NamedTuple):
    """A source range, lines 1-based, columns 0-based UTF-8 offsets (as ``ast`` and
    ``code.co_positions()`` give them), the end exclusive."""

    line: int
    col: int
    end_line: int
    end_col: int

    def holds(self, position: tuple) -> bool:
        """Whether an instruction's position (line, end line, col, end col) lies inside."""
        line, end_line, col, end_col = position
        if None in position:
            return False
        return (self.line, self.col) <= (line, col) and (end_line, end_col) <= (
            self.end_line,
            self.end_col,
        )


@dataclass(frozen=True)
class Site:
    path: str  # the file as the run sees it (real path)
    spans: tuple[Span, ...]  # an instruction running inside any of these means the site ran
    label: str  # how the user finds it: "AMP101 pkg/trainer.py:12"
    relative: str  # the file relative to the project root

    @property
    def lines(self) -> tuple[int, ...]:
        return tuple(sorted({n for s in self.spans for n in range(s.line, s.end_line + 1)}))


@dataclass
class Coverage:
    kind: str  # "rewritten sites" / "changed AMP lines"
    sites: list[Site]
    ran: list[Site]

    @property
    def missed(self) -> list[Site]:
        return [s for s in self.sites if s not in self.ran]

    def describe(self) -> str:
        return f"{len(self.ran)} of {len(self.sites)} {self.kind} ran"

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "total": len(self.sites),
            "ran": len(self.ran),
            "ran_sites": [s.label for s in self.ran],
            "not_run": [s.label for s in self.missed],
        }


def measure(kind: str, sites: Iterable[Site], hits: dict[str, list]) -> Coverage:
    """``hits``: per file, the spans some instruction ran in (as the bootstrap reports them)."""
    sites = list(dict.fromkeys(sites))
    ran = [s for s in sites if set(s.spans) & {Span(*h) for h in hits.get(s.path, ())}]
    return Coverage(kind, sites, ran)


def line_spans(lines: Iterable[int]) -> tuple[Span, ...]:
    """Whole lines as spans: a site that any instruction on these lines runs."""
    return tuple(Span(n, 0, n, WHOLE_LINE) for n in sorted(set(lines)))


def _statements(source: bytes) -> list[tuple[int, int]]:
    """(first, last) line of every simple statement and of every compound statement's header
    (decorators included), sorted by size so the innermost comes first."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    spans = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        body = getattr(node, "body", None)
        last = body[0].lineno - 1 if body and isinstance(body, list) else node.end_lineno
        spans.append((first, max(first, last or first)))
    return sorted(spans, key=lambda span: span[1] - span[0])


def statement_lines(source: bytes, lines: Iterable[int]) -> tuple[int, ...]:
    """Every line of the innermost statement (header) holding each of ``lines``."""
    spans = _statements(source)
    out: set[int] = set()
    for line in lines:
        span = next((s for s in spans if s[0] <= line <= s[1]), None)
        if span is not None:
            out.update(range(span[0], span[1] + 1))
    return tuple(sorted(out))


def _opcodes(old: bytes, new: bytes) -> list[tuple[str, int, int, int, int]]:
    a = old.decode("utf-8", "replace").splitlines()
    b = new.decode("utf-8", "replace").splitlines()
    return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()


def _offsets(text: str) -> list[int]:
    """The offset of each line's start in ``text`` (index 0: line 1)."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _map_offset(opcodes: list, position: int, end: bool) -> int:
    """A character offset of the old text in the new one. Kept text moves with its block; a
    start in replaced text goes to the start of the replacement, an (exclusive) end to its end."""
    at = position - 1 if end else position
    for tag, i1, i2, j1, j2 in opcodes:
        if i1 <= at < i2:
            if tag == "equal":
                return j1 + at - i1 + (1 if end else 0)
            return j2 if end else j1
    return opcodes[-1][4] if opcodes else position


def rewritten_node(original: bytes, new: bytes, d: Diagnostic) -> Span | None:
    """The innermost expression or statement of ``new`` that holds what the fix of ``d``
    wrote in place of its finding's span in ``original`` (None: none can be told)."""
    try:
        old_text, new_text = original.decode("utf-8"), new.decode("utf-8")
        tree = ast.parse(new)
    except (UnicodeDecodeError, SyntaxError, ValueError):
        return None
    old_lines, new_lines = _offsets(old_text), _offsets(new_text)
    if d.end_line > len(old_lines) - 1 or d.line < 1:
        return None
    # columns are UTF-8 offsets; character offsets for the difference, on ASCII lines only
    if not old_text.isascii() or not new_text.isascii():
        return None
    start = old_lines[d.line - 1] + d.col - 1
    stop = old_lines[d.end_line - 1] + d.end_col - 1
    opcodes = difflib.SequenceMatcher(None, old_text, new_text, autojunk=False).get_opcodes()
    new_start, new_stop = _map_offset(opcodes, start, False), _map_offset(opcodes, stop, True)
    if new_stop < new_start:
        return None
    first = bisect.bisect_right(new_lines, new_start) - 1
    last = bisect.bisect_right(new_lines, max(new_start, new_stop - 1)) - 1
    wanted = Span(first + 1, new_start - new_lines[first], last + 1, new_stop - new_lines[last])
    holding = [
        Span(node.lineno, node.col_offset, node.end_lineno, node.end_col_offset or 0)
        for node in ast.walk(tree)
        if isinstance(node, ast.expr | ast.stmt) and node.end_lineno is not None
    ]
    holding = [
        span
        for span in holding
        if (span.line, span.col) <= (wanted.line, wanted.col)
        and (wanted.end_line, wanted.end_col) <= (span.end_line, span.end_col)
    ]
    # the spans that hold it nest: the innermost starts last and, of those, ends first
    return max(holding, key=lambda s: (s.line, s.col, -s.end_line, -s.end_col), default=None)


def fixed_sites(
    original: bytes, new: bytes, fixed: Iterable[Diagnostic], path: str, relative: str
) -> list[Site]:
    """One site per fixed finding: the node its fix wrote, else (a fix that deleted its
    statement, or non-ASCII source) the statement(s) its lines became, as whole lines."""
    opcodes = _opcodes(original, new)
    starts = [op[1] for op in opcodes]
    compound = _compound_headers(new)
    fixed = list(fixed)
    lines = [(d.code, d.line) for d in fixed]
    sites = []
    for d in fixed:  # two fixes of one rule on a line are told apart by their columns
        label = f"{d.code} {relative}:{d.line}"
        label += f":{d.col}" if lines.count((d.code, d.line)) > 1 else ""
        node = rewritten_node(original, new, d)
        if node is not None and (node.line, node.col) not in compound:
            sites.append(Site(path, (node,), label, relative))
            continue
        new_lines: set[int] = set()
        for line in range(d.line, d.end_line + 1):
            index = max(0, bisect.bisect_right(starts, line - 1) - 1)
            tag, i1, _, j1, j2 = opcodes[index] if opcodes else ("equal", 0, 0, 0, 0)
            if tag == "equal":
                new_lines.add(j1 + (line - 1 - i1) + 1)
            else:  # replaced lines: all of the replacement; deleted: the line after
                new_lines.update(range(j1 + 1, max(j2, j1 + 1) + 1))
        statement = statement_lines(new, new_lines)
        if not statement:  # the fix deleted the statement: the code that follows stands for it
            after = [span for span in _statements(new) if span[0] >= min(new_lines)]
            first = min(after, default=None)
            statement = tuple(range(first[0], first[1] + 1)) if first else ()
        sites.append(Site(path, line_spans(statement), label, relative))
    return sites


def _compound_headers(source: bytes) -> set[tuple[int, int]]:
    """Where compound statements start: as a site, such a node would stand for its whole body,
    so a fix that lands on one (a rewritten ``with`` header) is counted by its header lines."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    return {
        (node.lineno, node.col_offset)
        for node in ast.walk(tree)
        if isinstance(node, ast.stmt) and isinstance(getattr(node, "body", None), list)
    }


def changed_sites(
    old: bytes, new: bytes, finding_lines: set[int] | None, path: str, relative: str
) -> list[Site]:
    """One site per changed hunk between ``old`` and ``new`` that is about AMP: a finding on
    its old lines, or AMP words on either side (every hunk when ``finding_lines`` is None)."""
    a = old.decode("utf-8", "replace").splitlines()
    b = new.decode("utf-8", "replace").splitlines()
    sites = []
    for tag, i1, i2, j1, j2 in _opcodes(old, new):
        if tag == "equal":
            continue
        text = "\n".join(a[i1:i2] + b[j1:j2])
        if finding_lines is not None and not (
            finding_lines & set(range(i1 + 1, i2 + 1)) or AMP_WORDS.search(text)
        ):
            continue
        lines = statement_lines(new, range(j1 + 1, j2 + 1))
        if lines:  # a deleted line, a changed comment: nothing there can run
            sites.append(Site(path, line_spans(lines), f"{relative}:{j1 + 1}", relative))
    return sites


def amp_changes(old: bytes, new: bytes) -> list[int]:
    """New-side lines of the AMP hunks where ``new`` differs from ``old`` (1-based)."""
    a = old.decode("utf-8", "replace").splitlines()
    b = new.decode("utf-8", "replace").splitlines()
    return [
        j1 + 1
        for tag, i1, i2, j1, j2 in _opcodes(old, new)
        if tag != "equal" and AMP_WORDS.search("\n".join(a[i1:i2] + b[j1:j2]))
    ]
