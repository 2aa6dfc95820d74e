"""Turn command-line paths into the list of files to check.

Directories are walked recursively for ``.py`` and ``.ipynb`` files; inside a git work tree,
git itself decides what is ignored (``git ls-files --cached --others --exclude-standard``), so
``.gitignore`` semantics are exact.
Virtualenvs, tool caches and copies of apex itself (a package ``apex`` with ``amp/``, kept in a
project to build it) are skipped everywhere; symlinks are not followed out of the root,
and a symlink to a file that is checked anyway is skipped (the file is checked once).
Explicit file arguments are always checked, whatever their suffix or ignore status.
With ``dependency_files``, the files that declare a project's requirements are found too
(:func:`is_dependency_file`: a name test, no read), for the rules that read them.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

SUFFIXES = (".py", ".ipynb")
# Ruff's default `exclude`, and `build`; `.ipynb_checkpoints` holds Jupyter's autosaved copies
# of notebooks (often committed), whose findings came twice
EXCLUDED_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", ".bzr", ".venv", "venv", ".tox", ".nox", ".eggs", ".direnv",
        ".mypy_cache", ".pytest_cache", ".ruff_cache", "__pycache__", "__pypackages__",
        "node_modules", "site-packages", "build", "dist", "_build", "buck-out",
        ".ipynb_checkpoints", ".git-rewrite", ".pants.d", ".pytype", ".pyenv", ".vscode",
    }
)  # fmt: skip


DEPENDENCY_NAMES = frozenset({"pyproject.toml", "setup.cfg", "setup.py"})


def is_dependency_file(name: str) -> bool:
    """Whether the file ``name`` (a path; ``/``-separated or native) declares requirements:
    ``pyproject.toml``, ``setup.cfg``, ``setup.py``, ``requirements*.txt``/``.in`` (pip,
    pip-tools) and any ``.txt``/``.in`` in a ``requirements/`` folder."""
    folder, _, base = name.replace(os.sep, "/").rpartition("/")
    if base in DEPENDENCY_NAMES:
        return True
    if not base.endswith((".txt", ".in")):
        return False
    return base.startswith("requirements") or folder.rpartition("/")[2] == "requirements"


def _skipped(directory: str | Path) -> bool:
    """A virtualenv, or a copy of apex itself: skipped wherever it sits."""
    return os.path.isfile(os.path.join(directory, "pyvenv.cfg")) or _is_apex_copy(directory)


def _is_apex_copy(directory: str | Path) -> bool:
    """A copy of NVIDIA apex itself kept in the project: its package ``apex`` (with its ``amp``
    subpackage), or its whole repository (``setup.py``, ``csrc/`` and the package, as
    jukebox vendors it, whose tests and examples call apex as any user would; without
    ``csrc/``, a ``setup.py`` that names the distribution ``apex``): apex's own code, not
    code that uses it."""
    if os.path.basename(os.fspath(directory)) == "apex" and os.path.isfile(
        os.path.join(directory, "amp", "__init__.py")
    ):
        return True
    if not os.path.isfile(os.path.join(directory, "apex", "__init__.py")):
        return False
    setup = os.path.join(directory, "setup.py")
    if not os.path.isfile(setup):
        return False
    if os.path.isdir(os.path.join(directory, "csrc")):
        return True
    try:  # (a copy without apex's C++ sources: its setup still names the distribution)
        with open(setup, "rb") as handle:
            return _NAMES_APEX.search(handle.read()) is not None
    except OSError:
        return False


_NAMES_APEX = re.compile(rb"""\bname\s*=\s*["']apex["']""")


def _folder_excluded(folder: str, root: str, dirs: frozenset[str], known: dict[str, bool]) -> bool:
    """Whether ``folder`` (relative to ``root``, ``/``-separated, "" for the root) or a folder
    above it is skipped: an excluded name or a virtualenv. ``known`` remembers each folder's
    answer: a tree's files share their folders, so each is asked once, not once per file."""
    if not folder:
        return False
    answer = known.get(folder)
    if answer is None:
        parent, _, name = folder.rpartition("/")
        answer = known[folder] = (
            _folder_excluded(parent, root, dirs, known)
            or name in dirs
            or _skipped(os.path.join(root, folder))
        )
    return answer


def _git_files(directory: Path) -> list[str] | None:
    """Files git does not ignore under ``directory`` (relative, ``/``-separated), or None
    outside a work tree."""
    import subprocess  # here: a run on files alone (a pre-commit hook) never asks git

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
    return list(dict.fromkeys(names))


def _ignored_by_git(directory: Path) -> bool:
    import subprocess

    check = subprocess.run(["git", "check-ignore", "-q", "."], cwd=directory, check=False)
    return check.returncode == 0


def _walk(directory: Path, excluded_dirs: frozenset[str]) -> tuple[list[str], set[str]]:
    """The files below ``directory`` (relative, ``/``-separated) and which of them are
    symlinks, skipping excluded folders, virtualenvs and symlinked folders (one ``scandir`` per
    folder: no stat per file)."""
    names: list[str] = []
    links: set[str] = set()
    stack = [("", os.fspath(directory))]
    while stack:
        prefix, folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                skipped = entry.name in excluded_dirs or entry.is_symlink()
                if not skipped and not _skipped(entry.path):
                    stack.append((f"{prefix}{entry.name}/", entry.path))
                continue
            names.append(prefix + entry.name)
            if entry.is_symlink():
                links.add(prefix + entry.name)
    return names, links


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
    dependency_files: bool = False,
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
        names = _git_files(path)
        links: set[str] | None = None  # known without a stat for a walked tree
        if names is None:
            names, links = _walk(path, excluded_dirs)
        root = os.fspath(path)
        known: dict[str, bool] = {}
        listed: set[str] | None = None  # the names as a set, made at the first symlink
        # strings, not Paths, until a file is kept (a Path costs more than the tests); sorted
        # part by part, as Paths sort
        for name in sorted(names, key=_parts):
            if not name.endswith(suffixes) and not (dependency_files and is_dependency_file(name)):
                continue
            if _folder_excluded(name.rpartition("/")[0], root, excluded_dirs, known):
                continue
            file = path / name
            if excluded is not None and excluded(file):
                continue
            if links is not None:
                link = name in links
            else:
                try:  # one lstat: whether it is there (git lists deleted files), and a link
                    link = stat.S_ISLNK(os.lstat(file).st_mode)
                except OSError:
                    continue
            if link:
                listed = listed if listed is not None else set(names)
                if not _inside(file, path) or _also_listed(file, path, listed):
                    continue
            found[file] = None
    return list(found)


def _also_listed(link: Path, root: Path, names: set[str]) -> bool:
    """A symlink to a file that is listed under ``root`` itself: that file is checked, the link
    would check (and count) it twice."""
    try:
        target = link.resolve().relative_to(root.resolve()).as_posix()
    except (OSError, RuntimeError, ValueError):
        return False
    return target != link.relative_to(root).as_posix() and target in names


def _parts(name: str) -> list[str]:
    return name.split("/")
