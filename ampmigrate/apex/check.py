"""The apex O1 family as the engine runs it: the per-file check and the pairing project pass.

Per file: a file whose ``ast`` shows no ``apex.amp`` call gets nothing; one the planner can
only refuse (no ``initialize``, not one side of a pair) gets that refusal from ``ast``
(:mod:`ampmigrate.apex.verdict`) without importing libcst; the rest is planned on libcst
(:mod:`ampmigrate.apex`), whose fixes keep nodes of the libcst module they name.

Over the run: the file that calls ``amp.initialize`` is paired with the one whose training
function scales the loss (:mod:`ampmigrate.apex.links`); afterwards both sides of a pair are
rewritten, or neither.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ampmigrate.apex.casts import Casts, casting, components, key, layer_edits, layer_findings
from ampmigrate.apex.handedout import PASS as HANDED
from ampmigrate.apex.handedout import handed_calls
from ampmigrate.apex.reexport import PASS as REEXPORTS
from ampmigrate.apex.reexport import localized, rewrite_state
from ampmigrate.apex.strays import _apex_uses, apex_calls, native, stored_calls, stray_calls
from ampmigrate.catalog import Rule
from ampmigrate.engine.names import Names
from ampmigrate.engine.settings import FileResult, Settings
from ampmigrate.engine.source import Source
from ampmigrate.engine.write import read
from ampmigrate.findings import Finding, Span

Item = tuple[str, bytes, frozenset[str]]
PASS = "apex_links"


def check(
    tree: ast.Module, source: Source, names: Names, rules: list[Rule], settings: Settings
) -> list[Finding]:
    handed = settings.project.get(HANDED, {}).get(os.path.abspath(source.path))
    found = _checked(tree, source, names, rules, settings)
    if handed is not None:  # (apex's module reaches functions of the file as a parameter)
        from ampmigrate.apex.handedout import check as check_handed

        found += check_handed(tree, source, rules, handed)
    return found


def _checked(
    tree: ast.Module, source: Source, names: Names, rules: list[Rule], settings: Settings
) -> list[Finding]:
    linked = settings.project.get(PASS, {})
    casts = linked.get(key(source.path))
    if casts is not None and os.path.abspath(source.path) in casts.layers:
        return layer_findings(tree, source, names, rules, casts)
    calls = [c for c in apex_calls(names) if not native(c, names)] or stored_calls(tree, names)
    if casts is None and layer_edits(tree, names, source) is not None:
        from ampmigrate.apex.verdict import refusal

        anchor = _apex_uses(names)[0]
        message = refusal([
            f"line {anchor.lineno}: its apex casts become their torch.amp forms only "
            "together with the files that initialize amp and import this module, in one run "
            "(under apex they cast only once amp was initialized): no file of this run that "
            "initializes amp reaches it through the imports the tool resolves (an import "
            "found only through a `sys.path` entry the code adds, or a script that imports "
            "both, is not followed); "
            "where something does initialize amp in a process that runs it, migrate the two "
            "together by hand; where nothing does (`amp.initialize`, `amp.init`), they do "
            "nothing and can simply go"
        ])  # fmt: skip
        return [Finding(rule.code, message, anchor) for rule in rules]
    if not calls:
        stray = stray_calls(tree, names, source.path)
        local = localized(tree, source, names, [n for n, _ in stray]) if stray else None
        if isinstance(local, Source):  # (apex's amp from a project module's star export)
            local_tree = ast.parse(local.text)
            return _checked(local_tree, local, Names(local_tree), rules, settings)
        if isinstance(local, str):
            stray = [(stray[0][0], f"line {stray[0][0].lineno}: {local}")]
        if stray:
            from ampmigrate.apex.verdict import refusal

            message = refusal(why for _, why in stray)
            where = Span(*source.position(stray[0][0]))
            return [Finding(rule.code, message, where) for rule in rules]
        handed = list(handed_calls(names))
        if handed:  # (Lightning's backends: `model.configure_apex(amp, ...)`)
            from ampmigrate.apex.verdict import refusal, used_as_value

            message = refusal(
                f"line {node.lineno}: " + used_as_value(ast.unparse(node), ast.unparse(call.func))
                for node, call in handed
            )
            where = Span(*source.position(handed[0][0]))
            return [Finding(rule.code, message, where) for rule in rules]
        return _unused(names, rules, source, settings.project.get(REEXPORTS))
    link = linked.get(os.path.abspath(source.path))
    if casts is None and link is not None:  # a pair's other side reaches the same layers
        casts = next((c for f in link.files if (c := linked.get(key(f))) is not None), None)
    if link is None:
        from ampmigrate.apex.verdict import verdict

        judged = verdict(names, source, calls)
        if judged is not None:
            message, anchor = judged
            where = Span(*source.position(anchor))
            return [Finding(rule.code, message, where) for rule in rules]
    declared = settings.apex_opt_level_from if settings.apex_opt_level == "O1" else None
    found = _planned(source, rules, calls, link, declared, casts)
    if found:
        return found
    # apex calls the engine resolves but the planner's libcst scopes do not: every apex use is
    # reported, with why it is not rewritten
    from ampmigrate.apex.verdict import refusal

    why = "the rewrite does not resolve these calls to apex amp"
    message = refusal([f"line {calls[0].lineno}: {why}: migrate this file by hand"])
    where = Span(*source.position(calls[0]))
    return [Finding(rule.code, message, where) for rule in rules]


def _unused(names: Names, rules: list[Rule], source: Source, reexports: Any) -> list[Finding]:
    """``from apex import amp`` or ``import apex`` that nothing reads (a file whose apex calls
    went, or never were): it only ties the file to apex."""
    from ampmigrate.apex.api.unused import unused_import

    found = []
    seen: set[int] = set()
    for binding in names.imports():
        stmt, alias = binding.node, binding.alias
        if alias is None or id(alias) in seen:
            continue  # (`import apex.amp` binds `apex` and `apex.amp`: one finding)
        seen.add(id(alias))
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "apex" and not stmt.level:
            if alias.name != "amp":
                continue
            full = "apex.amp"
        elif isinstance(stmt, ast.Import) and alias.name in ("apex", "apex.amp"):
            full = alias.name  # (`import apex.amp [as amp]`: the 27th review's undetected form)
        else:
            continue
        for rule in rules:
            rewritten = (
                reexports.get(os.path.abspath(source.path))
                if isinstance(reexports, dict) else None
            )  # fmt: skip
            finding = unused_import(
                names, stmt, alias, full, rule.code, source.path, source, rewritten=rewritten
            )
            found += [finding] if finding is not None else []
    return found


def indent_unit(text: str) -> str | None:
    """The step most of the file's blocks indent by (libcst takes its first block's: a file
    with one tab-indented ``try`` got spaces-then-tab regions elsewhere, efficientdet; the 78th
    review). None: no indented block, or the tokenizer fails."""
    import collections
    import io
    import tokenize

    steps: collections.Counter[str] = collections.Counter()
    levels = [""]
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.INDENT:
                if token.string.startswith(levels[-1]):
                    steps[token.string[len(levels[-1]) :]] += 1
                levels.append(token.string)
            elif token.type == tokenize.DEDENT:
                levels.pop()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return steps.most_common(1)[0][0] if steps else None


def _unparsable(text: str, exc: Exception) -> str:
    """Why libcst, which the rewrite edits through, refuses a file Python compiles: the first
    line indented with both tabs and spaces (s3prl's solvers), else libcst's own words."""
    for number, line in enumerate(text.splitlines(), 1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if " " in indent and "\t" in indent and line.strip():
            return (
                f"line {number} is indented with both spaces and a tab, which Python accepts "
                "and libcst's parser (which the rewrite edits through) does not: expand the "
                "tabs (`expand -i -t 8`, or your editor's) and run again"
            )
    said = str(exc).splitlines()[0]
    return f"libcst's parser (which the rewrite edits through) cannot parse this file ({said})"


def _planned(
    source: Source,
    rules: list[Rule],
    calls: list[ast.Call],
    link: Any,
    declared: str | None,
    casts: Casts | None,
) -> list[Finding]:
    """The libcst planner (imported here only). Its nodes become ``Span``s; its fixes keep
    nodes of the module they carry, which ``apply`` edits. ``declared``: where the setting
    apex-opt-level = "O1" was made (None: it was not)."""
    import libcst as cst
    from libcst.metadata import ParentNodeProvider, ScopeProvider

    from ampmigrate.apex.facts import SpelledIndent, Walk, positions
    from ampmigrate.apex.planner import ApexO1
    from ampmigrate.cstnames import scopes

    try:
        module = cst.parse_module(source.text)
    except cst.ParserSyntaxError as exc:  # (Python's parser took it: the planner's cannot)
        from ampmigrate.apex.verdict import refusal

        message = refusal([f"line {calls[0].lineno}: {_unparsable(source.text, exc)}"])
        where = Span(*source.position(calls[0]))
        return [Finding(rule.code, message, where) for rule in rules]
    unit = indent_unit(source.text)
    if unit is not None and unit != module.default_indent:
        # the blocks that were written with the first block's step keep it, spelled out (the
        # 83rd review: an untouched `try` and function came out tab-indented); new ones take
        # the file's usual step
        module = module.visit(SpelledIndent(module.default_indent))
        module = module.with_changes(default_indent=unit)
    found: list[Finding] = []
    # What ``MetadataWrapper.visit`` does, each map made once for every rule: the parents
    # from one visit (``Walk``), the very map libcst's ParentNodeProvider builds from
    # ``children``, at a fifth of its cost (0.41 s -> 0.09 s on a 63 KB file), with the nodes
    # in source order the planner walks; the scopes without the wrapper's idle visits.
    metadata = {ParentNodeProvider: Walk(module), ScopeProvider: scopes(module)}
    for rule in rules:
        visitor = ApexO1(
            rule,
            (link.seen_from(source.path), link.role(source.path)) if link else None,
            source.path,
            declared,
            casts,
        )
        visitor.metadata = {p: metadata[p] for p in visitor.get_inherited_dependencies()}
        module.visit(visitor)
        found += visitor.findings
    # Where a finding sits is one of ``calls`` whose text is unique (an ast lookup); only
    # otherwise libcst's positions, which cost a code generation pass over the whole module.
    by_text: dict[str, list[ast.Call]] = {}
    for call in calls:
        by_text.setdefault(source.segment(call), []).append(call)
    for finding in found:
        if finding.fix is not None and finding.fix.cst_target is not None:
            finding.fix = replace(finding.fix, cst_module=module)
        same = by_text.get(module.code_for_node(finding.node), [])
        if len(same) == 1:
            finding.node = Span(*source.position(same[0]))
            continue
        line, column, end_line, end_column = positions(module)[finding.node]
        finding.node = Span(line, column + 1, end_line, end_column + 1)
    return found


def link_pairs(settings: Settings, candidates: list[Item], paths: Sequence[Path]) -> Any:
    """The apex links of the run, by absolute path (None when no link is possible)."""
    apex = [(n, s) for n, s, _ in candidates if b"apex" in s and b"amp" in s]
    layers = components(apex) if any(casting(s) for _, s in apex) else {}
    initializing = {n for n, s in apex if b".initialize(" in s}
    using = {n for n, s in apex if b".scale_loss(" in s or b"state_dict(" in s}
    if not initializing or not using or len(initializing | using) < 2:
        return layers or None  # no link is possible: nothing to parse
    apex = [(n, s) for n, s in apex if n in initializing | using]
    from ampmigrate.apex import links

    known = {n: s for n, s, _ in candidates}

    def everything() -> Iterator[tuple[str, bytes]]:
        """Every file of the run (the ones the prefilter dropped read again: rare, see above)."""
        for path in map(str, paths):
            if path in known:
                yield path, known[path]
                continue
            try:
                yield path, read(Path(path))
            except OSError:
                continue

    return {**links.link(apex, everything), **layers} or None


def settle_pairs(
    settings: Settings,
    candidates: list[Item],
    results: dict[str, FileResult],
    rerun: Callable[[list[Item], Settings], list[FileResult]],
) -> None:
    """Every file of a pair or component rewritten (or all only offered), or none: where they
    disagree (one refused, suppressed or ignored), all are run again with it broken, so each
    refuses and says why; until none disagrees, as a file refused there may break another."""
    links = dict(settings.project.get(PASS, {}))
    items = {os.path.abspath(item[0]): item for item in candidates}
    while True:
        broken: dict[object, object] = {}
        for link in {id(v): v for v in links.values()}.values():
            if link.broken or any(f not in items for f in link.files):
                continue
            state = {items[f][0]: rewrite_state(results[items[f][0]]) for f in link.files}
            if len(set(state.values())) == 1 and "no" not in state.values():
                continue
            # the file that is not rewritten (the first, should they differ otherwise)
            refused = next((n for n, s in state.items() if s == "no"), next(iter(state)))
            reason = f"{link.shown(refused)} is not rewritten in this run (see its AMP303 finding)"
            item = replace(link, broken=reason, broken_by=os.path.abspath(refused))
            keyed = key if isinstance(link, Casts) else str
            broken.update((keyed(f), item) for f in link.files)
        if not broken:
            return
        links.update(broken)
        again = replace(settings, project={**settings.project, PASS: links})
        paths = dict.fromkeys(f for v in broken.values() for f in v.files)
        results.update((r.path, r) for r in rerun([items[p] for p in paths], again))
