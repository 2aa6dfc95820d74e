"""``ampmigrate verify``: run the original and the migrated script, compare their training.

The migrated side is produced in memory by the same engine run and settings ``fix`` uses
(project.py). Each side runs in a copy of its own of the script's project (small files copied,
large ones linked, directories real, so data paths still resolve and what a run writes stays in
its copy), from the user's working directory mapped into that copy, one side after the other
(``--parallel``: at once), in fresh interpreters through ``bootstrap.py`` with the same seed,
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ampmigrate.engine.discover import EXCLUDED_DIRS
from ampmigrate.findings import Diagnostic
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
    FixPlan,
    Migrated,
    ProjectError,
    build_mirror,
    changed_files,
    excluded,
    file_at,
    find_root,
    guess_imports,
    migrate_files,
    migrate_source,
    worktree_at,
)

BOOTSTRAP = Path(__file__).with_name("bootstrap.py")
# Traceback frames of the harness itself, dropped from what the user is shown.
_HARNESS_FRAMES = (f'  File "{BOOTSTRAP}"', '  File "<frozen runpy>"')
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-5


class VerifyError(Exception):
    """A reason to exit 2: the comparison could not be made. ``detail``: the end of the
    script's output (stdout and stderr)."""

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
    tracing: bool = True
    emulate_cuda: bool = False  # both sides on the CPU with CUDA emulated (emulate.py)
    parallel: bool = False  # run the two sides at once (they compete for cores)
    root: Path | None = None  # --root: the project root, instead of the one found
    plan: FixPlan | None = None  # fix's settings; None: every rule, safe fixes, no target torch


@dataclass
class Side:
    name: str
    script: Path
    env: dict[str, str] = field(default_factory=dict)  # on top of the harness's settings
    cwd: Path | None = None  # None: the user's working directory
    returncode: int = 0
    output: str = ""  # stdout and stderr, interleaved as the script wrote them
    timed_out: bool = False
    traces: list[dict] = field(default_factory=list)

    def output_tail(self, lines: int = 15) -> str:
        """The end of the script's output, without the harness's own traceback frames."""
        kept: list[str] = []
        in_frame = False
        for line in self.output.rstrip().splitlines():
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
    remaining: list[str]  # "AMP101 pkg/trainer.py:14 (why it was not fixed)"
    changed: list[str]  # the files a fix changed
    applied: list[str] = field(default_factory=list)  # "AMP101 pkg/trainer.py:14"
    settings: str = ""  # the fix settings used, in words
    excluded: list[str] = field(default_factory=list)  # imported files fix's config excludes


def outside_root(traces: list[dict], root: Path) -> str | None:
    """The source modules a run imported from outside the project root and no environment
    (another checkout, a parent folder on sys.path): verify does not migrate them; name them,
    and the --root that would hold them."""
    holders: dict[str, Path] = {}
    for trace in traces:
        for name, file in trace.get("outside_modules", {}).items():
            path = Path(file)
            holder = path.parent  # the directory that holds the top-level package or module
            for _ in range(name.count(".") + (path.name == "__init__.py")):
                holder = holder.parent
            holders.setdefault(name.split(".")[0], holder)
    if not holders:
        return None
    shown = [f"{top} ({holder / top})" for top, holder in sorted(holders.items())]
    more = f", and {len(shown) - 5} more" if len(shown) > 5 else ""
    text = (
        f"the run imported modules from outside the project root {root}, which verify does not "
        f"migrate: {', '.join(shown[:5])}{more}"
    )
    common = Path(os.path.commonpath([root, *holders.values()]))
    if common != Path(common.anchor):
        text += f"; to migrate them too, name a root that holds them: --root {common}"
    return text


def _not_fixed(d: Diagnostic) -> str:
    """Why ``fix`` leaves a finding: what the user can do about it."""
    if d.fix == "unsafe":
        return "its fix is unsafe here, so `fix` leaves it; --unsafe-fixes applies it"
    if d.fix == "safe":
        return "fixable: another fix overlapped it"
    return "no automatic fix: a manual change"


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


def _hits(traces: list[dict]) -> dict[str, list]:
    hits: dict[str, list] = {}
    for trace in traces:
        for path, spans in trace.get("spans_hit", {}).items():
            hits.setdefault(path, []).extend(spans)
    return hits


def _write_sites(sites: list[Site], path: Path) -> Path:
    watched: dict[str, set] = {}
    for site in sites:
        watched.setdefault(site.path, set()).update(site.spans)
    path.write_text(json.dumps({k: sorted(v) for k, v in watched.items()}), encoding="utf-8")
    return path


