"""Analysis: one ``ast`` parse, the rule families, findings in their reported form.

Each rule runs only where the file spells its trigger names (a file that passed the prefilter
for one rule is not walked by the others). The families are named in one registry
(:mod:`ampmigrate.families`), each a module with ``check(tree, source, names, rules,
settings)`` run with one shared ``Names``; the engine imports a family only when a file first
needs it and knows none by name.
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
import re
from collections.abc import Iterable

from ampmigrate.catalog import Rule
from ampmigrate.engine.names import Names
from ampmigrate.engine.prefilter import Prefilter, new_memo
from ampmigrate.engine.settings import ADOPTED, Settings
from ampmigrate.engine.source import Source
from ampmigrate.families import FAMILIES, family
from ampmigrate.findings import Diagnostic, Finding, Span
from ampmigrate.noqa import Suppressions

# every boundary `str.splitlines` breaks at (form feed, U+2028 ...: the 83rd review)
_ONE_LINE = re.compile(r"[ \t]*(?:\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029])\s*")


def preload(rules: Iterable[Rule] = ()) -> None:
    """Import the families and build the rules' prefilters now: a process pool forked after
    this inherits them instead of making them once per worker."""
    for entry in FAMILIES:
        importlib.import_module(entry.module)
    for rule in rules:
        rule_prefilter(rule.triggers)


@functools.cache
def rule_prefilter(triggers: tuple[str, ...]) -> Prefilter:
    return Prefilter(triggers)


def parse(data: bytes) -> ast.Module:
    """CPython's parser; raises ``SyntaxError`` (decoding errors included), ``ValueError``
    (NUL bytes), ``RecursionError``/``MemoryError`` (nesting)."""
    return ast.parse(data)


class Analysis:
    """One file's findings (before suppression)."""

    def __init__(
        self, data: bytes, settings: Settings, path: str = "", tree: ast.Module | None = None
    ) -> None:
        self.tree = parse(data) if tree is None else tree
        self.source = Source.from_bytes(data, path)
        self._names: Names | None = None
        known = new_memo()  # the rules share anchors, words and shapes: test each once
        adopted = settings.project.get(ADOPTED, {}).get(os.path.abspath(path), ()) if path else ()
        rules = [
            r
            for r in settings.rules
            if r.code in adopted or rule_prefilter(r.triggers).may_match(data, known)
        ]
        self.findings: list[Finding] = self._run(rules, settings) if rules else []

    def _run(self, rules: list[Rule], settings: Settings) -> list[Finding]:
        names = self._names = Names(self.tree)
        groups: dict[str, list[Rule]] = {}
        for rule in rules:
            groups.setdefault(family(rule).module, []).append(rule)
        findings: list[Finding] = []
        for name, group in groups.items():
            module = importlib.import_module(name)
            findings += module.check(self.tree, self.source, names, group, settings)
        return findings

    def release(self) -> None:
        """Free the name resolution's reference cycles (:meth:`Names.release`): call once the
        findings have been reported and their fixes applied."""
        if self._names is not None:
            self._names.release()
            self._names = None

    def diagnostics(
        self, settings: Settings, suppressed: list[Diagnostic] | None = None
    ) -> list[tuple[Finding, Diagnostic]]:
        """Unsuppressed findings with their reported form, in source order; the ones a
        ``# noqa`` suppresses are added to ``suppressed``, where given (a bare ``# noqa``
        written for flake8 hides an apex import too: the summary counts them)."""
        if not self.findings:
            return []
        suppressions = Suppressions("" if settings.ignore_noqa else self.source.text)
        out = []
        for finding in self.findings:
            node = finding.node
            if isinstance(node, Span):
                line, col, end_line, end_col = node.line, node.col, node.end_line, node.end_col
            else:
                line, col, end_line, end_col = self.source.position(node)
            hidden = suppressions.suppresses(line, finding.code)
            if hidden and suppressed is None:
                continue
            # one line, as every output format shows it (a quoted multi-line statement broke
            # the text format's `path:line:col: CODE message` lines: the 80th review)
            message = _ONE_LINE.sub(" ", finding.message)
            if finding.fix is not None and settings.too_new(finding.fix):
                needs = ".".join(map(str, finding.fix.min_torch))
                target = ".".join(map(str, settings.target_torch))
                message += f" (the fix needs torch >= {needs}; target-torch is {target})"
            diagnostic = Diagnostic(
                path="",
                line=line,
                col=col,
                end_line=end_line,
                end_col=end_col,
                code=finding.code,
                message=message,
                fix=settings.safety(finding.fix),
            )
            if hidden:
                suppressed.append(diagnostic)  # type: ignore[union-attr]
                continue
            out.append((finding, diagnostic))
        out.sort(key=lambda pair: pair[1].sort_key)
        return out
