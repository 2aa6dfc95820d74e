"""One file's migration: parse once -> rules -> fixes -> re-parse, all in memory.

Everything here is pure: it turns bytes into findings and new bytes. Writing and printing belong
to the caller, so ``verify`` can migrate in memory with exactly the engine ``fix`` uses.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ampmigrate import sourcefile
from ampmigrate.catalog import Rule
from ampmigrate.checks import CHECKS
from ampmigrate.engine import FileResult, Settings
from ampmigrate.findings import Diagnostic, Finding, Fix
from ampmigrate.keras import PathVisitor
from ampmigrate.noqa import Suppressions
from ampmigrate.notebook import Notebook, NotebookError
from ampmigrate.prefilter import Prefilter
from ampmigrate.renames import RenameVisitor
from ampmigrate.replace import ReplaceNodes
from ampmigrate.scalerflow import FLOW_CHECKS, build_flow

MAX_FIX_PASSES = 10


class FixError(Exception):
    """A fix produced code that does not parse: a bug in a rule, never written to disk."""


def analyze(
    module: cst.Module, source: bytes, rules: Sequence[Rule], target_keras: int = 3
) -> list[Finding]:
    """Every finding of the selected rules in ``module``; nodes belong to ``module``.

    One visitor serves every rename rule in a single pass; each code check adds one more, and
    the scaler-flow rules share one. Metadata is computed once and shared.
    """
    # Each rule only where its own names occur: a file that passed the prefilter for one rule
    # is not walked by the others (on a 460 KB file each walk costs seconds).
    rules = [r for r in rules if rule_prefilter(r.triggers).may_match(source)]
    visitors: list = []
    symbols = [s for r in rules for s in r.symbols]
    if symbols:
        visitors.append(RenameVisitor(symbols, source))
    paths = [p for r in rules for p in r.paths]
    if paths:
        visitors.append(PathVisitor(paths, target_keras))
    visitors += [CHECKS[r.check](r, target_keras) for r in rules if r.check in CHECKS]
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    findings: list[Finding] = []
    for visitor in visitors:
        wrapper.visit(visitor)
        findings += visitor.findings
    flow_rules = [r for r in rules if r.check in FLOW_CHECKS]
    if flow_rules:
        flow = build_flow(wrapper)
        for rule in flow_rules:
            findings += FLOW_CHECKS[rule.check](flow, rule)
    return findings


@functools.cache
def rule_prefilter(triggers: tuple[str, ...]) -> Prefilter:
    return Prefilter(triggers)


def apply_fixes(module: cst.Module, fixes: Sequence[Fix], keep_imports: bool = False) -> cst.Module:
    """Rewrite the nodes, then drop imports made unused and add the ones now needed.

    ``keep_imports`` is for a package's ``__init__.py``, whose imports are its public API:
    other modules may import the name from it, so it stays even when unused here.
    """
    # libcst.codemod costs ~0.5 s to import; only runs that fix something pay for it.
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

    module = module.visit(ReplaceNodes({fix.cst_target: fix.cst_build for fix in fixes}))
    context = CodemodContext()
    removals = set() if keep_imports else {e for fix in fixes for e in fix.remove_imports}
    for edit in sorted(removals, key=repr):
        RemoveImportsVisitor.remove_unused_import(context, edit.module, edit.obj, edit.asname)
    for name in sorted({name for fix in fixes for name in fix.add_imports}):
        module_name, _, obj = name.partition(":")  # "a.b:c" is `from a.b import c`
        AddImportsVisitor.add_needed_import(context, module_name, obj or None)
    if removals:
        module = RemoveImportsVisitor(context).transform_module(module)
    if any(fix.add_imports for fix in fixes):
        module = AddImportsVisitor(context).transform_module(module)
    return module


class FileAnalysis:
    """One parsed file and its findings, before suppression is applied."""

    def __init__(self, source: bytes, rules: Sequence[Rule], target_keras: int = 3) -> None:
        self.module = cst.parse_module(source)
        self.findings = analyze(self.module, source, rules, target_keras)
        self._suppressions = Suppressions(self.module.code) if self.findings else None
        self._positions = (
            MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
            if self.findings
            else {}
        )

    def active(self, settings: Settings) -> list[tuple[Finding, Diagnostic]]:
        """Unsuppressed findings with their reported form, in source order."""
        out = []
        for finding in self.findings:
            where = self._positions[finding.node]
            if self._suppressions.suppresses(where.start.line, finding.code):
                continue
            message = finding.message
            if finding.fix is not None and settings.too_new(finding.fix):
                needs = ".".join(map(str, finding.fix.min_torch))
                target = ".".join(map(str, settings.target_torch))
                message += f" (the fix needs torch >= {needs}; target-torch is {target})"
            diagnostic = Diagnostic(
                path="",
                line=where.start.line,
                col=where.start.column + 1,
                end_line=where.end.line,
                end_col=where.end.column + 1,
                code=finding.code,
                message=message,
                fix=settings.safety(finding.fix),
            )
            out.append((finding, diagnostic))
        out.sort(key=lambda pair: pair[1].sort_key)
        return out


def migrate_source(
    source: bytes, settings: Settings, path: str = ""
) -> tuple[bytes, list[Diagnostic], list[Diagnostic]]:
    """(new source, remaining diagnostics, fixed diagnostics) for one file's bytes.

    Fixes are applied and the result re-parsed and re-analysed until nothing more applies,
    so what is reported as remaining is exactly what a second run would report.
    """
    _check_python(source)
    analysis = FileAnalysis(source, settings.rules, settings.target_keras)
    keep_imports = Path(path).name == "__init__.py"
    fixed: list[Diagnostic] = []
    for _ in range(MAX_FIX_PASSES):
        active = analysis.active(settings)
        to_apply = [(f, d) for f, d in active if settings.applies(f.fix)]
        if not settings.fix or not to_apply:
            return source, [d for _, d in active], fixed
        new_module = apply_fixes(analysis.module, [f.fix for f, _ in to_apply], keep_imports)
        new_source = new_module.bytes
        try:
            analysis = FileAnalysis(new_source, settings.rules, settings.target_keras)
        except cst.ParserSyntaxError as exc:
            codes = ", ".join(sorted({f.code for f, _ in to_apply}))
            raise FixError(f"fixes for {codes} produced code that does not parse ({exc})") from exc
        fixed += [d for _, d in to_apply]
        source = new_source
    return source, [d for _, d in analysis.active(settings)], fixed


class InvalidSource(Exception):
    """The file is not Python that CPython would compile; the message says why."""


def _check_python(source: bytes) -> None:
    """CPython's own parser goes first. It is 20x faster than libcst, gives the messages users
    know, and its nesting limits are far below the depth at which libcst's native parser
    overflows its stack and kills the process (measured: ~8,000 chained operators)."""
    try:
        ast.parse(source)
    except SyntaxError as exc:
        where = f" at {exc.lineno}:{exc.offset}" if exc.lineno else ""
        if exc.msg.startswith("(unicode error)") or "encoding" in exc.msg:
            message = exc.msg.removeprefix("(unicode error) ")
            raise InvalidSource(f"cannot decode{where}: {message}") from exc
        raise InvalidSource(f"syntax error{where}: {exc.msg}") from exc
    except (RecursionError, MemoryError) as exc:
        raise InvalidSource("too deeply nested to parse") from exc
    except ValueError as exc:  # NUL bytes (Python 3.11)
        raise InvalidSource(f"not Python source: {exc}") from exc


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, InvalidSource | NotebookError):
        return str(exc)
    if isinstance(exc, cst.ParserSyntaxError):
        return f"syntax error at {exc.raw_line}:{exc.raw_column + 1}: {exc.message}"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if isinstance(exc, RecursionError):
        return "too deeply nested to parse"
    return f"internal error ({type(exc).__name__}: {exc}); please report this file".splitlines()[0]


def process(
    path: str, source: bytes | None, settings: Settings, prefilter: Prefilter | None = None
) -> FileResult:
    """Run one file through the pipeline; never raises. Without ``prefilter`` the caller has
    already decided the file is worth parsing."""
    result = FileResult(path=path)
    try:
        if source is None:
            source = sourcefile.read(Path(path))
        result.original = source
        if prefilter is not None and not prefilter.may_match(source):
            return result
        limit = settings.max_file_size
        if limit and len(source) > limit:
            raise InvalidSource(
                f"too large to parse ({len(source) / 1e6:.1f} MB > {limit / 1e6:g} MB); "
                "raise the limit with --max-file-size"
            )
        result.parsed = True
        if path.endswith(".ipynb"):
            return _process_notebook(result, source, settings)
        new_source, remaining, fixed = migrate_source(source, settings, path)
    except Exception as exc:  # one bad file must not stop the run
        result.error = _error_text(exc)
        return result
    result.new_source = new_source
    result.diagnostics = [_at(d, path) for d in remaining]
    result.fixed = [_at(d, path) for d in fixed]
    return result


def _process_notebook(result: FileResult, raw: bytes, settings: Settings) -> FileResult:
    notebook = Notebook.parse(raw)
    module = notebook.module()
    try:
        new_module, remaining, fixed = migrate_source(module.encode(), settings, result.path)
    except InvalidSource as exc:
        syntax = exc.__cause__ if isinstance(exc.__cause__, SyntaxError) else None
        if syntax is None or not syntax.lineno:
            raise
        cell, line = notebook.locate(syntax.lineno, module)
        result.error = f"syntax error at cell {cell}:{line}:{syntax.offset}: {syntax.msg}"
        return result
    new_text = new_module.decode()

    def placed(d: Diagnostic, text: str) -> Diagnostic:
        cell, line = notebook.locate(d.line, text)
        _, end_line = notebook.locate(d.end_line, text)
        fields = {**d.__dict__, "path": result.path, "cell": cell}
        return Diagnostic(**{**fields, "line": line, "end_line": end_line})

    result.diagnostics = [placed(d, new_text) for d in remaining]
    result.fixed = [placed(d, module) for d in fixed]
    result.new_source = notebook.rebuild(new_text) if new_text != module else raw
    return result


def _at(diagnostic: Diagnostic, path: str) -> Diagnostic:
    return Diagnostic(**{**diagnostic.__dict__, "path": path})


def process_batch(
    batch: list[tuple[str, bytes, frozenset[str]]], settings: Settings
) -> list[FileResult]:
    out = []
    for path, source, ignored in batch:
        rules = tuple(r for r in settings.rules if r.code not in ignored)
        out.append(process(path, source, replace(settings, rules=rules) if ignored else settings))
    return out
