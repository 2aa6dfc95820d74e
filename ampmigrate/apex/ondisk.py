"""The project's files on disk for the apex planner and its pre-pass, which look beyond the
file at hand: read and parsed once each (by path, size and time), a module found by its
qualified name, a project's folder and its Python files, the modules an import statement may
load."""

from __future__ import annotations

import ast
import collections
import functools
import itertools
import os
from collections.abc import Iterable, Iterator

from ampmigrate.scalerflow import _module_paths


def _module_file(path: str, dots: int, module: str) -> str | None:
    """The file on disk that ``from <dots><module> import ...`` in ``path`` loads."""
    return next((p for p in _module_paths(path, dots, module) if os.path.isfile(p)), None)


def module_function(path: str, qualified: str) -> ast.FunctionDef | None:
    """The function that ``qualified`` names as the file at ``path`` imports it
    (``pkg.module.name``, ``module.Class.method``, with leading dots for a relative import),
    where that module is a file on disk; None elsewhere."""
    found = module_definition(path, qualified)
    return found[1] if found is not None and isinstance(found[1], ast.FunctionDef) else None


def module_definition(
    path: str, qualified: str
) -> tuple[str, ast.FunctionDef | ast.ClassDef] | None:
    """The file and the function or class that ``qualified`` names (see
    :func:`module_function`)."""
    dots = len(qualified) - len(qualified.lstrip("."))
    parts = qualified[dots:].split(".")
    for i in range(len(parts) - 1, 0, -1):
        found = _module_file(path, dots, ".".join(parts[:i]))
        if found is None:
            continue
        tree = module_tree(found)
        body: list[ast.stmt] = tree.body if tree is not None else []
        node: ast.AST | None = None
        for part in parts[i:]:
            node = next(
                (s for s in body
                 if isinstance(s, ast.FunctionDef | ast.ClassDef) and s.name == part),
                None,
            )  # fmt: skip
            if node is None:
                return None
            body = node.body
        return (found, node) if isinstance(node, ast.FunctionDef | ast.ClassDef) else None
    return None


