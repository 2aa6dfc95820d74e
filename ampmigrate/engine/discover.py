"""Turn command-line paths into the list of files to check.

Directories are walked recursively for ``.py`` and ``.ipynb`` files; inside a git work tree,
git itself decides what is ignored (``git ls-files --cached --others --exclude-standard``), so
``.gitignore`` semantics are exact.
Virtualenvs and tool caches are skipped everywhere; symlinks are not followed out of the root.
Explicit file arguments are always checked, whatever their suffix or ignore status.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

SUFFIXES = (".py", ".ipynb")
EXCLUDED_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", ".bzr", ".venv", "venv", ".tox", ".nox", ".eggs", ".direnv",
        ".mypy_cache", ".pytest_cache", ".ruff_cache", "__pycache__", "__pypackages__",
        "node_modules", "site-packages", "build", "dist", "_build", "buck-out",
    }
)  # fmt: skip


def _is_venv(directory: Path) -> bool:
    return (directory / "pyvenv.cfg").is_file()


def _excluded(relative: Path, root: Path, dirs: frozenset[str], venvs: dict[Path, bool]) -> bool:
    """``venvs`` remembers each folder's answer: a tree's files share their folders, so each
    is asked about a ``pyvenv.cfg`` once, not once per file below it."""
    current = root
    for part in relative.parts[:-1]:
        current = current / part
        if part in dirs:
            return True
        venv = venvs.get(current)
        if venv is None:
            venv = venvs[current] = _is_venv(current)
        if venv:
            return True
    return False


def _git_files(directory: Path) -> list[Path] | None:
    """Files git does not ignore under ``directory``, or None outside a work tree."""
    try:
        result = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
            cwd=directory,
            capture_output=True,
            check=False,
        )
    except OSError:
        return None
    if result.returncode != 0:
        return None
    names = [n for n in result.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
    if not names and _ignored_by_git(directory):
        return None  # an ignored directory given explicitly is walked, like ripgrep does
    return [directory / n for n in dict.fromkeys(names)]


def _ignored_by_git(directory: Path) -> bool:
    check = subprocess.run(["git", "check-ignore", "-q", "."], cwd=directory, check=False)
    return check.returncode == 0


def _walk(directory: Path, excluded_dirs: frozenset[str]) -> Iterable[Path]:
    for current, dirs, files in os.walk(directory):
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in excluded_dirs
            and not (Path(current) / d).is_symlink()
            and not _is_venv(Path(current) / d)
        )
        for name in sorted(files):
            yield Path(current) / name


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (OSError, RuntimeError, ValueError):
        return False
    return True


def discover(
    paths: Iterable[str | os.PathLike],
    suffixes: tuple[str, ...] = SUFFIXES,
    excluded: Callable[[Path], bool] | None = None,
    excluded_dirs: frozenset[str] = EXCLUDED_DIRS,
) -> list[Path]:
    """Files to check, in a stable order, each once.

    ``excluded`` (configured patterns) and ``excluded_dirs`` (directory names, the defaults
    unless configured away) apply below directory arguments, never to files named explicitly.
    """
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            found[path] = None  # explicit files always; a missing one is reported later
            continue
        candidates = _git_files(path)
        if candidates is None:
            candidates = list(_walk(path, excluded_dirs))
        venvs: dict[Path, bool] = {}
        for file in sorted(candidates):
            if not file.name.endswith(suffixes):
                continue
            if _excluded(file.relative_to(path), path, excluded_dirs, venvs):
                continue
            if excluded is not None and excluded(file):
                continue
            if file.is_symlink() and not _inside(file, path):
                continue
            if file.exists() or file.is_symlink():
                found[file] = None
    return list(found)
