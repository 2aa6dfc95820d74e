"""The tree stays clean under the ruff configuration in pyproject.toml."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff") or shutil.which("ruff", path=str(ROOT / ".venv" / "bin"))
    command = [exe] if exe else [sys.executable, "-m", "ruff"]
    return subprocess.run([*command, *args], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize("args", [("check", "."), ("format", "--check", ".")])
def test_ruff_is_clean(args):
    result = _ruff(*args)
    assert result.returncode == 0, result.stdout + result.stderr
