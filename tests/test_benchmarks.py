"""The benchmark scripts time what a user runs: ampmigrate installed as ``pip install`` leaves it,
finding what it should. A run that finds nothing on a tree with findings timed nothing (a source
checkout on the path without its rule files did exactly that). No timing is asserted."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT


def test_benchmark_times_the_installed_copy_and_it_finds_every_planted_use():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "benchmark.py"), "--synthetic", "300",
         "--repeat", "1", "--fix"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    planted = int(re.search(r"\(300 files, (\d+) contain", result.stdout).group(1))
    assert planted > 0
    line = next(x for x in result.stdout.splitlines() if x.startswith("findings per rule"))
    counts = {code: int(n) for n, code in re.findall(r"(\d+)\s+(AMP\d+)", line)}
    # each planted module uses the deprecated autocast and GradScaler (benchmark.AMP)
    assert counts == {"AMP101": planted, "AMP102": planted}
    for label in ("text scan", "ampmigrate check", "ampmigrate fix", "fix / check"):
        assert label in result.stdout
