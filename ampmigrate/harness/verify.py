"""``ampmigrate verify``: run the original and the migrated script, compare their training.

The migrated side is produced in memory by the same engine ``fix`` uses, written into a
temporary mirror of the script's directory (other files are symlinked, so data paths still
resolve), and both sides run in fresh interpreters through ``bootstrap.py`` with the same seed,
thread count and environment.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ampmigrate.catalog import all_rules
from ampmigrate.engine import Settings, run
from ampmigrate.engine.discover import EXCLUDED_DIRS
from ampmigrate.harness.compare import Comparison, Divergence, Tolerance, compare

BOOTSTRAP = Path(__file__).with_name("bootstrap.py")
# Traceback frames of the harness itself, dropped from what the user is shown.
_HARNESS_FRAMES = (f'  File "{BOOTSTRAP}"', '  File "<frozen runpy>"')
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-5


class VerifyError(Exception):
    """A reason to exit 2: the comparison could not be made. ``detail``: the script's stderr."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.detail = detail


@dataclass
class Options:
    steps: int = 20
    seed: int = 0
    device: str | None = None  # None: whatever the script picks; "cpu" hides GPUs
    threads: int = 1
    timeout: float = 600.0
    nproc_per_node: int = 0
    unsafe_fixes: bool = False
    tracing: bool = True


@dataclass
class Side:
    name: str
    script: Path
    env: dict[str, str] = field(default_factory=dict)  # on top of the harness's settings
    returncode: int = 0
    stderr: str = ""
    timed_out: bool = False
    traces: list[dict] = field(default_factory=list)

    def stderr_tail(self, lines: int = 15) -> str:
        """The end of the script's stderr, without the harness's own traceback frames."""
        kept: list[str] = []
        in_frame = False
        for line in self.stderr.rstrip().splitlines():
            if line.startswith(_HARNESS_FRAMES):
                in_frame = True  # the frame line, then its indented source lines
                continue
            if in_frame and line.startswith("    "):
                continue
            in_frame = False
            kept.append(line)
        return "\n".join(kept[-lines:])


@dataclass
class Migration:
    directory: Path
    script: Path
    fixed: dict[str, int]
    all_safe: bool
    remaining: list[str]


def project_modules(script: Path) -> list[Path]:
    """SCRIPT and the modules of its own directory tree it imports, transitively."""
    root = script.parent.resolve()
    todo, seen = [script.resolve()], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue  # the engine reports it when it migrates the file
        package = path.parent
        for node in ast.walk(tree):
            names: list[str] = []
            base = root
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package
                    for _ in range(node.level - 1):
                        base = base.parent
                prefix = node.module or ""
                names = [prefix] if prefix else []
                names += [f"{prefix}.{a.name}".lstrip(".") for a in node.names]
            for name in names:
                todo += _module_files(base, name)
    return sorted(seen)


def _module_files(base: Path, dotted: str) -> list[Path]:
    """The files ``import dotted`` runs when resolved under ``base``: packages' __init__ too."""
    found, current = [], base
    for part in dotted.split("."):
        current = current / part
        if (current / "__init__.py").is_file():
            found.append(current / "__init__.py")
        elif current.with_suffix(".py").is_file():
            found.append(current.with_suffix(".py"))
            break
        else:
            break
    return found


def migrate_tree(script: Path, unsafe: bool, target: Path) -> Migration:
    """Mirror the script's directory into ``target``: SCRIPT and the project modules it imports
    migrated, every other file symlinked."""
    root = script.parent.resolve()
    files = project_modules(script)
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=unsafe)
    results = run(files, settings, jobs=1)
    errors = [f"{r.path}: {r.error}" for r in results if r.error]
    if errors:
        raise VerifyError("cannot migrate: " + "; ".join(errors))
    fixed: dict[str, int] = {}
    all_safe = True
    remaining = []
    for result in results:
        destination = target / Path(result.path).relative_to(root)
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(result.new_source or result.original or b"")
        for d in result.fixed:
            fixed[d.code] = fixed.get(d.code, 0) + 1
            all_safe &= d.fix == "safe"
        remaining += [
            f"{d.path}:{d.line}:{d.col}: {d.code} {d.message}" for d in result.diagnostics
        ]
    _link_other_files(root, target)
    return Migration(target, target / script.name, fixed, all_safe, remaining)


def _link_other_files(root: Path, target: Path) -> None:
    for current, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in EXCLUDED_DIRS]
        for name in files:
            source = Path(current) / name
            destination = target / source.relative_to(root)
            if not destination.exists():
                destination.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(source, destination)


def _environment(options: Options, trace: Path) -> dict[str, str]:
    env = dict(os.environ)
    threads = str(options.threads)
    env.update(
        AMPMIGRATE_STEPS=str(options.steps if options.tracing else 0),
        AMPMIGRATE_SEED=str(options.seed),
        AMPMIGRATE_THREADS=threads,
        AMPMIGRATE_TRACE=str(trace),
        AMPMIGRATE_TRACING="1" if options.tracing else "0",
        PYTHONHASHSEED=str(options.seed),
        OMP_NUM_THREADS=threads,
        MKL_NUM_THREADS=threads,
        CUBLAS_WORKSPACE_CONFIG=":4096:8",
    )
    if options.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif options.device == "cuda":
        env["AMPMIGRATE_REQUIRE_CUDA"] = "1"
    return env


