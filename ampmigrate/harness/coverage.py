"""Which rewritten sites a run executed: a MATCH says nothing about code that never ran.

A site is a rewritten statement of the migrated tree (a fixed finding, or with ``--against`` an
AMP line changed since the revision), as the lines of the statement(s) it touches; the bootstrap
watches those lines and reports the ones that ran.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ampmigrate.findings import Diagnostic

# What makes a changed line an AMP line for --against (besides a finding on it).
AMP_WORDS = re.compile(
    r"autocast|GradScaler|\bamp\b|scaler|mixed_precision|float16|bfloat16|\.half\(|fp16|bf16"
    r"|loss_scale",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Site:
    path: str  # the file as the run sees it (real path)
    lines: tuple[int, ...]  # any of these running means the site ran
    label: str  # how the user finds it: "AMP101 pkg/trainer.py:12"
    relative: str  # the file relative to the project root


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


def measure(kind: str, sites: Iterable[Site], hits: dict[str, list[int]]) -> Coverage:
    sites = list(dict.fromkeys(sites))
    ran = [s for s in sites if set(s.lines) & set(hits.get(s.path, ()))]
    return Coverage(kind, sites, ran)


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


def fixed_sites(
    original: bytes, new: bytes, fixed: Iterable[Diagnostic], path: str, relative: str
) -> list[Site]:
    """One site per fixed finding: its original lines carried over to the new source."""
    opcodes = _opcodes(original, new)
    starts = [op[1] for op in opcodes]
    sites = []
    for d in fixed:
        new_lines: set[int] = set()
        for line in range(d.line, d.end_line + 1):
            index = max(0, bisect.bisect_right(starts, line - 1) - 1)
            tag, i1, _, j1, j2 = opcodes[index] if opcodes else ("equal", 0, 0, 0, 0)
            if tag == "equal":
                new_lines.add(j1 + (line - 1 - i1) + 1)
            else:  # replaced lines: all of the replacement; deleted: the line after
                new_lines.update(range(j1 + 1, max(j2, j1 + 1) + 1))
        lines = statement_lines(new, new_lines)
        if not lines:  # the fix deleted the statement: the code that follows stands for it
            after = [span for span in _statements(new) if span[0] >= min(new_lines)]
            first = min(after, default=None)
            lines = tuple(range(first[0], first[1] + 1)) if first else ()
        sites.append(Site(path, lines, f"{d.code} {relative}:{d.line}", relative))
    return sites


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
            sites.append(Site(path, lines, f"{relative}:{j1 + 1}", relative))
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
