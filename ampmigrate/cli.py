"""Command line: ``check``, ``fix``, ``rules``, ``explain`` (Ruff's conventions and exit codes).

Exit status: 0 nothing left to report, 1 findings remain (also after ``fix``) or ``--diff`` has
changes to show, 2 an error (a file that cannot be read or parsed, a bad option).
"""

from __future__ import annotations

import collections
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import click

from ampmigrate import __version__
from ampmigrate.catalog import all_rules, select_rules
from ampmigrate.config import Config, ConfigError, parse_opt_level, parse_version
from ampmigrate.config import resolve as resolve_config
from ampmigrate.engine import FileResult, Settings, run
from ampmigrate.engine.discover import EXCLUDED_DIRS, discover
from ampmigrate.engine.write import write_atomic
from ampmigrate.families import reads_dependency_files
from ampmigrate.findings import DECLARE_LEVEL, Diagnostic
from ampmigrate.floor import find as torch_floor
from ampmigrate.floor import keras_target
from ampmigrate.report import FORMATS, RENDERERS, text

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
            help="How findings are printed on stdout (default: text).",
        ),
        click.option(
            "--config",
            "config_file",
            type=click.Path(path_type=Path, dir_okay=False),
            help="A pyproject.toml to read [tool.ampmigrate] from (default: the nearest one).",
        ),
        click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes graded unsafe."),
        click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain."),
        click.option(
            "--ignore-noqa",
            is_flag=True,
            help="Ignore `# noqa` comments: report (and fix) what they suppress, as Ruff's flag.",
        ),
        click.option("--statistics", is_flag=True, help="Print the number of findings per rule."),
        click.option(
            "--jobs", "-j", type=click.IntRange(min=1), help="Worker processes (default: CPUs)."
        ),
        click.option(
            "--exclude",
            help="Comma-separated globs of files/directories to skip, replacing the configured "
            "ones and the built-in list (venvs, caches).",
        ),
        click.option(
            "--extend-exclude", help="Comma-separated globs to skip in addition to --exclude."
        ),
        click.option(
            "--target-torch",
            help="Oldest torch the code must keep running on (e.g. 2.1): fixes that need a newer "
            "one become unsafe. Default: target-torch in [tool.ampmigrate], else the project's "
            "declared torch requirement.",
        ),
        click.option(
            "--apex-opt-level",
            help="Declare that every run uses apex O1 (or O0) where the code leaves opt_level "
            "to a flag, a parameter or a config, so the apex rewrite takes it as O1 (only "
            '"O1" is accepted). Default: apex-opt-level in [tool.ampmigrate], else such a '
            "level is refused unless provably O1.",
        ),
        click.option(
            "--show-settings",
            is_flag=True,
            help="Print the resolved settings (and where each came from) and exit.",
        ),
        click.option(
            "--target-keras",
            type=click.Choice(["2", "3"]),
            help="Keras the TF fixes write for: 3 (tf.keras since TF 2.16; default) or 2 "
            "(tf-keras with TF_USE_LEGACY_KERAS=1).",
        ),
        click.option(
            "--max-file-size",
            type=click.FloatRange(min=0),
            default=2.0,
            show_default=True,
            help="Report larger files (MB) instead of parsing them; 0: no limit.",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ampmigrate")
def main() -> None:
    """Find and migrate deprecated mixed-precision APIs (torch.cuda.amp, torch.cpu.amp, apex.amp,
    TensorFlow/Keras)."""


def entry() -> NoReturn:
    """The ``ampmigrate`` program: the command, then a prompt exit, as mypy's ``fast_exit``:
    tearing the interpreter down (modules, the syntax trees' objects) is ~8 ms of a small run
    and does nothing a finished command needs. Output is flushed first; an exit status that is
    not a number (a message) and an exception leave the ordinary way."""
    try:
        main()
    except SystemExit as done:
        if done.code is not None and not isinstance(done.code, int):
            raise
        status = done.code or 0
    else:
        status = 0
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


@dataclass
class Run:
    files: list[Path]
    results: list[FileResult]
    output_format: str


@dataclass(frozen=True)
class LintOptions:
    """The options `check` and `fix` share, as click parsed them."""

    select: str | None
    ignore: str | None
    output_format: str | None
    config_file: Path | None
    unsafe_fixes: bool
    exit_zero: bool
    statistics: bool
    jobs: int | None
    exclude: str | None
    extend_exclude: str | None
    target_torch: str | None
    show_settings: bool
    target_keras: str | None
    max_file_size: float
    apex_opt_level: str | None = None
    ignore_noqa: bool = False


def _globs(value: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (value or "").split(",") if p.strip())


def _settings(
    paths: list[Path], options: LintOptions, fix: bool
) -> tuple[Config, Settings, tuple[str, str, str]]:
    """Command line over [tool.ampmigrate] over the project's declared torch floor (and
    TensorFlow/Keras); with where each target (and the apex opt level) came from, for
    ``--show-settings``."""
    try:
        config = resolve_config(paths, options.config_file)
        selected = _codes(options.select) if options.select is not None else config.select
        ignored = _codes(options.ignore) if options.ignore is not None else list(config.ignore)
        rules = select_rules(list(selected) if selected else None, ignored)
        if options.exclude is not None:
            config = replace(config, exclude=_globs(options.exclude))
        if options.extend_exclude:
            extended = config.extend_exclude + _globs(options.extend_exclude)
            config = replace(config, extend_exclude=extended)
        if options.target_torch:
            target_torch = parse_version(options.target_torch)
            torch_source = "--target-torch"
        elif config.target_torch:
            target_torch, torch_source = config.target_torch, f"{config.source}: target-torch"
        elif floor := torch_floor(paths):
            target_torch, torch_source = floor.version, floor.source
        else:
            target_torch, torch_source = (
                None,
                "no torch requirement found: every fix may use the newest torch",
            )
        if options.target_keras:
            target_keras, keras_source = int(options.target_keras), "--target-keras"
        elif config.target_keras is not None:
            target_keras = config.target_keras
            keras_source = f"{config.source}: target-keras"
        elif declared := keras_target(paths):
            target_keras, keras_source = declared
        else:
            target_keras = 3
            keras_source = "no TensorFlow/Keras requirement found: Keras 3, TensorFlow's since 2.16"
        # where the level was declared: as --show-settings says it, and as the rewrite's note
        if options.apex_opt_level is not None:
            opt_level = parse_opt_level(options.apex_opt_level, "--apex-opt-level")
            level_source = declared_in = "--apex-opt-level"
        elif config.apex_opt_level is not None and config.source is not None:
            opt_level = config.apex_opt_level
            level_source = f"{config.source}: apex-opt-level"
            declared_in = _shown_path(config.source)
        else:
            opt_level, declared_in = None, ""
            level_source = "not declared: an opt level that is not provably O1 is refused"
    except (ConfigError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    settings = Settings(
        rules=tuple(rules),
        fix=fix,
        unsafe_fixes=options.unsafe_fixes,
        target_torch=target_torch,
        target_keras=target_keras,
        max_file_size=int(options.max_file_size * 1e6),
        apex_opt_level=opt_level,
        apex_opt_level_from=declared_in,
        ignore_noqa=options.ignore_noqa,
    )
    return config, settings, (torch_source, keras_source, level_source)


def _shown_path(path: Path) -> str:
    """``path`` as a finding names it: relative to the working directory when under it."""
    try:
        return Path(os.path.abspath(path)).relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(path)


def _show_settings(
    config: Config, settings: Settings, sources: tuple[str, str, str], files: list[Path]
) -> None:
    target = ".".join(map(str, settings.target_torch)) if settings.target_torch else "none"
    lines = [
        f"config file: {config.source or 'none'}",
        f"root: {config.root}",
        f"rules: {' '.join(r.code for r in settings.rules)}",
        f"target-torch: {target} ({sources[0]})",
        f"target-keras: {settings.target_keras} ({sources[1]})",
        f"apex-opt-level: {settings.apex_opt_level or 'none'} ({sources[2]})",
        f"unsafe-fixes: {str(settings.unsafe_fixes).lower()}",
        "exclude: "
        + (", ".join(config.exclude) if config.exclude is not None else "built-in list"),
        f"extend-exclude: {', '.join(config.extend_exclude) or 'none'}",
        f"files: {len(files)}",
    ]
    click.echo("\n".join(lines))
    sys.exit(EXIT_OK)


def _collect(paths: tuple[Path, ...], options: LintOptions, fix: bool) -> Run:
    """Resolve configuration (CLI over pyproject.toml), discover files and process them."""
    paths = list(paths) or [Path(".")]
    config, settings, sources = _settings(paths, options, fix)
    excluded_dirs = EXCLUDED_DIRS if config.exclude is None else frozenset()
    files = discover(
        paths,
        excluded=config.excluded,
        excluded_dirs=excluded_dirs,
        dependency_files=reads_dependency_files({r.code for r in settings.rules}),
    )
    if options.show_settings:
        _show_settings(config, settings, sources, files)
    bar = _Progress(sys.stderr.isatty())
    try:
        results = run(files, settings, options.jobs, config.ignored_codes, progress=bar)
    finally:
        bar.close()
    return Run(files, results, options.output_format or config.output_format)


class _Progress:
    """``Parsing: done/total`` on stderr once a run has taken ``DELAY`` seconds, on a terminal
    only (never in CI logs or pipes), whatever the file count: one huge file is as slow as many
    small ones, so a timer shows the line even while no file has finished."""

    DELAY = 1.0

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.start = time.monotonic()
        self.counts = (0, 0)
        self.timer: Any = None  # threading's Timer and Lock, from the first call on
        self.lock: Any = None
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.timer is None:  # the first call (threading is imported for a terminal only)
            import threading

            self.counts = (done, total)
            self.lock = threading.Lock()
            wait = max(0.0, self.DELAY - (time.monotonic() - self.start))
            self.timer = threading.Timer(wait, self._show)
            self.timer.daemon = True
            self.timer.start()
            return
        with self.lock:
            self.counts = (done, total)
            if self.shown:
                self._write()

    def _show(self) -> None:
        with self.lock:
            self.shown = True
            self._write()

    def _write(self) -> None:
        done, total = self.counts
        sys.stderr.write(f"\rParsing: {done}/{total} files")
        sys.stderr.flush()

    def close(self) -> None:
        if self.timer is None:  # never called, or not a terminal
            return
        self.timer.cancel()
        with self.lock:
            if self.shown:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
            self.shown = False


def _print_errors(results: Sequence[FileResult]) -> bool:
    errors = [r for r in results if r.error]
    for r in errors:
        click.echo(f"{r.path}: error: {r.error}", err=True)
    return bool(errors)


def _print_findings(
    diagnostics: list[Diagnostic], output_format: str, statistics: bool, unsafe_fixes: bool = False
) -> None:
    diagnostics.sort(key=lambda d: d.sort_key)
    if statistics:
        counts = collections.Counter(d.code for d in diagnostics)
        rules = all_rules()
        for code, count in sorted(counts.items()):
            click.echo(f"{count:>6}  {code}  {rules[code].name}")
        return
    render = RENDERERS[output_format]
    out = render(diagnostics, unsafe_fixes) if render is text else render(diagnostics)
    if out:
        click.echo(out, nl=False)


def _exit(diagnostics, had_errors: bool, exit_zero: bool, changes: bool = False) -> None:
    if had_errors:
        sys.exit(EXIT_ERROR)
    if (diagnostics or changes) and not exit_zero:
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_OK)


def _level_hint(diagnostics: list[Diagnostic]) -> None:
    """As Ruff names the fixes ``--unsafe-fixes`` would add: the apex files refused for their
    opt level alone, which the setting would let through (on Hugging Face-style scripts, whose
    `--fp16_opt_level` takes any string, that is nearly every refusal: the 46th review)."""
    only = sum(
        d.code == "AMP303" and "(1 blocker)" in d.message and DECLARE_LEVEL in d.message
        for d in diagnostics
    )
    if only:
        click.echo(
            f"{_plural(only, 'apex file')} {'stops' if only == 1 else 'stop'} at an opt level "
            "not known to be O1: if every run of the project uses O1 (or O0), declare it with "
            '`--apex-opt-level O1` (or `apex-opt-level = "O1"` in [tool.ampmigrate]); the '
            "rewrite then goes on, and says what else blocks it, if anything",
            err=True,
        )


def _hidden(results) -> str:
    """The summary's count of findings a ``# noqa`` suppresses (a bare one, written for
    flake8, hides an apex import as well: the 64th review's OpenDiT passed "All checks")."""
    count = sum(len(r.suppressed) for r in results)
    if not count:
        return ""
    return f"; {_plural(count, 'finding')} suppressed by `# noqa` (`--ignore-noqa` shows them)"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@main.command()
@_lint_options
def check(paths: tuple[Path, ...], **options) -> None:
    """Report deprecated AMP API uses in PATHS (files or directories; default: .)."""
    options = LintOptions(**options)
    exit_zero, statistics = options.exit_zero, options.statistics
    found = _collect(paths, options, fix=False)
    files, results, output_format = found.files, found.results, found.output_format
    if not files:
        click.echo("No Python files found.", err=True)
        sys.exit(EXIT_OK)
    had_errors = _print_errors(results)
    diagnostics = [d for r in results for d in r.diagnostics]
    _print_findings(diagnostics, output_format, statistics, options.unsafe_fixes)
    if diagnostics:
        safe = sum(d.fix == "safe" for d in diagnostics)
        unsafe = sum(d.fix == "unsafe" for d in diagnostics)
        hint = f"{safe} fixable with `ampmigrate fix`"
        if unsafe:
            hint += f", {unsafe} more with `--unsafe-fixes`"
        click.echo(
            f"Found {_plural(len(diagnostics), 'finding')} ({hint}){_hidden(results)}.", err=True
        )
        _level_hint(diagnostics)
    elif not had_errors:
        click.echo(
            f"All checks passed ({_plural(len(files), 'file')}){_hidden(results)}.", err=True
        )
    _exit(diagnostics, had_errors, exit_zero)


def _diff(result: FileResult) -> str:
    """A unified diff of one file's change: per cell for a notebook, else of the decoded text."""
    if result.path.endswith(".ipynb"):
        from ampmigrate.notebook import cell_sources

        before, after = cell_sources(result.original), cell_sources(result.new_source)
        units = [
            (f"{result.path}:cell {cell}", before.get(cell, ""), after.get(cell, ""))
            for cell in sorted(before.keys() | after.keys())
        ]
    else:
        import io
        import tokenize

        encoding, _ = tokenize.detect_encoding(io.BytesIO(result.original).readline)
        units = [
            (result.path, result.original.decode(encoding), result.new_source.decode(encoding))
        ]
    out = []
    for label, old, new in units:
        import difflib  # only for --diff: it costs start-up time on every run

        lines = difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"a/{label}", f"b/{label}", lineterm=""
        )
        out += [line + "\n" for line in lines]
    return "".join(out)


