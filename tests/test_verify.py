"""`ampmigrate verify`: fixture loops match, wrong migrations are caught at the right step,
error paths exit 2."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

LOOPS = FIXTURES / "loops"
SCRIPTS = sorted(p.name for p in LOOPS.glob("*.py") if not p.name.startswith("_"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_fixture_loop_verifies_as_a_bit_exact_match(cli, name):
    result = cli("verify", str(LOOPS / name), "--steps", "6")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH: 6 steps bit-for-bit; " in result.stdout
    assert "all safe" in result.stdout


def test_ddp_loop_compares_every_rank(cli):
    result = cli("verify", str(LOOPS / "ddp_loop.py"), "--nproc-per-node", "2", "--steps", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0:" in result.stdout and "rank 1:" in result.stdout
    assert result.stdout.count("MATCH: 3 steps bit-for-bit; ") == 2


def _report(tmp_path, name):
    return json.loads((tmp_path / name).read_text())


def test_report_directory(cli, tmp_path):
    result = cli("verify", str(LOOPS / "fp16_overflow.py"), "--report", str(tmp_path))
    assert result.returncode == 0, result.stderr
    summary = _report(tmp_path, "summary.json")
    assert summary["verdict"] == "match"
    [comparison] = summary["comparisons"]
    assert comparison["steps_compared"] == 20 and comparison["tolerance"]["exact"] is True
    assert summary["environment"]["torch"].startswith("2.")
    assert summary["environment"]["threads"] == 1
    assert summary["environment"]["cuda_available"] is False
    original = _report(tmp_path, "trace_original.json")
    steps = original["steps"]
    assert len(steps) == 20
    assert steps[0]["skipped"] is True and steps[0]["scale"] == 2.0**23  # forced overflow
    assert any(not s["skipped"] for s in steps)
    assert float.fromhex(steps[3]["losses_hex"][0]) == steps[3]["losses"][0]
    assert original["scaler_state"]["growth_interval"] == 3
    assert original["param_checksum"] == _report(tmp_path, "trace_migrated.json")["param_checksum"]
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_wrong_dtype_is_caught_at_step_0(cli):
    result = cli(
        "verify", str(LOOPS / "bf16_cpu_scaler.py"), "--migrated", str(LOOPS / "_wrong_dtype.py")
    )
    assert result.returncode == 1
    assert "MISMATCH at step 0 (loss)" in result.stdout
    # --migrated with no migration of our own: the stated tolerance is used
    assert "|a - b| <= 1e-05 + 0.001 * |a|" in result.stdout


def test_wrong_growth_interval_is_caught_where_the_scale_first_grows(cli, tmp_path):
    result = cli(
        "verify", str(LOOPS / "fp16_overflow.py"), "--exact",
        "--migrated", str(LOOPS / "_wrong_growth_interval.py"), "--report", str(tmp_path),
    )  # fmt: skip
    assert result.returncode == 1
    steps = _report(tmp_path, "trace_original.json")["steps"]
    grows = next(i for i in range(1, len(steps)) if steps[i]["scale"] > steps[i - 1]["scale"])
    assert f"MISMATCH at step {grows} (scale)" in result.stdout
    summary = _report(tmp_path, "summary.json")
    assert summary["comparisons"][0]["divergence"]["step"] == grows


def test_dropped_update_is_caught_at_step_0(cli):
    # Without update() the growth tracker does not advance after step 0 (the first divergence);
    # in torch 2.13 the next scaler.step() then raises, and that traceback is shown too.
    result = cli(
        "verify", str(LOOPS / "bf16_cpu_scaler.py"),
        "--migrated", str(LOOPS / "_wrong_dropped_update.py"),
    )  # fmt: skip
    assert result.returncode == 1
    assert "MISMATCH at step 0 (growth_tracker): original 1, migrated 0" in result.stdout
    assert "migrated side's output (stdout and stderr, last lines):" in result.stdout
    assert "step() has already been called since the last update()" in result.stdout


def test_tolerance_mode_accepts_the_same_run(cli):
    result = cli("verify", str(LOOPS / "bf16_no_scaler.py"), "--rtol", "1e-6", "--steps", "4")
    assert result.returncode == 0
    assert "|a - b| <= 0 + 1e-06 * |a|" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py"], "missing.py: no such script"),
        ([str(LOOPS / "_crashes.py")], "original script (_crashes.py) crashed with exit status 1"),
        ([str(LOOPS / "_no_training.py")], "finished without a single optimizer step"),
        ([str(LOOPS / "_sleeps.py"), "--timeout", "3"], "timed out after 3 s"),
        ([str(LOOPS / "bf16_no_scaler.py"), "--device", "cuda"], "sees no CUDA device"),
    ],
    ids=["missing", "crash", "no-steps", "timeout", "no-cuda"],
)
def test_error_paths_exit_2_with_one_line_reason(cli, args, message):
    result = cli("verify", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith("ampmigrate verify: error: ") and message in first


def test_crash_shows_the_scripts_stderr_tail(cli):
    result = cli("verify", str(LOOPS / "_crashes.py"))
    assert "ValueError: dataset not found: /data/train.bin" in result.stderr
    assert '_crashes.py", line 3, in <module>' in result.stderr
    assert "bootstrap.py" not in result.stderr and "runpy" not in result.stderr


def test_script_arguments_and_main_guard(cli, tmp_path):
    script = tmp_path / "args_loop.py"
    script.write_text(
        "import sys\nimport torch\n\n"
        "def main():\n"
        "    assert sys.argv[0].endswith('args_loop.py'), sys.argv\n"
        "    lr = float(sys.argv[sys.argv.index('--lr') + 1])\n"
        "    torch.manual_seed(0)\n"
        "    w = torch.nn.Parameter(torch.ones(3))\n"
        "    opt = torch.optim.SGD([w], lr=lr)\n"
        "    scaler = torch.cpu.amp.GradScaler()\n"
        "    for _ in range(100):\n"
        "        with torch.cpu.amp.autocast():\n"
        "            loss = (w * 2).sum()\n"
        "        scaler.scale(loss).backward()\n"
        "        scaler.step(opt)\n"
        "        scaler.update()\n\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    result = cli("verify", str(script), "--steps", "3", "--", "--lr", "0.5")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH: 3 steps bit-for-bit; 2 of 2 rewritten sites ran" in result.stdout
