"""Migrated training loops run with torch's AMP deprecation warnings as errors and print exactly
what the originals print (old and new forms are bit-identical on CPU, see the torch reference)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import FIXTURES

pytest.importorskip("torch")
# (one worker runs the whole file: its module-scoped fixture runs once)
pytestmark = [pytest.mark.torch, pytest.mark.xdist_group("execution")]

LOOPS = FIXTURES / "loops"
SCRIPTS = sorted(p.name for p in LOOPS.glob("*.py") if not p.name.startswith("_"))
# Only torch's AMP deprecations (torch.cuda.amp / torch.cpu.amp classes and the autocast state
# functions) are caught: "error" makes them fatal, "always" counts them.
RUNNER = """
import os, runpy, sys, warnings
mode, script = sys.argv[1], sys.argv[2]
seen = []
warnings.simplefilter("ignore")
for category in (FutureWarning, DeprecationWarning):
    warnings.filterwarnings(
        mode, message=r"(?s).*(torch\\.(cuda|cpu)\\.amp|autocast).*", category=category
    )
warnings.showwarning = lambda *args, **kwargs: seen.append(args[0])
sys.argv = [script]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
try:
    runpy.run_path(script, run_name="__main__")
finally:
    print(f"AMP deprecation warnings: {len(seen)}", file=sys.stderr)
"""


def _run(script: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", RUNNER, mode, str(script)],
        capture_output=True,
        text=True,
        cwd=script.parent,
        timeout=300,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, str], subprocess.CompletedProcess]:
    """Every loop, original (warnings counted) and migrated (warnings fatal), run in parallel."""
    target = tmp_path_factory.mktemp("loops") / "loops"
    shutil.copytree(LOOPS, target)
    # The API migration (AMP1xx). The CPU loops pair a GradScaler with bfloat16 on purpose, to
    # exercise the scaler without a GPU, which AMP207 rightly reports.
    fixed = subprocess.run(
        [sys.executable, "-m", "ampmigrate", "fix", "--select", "AMP1", str(target)],
        capture_output=True,
        text=True,
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr  # safe fixes leave nothing
    jobs = [("original", n, LOOPS / n, "always") for n in SCRIPTS]
    jobs += [("migrated", n, target / n, "error") for n in SCRIPTS]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = pool.map(lambda job: _run(job[2], job[3]), jobs)
        return {(side, name): r for (side, name, _, _), r in zip(jobs, results, strict=True)}


def test_loops_exist():
    assert len(SCRIPTS) >= 7


@pytest.mark.parametrize("name", SCRIPTS)
def test_migrated_loop_prints_the_same_without_deprecation_warnings(name, runs):
    original, new = runs[("original", name)], runs[("migrated", name)]
    assert original.returncode == 0, original.stderr[-2000:]
    assert "AMP deprecation warnings: 0" not in original.stderr  # the old API really warned
    assert new.returncode == 0, new.stderr[-2000:]
    assert "AMP deprecation warnings: 0" in new.stderr
    assert new.stdout == original.stdout
    assert "step=" in new.stdout
