"""Compare two training traces step by step and say where, if anywhere, they part."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Tolerance:
    exact: bool
    rtol: float = 0.0
    atol: float = 0.0

    def describe(self) -> str:
        if self.exact:
            return "bit-for-bit (every loss's float.hex must match)"
        return f"|a - b| <= {self.atol:g} + {self.rtol:g} * |a| for losses; scaler state exact"

    def close(self, a: float, b: float) -> bool:
        if self.exact:
            return a.hex() == b.hex()
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= self.atol + self.rtol * abs(a)


@dataclass
class Divergence:
    step: int
    field: str
    original: object
    migrated: object


@dataclass
class Comparison:
    tolerance: Tolerance
    steps_compared: int
    divergence: Divergence | None
    max_abs: float
    max_rel: float
    notes: list[str] = field(default_factory=list)

    @property
    def match(self) -> bool:
        return self.divergence is None

    def to_dict(self) -> dict:
        out = asdict(self)
        out["match"] = self.match
        out["tolerance"]["description"] = self.tolerance.describe()
        return out


_SCALER_FIELDS = ("scale", "growth_tracker", "skipped")


def compare(original: dict, migrated: dict, tolerance: Tolerance) -> Comparison:
    a_steps, b_steps = original["steps"], migrated["steps"]
    max_abs = max_rel = 0.0
    divergence: Divergence | None = None
    for a, b in zip(a_steps, b_steps, strict=False):
        step = a["step"]
        if len(a["losses"]) != len(b["losses"]):
            divergence = divergence or Divergence(
                step, "number of losses", len(a["losses"]), len(b["losses"])
            )
        for x, y in zip(a["losses"], b["losses"], strict=False):
            diff = abs(x - y)
            if not math.isnan(diff):
                max_abs = max(max_abs, diff)
                max_rel = max(max_rel, diff / abs(x) if x else (0.0 if diff == 0 else math.inf))
            if divergence is None and not tolerance.close(x, y):
                divergence = Divergence(step, "loss", x, y)
        for name in _SCALER_FIELDS:  # the scaler must behave identically in every mode
            if divergence is None and a.get(name) != b.get(name):
                divergence = Divergence(step, name, a.get(name), b.get(name))
    compared = min(len(a_steps), len(b_steps))
    if divergence is None and len(a_steps) != len(b_steps):
        divergence = Divergence(compared, "number of steps", len(a_steps), len(b_steps))
    if divergence is None and original.get("scaler_state") != migrated.get("scaler_state"):
        divergence = Divergence(
            compared, "final scaler state_dict", original["scaler_state"], migrated["scaler_state"]
        )
    if divergence is None:
        divergence = _compare_parameters(original, migrated, tolerance, compared)
    return Comparison(tolerance, compared, divergence, max_abs, max_rel)


def _compare_parameters(original, migrated, tolerance, step) -> Divergence | None:
    if tolerance.exact:
        a, b = original.get("param_checksum"), migrated.get("param_checksum")
        return None if a == b else Divergence(step, "parameter checksum", a, b)
    a, b = original.get("param_norms", []), migrated.get("param_norms", [])
    if len(a) != len(b) or not all(tolerance.close(x, y) for x, y in zip(a, b, strict=True)):
        return Divergence(step, "parameter norms", a, b)
    return None


def table(original: dict, migrated: dict, comparison: Comparison, limit: int = 12) -> str:
    """The steps worth reading: around the first divergence, else the first and last few."""
    a_steps, b_steps = original["steps"], migrated["steps"]
    count = max(len(a_steps), len(b_steps))
    if comparison.divergence is not None:
        first = max(0, comparison.divergence.step - limit // 2)
        shown = list(range(first, min(count, first + limit)))
    elif count <= limit:
        shown = list(range(count))
    else:
        shown = list(range(limit // 2)) + list(range(count - limit // 2, count))
    header = (
        f"{'step':>5}  {'loss (original)':>16}  {'loss (migrated)':>16}  {'|diff|':>9}  "
        f"{'scale (orig/migr)':>25}  {'skipped':>11}"
    )
    lines = [header, "-" * len(header)]
    previous = None
    for i in shown:
        if previous is not None and i != previous + 1:
            lines.append(f"{'...':>5}")
        previous = i
        a = a_steps[i] if i < len(a_steps) else None
        b = b_steps[i] if i < len(b_steps) else None
        la = a["losses"][-1] if a and a["losses"] else None
        lb = b["losses"][-1] if b and b["losses"] else None
        diff = f"{abs(la - lb):9.2e}" if la is not None and lb is not None else f"{'-':>9}"
        scale = f"{_fmt(a, 'scale')}/{_fmt(b, 'scale')}"
        skipped = f"{_fmt(a, 'skipped')}/{_fmt(b, 'skipped')}"
        marker = (
            "  <-- first divergence"
            if comparison.divergence and comparison.divergence.step == i
            else ""
        )
        lines.append(
            f"{i:>5}  {_num(la):>16}  {_num(lb):>16}  {diff}  {scale:>25}  {skipped:>11}{marker}"
        )
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.9g}"


def _fmt(step: dict | None, name: str) -> str:
    if step is None:
        return "-"
    value = step.get(name)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:g}"