def _same_tracing(workdir: Path) -> str:
    """Sites for the original side: none, but the same line tracer runs, so that both sides run
    under the same conditions (a trace function changes what e.g. torch.compile does)."""
    return str(_write_sites([], workdir / "sites-original.json"))


def mapped_cwd(root: Path, copy: Path) -> tuple[Path | None, str | None]:
    """The user's working directory as it lies in ``copy``, so relative paths resolve there and
    what the script writes relative to it stays in the copy; (None, why) where it cannot be."""
    cwd = Path.cwd().resolve()
    if cwd != root and root not in cwd.parents:
        return None, (
            f"the working directory {cwd} is outside the project root {root}: both sides ran "
            "in it, so files the script writes relative to it are in it; run verify from "
            "inside the project (or name a root that holds it with --root)"
        )
    inside = copy / cwd.relative_to(root)
    if inside.is_symlink() or not inside.is_dir():
        return None, (
            f"the working directory {cwd} is not copied (an environment, a cache or a directory "
            "past the copy's size limit): both sides ran in it"
        )
    return inside, None


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
    env.pop("PYTHONPYCACHEPREFIX", None)  # bootstrap.py sets the run's own
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
        # No bytecode in the user's tree: none written until the script starts, then all of it
        # in the run's directory (bootstrap.py: bytecode_to_the_run).
        PYTHONDONTWRITEBYTECODE="1",
        AMPMIGRATE_PYCACHE=str(trace.parent / "pycache"),
        AMPMIGRATE_WRITE_BYTECODE="0" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "1",
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
            cwd=side.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=options.timeout,
            check=False,
        )
        side.returncode, side.output = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as exc:
        side.timed_out, side.returncode = True, -1
        out = exc.output
        side.output = out.decode(errors="replace") if isinstance(out, bytes) else out or ""
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


# A script's own refusal to run without a GPU: its message, or the check in its traceback.
_OWN_CUDA_CHECK = re.compile(
    r"(cuda|gpu)\b[^\n]{0,80}\b(not available|unavailable|is required|required|not found|"
    r"needed|no device)|\bno (cuda|gpu|nvidia)\b|(requires?|needs?) (a |an )?(cuda|gpu)\b|"
    r"cuda\.is_available\(\)",
    re.IGNORECASE,
)


def _asks_for_cuda(output: str) -> bool:
    return bool(_OWN_CUDA_CHECK.search(output))


def _cuda_here(options: Options) -> bool:
    """Whether the sides could see a CUDA device (only asked when a script failed)."""
    if options.device == "cpu":
        return False
    import torch

    return bool(torch.cuda.is_available())


