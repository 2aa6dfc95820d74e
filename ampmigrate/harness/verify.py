"""``ampmigrate verify``: run the original and the migrated script, compare their training.

The migrated side is produced in memory by the same engine ``fix`` uses (project.py), written
into a temporary mirror of the script's project (other files are symlinked, so data paths still
resolve), and both sides run in fresh interpreters through ``bootstrap.py`` with the same seed,
thread count and environment. With ``--against REV`` the original side is the project at a git
revision instead. The verdict says what the comparison covered (coverage.py): which rewritten
sites ran and whether autocast / GradScaler were enabled.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ampmigrate.engine.discover import EXCLUDED_DIRS
from ampmigrate.harness import emulate
from ampmigrate.harness.compare import Comparison, Divergence, Tolerance, compare
from ampmigrate.harness.coverage import (
    Coverage,
    Site,
    amp_changes,
    changed_sites,
    fixed_sites,
    measure,
)
from ampmigrate.harness.project import (
    Migrated,
    ProjectError,
    build_mirror,
    changed_files,
    excluded,
    file_at,
    find_root,
    guess_imports,
    migrate_source,
    worktree_at,
)

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
    emulate_cuda: bool = False  # both sides on the CPU with CUDA emulated (emulate.py)


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
    """What verify migrated: the project files the original run imported, and their fixes."""

    root: Path
    files: list[str]  # imported project files, relative to root
    fixed: dict[str, int]
    all_safe: bool
    remaining: list[str]
    changed: list[str]  # the files a fix changed


@dataclass
class Against:
    """``--against REV``: the revision and the AMP changes no safe fix would make."""

    rev: str
    files: list[str]  # changed Python files the runs imported
    not_safe: list[str]  # "path:line" of AMP changes that differ from the safe fixes


_HARNESS_DIR = Path(__file__).resolve().parent


def _imported(traces: list[dict], root: Path) -> set[str]:
    """The project files a run imported (the harness's own files and environments left out)."""
    out = set()
    for trace in traces:
        for name in trace.get("project_files", []):
            path = root / name
            if excluded(Path(name)) or not path.is_file():
                continue
            if _HARNESS_DIR in path.resolve().parents:
                continue
            out.add(name)
    return out


def _hits(traces: list[dict]) -> dict[str, list[int]]:
    hits: dict[str, list[int]] = {}
    for trace in traces:
        for path, lines in trace.get("lines_hit", {}).items():
            hits.setdefault(path, []).extend(lines)
    return hits


def _write_sites(sites: list[Site], path: Path) -> Path:
    watched: dict[str, set[int]] = {}
    for site in sites:
        watched.setdefault(site.path, set()).update(site.lines)
    path.write_text(json.dumps({k: sorted(v) for k, v in watched.items()}), encoding="utf-8")
    return path


def _same_tracing(workdir: Path) -> str:
    """Sites for the original side: none, but the same line tracer runs, so that both sides run
    under the same conditions (a trace function changes what e.g. torch.compile does)."""
    return str(_write_sites([], workdir / "sites-original.json"))


def _copy_env(root: Path, copy: Path) -> dict[str, str]:
    """A side that runs a copy of the project: imports of the original load the copy's files."""
    env = {
        "AMPMIGRATE_PROJECT": str(copy),
        "AMPMIGRATE_REDIRECT": f"{root}{os.pathsep}{copy}",
        "AMPMIGRATE_REDIRECT_SKIP": os.pathsep.join(sorted(EXCLUDED_DIRS)),
    }
    if pythonpath := os.environ.get("PYTHONPATH"):
        entries = []
        for entry in pythonpath.split(os.pathsep):
            real = Path(entry).resolve() if entry else None
            inside = real is not None and (real == root or root in real.parents)
            if inside and not excluded(real.relative_to(root)):
                entry = str(copy / real.relative_to(root))
            entries.append(entry)
        env["PYTHONPATH"] = os.pathsep.join(entries)
    return env


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
    if options.emulate_cuda:
        env.update(AMPMIGRATE_EMULATE_CUDA="1", CUDA_VISIBLE_DEVICES="")
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


# What torch says when a script reaches for CUDA on a machine without it.
_NO_CUDA = (
    "Torch not compiled with CUDA enabled",
    "Found no NVIDIA driver",
    "No CUDA GPUs are available",
    "Attempting to deserialize object on a CUDA device",
    "module 'torch._C' has no attribute '_cuda",  # torch.cuda.set_device and others, CPU builds
)


def _check_side(side: Side, options: Options) -> None:
    """Turn a side that produced nothing comparable into a VerifyError."""
    label = f"{side.name} script ({side.script.name})"
    tail = side.stderr_tail()
    if side.timed_out:
        raise VerifyError(f"{label} timed out after {options.timeout:g} s", tail)
    if side.returncode == 3 and options.device == "cuda":
        raise VerifyError("--device cuda, but torch sees no CUDA device on this machine")
    if side.returncode == emulate.REFUSED_EXIT and options.emulate_cuda:
        refused = [line for line in side.stderr.splitlines() if emulate.PREFIX in line]
        if refused:
            raise VerifyError(f"{label}: {refused[-1][refused[-1].index(emulate.PREFIX) :]}", tail)
    if side.returncode != 0:
        hint = ""
        if not options.emulate_cuda and any(m in side.stderr for m in _NO_CUDA):
            hint = (
                "; it needs CUDA, which this machine lacks: rerun with --emulate-cuda to run "
                "both sides on the CPU with CUDA emulated"
            )
        raise VerifyError(f"{label} crashed with exit status {side.returncode}{hint}", tail)
    if not side.traces or not any(t["steps"] for t in side.traces):
        raise VerifyError(f"{label} finished without a single optimizer step", tail)


# A module the copy of the project lacks, although the original found it.
_MISSING = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_MIGRATION_TARGETS = {"torch", "tensorflow", "keras", "tf_keras", "apex"}


def _environment_failure(side: Side, where: str) -> VerifyError | None:
    """The copy failed for want of a module the original imports: the environment, not the
    migration (a migration never adds imports other than of torch/TensorFlow)."""
    found = _MISSING.findall(side.stderr)
    if not found or found[-1].split(".")[0] in _MIGRATION_TARGETS:
        return None
    return VerifyError(
        f"the {side.name} side cannot import {found[-1]!r} in {where}, although the original "
        "side could: the copy of the project lacks it, so there is nothing to compare",
        side.stderr_tail(),
    )


def precision_of(traces: list[dict]) -> dict:
    """Whether mixed precision really ran on one side: enabled autocast (dtype, device) and in
    how many steps, whether a GradScaler was active, and what was disabled, by whom."""
    autocast = [e for t in traces for e in t.get("precision", {}).get("autocast", [])]
    scalers = [e for t in traces for e in t.get("precision", {}).get("scalers", [])]
    steps = max(
        (
            len(
                [s for s in t.get("precision", {}).get("autocast_steps", []) if s < len(t["steps"])]
            )
            for t in traces
        ),
        default=0,
    )
    enabled = sorted({f"{e['dtype']}, {e['device']}" for e in autocast if e["enabled"]})
    scaler = any(e["enabled"] for e in scalers) or any(
        (t.get("scaler") or {}).get("enabled") for t in traces
    )
    disabled = [
        {**e, "kind": kind, "by": "torch" if e["requested"] else "script"}
        for kind, entries in (("autocast", autocast), ("GradScaler", scalers))
        for e in entries
        if not e["enabled"]
    ]
    return {
        "autocast": enabled,
        "autocast_steps": steps if enabled else 0,
        "grad_scaler": scaler,
        "disabled": disabled,
    }


def describe_precision(precision: dict) -> str:
    parts = []
    if precision["autocast"]:
        regions = "; ".join(precision["autocast"])
        parts.append(f"autocast enabled ({regions}) in {precision['autocast_steps']} steps")
    if precision["grad_scaler"]:
        parts.append("GradScaler active")
    return ", ".join(parts) or FLOAT32_ONLY


FLOAT32_ONLY = "float32 path only"


def _relativize(side: Side, base: Path) -> None:
    """Locations in ``side``'s traces as paths relative to the tree it ran (the user's view)."""
    prefix = os.path.realpath(base) + os.sep
    for trace in side.traces:
        for entries in (trace.get("precision", {}).get(k, []) for k in ("autocast", "scalers")):
            for entry in entries:
                where = entry.get("where", "")
                if os.path.isabs(where) and os.path.realpath(where).startswith(prefix):
                    entry["where"] = os.path.realpath(where)[len(prefix) :]


def precision_notes(precisions: list[dict]) -> list[str]:
    """Who disabled mixed precision: the script (its ``enabled=False``) or torch (no device).
    ``precisions``: the user's own side first; another side adds only what it alone shows."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for i, precision in enumerate(precisions):
        seen = set(groups)
        for e in precision["disabled"]:
            key = (e["by"], e["kind"], e["device"])
            if i and key in seen:
                continue
            wheres = groups.setdefault(key, [])
            if e["where"] not in wheres:
                wheres.append(e["where"])
    notes = []
    for (by, kind, device), wheres in groups.items():
        at = ", ".join(wheres[:3]) + (", ..." if len(wheres) > 3 else "")
        if by == "script":
            notes.append(f"the script disabled {device} {kind} itself (enabled=False at {at})")
        elif device == "cuda":
            notes.append(
                f"torch disabled the script's cuda {kind} ({at}): no CUDA device here, so only "
                "the float32 path was compared; to compare the mixed-precision path, run "
                "`ampmigrate verify --device cuda` on a GPU machine, or `--emulate-cuda` here"
            )
        else:
            notes.append(
                f"torch disabled the script's {device} {kind} ({at}): not supported here "
                "(see the script's warnings)"
            )
    return notes


@dataclass
class Outcome:
    comparisons: list[Comparison]
    original: Side
    migrated: Side
    migration: Migration | None
    notes: list[str]
    options: Options
    coverage: Coverage | None = None
    inconclusive: str | None = None  # why no verdict can be given
    against: Against | None = None

    @property
    def match(self) -> bool:
        return self.inconclusive is None and all(c.match for c in self.comparisons)

    @property
    def precision(self) -> dict[str, dict]:
        return {s.name: precision_of(s.traces) for s in (self.original, self.migrated)}

    @property
    def float32_only(self) -> bool:
        return all(describe_precision(p) == FLOAT32_ONLY for p in self.precision.values())

    def describe_precision(self) -> str:
        original, migrated = (describe_precision(p) for p in self.precision.values())
        if original == migrated:
            return migrated
        return f"original: {original}; migrated: {migrated}"

    def verdict(self, comparison: Comparison) -> str:
        """The verdict line of one rank's comparison."""
        covered = f"; {self.coverage.describe()}" if self.coverage is not None else ""
        tol = comparison.tolerance
        if not comparison.match:
            d = comparison.divergence
            return (
                f"MISMATCH at step {d.step} ({d.field}): original {d.original!r}, migrated "
                f"{d.migrated!r}; {comparison.steps_compared} steps compared, {tol.describe()}; "
                f"max |diff| {comparison.max_abs:.3g}, max rel {comparison.max_rel:.3g}{covered}"
            )
        how = "bit-for-bit" if tol.exact else f"within tolerance ({tol.describe()})"
        return (
            f"MATCH: {comparison.steps_compared} steps {how}{covered}; {self.describe_precision()}"
        )

    def exit_status(self, require_amp: bool = False) -> int:
        """0 match, 1 mismatch, 2 inconclusive (or only float32 ran and AMP was required)."""
        if self.inconclusive is not None:
            return 2
        if not self.match:
            return 1
        return 2 if require_amp and self.float32_only else 0


def _inconclusive_coverage(coverage: Coverage, steps: int) -> str:
    missed = ", ".join(s.label for s in coverage.missed[:8])
    more = f" and {len(coverage.missed) - 8} more" if len(coverage.missed) > 8 else ""
    return (
        f"both sides trained alike for {steps} steps, but none of the {len(coverage.sites)} "
        f"{coverage.kind} ran, so the migration was not exercised: {missed}{more}"
    )


def verify(
    script: Path,
    args: list[str],
    options: Options,
    tolerance: Tolerance | None,
    migrated_script: Path | None = None,
    workdir: Path | None = None,
    against: str | None = None,
) -> Outcome:
    """Run both sides and compare; ``tolerance`` None means exact iff every change is one a
    safe fix makes. ``against``: compare the working tree's SCRIPT with the project at a git
    revision instead of migrating it."""
    if not script.is_file():
        raise VerifyError(f"{script}: no such script")
    if migrated_script is not None and not migrated_script.is_file():
        raise VerifyError(f"{migrated_script}: no such script")
    if importlib.util.find_spec("torch") is None:
        raise VerifyError("torch is not installed; pip install 'ampmigrate[verify]'")
    own_tmp = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="ampmigrate-verify-"))
    try:
        if against is not None:
            outcome = _verify_against(script.resolve(), args, options, tolerance, workdir, against)
        elif migrated_script is not None:
            outcome = _verify_pair(script, migrated_script, args, options, tolerance, workdir)
        else:
            outcome = _verify_migration(script.resolve(), args, options, tolerance, workdir)
    except ProjectError as exc:
        raise VerifyError(str(exc)) from exc
    finally:
        if own_tmp:
            shutil.rmtree(workdir, ignore_errors=True)
    precisions = [outcome.precision[name] for name in ("original", "migrated")]
    if against is not None:  # the user's own tree is the migrated side
        precisions.reverse()
    outcome.notes += precision_notes(precisions)
    if options.emulate_cuda:
        outcome.notes.append(
            "CUDA was emulated on the CPU (--emulate-cuda): mixed precision ran on the CPU's "
            "kernels; `ampmigrate verify --device cuda` on a GPU machine compares the GPU's"
        )
    coverage = outcome.coverage
    if outcome.match and coverage is not None and coverage.sites and not coverage.ran:
        steps = outcome.comparisons[0].steps_compared
        outcome.inconclusive = _inconclusive_coverage(coverage, steps)
    return outcome