def run_side(side: Side, args: list[str], options: Options, workdir: Path) -> Side:
    trace = workdir / f"{side.name}.rank{{rank}}.json"
    command = [sys.executable, str(BOOTSTRAP), str(side.script), *args]
    if options.nproc_per_node:
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={options.nproc_per_node}", *command[1:],
        ]  # fmt: skip
    try:
        proc = subprocess.run(
            command,
            env={**_environment(options, trace), **side.env},
            capture_output=True,
            text=True,
            timeout=options.timeout,
            check=False,
        )
        side.returncode, side.stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        side.timed_out, side.returncode = True, -1
        side.stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
    ranks = max(1, options.nproc_per_node)
    for rank in range(ranks):
        path = workdir / f"{side.name}.rank{rank}.json"
        if path.exists():
            side.traces.append(json.loads(path.read_text(encoding="utf-8")))
    return side


def _check_side(side: Side, options: Options) -> None:
    """Turn a side that produced nothing comparable into a VerifyError."""
    label = f"{side.name} script ({side.script.name})"
    tail = side.stderr_tail()
    if side.timed_out:
        raise VerifyError(f"{label} timed out after {options.timeout:g} s", tail)
    if side.returncode == 3 and options.device == "cuda":
        raise VerifyError("--device cuda, but torch sees no CUDA device on this machine")
    if side.returncode != 0:
        raise VerifyError(f"{label} crashed with exit status {side.returncode}", tail)
    if not side.traces or not any(t["steps"] for t in side.traces):
        raise VerifyError(f"{label} finished without a single optimizer step", tail)


def cpu_only_notes(traces: list[dict]) -> list[str]:
    """What a run without a GPU could not cover, said plainly."""
    notes = []
    for trace in traces:
        if trace["environment"]["cuda_available"]:
            continue
        cuda = trace.get("autocast", {}).get("cuda", {})
        scaler = trace.get("scaler") or {}
        if (cuda.get("entered") and not cuda.get("enabled")) or (
            scaler.get("device") == "cuda" and not scaler.get("enabled")
        ):
            notes.append(
                "no GPU here: torch disabled the script's CUDA autocast/GradScaler, so only the "
                "fp32 path was compared; run `ampmigrate verify --device cuda` on a GPU machine "
                "to compare the mixed-precision path"
            )
            break
    return notes


@dataclass
class Outcome:
    comparisons: list[Comparison]
    original: Side
    migrated: Side
    migration: Migration | None
    notes: list[str]
    options: Options

    @property
    def match(self) -> bool:
        return all(c.match for c in self.comparisons)


def verify(
    script: Path,
    args: list[str],
    options: Options,
    tolerance: Tolerance | None,
    migrated_script: Path | None = None,
    workdir: Path | None = None,
) -> Outcome:
    """Run both sides and compare; ``tolerance`` None means exact iff every fix is safe."""
    if not script.is_file():
        raise VerifyError(f"{script}: no such script")
    if migrated_script is not None and not migrated_script.is_file():
        raise VerifyError(f"{migrated_script}: no such script")
    if importlib.util.find_spec("torch") is None:
        raise VerifyError("torch is not installed; pip install 'ampmigrate[verify]'")
    own_tmp = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="ampmigrate-verify-"))
    try:
        migration = None
        if migrated_script is None:
            migration = migrate_tree(script, options.unsafe_fixes, workdir / "migrated")
            migrated_script = migration.script
        if tolerance is None:
            exact = migration is not None and migration.all_safe
            tolerance = Tolerance(True) if exact else Tolerance(False, DEFAULT_RTOL, DEFAULT_ATOL)
        original, migrated = Side("original", script), Side("migrated", migrated_script)
        parallel = options.device != "cuda" and not options.nproc_per_node
        with ThreadPoolExecutor(max_workers=2 if parallel else 1) as pool:
            list(pool.map(lambda s: run_side(s, args, options, workdir), (original, migrated)))
        _check_side(original, options)
        notes = []
        if migration is not None and not migration.fixed:
            notes.append("the migration changed nothing: both sides ran the same code")
        if migration is not None and migration.remaining:
            notes.append(f"{len(migration.remaining)} finding(s) remain unmigrated")
        if migrated.returncode != 0 or migrated.timed_out or not migrated.traces:
            # The original trains and the migrated code does not: that is a divergence.
            comparisons = [_crashed(original.traces[0], migrated, tolerance, options)]
        else:
            _check_side(migrated, options)
            if len(original.traces) != len(migrated.traces):
                raise VerifyError("the two sides reported different numbers of ranks")
            comparisons = [
                compare(a, b, tolerance)
                for a, b in zip(original.traces, migrated.traces, strict=True)
            ]
        notes += cpu_only_notes(original.traces + migrated.traces)
        return Outcome(comparisons, original, migrated, migration, notes, options)
    finally:
        if own_tmp:
            shutil.rmtree(workdir, ignore_errors=True)


def _crashed(original: dict, migrated: Side, tolerance: Tolerance, options: Options) -> Comparison:
    """The migrated run died: compare the steps it made; if they agree, the crash is the news."""
    partial = migrated.traces[0] if migrated.traces else {"steps": []}
    comparison = compare(original, {**original, **partial, "steps": partial["steps"]}, tolerance)
    steps = len(partial["steps"])
    if comparison.divergence is None or comparison.divergence.step >= steps:
        last = migrated.stderr_tail(1) or f"exit status {migrated.returncode}"
        what = (
            f"timed out after {options.timeout:g} s" if migrated.timed_out else f"crashed: {last}"
        )
        comparison.divergence = Divergence(steps, "migrated run", "completed", what)
    return comparison