@main.command()
@_lint_options
@click.option("--diff", is_flag=True, help="Print a unified diff of the fixes; write nothing.")
@click.option(
    "--report",
    "report_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write a markdown summary of the migration to this file.",
)
def fix(paths: tuple[Path, ...], diff: bool, report_file: Path | None, **options) -> None:
    """Rewrite deprecated AMP API uses in PATHS and report what remains."""
    options = LintOptions(**options)
    exit_zero, statistics = options.exit_zero, options.statistics
    found = _collect(paths, options, fix=True)
    files, results, output_format = found.files, found.results, found.output_format
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
                write_atomic(Path(result.path), result.new_source)
            except OSError as exc:
                click.echo(f"{result.path}: error: cannot write: {exc.strerror or exc}", err=True)
                had_errors = True
        _print_findings(remaining, output_format, statistics, options.unsafe_fixes)
        verb = "Fixed"
    unsafe = sum(d.fix == "unsafe" for d in remaining)
    summary = f"{verb} {_plural(fixed, 'finding')} in {_plural(len(changed), 'file')}"
    summary += f", {len(remaining)} remaining"
    if unsafe:
        summary += f" ({unsafe} fixable with `--unsafe-fixes`)"
    click.echo(summary + _hidden(results) + ".", err=True)
    _level_hint(remaining)
    if report_file:
        from ampmigrate.summary import markdown as markdown_report

        report_file.write_text(markdown_report(results, applied=not diff), encoding="utf-8")
        click.echo(f"Wrote {report_file}", err=True)
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
    from ampmigrate.ruledocs import render

    click.echo(render(rule), nl=False)


