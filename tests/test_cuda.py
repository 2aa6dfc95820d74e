"""CUDA-only checks: skipped on a machine without a GPU (CI and this project's dev machines).

On a GPU machine they compare the real fp16/bf16 CUDA path of migrated code, which a CPU-only
run cannot (torch disables CUDA autocast and GradScaler there).
"""

from __future__ import annotations

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch,
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_cuda_example_verifies_on_the_gpu(cli):
    result = cli("verify", str(FIXTURES / "example_project" / "train.py"), "--device", "cuda")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH: 20 steps bit-for-bit; " in result.stdout
    assert "autocast enabled (float16, cuda) in 20 steps, GradScaler active" in result.stdout
    assert "torch disabled" not in result.stdout


def test_cuda_autocast_and_scaler_are_enabled_after_migration():
    scaler = torch.amp.GradScaler("cuda")
    with torch.amp.autocast("cuda", dtype=torch.float16):
        y = torch.ones(4, 4, device="cuda") @ torch.ones(4, 4, device="cuda")
    assert scaler.is_enabled() and y.dtype == torch.float16
