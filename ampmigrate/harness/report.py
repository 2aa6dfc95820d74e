"""What ``verify --report DIR`` leaves behind: both traces, a summary and a plot."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from ampmigrate.harness.fp32 import Fp32Comparison
from ampmigrate.harness.verify import Outcome

PLOT_HINT = "no plot drawn: matplotlib is not installed (`pip install matplotlib`)"


def missing_plot() -> str | None:
    """The one line to print when the plot cannot be drawn here, else None."""
    try:
        found = importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        found = False
    if found:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            found = False
    return None if found else PLOT_HINT


def summary(outcome: Outcome, require_amp: bool = False) -> dict:
    trace = outcome.original.traces[0] if outcome.original.traces else {}
    if outcome.inconclusive is not None:
        verdict, lines = "inconclusive", [f"INCONCLUSIVE: {outcome.inconclusive}"]
    else:
        verdict = "match" if outcome.match else "mismatch"
        lines = [outcome.verdict(c) for c in outcome.comparisons]
    return {
        "verdict": verdict,
        "verdict_lines": lines,
        "exit_status": outcome.exit_status(require_amp),
        "coverage": None if outcome.coverage is None else outcome.coverage.to_dict(),
        "precision": outcome.precision,
        "float32_only": outcome.float32_only,
        "comparisons": [c.to_dict() for c in outcome.comparisons],
        "notes": outcome.notes,
        "migration": None
        if outcome.migration is None
        else {
            "project_root": str(outcome.migration.root),
            "files": outcome.migration.files,
            "changed": outcome.migration.changed,
            "fixed": outcome.migration.fixed,
            "all_fixes_safe": outcome.migration.all_safe,
            "remaining": outcome.migration.remaining,
            "applied": outcome.migration.applied,
            "settings": outcome.migration.settings,
            "excluded": outcome.migration.excluded,
        },
        "against": None
        if outcome.against is None
        else {
            "rev": outcome.against.rev,
            "files": outcome.against.files,
            "not_safe": outcome.against.not_safe,
        },
        "options": {
            "steps": outcome.options.steps,
            "seed": outcome.options.seed,
            "threads": outcome.options.threads,
            "device": outcome.options.device,
            "nproc_per_node": outcome.options.nproc_per_node,
            "emulate_cuda": outcome.options.emulate_cuda,
            "parallel": outcome.options.parallel,
            "root": None if outcome.options.root is None else str(outcome.options.root),
        },
        "environment": trace.get("environment", {}),
    }


def write(outcome: Outcome, directory: Path, require_amp: bool = False) -> list[Path]:
    """Traces and summary.json always; loss.png where matplotlib is installed."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for side in (outcome.original, outcome.migrated):
        for rank, trace in enumerate(side.traces):
            suffix = f".rank{rank}" if len(side.traces) > 1 else ""
            path = directory / f"trace_{side.name}{suffix}.json"
            path.write_text(json.dumps(trace, indent=1), encoding="utf-8")
            written.append(path)
    path = directory / "summary.json"
    path.write_text(
        json.dumps(summary(outcome, require_amp), indent=2, default=str), encoding="utf-8"
    )
    written.append(path)
    if outcome.original.traces and outcome.migrated.traces and not missing_plot():
        written.append(plot(outcome, directory / "loss.png"))
    return written


def _series(trace: dict, name: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for step in trace["steps"]:
        value = (step["losses"] or [None])[-1] if name == "loss" else step.get(name)
        if value is not None:
            xs.append(step["step"])
            ys.append(value)
    return xs, ys


def plot(outcome: Outcome, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, b = outcome.original.traces[0], outcome.migrated.traces[0]
    fig, (loss_ax, scale_ax, diff_ax) = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for trace, label, style in ((a, "original", "-"), (b, "migrated", "--")):
        loss_ax.plot(*_series(trace, "loss"), style, label=label)
        xs, ys = _series(trace, "scale")
        if ys:
            scale_ax.step(xs, ys, style, where="post", label=label)
    loss_ax.set_ylabel("loss")
    loss_ax.legend()
    verdict = "match" if outcome.match else "MISMATCH"
    if outcome.inconclusive is not None:
        verdict = "inconclusive"
    tolerance = outcome.comparisons[0].tolerance.describe() if outcome.comparisons else ""
    loss_ax.set_title(f"ampmigrate verify: {verdict} ({tolerance})")
    scale_ax.set_ylabel("loss scale")
    if scale_ax.has_data():
        scale_ax.set_yscale("log", base=2)
        scale_ax.legend()
    else:
        scale_ax.text(0.5, 0.5, "no enabled GradScaler", ha="center", transform=scale_ax.transAxes)
    (xa, ya), (_, yb) = _series(a, "loss"), _series(b, "loss")
    n = min(len(ya), len(yb))
    diff_ax.plot(xa[:n], [abs(x - y) for x, y in zip(ya[:n], yb[:n], strict=True)], ".-")
    diff_ax.set_ylabel("|loss difference|")
    diff_ax.set_xlabel("optimizer step")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_fp32(result: Fp32Comparison, directory: Path) -> list[Path]:
    """``verify --compare-fp32 --report DIR``: both traces, the summary and a two-panel plot."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for side in (result.fp32_side, result.amp_side):
        path = directory / f"trace_{side.name}.json"
        path.write_text(json.dumps(side.traces[0], indent=1), encoding="utf-8")
        written.append(path)
    path = directory / "summary.json"
    path.write_text(json.dumps(result.to_dict(), indent=2), encoding="utf-8")
    written.append(path)
    if missing_plot():
        return written

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, time_ax) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for side, label, style in ((result.fp32_side, "float32", "-"), (result.amp_side, "AMP", "--")):
        trace = side.traces[0]
        loss_ax.plot(*_series(trace, "loss"), style, label=label)
        times = trace["step_times"]
        time_ax.plot(range(len(times)), [t * 1e3 for t in times], style, label=label)
    loss_ax.set_ylabel("loss")
    loss_ax.legend()
    loss_ax.set_title(f"ampmigrate verify --compare-fp32 on {result.device}", fontsize=9)
    time_ax.set_ylabel("step time (ms)")
    time_ax.set_yscale("log")
    time_ax.set_xlabel("optimizer step")
    time_ax.legend()
    fig.tight_layout()
    path = directory / "fp32.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
    return written
