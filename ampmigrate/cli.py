"""Command line: ``check``, ``fix``, ``rules``, ``explain`` (Ruff's conventions and exit codes).

Exit status: 0 nothing left to report, 1 findings remain (also after ``fix``) or ``--diff`` has
changes to show, 2 an error (a file that cannot be read or parsed, a bad option).
"""

from __future__ import annotations

import collections
import difflib
import io
import sys
import tokenize
from collections.abc import Callable, Sequence
from pathlib import Path

import click

from ampmigrate import __version__, sourcefile
from ampmigrate.catalog import all_rules, select_rules
from ampmigrate.discover import discover
from ampmigrate.engine import FileResult, Settings, run
from ampmigrate.findings import Diagnostic
from ampmigrate.report import FORMATS, RENDERERS
from ampmigrate.ruledocs import render

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def _codes(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [c.strip().upper() for c in value.split(",") if c.strip()]


def _lint_options(func: Callable) -> Callable:
    options = [
        click.argument("paths", nargs=-1, type=click.Path(path_type=Path)),
        click.option("--select", help="Comma-separated rule codes or prefixes (default: ALL)."),
        click.option("--ignore", help="Comma-separated rule codes or prefixes to skip."),
        click.option(
            "--output-format",
            type=click.Choice(FORMATS),
            default="text",
            show_default=True,
            help="How findings are printed on stdout.",
        ),
        click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes graded unsafe."),
        click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain."),
        click.option("--statistics", is_flag=True, help="Print the number of findings per rule."),
        click.option(
            "--jobs", "-j", type=click.IntRange(min=1), help="Worker processes (default: CPUs)."
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ampmigrate")
def main() -> None:
    """Find and migrate deprecated mixed-precision APIs (torch.cuda.amp, torch.cpu.amp)."""


def _collect(paths: Sequence[Path], select, ignore, fix: bool, unsafe: bool, jobs):
    try:
        rules = select_rules(_codes(select), _codes(ignore))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    files = discover(paths or [Path(".")])
    settings = Settings(rules=tuple(rules), fix=fix, unsafe_fixes=unsafe)
    return files, run(files, settings, jobs=jobs)


def _print_errors(results: Sequence[FileResult]) -> bool:
    errors = [r for r in results if r.error]
    for r in errors:
        click.echo(f"{r.path}: error: {r.error}", err=True)
    return bool(errors)


def _print_findings(diagnostics: list[Diagnostic], output_format: str, statistics: bool) -> None:
    diagnostics.sort(key=lambda d: d.sort_key)
    if statistics:
        counts = collections.Counter(d.code for d in diagnostics)
        rules = all_rules()
        for code, count in sorted(counts.items()):
            click.echo(f"{count:>6}  {code}  {rules[code].name}")
        return
    out = RENDERERS[output_format](diagnostics)
    if out:
        click.echo(out, nl=False)


def _exit(diagnostics, had_errors: bool, exit_zero: bool, changes: bool = False) -> None:
    if had_errors:
        sys.exit(EXIT_ERROR)
    if (diagnostics or changes) and not exit_zero:
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_OK)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@main.command()
@_lint_options
def check(paths, select, ignore, output_format, unsafe_fixes, exit_zero, statistics, jobs) -> None:
    """Report deprecated AMP API uses in PATHS (files or directories; default: .)."""
    files, results = _collect(paths, select, ignore, False, unsafe_fixes, jobs)
    if not files:
        click.echo("No Python files found.", err=True)
        sys.exit(EXIT_OK)
    had_errors = _print_errors(results)
    diagnostics = [d for r in results for d in r.diagnostics]
    _print_findings(diagnostics, output_format, statistics)
    if diagnostics:
        safe = sum(d.fix == "safe" for d in diagnostics)
        unsafe = sum(d.fix == "unsafe" for d in diagnostics)
        hint = f"{safe} fixable with `ampmigrate fix`"
        if unsafe:
            hint += f", {unsafe} more with `--unsafe-fixes`"
        click.echo(f"Found {_plural(len(diagnostics), 'finding')} ({hint}).", err=True)
    elif not had_errors:
        click.echo(f"All checks passed ({_plural(len(files), 'file')}).", err=True)
    _exit(diagnostics, had_errors, exit_zero)


def _diff(result: FileResult) -> str:
    """A unified diff of one file's change, decoded as Python decodes the file."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(result.original).readline)
    before = result.original.decode(encoding).splitlines(keepends=True)
    after = result.new_source.decode(encoding).splitlines(keepends=True)
    lines = difflib.unified_diff(before, after, f"a/{result.path}", f"b/{result.path}")
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@main.command()
@_lint_options
@click.option("--diff", is_flag=True, help="Print a unified diff of the fixes; write nothing.")
def fix(
    paths, select, ignore, output_format, unsafe_fixes, exit_zero, statistics, jobs, diff
) -> None:
    """Rewrite deprecated AMP API uses in PATHS and report what remains."""
    files, results = _collect(paths, select, ignore, True, unsafe_fixes, jobs)
    if not files:
        click.echo("No Python files found.", err=True)
        sys.exit(EXIT_OK)
    had_errors = _print_errors(results)
    changed = [r for r in results if r.changed]
    fixed = sum(len(r.fixed) for r in changed)
    remaining = [d for r in results for d in r.diagnostics]
    if diff:
        for result in changed:
            click.echo(_diff(result), nl=False)
        verb = "Would fix"
    else:
        for result in changed:
            try:
                sourcefile.write_atomic(Path(result.path), result.new_source)
            except OSError as exc:
                click.echo(f"{result.path}: error: cannot write: {exc.strerror or exc}", err=True)
                had_errors = True
        _print_findings(remaining, output_format, statistics)
        verb = "Fixed"
    unsafe = sum(d.fix == "unsafe" for d in remaining)
    summary = f"{verb} {_plural(fixed, 'finding')} in {_plural(len(changed), 'file')}"
    summary += f", {len(remaining)} remaining"
    if unsafe:
        summary += f" ({unsafe} fixable with `--unsafe-fixes`)"
    click.echo(summary + ".", err=True)
    _exit(remaining, had_errors, exit_zero, changes=diff and bool(changed))


@main.command("rules")
def list_rules() -> None:
    """List every rule: code, name, fix kinds, summary."""
    for code, rule in all_rules().items():
        click.echo(f"{code}  {rule.name:<36} {rule.fix_kinds:<18} {rule.summary}")


@main.command()
@click.argument("code")
def explain(code: str) -> None:
    """Print the documentation of rule CODE."""
    rule = all_rules().get(code.upper())
    if rule is None:
        raise click.UsageError(f"unknown rule code: {code}")
    click.echo(render(rule), nl=False)