@functools.lru_cache(maxsize=64)
def _tree_of(path: str, mtime: int, size: int) -> ast.Module | None:
    """The module at ``path`` parsed, once per version of the file."""
    try:
        with open(path, "rb") as handle:
            return ast.parse(handle.read(), path)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def module_tree(path: str) -> ast.Module | None:
    """The module at ``path`` parsed, once per version of it (None: gone or unparsable)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return _tree_of(path, stat.st_mtime_ns, stat.st_size)


def _defs(tree: ast.Module, name: str) -> list[ast.FunctionDef]:
    """The module-level functions of ``tree`` named ``name``."""
    return [d for d in tree.body if isinstance(d, ast.FunctionDef) and d.name == name]


_SCAN_LIMIT = 5000  # files looked at for the users of a function (a project, not a disk)


def project_folder(path: str) -> str:
    """The folder holding ``path``'s top package (for a script in no package, its own
    folder): where the rest of its program is looked for."""
    folder = os.path.dirname(os.path.abspath(path))
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder = os.path.dirname(folder)
    return folder


def _project_files(
    path: str, every_folder: bool = False, through_top: bool = False
) -> list[str] | None:
    """The ``.py`` files of ``path``'s project on disk (see ``users_on_disk``), in walking
    order; for a file in no package, the files beside its folder too (they import it as a
    namespace package: `from utils.common import ...`) and, unless ``every_folder``, only the
    packages below. ``through_top``: for a file in no package, also the files elsewhere under
    the repository's top (a folder up to two levels above with a README, a setup.py, ...) that
    put a folder on ``sys.path`` or import the top folder of its path, through which they may
    import it (57a's
    `examples/run_ner.py` and `utils/adversarial.py`; 58a's two levels down). None: more than
    ``_SCAN_LIMIT`` files."""
    packaged = os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(path)), "__init__.py"))
    folder = project_folder(path)
    walked = os.walk(folder)
    parent = os.path.dirname(folder)
    if not packaged:
        beside = sorted(n for n in os.listdir(parent) if os.path.isfile(os.path.join(parent, n)))
        walked = itertools.chain([(parent, [], beside)], walked)
    found = _walked_files(walked, packaged or every_folder)
    top = next((t for t in _above(folder) if _top(t)), None) if not _top(folder) else None
    if found is None or packaged or not through_top or top is None:
        return found
    known = set(found)
    more = _walked_files(os.walk(top), True)
    if more is None:
        return None
    dotted = os.path.relpath(os.path.splitext(path)[0], top).replace(os.sep, ".")
    first = dotted.partition(".")[0].encode()
    found += [
        f
        for f in more
        if f not in known
        and any(
            w in _read(f)
            for w in (b"sys.path", b"addsitedir", b"from " + first, b"import " + first)
        )
    ]  # fmt: skip (60a's R3: run as `python -m`, or with PYTHONPATH, beside no `sys.path`)
    return found


def _walked_files(walked: Iterable, every_folder: bool) -> list[str] | None:
    """The ``.py`` files of an ``os.walk`` (into packages only, unless ``every_folder``)."""
    found: list[str] = []
    for where, folders, names in walked:
        folders[:] = sorted(
            d for d in folders
            if not d.startswith(".") and d != "__pycache__"
            and (every_folder or os.path.isfile(os.path.join(where, d, "__init__.py")))
        )  # fmt: skip
        for name in sorted(names):
            if name.endswith(".py"):
                found.append(os.path.abspath(os.path.join(where, name)))
                if len(found) > _SCAN_LIMIT:
                    return None
    return found


def _above(folder: str, levels: int = 2) -> Iterator[str]:
    """The folders above ``folder``, nearest first, ``levels`` of them at most."""
    for _ in range(levels):
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        yield (folder := parent)


def _top(folder: str) -> bool:
    """``folder`` looks like where a repository starts (its files say so)."""
    markers = (".git", ".gitignore", "setup.py", "pyproject.toml", "setup.cfg", "README.md",
               "README.rst", "README", "requirements.txt", "LICENSE")  # fmt: skip
    return any(os.path.exists(os.path.join(folder, m)) for m in markers)


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run at module level: ``body`` and the blocks of its ``if``, ``try``,
    ``with`` and loops, but not function or class bodies."""
    for statement in body:
        if isinstance(statement, ast.If | ast.Try | ast.With | ast.For | ast.While):
            blocks = [statement.body, getattr(statement, "orelse", [])]
            blocks.append(getattr(statement, "finalbody", []))
            blocks += [h.body for h in getattr(statement, "handlers", [])]
            yield from _module_level([s for block in blocks for s in block])
        else:
            yield statement


def _package_init(module: str, level: int) -> str | None:
    """The ``__init__.py`` that ``from . import x`` (``level`` dots) reads from ``module``."""
    folder = os.path.dirname(os.path.abspath(module))
    for _ in range(max(level - 1, 0)):
        folder = os.path.dirname(folder)
    init = os.path.join(folder, "__init__.py")
    return init if os.path.isfile(init) else None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _tree(path: str, data: bytes) -> ast.Module | None:
    if b"import" not in data:
        return None
    try:
        return ast.parse(data, path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _import_statements(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of a module at any depth, in ``ast.walk``'s order (breadth
    first): only statements are visited, as imports are never inside expressions."""
    pending = collections.deque(body)
    while pending:
        node = pending.popleft()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], _BLOCKS):
                pending.extend(value)


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def _imported(path: str, node: ast.AST, exists: dict[str, bool] | None = None) -> Iterator[str]:
    """The files on disk an import statement of ``path`` may load (the first that exists per
    module named)."""
    if isinstance(node, ast.Import):
        modules = [(0, alias.name) for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        modules = [(node.level, f"{base}.{a.name}" if base else a.name) for a in node.names]
        modules.append((node.level, base))
    else:
        return
    for dots, module in modules:
        if not module:
            continue
        parts = module.split(".")
        for i in range(1, len(parts)):  # importing a.b.c runs a/__init__.py and a/b/__init__.py
            init = next(
                (p for p in _module_paths(path, dots, ".".join(parts[:i]))
                 if p.endswith("__init__.py") and _isfile(p, exists)),
                None,
            )  # fmt: skip
            if init is not None:
                yield os.path.abspath(init)
        target = next((p for p in _module_paths(path, dots, module) if _isfile(p, exists)), None)
        if target is not None:
            yield os.path.abspath(target)


def _isfile(path: str, cache: dict[str, bool] | None) -> bool:
    if cache is None:
        return os.path.isfile(path)
    if path not in cache:
        cache[path] = os.path.isfile(path)
    return cache[path]
