"""One file's migration: analyze -> apply -> re-analyze until no fix applies, all in memory.

Everything here is pure: it turns bytes into findings and new bytes. Writing and printing belong
to the caller, so ``verify`` can migrate in memory with exactly the engine ``fix`` uses.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from ampmigrate.engine.analyze import Analysis, parse
from ampmigrate.engine.apply import FixError, apply, select
from ampmigrate.engine.discover import is_dependency_file
from ampmigrate.engine.prefilter import Prefilter
from ampmigrate.engine.settings import FileResult, Settings
from ampmigrate.engine.write import read
from ampmigrate.families import PROJECT_PASSES
from ampmigrate.findings import Diagnostic, Fix
from ampmigrate.notebook import Notebook, NotebookError

MAX_FIX_PASSES = 10


def migrate_source(
    source: bytes,
    settings: Settings,
    path: str = "",
    *,
    suppressed: list[Diagnostic] | None = None,
) -> tuple[bytes, list[Diagnostic], list[Diagnostic]]:
    """(new source, remaining diagnostics, fixed diagnostics) for one file's bytes; the
    remaining findings a ``# noqa`` suppresses go to ``suppressed``, where given.

    Fixes are applied and the result re-parsed and re-analysed until nothing more applies
    (fixes that overlap wait for the next pass), so what is reported as remaining is exactly
    what a second run would report.
    """
    analyses = [Analysis(source, settings, path, _check_python(source))]
    try:
        return _migrate(analyses, source, settings, path, suppressed)
    finally:
        for analysis in analyses:  # done with: its trees are freed now, not by the collector
            analysis.release()


def _migrate(
    analyses: list[Analysis],
    source: bytes,
    settings: Settings,
    path: str,
    suppressed: list[Diagnostic] | None,
) -> tuple[bytes, list[Diagnostic], list[Diagnostic]]:
    """:func:`migrate_source` from the first analysis; each new one is added to ``analyses``.
    What the last analysis's ``# noqa`` suppresses goes to ``suppressed``, where given."""
    analysis = analyses[0]
    keep_imports = Path(path).name == "__init__.py"
    fixed: list[Diagnostic] = []
    for _ in range(MAX_FIX_PASSES):
        active = analysis.diagnostics(settings, _emptied(suppressed))
        to_apply = [(f, d) for f, d in active if settings.applies(f.fix)]
        if not settings.fix or not to_apply:
            return source, [d for _, d in active], fixed
        chosen = select([f.fix for f, _ in to_apply])
        applied = [(f, d) for f, d in to_apply if any(f.fix is c for c in chosen)]
        waiting = [(f, d) for f, d in to_apply if not any(f.fix is c for c in chosen)]
        folded = _folded(waiting, chosen)
        codes = ", ".join(sorted({f.code for f, _ in applied}))
        try:
            text = apply(analysis.source.text, chosen, keep_imports)
            if text == analysis.source.text:  # (an import a package's `__init__` keeps)
                return source, [d for _, d in active], fixed
            new_source = analysis.source.encode(text)
            analysis = Analysis(new_source, settings, path)
            analyses.append(analysis)
        except (FixError, SyntaxError, ValueError) as exc:
            raise FixError(f"fixes for {codes} produced code that does not parse ({exc})") from exc
        try:  # what only the compiler refuses (a duplicate parameter): the file stays as it was
            compile(analysis.tree, path or "<fixed>", "exec", dont_inherit=True)  # (parsed once)
        except SyntaxError as exc:
            raise FixError(
                f"fixes for {codes} produced code that does not compile ({exc.msg}, line "
                f"{exc.lineno}); please report this file"
            ) from exc
        left = {(f.code, f.message) for f in analysis.findings}
        fixed += [d for _, d in applied] + [d for f, d in folded if (f.code, f.message) not in left]
        source = new_source
    return source, [d for _, d in analysis.diagnostics(settings, _emptied(suppressed))], fixed


def _emptied(suppressed: list[Diagnostic] | None) -> list[Diagnostic] | None:
    """``suppressed`` cleared for the next analysis (only the last one's stay)."""
    if suppressed is not None:
        suppressed.clear()
    return suppressed


def _folded(waiting: list, chosen: list[Fix]) -> list:
    """The waiting fixes that lie inside a chosen fix's edit: that edit rewrites their code (an
    argument fixed on its own inside a call that is rewritten whole). They count as fixed unless
    the next analysis still finds them."""
    spans = [(e.start, e.end) for fix in chosen for e in fix.edits]
    return [
        (f, d)
        for f, d in waiting
        if f.fix.edits
        and all(any(s <= e.start and e.end <= t for s, t in spans) for e in f.fix.edits)
    ]


