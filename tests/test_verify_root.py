"""`--root DIR` names the project root; a run that imports project modules from outside the root
is told which, and which --root would hold them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from test_verify_project import TRAINER

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

TOOL = """\
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mypkg.trainer import train

train(3)
"""


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """tools/train.py puts its parent on sys.path; no git, no pyproject: the root found is
    tools/, and the package lies outside it."""
    top = tmp_path / "work"
    (top / "mypkg").mkdir(parents=True)
    (top / "tools").mkdir()
    (top / "mypkg" / "__init__.py").write_text("")
    (top / "mypkg" / "trainer.py").write_text(textwrap.dedent(TRAINER).lstrip())
    (top / "tools" / "train.py").write_text(TOOL)
    return top


def test_modules_imported_from_outside_the_root_are_named_with_the_root_to_use(cli, layout):
    result = cli("verify", str(layout / "tools" / "train.py"), "--steps", "3")
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "INCONCLUSIVE: nothing was migrated: train.py hold(s) nothing `fix` changes with these "
        f"settings; the run imported modules from outside the project root {layout / 'tools'}, "
        f"which verify does not migrate: mypkg ({layout / 'mypkg'}); to migrate them too, name "
        f"a root that holds them: --root {layout}"
    ) in result.stdout
    assert not (layout / "mypkg" / "__pycache__").exists()  # bytecode went to the copies


def test_root_names_the_project_and_the_package_is_migrated(cli, layout):
    result = cli(
        "verify", str(layout / "tools" / "train.py"), "--steps", "3", "--root", str(layout)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "migration: 2 fixes (AMP101: 1, AMP102: 1) in 1 of 3 project files" in result.stdout
    assert "MATCH: 3 steps bit-for-bit; 2 of 2 rewritten sites ran" in result.stdout
    assert "imported modules from outside" not in result.stdout


def test_a_root_that_does_not_hold_the_script_is_an_error(cli, layout):
    result = cli("verify", str(layout / "tools" / "train.py"), "--root", str(layout / "mypkg"))
    assert result.returncode == 2
    assert f"--root {layout / 'mypkg'} does not hold the script" in result.stderr
