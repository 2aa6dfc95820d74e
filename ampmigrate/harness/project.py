"""The project a script belongs to: its root, copies of it, and a git revision of it.

Every call into the migration engine goes through :func:`migrate_files` and
:func:`migrate_source` here, with the settings ``ampmigrate fix`` resolves (``FixPlan``), so the
harness migrates exactly what ``fix`` would.
"""

from __future__ import annotations

import ast
import collections
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from ampmigrate.engine.discover import EXCLUDED_DIRS
from ampmigrate.engine.settings import Settings
from ampmigrate.findings import Diagnostic

_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg")


class ProjectError(Exception):
    """The project could not be prepared (git failed, a revision does not exist)."""


def find_root(script: Path, root: Path | None = None) -> Path:
    """``root`` (``--root``, which must hold the script), else the git top level, else the
    nearest directory with pyproject.toml / setup.py / setup.cfg above the script, else the
    script's directory."""
    if root is not None:
        root = root.resolve()
        if not root.is_dir():
            raise ProjectError(f"--root {root}: no such directory")
        if root not in script.resolve().parents:
            raise ProjectError(f"--root {root} does not hold the script {script}")
        return root
    start = script.resolve().parent
    top = _git(start, "rev-parse", "--show-toplevel", check=False)
    if top:
        return Path(top).resolve()
    for directory in (start, *start.parents):
        if any((directory / marker).is_file() for marker in _MARKERS):
            return directory
    return start


def _git(cwd: Path, *args: str, check: bool = True) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        if check:
            raise ProjectError(f"git {' '.join(args)}: {exc}") from exc
        return None
    if proc.returncode != 0:
        if check:
            message = proc.stderr.strip().splitlines()
            raise ProjectError(f"git {' '.join(args)}: {message[-1] if message else 'failed'}")
        return None
    return proc.stdout.strip()


def excluded(relative: Path) -> bool:
    """Virtual environments, caches, build output: never project modules."""
    return any(part in EXCLUDED_DIRS for part in relative.parts)


@dataclass
class Migrated:
    """One file through the engine: the new source and what was fixed / remains."""

    original: bytes
    new_source: bytes
    fixed: list[Diagnostic] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)
    error: str | None = None
    excluded: bool = False  # fix's configuration excludes the file

    @property
    def changed(self) -> bool:
        return self.new_source != self.original


@dataclass(frozen=True)
class FixPlan:
    """What ``ampmigrate fix`` would do here: its settings (rules, target torch, unsafe fixes),
    per-file ignores and excludes, resolved by the command line exactly as for ``fix``."""

    settings: Settings
    ignored_codes: Callable[[Path], frozenset[str]] | None = None
    excluded: Callable[[Path], bool] | None = None
    source: str = ""  # where the target torch came from, for the user

    @classmethod
    def default(cls, unsafe: bool = False) -> FixPlan:
        """Every rule, no target torch: ``fix`` on a project that declares nothing."""
        from ampmigrate.catalog import all_rules

        rules = tuple(all_rules().values())
        return cls(Settings(rules=rules, fix=True, unsafe_fixes=unsafe))

    def describe(self) -> str:
        torch = self.settings.target_torch
        target = ".".join(map(str, torch)) if torch else "none"
        unsafe = "on" if self.settings.unsafe_fixes else "off"
        where = f" ({self.source})" if self.source else ""
        return f"as `ampmigrate fix`: target-torch {target}{where}, unsafe fixes {unsafe}"


def migrate_files(root: Path, names: Iterable[str], plan: FixPlan) -> dict[str, Migrated]:
    """``ampmigrate fix`` on these files (relative to ``root``), in memory: the engine's own run
    with fix's settings, per-file ignores and noqa comments; files fix excludes stay as they are."""
    from ampmigrate.engine import run

    names = sorted(names)
    out: dict[str, Migrated] = {}
    included = []
    for name in names:
        path = root / name
        if plan.excluded is not None and plan.excluded(path):
            source = path.read_bytes()
            out[name] = Migrated(source, source, excluded=True)
        else:
            included.append(name)
    results = run([root / n for n in included], plan.settings, 1, plan.ignored_codes)
    for name, result in zip(included, results, strict=True):
        original = result.original if result.original is not None else (root / name).read_bytes()
        if result.error:
            out[name] = Migrated(original, original, error=result.error)
            continue
        new = result.new_source if result.new_source is not None else original
        out[name] = Migrated(original, new, result.fixed, result.diagnostics)
    return out


def migrate_source(source: bytes, path: str, plan: FixPlan) -> Migrated:
    """The engine's safe fixes, in memory, on bytes that are not a file (a file at a git
    revision), with fix's settings otherwise."""
    from ampmigrate.engine.migrate import migrate_source as engine_migrate

    settings = replace(plan.settings, unsafe_fixes=False)
    try:
        new, remaining, fixed = engine_migrate(source, settings, path)
    except Exception as exc:  # the engine's own message: a syntax error, a fix that failed
        return Migrated(source, source, error=str(exc) or type(exc).__name__)
    return Migrated(source, new, fixed, remaining)


# Linked whole into a copy (never written by a run, too big to walk): VCS data, environments and
# caches. Build output directories are copied like any other, since a run may write into them.
LINKED_WHOLE = EXCLUDED_DIRS - {"build", "dist", "_build", "buck-out"}
COPY_LIMIT = 1 << 20  # files up to this size are copied into a mirror, larger ones linked
COPY_BUDGET = 256 << 20  # bytes copied into one mirror at most


