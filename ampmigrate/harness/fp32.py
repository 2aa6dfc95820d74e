"""``verify --compare-fp32``: does mixed precision pay off for this script on this machine?

The same script runs twice through the harness: once with every autocast region and GradScaler
forced off (the float32 baseline) and once as written. The runs are sequential, never side by
side, so they do not compete for cores; on a GPU each step waits for the device before it is
timed. Reported: the median step time after warm-up, peak memory (CUDA max allocated where CUDA
ran, else the process's peak RSS) and how far the loss curves drift apart.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ampmigrate.doctor import cpu_info
from ampmigrate.harness.project import ProjectError, find_root
from ampmigrate.harness.verify import Options, Side, VerifyError, _check_side, _copy, run_side

NOISE = 0.05  # a speed ratio within 5 % of 1 is reported as no difference
_TIMER_FLOOR = 1e-3  # steps shorter than this are mostly timer and Python overhead


def percent(fraction: float) -> str:
    """A percentage with three significant digits: a 0.004 % difference is not "0.00%"."""
    value = fraction * 100
    return "0%" if value == 0 else f"{value:.3g}%"


@dataclass
class Measurement:
    median_step: float  # seconds
    steps_timed: int
    peak_memory: int  # bytes
    memory_kind: str
    losses: list[float]

    @classmethod
    def of(cls, trace: dict) -> Measurement:
        times = trace["step_times"]
        warmup = max(1, len(times) // 5) if len(times) > 1 else 0
        timed = times[warmup:]
        memory = trace.get("peak_memory", {})
        cuda = memory.get("cuda_max_allocated")
        return cls(
            median_step=statistics.median(timed) if timed else float("nan"),
            steps_timed=len(timed),
            peak_memory=cuda if cuda is not None else memory.get("max_rss", 0),
            memory_kind="CUDA max allocated" if cuda is not None else "process peak RSS",
            losses=[(s["losses"] or [float("nan")])[-1] for s in trace["steps"]],
        )


@dataclass
class Fp32Comparison:
    fp32: Measurement
    amp: Measurement
    fp32_side: Side
    amp_side: Side
    device: str  # "cuda (NVIDIA H200)" / "cpu (model name)"
    active: list[str]  # what mixed precision the as-written run really used

    @property
    def speedup(self) -> float:
        """fp32 step time over AMP step time: > 1 means AMP is faster."""
        return self.fp32.median_step / self.amp.median_step

    @property
    def loss_drift(self) -> tuple[float, float]:
        """Max absolute and relative difference of the per-step losses."""
        pairs = list(zip(self.fp32.losses, self.amp.losses, strict=False))
        absolute = max((abs(a - b) for a, b in pairs), default=0.0)
        relative = max((abs(a - b) / max(abs(a), 1e-12) for a, b in pairs), default=0.0)
        return absolute, relative

    def verdict(self) -> str:
        if not self.active:
            return (
                f"no mixed precision was active in the run as written on {self.device} (every "
                "autocast region and GradScaler was disabled), so both runs were float32: "
                "nothing to compare here"
            )
        ratio = self.speedup
        if ratio >= 1 + NOISE:
            speed = f"mixed precision is {ratio:.2f}x faster than float32"
        elif ratio <= 1 - NOISE:
            speed = f"mixed precision is {1 / ratio:.2f}x slower than float32"
        else:
            speed = f"mixed precision is as fast as float32 (within {NOISE:.0%})"
        memory = self.amp.peak_memory / max(self.fp32.peak_memory, 1) - 1
        absolute, relative = self.loss_drift
        text = (
            f"{speed} on {self.device}: median step {_ms(self.amp.median_step)} vs "
            f"{_ms(self.fp32.median_step)}; peak memory {memory:+.0%} ({self.amp.memory_kind}); "
            f"losses differ by at most {absolute:.3g} ({percent(relative)})"
        )
        if min(self.amp.median_step, self.fp32.median_step) < _TIMER_FLOOR:
            text += (
                "; steps take under 1 ms, so Python overhead dominates: measure a "
                "realistically sized model before deciding"
            )
        return text

    def table(self) -> str:
        rows = [
            ("", "float32", "as written"),
            ("median step", _ms(self.fp32.median_step), _ms(self.amp.median_step)),
            ("steps timed", str(self.fp32.steps_timed), str(self.amp.steps_timed)),
            ("peak memory", _mb(self.fp32.peak_memory), _mb(self.amp.peak_memory)),
            ("final loss", _num(self.fp32.losses), _num(self.amp.losses)),
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join(
            "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(
                zip(row, widths, strict=True)
            ))
            for row in rows
        )  # fmt: skip

    def to_dict(self) -> dict:
        absolute, relative = self.loss_drift
        return {
            "device": self.device,
            "active": self.active,
            "speedup": self.speedup if self.active else None,
            "fp32": self.fp32.__dict__,
            "amp": self.amp.__dict__,
            "loss_max_abs_diff": absolute,
            "loss_max_rel_diff": relative,
            "verdict": self.verdict(),
        }


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _num(losses: list[float]) -> str:
    return f"{losses[-1]:.6g}" if losses else "-"


def active_precision(trace: dict) -> list[str]:
    """'cuda autocast float16', 'GradScaler (cuda)': what was enabled, from the trace."""
    active = [
        f"{device} autocast {'/'.join(counts.get('dtypes', []))}"
        for device, counts in trace.get("autocast", {}).items()
        if counts.get("enabled")
    ]
    scaler = trace.get("scaler") or {}
    if scaler.get("enabled"):
        active.append(f"GradScaler ({scaler['device']})")
    return active


def compare_fp32(
    script: Path, args: list[str], options: Options, workdir: Path | None = None
) -> Fp32Comparison:
    if not script.is_file():
        raise VerifyError(f"{script}: no such script")
    own_tmp = workdir is None
    workdir = workdir or Path(tempfile.mkdtemp(prefix="ampmigrate-fp32-"))
    try:
        try:
            root = find_root(script, options.root)
        except ProjectError as exc:
            raise VerifyError(str(exc)) from exc
        name = script.resolve().relative_to(root).as_posix()
        # each run in a copy of the project of its own, as verify's sides (nothing lands in yours)
        fp32 = _copy(root, workdir / "fp32", {}).side(
            "fp32", name, {"AMPMIGRATE_FP32": "1", "AMPMIGRATE_SYNC": "1"}
        )
        amp = _copy(root, workdir / "amp", {}).side("amp", name, {"AMPMIGRATE_SYNC": "1"})
        for side in (fp32, amp):  # one after the other: timing needs the machine to itself
            run_side(side, args, options, workdir)
            _check_side(side, options)
    finally:
        if own_tmp:
            shutil.rmtree(workdir, ignore_errors=True)
    if leaked := active_precision(fp32.traces[0]):
        raise VerifyError(f"could not switch off mixed precision for the baseline: {leaked}")
    trace = amp.traces[0]
    environment = trace["environment"]
    on_gpu = trace.get("peak_memory", {}).get("cuda_max_allocated") is not None
    device = f"cuda ({environment['device_name']})" if on_gpu else f"cpu ({cpu_info()['model']})"
    return Fp32Comparison(
        fp32=Measurement.of(fp32.traces[0]),
        amp=Measurement.of(trace),
        fp32_side=fp32,
        amp_side=amp,
        device=device,
        active=active_precision(trace),
    )
