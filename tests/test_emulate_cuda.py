"""`verify --emulate-cuda`: CUDA-written scripts verified on the CPU.

The emulation patches torch for the whole process, so its unit tests run it in a child
interpreter; the end-to-end tests run `ampmigrate verify` on fixtures/loops/_cuda_written.py.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap

import pytest

from conftest import FIXTURES

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

LOOP = FIXTURES / "loops" / "_cuda_written.py"
OVERFLOW_STEP = 5  # the fixture's forced overflow


def emulated(code: str, *warning_options: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with CUDA emulated; it binds ``torch``."""
    prelude = "import torch\nfrom ampmigrate.harness import emulate\nemulate.install(torch)\n"
    return subprocess.run(
        [sys.executable, *warning_options, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
    )


def emulated_json(code: str) -> dict:
    result = emulated(textwrap.dedent(code) + "\nprint(json.dumps(out))")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_cuda_is_available_and_the_cheap_calls_answer():
    out = emulated_json("""
        import json
        torch.cuda.set_device(0)
        torch.cuda.synchronize()
        torch.cuda.manual_seed(1)
        torch.cuda.manual_seed_all(1)
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.empty_cache()
        props = torch.cuda.get_device_properties(0)
        out = {
            "available": torch.cuda.is_available(),
            "count": torch.cuda.device_count(),
            "current": torch.cuda.current_device(),
            "name": torch.cuda.get_device_name(),
            "props": [props.name, props.major, props.total_memory > 0],
            "peak": torch.cuda.max_memory_allocated(),
            "allocated": torch.cuda.memory_allocated(0),
            "bf16": torch.cuda.is_bf16_supported(),
        }
        try:
            torch.cuda.set_device(1)
        except RuntimeError as exc:
            out["set_device_1"] = str(exc)
    """)
    assert out["available"] is True and out["count"] == 1 and out["current"] == 0
    assert "emulated" in out["name"] and out["props"] == [out["name"], 8, True]
    assert out["peak"] == 0 and out["allocated"] == 0 and out["bf16"] is True
    assert "invalid device ordinal 1" in out["set_device_1"]


def test_every_way_to_reach_cuda_lands_on_the_cpu():
    out = emulated_json("""
        import io, json
        device = torch.device("cuda")
        model = torch.nn.Linear(2, 2).cuda()
        model.to(device)
        model.to("cuda:0")
        buffer = io.BytesIO()
        torch.save({"w": torch.ones(2)}, buffer)
        buffer.seek(0)
        tensors = {
            "cuda()": torch.ones(2).cuda(),
            "to('cuda')": torch.ones(2).to("cuda", non_blocking=True),
            "to(device)": torch.ones(2).to(device, torch.float16),
            "to(0)": torch.ones(2).to(0),
            "device='cuda'": torch.zeros(2, device="cuda"),
            "device=torch.device": torch.randn(2, device=torch.device("cuda", 0)),
            "new_ones": torch.ones(2).new_ones(3, device="cuda"),
            "pin_memory": torch.ones(2).pin_memory(),
            "module": next(model.parameters()),
            "map_location": torch.load(buffer, map_location="cuda")["w"],
            "DataParallel": torch.nn.DataParallel(model)(torch.ones(1, 2)),
        }
        with torch.device("cuda"):
            tensors["with torch.device"] = torch.ones(2)
        torch.set_default_device("cuda")
        tensors["set_default_device"] = torch.nn.Linear(2, 2).weight
        generator = torch.Generator(device="cuda").manual_seed(0)
        tensors["generator"] = torch.randn(2, generator=generator, device="cuda")
        out = {"generators": isinstance(torch.default_generator, torch.Generator)}
        import threading
        done = {}
        thread = threading.Thread(target=lambda: done.update(t=torch.ones(2).cuda()))
        thread.start()
        thread.join()
        tensors["in a thread"] = done["t"]
        out.update({name: str(t.device) for name, t in tensors.items()})
        out["dtype"] = str(tensors["to(device)"].dtype)
    """)
    assert out.pop("dtype") == "torch.float16"
    assert out.pop("generators") is True  # torch.Generator still names every generator
    assert out == dict.fromkeys(out, "cpu") and len(out) == 15


def test_cuda_autocast_in_every_spelling_is_real_cpu_float16_autocast():
    out = emulated_json("""
        import json
        a = torch.randn(4, 4)
        regions = {
            "torch.cuda.amp.autocast()": lambda: torch.cuda.amp.autocast(),
            "torch.autocast('cuda')": lambda: torch.autocast("cuda"),
            "torch.amp.autocast('cuda')": lambda: torch.amp.autocast("cuda"),
            "torch.autocast(device_type='cuda')": lambda: torch.autocast(device_type="cuda"),
            "bfloat16": lambda: torch.amp.autocast("cuda", dtype=torch.bfloat16),
            "enabled=False": lambda: torch.cuda.amp.autocast(enabled=False),
        }
        out = {}
        for name, region in regions.items():
            with region():
                out[name] = [str((a @ a).dtype), torch.is_autocast_enabled("cuda")]
        out["after"] = [str((a @ a).dtype), torch.is_autocast_enabled("cuda")]

        class Seen(torch.autograd.Function):
            @staticmethod
            @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float16)
            def forward(ctx, t):
                return torch.tensor(float(t.dtype == torch.float16))

        with torch.autocast("cuda"):
            out["custom_fwd cast_inputs"] = Seen.apply(a).item()
        out["cpu autocast untouched"] = str(torch.get_autocast_dtype("cpu"))
    """)
    assert out.pop("bfloat16") == ["torch.bfloat16", True]
    assert out.pop("enabled=False") == ["torch.float32", False]
    assert out.pop("after") == ["torch.float32", False]
    assert out.pop("cpu autocast untouched") == "torch.bfloat16"
    assert out.pop("custom_fwd cast_inputs") == 1.0
    assert out == {key: ["torch.float16", True] for key in out} and len(out) == 4


def test_cuda_grad_scaler_in_every_spelling_is_a_working_cpu_scaler():
    out = emulated_json("""
        import json
        scalers = {
            "torch.cuda.amp.GradScaler()": lambda: torch.cuda.amp.GradScaler(init_scale=8.0),
            "torch.amp.GradScaler('cuda')": lambda: torch.amp.GradScaler("cuda", 8.0),
            "torch.amp.GradScaler()": lambda: torch.amp.GradScaler(init_scale=8.0),
            "torch.GradScaler()": lambda: torch.GradScaler(init_scale=8.0),
        }
        out = {}
        for name, make in scalers.items():
            scaler = make()
            w = torch.nn.Parameter(torch.ones(2, device="cuda"))
            opt = torch.optim.SGD([w], lr=0.1)
            scaler.scale((w * float("inf")).sum()).backward()  # overflows: skipped, backs off
            scaler.step(opt)
            scaler.update()
            out[name] = [scaler._device, scaler.is_enabled(), scaler.get_scale(), w.tolist()]
        out["enabled=False"] = torch.cuda.amp.GradScaler(enabled=False).is_enabled()
    """)
    assert out.pop("enabled=False") is False
    assert out == {key: ["cpu", True, 4.0, [1.0, 1.0]] for key in out} and len(out) == 4


def test_deprecation_warnings_are_those_of_a_real_gpu():
    # New spellings: no warning at all, even as errors; old ones: torch's FutureWarning.
    new = emulated(
        "torch.amp.GradScaler('cuda')\nwith torch.amp.autocast('cuda'):\n    pass\n", "-W", "error"
    )
    assert new.returncode == 0, new.stderr
    old = emulated("torch.cuda.amp.GradScaler()\n", "-W", "error::FutureWarning")
    assert "FutureWarning: `torch.cuda.amp.GradScaler(args...)` is deprecated" in old.stderr


REFUSED = {
    "torch.cuda.Stream()": "torch.cuda.Stream",
    "torch.cuda.Event(enable_timing=True)": "torch.cuda.Event",
    "torch.cuda.current_stream()": "torch.cuda.current_stream",
    "torch.cuda.CUDAGraph()": "torch.cuda.CUDAGraph",
    "torch.cuda.nccl.all_reduce([])": "torch.cuda.nccl.all_reduce",
    "torch.cuda.current_blas_handle()": "torch.cuda.current_blas_handle",  # via the lazy init
    "torch.distributed.init_process_group('nccl')": (
        "torch.distributed.init_process_group(backend='nccl')"
    ),
}


def test_calls_outside_the_emulation_fail_naming_them():
    out = emulated_json(f"""
        import json
        out = {{}}
        for call in {list(REFUSED)!r}:
            try:
                eval(call)
            except RuntimeError as exc:  # what a script's fallback for a missing GPU catches
                out[call] = str(exc)
    """)
    assert out.keys() == REFUSED.keys()
    for call, name in REFUSED.items():
        assert out[call].startswith(f"--emulate-cuda: {name} is not emulated"), call


def test_an_uncaught_refusal_ends_the_process_with_its_own_status():
    result = emulated("torch.cuda.Event()")
    assert result.returncode == 4, result.stderr
    assert "NotEmulated: --emulate-cuda: torch.cuda.Event is not emulated" in result.stderr


def _trace(directory, side):
    return json.loads((directory / f"trace_{side}.json").read_text())["steps"]


def test_cuda_written_loop_matches_on_cpu_with_the_overflow_step_skipped(cli, tmp_path):
    result = cli("verify", str(LOOP), "--emulate-cuda", "--report", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH" in result.stdout and "MISMATCH" not in result.stdout
    assert "note: CUDA was emulated on the CPU (--emulate-cuda)" in result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["verdict"] == "match" and summary["options"]["emulate_cuda"] is True
    assert summary["environment"]["device_name"] == "ampmigrate emulated CUDA (CPU)"
    for side in ("original", "migrated"):
        steps = _trace(tmp_path, side)
        assert len(steps) == 20
        skipped = [s["step"] for s in steps if s["skipped"]]
        assert skipped == [OVERFLOW_STEP], side
        before, at = steps[OVERFLOW_STEP - 1]["scale"], steps[OVERFLOW_STEP]["scale"]
        assert at == before / 2, side
        assert any(b["scale"] == 2 * a["scale"] for a, b in itertools.pairwise(steps)), side
    assert _trace(tmp_path, "original") == _trace(tmp_path, "migrated")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the loop runs for real on a GPU")
def test_without_emulation_a_cuda_script_on_a_cpu_machine_is_told_to_emulate(cli):
    result = cli("verify", str(LOOP))
    assert result.returncode == 2
    assert "crashed with exit status 1; it needs CUDA" in result.stderr
    assert "rerun with --emulate-cuda" in result.stderr


def test_a_refused_call_in_the_script_is_an_error_naming_it(cli, tmp_path):
    script = tmp_path / "streams.py"
    script.write_text(
        LOOP.read_text().replace(
            "torch.cuda.synchronize()", "torch.cuda.current_stream().synchronize()"
        )
    )
    (tmp_path / "_common.py").write_text((LOOP.parent / "_common.py").read_text())
    result = cli("verify", str(script), "--emulate-cuda", "--steps", "2")
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "error: original script (streams.py): "
        "--emulate-cuda: torch.cuda.current_stream is not emulated" in result.stderr
    )


def test_emulation_excludes_a_real_gpu(cli):
    result = cli("verify", str(LOOP), "--emulate-cuda", "--device", "cuda")
    assert result.returncode == 2 and "excludes --device cuda" in result.stderr


DDP_SCRIPT = """
import os

import torch
import torch.distributed as dist
from _common import setup
from torch.nn.parallel import DistributedDataParallel

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()
model, x, y = setup(seed=23)
ddp = DistributedDataParallel(model.cuda(), device_ids=[local_rank])
opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
scaler = torch.cuda.amp.GradScaler(init_scale=2.0**10)
x, y = x.cuda(non_blocking=True)[rank::world], y.to(f"cuda:{local_rank}")[rank::world]
for step in range(8):
    i = (step * 8) % len(x)
    opt.zero_grad()
    with torch.cuda.amp.autocast():
        loss = torch.nn.functional.mse_loss(ddp(x[i : i + 8]), y[i : i + 8])
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
dist.destroy_process_group()
"""


def test_a_cuda_ddp_loop_runs_one_emulated_device_per_rank(cli, tmp_path):
    (tmp_path / "train_ddp.py").write_text(DDP_SCRIPT)
    (tmp_path / "_common.py").write_text((LOOP.parent / "_common.py").read_text())
    result = cli(
        "verify", str(tmp_path / "train_ddp.py"), "--emulate-cuda",
        "--nproc-per-node", "2", "--steps", "3", "--report", str(tmp_path / "report"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 1:" in result.stdout and "MISMATCH" not in result.stdout
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["verdict"] == "match" and len(summary["comparisons"]) == 2
