"""Coverage counts the node a fix rewrote, not its line: an arm of a conditional expression that
never runs is "not run", though its line ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

LOOP = """\
import torch

cond = True
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
for _ in range(3):
    opt.zero_grad()
    ctx = (torch.cpu.amp.autocast(dtype=torch.bfloat16) if cond else torch.cuda.amp.autocast(dtype=torch.float16))
    with ctx:
        loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
"""  # noqa: E501 (one line on purpose: both arms share it)


def test_an_untaken_arm_of_a_conditional_expression_is_not_run(cli, tmp_path: Path):
    (tmp_path / "train.py").write_text(LOOP)
    report = tmp_path / "report"
    result = cli("verify", str(tmp_path / "train.py"), "--steps", "3", "--report", str(report))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "migration: 2 fixes (AMP101: 2)" in result.stdout
    assert "MATCH: 3 steps bit-for-bit; 1 of 2 rewritten sites ran" in result.stdout
    coverage = json.loads((report / "summary.json").read_text())["coverage"]
    assert coverage["ran"] == 1 and coverage["total"] == 2
    assert coverage["ran_sites"] == ["AMP101 train.py:10:12"]  # the cpu arm
    assert coverage["not_run"] == ["AMP101 train.py:10:70"]  # the cuda arm


def test_the_other_arm_taken_is_the_other_site(cli, tmp_path: Path):
    # The same loop taking the cuda arm cannot run here; --emulate-cuda runs it on the CPU.
    (tmp_path / "train.py").write_text(LOOP.replace("cond = True", "cond = False"))
    report = tmp_path / "report"
    result = cli(
        "verify", str(tmp_path / "train.py"), "--steps", "3", "--emulate-cuda",
        "--report", str(report),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 of 2 rewritten sites ran" in result.stdout
    coverage = json.loads((report / "summary.json").read_text())["coverage"]
    assert coverage["ran_sites"] == ["AMP101 train.py:10:70"]
