"""The notes say what really happened: the device the script asked for, what --emulate-cuda
changed, never that mixed precision ran where nothing enabled it; and a script that stops for
want of a GPU is told that --emulate-cuda exists."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

# AMP only where the data is on a GPU: under --emulate-cuda tensors are on the CPU, so the
# script itself turns autocast and the scaler off.
DEVICE_CHECK = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4).cuda()
use_amp = x.device.type == "cuda"
scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
for _ in range(3):
    opt.zero_grad()
    with torch.cuda.amp.autocast(enabled=use_amp):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
"""


def test_a_script_that_turns_amp_off_by_device_type_is_not_said_to_run_it(cli, tmp_path: Path):
    (tmp_path / "train.py").write_text(DEVICE_CHECK)
    result = cli("verify", str(tmp_path / "train.py"), "--steps", "3", "--emulate-cuda")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH: 3 steps bit-for-bit; 2 of 2 rewritten sites ran; float32 path only" in (
        result.stdout
    )
    # the device the script asked for, not the one emulation gave it
    assert "note: the script disabled cuda GradScaler itself (enabled=False at train.py:8)" in (
        result.stdout
    )
    assert "note: the script disabled cuda autocast itself (enabled=False at train.py:11)" in (
        result.stdout
    )
    assert "disabled cpu" not in result.stdout
    assert "so no mixed precision ran: only the float32 path was compared" in result.stdout
    assert "`tensor.device.type` is 'cpu'" in result.stdout
    assert "mixed precision ran on the CPU" not in result.stdout


def test_the_emulation_note_says_what_it_turned_into_what(cli, tmp_path: Path):
    (tmp_path / "train.py").write_text(DEVICE_CHECK.replace('x.device.type == "cuda"', "True"))
    result = cli("verify", str(tmp_path / "train.py"), "--steps", "3", "--emulate-cuda")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "autocast enabled (float16, cpu) in 3 steps, GradScaler active" in result.stdout
    assert (
        "note: CUDA was emulated on the CPU (--emulate-cuda): autocast at train.py:11 "
        "(cuda -> cpu, float16); GradScaler at train.py:8 (cuda -> cpu); mixed precision ran "
        "on the CPU's float16 kernels"
    ) in result.stdout


@pytest.mark.parametrize(
    "check",
    [
        'raise SystemExit("No CUDA device found: this script needs a GPU")',
        "assert torch.cuda.is_available()",
        'raise RuntimeError("a GPU is required for training")',
    ],
)
def test_a_script_that_refuses_to_run_without_a_gpu_is_told_about_emulation(
    cli, tmp_path: Path, check
):
    guard = f"if not torch.cuda.is_available():\n    {check}\n" if "raise" in check else check
    (tmp_path / "train.py").write_text(
        DEVICE_CHECK.replace("torch.manual_seed(0)\n", f"{guard}\ntorch.manual_seed(0)\n")
    )
    result = cli("verify", str(tmp_path / "train.py"), "--steps", "3")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "it stopped for want of a CUDA device (its own check)" in result.stderr
    assert "--emulate-cuda runs both sides on the CPU" in result.stderr


def test_an_unrelated_crash_gets_no_emulation_hint(cli, tmp_path: Path):
    (tmp_path / "train.py").write_text('raise ValueError("dataset not found: /data/x.bin")\n')
    result = cli("verify", str(tmp_path / "train.py"), "--steps", "3")
    assert result.returncode == 2
    assert "emulate" not in result.stderr