def _run_both(original: Side, migrated: Side, args: list[str], options: Options, workdir: Path):
    parallel = options.device != "cuda" and not options.nproc_per_node
    with ThreadPoolExecutor(max_workers=2 if parallel else 1) as pool:
        list(pool.map(lambda s: run_side(s, args, options, workdir), (original, migrated)))


def _compare_sides(
    original: Side, migrated: Side, tolerance: Tolerance, options: Options, where: str
) -> list[Comparison]:
    _check_side(original, options)
    if migrated.returncode == emulate.REFUSED_EXIT and options.emulate_cuda:
        _check_side(migrated, options)  # a call emulation refuses: an error, not a verdict
    if migrated.returncode != 0 and (failure := _environment_failure(migrated, where)):
        raise failure
    if migrated.returncode != 0 or migrated.timed_out or not migrated.traces:
        # The original trains and the migrated code does not: that is a divergence.
        return [_crashed(original.traces[0], migrated, tolerance, options)]
    _check_side(migrated, options)
    if len(original.traces) != len(migrated.traces):
        raise VerifyError("the two sides reported different numbers of ranks")
    return [compare(a, b, tolerance) for a, b in zip(original.traces, migrated.traces, strict=True)]


def _tolerance(exact: bool) -> Tolerance:
    return Tolerance(True) if exact else Tolerance(False, DEFAULT_RTOL, DEFAULT_ATOL)


