"""Per-step cost of verify's tracing on the fixture loops (not a test; prints a table).

    python scripts/verify_overhead.py [--repeat 5]

Each loop runs through the bootstrap twice per repeat: traced (every hook verify installs) and
untraced (a bare optimizer-step timer). The overhead is the ratio of median step times, with the
first two steps of each run dropped as warm-up.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from ampmigrate.harness.verify import Options, Side, run_side

LOOPS = Path(__file__).resolve().parent.parent / "fixtures" / "loops"


def median_step(script: Path, tracing: bool, repeat: int, workdir: Path) -> float:
    medians = []
    for i in range(repeat):
        side = Side(f"{script.stem}-{tracing}-{i}", script)
        run_side(side, [], Options(steps=0, tracing=tracing), workdir)
        if side.returncode != 0 or not side.traces:
            raise SystemExit(f"{script.name} failed:\n{side.output_tail()}")
        medians.append(statistics.median(side.traces[0]["step_times"][2:]))
    return statistics.median(medians)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'loop':<24} {'untraced ms/step':>17} {'traced ms/step':>15} {'overhead':>9}")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for script in sorted(LOOPS.glob("[!_]*.py")):
            if script.name == "ddp_loop.py":
                continue  # one process here; its per-step cost is the same hooks
            base = median_step(script, False, args.repeat, Path(tmp))
            traced = median_step(script, True, args.repeat, Path(tmp))
            ratios.append(traced / base)
            print(f"{script.name:<24} {base * 1e3:17.3f} {traced * 1e3:15.3f} "
                  f"{(traced / base - 1) * 100:8.1f}%")  # fmt: skip
    print(f"median overhead: {(statistics.median(ratios) - 1) * 100:.1f}%")


if __name__ == "__main__":
    main()
