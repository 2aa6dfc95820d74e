"""Analysis: one ``ast`` parse, the rule families, findings in their reported form.

Each rule runs only where the file spells its trigger names (a file that passed the prefilter
for one rule is not walked by the others). The families (``renames``, ``checks``, ``scalerflow``,
``keras``: each a ``check(tree, source, names, rules, settings)``) run on the stdlib ``ast`` with
one shared ``Names``; AMP303 (apex O1) alone is planned on libcst, and only for files where the
``ast`` tier sees ``apex.amp`` called through the imports and that the planner might rewrite: a
file without ``amp.initialize`` that is not one side of an apex pair is always refused, and that
refusal is computed on ``ast`` (:mod:`ampmigrate.apexverdict`) without importing libcst.
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
from collections.abc import Iterable
from typing import Any

from ampmigrate.catalog import Rule
from ampmigrate.engine.names import Names
from ampmigrate.engine.prefilter import Prefilter, new_memo
from ampmigrate.engine.settings import Settings
from ampmigrate.engine.source import Source
from ampmigrate.findings import Diagnostic, Finding, Span
from ampmigrate.noqa import Suppressions

APEX_CHECK = "apex-o1-rewrite"


FAMILIES = ("renames", "checks", "scalerflow", "keras")  # on ast; "apex" is the libcst planner


def preload(rules: Iterable[Rule] = ()) -> None:
    """Import the families and build the rules' prefilters now: a process pool forked after
    this inherits them instead of making them once per worker."""
    for name in FAMILIES:
        importlib.import_module(f"ampmigrate.{name}")
    for rule in rules:
        rule_prefilter(rule.triggers)


def family(rule: Rule) -> str:
    """The module (beside the engine) whose ``check`` runs ``rule``."""
    if rule.symbols:
        return "renames"
    if rule.paths or rule.code.startswith("AMP4"):
        return "keras"
    if rule.check == APEX_CHECK:
        return "apex"
    if rule.check == "apex-api":
        return "apexapi"
    if rule.check == "backward-in-autocast":
        return "checks"
    return "scalerflow"


@functools.cache
def rule_prefilter(triggers: tuple[str, ...]) -> Prefilter:
    return Prefilter(triggers)


def parse(data: bytes) -> ast.Module:
    """CPython's parser; raises ``SyntaxError`` (decoding errors included), ``ValueError``
    (NUL bytes), ``RecursionError``/``MemoryError`` (nesting)."""
    return ast.parse(data)


class Analysis:
    """One file's findings (before suppression) and, where the apex planner ran, the libcst
    module its fixes refer to (``apply`` needs that very tree)."""

    def __init__(
        self, data: bytes, settings: Settings, path: str = "", tree: ast.Module | None = None
    ) -> None:
        self.tree = parse(data) if tree is None else tree
        self.source = Source.from_bytes(data, path)
        self.cst_module: Any = None
        known = new_memo()  # the rules share anchors, words and shapes: test each once
        rules = [r for r in settings.rules if rule_prefilter(r.triggers).may_match(data, known)]
        self.findings: list[Finding] = self._run(rules, settings) if rules else []

    def _run(self, rules: list[Rule], settings: Settings) -> list[Finding]:
        names = Names(self.tree)
        groups: dict[str, list[Rule]] = {}
        for rule in rules:
            groups.setdefault(family(rule), []).append(rule)
        findings: list[Finding] = []
        for name, group in groups.items():
            if name != "apex":
                module = importlib.import_module(f"ampmigrate.{name}")
                findings += module.check(self.tree, self.source, names, group, settings)
        apex = groups.get("apex", [])
        calls = self._apex_calls(names) if apex else []
        if calls:
            findings += self._apex(apex, settings, calls, names)
        return findings

    def _apex_calls(self, names: Names) -> list[ast.Call]:
        from ampmigrate.apexlinks import apex_calls

        return apex_calls(names)

    def _apex(
        self, rules: list[Rule], settings: Settings, calls: list[ast.Call], names: Names
    ) -> list[Finding]:
        """The apex O1 planner (libcst, imported here only): the one place the engine calls it.
        Its nodes become ``Span``s; its fixes keep libcst nodes of ``self.cst_module``. A file
        it can only refuse (no ``initialize``, no pair) gets that refusal from ``ast``."""
        link = settings.apex_links.get(os.path.abspath(self.source.path))
        if link is None:
            from ampmigrate.apexverdict import verdict

            judged = verdict(names, self.source, calls)
            if judged is not None:
                message, anchor = judged
                where = Span(*self.source.position(anchor))
                return [Finding(rule.code, message, where) for rule in rules]
        import libcst as cst
        from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

        from ampmigrate.apex import ApexO1

        self.cst_module = cst.parse_module(self.source.text)
        wrapper = MetadataWrapper(self.cst_module, unsafe_skip_copy=True)
        found: list[Finding] = []
        parents = _parents(self.cst_module)
        for rule in rules:
            visitor = ApexO1(rule, (link, link.role(self.source.path)) if link else None)
            # What ``wrapper.visit`` does, but the parents come from one walk over
            # ``CSTNode.children``: the very map libcst's ParentNodeProvider builds from them,
            # at a third of its cost (0.65 s -> 0.23 s on a 193 KB file).
            visitor.metadata = {
                provider: parents if provider is ParentNodeProvider else wrapper.resolve(provider)
                for provider in visitor.get_inherited_dependencies()
            }
            self.cst_module.visit(visitor)
            found += visitor.findings
        # Where a finding sits is one of ``calls`` whose text is unique (an ast lookup); only
        # otherwise libcst's positions, which cost a code generation pass over the whole module.
        by_text: dict[str, list[ast.Call]] = {}
        for call in calls:
            by_text.setdefault(self.source.segment(call), []).append(call)
        positions = None
        for finding in found:
            same = by_text.get(self.cst_module.code_for_node(finding.node), [])
            if len(same) == 1:
                finding.node = Span(*self.source.position(same[0]))
                continue
            positions = positions or wrapper.resolve(PositionProvider)
            where = positions[finding.node]
            finding.node = Span(
                where.start.line, where.start.column + 1, where.end.line, where.end.column + 1
            )
        return found

    def diagnostics(self, settings: Settings) -> list[tuple[Finding, Diagnostic]]:
        """Unsuppressed findings with their reported form, in source order."""
        if not self.findings:
            return []
        suppressions = Suppressions(self.source.text)
        out = []
        for finding in self.findings:
            node = finding.node
            if isinstance(node, Span):
                line, col, end_line, end_col = node.line, node.col, node.end_line, node.end_col
            else:
                line, col, end_line, end_col = self.source.position(node)
            if suppressions.suppresses(line, finding.code):
                continue
            message = finding.message
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
            out.append((finding, diagnostic))
        out.sort(key=lambda pair: pair[1].sort_key)
        return out


def _parents(module: Any) -> dict[Any, Any]:
    """Each libcst node's parent, as ``ParentNodeProvider`` maps them (from ``children``)."""
    parents = {}
    stack = [module]
    while stack:
        node = stack.pop()
        children = node.children
        for child in children:
            parents[child] = node
        stack.extend(children)
    return parents