@main.command(context_settings={"ignore_unknown_options": False})
@click.argument("script", type=click.Path(path_type=Path))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--steps", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--device", type=click.Choice(["cpu", "cuda"]), help="cpu hides GPUs; cuda needs one."
)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--exact", is_flag=True, help="Compare bit-for-bit (default when all fixes are safe)."
)
@click.option(
    "--rtol", type=float, help=f"Relative loss tolerance (default {1e-3:g} when not exact)."
)
@click.option(
    "--atol", type=float, help=f"Absolute loss tolerance (default {1e-5:g} when not exact)."
)
@click.option("--timeout", type=float, default=600, show_default=True, help="Seconds per side.")
@click.option("--migrated", type=click.Path(path_type=Path), help="Compare against this file.")
@click.option(
    "--against",
    metavar="REV",
    help="SCRIPT is already migrated: compare it with the project at git revision REV.",
)
@click.option(
    "--require-amp",
    is_flag=True,
    help="Exit 2 when no autocast region or GradScaler was enabled on either side.",
)
@click.option("--report", type=click.Path(path_type=Path), help="Write traces, summary, plot.")
@click.option("--unsafe-fixes", is_flag=True, help="Migrate with unsafe fixes too.")
@click.option("--nproc-per-node", type=click.IntRange(min=1), help="Run each side under torchrun.")
@click.option(
    "--compare-fp32",
    is_flag=True,
    help="Instead: time SCRIPT in float32 (autocast and GradScaler off) and as written.",
)
@click.option(
    "--emulate-cuda",
    is_flag=True,
    help="Run both sides on the CPU with CUDA emulated (CUDA autocast as CPU float16).",
)
@click.option(
    "--parallel", is_flag=True, help="Run the two sides at once (default: one after the other)."
)
@click.option(
    "--root",
    type=click.Path(path_type=Path, file_okay=False),
    help="The project root to copy and migrate (default: git top level, else the nearest "
    "pyproject.toml/setup.py/setup.cfg, else the script's directory).",
)
@click.option(
    "--target-torch",
    help="As for `fix`: the oldest torch the code must keep running on (default: target-torch "
    "in [tool.ampmigrate], else the project's declared torch requirement).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="As for `fix`: a pyproject.toml to read [tool.ampmigrate] from.",
)
def verify(
    script, script_args, steps, seed, device, threads, exact, rtol, atol, timeout, migrated,
    against, require_amp, report, unsafe_fixes, nproc_per_node, compare_fp32, emulate_cuda,
    parallel, root, target_torch, config_file,
) -> None:  # fmt: skip
    """Run SCRIPT and its migrated version; compare per-step loss and GradScaler state.

    Arguments after `--` are passed to SCRIPT. Exit 0: same training; 1: they diverge; 2: error.
    With --compare-fp32: exit 0 once measured, 2 when it could not be (or AMP was not active).
    """
    from ampmigrate.harness import compare as cmp
    from ampmigrate.harness.project import FixPlan
    from ampmigrate.harness.verify import Options, VerifyError
    from ampmigrate.harness.verify import verify as run_verify

    if exact and (rtol is not None or atol is not None):
        raise click.UsageError("--exact and --rtol/--atol exclude each other")
    if against and migrated:
        raise click.UsageError("--against and --migrated exclude each other")
    if emulate_cuda and device == "cuda":
        raise click.UsageError("--emulate-cuda runs on the CPU; it excludes --device cuda")
    if compare_fp32:
        used = {
            "--migrated": migrated, "--exact": exact, "--rtol": rtol is not None,
            "--atol": atol is not None, "--unsafe-fixes": unsafe_fixes,
            "--nproc-per-node": nproc_per_node, "--against": against,
            "--require-amp": require_amp, "--parallel": parallel,
            "--target-torch": target_torch, "--config": config_file,
        }  # fmt: skip
        if clash := [name for name, value in used.items() if value]:
            raise click.UsageError(f"--compare-fp32 does not take {', '.join(clash)}")
    tolerance = None
    if exact:
        tolerance = cmp.Tolerance(True)
    elif rtol is not None or atol is not None:
        tolerance = cmp.Tolerance(False, rtol or 0.0, atol or 0.0)
    # The fixes `ampmigrate fix SCRIPT` would make: the same resolution of its settings.
    lint = LintOptions(
        select=None, ignore=None, output_format=None, config_file=config_file,
        unsafe_fixes=unsafe_fixes, exit_zero=False, statistics=False, jobs=1, exclude=None,
        extend_exclude=None, target_torch=target_torch, show_settings=False, target_keras=None,
        max_file_size=2.0,
    )  # fmt: skip
    config, settings, sources = _settings([script], lint, fix=True)
    plan = FixPlan(settings, config.ignored_codes, config.excluded, sources[0])
    options = Options(
        steps=steps, seed=seed, device=device, threads=threads, timeout=timeout,
        nproc_per_node=nproc_per_node or 0, emulate_cuda=emulate_cuda, parallel=parallel,
        root=root, plan=plan,
    )  # fmt: skip
    try:
        if compare_fp32:
            _compare_fp32(script, list(script_args), options, report)
        outcome = run_verify(
            script, list(script_args), options, tolerance, migrated, against=against
        )
    except VerifyError as exc:
        click.echo(f"ampmigrate verify: error: {exc}", err=True)
        if exc.detail:
            click.echo(f"the script's output (last lines):\n{exc.detail}", err=True)
        sys.exit(EXIT_ERROR)
    sys.exit(_print_outcome(outcome, report, require_amp))


