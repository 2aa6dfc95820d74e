"""`ampmigrate verify --compare-fp32`: the baseline really is float32, the measurements are
reported, and the verdict says what was measured and nothing more."""

from __future__ import annotations

import json

import pytest

from ampmigrate.harness.fp32 import Fp32Comparison, Measurement, percent
from ampmigrate.harness.verify import Side

from conftest import FIXTURES

LOOPS = FIXTURES / "loops"


def _measured(step: float, memory: int, losses: list[float]) -> Measurement:
    return Measurement(step, 10, memory, "process peak RSS", losses)


def _comparison(fp32_step: float, amp_step: float, active=("cpu autocast bfloat16",)):
    return Fp32Comparison(
        fp32=_measured(fp32_step, 200 * 2**20, [1.0, 0.5]),
        amp=_measured(amp_step, 150 * 2**20, [1.0, 0.51]),
        fp32_side=Side("fp32", LOOPS / "x.py"),
        amp_side=Side("amp", LOOPS / "x.py"),
        device="cuda (a GPU)",
        active=list(active),
    )


@pytest.mark.parametrize(
    ("fp32_step", "amp_step", "expected"),
    [
        (0.030, 0.010, "mixed precision is 3.00x faster than float32 on cuda (a GPU)"),
        (0.010, 0.020, "mixed precision is 2.00x slower than float32"),
        (0.010, 0.0102, "mixed precision is as fast as float32 (within 5%)"),
    ],
)
def test_verdict_states_the_measured_ratio(fp32_step, amp_step, expected):
    verdict = _comparison(fp32_step, amp_step).verdict()
    assert verdict.startswith(expected)
    assert "peak memory -25% (process peak RSS)" in verdict
    assert "losses differ by at most 0.01 (2%)" in verdict
    assert "under 1 ms" not in verdict


def test_a_small_loss_difference_keeps_its_digits():
    comparison = _comparison(0.03, 0.01)
    comparison.amp.losses = [1.0, 0.50002]  # 0.004 % of 0.5
    assert "losses differ by at most 2e-05 (0.004%)" in comparison.verdict()
    assert percent(0.0076) == "0.76%" and percent(0.0) == "0%" and percent(0.12345) == "12.3%"


def test_verdict_warns_when_steps_are_too_short_to_time():
    assert "under 1 ms" in _comparison(0.0004, 0.0008).verdict()


def test_verdict_refuses_to_judge_when_nothing_was_mixed_precision():
    verdict = _comparison(0.01, 0.01, active=()).verdict()
    assert "no mixed precision was active" in verdict and "faster" not in verdict


def test_options_that_mean_another_mode_are_refused(cli):
    result = cli("verify", str(LOOPS / "bf16_cpu_scaler.py"), "--compare-fp32", "--exact")
    assert result.returncode == 2
    assert "--compare-fp32 does not take --exact" in result.stderr


torch = pytest.importorskip("torch")


@pytest.mark.torch
def test_cpu_loop_is_measured_against_a_real_float32_baseline(cli, tmp_path):
    result = cli(
        "verify", str(LOOPS / "bf16_cpu_scaler.py"), "--compare-fp32", "--report", str(tmp_path)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "median step" in result.stdout and "peak memory" in result.stdout
    assert "active in the run as written: cpu autocast bfloat16, GradScaler (cpu)" in result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["speedup"] > 0 and summary["fp32"]["peak_memory"] > 0
    assert summary["device"].startswith("cpu")
    fp32 = json.loads((tmp_path / "trace_fp32.json").read_text())
    amp = json.loads((tmp_path / "trace_amp.json").read_text())
    assert fp32["autocast"]["cpu"]["enabled"] == 0 and fp32["scaler"]["enabled"] is False
    assert amp["autocast"]["cpu"]["enabled"] == 20 and amp["scaler"]["enabled"] is True
    # bfloat16 really ran on one side only: the curves differ a little, not a lot
    assert 0 < summary["loss_max_abs_diff"] < 0.01
    assert (tmp_path / "fp32.png").stat().st_size > 10_000


@pytest.mark.torch
def test_positional_enabled_flags_are_switched_off_too(cli, tmp_path):
    script = tmp_path / "positional.py"
    script.write_text(
        """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", 1024.0, 2.0, 0.5, 2000, True)
x = torch.randn(16, 8)
for _ in range(5):
    with torch.autocast("cpu", torch.bfloat16, True):
        loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
"""
    )
    result = cli("verify", str(script), "--compare-fp32", "--report", str(tmp_path / "r"))
    assert result.returncode == 0, result.stdout + result.stderr
    fp32 = json.loads((tmp_path / "r" / "trace_fp32.json").read_text())
    assert fp32["autocast"]["cpu"]["enabled"] == 0 and fp32["scaler"]["enabled"] is False


@pytest.mark.torch
def test_cuda_amp_on_a_cpu_machine_is_not_judged(cli):
    result = cli("verify", str(LOOPS / "cuda_api_on_cpu.py"), "--compare-fp32")
    assert result.returncode == 2
    assert "no mixed precision was active" in result.stdout
