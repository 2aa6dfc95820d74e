"""`ampmigrate verify` runs each side in a copy of the project of its own: nothing either side
writes lands in the user's tree, and a side that fails or stops early shows its output."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ampmigrate.harness.verify import Options, verify

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

# A CPU fp16 loop on the deprecated API that writes files relative to its working directory and
# beside its own (resolved) file, and rewrites a log that exists in the project.
WRITER = """
import os
from pathlib import Path

import torch

os.makedirs("out", exist_ok=True)
Path(f"out/marker-{os.getpid()}").write_text("written")
Path(__file__).resolve().parent.joinpath(f"beside-{os.getpid()}").write_text("written")
Path("log.txt").write_text(f"overwritten by {os.getpid()}")
STOP = "{stop}"[::-1]  # spelled backwards, so that only a rewrite can put it in the source
if STOP and STOP in Path(__file__).read_text():
    print("Experiment already exists: logs/run-1 (this is the migrated side)")
    raise SystemExit({status})
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cpu.amp.GradScaler(init_scale=16.0)
x = torch.randn(8, 4)
for _ in range(3):
    opt.zero_grad()
    with torch.cpu.amp.autocast(dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
"""


def project(tmp_path: Path, stop: str = "", status: int = 0) -> Path:
    root = tmp_path / "proj"
    (root / "tools").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\nversion = '0'\n")
    (root / "log.txt").write_text("the user's log")
    script = textwrap.dedent(WRITER).replace("{stop}", stop[::-1])
    script = script.replace("{status}", str(status))
    (root / "tools" / "train.py").write_text(script)
    return root


def listing(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_each_side_writes_into_its_own_copy_and_nothing_into_the_project(tmp_path, monkeypatch):
    root = project(tmp_path)
    before = listing(root)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(root)  # relative paths are relative to the project root
    outcome = verify(root / "tools" / "train.py", [], Options(steps=3), None, workdir=work)
    assert outcome.match, outcome.notes
    assert listing(root) == before  # no marker, no file beside the script, the log untouched
    for side in ("original", "migrated"):
        markers = list((work / side / "out").glob("marker-*"))
        assert len(markers) == 1 and markers[0].read_text() == "written"
        assert len(list((work / side / "tools").glob("beside-*"))) == 1
        assert (work / side / "log.txt").read_text().startswith("overwritten by")
    # the two sides ran one after the other, in different processes
    assert {p.name for p in (work / "original" / "out").iterdir()} != {
        p.name for p in (work / "migrated" / "out").iterdir()
    }
    assert outcome.notes == []  # the working directory lies in the project: nothing to say


def test_the_working_directory_is_mapped_into_each_copy(tmp_path, monkeypatch):
    root = project(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(root / "tools")
    outcome = verify(root / "tools" / "train.py", [], Options(steps=3), None, workdir=work)
    assert outcome.match
    assert not (root / "tools" / "out").exists()
    assert list((work / "original" / "tools" / "out").glob("marker-*"))
    assert list((work / "migrated" / "tools" / "out").glob("marker-*"))


def test_a_working_directory_outside_the_project_is_named_in_a_note(tmp_path, monkeypatch):
    root = project(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)
    outcome = verify(root / "tools" / "train.py", [], Options(steps=3), None)
    assert outcome.match
    assert any(f"the working directory {outside.resolve()} is outside" in n for n in outcome.notes)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ampmigrate", *args],
        capture_output=True, text=True, check=False, cwd=cwd,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )  # fmt: skip


@pytest.mark.parametrize("status", [0, 1])
def test_a_migrated_side_that_stops_shows_its_output_in_the_verdict(tmp_path, status):
    # The migrated source (torch.amp.autocast) makes the script stop before training, with a
    # message on its stdout: the verdict is a divergence and shows that message.
    root = project(tmp_path, stop="torch.amp.autocast(", status=status)
    before = listing(root)
    result = run_cli("verify", "tools/train.py", "--steps", "3", cwd=root)
    assert result.returncode == 1, result.stdout + result.stderr
    what = "stopped after 0 step(s) (exit status 0)" if status == 0 else "crashed"
    assert f"MISMATCH at step 0 (migrated run): original 'completed', migrated '{what}" in (
        result.stdout
    )
    tail = result.stdout.split("migrated side's output (stdout and stderr, last lines):\n")[1]
    assert tail.startswith("Experiment already exists: logs/run-1 (this is the migrated side)")
    assert "original side's output" not in result.stdout
    assert listing(root) == before


def test_an_original_side_that_fails_is_an_error_with_its_output(tmp_path):
    root = project(tmp_path, stop="torch.cpu.amp.autocast(", status=0)  # the original stops
    result = run_cli("verify", "tools/train.py", "--steps", "3", cwd=root)
    assert result.returncode == 2
    assert "original script (train.py) finished without a single optimizer step" in result.stderr
    assert "the script's output (last lines):\nExperiment already exists" in result.stderr


def test_parallel_sides_are_isolated_too(tmp_path):
    root = project(tmp_path)
    before = listing(root)
    result = run_cli("verify", "tools/train.py", "--steps", "3", "--parallel", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH: 3 steps bit-for-bit; 2 of 2 rewritten sites ran" in result.stdout
    assert listing(root) == before