def _migrate_files(root: Path, names: Iterable[str], unsafe: bool) -> dict[str, Migrated]:
    return {n: migrate_source((root / n).read_bytes(), str(root / n), unsafe) for n in names}


def _migrated_side(
    root: Path, mirror: Path, results: dict[str, Migrated], script_name: str, workdir: Path
) -> tuple[Side, list[Site]]:
    """A mirror of ``root`` holding the migrated files, and the side that runs it."""
    changed = {Path(n): r.new_source for n, r in results.items() if r.changed and not r.error}
    build_mirror(root, mirror, {**changed, Path(script_name): results[script_name].new_source})
    sites = [
        site
        for path in changed
        for site in fixed_sites(
            results[path.as_posix()].original,
            results[path.as_posix()].new_source,
            results[path.as_posix()].fixed,
            os.path.realpath(mirror / path),
            path.as_posix(),
        )
    ]
    watched = _write_sites(sites, workdir / f"sites-{mirror.name}.json")
    env = {**_copy_env(root, mirror), "AMPMIGRATE_SITES": str(watched)}
    return Side("migrated", mirror / script_name, env=env), sites


def _verify_migration(
    script: Path, args: list[str], options: Options, tolerance: Tolerance | None, workdir: Path
) -> Outcome:
    """Migrate the project modules the script imports into a mirror of the project and run it.

    Which modules a run imports is known for sure only after it ran (sys.path edits, the root
    on PYTHONPATH, editable installs), so the original side records it. Both sides start in
    parallel on a static guess; where the original imported a module the guess missed and a
    fix changes, the migrated side runs again on a mirror that has it."""
    root = find_root(script)
    script_name = script.relative_to(root).as_posix()
    unsafe = options.unsafe_fixes
    original = Side("original", script, env={"AMPMIGRATE_PROJECT": str(root)})
    original.env["AMPMIGRATE_SITES"] = _same_tracing(workdir)
    results = _migrate_files(root, guess_imports(script, root) | {script_name}, unsafe)
    migrated, sites, mirror = None, [], workdir / "migrated"
    if any(r.changed for r in results.values()):
        migrated, sites = _migrated_side(root, mirror, results, script_name, workdir)
        _run_both(original, migrated, args, options, workdir)
    else:
        run_side(original, args, options, workdir)
    _check_side(original, options)
    imported = _imported(original.traces, root) | {script_name}
    missed = _migrate_files(root, imported - results.keys(), unsafe)
    results.update(missed)
    if any(r.changed for r in missed.values()):  # the guess missed them: run the copy again
        for stale in workdir.glob("migrated.rank*.json"):
            stale.unlink()
        mirror = workdir / "migrated-imported"
        migrated, sites = _migrated_side(root, mirror, results, script_name, workdir)
        run_side(migrated, args, options, workdir)
    files = sorted(imported)
    if errors := [f"{n}: {results[n].error}" for n in files if results[n].error]:
        raise VerifyError("cannot migrate " + "; ".join(errors))
    fixed = [d for n in files for d in results[n].fixed]
    counts: dict[str, int] = {}
    for d in fixed:
        counts[d.code] = counts.get(d.code, 0) + 1
    migration = Migration(
        root=root,
        files=files,
        fixed=counts,
        all_safe=all(d.fix == "safe" for d in fixed),
        remaining=[
            f"{n}:{d.line}:{d.col}: {d.code} {d.message}"
            for n in files
            for d in results[n].remaining
        ],
        changed=[n for n in files if results[n].changed],
    )
    if not migration.changed:
        modules = len(files) - 1
        what = (
            f"{script_name} and the {modules} project module(s) it imports"
            if modules
            else script_name
        )
        reason = f"nothing was migrated: {what} hold(s) nothing a fix changes"
        if migration.remaining:
            reason += f"; {len(migration.remaining)} finding(s) need a manual change: "
            reason += "; ".join(migration.remaining[:5])
        return Outcome(
            [], original, Side("migrated", script), migration, [], options, inconclusive=reason
        )
    assert migrated is not None  # a changed imported file always has a migrated run
    _relativize(original, root)
    _relativize(migrated, mirror)
    tolerance = tolerance or _tolerance(migration.all_safe)
    comparisons = _compare_sides(original, migrated, tolerance, options, f"the copy of {root}")
    notes = []
    if migration.remaining:
        notes.append(f"{len(migration.remaining)} finding(s) remain unmigrated")
    sites = [s for s in sites if s.relative in imported]
    coverage = measure("rewritten sites", sites, _hits(migrated.traces))
    return Outcome(comparisons, original, migrated, migration, notes, options, coverage)


