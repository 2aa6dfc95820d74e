"""The hooks in .pre-commit-hooks.yaml, run by the real pre-commit framework (`try-repo`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

# (one worker runs the whole file: its module-scoped fixture runs once)
pytestmark = pytest.mark.xdist_group("precommit")

pytest.importorskip("pre_commit")
DEPRECATED = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("pre-commit-home")  # hook environments, shared by the tests


def try_repo(repo, hook: str, home) -> subprocess.CompletedProcess:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    command = [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), hook, "--all-files"]
    return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)


@pytest.fixture
def repo(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "train.py").write_text(DEPRECATED)
    (tmp_path / "clean.py").write_text("x = 1\n")
    shutil.copy(ROOT / "fixtures" / "notebooks" / "train.ipynb", tmp_path / "nb.ipynb")
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    return tmp_path


def test_check_hook_fails_on_a_deprecated_call(repo, home):
    result = try_repo(repo, "ampmigrate-check", home)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "train.py:3:10: AMP102" in result.stdout
    assert "nb.ipynb:cell 4:1:10: AMP102" in result.stdout  # types_or includes jupyter
    assert (repo / "train.py").read_text() == DEPRECATED


def test_fix_hook_rewrites_the_file(repo, home):
    result = try_repo(repo, "ampmigrate-fix", home)
    assert result.returncode == 1  # pre-commit fails a hook that modified files
    assert "files were modified by this hook" in result.stdout
    assert (repo / "train.py").read_text() == (
        'import torch\n\nscaler = torch.amp.GradScaler("cuda")\n'
    )
    assert try_repo(repo, "ampmigrate-check", home).returncode == 0
