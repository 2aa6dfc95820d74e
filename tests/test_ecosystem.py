"""CI's slice of the ecosystem check (scripts/ecosystem.py): one real package, all invariants."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow


def test_ecosystem_slice_keeps_every_invariant(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ecosystem.py"), "--packages", "timm-0.9",
         "--cache", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    header, row = result.stdout.splitlines()[:2]
    assert header.split()[:6] == ["package", "files", "findings", "fixable", "changed", "errors"]
    columns = row.split()
    assert columns[0] == "timm-0.9" and int(columns[1]) > 200 and int(columns[2]) > 0
    assert columns[6:] == ["0"] * 6  # crashes ... style_lost
    # the findings are exactly the committed baseline's (update it with --update-baseline)
    assert "against the baseline" not in result.stdout, result.stdout
