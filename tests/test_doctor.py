"""`ampmigrate doctor`: machine facts and the advice that follows from them."""

from __future__ import annotations

import json

import pytest

from ampmigrate import doctor


def gpu(capability: str) -> dict:
    major = int(capability.split(".")[0])
    return {"index": 0, "name": "GPU", "compute_capability": capability,
            "tensor_cores": major >= 7, "bf16": major >= 8}  # fmt: skip


@pytest.mark.parametrize(
    ("gpus", "flags", "device", "use"),
    [
        ([gpu("9.0")], [], "cuda", "bf16 autocast without a GradScaler"),
        ([gpu("7.5")], [], "cuda", "fp16 autocast with a GradScaler"),
        ([gpu("6.0")], ["amx_bf16"], "cuda", "float32"),  # P100-class: little to gain
        ([gpu("6.1"), gpu("8.6")], [], "cuda", "bf16"),  # the best GPU decides
        ([], ["avx512f", "amx_tile", "amx_bf16"], "cpu", "bf16 autocast"),
        ([], ["avx512f", "avx512_bf16"], "cpu", "bf16 CPU autocast, after measuring"),
        ([], ["avx2"], "cpu", "float32"),
    ],
)
def test_recommendation(gpus, flags, device, use):
    advice = doctor.recommend(gpus, {"model": "x", "flags": flags})
    assert advice["device"] == device
    assert advice["use"].startswith(use)
    assert advice["reason"]


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Example Xeon\nflags\t\t: fpu avx2 avx512f amx_bf16 sse\n"
    )
    info = doctor.cpu_info(cpuinfo)
    assert info == {"model": "Example Xeon", "flags": ["avx2", "avx512f", "amx_bf16"]}
    assert doctor.cpu_info(tmp_path / "missing")["flags"] == []


def test_without_torch_it_says_so():
    report = doctor.collect(probe_torch=False)
    assert report["torch"] is None and report["gpus"] == []
    assert "torch is not installed" in report["notes"][0]
    assert report["recommendation"]["device"] == "cpu"
    assert "torch       not installed" in doctor.render(report)


def test_doctor_on_this_machine(cli):
    torch = pytest.importorskip("torch")
    report = json.loads(cli("doctor", "--json").stdout)
    assert report["torch"] == torch.__version__
    assert report["cuda_available"] == torch.cuda.is_available()
    assert len(report["gpus"]) == torch.cuda.device_count()
    assert set(report["cpu"]["flags"]) <= set(doctor.CPU_FLAGS)
    expected = doctor.recommend(report["gpus"], report["cpu"])
    assert report["recommendation"] == expected
    text = cli("doctor").stdout
    assert f"torch       {torch.__version__}" in text and "measure" in text