def _check_side(side: Side, options: Options) -> None:
    """Turn a side that produced nothing comparable into a VerifyError."""
    label = f"{side.name} script ({side.script.name})"
    tail = side.output_tail()
    if side.timed_out:
        raise VerifyError(f"{label} timed out after {options.timeout:g} s", tail)
    if side.returncode == 3 and options.device == "cuda":
        raise VerifyError("--device cuda, but torch sees no CUDA device on this machine")
    if side.returncode == emulate.REFUSED_EXIT and options.emulate_cuda:
        refused = [line for line in side.output.splitlines() if emulate.PREFIX in line]
        if refused:
            raise VerifyError(f"{label}: {refused[-1][refused[-1].index(emulate.PREFIX) :]}", tail)
    if side.returncode != 0:
        hint = ""
        if not options.emulate_cuda and any(m in side.output for m in _NO_CUDA):
            hint = (
                "; it needs CUDA, which this machine lacks: rerun with --emulate-cuda to run "
                "both sides on the CPU with CUDA emulated"
            )
        elif not options.emulate_cuda and _asks_for_cuda(tail) and not _cuda_here(options):
            hint = (
                "; it stopped for want of a CUDA device (its own check), and this machine has "
                "none: --emulate-cuda runs both sides on the CPU with CUDA emulated "
                "(`torch.cuda.is_available()` is True there)"
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
    found = _MISSING.findall(side.output)
    if not found or found[-1].split(".")[0] in _MIGRATION_TARGETS:
        return None
    return VerifyError(
        f"the {side.name} side cannot import {found[-1]!r} in {where}, although the original "
        "side could: the copy of the project lacks it, so there is nothing to compare",
        side.output_tail(),
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
    emulated = [
        {**e, "kind": kind}
        for kind, entries in (("autocast", autocast), ("GradScaler", scalers))
        for e in entries
        if e["enabled"] and e.get("asked", e["device"]) != e["device"]
    ]
    return {
        "autocast": enabled,
        "autocast_steps": steps if enabled else 0,
        "grad_scaler": scaler,
        "disabled": disabled,
        "emulated": emulated,
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
            key = (e["by"], e["kind"], e.get("asked", e["device"]))
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


def emulation_notes(precision: dict, float32_only: bool) -> list[str]:
    """What --emulate-cuda changed, from what the script asked for; never a claim that mixed
    precision ran where nothing enabled it."""
    emulated = [
        f"{e['kind']} at {e['where']} ({e['asked']} -> {e['device']}"
        + (f", {e['dtype']})" if e.get("dtype") else ")")
        for e in precision.get("emulated", [])
    ]
    what = f": {'; '.join(emulated[:4])}" if emulated else ""
    if float32_only:
        notes = [
            "CUDA was emulated on the CPU (--emulate-cuda), but no autocast region or GradScaler "
            "was enabled on either side, so no mixed precision ran: only the float32 path was "
            "compared"
        ]
        if any(e["by"] == "script" for e in precision["disabled"]):
            notes.append(
                "under --emulate-cuda every tensor is on the CPU (`tensor.device.type` is "
                "'cpu'): a script that sets enabled= from a tensor's device turns mixed "
                "precision off here; `ampmigrate verify --device cuda` on a GPU machine runs it "
                "as written"
            )
        return notes
    return [
        f"CUDA was emulated on the CPU (--emulate-cuda){what}; mixed precision ran on the CPU's "
        "float16 kernels: `ampmigrate verify --device cuda` on a GPU machine compares the GPU's"
    ]


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

    def stopped_early(self) -> list[Side]:
        """The sides that failed, timed out or made fewer steps than the other: the verdict
        shows the end of their output, which usually says why."""
        steps = [
            max((len(t["steps"]) for t in side.traces), default=0)
            for side in (self.original, self.migrated)
        ]
        return [
            side
            for side, made in zip((self.original, self.migrated), steps, strict=True)
            if side.returncode != 0 or side.timed_out or (self.comparisons and made < max(steps))
        ]

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
        raise VerifyError(
            "torch is not installed: install it first (ampmigrate's `verify` extra lists it)"
        )
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
        outcome.notes += emulation_notes(precisions[0], outcome.float32_only)
    coverage = outcome.coverage
    if outcome.match and coverage is not None and coverage.sites and not coverage.ran:
        steps = outcome.comparisons[0].steps_compared
        outcome.inconclusive = _inconclusive_coverage(coverage, steps)
    return outcome


def _run_both(original: Side, migrated: Side, args: list[str], options: Options, workdir: Path):
    """One side after the other unless --parallel (GPU and torchrun runs: always in turn)."""
    parallel = options.parallel and options.device != "cuda" and not options.nproc_per_node
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
    if (
        migrated.returncode != 0
        or migrated.timed_out
        or not any(t["steps"] for t in migrated.traces)
    ):
        # The original trains and the migrated code does not: that is a divergence.
        return [_crashed(original.traces[0], migrated, tolerance, options)]
    _check_side(migrated, options)
    if len(original.traces) != len(migrated.traces):
        raise VerifyError("the two sides reported different numbers of ranks")
    return [compare(a, b, tolerance) for a, b in zip(original.traces, migrated.traces, strict=True)]


def _tolerance(exact: bool) -> Tolerance:
    return Tolerance(True) if exact else Tolerance(False, DEFAULT_RTOL, DEFAULT_ATOL)


@dataclass
class _Copy:
    """One side's own copy of the project: where it lies and how a side runs in it."""

    root: Path  # the original project root
    path: Path  # the copy
    cwd_note: str | None = None

    def side(self, name: str, script_name: str, env: dict[str, str]) -> Side:
        cwd, self.cwd_note = mapped_cwd(self.root, self.path)
        env = {**_copy_env(self.root, self.path), **env}
        return Side(name, self.path / script_name, env=env, cwd=cwd)


def _copy(root: Path, path: Path, files: dict[Path, bytes]) -> _Copy:
    build_mirror(root, path, files)
    return _Copy(root, path)


def _migrated_side(
    root: Path, mirror: Path, results: dict[str, Migrated], script_name: str, workdir: Path
) -> tuple[Side, list[Site], _Copy]:
    """A copy of ``root`` holding the migrated files, and the side that runs it."""
    changed = {Path(n): r.new_source for n, r in results.items() if r.changed and not r.error}
    copy = _copy(root, mirror, changed)
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
    return copy.side("migrated", script_name, {"AMPMIGRATE_SITES": str(watched)}), sites, copy


def _migration(
    root: Path, files: list[str], results: dict[str, Migrated], plan: FixPlan
) -> Migration:
    """What was migrated, in the user's terms: fixes by code, each site, what remains and why."""
    if errors := [f"{n}: {results[n].error}" for n in files if results[n].error]:
        raise VerifyError("cannot migrate " + "; ".join(errors))
    fixed = [(n, d) for n in files for d in results[n].fixed]
    counts: dict[str, int] = {}
    for _, d in fixed:
        counts[d.code] = counts.get(d.code, 0) + 1
    return Migration(
        root=root,
        files=files,
        fixed=counts,
        all_safe=all(d.fix == "safe" for _, d in fixed),
        remaining=[
            f"{d.code} {n}:{d.line} ({_not_fixed(d)})" for n in files for d in results[n].remaining
        ],
        changed=[n for n in files if results[n].changed],
        applied=[f"{d.code} {n}:{d.line}" for n, d in fixed],
        settings=plan.describe(),
        excluded=[n for n in files if results[n].excluded],
    )


def _verify_migration(
    script: Path, args: list[str], options: Options, tolerance: Tolerance | None, workdir: Path
) -> Outcome:
    """Migrate the project modules the script imports, as ``fix`` would, into a copy of the
    project, and run it beside another copy holding the original.

    Which modules a run imports is known for sure only after it ran (sys.path edits, the root
    on PYTHONPATH, editable installs), so the original side, run first, records it. With
    --parallel both sides start at once on a static guess; where the original imported a module
    the guess missed, the migrated side runs again on a copy that has it."""
    root = find_root(script, options.root)
    script_name = script.relative_to(root).as_posix()
    plan = options.plan or FixPlan.default()
    original_copy = _copy(root, workdir / "original", {})
    original = original_copy.side(
        "original", script_name, {"AMPMIGRATE_SITES": _same_tracing(workdir)}
    )
    results: dict[str, Migrated] = {}
    migrated, sites, copy = None, [], None
    if options.parallel:
        results = migrate_files(root, guess_imports(script, root) | {script_name}, plan)
        if any(r.changed for r in results.values()):
            migrated, sites, copy = _migrated_side(
                root, workdir / "migrated", results, script_name, workdir
            )
            _run_both(original, migrated, args, options, workdir)
    if migrated is None:
        run_side(original, args, options, workdir)
    _check_side(original, options)
    imported = _imported(original.traces, root) | {script_name}
    if imported - results.keys():  # not migrated yet (or the guess missed them)
        before = {n for n, r in results.items() if r.changed}
        results = migrate_files(root, imported | results.keys(), plan)
        now = {n for n in imported if results[n].changed}
        if now and (migrated is None or now - before):
            for stale in workdir.glob("migrated.rank*.json"):
                stale.unlink()
            mirror = workdir / ("migrated-imported" if migrated else "migrated")
            migrated, sites, copy = _migrated_side(root, mirror, results, script_name, workdir)
            run_side(migrated, args, options, workdir)
    files = sorted(imported)
    migration = _migration(root, files, results, plan)
    outside = outside_root(original.traces, root)
    notes = [n for n in (original_copy.cwd_note,) if n]
    if not migration.changed:
        modules = len(files) - 1
        what = (
            f"{script_name} and the {modules} project module(s) it imports"
            if modules
            else script_name
        )
        reason = f"nothing was migrated: {what} hold(s) nothing `fix` changes with these settings"
        if migration.remaining:
            reason += f"; {len(migration.remaining)} finding(s) `fix` leaves: "
            reason += "; ".join(migration.remaining[:5])
        if outside:
            reason += f"; {outside}"
        return Outcome(
            [], original, Side("migrated", script), migration, notes, options, inconclusive=reason
        )
    assert migrated is not None and copy is not None  # a changed imported file was run
    _relativize(original, original_copy.path)
    _relativize(migrated, copy.path)
    tolerance = tolerance or _tolerance(migration.all_safe)
    comparisons = _compare_sides(original, migrated, tolerance, options, f"the copy of {root}")
    if remaining := migration.remaining:
        more = f", and {len(remaining) - 10} more" if len(remaining) > 10 else ""
        notes.append(
            f"{len(remaining)} finding(s) remain unmigrated: {', '.join(remaining[:10])}{more}"
        )
    if outside:
        notes.append(outside)
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
    """``--migrated OTHER``: SCRIPT against a file migrated by hand; every changed line counts.
    Each runs in its own copy of SCRIPT's project (OTHER at its place there when it lies in the
    project, else as it is, from the copy's working directory)."""
    root = find_root(script, options.root)
    old, new = script.read_bytes(), other.read_bytes()
    original_copy = _copy(root, workdir / "original", {})
    original = original_copy.side(
        "original", script.resolve().relative_to(root).as_posix(),
        {"AMPMIGRATE_SITES": _same_tracing(workdir)},
    )  # fmt: skip
    real = other.resolve()
    inside = root in real.parents
    copy = _copy(root, workdir / "migrated", {real.relative_to(root): new} if inside else {})
    migrated = copy.side("migrated", real.relative_to(root).as_posix() if inside else "", {})
    if not inside:
        migrated.script = real
    sites = changed_sites(old, new, None, os.path.realpath(migrated.script), other.name)
    migrated.env["AMPMIGRATE_SITES"] = str(_write_sites(sites, workdir / "sites.json"))
    notes = [n for n in (original_copy.cwd_note,) if n]
    if not sites:
        run_side(original, args, options, workdir)
        _check_side(original, options)
        reason = f"{other} and {script} do not differ: nothing to compare"
        return Outcome([], original, migrated, None, notes, options, inconclusive=reason)
    _run_both(original, migrated, args, options, workdir)
    tolerance = tolerance or _tolerance(False)
    comparisons = _compare_sides(original, migrated, tolerance, options, str(other.parent))
    _relativize(original, original_copy.path)
    _relativize(migrated, copy.path)
    coverage = measure("changed lines", sites, _hits(migrated.traces))
    return Outcome(comparisons, original, migrated, None, notes, options, coverage)


def _verify_against(
    script: Path,
    args: list[str],
    options: Options,
    tolerance: Tolerance | None,
    workdir: Path,
    rev: str,
) -> Outcome:
    """The working tree's SCRIPT (already migrated) against the project at git revision REV;
    the working tree runs in a copy of its own, as the revision does in its worktree."""
    root = find_root(script, options.root)
    script_name = script.relative_to(root).as_posix()
    plan = options.plan or FixPlan.default()
    with worktree_at(root, rev) as tree:
        if not (tree / script_name).is_file():
            raise VerifyError(f"{script_name} does not exist at {rev}")
        sites, not_safe = [], {}
        copy = _copy(root, workdir / "working-tree", {})
        for name in changed_files(root, rev):
            if not (root / name).is_file():
                continue  # deleted since REV: the working tree cannot import it
            old, new = file_at(root, rev, name) or b"", (root / name).read_bytes()
            fixed = migrate_source(old, str(name), plan)
            findings = {
                line
                for d in fixed.fixed + fixed.remaining
                for line in range(d.line, d.end_line + 1)
            }
            real = os.path.realpath(copy.path / name)
            sites += changed_sites(old, new, findings, real, name.as_posix())
            not_safe[name.as_posix()] = amp_changes(fixed.new_source, new)
        cwd, cwd_note = mapped_cwd(root, tree)
        original = Side("original", tree / script_name, env=_copy_env(root, tree), cwd=cwd)
        original.env["AMPMIGRATE_SITES"] = _same_tracing(workdir)
        watched = str(_write_sites(sites, workdir / "sites.json"))
        migrated = copy.side("migrated", script_name, {"AMPMIGRATE_SITES": watched})
        _run_both(original, migrated, args, options, workdir)
        _check_side(original, options)
        imported = _imported(original.traces, tree) | _imported(migrated.traces, root)
        _relativize(original, tree)
        _relativize(migrated, copy.path)
    imported.add(script_name)
    notes = [n for n in (cwd_note,) if n]
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
            [], original, migrated, None, notes, options, inconclusive=reason, against=against
        )
    tolerance = tolerance or _tolerance(not against.not_safe)
    comparisons = _compare_sides(original, migrated, tolerance, options, f"the working tree {root}")
    coverage = measure("changed AMP lines", sites, _hits(migrated.traces))
    return Outcome(comparisons, original, migrated, None, notes, options, coverage, against=against)


def _crashed(original: dict, migrated: Side, tolerance: Tolerance, options: Options) -> Comparison:
    """The migrated run died: compare the steps it made; if they agree, the crash is the news."""
    partial = migrated.traces[0] if migrated.traces else {"steps": []}
    comparison = compare(original, {**original, **partial, "steps": partial["steps"]}, tolerance)
    steps = len(partial["steps"])
    if comparison.divergence is None or comparison.divergence.step >= steps:
        last = migrated.output_tail(1) or f"exit status {migrated.returncode}"
        if migrated.timed_out:
            what = f"timed out after {options.timeout:g} s"
        elif migrated.returncode == 0:
            what = f"stopped after {steps} step(s) (exit status 0): {last}"
        else:
            what = f"crashed: {last}"
        comparison.divergence = Divergence(steps, "migrated run", "completed", what)
    return comparison