def _compare_fp32(script: Path, args: list[str], options, report: Path | None) -> NoReturn:
    from ampmigrate.harness import report as reporting
    from ampmigrate.harness.fp32 import compare_fp32

    result = compare_fp32(script, args, options)
    click.echo(result.table())
    click.echo(f"verdict: {result.verdict()}")
    if result.active:
        click.echo(f"active in the run as written: {', '.join(result.active)}")
    if report:
        for path in reporting.write_fp32(result, report):
            click.echo(f"wrote {path}", err=True)
        if hint := reporting.missing_plot():
            click.echo(hint, err=True)
    sys.exit(EXIT_OK if result.active else EXIT_ERROR)


def _print_outcome(outcome, report: Path | None, require_amp: bool) -> int:
    """What was migrated, the step table, the verdict with its coverage, notes; the exit status."""
    from ampmigrate.harness import compare as cmp
    from ampmigrate.harness import report as reporting

    if outcome.migration is not None:
        m = outcome.migration
        fixes = ", ".join(f"{code}: {n}" for code, n in sorted(m.fixed.items())) or "none"
        grade = "all safe" if m.all_safe else "some unsafe"
        modules = len(m.files)
        click.echo(
            f"migration: {sum(m.fixed.values())} fixes ({fixes}) in {len(m.changed)} of "
            f"{_plural(modules, 'project file')} the run imports, {grade}"
        )
        click.echo(f"settings: {m.settings}")
        if m.applied:
            click.echo(f"fixed: {', '.join(m.applied)}")
        if m.excluded:
            click.echo(f"excluded by the configuration (not migrated): {', '.join(m.excluded)}")
    if outcome.against is not None:
        a = outcome.against
        how = (
            "every AMP change is one a safe fix makes: exact"
            if not a.not_safe
            else f"AMP changes a safe fix would not make ({', '.join(a.not_safe[:5])}): tolerance"
        )
        click.echo(f"against {a.rev}: {_plural(len(a.files), 'changed file')} imported; {how}")
    for rank, comparison in enumerate(outcome.comparisons):
        if len(outcome.comparisons) > 1:
            click.echo(f"\nrank {rank}:")
        a, b = outcome.original.traces[rank], (outcome.migrated.traces or [{"steps": []}])[rank]
        click.echo(cmp.table(a, b, comparison))
        if outcome.inconclusive is None:
            click.echo(outcome.verdict(comparison))
    if outcome.inconclusive is not None:
        click.echo(f"INCONCLUSIVE: {outcome.inconclusive}")
    for note in outcome.notes:
        click.echo(f"note: {note}")
    for side in outcome.stopped_early():
        click.echo(f"{side.name} side's output (stdout and stderr, last lines):")
        click.echo(side.output_tail() or "(none)")
    status = outcome.exit_status(require_amp)
    if status == EXIT_ERROR and outcome.inconclusive is None:
        click.echo(
            "ampmigrate verify: --require-amp: no autocast region or GradScaler was enabled on "
            "either side, so only the float32 path was compared",
            err=True,
        )
    if report:
        for path in reporting.write(outcome, report, require_amp):
            click.echo(f"wrote {path}", err=True)
        if hint := reporting.missing_plot():
            click.echo(hint, err=True)
    return status


