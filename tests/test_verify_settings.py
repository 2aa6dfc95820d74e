"""`ampmigrate verify` migrates exactly what `ampmigrate fix` would: the same target torch (the
project's declared floor), --unsafe-fixes, configuration and noqa comments; and it says which
fixes it applied and which findings remain, by code and line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import FIXTURES

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

LOOP = """
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cpu.amp.GradScaler(init_scale=16.0)
x = torch.randn(8, 4)
for _ in range(3):
    opt.zero_grad()
    with torch.cpu.amp.autocast(dtype=torch.float16):{noqa}
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
"""


def project(tmp_path: Path, requirement: str = "", noqa: str = "", tool: str = "") -> Path:
    root = tmp_path / "proj"
    root.mkdir(parents=True)
    dependencies = f"dependencies = [{requirement!r}]\n" if requirement else ""
    (root / "pyproject.toml").write_text(
        f"[project]\nname = 'p'\nversion = '0'\n{dependencies}{tool}"
    )
    (root / "train.py").write_text(textwrap.dedent(LOOP).lstrip().replace("{noqa}", noqa))
    return root


def test_a_torch_1_9_floor_keeps_verify_from_applying_what_fix_grades_unsafe(cli, tmp_path):
    root = project(tmp_path, "torch>=1.9")
    fix = cli("fix", "--diff", str(root / "train.py"))
    assert "Would fix 0 findings in 0 files, 2 remaining (2 fixable with `--unsafe-fixes`)" in (
        fix.stderr
    )
    result = cli("verify", str(root / "train.py"), "--steps", "3")
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "settings: as `ampmigrate fix`: target-torch 1.9 (pyproject.toml: torch>=1.9), "
        "unsafe fixes off"
    ) in result.stdout
    assert "INCONCLUSIVE: nothing was migrated" in result.stdout
    unsafe = "its fix is unsafe here, so `fix` leaves it; --unsafe-fixes applies it"
    assert f"AMP102 train.py:6 ({unsafe}); AMP101 train.py:10 ({unsafe})" in result.stdout
    assert "MATCH" not in result.stdout
    assert (root / "train.py").read_text().count("torch.cpu.amp") == 2


def test_unsafe_fixes_and_a_newer_target_torch_apply_them_as_fix_would(cli, tmp_path):
    root = project(tmp_path, "torch>=2.0")
    unsafe = cli("verify", str(root / "train.py"), "--steps", "3", "--unsafe-fixes")
    assert unsafe.returncode == 0, unsafe.stdout + unsafe.stderr
    assert "migration: 2 fixes (AMP101: 1, AMP102: 1) in 1 of 1 project file" in unsafe.stdout
    assert "some unsafe" in unsafe.stdout and "unsafe fixes on" in unsafe.stdout
    assert "fixed: AMP102 train.py:6, AMP101 train.py:10" in unsafe.stdout
    assert "MATCH: 3 steps within tolerance" in unsafe.stdout  # unsafe fixes: not exact
    newer = cli("verify", str(root / "train.py"), "--steps", "3", "--target-torch", "2.4")
    assert newer.returncode == 0, newer.stdout + newer.stderr
    assert "target-torch 2.4 (--target-torch)" in newer.stdout and "all safe" in newer.stdout
    assert "MATCH: 3 steps bit-for-bit; 2 of 2 rewritten sites ran" in newer.stdout


def test_noqa_and_per_file_ignores_are_honoured(cli, tmp_path):
    root = project(tmp_path, noqa="  # noqa: AMP101")
    result = cli("verify", str(root / "train.py"), "--steps", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "migration: 1 fixes (AMP102: 1)" in result.stdout
    assert "fixed: AMP102 train.py:6\n" in result.stdout
    assert "1 of 1 rewritten sites ran" in result.stdout
    ignored = project(
        tmp_path / "b", tool="[tool.ampmigrate]\nper-file-ignores = { 'train.py' = ['AMP102'] }\n"
    )
    result = cli("verify", str(ignored / "train.py"), "--steps", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fixed: AMP101 train.py:10\n" in result.stdout


def test_the_findings_left_are_listed_by_code_and_line(cli):
    result = cli("verify", str(FIXTURES / "loops" / "project_train.py"), "--steps", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "note: 1 finding(s) remain unmigrated: AMP207 fixtures/loops/project_pkg/scaling.py:5 "
        "(no automatic fix: a manual change)"
    ) in result.stdout


def test_a_torch_2_0_floor_applies_what_fix_applies_and_lists_the_rest(cli, tmp_path):
    # torch.amp.autocast exists since 1.12 (AMP101 safe), torch.amp.GradScaler since 2.3
    # (AMP102 unsafe): verify makes exactly fix's one change and names the finding it left.
    root = project(tmp_path, "torch>=2.0")
    fix = cli("fix", "--diff", str(root / "train.py"))
    assert "Would fix 1 finding in 1 file, 1 remaining (1 fixable with `--unsafe-fixes`)" in (
        fix.stderr
    )
    result = cli("verify", str(root / "train.py"), "--steps", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "migration: 1 fixes (AMP101: 1) in 1 of 1 project file" in result.stdout
    assert "fixed: AMP101 train.py:10\n" in result.stdout
    assert "MATCH: 3 steps bit-for-bit; 1 of 1 rewritten sites ran" in result.stdout
    assert (
        "note: 1 finding(s) remain unmigrated: AMP102 train.py:6 (its fix is unsafe here, so "
        "`fix` leaves it; --unsafe-fixes applies it)"
    ) in result.stdout
