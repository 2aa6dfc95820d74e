"""apex imports left unused once the names they bound are migrated: the import (or the
``try:`` that guards it) goes, unless the module re-exports it or a probe tests its outcome."""

from __future__ import annotations

import ast
import os
import re
from typing import TYPE_CHECKING

from ampmigrate.apex.api.common import _PROBED, _SCOPES, _logs, _probing_tries
from ampmigrate.apex.reexport import KEPT_PROBE
from ampmigrate.apex.siblings import apex_imported_beyond
from ampmigrate.apex.users import apex_imported_by_users, users_on_disk
from ampmigrate.engine.names import Names
from ampmigrate.engine.source import Source
from ampmigrate.findings import Edit, Finding, Fix, ImportEdit

if TYPE_CHECKING:
    from ampmigrate.apex.reexport import Users


def _rebound_first(names: Names, stmt: ast.stmt, load: ast.Name) -> bool:
    """``load`` cannot read what ``stmt`` binds: it sits in another arm of an ``if``/``try``
    than ``stmt``, after a statement of its own arm that binds the name again (an
    ``if fp16: from apex.parallel import DDP ... else: from torch.nn.parallel import DDP``
    pair, in one function: a scope-wide reading calls the apex import used)."""
    if not names.exclusive(stmt, load):
        return False
    return names.bound_before(load, {id(a) for a in names.ancestors(stmt)}) is not None


def _deletion(names: Names, stmt: ast.stmt, source: Source | None) -> tuple[Edit, ...]:
    """The edit that deletes ``stmt`` with its line (empty: it is the only statement of a block
    other than the module's, shares its lines with another, or holds several names)."""
    owner, block = next(
        (
            (a, b)
            for a in names.ancestors(stmt)
            for b in (getattr(a, f, None) for f in ("body", "orelse", "finalbody"))
            if isinstance(b, list) and stmt in b
        ),
        (None, []),
    )
    if source is None or len(getattr(stmt, "names", ())) > 1:
        return ()
    if len(block) < 2 and not isinstance(owner, ast.Module):  # (a module may be empty)
        return ()
    start, stop = source.span(stmt)
    line = source.line_start(stmt.lineno)
    after = re.compile(r"[ \t]*(#[^\r\n]*)?(\r\n|\r|\n|$)").match(source.text, stop)
    if source.text[line:start].strip() or after is None:
        return ()  # another statement on its lines (`;`)
    end = after.end()
    if block[0] is stmt:  # the blank lines after a block's first statement go with it
        end = re.compile(r"([ \t]*(\r\n|\r|\n))*").match(source.text, end).end()
    return (Edit(line, end, ""),)


