"""``ampmigrate doctor``: what this machine offers for mixed precision, and what to use.

The advice follows the PyTorch and TensorFlow guidance: tensor cores (compute capability 7.0+)
make fp16 pay off on NVIDIA GPUs, 8.0+ adds bf16 (no loss scaling needed); on CPUs bf16 autocast
pays off with AMX, may with AVX512-BF16, and can be slower without either. The advice is a
starting point: measure the same workload in float32 on the same machine.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import sys
from pathlib import Path

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                model = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags = set(value.split())
    except OSError:
        pass  # not Linux: only torch's own capability report below
    return {"model": model, "flags": [f for f in CPU_FLAGS if f in flags]}


def gpu_info(torch) -> list[dict]:
    gpus = []
    for index in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(index)
        gpus.append(
            {
                "index": index,
                "name": torch.cuda.get_device_name(index),
                "compute_capability": f"{major}.{minor}",
                "tensor_cores": major >= 7,
                "bf16": major >= 8,
            }
        )
    return gpus


def recommend(gpus: list[dict], cpu: dict) -> dict:
    if gpus:
        best = max(gpus, key=lambda g: tuple(map(int, g["compute_capability"].split("."))))
        where = f"{best['name']} (compute capability {best['compute_capability']})"
        if best["bf16"]:
            return {
                "device": "cuda",
                "use": "bf16 autocast without a GradScaler: "
                'torch.amp.autocast("cuda", dtype=torch.bfloat16)',
                "reason": f"{where} has tensor cores with bf16, which needs no loss scaling; "
                "fp16 + GradScaler is the alternative where bf16 hurts accuracy",
            }
        if best["tensor_cores"]:
            return {
                "device": "cuda",
                "use": 'fp16 autocast with a GradScaler: torch.amp.autocast("cuda", '
                'dtype=torch.float16) + torch.amp.GradScaler("cuda")',
                "reason": f"{where} has fp16 tensor cores but no bf16",
            }
        return {
            "device": "cuda",
            "use": "float32 (measure before enabling AMP)",
            "reason": f"{where} has no tensor cores: AMP saves memory but gains little speed",
        }
    flags = set(cpu["flags"])
    if "amx_bf16" in flags:
        return {
            "device": "cpu",
            "use": 'bf16 autocast: torch.amp.autocast("cpu", dtype=torch.bfloat16), no GradScaler',
            "reason": "this CPU has AMX (amx_bf16): bf16 matrix units",
        }
    if "avx512_bf16" in flags:
        return {
            "device": "cpu",
            "use": "bf16 CPU autocast, after measuring against float32",
            "reason": "this CPU has AVX512-BF16 but no AMX: the gain depends on the model",
        }
    return {
        "device": "cpu",
        "use": "float32",
        "reason": "no GPU, and this CPU has neither AMX nor AVX512-BF16: bf16 autocast is "
        "emulated and often slower",
    }


def collect(probe_torch: bool = True) -> dict:
    report = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": None,
        "tensorflow": _version("tensorflow") or _version("tensorflow-cpu"),
        "keras": _version("keras"),
        "cuda_available": False,
        "gpus": [],
        "cpu": cpu_info(),
        "notes": [],
    }
    if probe_torch and importlib.util.find_spec("torch") is not None:
        import torch

        report["torch"] = torch.__version__
        report["cpu"]["torch_capability"] = torch.backends.cpu.get_cpu_capability()
        report["cuda_available"] = torch.cuda.is_available()
        if report["cuda_available"]:
            report["gpus"] = gpu_info(torch)
    else:
        report["notes"].append("torch is not installed: no GPU could be queried")
    if report["tensorflow"] is None:
        report["notes"].append("tensorflow is not installed")
    report["recommendation"] = recommend(report["gpus"], report["cpu"])
    return report


def render(report: dict) -> str:
    lines = [
        f"python      {report['python']} ({report['platform']})",
        f"torch       {report['torch'] or 'not installed'}",
        f"tensorflow  {report['tensorflow'] or 'not installed'}"
        + (f" (keras {report['keras']})" if report["keras"] else ""),
        f"cpu         {report['cpu']['model']}",
        f"cpu flags   {', '.join(report['cpu']['flags']) or 'none of ' + ', '.join(CPU_FLAGS)}",
    ]
    if "torch_capability" in report["cpu"]:
        lines.append(f"torch cpu   {report['cpu']['torch_capability']}")
    if report["gpus"]:
        for g in report["gpus"]:
            lines.append(
                f"gpu {g['index']}       {g['name']}, "
                f"compute capability {g['compute_capability']}, "
                f"tensor cores: {'yes' if g['tensor_cores'] else 'no'}, "
                f"bf16: {'yes' if g['bf16'] else 'no'}"
            )
    else:
        lines.append("gpu         none (CUDA not available)")
    rec = report["recommendation"]
    lines += ["", f"use         {rec['use']}", f"because     {rec['reason']}"]
    lines += [f"note        {note}" for note in report["notes"]]
    lines.append("measure     the same workload in float32 on this machine before deciding")
    return "\n".join(lines) + "\n"