def _verify_pair(
    script: Path,
    other: Path,
    args: list[str],
    options: Options,
    tolerance: Tolerance | None,
    workdir: Path,
) -> Outcome:
    """``--migrated OTHER``: SCRIPT against a file migrated by hand; every changed line counts."""
    old, new = script.read_bytes(), other.read_bytes()
    real = os.path.realpath(other)
    sites = changed_sites(old, new, None, real, other.name)
    original, migrated = Side("original", script), Side("migrated", other)
    original.env["AMPMIGRATE_SITES"] = _same_tracing(workdir)
    migrated.env["AMPMIGRATE_SITES"] = str(_write_sites(sites, workdir / "sites.json"))
    if not sites:
        run_side(original, args, options, workdir)
        _check_side(original, options)
        reason = f"{other} and {script} do not differ: nothing to compare"
        return Outcome([], original, migrated, None, [], options, inconclusive=reason)
    _run_both(original, migrated, args, options, workdir)
    tolerance = tolerance or _tolerance(False)
    comparisons = _compare_sides(original, migrated, tolerance, options, str(other.parent))
    coverage = measure("changed lines", sites, _hits(migrated.traces))
    return Outcome(comparisons, original, migrated, None, [], options, coverage)


def _verify_against(
    script: Path,
    args: list[str],
    options: Options,
    tolerance: Tolerance | None,
    workdir: Path,
    rev: str,
) -> Outcome:
    """The working tree's SCRIPT (already migrated) against the project at git revision REV."""
    root = find_root(script)
    script_name = script.relative_to(root).as_posix()
    with worktree_at(root, rev) as tree:
        if not (tree / script_name).is_file():
            raise VerifyError(f"{script_name} does not exist at {rev}")
        sites, not_safe = [], {}
        for name in changed_files(root, rev):
            if not (root / name).is_file():
                continue  # deleted since REV: the working tree cannot import it
            old, new = file_at(root, rev, name) or b"", (root / name).read_bytes()
            fixed = migrate_source(old, str(name), unsafe=False)
            findings = {
                line
                for d in fixed.fixed + fixed.remaining
                for line in range(d.line, d.end_line + 1)
            }
            real = os.path.realpath(root / name)
            sites += changed_sites(old, new, findings, real, name.as_posix())
            not_safe[name.as_posix()] = amp_changes(fixed.new_source, new)
        original = Side("original", tree / script_name, env=_copy_env(root, tree))
        original.env["AMPMIGRATE_SITES"] = _same_tracing(workdir)
        migrated = Side("migrated", script, env={"AMPMIGRATE_PROJECT": str(root)})
        migrated.env["AMPMIGRATE_SITES"] = str(_write_sites(sites, workdir / "sites.json"))
        _run_both(original, migrated, args, options, workdir)
        _check_side(original, options)
        imported = _imported(original.traces, tree) | _imported(migrated.traces, root)
        _relativize(original, tree)
        _relativize(migrated, root)
    imported.add(script_name)
    sites = [s for s in sites if s.relative in imported]
    against = Against(
        rev,
        sorted(n for n in not_safe if n in imported),
        [f"{n}:{line}" for n in sorted(not_safe) if n in imported for line in not_safe[n]],
    )
    if not sites:
        reason = (
            f"no AMP line changed between {rev} and the working tree in {script_name} or the "
            "project modules it imports: both sides run the same AMP code"
        )
        return Outcome(
            [], original, migrated, None, [], options, inconclusive=reason, against=against
        )
    tolerance = tolerance or _tolerance(not against.not_safe)
    comparisons = _compare_sides(original, migrated, tolerance, options, f"the working tree {root}")
    coverage = measure("changed AMP lines", sites, _hits(migrated.traces))
    return Outcome(comparisons, original, migrated, None, [], options, coverage, against=against)


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