def unused_import(
    names: Names,
    stmt: ast.Import | ast.ImportFrom,
    alias: ast.alias,
    full: str,
    code: str,
    path: str,
    source: Source | None = None,
    rebound: int | None = None,
    rewritten: Users | None = None,
) -> Finding | None:
    """The finding for ``from <module> import <alias>`` or ``import <alias>`` (the apex name
    ``full``) when nothing reads it (None otherwise): deleting it is safe, as Ruff's F401 fix;
    inside a ``try`` that catches its ImportError it is an availability probe, and in a
    package's ``__init__`` it may be re-exported: deleting it is unsafe there. Where the
    name is read only after another arm binds it again (``_rebound_first``), the import
    manager, which judges a name by scope, would keep it: the statement itself is deleted
    (given ``source``; it must hold that one name and share its block). ``rebound``: the
    line of a module-level statement that binds the name again before anything reads it
    (``_dead_imports``): its reads are not of the import. ``rewritten``: the modules that took
    the name through this one's star export and that this run rewrites to import apex's amp
    themselves (:class:`ampmigrate.apex.reexport.Users`)."""
    bound = alias.asname or alias.name.partition(".")[0]
    loads = (
        []
        if rebound is not None
        else [
            n
            for n in names.spelled(bound)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        ]
    )
    if any(not _rebound_first(names, stmt, n) for n in loads):
        return None
    scoped = any(isinstance(a, _SCOPES) for a in names.ancestors(stmt))
    if not scoped and bound in _exported(names.tree):
        return Finding(  # (the 43rd review: "imported but unused", then "0 fixed")
            code,
            f"`{full}` is not read in this file, but its `__all__` exports `{bound}`: the "
            "modules that import it from here get apex's; remove it from `__all__`, then the "
            "import, once none does (by hand)",
            stmt,
        )
    # the import manager judges a name by scope (it would keep a name read after another arm
    # binds it again), and a package's `__init__` keeps its imports on `fix` (its public
    # API): there the statement itself is deleted (given ``source``)
    local_in_package = scoped and os.path.basename(path) == "__init__.py"
    edits: tuple[Edit, ...] = ()
    if loads or local_in_package:
        edits = _deletion(names, stmt, source)
        if not edits and loads:
            return None
    guard = names.parent(stmt)
    alone = isinstance(guard, ast.Try) and guard.body == [stmt]
    if rebound is not None:  # the import manager keeps a name that is read: the statement goes
        edits = _deletion(names, guard if alone else stmt, source)
        if not edits:
            return Finding(
                code,
                f"`{full}` is imported as `{bound}`, bound again at line "
                f"{rebound} before any read: delete the import by hand",
                stmt,
            )
    package = os.path.basename(path) == "__init__.py" and not scoped  # (a local re-exports none)
    if not scoped and rebound is None:  # (importers of a rebound name get the new value)
        users = users_on_disk(path, [bound], imports=True)
        if users and rewritten is not None:  # (they take it from apex now)
            users = [u for u in users if os.path.abspath(u[0]) not in rewritten.applied]
        if users is None or users:
            offered = rewritten is not None and {os.path.abspath(u[0]) for u in users} <= (
                rewritten.offered
            )
            return Finding(code, _reexported(full, bound, path, users, offered), stmt)
    if package and not edits:  # no importer takes it: the statement itself goes (the import
        edits = _deletion(names, stmt, source)  # manager keeps a package's imports)
    tries = _probing_tries(names, stmt)
    guarded = bool(tries)
    message = (
        f"`{full}` is imported but unused: the import only ties the file to apex"
        if rebound is None
        else f"`{full}` is imported as `{bound}`, which line {rebound} binds again before "
        "anything reads it: the apex name never runs here, and the import only ties the file "
        "to apex"
        + (
            f"; its `try` goes with the `except` at line {guard.handlers[0].lineno}, whose "
            "statements no longer run where apex is missing"
            if alone
            else ""
        )
    )
    # a probe whose `try` records its outcome (`APEX_FOUND = True`) for code to test, while a
    # module this one imports still imports apex: that test still guards it
    recorded = {  # the names the `try` records its outcome in (`has_apex = True`)
        t.id
        for a in tries
        for part in (a.body, *(h.body for h in a.handlers))
        for s in part
        for n in ast.walk(s)
        if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    }
    # tested here or taken by another module (the 43rd review: timm's scripts, whose
    # `has_apex` nothing reads, were kept for a module that still imports apex)
    flagged = any(
        isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        for flag in recorded
        for n in names.spelled(flag)
    ) or bool(recorded and users_on_disk(path, sorted(recorded), imports=True) != [])
    here = _guarded_here(names, stmt, recorded) if flagged else None
    if here is not None:  # (the 67th review's dolomite shape, within one module)
        flag, line = here
        return Finding(
            code,
            f"`{full}` is not read in this file, but it is an availability probe (inside a "
            f"`try` that catches ImportError) whose outcome `{flag}` guards this file's own "
            f"apex import at line {line}: removed, the probe would report apex as present and "
            "that import would run without apex; remove the probe once that import is gone",
            stmt,
        )
    guarding = apex_imported_beyond(path) if flagged else None
    if guarding is not None:
        other, line = guarding
        shown = os.path.relpath(other, os.path.dirname(os.path.abspath(path)))
        return Finding(
            code,
            f"`{full}` is not read in this file, but it is an availability probe (inside a "
            f"`try` that catches ImportError) and {shown}, which this module imports, still "
            f"imports apex (line {line}): code that tests the probe's outcome guards that "
            "use; remove the probe once no imported module needs apex",
            stmt,
        )
    # ... or whose outcome (the function around it, the flag its `try` sets) another module
    # tests to guard an apex import of its own (TextBrewer's `is_apex_available()`)
    probes = [
        *(a.name for a in names.ancestors(stmt) if isinstance(a, ast.FunctionDef)),
        *(t.id for a in tries for n in ast.walk(a) if isinstance(n, ast.Assign)
          for t in n.targets if isinstance(t, ast.Name)),
        *_reporters(names.tree, recorded),  # (`def is_apex_available(): return _HAVE_APEX`)
    ][:8]  # fmt: skip
    tested = apex_imported_by_users(path, probes) if guarded and probes else None
    if (
        tested is not None
        and rewritten is not None
        and os.path.abspath(tested[0]) in rewritten.applied | rewritten.offered
    ):  # (this run takes apex out of that module and every other: the probe goes too)
        tested = None
    if tested is not None:
        other, line, probe = tested
        shown = os.path.relpath(other, os.path.dirname(os.path.abspath(path)))
        where = (
            f"{shown} uses `{probe}` and still imports apex (line {line})"
            if line
            else "the project is too large to look for modules that test its outcome"
        )
        return Finding(
            code,
            f"`{full}` is not read in this file, but it is an availability probe (inside a "
            f"`try` that catches ImportError) and {where}: removed, the probe would report "
            "apex as present and that module's apex code would run without apex; "
            f"{KEPT_PROBE}",
            stmt,
        )
    effects = next(  # what else the `try` runs only where the import succeeds
        (
            s
            for a in tries
            for s in a.body
            if not isinstance(s, ast.Import | ast.ImportFrom | ast.Pass)
            and not (isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant))
        ),
        None,
    )
    if effects is not None:
        return Finding(
            code,
            f"`{full}` is imported but unused; it is an availability probe whose `try` also "
            f"runs line {effects.lineno} only where apex is installed: deleting the import "
            "would run that code everywhere, deleting the `try` body nowhere; migrate it by "
            "hand",
            stmt,
        )
    if guarded:
        message += (
            _probe_note(names, tries, stmt)
            if flagged or not recorded
            else " (an availability probe whose outcome nothing reads)"
        )
    if package:
        message += " (a package's `__init__` may re-export it)"
    if (local_in_package or package) and not edits:  # (the import manager keeps it there)
        return Finding(code, message + "; delete it by hand", stmt)
    fix = Fix(
        "unsafe" if guarded or package else "safe",
        edits=edits,
        remove_imports=()
        if edits
        else (
            ImportEdit(stmt.module or "", alias.name, alias.asname)
            if isinstance(stmt, ast.ImportFrom)
            else ImportEdit(alias.name, None, alias.asname),
        ),
    )
    return Finding(code, message, stmt, fix)


