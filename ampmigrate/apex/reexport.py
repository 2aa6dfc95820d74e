"""apex's amp taken through a project module's star export, made local before planning.

``library.py`` runs ``from apex import amp`` and ``train.py`` takes it with ``from library import
*`` (plant-pathology's notebooks and scripts): ``amp`` in ``train.py`` is
apex's module object itself, so planning the file as if it said ``from library import *; from
apex import amp`` plans exactly what runs. The statement goes on the star import's own line, so
every other position is unchanged; the planner drops it with the other apex uses, and once no
module reads ``amp`` through ``library.py``, that module's import is reported unused (and goes).

Only where the binding is certain: the star import sits at the top level of the module, the
module it reads (on disk) binds the name once, by an unconditional top-level apex import (or
through a star import of a module that does, likewise), exports it (no ``__all__`` that leaves
it out), and neither module binds the name anywhere else; no later star import of ``train.py``
may bind it.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ampmigrate.apex.ondisk import module_tree
from ampmigrate.apex.siblings import _Graph, _walk, star_may_bind
from ampmigrate.apex.strays import _from_module, _reexported
from ampmigrate.apex.users import users_on_disk
from ampmigrate.engine.names import Names
from ampmigrate.engine.settings import FileResult, Settings
from ampmigrate.engine.source import Source

Item = tuple[str, bytes, frozenset[str]]


def localized(
    tree: ast.Module, source: Source, names: Names, strays: list[ast.AST]
) -> Source | str | None:
    """``source`` with apex's amp imported beside the star import that gives it, when every
    one of ``strays`` (the apex calls no import resolves) is a call through that name; a
    reason to refuse where another module reads that amp state without initializing it
    itself; None where the binding is not certain."""
    held = {_held(node, names, tree, source.path) for node in strays}
    if len(held) != 1 or None in held:
        return None
    (name,) = held
    if _bound_here(tree, name):
        return None
    stars = [
        s for s in tree.body
        if isinstance(s, ast.ImportFrom) and any(a.name == "*" for a in s.names)
    ]  # fmt: skip
    chains = [(s, chain) for s in stars if (chain := _surely_amp(source.path, s, name))]
    if not chains:
        return None
    last, chain = chains[-1]
    if any(star_may_bind(source.path, s, name) for s in stars[stars.index(last) + 1 :]):
        return None
    shared = _shared(source.path, chain, name)
    if shared is not None:
        return shared
    line = last.end_lineno or last.lineno
    at = source.offset(line, last.end_col_offset or 0)
    alias = "" if name == "amp" else f" as {name}"
    return Source(
        f"{source.text[:at]}; from apex import amp{alias}{source.text[at:]}",
        source.encoding,
        source.path,
    )


def _shared(path: str, chain: list[str], name: str) -> str | None:
    """Why the amp state this file sets up is read elsewhere through the same export (None:
    it is not): a module that takes ``name`` from one of ``chain`` (or from this file) and
    does not initialize apex amp itself relies on this file's ``initialize``, as a sibling
    module does; a file that initializes on its own and that this file does not import is
    another program (a second script).
    The 56th review: such a module raised once this file alone was rewritten."""
    mine = os.path.abspath(path)
    folder = os.path.dirname(mine)
    imported = {target for target, _, _ in _walk(mine, _Graph())}
    for module in [mine, *chain]:
        users = users_on_disk(module, [name], imports=True)
        if users is None:
            return (
                f"the project is too large to tell which modules read `{name}` through "
                f"{os.path.relpath(module, folder)}'s star export (they would share this "
                "file's amp state): migrate by hand"
            )
        for user, line, _ in users:
            user = os.path.abspath(user)
            if user == mine or user in chain:
                continue
            initializes = _initializes(user, name)
            if user not in imported and initializes:
                continue  # (a second script, run on its own)
            shown = os.path.relpath(user, folder)
            via = os.path.relpath(chain[0], folder)
            where = (
                "takes it from this file" if module == mine
                else f"reads it through {os.path.relpath(module, folder)} too"
            )  # fmt: skip
            how = (
                "which this file imports and which initializes apex amp too: apex kept one amp "
                "state for the process, which both set up and use"
                if initializes
                else "without initializing apex amp itself: it relies on the amp state this "
                "file sets up"
            )
            return (
                f"`{name}` is apex's amp taken through {via}'s star export, and {shown} "
                f"(line {line}) {where} {how}, and would still call apex after this file "
                "alone were migrated; migrate the two together by hand"
            )
    return None


def _initializes(path: str, name: str) -> bool:
    """The module calls ``name.initialize(...)`` (a call, not text in a comment or string)."""
    tree = module_tree(path)
    return tree is not None and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and n.func.attr == "initialize"
        and isinstance(n.func.value, ast.Name) and n.func.value.id == name
        for n in ast.walk(tree)
    )  # fmt: skip


def _held(node: ast.AST, names: Names, tree: ast.Module, path: str) -> str | None:
    """The name an apex call is made through, when that name comes from a star export."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and not names.bindings(node.func.value)
        and path
        and _reexported(node.func.value, names, tree, path) is not None
    ):
        return None
    return node.func.value.id


