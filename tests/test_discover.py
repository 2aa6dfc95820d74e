"""Which files a directory argument expands to."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ampmigrate.engine.discover import discover


def touch(path: Path, text: str = "x = 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def names(paths, root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in paths)


def test_walk_skips_venvs_caches_and_non_python(tmp_path):
    touch(tmp_path / "a.py")
    touch(tmp_path / "pkg" / "b.py")
    touch(tmp_path / "notes.txt")
    touch(tmp_path / ".venv" / "lib" / "c.py")
    touch(tmp_path / "env" / "pyvenv.cfg", "home = /usr\n")
    touch(tmp_path / "env" / "lib" / "d.py")
    touch(tmp_path / "node_modules" / "e.py")
    touch(tmp_path / "__pycache__" / "f.py")
    assert names(discover([tmp_path]), tmp_path) == ["a.py", "pkg/b.py"]


@pytest.mark.parametrize("git", [False, True])
def test_jupyter_checkpoint_copies_are_skipped_even_when_committed(tmp_path, git):
    """plant-pathology-2020 (the 47th review) commits `.ipynb_checkpoints/`: every finding of
    its notebook came twice, once for Jupyter's autosaved copy (Ruff excludes it too)."""
    touch(tmp_path / "src" / "pipeline.ipynb")
    touch(tmp_path / "src" / ".ipynb_checkpoints" / "pipeline-checkpoint.ipynb")
    touch(tmp_path / "src" / ".ipynb_checkpoints" / "train-checkpoint.py")
    if git:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
    assert names(discover([tmp_path]), tmp_path) == ["src/pipeline.ipynb"]


@pytest.mark.parametrize("git", [False, True])
def test_a_copy_of_apex_kept_in_the_project_is_skipped(tmp_path, git):
    """wavebender-gan keeps NVIDIA apex's source under `apex/` (to build it): `fix` rewrote
    14 of apex's own files. A package `apex` with its `amp/` is apex itself, not a user of
    it; a project module that merely has `apex` in its name is checked."""
    touch(tmp_path / "train.py")
    touch(tmp_path / "apex" / "__init__.py")
    touch(tmp_path / "apex" / "amp" / "__init__.py")
    touch(tmp_path / "apex" / "amp" / "handle.py")
    touch(tmp_path / "apex" / "parallel" / "distributed.py")
    touch(tmp_path / "tools" / "apex" / "helpers.py")  # no amp/: the project's own
    # jukebox (30th review) vendors apex's repository: its tests were rewritten to torch
    touch(tmp_path / "third_party" / "apex" / "setup.py")
    touch(tmp_path / "third_party" / "apex" / "csrc" / "kernel.cu")
    touch(tmp_path / "third_party" / "apex" / "apex" / "__init__.py")
    touch(tmp_path / "third_party" / "apex" / "tests" / "test_fused_layer_norm.py")
    touch(tmp_path / "tools" / "setup.py")  # a project's setup.py without apex's sources
    # the 67th review: a copy of apex's Python files only (no `csrc/`), its setup naming it
    touch(tmp_path / "vendor" / "apex" / "setup.py", 'setup(name="apex", version="0.1")\n')
    touch(tmp_path / "vendor" / "apex" / "apex" / "__init__.py")
    touch(tmp_path / "vendor" / "apex" / "tests" / "test_norm.py")
    touch(tmp_path / "tooling" / "setup.py", "setup(name='apex-tools')\n")  # not apex's
    touch(tmp_path / "tooling" / "apex" / "__init__.py")
    if git:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert names(discover([tmp_path]), tmp_path) == [
        "tooling/apex/__init__.py",
        "tooling/setup.py",
        "tools/apex/helpers.py",
        "tools/setup.py",
        "train.py",
    ]


def test_git_ignored_files_are_skipped(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    touch(tmp_path / ".gitignore", "generated/\nscratch_*.py\n")
    touch(tmp_path / "kept.py")
    touch(tmp_path / "scratch_1.py")
    touch(tmp_path / "generated" / "g.py")
    touch(tmp_path / "sub" / "tracked.py")
    subprocess.run(["git", "-C", str(tmp_path), "add", "sub/tracked.py"], check=True)
    assert names(discover([tmp_path]), tmp_path) == ["kept.py", "sub/tracked.py"]
    assert names(discover([tmp_path / "sub"]), tmp_path) == ["sub/tracked.py"]


def test_explicit_files_are_always_checked(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    touch(tmp_path / ".gitignore", "ignored.py\n")
    ignored = touch(tmp_path / "ignored.py")
    script = touch(tmp_path / "tool")  # no suffix
    assert discover([ignored, script]) == [ignored, script]


def test_each_file_once_in_stable_order(tmp_path):
    a = touch(tmp_path / "a.py")
    touch(tmp_path / "b.py")
    found = discover([tmp_path, a, tmp_path])
    assert names(found, tmp_path) == ["a.py", "b.py"]
    assert discover([tmp_path]) == discover([tmp_path])


def test_symlinks_leaving_the_root_are_not_followed(tmp_path):
    outside = touch(tmp_path / "outside" / "secret.py")
    root = tmp_path / "root"
    touch(root / "a.py")
    os.symlink(outside, root / "link.py")
    os.symlink(outside.parent, root / "linkdir")
    os.symlink(root / "loop", root / "loop")  # a symlink loop
    assert names(discover([root]), root) == ["a.py"]


def test_an_ignored_directory_given_explicitly_is_walked(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    touch(tmp_path / ".gitignore", "vendor/\n")
    touch(tmp_path / "vendor" / "lib" / "v.py")
    assert names(discover([tmp_path]), tmp_path) == []
    assert names(discover([tmp_path / "vendor"]), tmp_path) == ["vendor/lib/v.py"]


def test_dependency_files_are_found_only_when_asked_and_respect_ignores(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for name in [
        "a.py", "requirements.txt", "requirements-dev.in", "requirements/base.txt",
        "pyproject.toml", "setup.cfg", "setup.py", "MANIFEST.in", "notes.txt",
        "docs/requirements.txt", "ignored/requirements.txt", ".venv/requirements.txt",
    ]:  # fmt: skip
        touch(tmp_path / name)
    touch(tmp_path / ".gitignore", "ignored/\n")
    plain = names(discover([tmp_path]), tmp_path)
    assert plain == ["a.py", "setup.py"]
    found = names(discover([tmp_path], dependency_files=True), tmp_path)
    assert found == [
        "a.py", "docs/requirements.txt", "pyproject.toml", "requirements-dev.in",
        "requirements.txt", "requirements/base.txt", "setup.cfg", "setup.py",
    ]  # fmt: skip
    excluded = discover([tmp_path], excluded=lambda p: p.name == "setup.cfg", dependency_files=True)
    assert "setup.cfg" not in names(excluded, tmp_path)