def build_mirror(root: Path, target: Path, files: dict[Path, bytes], budget: int = 10_000) -> None:
    """A copy of ``root`` at ``target`` for one side to run in: ``files`` (relative paths)
    written, every other file up to ``COPY_LIMIT`` copied (sources, configs, logs: a script that
    rewrites them or resolves its ``__file__`` stays in the copy), larger ones (data sets,
    checkpoints) linked to the original. Directories are real, so what a run creates stays in
    the copy, except environments and caches, and whatever lies beyond ``budget`` entries,
    which are linked whole."""
    needed = {parent for relative in files for parent in relative.parents}
    target.mkdir(parents=True, exist_ok=True)
    copied = 0
    queue = collections.deque([Path()])
    while queue:
        relative = queue.popleft()
        for entry in sorted(os.scandir(root / relative), key=lambda e: e.name):
            budget -= 1
            inner = relative / entry.name
            if inner in files:
                continue
            walk = budget > 0 and entry.name not in LINKED_WHOLE
            if entry.is_dir(follow_symlinks=False) and (inner in needed or walk):
                (target / inner).mkdir(exist_ok=True)
                queue.append(inner)
                continue
            if walk and entry.is_file(follow_symlinks=False):
                size = entry.stat(follow_symlinks=False).st_size
                if size <= COPY_LIMIT and copied + size <= COPY_BUDGET:
                    shutil.copy2(root / inner, target / inner)
                    copied += size
                    continue
            os.symlink(root / inner, target / inner)
    for relative, data in files.items():
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        (target / relative).write_bytes(data)


@contextlib.contextmanager
def worktree_at(root: Path, rev: str) -> Iterator[Path]:
    """``root`` at git revision ``rev``, checked out into a temporary worktree (removed after);
    the user's working tree and index are never touched. Untracked and ignored files of the
    working tree (data, virtual environments) are linked in, so relative paths resolve."""
    if _git(root, "rev-parse", "--show-toplevel", check=False) is None:
        raise ProjectError(f"--against needs a git repository; {root} is not in one")
    commit = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if not commit:
        raise ProjectError(f"--against {rev}: no such revision in {root}")
    parent = Path(tempfile.mkdtemp(prefix="ampmigrate-against-"))
    tree = parent / root.name
    try:
        _git(root, "worktree", "add", "--detach", str(tree), commit)
        others = _git(root, "ls-files", "--others", "--directory", "--no-empty-directory") or ""
        for name in others.splitlines():  # untracked and ignored alike
            relative = Path(name.rstrip("/"))
            if "__pycache__" in relative.parts or relative.suffix == ".pyc":
                continue  # the revision's own bytecode must not land in the user's caches
            if (tree / relative).exists() or (tree / relative).is_symlink():
                continue
            (tree / relative).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(root / relative, tree / relative)
        yield tree
    finally:
        _git(root, "worktree", "remove", "--force", str(tree), check=False)
        shutil.rmtree(parent, ignore_errors=True)
        _git(root, "worktree", "prune", check=False)


def changed_files(root: Path, rev: str) -> list[Path]:
    """Python files (relative to ``root``) that differ between ``rev`` and the working tree."""
    out = _git(root, "diff", "--name-only", "--relative", rev, "--", "*.py") or ""
    return [Path(line) for line in out.splitlines() if line]


def file_at(root: Path, rev: str, relative: Path) -> bytes | None:
    """The bytes of ``relative`` at ``rev``, None where it did not exist."""
    try:
        proc = subprocess.run(
            ["git", "show", f"{rev}:./{relative.as_posix()}"],
            cwd=root, capture_output=True, check=False, timeout=120,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def guess_imports(script: Path, root: Path) -> set[str]:
    """The project files (relative to ``root``) SCRIPT imports, transitively, read from the
    source: absolute imports resolved against the script's directory, each directory up to the
    root (a ``sys.path`` edit like ``..``) and ``root/src``. A guess: the run says for sure."""
    bases = [script.parent, *[p for p in script.parent.parents if root in (p, *p.parents)]]
    bases.append(root / "src")
    todo, seen = [script.resolve()], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            tree = ast.parse(path.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                todo += [f for a in node.names for b in bases for f in _module_files(b, a.name)]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
                names += [f"{node.module or ''}.{a.name}".lstrip(".") for a in node.names]
                if node.level:
                    base = path.parent
                    for _ in range(node.level - 1):
                        base = base.parent
                    todo += [f for n in names if n for f in _module_files(base, n)]
                else:
                    todo += [f for n in names if n for b in bases for f in _module_files(b, n)]
    out = set()
    for path in seen:
        relative = path.relative_to(root) if root in path.parents else None
        if relative is not None and not excluded(relative):
            out.add(relative.as_posix())
    return out


def _module_files(base: Path, dotted: str) -> list[Path]:
    """The files ``import dotted`` runs when resolved under ``base``: packages' __init__ too."""
    found, current = [], base
    for part in dotted.split("."):
        current = current / part
        if (current / "__init__.py").is_file():
            found.append((current / "__init__.py").resolve())
        elif current.with_suffix(".py").is_file():
            found.append(current.with_suffix(".py").resolve())
            break
        else:
            break
    return found