def _probe_note(names: Names, tries: list[ast.Try], stmt: ast.stmt) -> str:
    """What removing ``stmt`` does to the availability probe its ``try`` is, where the ``try``
    also imports apex names this file reads (iVMCL's `from apex import amp` beside the unused
    `convert_syncbn_model`, the 76th review: "now runs as if apex were installed" was false
    while amp stays; the 77th review: it is true once a rewrite removes that import too)."""
    other = next(
        (
            s
            for t in tries
            for s in t.body
            if s is not stmt
            and _imports_apex(s)
            and any(
                isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                for a in s.names
                for n in names.spelled((a.asname or a.name).partition(".")[0])
            )
        ),
        None,
    )
    if other is None:
        return _PROBED
    return (
        f" (an availability probe: while the `try`'s apex import at line {other.lineno} "
        "stays, code that tests its outcome still follows whether apex is installed; once "
        "that goes too, it runs as if apex were installed)"
    )


def _imports_apex(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.ImportFrom):
        return not stmt.level and (stmt.module or "").partition(".")[0] == "apex"
    return isinstance(stmt, ast.Import) and any(
        a.name.partition(".")[0] == "apex" for a in stmt.names
    )


def _exported(tree: ast.Module) -> set[str]:
    """The names a module-level ``__all__`` list or tuple of strings holds."""
    found: set[str] = set()
    for statement in tree.body:
        if (
            isinstance(statement, ast.Assign | ast.AugAssign)
            and any(
                isinstance(t, ast.Name) and t.id == "__all__"
                for t in (statement.targets if isinstance(statement, ast.Assign)
                          else [statement.target])
            )
            and isinstance(statement.value, ast.List | ast.Tuple)
        ):  # fmt: skip
            found |= {
                e.value
                for e in statement.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
    return found


def unused_star(
    names: Names, stmt: ast.ImportFrom, bound: list[str], code: str, path: str, source: Source
) -> Finding | None:
    """``from <apex module> import *`` (``bound``: the names it binds) when nothing here reads
    them (None otherwise), as ``unused_import`` says of one name. Alone in a ``try`` whose
    handlers only raise, log or pass, the ``try`` goes with it: apex is no longer needed, so
    what ran where it was missing never runs."""
    shown = f"from {stmt.module} import *"
    loads = [n for name in bound for n in names.spelled(name)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]  # fmt: skip
    if any(b.node is stmt for n in loads for b in names.bindings(n)):
        return None
    if not any(isinstance(a, _SCOPES) for a in names.ancestors(stmt)):
        users = users_on_disk(path, bound, imports=True)
        if users is None or users:
            return Finding(code, _reexported(shown, "its names", path, users), stmt)
    tries = _probing_tries(names, stmt)
    guard = names.parent(stmt)
    whole = (
        isinstance(guard, ast.Try)
        and guard in tries
        and guard.body == [stmt]
        and not guard.orelse
        and not guard.finalbody
        and all(
            isinstance(s, ast.Raise | ast.Pass) or _logs(s) for h in guard.handlers for s in h.body
        )
    )
    message = f"`{shown}` binds names nothing here reads: the import only ties the file to apex"
    if whole:
        message += (
            f"; its `try` goes with the `except` at line {guard.handlers[0].lineno}, which "
            "only raised or logged where apex is missing"
        )
    elif tries:
        message += _probe_note(names, tries, stmt)
    edits = _deletion(names, guard if whole else stmt, source)
    if not edits:
        return Finding(code, message + "; delete it by hand", stmt)
    return Finding(code, message, stmt, Fix("unsafe" if tries and not whole else "safe", edits))


def _reexported(
    full: str,
    bound: str,
    path: str,
    users: list[tuple[str, int, str]] | None,
    offered: bool = False,
) -> str:
    """Why a module-level apex import that this file never reads stays: other modules of the
    project take ``bound`` from this one (``from .utils import *``, ``from utils import amp``),
    and deleting it would break them at import or at their first apex call. ``offered``: every
    one of them has a rewrite that takes it from apex itself, not applied in this run."""
    if users is None:
        return (
            f"`{full}` is not read in this file, but the project is too large to tell whether "
            f"another module imports `{bound}` from it: remove the import by hand once no "
            "module does"
        )
    folder = os.path.dirname(os.path.abspath(path))
    shown = [f"{os.path.relpath(f, folder)}:{line}" for f, line, _ in users[:3]]
    more = f" and {len(users) - 3} more" if len(users) > 3 else ""
    if offered:
        return (
            f"`{full}` is not read in this file, but other modules use `{bound}` through it "
            f"({', '.join(shown)}{more}); their AMP303 rewrite, offered in this run, takes "
            "apex's amp from apex itself: the run that applies it deletes this import too"
        )
    return (
        f"`{full}` is not read in this file, but other modules use `{bound}` through it "
        f"({', '.join(shown)}{more}), which this run leaves on apex (outside the run, or "
        "refused, suppressed or not applied: their own findings say why); the import goes "
        "in the run that migrates every one of them (a star import's user is rewritten where "
        "it is certain to get apex's amp from here), or by hand once none uses it"
    )


def _guarded_here(names: Names, probe: ast.stmt, flags: set[str]) -> tuple[str, int] | None:
    """(the flag, the line) of an apex import of this file, other than the probe ``probe``,
    under an ``if`` that tests one of the probe's ``flags`` (``if HAVE_APEX: from
    apex.optimizers import FusedLAMB``)."""
    for node in ast.walk(names.tree):
        if node is probe or not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                continue
            module = node.module or ""
        else:
            module = node.names[0].name
        if module.partition(".")[0] != "apex":
            continue
        for above in names.ancestors(node):
            if isinstance(above, ast.If | ast.IfExp | ast.While):
                tested = {n.id for n in ast.walk(above.test) if isinstance(n, ast.Name)}
                if tested & flags:
                    return sorted(tested & flags)[0], node.lineno
    return None


def _reporters(tree: ast.Module, flags: set[str]) -> list[str]:
    """The module-level functions and classes that read one of the probe's ``flags``: another
    module tests the probe's outcome through them (``is_apex_available()``), or gets it as
    derived state (pytorch-lightning's ``AMPMixin``, whose ``self.use_amp = use_amp and
    APEX_AVAILABLE`` guards the apex calls of the trainer it is mixed into: the 69th
    review)."""
    return [
        s.name
        for s in tree.body
        if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and any(isinstance(n, ast.Name) and n.id in flags for n in ast.walk(s))
    ]
