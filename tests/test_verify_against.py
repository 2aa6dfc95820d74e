"""`ampmigrate verify SCRIPT --against REV`: a committed migration checked against the revision
before it, in a temporary worktree; and `--report` on a machine without matplotlib."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_verify_project import TRAINER, run_cli

from conftest import FIXTURES

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def git(root: Path, *args: str) -> str:
    env = {
        **os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
    }  # fmt: skip
    proc = subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True, env=env
    )
    return proc.stdout


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """Commit 1: the deprecated project; commit 2: `ampmigrate fix .` of it."""
    root = tmp_path / "repo"
    (root / "mypkg").mkdir(parents=True)
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "trainer.py").write_text(TRAINER.lstrip())
    (root / "train.py").write_text("from mypkg.trainer import train\n\ntrain()\n")
    (root / ".gitignore").write_text("data/\n")
    (root / "data").mkdir()
    (root / "data" / "note.txt").write_text("untracked data the revision must see too\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-qm", "deprecated AMP")
    fixed = run_cli("fix", ".", cwd=root)
    assert "Fixed 2 findings" in fixed.stderr, fixed.stderr
    git(root, "commit", "-qam", "migrate AMP")
    return root


def test_a_faithful_migration_commit_matches_its_parent(repository):
    result = run_cli("verify", "train.py", "--against", "HEAD~1", "--steps", "4", cwd=repository)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "against HEAD~1: 1 changed file imported; every AMP change is one a safe fix makes: exact"
    ) in result.stdout
    assert (
        "MATCH: 4 steps bit-for-bit; 2 of 2 changed AMP lines ran; "
        "autocast enabled (float16, cpu) in 4 steps, GradScaler active"
    ) in result.stdout
    # the user's tree, index and worktree list are as they were
    assert git(repository, "status", "--porcelain") == ""
    assert len(git(repository, "worktree", "list").splitlines()) == 1


def test_a_later_growth_interval_change_is_caught(repository, tmp_path):
    trainer = repository / "mypkg" / "trainer.py"
    trainer.write_text(trainer.read_text().replace("growth_interval=2", "growth_interval=3"))
    git(repository, "commit", "-qam", "tune the scaler")
    report = tmp_path / "report"
    result = run_cli(
        "verify", "train.py", "--against", "HEAD~2", "--steps", "4", "--report", str(report),
        cwd=repository,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "AMP changes a safe fix would not make (mypkg/trainer.py:8): tolerance" in result.stdout
    # the scale first grows after 2 steps on the REV side, after 3 on the working tree's
    assert "MISMATCH at step 1 (scale): original 32.0, migrated 16.0" in result.stdout
    summary = json.loads((report / "summary.json").read_text())
    assert summary["verdict"] == "mismatch" and summary["exit_status"] == 1
    assert summary["against"]["not_safe"] == ["mypkg/trainer.py:8"]
    assert summary["coverage"]["kind"] == "changed AMP lines"


def test_against_a_missing_revision_is_an_error(repository):
    result = run_cli("verify", "train.py", "--against", "no-such-rev", cwd=repository)
    assert result.returncode == 2
    assert "--against no-such-rev: no such revision" in result.stderr.splitlines()[0]


def test_against_without_amp_changes_is_inconclusive(repository):
    result = run_cli("verify", "train.py", "--against", "HEAD", "--steps", "2", cwd=repository)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "INCONCLUSIVE: no AMP line changed between HEAD and the working tree" in result.stdout


def test_report_without_matplotlib_writes_summary_and_traces(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "matplotlib.py").write_text("raise ImportError('matplotlib blocked by the test')\n")
    report = tmp_path / "report"
    result = subprocess.run(
        [sys.executable, "-m", "ampmigrate", "verify", str(FIXTURES / "loops" / "fp16_overflow.py"),
         "--steps", "3", "--report", str(report)],
        capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(blocker)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "no plot drawn: matplotlib is not installed (`pip install matplotlib`)" in (
        result.stderr
    )
    assert sorted(p.name for p in report.iterdir()) == [
        "summary.json", "trace_migrated.json", "trace_original.json",
    ]  # fmt: skip
    summary = json.loads((report / "summary.json").read_text())
    assert summary["verdict"] == "match"
    assert summary["coverage"]["ran"] == summary["coverage"]["total"] == 2