@main.command("convert-checkpoint")
@click.argument("source", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("target", type=click.Path(path_type=Path, dir_okay=False), required=False)
@click.option("--key", help="Dotted path of the apex state (default: found by its shape).")
@click.option(
    "--loss-scaler",
    type=click.Choice(["min", "first"]),
    default="min",
    show_default=True,
    help="With num_losses > 1: take the smallest scale, or loss_scaler0's.",
)
@click.option(
    "--store-as",
    metavar="NAME",
    help='Move the GradScaler state to this key of its mapping (the migrated code reads "scaler").',
)
@click.option("--in-place", is_flag=True, help="Overwrite SOURCE (TARGET must be omitted).")
@click.option("--trust", is_flag=True, help="Load with weights_only=False (arbitrary pickles).")
def convert_checkpoint(source, target, key, loss_scaler, store_as, in_place, trust) -> None:
    """Convert apex amp loss-scaler state in checkpoint SOURCE into GradScaler state, and apex
    optimizer state (FusedAdam's group step) into torch optimizer state, in TARGET."""
    from ampmigrate import checkpoint as ckpt

    if in_place == (target is not None):
        raise click.UsageError("give TARGET, or --in-place to overwrite SOURCE")
    if store_as is not None and not store_as.strip():
        raise click.UsageError("--store-as needs a key name")
    target = source if in_place else target
    if not in_place and target.resolve() == source.resolve():
        raise click.UsageError("TARGET is SOURCE; use --in-place to overwrite it")
    if not source.is_file():
        click.echo(f"{source}: error: no such file", err=True)
        sys.exit(EXIT_ERROR)
    try:
        data = ckpt.load(source, trust)
        data, conversions = ckpt.convert(data, key, loss_scaler, store_as)
        ckpt.save_atomic(data, target)
    except ckpt.CheckpointError as exc:
        click.echo(f"{source}: error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    for c in conversions:
        where = ".".join(map(str, c.path)) or "(the whole file)"
        if c.kind == "optimizer":
            steps = sorted({g.get("step") for g in c.apex["param_groups"]} - {None})
            click.echo(
                f"{where}: apex optimizer state (group step {', '.join(map(str, steps))}) -> "
                f"torch optimizer state with a per-parameter step ({len(c.scaler['state'])} "
                "parameters)"
            )
        else:
            click.echo(f"{where}: apex {dict(c.apex)} -> GradScaler {c.scaler}")
        for warning in c.warnings:
            click.echo(f"warning: {where}: {warning}", err=True)
    click.echo(f"Wrote {target}", err=True)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(as_json: bool) -> None:
    """Report what this machine offers for mixed precision and what to use."""
    import json

    from ampmigrate import doctor as checkup

    report = checkup.collect()
    click.echo(json.dumps(report, indent=2) if as_json else checkup.render(report), nl=as_json)