class InvalidSource(Exception):
    """The file is not Python that CPython would compile; the message says why."""


def _check_python(source: bytes) -> ast.Module:
    """CPython's parser: the messages users know, and nesting limits far below any depth that
    could overflow a native stack later."""
    try:
        return parse(source)
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
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if isinstance(exc, RecursionError):  # (past the parse: the analysis's own recursion)
        return (
            "internal error (RecursionError: the analysis recursed too deeply); please report "
            "this file"
        )
    return f"internal error ({type(exc).__name__}: {exc}); please report this file".splitlines()[0]


def process(
    path: str, source: bytes | None, settings: Settings, prefilter: Prefilter | None = None
) -> FileResult:
    """Run one file through the pipeline; never raises. Without ``prefilter`` the caller has
    already decided the file is worth parsing."""
    result = FileResult(path=path)
    try:
        if source is None:
            source = read(Path(path))
        result.original = source
        if prefilter is not None and not prefilter.may_match(source):
            return result
        limit = settings.max_file_size
        if limit and len(source) > limit:
            raise InvalidSource(
                f"too large to parse ({len(source) / 1e6:.1f} MB > {limit / 1e6:g} MB); "
                "raise the limit with --max-file-size"
            )
        if is_dependency_file(path) and not path.endswith(".py"):
            return result  # not Python: the project pass of the rules that read it reports
        result.parsed = True
        if path.endswith(".ipynb"):
            return _process_notebook(result, source, settings)
        hidden: list[Diagnostic] = []
        new_source, remaining, fixed = migrate_source(source, settings, path, suppressed=hidden)
    except Exception as exc:  # one bad file must not stop the run
        result.error = _error_text(exc)
        syntax = exc.__cause__ if isinstance(exc, InvalidSource) else None
        if isinstance(syntax, SyntaxError) and syntax.lineno and "decode" not in result.error:
            around = _read_around(source, settings, path, syntax.lineno)
            if around is not None:
                lines, found = around
                result.diagnostics = [_at(d, path) for d in found]
                result.error += (
                    f" (the findings reported for this file are of a reading with line"
                    f"{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))} set aside; "
                    "nothing is fixed until it parses)"
                )
        return result
    result.new_source = new_source
    result.diagnostics = [_at(d, path) for d in remaining]
    result.fixed = [_at(d, path) for d in fixed]
    result.suppressed = [_at(d, path) for d in hidden]
    return result


# findings that a project pass settles over the whole run, which a file that does not parse
# is not part of (the 70th review's p74: "no file of the project calls ..." was false)
_PLANNED = frozenset(code for p in PROJECT_PASSES if p.settle for code in p.codes)


def _read_around(
    source: bytes, settings: Settings, path: str, first: int
) -> tuple[list[int], list[Diagnostic]] | None:
    """A file CPython cannot parse, read with each line it stops at set aside (a Python 2
    ``print "x"``, ``.cuda(async=True)`` from before ``async`` was a keyword; up to 8 lines):
    what the rules say of the rest, so that its uses of a deprecated API are not missed (the
    66th review: a training script's four apex amp calls had no finding). None: it does not
    parse that way either, or nothing is found."""
    text = source.splitlines(keepends=True)
    aside: list[int] = []
    line = first
    while line not in aside and 0 < line <= len(text) and len(aside) < 8:
        aside.append(line)
        old = text[line - 1]
        body = old.rstrip(b"\r\n")
        stripped = body.lstrip()
        indent = body[: len(body) - len(stripped)]
        opens = stripped.split(b"#")[0].rstrip().endswith(b":")  # (`except X, e:`: a block)
        placeholder = (
            b"except Exception:" if opens and stripped.startswith(b"except") else
            b"if True:" if opens else b"pass"
        )  # fmt: skip
        text[line - 1] = indent + placeholder + old[len(body) :]
        try:  # (its parse is the test: the next line it stops at, if any)
            _, found, _ = migrate_source(b"".join(text), replace(settings, fix=False), path)
        except InvalidSource as exc:
            syntax = exc.__cause__
            line = (syntax.lineno or 0) if isinstance(syntax, SyntaxError) else 0
            continue
        except Exception:  # (a reading of a broken file: the syntax error alone is reported)
            return None
        found = [Diagnostic(**{**d.__dict__, "fix": None}) for d in found if d.code not in _PLANNED]
        return (aside, found) if found else None
    return None


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
        fields["message"] = notebook.cell_lines(d.message, text)
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