def _bound_here(tree: ast.Module, name: str) -> bool:
    """Anything in the module binds ``name`` (or may: ``global``, ``globals()``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name.partition(".")[0]) == name:
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and (
            node.name == name
        ):
            return True
        if isinstance(node, ast.arg) and node.arg == name:
            return True
        if isinstance(node, ast.Global | ast.Nonlocal) and name in node.names:
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and (node.func.id in ("globals", "vars", "exec", "eval"))
        ):
            return True
    return False


def _surely_amp(path: str, star: ast.ImportFrom, name: str, depth: int = 0) -> list[str]:
    """The modules through which ``from m import *`` in ``path`` binds ``name`` to apex's amp
    module at every run, from ``m`` to the one that imports it (empty: not so)."""
    found = _from_module(path, star) if depth <= 8 else None
    if found is None:
        return []
    target, tree = found
    target = os.path.abspath(target)
    if target.endswith("__init__.py"):
        return []  # (a submodule of that name may be what the package holds)
    exported = _exported(tree)
    if exported is not None and name not in exported:
        return []
    direct = [s for s in tree.body if _imports_amp(s, name)]
    stars = [
        s for s in tree.body
        if isinstance(s, ast.ImportFrom) and any(a.name == "*" for a in s.names)
    ]  # fmt: skip
    # once bound, nothing in the module binds it again (a star import after may not either)
    others = [s for s in tree.body if s not in direct and s not in stars]
    if any(_bound_here(ast.Module(body=[s], type_ignores=[]), name) for s in others):
        return []
    if len(direct) == 1:
        later = [s for s in stars if s.lineno > direct[0].lineno]
        return [] if any(star_may_bind(target, s, name) for s in later) else [target]
    if direct:
        return []
    chains = [(s, chain) for s in stars if (chain := _surely_amp(target, s, name, depth + 1))]
    if not chains:
        return []
    last, chain = chains[-1]
    rest = stars[stars.index(last) + 1 :]
    return [] if any(star_may_bind(target, s, name) for s in rest) else [target, *chain]


def _imports_amp(statement: ast.stmt, name: str) -> bool:
    """``from apex import amp [as name]`` or ``import apex.amp as name``, binding ``name``."""
    if isinstance(statement, ast.ImportFrom) and statement.module == "apex" and not statement.level:
        return any(a.name == "amp" and (a.asname or a.name) == name for a in statement.names)
    if isinstance(statement, ast.Import):
        return any(a.name == "apex.amp" and a.asname == name for a in statement.names)
    return False


def _exported(tree: ast.Module) -> set[str] | None:
    """The module's ``__all__`` (None: it has none; an empty set where it is not a literal,
    so no name counts as exported)."""
    exported: set[str] | None = None
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign)
            else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign)
            else []
        )  # fmt: skip
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            if not isinstance(node, ast.Assign):
                return set()
            try:
                exported = {str(n) for n in ast.literal_eval(node.value)}
            except (ValueError, TypeError, SyntaxError):
                return set()
    return exported


# The project pass: an exporter's import goes in the run that rewrites its users
PASS = "apex_reexports"
_EXPORTED = "but other modules use"
# ... and an availability probe kept for modules that test its outcome and import apex
KEPT_PROBE = "remove it together with that module's apex use"
_APEX_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+apex\b|import[ \t]+apex\b)", re.MULTILINE)


@dataclass(frozen=True)
class Users:
    """The files of the run that took an exporter's apex amp through its star export and whose
    rewrite takes it from apex itself now: applied in this run, or only offered."""

    applied: frozenset[str]
    offered: frozenset[str]


def prepare(settings: Settings, candidates: list[Item], paths: Sequence[Path]) -> Any:
    """True where the run may hold a star export of apex's amp (a star import and an apex amp
    import), or an availability probe of it; the settle step replaces it with what it
    found."""
    stars = any(b"import *" in s for _, s, _ in candidates)
    amp = [s for _, s, _ in candidates if b"apex" in s and b"amp" in s]
    probes = any(b"ImportError" in s for s in amp)  # (a probe kept for its users: settle)
    return (amp and (stars or probes)) or None


def settle(
    settings: Settings,
    candidates: list[Item],
    results: dict[str, FileResult],
    rerun: Callable[[list[Item], Settings], list[FileResult]],
) -> None:
    """Analyse again the modules whose apex amp import stayed only for users that this run
    rewrote (or offered to): the import goes with them (or says it will)."""
    items = {os.path.abspath(item[0]): item for item in candidates}
    found: dict[str, Users] = {}
    for path, item in items.items():
        result = results[item[0]]
        if not any(d.code == "AMP303" and _EXPORTED in d.message for d in result.diagnostics):
            continue
        users = _users(path, item[1])
        if not users or any(u not in items for u in users):
            continue
        state = {u: rewrite_state(results[items[u][0]]) for u in users}
        if "no" not in state.values():
            found[path] = Users(
                frozenset(u for u, s in state.items() if s == "applied"),
                frozenset(u for u, s in state.items() if s == "offered"),
            )
    found.update(_probes_cleared(items, results))
    if found:
        again = replace(settings, project={**settings.project, PASS: found})
        results.update((r.path, r) for r in rerun([items[p] for p in found], again))


def _probes_cleared(items: dict[str, Item], results: dict[str, FileResult]) -> dict[str, Users]:
    """The modules whose availability probe stayed for modules that test its outcome and
    import apex, where this run takes apex out of every other file of the run that imports it
    (applied, or offered as fixes): the probe goes with them (the 70th review: kept, it
    switched the migrated trainer to float32 where apex was not installed). One file that
    stays on apex keeps it (the 69th review's pytorch-lightning)."""
    kept = [
        path for path, item in items.items()
        if any(d.code == "AMP303" and KEPT_PROBE in d.message
               for d in results[item[0]].diagnostics)
    ]  # fmt: skip
    if not kept:
        return {}
    applied, offered = set(), set()
    for path, item in items.items():
        result = results[item[0]]
        final = result.new_source if result.changed else (result.original or item[1])
        if path in kept or not _APEX_IMPORT.search(final or b""):
            if result.changed and _APEX_IMPORT.search(item[1]):
                applied.add(path)
            continue
        apexes = [  # (AMP301 is guidance beside AMP303's fix; AMP316 is a requirement)
            d for d in result.diagnostics
            if d.code.startswith("AMP3") and d.code not in ("AMP301", "AMP316")
        ]  # fmt: skip
        if not apexes or any(d.fix is None for d in apexes):
            return {}  # (a file that stays on apex: every kept probe stays)
        offered.add(path)
    return {p: Users(frozenset(applied), frozenset(offered)) for p in kept}


def _users(path: str, data: bytes) -> set[str] | None:
    """The files that use the names the module's apex amp imports bind (None: unknown)."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    bound = [
        a.asname or a.name for s in tree.body if isinstance(s, ast.Import | ast.ImportFrom)
        for a in s.names if _imports_amp(s, a.asname or a.name)
    ]  # fmt: skip
    users = users_on_disk(path, bound, imports=True) if bound else None
    return None if users is None else {os.path.abspath(u[0]) for u in users}


def rewrite_state(result: FileResult) -> str:
    """Where a file's AMP303 stands: "applied", "offered" (fixable, not applied) or "no"."""
    if any(d.code == "AMP303" for d in result.fixed):
        return "applied"
    if any(d.code == "AMP303" and d.fix is not None for d in result.diagnostics):
        return "offered"
    return "no"
