"""Plan the rewrites of the apex names outside ``apex.amp`` (AMP311-AMP315), on ``ast``.

Every reference is resolved through the file's imports (``Names``), never matched as text; its
context decides what it becomes:

- a call of a class or function with a torch counterpart: the callee becomes the torch name and
  each argument is mapped, dropped (a literal equal to apex's default, an option with no torch
  meaning) or refused with the reason (``table.Target``); apex defaults that torch does not
  share are written out;
- a type position (``isinstance``, ``except``, annotations): the torch class where one class
  has the meaning, else no fix;
- a subclass: a finding, no fix (its constructor and overrides rely on apex);
- another value (``BertLayerNorm = FusedLayerNorm``): the torch class where its defaults are
  apex's, else no fix (the calls are not visible);
- a ``try:`` that imports apex with a fallback binding the same names: the fallback stays, the
  ``try`` goes; one that swaps the project's own class for apex's: the swap goes;
- a name with no native counterpart: a finding naming what projects use instead.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ampmigrate.apex.api import table
from ampmigrate.apex.api.splat import Keys, groups_carry, splat_keys
from ampmigrate.apex.api.table import TARGETS, Target
from ampmigrate.apex.links import (
    apex_imported_beyond,
    apex_imported_by_users,
    function_around,
    module_tree,
    users_on_disk,
)
from ampmigrate.catalog import Rule
from ampmigrate.engine.names import Names, dotted
from ampmigrate.engine.source import Source
from ampmigrate.findings import Edit, Finding, Fix, ImportEdit
from ampmigrate.renames import CallText, NoFix, _Plan, _pure

if TYPE_CHECKING:
    from ampmigrate.apex.reexport import Users
    from ampmigrate.engine import Settings

_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception"})
_TYPE_CHECKS = frozenset({"builtins.isinstance", "builtins.issubclass"})
_APEX_DDP_ONLY = frozenset({"disable_allreduce", "enable_allreduce", "allreduce_params"})
_OLD_ADAM = frozenset({"max_grad_norm", "eps_inside_sqrt", "amp_scale_adjustment"})
_SKIP = frozenset({"apex.optimizers.FP16_Optimizer", "apex.contrib.optimizers.FP16_Optimizer"})


def check(
    tree: ast.Module, source: Source, names: Names, rules: Sequence[Rule], settings: Settings
) -> list[Finding]:
    """The findings of the selected AMP31x rules."""
    codes = {r.code for r in rules}
    planner = _Planner(tree, source, names, settings.target_torch)
    planner.run()
    return [f for f in planner.findings if f.code in codes]


def _instead(head: str, text: str, no_fix: str = "") -> str:
    """AMP315's message: a text that names the alternative follows "use instead" (it is no
    "no counterpart" claim); one that says there is none stands after the head."""
    return f"{head}{no_fix}; use instead: {text}" if text.startswith("`") else f"{head}: {text}"


def _l2_mode(call: ast.Call, target: Target) -> bool:
    """A FusedAdam call with ``adam_w_mode=False`` written: torch's Adam, not AdamW."""
    if "adam_w_mode" not in target.params:
        return False
    given = {k.arg: k.value for k in call.keywords}
    index = target.params.index("adam_w_mode")
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args):
        given["adam_w_mode"] = call.args[index]
    return "adam_w_mode" in given and _literal_in(given["adam_w_mode"], table.FALSE)


_STDLIB = frozenset({"functools", "typing", "warnings", "logging", "os", "sys", "math"})
_WORLD_SIZE = frozenset({
    "torch.distributed.get_world_size", "torch.distributed.distributed_c10d.get_world_size",
})  # fmt: skip


def _literal_in(node: ast.expr, allowed: tuple[object, ...]) -> bool:
    """``node`` is a literal equal (same type) to one of ``allowed``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return False
    if not isinstance(node, ast.Constant):
        return False
    return any(
        (type(node.value) is type(a) and node.value == a)
        or (type(a) is int and type(node.value) is float and node.value == a)
        for a in allowed
    )


def _carried(
    splats: list[Keys], values: dict[str, ast.expr], target: Target, new: str, fallback: bool
) -> frozenset[str]:
    """The keys the call's ``**`` splats always carry; ``NoFix`` (or ``_FallbackCall``) where
    one may carry a key the fix would have to drop, rename or decide a default for: a fix
    cannot edit inside the dict."""
    certain: set[str] = set()
    written = dict(target.write)
    for keys in splats:
        for key in sorted(keys.possible):
            splat = f"`**{keys.name}` may carry `{key}`"
            if key not in target.params:
                if fallback:
                    raise _FallbackCall
                if key in _OLD_ADAM and target.new.startswith("torch.optim.Adam"):
                    raise NoFix(f"{splat}, an argument of the pre-2019 FusedAdam (apex.contrib's)")
                if key in table.TORCH_TAKES.get(new, {key}):
                    raise NoFix(f"{splat}, which apex's signature lacks and `{new}` takes")
                continue  # apex and torch raise alike where it does
            if key in values:
                raise NoFix(f"{splat}, which the call also passes: it already fails there")
            if {key} & {*target.drop, *target.drop_any, *target.rename, *target.refuse}:
                raise NoFix(
                    f"{splat}, which the fix must drop, rename or judge by its value for "
                    f"`{new}`, and it cannot edit inside the dict"
                )
            if key in written and key not in keys.certain and new != "torch.optim.Adam":
                raise NoFix(
                    f"{splat} or not: where it does not, apex's default `{key}="
                    f"{written[key]}` differs from `{new}`'s, and writing it out would clash "
                    "where it does"
                )
        certain |= keys.certain
    return frozenset(certain)


def _joined(pieces: list[str], origin: list[int], read: CallText, text: str) -> str:
    """The rewritten arguments in the call's layout; where it puts them on lines of their own,
    the comments after a kept argument stay after it (``lr=1e-4,  # note``), as written (the
    last argument's are in the text after it, which the rewrite keeps as it is)."""
    out = []
    for at, piece in enumerate(pieces):
        out.append(piece)
        if at == len(pieces) - 1:
            break
        index = origin[at] if at < len(origin) else -1
        gap = (
            text[read.args[index].end : read.args[index + 1].start]
            if 0 <= index < len(read.args) - 1
            else ""
        )
        if "#" in gap and "\n" in read.separator:
            out.append(gap if gap.lstrip().startswith(",") else "," + gap)
        else:
            out.append(read.separator)
    return "".join(out)


def _constant_flag(statement: ast.stmt) -> bool:
    """``has_apex = True``: a name bound to a constant, which cannot raise."""
    return (
        isinstance(statement, ast.Assign)
        and all(isinstance(t, ast.Name) for t in statement.targets)
        and isinstance(statement.value, ast.Constant)
    )


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((dotted(k) or "").rsplit(".", 1)[-1] in _IMPORT_ERRORS for k in kinds)


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
    ][:8]  # fmt: skip
    tested = apex_imported_by_users(path, probes) if guarded and probes else None
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
            "apex as present and that import would run without apex; remove it together "
            "with that module's apex use",
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
            _PROBED
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


_PROBED = " (an availability probe: code that tests its outcome now runs as if apex were installed)"


def _probing_tries(names: Names, stmt: ast.stmt) -> list[ast.Try]:
    """The ``try``s around ``stmt`` that catch its ImportError: it probes for apex."""
    return [
        a
        for a in names.ancestors(stmt)
        if isinstance(a, ast.Try) and any(_catches_import_error(h) for h in a.handlers)
    ]


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
        message += _PROBED
    edits = _deletion(names, guard if whole else stmt, source)
    if not edits:
        return Finding(code, message + "; delete it by hand", stmt)
    return Finding(code, message, stmt, Fix("unsafe" if tries and not whole else "safe", edits))


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


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


def _handler_flags(guard: ast.Try) -> set[str]:
    """The names the handlers of ``guard`` assign (``has_apex = False``): flags that record
    whether apex imported."""
    return {
        t.id
        for h in guard.handlers
        for n in ast.walk(h)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }


def _bound_names(body: list[ast.stmt]) -> set[str]:
    """The names a block binds at its top level."""
    out: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.Assign):
            out |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            out.add(stmt.target.id)
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            out |= {(a.asname or a.name).partition(".")[0] for a in stmt.names}
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(stmt.name)
    return out


def _logs(stmt: ast.stmt) -> bool:
    """A log line of a fallback (``logger.info(...)``, ``print(...)``, ``warnings.warn``) or a
    string: nothing the code after it uses."""
    if not isinstance(stmt, ast.Expr):
        return False
    if isinstance(stmt.value, ast.Constant):
        return isinstance(stmt.value.value, str)
    call = stmt.value
    return isinstance(call, ast.Call) and (dotted(call.func) or "").rpartition(".")[2] in _LOGS


def _accepts(call: ast.Call, accepted: tuple[str, ...], where: str) -> None:
    """Raise ``NoFix`` unless ``call`` passes only ``accepted`` parameters, without splats."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        raise NoFix(f"{where} passes a splat, which may carry what torch's class rejects")
    if len(call.args) > len(accepted):
        raise NoFix(f"{where} passes more positional arguments than torch's class takes alike")
    for k in call.keywords:
        if k.arg not in accepted:
            raise NoFix(f"{where} passes `{k.arg}`, which torch's class does not take alike")


def _uses_in(path: str, name: str, accepted: tuple[str, ...]) -> bool:
    """Raise ``NoFix`` unless every use, in the module at ``path``, of ``name`` imported
    from the module being fixed is its import, a call that passes only ``accepted``
    arguments (no splat), or a type test (``isinstance``, ``issubclass``): the 64th review's
    Lumina, whose blocks import the norm (`RMSNorm(dim, eps=norm_eps)`) from the module that
    swaps it for apex's. True where a type test was seen."""
    tree = module_tree(path)
    shown = os.path.basename(path)
    if tree is None:
        raise NoFix(f"{shown}, which uses the name, does not parse")
    bound = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
        if a.name == name
    }
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    typed = False
    for use in ast.walk(tree):
        if isinstance(use, ast.Attribute) and use.attr == name:
            raise NoFix(f"{shown}:{use.lineno} reads the name through its module")
        if not (isinstance(use, ast.Name) and use.id in bound):
            continue
        parent = parents.get(use)
        where = f"{shown}:{use.lineno}"
        if not isinstance(use.ctx, ast.Load):
            raise NoFix(f"{where} binds the name again")
        if isinstance(parent, ast.Call) and parent.func is use:
            _accepts(parent, accepted, f"the call at {where}")
            continue
        holder = parents.get(parent) if isinstance(parent, ast.Tuple) else parent
        tested = parent if isinstance(parent, ast.Tuple) else use
        if not (
            isinstance(holder, ast.Call)
            and dotted(holder.func) in ("isinstance", "issubclass")
            and len(holder.args) == 2
            and holder.args[1] is tested
        ):
            raise NoFix(f"{where} uses the name other than by a call or a type test")
        typed = True
    return typed


def _parameters(cls: ast.ClassDef) -> list[str] | None:
    """The parameters the class ``cls`` makes (``self.x = nn.Parameter(...)``,
    ``self.register_parameter("x", ...)``); None: one it makes otherwise (a submodule)."""
    found: list[str] = []
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            kind = (dotted(node.value.func) or "").rpartition(".")[2]
            for t in node.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                    if t.value.id == "self" and kind == "Parameter":
                        found.append(t.attr)
                    elif t.value.id == "self" and kind[:1].isupper():
                        return None  # a submodule: its parameters are nested
        elif isinstance(node, ast.Call) and dotted(node.func) == "self.register_parameter":
            name = node.args[0] if node.args else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                return None
            found.append(name.value)
    return found


class _FallbackCall(Exception):
    """A call that can only be of the torch fallback a name is also bound to."""


def _star_exports(tree: ast.Module, name: str) -> bool:
    """``from <tree's module> import *`` may bind ``name``: its module-level code binds it
    (a def, a class, an import, an assignment, a `for` or walrus target, also under `if`/`try`),
    star-imports another module (not followed: it may), or binds names by `globals()`,
    `setattr` or `sys.modules`; unless a literal ``__all__``, never changed, leaves it out."""
    if re.search(r"globals\(\)|setattr\(|sys\.modules", ast.unparse(tree)):
        return True  # (bound by name: it may be)
    binds, listed = False, []
    for stmt in _module_statements(tree.body):
        if (
            isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets)
            and isinstance(stmt.value, ast.List | ast.Tuple)
            and all(isinstance(e, ast.Constant) for e in stmt.value.elts)
        ):
            listed.append(stmt)
        targets = stmt if isinstance(stmt, ast.Assign) else getattr(stmt, "target", None)
        stored = targets is not None and any(  # (a tuple, a `for` target, an annotation, 52a)
            isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
            for n in ast.walk(targets)
        )
        starred = isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names)
        walrus = any(isinstance(n, ast.NamedExpr) and n.target.id == name for n in ast.walk(stmt))
        binds = binds or stored or starred or walrus or name in _bound_names([stmt])
    # `__all__ +=`, `.append(...)` or a comprehension change it (52a): then it does not decide
    mentions = sum(isinstance(n, ast.Name) and n.id == "__all__" for n in ast.walk(tree))
    if len(listed) == 1 and mentions == 1:
        return name in {e.value for e in listed[0].value.elts}
    return binds


def _module_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Every statement that runs at module level, compound ones and those they hold (`except`
    and `case` bodies too), but none of a function's or a class's body."""
    out, pending = [], list(body)
    while pending:
        stmt = pending.pop(0)
        out.append(stmt)
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                pending.append(child)
            elif isinstance(child, ast.ExceptHandler | ast.match_case):
                pending += child.body
    return out


def _same_computation(apex: ast.FunctionDef, fallback: ast.FunctionDef | None) -> bool:
    """``fallback`` takes ``apex``'s parameters alike and returns what ``apex`` itself returns
    for some inputs (fairseq's ``cross_entropy`` returns ``_cross_entropy_pytorch(...)`` for a
    CPU tensor, its fallback for every tensor): the project defines the two as one
    computation, apex's kernel a faster path of it."""
    if fallback is None or ast.dump(apex.args) != ast.dump(fallback.args):
        return False
    if [ast.dump(d) for d in apex.decorator_list] != [ast.dump(d) for d in fallback.decorator_list]:
        return False
    body = fallback.body[1:] if ast.get_docstring(fallback) is not None else fallback.body
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return False
    returned = ast.dump(body[0].value)
    # the return runs first thing, behind `if` tests only (50a: a parameter changed before
    # it, or a return in a nested function, is no evidence)
    block = apex.body[1:] if ast.get_docstring(apex) is not None else apex.body
    while block:
        first = block[0]
        if isinstance(first, ast.Return):
            return first.value is not None and ast.dump(first.value) == returned
        if not isinstance(first, ast.If) or any(  # (a test that changes an argument, 51a)
            isinstance(n, ast.NamedExpr)
            or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr.endswith("_") and not n.func.attr.startswith("_"))
            for n in ast.walk(first.test)
        ):  # fmt: skip
            return False
        block = first.body
    return False


def _replaces(stmt: ast.stmt) -> bool:
    """A statement of a fallback that provides a replacement: an import, a definition, an
    assignment of something other than a literal (``X = None`` is an availability flag), a
    call (a log line)."""
    if isinstance(stmt, ast.Assign | ast.AnnAssign):
        return stmt.value is not None and not isinstance(stmt.value, ast.Constant)
    kinds = ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef | ast.Expr
    return isinstance(stmt, kinds)


_NORM_MODULES = frozenset({"apex.normalization", "apex.normalization.fused_layer_norm"})
# What apex's norm classes and torch's share with one meaning (beyond ``torch.nn.Module``'s).
_SHARED = {
    "torch.nn.LayerNorm": frozenset({"weight", "bias", "eps", "normalized_shape",
                                     "elementwise_affine"}),
    "torch.nn.RMSNorm": frozenset({"weight", "eps", "normalized_shape", "elementwise_affine"}),
}  # fmt: skip
_PARAMETERS = {"torch.nn.LayerNorm": ("weight", "bias"), "torch.nn.RMSNorm": ("weight",)}
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_LOGS = frozenset({"print", "info", "warning", "warn", "debug", "error", "exception", "critical"})


def _rms_class(name: str, apex_name: str, torch_name: str, indent: str) -> str:
    """The class ``name`` that stands in for apex's RMSNorm ``apex_name`` where its calls are
    not visible: torch's with FusedRMSNorm's parameters, so apex's ``eps`` default (1e-5;
    torch's is the input dtype's machine epsilon) holds for every call, value and subclass."""
    short = apex_name.rpartition(".")[2]
    lines = [
        f"class {name}({torch_name}.nn.RMSNorm):",
        f'    """apex\'s {short} on torch: `torch.nn.RMSNorm` with apex\'s `eps` default (1e-5,',
        "    not the input dtype's machine epsilon); apex's `memory_efficient` only saved "
        'memory."""',
        "",
        "    def __init__(",  # (one parameter a line: black and ruff keep it so)
        "        self,",
        "        normalized_shape,",
        "        eps=1e-5,",
        "        elementwise_affine=True,",
        "        memory_efficient=False,",
        "    ):",
        "        super().__init__(normalized_shape, eps, elementwise_affine)",
    ]
    return "".join(f"{indent}{line}\n" if line else "\n" for line in lines)


class _Planner:
    def __init__(
        self, tree: ast.Module, source: Source, names: Names, floor: tuple[int, ...] | None
    ) -> None:
        self.tree = tree
        self.floor = floor  # the oldest torch the project supports (None: not known)
        self.source = source
        self.names = names
        self.findings: list[Finding] = []
        self._consumed: set[ast.AST] = set()
        self._users: dict[str, list[tuple[str, int, str]] | None] = {}  # by name: users_on_disk
        self._written: dict[int, list[Edit]] = {}  # by `try`: apex's defaults written at calls

    # ---- the walk ----------------------------------------------------------------------------

    def run(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Try):
                self._try(node)
            elif isinstance(node, ast.Call):
                self._dynamic_import(node)
        self._unused_imports()
        roots = self._apex_bound() - set(self._dead_imports)
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Name | ast.Attribute) or isinstance(node.ctx, ast.Store):
                continue
            parent = self.names.parent(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                continue  # only the longest chain is a reference
            root = node
            while isinstance(root, ast.Attribute):
                root = root.value
            if not isinstance(root, ast.Name) or root.id not in roots:
                continue  # resolving is the cost: only names an apex import binds
            if self._consumed and any(a in self._consumed for a in self.names.ancestors(node)):
                continue
            self._reference(node, parent)
        going = {  # the imports some fix of this file removes
            (e.module, e.obj, e.asname)
            for f in self.findings
            if f.fix is not None
            for e in f.fix.remove_imports
        }
        self.findings = [self._flag_stated(f, going) for f in self.findings]

    def _flag_stated(self, found: Finding, going: set) -> Finding:
        """A fix that drops an import of a ``try`` of apex imports only, whose ``except``
        sets a flag the file tests (``has_apex = False``): once its last import goes, the
        engine drops the ``try`` with that ``except``, and the flag keeps the value it had
        where apex was installed. Stated (BiSeNet: the fallback DDP and the float32 path
        for a run without apex went unsaid); not where an import of it has no fix (``going``:
        those some fix removes), so the ``try`` never empties (unmasked_teacher's FusedLAMB)."""
        fix = found.fix
        if fix is None or not fix.remove_imports:
            return found
        removed = {(e.module, e.obj, e.asname) for e in fix.remove_imports}
        said = next(
            (text for keys, text in self._flag_guards if keys & removed and keys <= going), None
        )
        if said is not None and self._apex_strings:
            # physicsnemo (the 48th review): `"apex.optimizers.FusedAdam" if have_apex else
            # "torch.optim.Adam"`, loaded by `importlib`: the flag, True for good once the `try`
            # goes, then loads apex by name where it is missing (ModuleNotFoundError)
            line, text = self._apex_strings[0]
            head = found.message.partition(":")[0]
            return replace(found, fix=None, message=(
                f"{head}: no automatic fix: dropping it empties the `try` whose `except` set a "
                "flag for a run without apex, and every test of the flag would take the path "
                f"that ran where apex was installed, while line {line} names `{text}` in a "
                "string (apex loaded by name at run time, which that path may do): replace "
                "that string by the torch name, by hand, first"
            ))  # fmt: skip
        return found if said is None else replace(found, message=found.message + said)

    @functools.cached_property
    def _apex_strings(self) -> list[tuple[int, str]]:
        """The string literals that spell an apex module or name (``"apex.optimizers"``)."""
        return [
            (n.lineno, n.value)
            for n in ast.walk(self.tree)
            if isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and re.fullmatch(r"apex(\.[A-Za-z_]\w*)*", n.value)
        ]

    @functools.cached_property
    def _flag_guards(self) -> list[tuple[set[tuple[str, str | None, str | None]], str]]:
        """Each ``try`` of apex imports only whose ``except`` sets a flag read elsewhere: the
        imports it holds (as ``ImportEdit`` fields) and what dropping it does, said once for
        the file (``_flag_stated``)."""
        out = []
        for guard in ast.walk(self.tree):
            if not (
                isinstance(guard, ast.Try)
                and guard.handlers
                and all(_catches_import_error(h) for h in guard.handlers)
                and all(
                    isinstance(s, ast.Import | ast.ImportFrom) or _constant_flag(s)
                    for s in guard.body
                )
                and all(
                    (s.module or "").partition(".")[0] == "apex"
                    if isinstance(s, ast.ImportFrom)
                    else all(a.name.partition(".")[0] == "apex" for a in s.names)
                    for s in guard.body
                    if not _constant_flag(s)
                )
                and not all(_constant_flag(s) for s in guard.body)
            ):
                continue
            imports = [s for s in guard.body if not _constant_flag(s)]
            flags = sorted(_handler_flags(guard) - _bound_names(imports))
            inside = {id(n) for n in ast.walk(guard)}
            lines = sorted({
                n.lineno for n in ast.walk(self.tree)
                if isinstance(n, ast.Name) and n.id in flags and isinstance(n.ctx, ast.Load)
                and id(n) not in inside
            })  # fmt: skip
            if not lines:
                continue
            keys = {
                (s.module, a.name, a.asname) if isinstance(s, ast.ImportFrom)
                else (a.name, None, a.asname)
                for s in imports
                for a in s.names
            }  # fmt: skip
            listed = ", ".join(f"`{f}`" for f in flags)
            shown = ", ".join(map(str, lines[:6])) + (", ..." if len(lines) > 6 else "")
            fate = "no longer runs" if len(imports) < len(guard.body) else "goes with it"
            out.append((keys, (
                f"; behaviour change once the `try` at line {guard.lineno} loses its last "
                f"apex import: its `except`, which set {listed} where apex was not installed, "
                f"{fate}, and every test of it (line{'s' if len(lines) > 1 else ''} "
                f"{shown}) takes the path that ran where apex was installed (a run without "
                "apex took the other one)"
            )))  # fmt: skip
        return out

    def _dynamic_import(self, call: ast.Call) -> None:
        """``importlib.import_module("fused_adam_cuda")`` (jukebox): apex's extension loaded by
        name, which no import statement shows."""
        if not (
            call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
            and {"importlib.import_module", "builtins.__import__"} & self.names.qualified(call.func)
        ):
            return
        name = call.args[0].value
        lookup = self.names.parent(call)  # `getattr(import_module("apex.optimizers"), "X")`
        member = None
        if (
            isinstance(lookup, ast.Call)
            and isinstance(lookup.func, ast.Name)
            and lookup.func.id == "getattr"
            and len(lookup.args) >= 2
            and lookup.args[0] is call
            and isinstance(lookup.args[1], ast.Constant)
            and isinstance(lookup.args[1].value, str)
        ):
            member = lookup.args[1].value
        elif isinstance(lookup, ast.Attribute) and lookup.value is call:
            # `import_module("apex.normalization").FusedLayerNorm` (49a), and down a chain:
            # `import_module("apex").optimizers.FusedAdam`, `__import__("apex.optimizers")
            # .optimizers.FusedAdam` (`__import__` without `fromlist` gives the package, 50a)
            chain, above = [], lookup
            while isinstance(above, ast.Attribute) and not above.attr.startswith("__"):
                chain.append(above.attr)
                above = self.names.parent(above)
            if "builtins.__import__" in self.names.qualified(call.func) and not any(
                k.arg == "fromlist" for k in call.keywords
            ) and len(call.args) < 4:  # fmt: skip
                name = name.partition(".")[0]
            dotted_names = [f"{name}." + ".".join(chain[: i + 1]) for i in range(len(chain))]
            known = [d for d in dotted_names if d in TARGETS or table.no_native(d) is not None]
            member = known[-1][len(name) + 1 :] if known else (chain[0] if chain else None)
        if member is not None:
            full = f"{name}.{member}"
            target = TARGETS.get(full)
            if target is not None:  # (physicsnemo's diffusion_fwi, the 48th review)
                defaults = ", ".join(f"`{k}={v}`" for k, v in target.write)
                message = (
                    f"`{full}` is loaded by name at run time: its torch counterpart is "
                    f"`{target.new}` ({target.accepts}), but no fix edits a lookup by name: "
                    f"write `{target.new}` there by hand"
                    + (f", passing {defaults} where a call gives none (apex's defaults)"
                       if defaults else "")
                )  # fmt: skip
                self.findings.append(Finding(target.code, message, lookup, None))
                return
            name = full if table.no_native(full) is not None else name
        text = table.no_native(name)
        if text is None or name.startswith(table.ELSEWHERE):
            return
        message = _instead(f"`{name}` is loaded by name at run time", text)
        self.findings.append(Finding(table.NO_NATIVE, message, call, None))

    @functools.cached_property
    def _dead_imports(self) -> dict[str, int]:
        """Names a module-level apex import binds (alone, or in a ``try`` of its own) that the
        next module-level statement binds again (``BertLayerNorm = torch.nn.LayerNorm`` after
        a guarded apex import), with nothing that could read them in between, nothing that
        binds them later and no ``global`` of them: every read sees the new value, so the
        import is dead. Name -> the line that binds it again."""
        body = self.tree.body
        out: dict[str, int] = {}
        for index, stmt in enumerate(body[:-1]):
            imports = [stmt] if isinstance(stmt, ast.ImportFrom) else []
            if isinstance(stmt, ast.Try) and not stmt.orelse and not stmt.finalbody:
                imports = [s for s in stmt.body if isinstance(s, ast.ImportFrom)]
                if len(imports) != len(stmt.body):
                    continue
            nxt = body[index + 1]
            if not (
                isinstance(nxt, ast.Assign)
                and len(nxt.targets) == 1
                and isinstance(nxt.targets[0], ast.Name)
                and not any(isinstance(n, ast.Call | ast.NamedExpr) for n in ast.walk(nxt.value))
            ):
                continue
            name = nxt.targets[0].id
            for imported in imports:
                root = (imported.module or "").partition(".")[0]
                if imported.level or root != "apex":
                    continue
                if not any((a.asname or a.name) == name for a in imported.names):
                    continue
                if name in {n.id for n in ast.walk(nxt.value) if isinstance(n, ast.Name)}:
                    continue  # (`X = X or fallback` reads the import)
                # no other binding of the name anywhere (a handler's included), no `global` of
                # it, and no import of it but this `try`'s
                rebinds = any(
                    (isinstance(n, ast.Name) and n.id == name
                     and not isinstance(n.ctx, ast.Load) and n is not nxt.targets[0])
                    or (isinstance(n, ast.Global | ast.Nonlocal) and name in n.names)
                    or (isinstance(n, ast.alias) and (n.asname or n.name) == name
                        and not any(n in i.names for i in imports))
                    for n in ast.walk(self.tree)
                )  # fmt: skip
                if not rebinds:
                    out[name] = nxt.lineno
        return out

    def _apex_bound(self) -> set[str]:
        """The names the file's imports of apex (and its compiled extensions) bind."""
        out = set()
        for binding in self.names.imports():
            stmt, alias = binding.node, binding.alias
            if alias is None:
                continue
            module = alias.name if isinstance(stmt, ast.Import) else stmt.module or ""
            if isinstance(stmt, ast.ImportFrom) and stmt.level:
                continue
            root = module.partition(".")[0]
            if root == "apex" or root in table.COMPILED:
                out.add(binding.name)
        return out

    def _apex_names(self, node: ast.AST) -> tuple[list[str], bool]:
        """The apex names ``node`` may be, and whether something else may bind it too."""
        qualified = self.names.qualified(node)
        apex = sorted(
            q for q in qualified if q.startswith("apex.") or q.partition(".")[0] in table.COMPILED
        )
        return apex, len(apex) < len(qualified)

    def _reference(self, node: ast.Name | ast.Attribute, parent: ast.AST | None) -> None:
        found, conditional = self._apex_names(node)
        if not found or self._bound_by_consumed(node):
            return
        name = found[0]
        star = self._star_rebinds(node)
        if star is not None:  # (50a: `from mylib import *` defines its own FusedLayerNorm)
            code = TARGETS[name].code if name in TARGETS else table.NO_NATIVE
            self.findings.append(Finding(code, (
                f"`{name}`: no automatic fix: `{star[1]}` at line {star[0]} comes after apex's "
                "import, and its module may bind the name too (it defines it, star-imports "
                "another module, binds names by `globals()`/`setattr`, or cannot be read): a "
                "read here may be that module's"
            ), node, None))  # fmt: skip
            return
        rival = self._rival(node) if conditional else None
        if rival is not None and (name in table.TO_PYTHON_FLOAT or name in TARGETS):
            code = table.SAME_OBJECT if name in table.TO_PYTHON_FLOAT else TARGETS[name].code
            where = parent if isinstance(parent, ast.Call) and parent.func is node else node
            message = (
                f"`{name}`: no automatic fix: the name is also bound at line {rival[0]} "
                f"(`{rival[1]}`), which is no fallback of apex's import: the binding a use "
                "reaches depends on which of them ran last, and that one may not be apex's"
            )
            self.findings.append(Finding(code, message, where, None))
            return
        if name in table.TO_PYTHON_FLOAT:
            self._to_python_float(node, parent, name, conditional)
            return
        same = next((k for k in table.SAME if name == k or name.startswith(k + ".")), None)
        if same is not None:
            new = table.SAME[same] + name[len(same) :]
            safety = "unsafe" if conditional else "safe"
            fix = self._rename_fix(node, new, safety)
            message = f"`{same}` is `{table.SAME[same]}` under another name"
            self.findings.append(Finding(table.SAME_OBJECT, message, node, fix))
            return
        if name.startswith(table.ELSEWHERE) or name in _SKIP:
            return
        if ".__dict__" in f"{name}.":  # `optimizers.__dict__[name]`, `.__dict__.get(...)`
            name = name.partition(".__dict__")[0]  # (49a, 50a): the module read as a value
        target = TARGETS.get(name)
        members = {  # `apex.optimizers` read as a module value (`getattr(optimizers, name)`)
            k.rpartition(".")[2]: t
            for k, t in TARGETS.items()
            if k.rpartition(".")[0] == name and k.rpartition(".")[2][:1].isupper()
        }
        if target is None and members:  # (physicsnemo's unified_recipe, the 48th review)
            mapped = ", ".join(f"`{k}` -> `{t.new}`" for k, t in sorted(members.items()))
            message = (
                f"`{name}` is read as a module value (line {node.lineno}): which of its names "
                "runs is chosen there at run time, so no fix can pick one; its torch "
                f"counterparts: {mapped} (each with apex's defaults its rule writes out); the "
                "others keep apex (AMP315)"
            )
            self.findings.append(Finding(next(iter(members.values())).code, message, node, None))
            return
        if target is None:
            text = table.no_native(name)
            if text is not None:
                where = parent if isinstance(parent, ast.Call) and parent.func is node else node
                message = _instead(f"`{name}`", text, " has no automatic fix")
                self.findings.append(Finding(table.NO_NATIVE, message, where, None))
            return
        self._target(node, parent, name, target, conditional)

    def _target(
        self, node: ast.expr, parent: ast.AST | None, name: str, target: Target, conditional: bool
    ) -> None:
        head = f"`{name}` -> `{target.new}`"
        if target.min_torch and self.floor is not None and self.floor < target.min_torch:
            needs, floor = (".".join(map(str, v)) for v in (target.min_torch, self.floor))
            reason = f"`{target.new}` needs torch >= {needs}; the project supports torch {floor}"
            self._report(target, node, f"{head}: no automatic fix: {reason}", None)
            return
        if isinstance(parent, ast.Call) and parent.func is node:
            # another binding of the name (torch's class, or a third-party one: sagemaker-cv's
            # smdistributed DDP in the other arm, the 34th review) takes a call with arguments
            # apex's signature lacks: that call is not apex's
            fallback = conditional or target.new in self.names.qualified(node)
            wraps = target.new == "torch.nn.parallel.DistributedDataParallel"
            given = self._initialized_with(parent) if wraps else None
            if given is not None:
                reason = (
                    f"the wrapped model reaches `amp.initialize` at line {given}, which raises "
                    "RuntimeError for a torch DistributedDataParallel (parallel wrappers go "
                    "after `initialize`) and let apex's through: migrate apex amp first "
                    "(AMP303; where it rewrites this file, the next pass of `fix` makes this "
                    "one), or wrap the model after `initialize`"
                )
                self._report(target, parent, f"{head}: no automatic fix: {reason}", None)
                return
            if self._exported(node, target, head, parent):
                return
            try:
                new, fix, notes = self._call(parent, node, target, fallback)
            except _FallbackCall:
                return  # torch's own class, called with torch's arguments: nothing to migrate
            except NoFix as reason:
                if _l2_mode(parent, target):  # (the refusal names the class it would be)
                    head = f"`{name}` -> `torch.optim.Adam`"
                self._report(target, parent, f"{head}: no automatic fix: {reason}", None)
                return
            if conditional:
                notes.append("the name is also bound by a fallback, which the fix bypasses")
            message = f"`{name}` -> `{new}`: {target.accepts}"
            if notes:
                message += "; " + "; ".join(notes)
            self._report(target, parent, message, fix)
            return
        base = isinstance(parent, ast.ClassDef) and any(node is b for b in parent.bases)
        if (
            target.new == "torch.nn.RMSNorm"
            and (base or not (self._annotation(node) or self._typed(node)))
            and self._stand_in_import(node) is not None
        ):
            try:
                fix = self._rms_stand_in(node, name)
            except NoFix as reason:
                self._report(target, node, f"{head}: no automatic fix: {reason}", None)
                return
            bound = node.id  # type: ignore[union-attr]
            use = "a base class" if base else "a value"
            message = (
                f"{head}: used as {use}, so the import becomes `class {bound}(torch.nn.RMSNorm)` "
                "with apex's parameters and `eps=1e-5` default (torch's is the input dtype's "
                f"machine epsilon), and every use of `{bound}` keeps working; {target.accepts}"
            )
            if not base:
                message += (
                    f"; a type test against this value matches the modules `{bound}` builds, "
                    "not those of the calls rewritten to `torch.nn.RMSNorm`"
                )
            self._report(target, node, message, fix)
            return
        if base:
            try:
                fix, message = self._rebased(node, parent, target, head)
            except NoFix as reason:
                self._report(target, node, f"{head}: no automatic fix: {reason}", None)
                return
            self._report(target, node, message, fix)
            return
        if self._exported(node, target, head, node):
            return
        renamed = None
        if self._annotation(node):  # (constructs nothing: torch's defaults cannot matter)
            renamed = "in an annotation, which constructs nothing (its value changes)"
        elif not conditional and (local := self._local_calls(node, parent, target)):
            renamed = f"{local}; {target.accepts}"
        if renamed is not None:
            try:
                fix = self._rename_fix(node, target.new, "unsafe", target.min_torch)
            except NoFix as reason:
                self._report(target, node, f"{head}: no automatic fix: {reason}", None)
                return
            self._report(target, node, f"{head}: {renamed}", fix)
            return
        typed = self._typed(node)
        keyed = None if typed else self._identity_use(node)
        if keyed is not None:
            reason = (
                f"used as a key of the class itself ({keyed}): code that tells classes apart by "
                f"identity would treat every `{target.new}` of the process as it treated apex's "
                "class (a registry of apex's classes would take torch's own); delete or re-key "
                "it by hand"
            )
            self._report(target, node, f"{head}: no automatic fix: {reason}", None)
            return
        if conditional and not typed:
            reason = (
                "read as a value while a fallback binds the name too (an availability check): "
                "remove the check by hand; the torch replacement is always there"
            )
            self._report(target, node, f"{head}: no automatic fix: {reason}", None)
            return
        is_class = target.new.rpartition(".")[2][:1].isupper()
        refusal = (target.as_type or ("" if is_class else "not a class")) if typed else ""
        refusal = refusal or ("" if typed else target.as_value) or self._apex_ddp_only(target)
        if refusal:
            self._report(target, node, f"{head}: no automatic fix: {refusal}", None)
            return
        try:
            fix = self._rename_fix(node, target.new, "unsafe", target.min_torch)
        except NoFix as reason:
            self._report(target, node, f"{head}: no automatic fix: {reason}", None)
            return
        if typed:
            extra = f"the type test now matches every `{target.new}`, not only apex's"
        else:
            extra = f"used as a value: its calls get `{target.new}`'s defaults"
        self._report(target, node, f"{head}: {extra}; {target.accepts}", fix)

    def _world_size(self, value: ast.expr) -> bool:
        """``value`` is ``torch.distributed.get_world_size()`` (the default group's)."""
        return (
            isinstance(value, ast.Call)
            and not value.args
            and not value.keywords
            and bool(self.names.qualified(value.func) & _WORLD_SIZE)
        )

    def _identity_use(self, node: ast.expr) -> str | None:
        """Where the class is read for its identity, not to build with (ColossalAI's tracer:
        ``register_leaf_module(apex.normalization.FusedLayerNorm)``, the 64th review): a dict
        key, a subscript key, an operand of a comparison, an argument of a call whose name
        says it registers. None for other values (a factory, a default, an alias)."""
        parent = self.names.parent(node)
        if isinstance(parent, ast.Dict) and any(k is node for k in parent.keys):
            return "a dict key"
        if isinstance(parent, ast.Subscript) and parent.slice is node:
            return "a subscript key"
        if isinstance(parent, ast.Compare) and not all(
            isinstance(o, ast.Constant) and o.value is None
            for o in [parent.left, *parent.comparators]
            if o is not node
        ):  # (`FusedAdam is None` tests availability: a key of nothing)
            return "compared"
        element = node
        if isinstance(parent, ast.Tuple | ast.List | ast.Set):  # `register((A, B))`, `in (A, B)`
            holder = self.names.parent(parent)
            if isinstance(holder, ast.Compare):
                return "compared"
            element, parent = parent, holder
        if isinstance(parent, ast.Call) and any(a is element for a in parent.args):
            called = parent.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if "regist" in name.lower():
                return f"handed to `{ast.unparse(called)}(...)`"
        return None

    def _rebased(
        self, node: ast.expr, cls: ast.ClassDef, target: Target, head: str
    ) -> tuple[Fix, str]:
        """``class FusedLayerNorm(_FusedLayerNorm)`` whose methods read of ``self`` only what
        apex's and torch's classes share and of ``super()`` only ``forward`` (fairseq's
        ``layer_norm.py``, copied in many projects: ``forward`` under ``torch.cuda.device``),
        built in this file only, with arguments torch's class takes alike: rebased on torch's
        class. Raises ``NoFix`` with the reason otherwise."""
        if target.new not in _SHARED or target.new == "torch.nn.RMSNorm":
            raise NoFix(
                "a subclass relies on apex's constructor arguments and internals (its overrides "
                f"may read apex's state or kernels): rebase it on `{target.new}` by hand"
            )
        accepted = target.new_positional
        self._subclass_reads(cls, accepted, _SHARED[target.new])
        if any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in cls.body):
            raise NoFix(f"the subclass `{cls.name}` has a constructor of its own")
        guard = next(
            (a for a in self.names.ancestors(cls) if isinstance(a, ast.Try)
             and any(_catches_import_error(h) for h in a.handlers)),
            None,
        )  # fmt: skip
        if guard is not None and self._falls_back_to(guard, cls.name, target.new):
            # (ESM, the 47th review: where apex was missing the name was torch's class, so
            # every use of it, here or in another module, already builds torch's alike)
            return self._rebase_fix(node, cls, target, head, guard, fell_back=True)
        for use in ast.walk(self.tree):
            if not (isinstance(use, ast.Name) and use.id == cls.name):
                continue
            call = self.names.parent(use)
            if not (isinstance(use.ctx, ast.Load) and isinstance(call, ast.Call)
                    and call.func is use):  # fmt: skip
                raise NoFix(
                    f"the subclass `{cls.name}` is used at line {use.lineno} other than by a "
                    "call: what is built with it is not visible here"
                )
            _accepts(call, accepted, f"the call of `{cls.name}` at line {use.lineno}")
        if not any(isinstance(a, _SCOPES) for a in self.names.ancestors(cls)):
            users = self._importers(cls.name)
            if users is None or users:
                where = self._shown(users) if users else "the project is too large to look"
                raise NoFix(f"other modules take the subclass `{cls.name}` ({where})")
        return self._rebase_fix(node, cls, target, head, guard, fell_back=False)

    def _local_calls(self, node: ast.expr, parent: ast.AST | None, target: Target) -> str | None:
        """``opt_cls = Adam`` in a function (Megatron's ``adam_optimizer = Adam`` beside
        CPUAdam or bitsandbytes in the other arms; the 49th review) whose every read there is
        a call giving each argument whose default differs, and only arguments torch's class
        takes with apex's meaning: ``torch.optim.AdamW`` builds at those calls what apex
        built. Why (the message's part), or None."""
        function = next((a for a in self.names.ancestors(node) if isinstance(a, _SCOPES)), None)
        if not (
            isinstance(parent, ast.Assign)
            and parent.value is node
            and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name)
            and isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            and target.new in table.TORCH_TAKES
        ):
            return None
        local = parent.targets[0].id
        takes = table.TORCH_TAKES[target.new]
        calls = []
        for use in ast.walk(function):
            if not (isinstance(use, ast.Name) and use.id == local) or use is parent.targets[0]:
                continue
            if isinstance(use.ctx, ast.Store):
                continue  # (another arm's class: `opt_cls = torch.optim.Adam`)
            call = self.names.parent(use)
            if not (isinstance(call, ast.Call) and call.func is use) or any(
                isinstance(a, ast.Starred) for a in call.args
            ):
                return None
            given = dict(zip(target.params, call.args, strict=False))
            if len(call.args) > len(target.new_positional) or any(
                target.params[i] != p for i, p in enumerate(target.new_positional[: len(call.args)])
            ):
                return None
            given.update((k.arg, k.value) for k in call.keywords if k.arg is not None)
            if any(k.arg is None for k in call.keywords) or any(
                k not in takes or k not in target.params or k in target.rename
                or k in target.refuse or k in target.drop or k in target.drop_any
                for k in given
            ) or any(k not in given for k, _ in target.write):  # fmt: skip
                return None
            calls.append(call)
        if not calls or any(
            (isinstance(n, ast.Global | ast.Nonlocal) and local in n.names)
            or (  # (50a: `locals()["opt_cls"](...)` reads it where no call shows; `vars(x)`
                # reads an object's, not the function's; 52a: `get = locals`, `vars(*[])`)
                isinstance(n, ast.Name)
                and n.id in ("locals", "eval", "exec", "vars")
                and not (
                    n.id == "vars"
                    and isinstance(call := self.names.parent(n), ast.Call)
                    and call.func is n
                    and call.args
                    and not isinstance(call.args[0], ast.Starred)
                )
            )
            or (isinstance(n, ast.Attribute) and n.attr in ("_getframe", "f_locals"))
            for n in ast.walk(function)
        ):
            return None
        lines = ", ".join(str(c.lineno) for c in calls)
        written = ", ".join(f"`{k}`" for k, _ in target.write)
        gives = f"passes {written} itself and only" if written else "passes only"
        return (
            f"bound to `{local}` (line {parent.lineno}), whose every call in `{function.name}` "
            f"(line{'s' if len(calls) > 1 else ''} {lines}) {gives} arguments `{target.new}` "
            "takes alike, so it builds there what apex built"
        )

    def _falls_back_to(self, guard: ast.Try, name: str, new: str) -> bool:
        """An ``except ImportError`` of ``guard`` binds ``name`` to ``new`` itself (``from
        torch.nn import LayerNorm as FastLN``, ``FastLN = nn.LayerNorm``), last."""
        for handler in guard.handlers:
            if not _catches_import_error(handler):
                continue
            last = None  # (49a: `FastLN = torch.nn.GroupNorm` after the LayerNorm import)
            for stmt in handler.body:
                if name not in _bound_names([stmt]):
                    continue
                last = False
                if isinstance(stmt, ast.ImportFrom) and not stmt.level:
                    last = any(
                        (a.asname or a.name) == name and f"{stmt.module}.{a.name}" == new
                        for a in stmt.names
                    )
                elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    last = new in self.names.qualified(stmt.value)
            if last:
                return True
        return False

    def _rebase_fix(
        self,
        node: ast.expr,
        cls: ast.ClassDef,
        target: Target,
        head: str,
        guard: ast.Try | None,
        fell_back: bool,
    ) -> tuple[Fix, str]:
        """The rebase on torch's class; ``fell_back``: the guard's ``except`` binds the name
        to it (``_falls_back_to``), which is why every use builds torch's class alike."""
        fix = self._rename_fix(node, target.new, "unsafe", target.min_torch)
        if fell_back:
            built = (
                "and wherever it is built (here or in another module) torch's class was built "
                f"in its place where apex was missing (the `except` at line "
                f"{guard.handlers[0].lineno} binds `{cls.name}` to `{target.new}`)"
            )
        else:
            built = "built here only with arguments torch's class takes alike"
        message = (
            f"{head}: as the base of `{cls.name}` (line {cls.lineno}), whose methods read only "
            f"what both classes share and call `super().forward`, {built}: it is rebased on "
            f"`{target.new}`; {target.accepts}"
        )
        if guard is not None:
            flags = sorted(_handler_flags(guard))
            message += (
                f"; the `try` at line {guard.lineno} stays, and its `except` (line "
                f"{guard.handlers[0].lineno}) can no longer run"
                + (
                    f": {', '.join(f'`{f}`' for f in flags)} now "
                    f"{'keeps the value' if len(flags) == 1 else 'keep the values'} the `try` "
                    "sets (a run without apex took the other path)"
                    if flags
                    else ""
                )
            )
        return fix, message

    def _exported(self, node: ast.expr, target: Target, head: str, where: ast.AST) -> bool:
        """Reported here (True) where the name's module-level import, which a call's fix
        deletes once unused, is imported from this module by others (ru-gpts:
        `mpu/__init__.py` re-exports `transformer.LayerNorm`, and every entry point imports
        `mpu`): rebound to torch's class where that keeps every use (``_rebind``), else
        refused, naming the importers."""
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return False
        bindings = self.names.bindings(root)
        if not bindings or any(
            b.alias is None or any(isinstance(a, _SCOPES) for a in self.names.ancestors(b.node))
            for b in bindings
        ):
            return False
        users = self._importers(root.id)
        if users == []:
            return False
        if users is None:
            why = f"the project is too large to tell whether other modules import `{root.id}`"
        else:
            why = f"other modules take `{root.id}` from this one ({self._shown(users)})"
            try:
                fix, bound = self._rebind(bindings[0].node, root.id, target)
            except NoFix as reason:
                why += f"; its import cannot become torch's class under the name: {reason}"
            else:
                self._report(target, where, (
                    f"{head}: {why}, so the import binds the name to torch's class "
                    f"(`{bound}`) and every use, here and there, gets it: {target.accepts}; "
                    "their uses are not read here (a `memory_efficient=` argument raises in "
                    "torch, a type test matches every torch LayerNorm)"
                ), fix)  # fmt: skip
                return True
        reason = (
            f"{why}, and the fix deletes its import once unused here: bind the name to "
            f"`{target.new}` at the import and check those uses, by hand"
        )
        self._report(target, where, f"{head}: no automatic fix: {reason}", None)
        return True

    def _rebind(self, stmt: ast.AST | None, name: str, target: Target) -> tuple[Fix, str]:
        """``from apex.normalization import FusedLayerNorm as LayerNorm`` that other modules
        import the name from (HERO's `BertLayerNorm`, ru-gpts' `mpu.LayerNorm`): the import
        becomes ``from torch.nn import LayerNorm as <name>``, so the name stays and means
        torch's class everywhere. Only for FusedLayerNorm, whose defaults torch's class shares,
        and where this file's own uses work alike with it."""
        if target is not TARGETS["apex.normalization.FusedLayerNorm"]:
            raise NoFix(f"`{target.new}`'s defaults or arguments differ from apex's")
        if (
            not isinstance(stmt, ast.ImportFrom)
            or stmt.level
            or stmt.module not in _NORM_MODULES
            or len(stmt.names) != 1
        ):
            raise NoFix("it is not a one-name `from apex.normalization import` of its own")
        guard = next((a for a in self.names.ancestors(stmt) if isinstance(a, ast.Try)), None)
        if guard is not None:
            raise NoFix(
                f"it sits in the `try` at line {guard.lineno}, whose other statements and "
                "`except` are not rewritten with it"
            )
        self._no_memory_efficient()
        self._fallback_uses(stmt, name, target)
        bound = f"from torch.nn import LayerNorm as {name}"
        start, end = self.source.span(stmt)
        return Fix("unsafe", edits=(Edit(start, end, bound),)), bound

    def _stand_in_import(self, node: ast.AST) -> tuple[ast.ImportFrom, ast.alias] | None:
        """The one import that binds the Name ``node``, where it is a single-line ``from
        apex.normalization import ...`` outside a ``try`` that catches ImportError (those are
        ``_try``'s): the statement a stand-in class can replace."""
        if not isinstance(node, ast.Name):
            return None
        bindings = self.names.bindings(node)
        if len(bindings) != 1 or bindings[0].alias is None:
            return None
        stmt = bindings[0].node
        if (
            not isinstance(stmt, ast.ImportFrom)
            or stmt.level
            or stmt.module not in _NORM_MODULES
            or stmt.lineno != stmt.end_lineno
            or self.source.line(stmt.lineno).strip() != self.source.segment(stmt)
        ):
            return None
        if _probing_tries(self.names, stmt):
            return None
        return stmt, bindings[0].alias

    def _rms_stand_in(self, node: ast.Name, name: str) -> Fix:
        """The fix for apex's RMSNorm ``name`` read as a value or a base class: its import
        becomes ``_rms_class`` under the same name (after the top import block, so that
        ``torch`` is bound before it), so every use keeps apex's parameters and defaults."""
        found = self._stand_in_import(node)
        assert found is not None
        stmt, alias = found
        self._no_memory_efficient()
        torch_name, add_torch = self._torch(stmt)
        module_level = not any(isinstance(a, _SCOPES) for a in self.names.ancestors(stmt))
        start, end = self._statement_lines(stmt)
        rest = [a for a in stmt.names if a is not alias]
        indent = self.source.line_indent(stmt.lineno)
        kept = ""
        if rest:
            listed = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in rest)
            kept = f"{indent}from {stmt.module} import {listed}\n"
        text = _rms_class(node.id, name, torch_name, indent)
        body = self.tree.body
        top = []
        for first in body[1:] if body and ast.get_docstring(self.tree) is not None else body:
            if not isinstance(first, ast.Import | ast.ImportFrom):
                break
            top.append(first)
        in_top = module_level and any(s is stmt for s in top)
        anchor = top[-1] if in_top else stmt  # the class goes after it
        later = [
            b.node.lineno
            for b in self.names.bindings(stmt, "torch")
            if module_level and b.node is not None and b.node.lineno > anchor.lineno
        ]
        if later:
            raise NoFix(
                f"`torch` is imported at line {later[0]}, after the apex import: move that "
                "import up first (the class that replaces apex's must follow it)"
            )
        if in_top:
            at = self._statement_lines(anchor)[1]
            edits = [Edit(start, end, kept), Edit(at, at, "\n\n" + text + self._gap(at, 2))]
        else:
            lead = "\n\n" if module_level and start else ""
            gap = self._gap(end, 2 if module_level else 1)
            edits = [Edit(start, end, kept + lead + text + gap)]
        return Fix(
            "unsafe",
            edits=tuple(edits),
            add_imports=frozenset({"torch"} if add_torch else ()),
            min_torch=TARGETS[name].min_torch,
        )

    def _gap(self, at: int, lines: int) -> str:
        """The newlines that leave ``lines`` blank lines between a class inserted at ``at`` and
        the code after it."""
        rest = self.source.text[at:]
        if not rest.strip():
            return ""
        blank = len(rest) - len(rest.lstrip("\n"))
        return "\n" * max(0, lines - blank)

    def _no_memory_efficient(self) -> None:
        """torch's norms have no ``memory_efficient`` attribute: a read of it (apex's) fails."""
        for node in ast.walk(self.tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "memory_efficient"
                and isinstance(node.ctx, ast.Load)
            ):
                raise NoFix(
                    f"`.memory_efficient` is read at line {node.lineno}, which may be apex's "
                    "norm attribute (torch's norms have none)"
                )

    def _initialized_with(self, call: ast.Call) -> int | None:
        """The line of an ``amp.initialize`` that may receive the model ``call`` wraps: the
        call itself as its argument, or the name it is bound to given to one that does not run
        before it in the same function. apex's ``check_models`` rejects torch's wrappers
        there."""
        statement = self.names.parent(call)
        wrapped = (
            {dotted(t) for t in statement.targets} - {None}
            if isinstance(statement, ast.Assign) and statement.value is call
            else set()
        )
        home = function_around(self.names, self.tree, call)
        for node in ast.walk(self.tree):
            if not (
                isinstance(node, ast.Call)
                and self.names.may_be_in(node.func, "apex")
                and "apex.amp.initialize" in self.names.qualified(node.func)
            ):
                continue
            given = [*node.args, *(k.value for k in node.keywords)]
            given += [e for g in given if isinstance(g, ast.List | ast.Tuple) for e in g.elts]
            if any(g is call for g in given):
                return node.lineno
            if not any(dotted(g) in wrapped for g in given):
                continue
            around = function_around(self.names, self.tree, node)
            if around is home and node.lineno < call.lineno:
                continue  # `model, opt = amp.initialize(model, opt)` and then the wrapper
            if self._constructed_before(around, node, home):
                continue
            if self._called_after(home, around, node):
                continue
            return node.lineno
        return None

    def _called_after(self, helper: ast.AST, around: ast.AST, initialize: ast.Call) -> bool:
        """``helper`` is a module-level function (its wrapped model a local of its own) that
        is called only in ``around``, after ``initialize`` and in no loop that holds both
        (BiSeNet's ``set_model_dist(net)`` after ``amp.initialize``): the model it wraps was
        given to ``initialize`` before, never after."""
        if not (
            isinstance(helper, ast.FunctionDef)
            and helper in self.tree.body
            and isinstance(around, ast.FunctionDef | ast.AsyncFunctionDef)
            and not any(
                isinstance(a, ast.For | ast.While) for a in self._between(initialize, around)
            )
        ):
            return False
        uses = [n for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id == helper.name]
        calls = [
            n for n in uses
            if isinstance(self.names.parent(n), ast.Call) and self.names.parent(n).func is n
        ]  # fmt: skip
        return (
            bool(calls)
            and len(calls) == len(uses)
            and all(
                function_around(self.names, self.tree, c) is around
                and c.lineno > initialize.end_lineno
                for c in calls
            )
        )

    def _between(self, node: ast.AST, outer: ast.AST) -> list[ast.AST]:
        """``node``'s ancestors inside ``outer``."""
        found = []
        for ancestor in self.names.ancestors(node):
            if ancestor is outer:
                break
            found.append(ancestor)
        return found

    def _constructed_before(self, init: ast.AST, initialize: ast.Call, later: ast.AST) -> bool:
        """``init`` is a class's ``__init__`` and ``later`` another method of it that
        ``__init__`` does not reach through ``self`` calls before ``initialize``: on any
        instance that ran before (EfficientSegmentation initializes in ``__init__``, wraps in
        ``do_train``)."""
        if not (
            isinstance(init, ast.FunctionDef)
            and init.name == "__init__"
            and isinstance(later, ast.FunctionDef | ast.AsyncFunctionDef)
            and later is not init
        ):
            return False
        owner = self.names.parent(init)
        if not isinstance(owner, ast.ClassDef) or self.names.parent(later) is not owner:
            return False
        methods = {
            m.name: m for m in owner.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        reached, todo = {"__init__"}, [init]
        while todo:
            method = todo.pop()
            todo_is_init = method is init and not any(
                isinstance(a, ast.For | ast.While) for a in self._between(initialize, init)
            )
            for n in ast.walk(method):
                if (
                    isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == "self"
                    and n.attr in methods
                    and n.attr not in reached
                    and not (todo_is_init and n.lineno > initialize.end_lineno)
                ):
                    reached.add(n.attr)
                    todo.append(methods[n.attr])
        return later.name not in reached

    def _report(self, target: Target, node: ast.AST, message: str, fix: Fix | None) -> None:
        self.findings.append(Finding(target.code, message, node, fix))

    # ---- calls -------------------------------------------------------------------------------

    def _call(
        self, call: ast.Call, callee: ast.expr, target: Target, fallback: bool = False
    ) -> tuple[str, Fix, list]:
        """The torch callee, the fix and its notes for a call of an apex name. ``fallback``:
        the name is also bound to the torch class itself, so a call with arguments only torch
        takes is a call of that fallback (raises ``_FallbackCall``)."""
        text = self.source.text
        read = CallText.read(self.source, call)
        args = read.args
        if any(a.star == "*" for a in args):
            raise NoFix("a `*args` splat cannot be mapped to apex's parameters")
        if only := self._apex_ddp_only(target):
            raise NoFix(only)
        splats = [splat_keys(self.names, call, a.node.value) for a in args if a.star == "**"]
        positional = [a for a in args if not a.keyword and not a.star]
        if len(positional) > len(target.params):
            raise NoFix(f"more positional arguments than apex's {len(target.params)}")
        values: dict[str, ast.expr] = {}
        for index, arg in enumerate(args):
            if arg.star:
                continue
            key = arg.keyword or target.params[index]
            if key not in target.params:
                if fallback:
                    raise _FallbackCall
                if key in _OLD_ADAM and target.new.startswith("torch.optim.Adam"):
                    raise NoFix(
                        f"`{key}` belongs to the pre-2019 FusedAdam (now apex.contrib's), whose "
                        "weight decay and bias correction differ"
                    )
                raise NoFix(f"`{key}` is not an argument of apex's signature")
            values[key] = arg.node.value if isinstance(arg.node, ast.keyword) else arg.node
        new = target.new
        if "adam_w_mode" in values and _literal_in(values["adam_w_mode"], table.FALSE):
            new = "torch.optim.Adam"  # apex's L2 mode is torch Adam's weight_decay
        carried = _carried(splats, values, target, new, fallback)
        missing = [
            p for p in target.params[: target.required] if p not in values and p not in carried
        ]
        carry = None
        if missing == ["lr"]:
            carry = groups_carry(self.names, call, values.get("params"), "lr")
        if missing == ["lr"] and carry is None:
            raise NoFix(
                "the call passes no `lr`: apex requires it unless every parameter group "
                "carries its own `lr`, which is not visible here"
            )
        if carry is False:
            raise NoFix(
                "a parameter group written here has no `lr` and the call passes none: apex "
                "raises ValueError, so the call already fails"
            )
        if missing and not carry:
            raise NoFix("the call lacks a required argument and already fails")
        pieces: list[str] = []
        origin: list[int] = []  # (per piece: the argument it comes from, -1: written out)
        dropped: list[str] = []
        keep_positional = True
        for index, arg in enumerate(args):
            origin += [index - 1] * (len(pieces) - len(origin))  # (the previous argument's)
            if arg.star:
                keep_positional = False
                pieces.append(text[arg.start : arg.end])
                continue
            key = arg.keyword or target.params[index]
            value = values[key]
            if key in target.drop_any:
                if not _pure(value):
                    raise NoFix(f"dropping `{key}` would skip evaluating its value")
                dropped.append(key)
                keep_positional = keep_positional and bool(arg.keyword)
                continue
            if (key in target.drop and _literal_in(value, target.drop[key])) or (
                key == "gradient_predivide_factor" and self._world_size(value)
            ):  # (apex divided by the factor before the all-reduce and multiplied by it over
                # the world size after: at the world size, torch's own pre-division; 64th review)
                keep_positional = keep_positional and bool(arg.keyword)
                continue
            torch_order = table.TORCH_POSITIONAL.get(new, target.new_positional)
            if (
                not arg.keyword
                and isinstance(value, ast.List | ast.Tuple)
                and index < len(torch_order)
                and torch_order[index] != key
                and key not in ("params", "betas")  # (apex's own order takes a sequence, 52a)
            ):  # (StudioGAN, 51b: `FusedAdam(params, lr, [beta1, beta2], eps=...)`)
                segment = self.source.segment(value)
                raise NoFix(
                    f"positional argument {index + 1} is apex's `{key}`, where `{new}` takes "
                    f"`{torch_order[index]}`: `{segment}` there left apex on its own "
                    f"`{torch_order[index]}` default, and torch's class would take this value "
                    "as them; pass it by keyword with the meaning you intend, by hand"
                )
            if key in target.refuse:
                reason = target.refuse[key]
                literal = isinstance(value, ast.Constant) or "is not a literal" in reason
                if key in target.drop and not literal:  # (the value may be the default)
                    segment = self.source.segment(value)
                    reason = f"`{key}` is given as `{segment}`, not as a literal, and {reason}"
                raise NoFix(reason)
            written = self.source.segment(value)
            if not arg.keyword and not (
                isinstance(value, ast.Constant | ast.Name | ast.Attribute | ast.Call)
            ):
                written = text[arg.start : arg.end]  # keep its parentheses
            at = len(pieces)
            if (
                not arg.keyword
                and keep_positional
                and at < len(target.new_positional)
                and target.new_positional[at] == key
            ):
                pieces.append(written)
            else:
                keep_positional = False
                pieces.append(f"{target.rename.get(key, key)}={written}")
        origin += [len(args) - 1] * (len(pieces) - len(origin))
        written_out = []
        for key, default in target.write:
            if key in carried:
                continue
            if key not in values and not (key == "weight_decay" and new == "torch.optim.Adam"):
                pieces.append(f"{key}={default}")
                written_out.append(f"`{key}={default}`")
        torch_takes = table.TORCH_TAKES.get(target.new)
        apex_only = torch_takes is not None and not set(values) <= torch_takes
        other, torch_too = self._other_classes(callee)
        if other is not None:  # (an argument only apex takes proves only that torch's class
            # would raise: DeepSpeed's CPU Adam or a project class takes it too, 51a)
            # 50a: `else: Opt = torch.optim.Adam`, `Opt = CPUAdam`, DeepSpeed's CPU Adam in
            # another arm: the call, written once, would build `new` for that binding too
            line, text = other
            raise NoFix(
                f"the name is also bound at line {line} (`{text}`), which this call may run: "
                f"written once it would build `{new}` there too; give each binding its own "
                "call (or keep one binding), by hand"
            )
        decay = values.get("weight_decay")
        undecayed = (  # Adam and AdamW agree without weight decay (apex's default, 0.0)
            torch_too == ["torch.optim.Adam"]
            and new == "torch.optim.AdamW"
            and (decay is None or _literal_in(decay, (0,)))
        )
        if torch_too and not apex_only and torch_too != [new] and not undecayed:
            # `else: from torch.optim import Adam as Opt` (the 49th review): that arm's calls
            # would build `torch.optim.AdamW` (decoupled decay where Adam's is L2)
            raise NoFix(
                f"the name is also bound to `{torch_too[0]}`, whose calls would build `{new}` "
                "after the fix, another class; keep one binding (or give each its own call), "
                "by hand"
            )
        if written_out and not apex_only and target.new in torch_too:
            # `if fused: from apex.optimizers import FusedAdam as Opt` / `else: from
            # torch.optim import AdamW as Opt` (the 47th review): that arm's calls ran with
            # torch's defaults, and the call written once takes apex's for both (a call with
            # an argument only apex takes, `delay_allreduce=True`, raised there: apex's alone)
            raise NoFix(
                f"the name is also bound to `{target.new}` itself, whose calls run with "
                f"torch's defaults: one call with apex's {', '.join(written_out)} written out "
                "would change that binding's runs, one without them apex's; pass the "
                "argument in the call (or keep one binding), by hand"
            )
        torch_name, add_torch = self._torch(call)
        callee_text = torch_name + new[len("torch") :]
        start, end = self.source.span(callee)
        lead = text[read.open : args[0].start] if args else ""
        trail = text[args[-1].end : read.close] if args else ""
        edits = (
            Edit(start, end, callee_text),
            Edit(read.open, read.close, lead + _joined(pieces, origin, read, text) + trail),
        )
        fix = Fix(
            "unsafe",
            edits=edits,
            add_imports=frozenset({"torch"} if add_torch else ()),
            remove_imports=self._import_edits(callee),
            min_torch=target.min_torch,
        )
        notes = []
        if written_out and target.new != "torch.nn.parallel.DistributedDataParallel":
            notes.append(f"{', '.join(written_out)} written out: apex's default, not torch's")
        if dropped:
            listed = ", ".join(f"`{d}`" for d in dropped)
            notes.append(f"dropped {listed} (no torch counterpart; speed or memory only)")
        for keys in splats:
            listed = ", ".join(f"`{k}`" for k in sorted(keys.possible))
            notes.append(f"`**{keys.name}` carries only {listed}, as built in this function")
        return new, fix, notes

    def _star_rebinds(self, node: ast.AST) -> tuple[int, str] | None:
        """A module-level ``from m import *`` after every apex import of ``node``'s root name,
        from a module of the project that defines that name (on disk, by its text). Its line
        and text."""
        from ampmigrate.scalerflow import _module_paths

        while isinstance(node, ast.Attribute):
            node = node.value
        if not isinstance(node, ast.Name) or self.source.path is None:
            return None
        imports = [b.node for b in self.names.bindings(node) if b.is_import]
        last = max((getattr(i, "lineno", 0) for i in imports), default=0)
        for stmt in _module_statements(self.tree.body):  # (in a `try` too, 51a)
            if not (
                isinstance(stmt, ast.ImportFrom)
                and stmt.lineno > last
                and [a.name for a in stmt.names] == ["*"]
                and not (stmt.module or "").startswith(("apex", "torch"))
            ):
                continue
            for path in _module_paths(self.source.path, stmt.level, stmt.module or ""):
                try:
                    with open(path, "rb") as file:
                        data = file.read()
                except OSError:
                    continue
                try:
                    tree = ast.parse(data)
                except (SyntaxError, ValueError):  # (newer syntax: it may bind it, 52a)
                    return stmt.lineno, self.source.segment(stmt)
                if _star_exports(tree, node.id):
                    return stmt.lineno, self.source.segment(stmt)
                break
        return None

    def _other_classes(self, callee: ast.expr) -> tuple[tuple[int, str] | None, list[str]]:
        """The other bindings of the call's name: the first that is neither apex's import, nor
        a torch class (imported or assigned: ``Opt = torch.optim.Adam``), nor ``None`` (a call
        of it raises), as its line and text (a project class, an alias, another package's:
        None where there is none); and the torch classes, which the rules below judge."""
        if not isinstance(callee, ast.Name):
            return None, sorted(q for q in self.names.qualified(callee) if q.startswith("torch."))
        other, torch_classes = None, set()
        # every binding of the scope but those in another arm of an `if`/`try` than the call
        # (a later one reaches it through a loop, 51a), and the enclosing scopes' it may see
        loops = {id(a) for a in self.names.ancestors(callee) if isinstance(a, _LOOPS)}
        bindings = [
            b for b in self.names.bindings(callee)
            if b.node is None or not self.names.exclusive(b.node, callee)
            or any(id(a) in loops for a in self.names.ancestors(b.node))  # (a loop joins the
            # arms: one pass binds, the next calls, 52a)
        ] or self.names.reaching(callee)  # fmt: skip
        for binding in bindings:
            if binding.builtin or binding.node is None:
                continue
            qualified = binding.qualified(binding.name)
            if any(q.startswith("apex.") or q.partition(".")[0] in table.COMPILED
                   for q in qualified):  # fmt: skip
                continue
            statement = self.names.parent(binding.node)
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                value = statement.value
                if isinstance(value, ast.Constant) and value.value in (None, False):
                    continue  # an availability flag: calling it raises
                qualified = self.names.qualified(value) if isinstance(
                    value, ast.Name | ast.Attribute) else set()  # fmt: skip
            elif not binding.is_import:
                qualified = set()
            if qualified and all(q.startswith("torch.") for q in qualified):
                torch_classes |= qualified
                continue
            if other is None:
                line = getattr(binding.node, "lineno", None) or getattr(statement, "lineno", 0)
                other = (line, self.source.line(line).strip() if line else binding.name)
        return other, sorted(torch_classes)

    def _to_python_float(
        self, node: ast.expr, parent: ast.AST | None, name: str, conditional: bool
    ) -> None:
        head = f"`{name}(t)` -> `t.item()`"
        if not (isinstance(parent, ast.Call) and parent.func is node):
            reason = "used as a value: `tensor.item()` is a method"
            self.findings.append(
                Finding(table.SAME_OBJECT, f"{head}: no automatic fix: {reason}", node, None)
            )
            return
        if len(parent.args) != 1 or parent.keywords or isinstance(parent.args[0], ast.Starred):
            reason = "it takes exactly one positional argument"
            self.findings.append(
                Finding(table.SAME_OBJECT, f"{head}: no automatic fix: {reason}", parent, None)
            )
            return
        arg = parent.args[0]
        written = self.source.segment(arg)
        simple = ast.Name | ast.Attribute | ast.Call | ast.Subscript
        if not isinstance(arg, simple):
            written = f"({written})"
        start, end = self.source.span(parent)
        fix = Fix(
            "unsafe",
            edits=(Edit(start, end, f"{written}.item()"),),
            remove_imports=self._import_edits(node),
        )
        message = (
            f"{head}: the argument is taken to be a tensor (apex's function also took a "
            "sequence and returned its first item)"
        )
        if conditional:
            message += "; the name is also bound by a fallback, which the fix bypasses"
        self.findings.append(Finding(table.SAME_OBJECT, message, parent, fix))

    # ---- helpers -----------------------------------------------------------------------------

    def _torch(self, node: ast.AST) -> tuple[str, bool]:
        """The name ``torch`` is bound to here, and whether ``import torch`` must be added."""
        qualified = self.names.qualified_text(node, "torch")
        if qualified == {"torch"}:
            return "torch", False
        if not qualified and not self.names.bindings(node, "torch"):
            return "torch", True
        raise NoFix("`torch` is bound to something else here")

    def _rename_fix(
        self, node: ast.expr, new: str, safety: str, min_torch: tuple[int, ...] = ()
    ) -> Fix:
        torch_name, add_torch = self._torch(node)
        start, end = self.source.span(node)
        return Fix(
            safety,  # type: ignore[arg-type]
            edits=(Edit(start, end, torch_name + new[len("torch") :]),),
            add_imports=frozenset({"torch"} if add_torch else ()),
            remove_imports=self._import_edits(node),
            min_torch=min_torch,
        )

    def _rival(self, node: ast.AST) -> tuple[int, str] | None:
        """A binding of ``node``'s root name that replaces apex's: an unguarded statement of the
        scope's own block after every apex import of the name (``from apex.fp16_utils import
        *`` then ``from util import to_python_float``; the 33rd review: the fix deleted the
        project's import and rewrote its calls). A fallback in an ``except``, an ``if`` arm or
        before the guarded import is no rival. Its line and first line of text."""
        while isinstance(node, ast.Attribute):
            node = node.value
        if not isinstance(node, ast.Name):
            return None

        def top(binding) -> ast.stmt | None:
            """The statement of the scope's own block that holds the binding."""
            at = binding.node  # (a def or a class is its own statement, not a scope here)
            child = at if isinstance(at, ast.stmt) else None
            for above in self.names.ancestors(at):
                if isinstance(above, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef):
                    return child if child in getattr(above, "body", ()) else None
                child = above if isinstance(above, ast.stmt) else child
            return None

        def apex(binding) -> bool:
            return any(q.startswith("apex.") or q.partition(".")[0] in table.COMPILED
                       for q in binding.qualified(binding.name))  # fmt: skip

        bindings = [b for b in self.names.bindings(node) if not b.builtin]
        last = max((t.lineno for b in bindings if apex(b) and (t := top(b))), default=None)
        for binding in bindings:
            stmt = top(binding)
            if (
                apex(binding)
                or last is None
                or stmt is None
                or stmt.lineno <= last
                or not (binding.node is stmt or self.names.parent(binding.node) is stmt)
            ):
                continue  # (nested in a compound statement: a guarded fallback)
            return stmt.lineno, self.source.segment(stmt).splitlines()[0].strip()
        return None

    def _import_edits(self, node: ast.AST) -> tuple[ImportEdit, ...]:
        """The imports of ``node``'s root name, to drop once unused (``import apex`` too)."""
        edits = list(self.names.import_edits(node))
        while isinstance(node, ast.Attribute):
            node = node.value
        if isinstance(node, ast.Name):
            for binding in self.names.bindings(node):
                alias = binding.alias
                if isinstance(binding.node, ast.Import) and alias and alias.asname is None:
                    edits.append(ImportEdit(alias.name, None, None))
        return tuple(edits)

    def _annotation(self, node: ast.AST) -> bool:
        """Inside an annotation, as its class or among its type arguments (``-> Tuple[DDP,
        Optimizer]``, ``x: Optional[DDP]``, ``DDP | None``)."""
        child = node
        for above in self.names.ancestors(node):
            if isinstance(above, ast.arg | ast.AnnAssign):
                return above.annotation is child
            if isinstance(above, ast.FunctionDef | ast.AsyncFunctionDef):
                return above.returns is child
            if not isinstance(above, ast.Subscript | ast.Tuple | ast.List | ast.BinOp):
                return False
            if isinstance(above, ast.BinOp) and not isinstance(above.op, ast.BitOr):
                return False
            child = above
        return False

    @functools.cached_property
    def _ddp_only_calls(self) -> list[str]:
        """The methods only apex's DDP has that this file calls (one walk, for every finding)."""
        return sorted({
            n.func.attr for n in ast.walk(self.tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in _APEX_DDP_ONLY
        })  # fmt: skip

    def _apex_ddp_only(self, target: Target) -> str:
        """Why apex's DistributedDataParallel cannot become torch's in this file ("": it can):
        the file calls a method only apex's has (fairseq-style trainers toggle
        `disable_allreduce()`/`enable_allreduce()` on it), which torch's raises on."""
        if target.new != "torch.nn.parallel.DistributedDataParallel" or not self._ddp_only_calls:
            return ""
        listed = ", ".join(f"`{m}()`" for m in self._ddp_only_calls)
        return (
            f"this file calls {listed}, which only apex's DistributedDataParallel has (torch's "
            "raises AttributeError): replace them by hand (`model.require_backward_grad_sync = "
            "False/True`, or `with model.no_sync():` around that step's forward and backward)"
        )

    def _typed(self, node: ast.AST) -> bool:
        """A type test: ``isinstance``'s classes (a tuple too), ``except`` (annotations are
        ``_annotation``'s, asked first)."""
        child = node
        for above in self.names.ancestors(node):
            if isinstance(above, ast.Tuple):
                child = above
                continue
            if isinstance(above, ast.Call):
                return (
                    len(above.args) == 2
                    and above.args[1] is child
                    and bool(self.names.qualified(above.func) & _TYPE_CHECKS)
                )
            if isinstance(above, ast.ExceptHandler):
                return above.type is child
            return False
        return False

    def _unused_imports(self) -> None:
        """An import of an apex name that nothing reads (what is left once its uses are
        migrated, or never used: an unused `multi_tensor_applier`); see ``unused_import``."""
        for binding in self.names.imports():
            stmt, alias = binding.node, binding.alias
            if isinstance(stmt, ast.Import) and alias is not None and alias.asname:
                full = alias.name  # `import apex.optimizers as apex_optim`
            elif not isinstance(stmt, ast.ImportFrom) or alias is None or stmt.level:
                continue
            else:
                full = f"{stmt.module}.{alias.name}"
            target = TARGETS.get(full)
            code = table.MODULES.get(full) or (target.code if target else table.SAME_OBJECT)
            known = target or full in table.SAME or full in table.TO_PYTHON_FLOAT
            if not known and full not in table.MODULES and table.no_native(full) is not None:
                known, code = True, table.NO_NATIVE  # unused, it only ties the file to apex
            if not known and full not in table.MODULES:
                continue
            if self._consumed and any(self._inside(stmt, c) for c in self._consumed):
                continue
            found = unused_import(
                self.names, stmt, alias, full, code, self.source.path, self.source,
                self._dead_imports.get(binding.name),
            )  # fmt: skip
            if found is not None and found.fix is None and target is not None:
                found = self._reexport(found, stmt, binding.name, target)
            if found is not None:
                self.findings.append(found)

    def _reexport(self, found: Finding, stmt: ast.AST, name: str, target: Target) -> Finding:
        """A module that only re-exports FusedLayerNorm to the others (FlagPerf's one-line
        `layers/layernorm.py`): its import binds the name to torch's class instead."""
        users = self._importers(name)
        if not users:
            return found
        try:
            fix, bound = self._rebind(stmt, name, target)
        except NoFix:
            return found
        message = (
            f"`{name}` is not read in this file, but other modules take it from this one "
            f"({self._shown(users)}): the import binds the name to torch's class (`{bound}`), "
            f"so their uses get it: {target.accepts}; their uses are not read here (a "
            "`memory_efficient=` argument raises in torch, a type test matches every torch "
            "LayerNorm)"
        )
        return Finding(found.code, message, found.node, fix)

    def _importers(self, name: str) -> list[tuple[str, int, str]] | None:
        """The other modules that use ``name`` from this one, imports included (cached)."""
        if name not in self._users:
            self._users[name] = users_on_disk(self.source.path, [name], imports=True)
        return self._users[name]

    def _shown(self, users: list[tuple[str, int, str]]) -> str:
        folder = os.path.dirname(os.path.abspath(self.source.path))
        shown = ", ".join(f"{os.path.relpath(f, folder)}:{line}" for f, line, _ in users[:3])
        return shown + (f" and {len(users) - 3} more" if len(users) > 3 else "")

    # ---- guarded imports ---------------------------------------------------------------------

    def _try(self, node: ast.Try) -> None:
        """``try: from apex.x import Y [as Z] ... except ImportError: <fallback>``."""
        if node.orelse or node.finalbody or not node.handlers:
            return
        if self._own_fallback(node):
            return
        if not all(_catches_import_error(h) for h in node.handlers):
            return
        imported: dict[str, str] = {}  # bound name -> apex name
        swaps: list[ast.Assign] = []
        helpers: set[str] = set()  # names a stdlib import of the `try` binds (`partial`)
        partial = False  # a swap binds `functools.partial(<apex class>, ...)` (InternVL)
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("apex."):
                if stmt.level:
                    return
                for alias in stmt.names:
                    full = f"{stmt.module}.{alias.name}"
                    if full not in TARGETS and full not in table.SAME:
                        return
                    imported[alias.asname or alias.name] = full
            elif isinstance(stmt, ast.Assign) and self._swaps(stmt, imported):
                swaps.append(stmt)
                partial = partial or not isinstance(stmt.value, ast.Name)
            elif (
                isinstance(stmt, ast.Import | ast.ImportFrom)
                and not getattr(stmt, "level", 0)
                and all(
                    (a.name if isinstance(stmt, ast.Import) else stmt.module or "").partition(".")[
                        0
                    ]
                    in _STDLIB
                    for a in stmt.names
                )
            ):  # (the 64th review's InternVL: `from functools import partial` in the `try`)
                helpers |= {(a.asname or a.name).partition(".")[0] for a in stmt.names}
            elif not isinstance(stmt, ast.Expr):
                return
        if not imported or (helpers and self._used_outside(node, helpers)):
            return
        first = next(s for s in node.body if isinstance(s, ast.ImportFrom))
        apex_name = imported[sorted(imported)[0]]
        target = TARGETS.get(apex_name)
        code = target.code if target else table.SAME_OBJECT
        bound = set(imported) | {s.targets[0].id for s in swaps}
        if (
            not partial
            and len(node.handlers) == 1
            and bound <= _bound_names(node.handlers[0].body)
            and all(_replaces(stmt) for stmt in node.handlers[0].body)
        ):
            handler = node.handlers[0]
            binds = next((st for st in handler.body if not _logs(st)), handler.body[0])
            fallback = self.source.segment(binds).splitlines()[0]
            apex_of = {**imported, **{w.targets[0].id: imported[w.value.id] for w in swaps}}
            differs, exact = self._fallback_differs(node, apex_of)
            if differs is not None:  # (keeping it would run other code where apex ran)
                found = self._class_fallback(node, imported, swaps, first, code)
                if found is not None:
                    self.findings.append(found)
                    self._consumed.add(node)
                    return
                self.findings.append(Finding(code, (
                    f"`{apex_name}` is imported with a fallback (`{fallback}`), but the "
                    f"fallback is not its migration: {differs}; dropping the `try` would run "
                    "it where apex was installed. Replace the apex import by the torch "
                    "counterpart with apex's defaults written out, by hand"
                ), first))  # fmt: skip
                self._consumed.add(node)
                return
            message = (
                f"`{apex_name}` is imported with a fallback (`{fallback}`): the fallback is the "
                "migration; the fix keeps it and drops the `try` (the code now runs the "
                "fallback where apex was installed"
            )
            message += f": {target.accepts})" if target else ")"
            for other in sorted(set(imported.values()) - {apex_name}):
                if (also := TARGETS.get(other)) is not None and also is not target:
                    message += f"; `{other}` -> `{also.new}`: {also.accepts}"
            if exact:
                message += f"; {exact}"
            kept = list(handler.body)  # the log lines that announced a missing apex go
            while len(kept) > 1 and _logs(kept[0]):
                kept.pop(0)
            while len(kept) > 1 and _logs(kept[-1]):
                kept.pop()
            dropped = [s for s in handler.body if s not in kept]
            if dropped:
                lines = ", ".join(str(s.lineno) for s in dropped)
                message += f"; what the fallback logged where apex was missing (line {lines}) goes"
            edit = Edit(*self._statement_lines(node), self._dedented(kept, node))
            edits = (edit, *self._written.get(id(node), ()))
            self.findings.append(Finding(code, message, first, Fix("unsafe", edits=edits)))
            self._consumed.add(node)
            return
        if not swaps or any(
            not all(isinstance(s, ast.Pass | ast.Expr) for s in h.body) for h in node.handlers
        ):
            return
        if self._used_outside(node, set(imported)):
            return
        for swap in swaps:
            own = [b for b in self.names.bindings(swap.targets[0]) if b.node is not swap.targets[0]]
            if not own or any(self._inside(b.node, node) for b in own):
                return  # the name is bound only by the swap: deleting it would unbind it
        swapped = ", ".join(f"`{s.targets[0].id}`" for s in swaps)
        message = (
            f"{swapped} is swapped for apex's `{apex_name}` when apex is installed: the fix "
            "deletes the swap and keeps the project's own class (its numerics replace apex's "
            "kernel where apex was installed)"
        )
        if partial:
            message += (
                "; the arguments `functools.partial` gave apex's class go with the swap: the "
                "project's class takes its own defaults there"
            )
        start, end = self._statement_lines(node)
        block = self._block_of(node)
        replacement = self.source.line_indent(node.lineno) + "pass\n" if len(block) == 1 else ""
        if replacement:
            start = self.source.line_start(node.lineno)
        fix = Fix("unsafe", edits=(Edit(start, end, replacement),))
        self.findings.append(Finding(code, message, first, fix))
        self._consumed.add(node)

    def _swaps(self, stmt: ast.Assign, imported: dict[str, str]) -> bool:
        """``stmt`` binds a project name to an apex name of ``imported``: ``X = FusedRMSNorm``
        or ``X = partial(FusedRMSNorm, eps=1e-6)`` (``functools.partial``, its other arguments
        pure)."""
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            return False
        value = stmt.value
        if isinstance(value, ast.Name):
            return value.id in imported
        return (
            isinstance(value, ast.Call)
            and bool(value.args)
            and isinstance(value.args[0], ast.Name)
            and value.args[0].id in imported
            and "functools.partial" in self.names.qualified(value.func)
            and all(_pure(a) for a in [*value.args[1:], *(k.value for k in value.keywords)])
            and all(k.arg is not None for k in value.keywords)
        )

    def _own_fallback(self, node: ast.Try) -> bool:
        """``try: import xentropy_cuda; from apex.contrib import xentropy; def cross_entropy(...):
        <apex's kernel> except ImportError: def cross_entropy(...): <torch>`` (fairseq's
        ``modules/cross_entropy.py``, copied in OFA and other forks; the 47th review): apex
        code the tool has no torch form of, defined again by the project's ``except`` for a
        machine without apex. That fallback is the migration: kept, and the ``try`` dropped.
        False where the shape differs (the other rules then speak for the names)."""
        if len(node.handlers) != 1 or not _catches_import_error(node.handlers[0]):
            return False
        handler = node.handlers[0].body
        imports = [s for s in node.body if isinstance(s, ast.Import | ast.ImportFrom)]
        others = [s for s in node.body if s not in imports]
        names = []
        for stmt in imports:
            if isinstance(stmt, ast.ImportFrom):
                if stmt.level or not (stmt.module or "").startswith("apex."):
                    return False
                names += [f"{stmt.module}.{a.name}" for a in stmt.names]
            else:
                names += [a.name for a in stmt.names]
        if not imports or not all(
            n.startswith("apex.") or n.partition(".")[0] in table.COMPILED for n in names
        ):
            return False
        if any(n in TARGETS or n in table.SAME or n in table.TO_PYTHON_FLOAT for n in names):
            return False  # (a name with a torch form of its own: the rules for it decide)
        if not any(isinstance(s, ast.FunctionDef) for s in others) or not all(
            isinstance(s, ast.FunctionDef | ast.Assign | ast.Expr) for s in others
        ):
            return False
        apex = _bound_names(imports)
        if not _bound_names(others) <= _bound_names(handler) or self._used_outside(node, apex):
            return False
        fallbacks = {s.name: s for s in handler if isinstance(s, ast.FunctionDef)}
        if not all(
            _same_computation(s, fallbacks.get(s.name))
            for s in others
            if isinstance(s, ast.FunctionDef)
        ):
            return False  # (49a: a fallback without `reduction=`, one without label smoothing)
        if not any(isinstance(a, _SCOPES) for a in self.names.ancestors(node)) and any(
            self._importers(name) != [] for name in apex
        ):
            return False  # another module takes apex's name from this one (49a: `xentropy`)
        if any(
            isinstance(n, ast.Raise) or (isinstance(n, ast.Name) and n.id in apex)
            for stmt in handler
            for n in ast.walk(stmt)
        ):
            return False
        kept = list(handler)  # (the log lines that announced a missing apex go, as in _try)
        while len(kept) > 1 and _logs(kept[0]):
            kept.pop(0)
        while len(kept) > 1 and _logs(kept[-1]):
            kept.pop()
        if all(isinstance(s, ast.Pass) for s in kept):
            return False
        defined = ", ".join(f"`{n}`" for n in sorted(_bound_names(others)))
        target = next((TARGETS[n] for n in names if n in TARGETS), None)
        message = (
            f"`{names[-1]}` has no torch counterpart here, and the `except` at line "
            f"{node.handlers[0].lineno} defines {defined} again without apex, with the same "
            "parameters and returning what the `try`'s own code returns for some inputs (a CPU "
            "tensor, say): the fix keeps that fallback and drops the `try`, so the project's "
            "own code now runs where apex's kernel ran (its speed and rounding; what apex's "
            "kernel computed otherwise is not compared)"
        )
        edit = Edit(*self._statement_lines(node), self._dedented(kept, node))
        code = target.code if target else table.NO_NATIVE
        self.findings.append(Finding(code, message, imports[-1], Fix("unsafe", edits=(edit,))))
        self._consumed.add(node)
        return True

    def _class_fallback(
        self,
        node: ast.Try,
        imported: dict[str, str],
        swaps: list[ast.Assign],
        first: ast.ImportFrom,
        code: str,
    ) -> Finding | None:
        """``try: from apex.normalization import FusedLayerNorm as BertLayerNorm`` with
        ``except ImportError: class BertLayerNorm(nn.Module): ...`` (the project's own class,
        as in BERT's forks): the fix keeps what ran with apex, its torch counterpart bound to the
        name (a stand-in class for RMSNorm, whose ``eps`` default differs), and deletes the
        project's class. None: not such a fallback (``_try`` says why it is no migration)."""
        handler = node.handlers[0]
        classes = {s.name: s for s in handler.body if isinstance(s, ast.ClassDef)}
        if swaps or set(classes) != set(imported):
            return None
        if not all(
            isinstance(s, ast.ClassDef | ast.Pass) or _logs(s) for s in handler.body
        ):  # another statement of the fallback may be needed
            return None
        targets = {bound: TARGETS[full] for bound, full in imported.items() if full in TARGETS}
        if len(targets) != len(imported) or any(
            t.code != table.NORMALIZATION or t.new not in _SHARED for t in targets.values()
        ):
            return None
        bound = sorted(imported)[0]
        target, apex_name, own = targets[bound], imported[bound], classes[bound]
        head = (
            f"`{apex_name}` is imported with a fallback, the project's own class `{bound}` "
            f"(line {own.lineno})"
        )
        module_level = not any(isinstance(a, _SCOPES) for a in self.names.ancestors(node))
        try:
            for name, each in targets.items():
                if each.min_torch and self.floor is not None and self.floor < each.min_torch:
                    needs, floor = (".".join(map(str, v)) for v in (each.min_torch, self.floor))
                    raise NoFix(
                        f"`{each.new}` needs torch >= {needs}; the project supports torch {floor}"
                    )
                self._fallback_uses(node, name, each)
            self._no_memory_efficient()
            torch_name, add_torch = self._torch(node)
            elsewhere = ""
            if module_level:
                users = users_on_disk(self.source.path, sorted(imported), imports=True)
                if users is None:
                    raise NoFix("other modules may use the name (the project is too large to look)")
                broadened = []  # (a type test of a name bound to torch's class itself)
                for path in sorted({f for f, _, _ in users}):
                    for name, each in targets.items():
                        stand_in = each.new == "torch.nn.RMSNorm"
                        accepted = each.params if stand_in else each.new_positional
                        if _uses_in(path, name, accepted) and not stand_in:
                            broadened.append(os.path.basename(path))
                if users:
                    shown = ", ".join(
                        f"{os.path.basename(f)}:{line}" for f, line, _ in users[:3]
                    ) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
                    elsewhere = (
                        f"; its uses in other modules ({shown}) are imports, calls with "
                        "arguments torch's class takes alike and type tests, read there"
                    )
                    if broadened:
                        elsewhere += (
                            f" (a type test in {', '.join(sorted(set(broadened)))} now matches "
                            f"every `{target.new}`, not only the ones this name builds)"
                        )
        except NoFix as reason:
            return Finding(code, (
                f"{head}: the fallback is not its migration; no automatic fix: {reason}. Replace "
                "the `try` by the torch counterpart with apex's defaults written out, by hand"
            ), first)  # fmt: skip
        indent = self.source.line_indent(node.lineno)
        start, end = self._statement_lines(node)
        text = []
        for name, full in imported.items():
            if targets[name].new == "torch.nn.RMSNorm":
                text.append(_rms_class(name, full, torch_name, indent))
            else:
                text.append(f"{indent}{name} = {torch_name}{targets[name].new[len('torch') :]}\n")
        binds = (
            f"defines `{bound}` as a subclass of `torch.nn.RMSNorm` with apex's parameters and "
            "`eps=1e-5` default"
            if target.new == "torch.nn.RMSNorm"
            else f"binds `{bound}` to `{target.new}`"
        )
        signature = next(
            (
                "`" + " ".join(self.source.text[
                    self.source.span(f)[0] + len("def ") : self.source.span(f.body[0])[0]
                ].rstrip().rstrip(":").split()) + "`"
                for f in own.body
                if isinstance(f, ast.FunctionDef) and f.name == "__init__"
            ),
            "its own constructor",
        )  # fmt: skip
        message = (
            f"{head}: the fix {binds} (what ran where apex was installed) and deletes the "
            f"project's class. Where apex was installed nothing changes beyond "
            f"`{apex_name.rpartition('.')[2]}` -> `{target.new}`: {target.accepts}. Where it "
            f"was not, the project's class (line {own.lineno}, {signature}: its own defaults "
            f"and numerics) ran and `{target.new}` runs now{elsewhere}"
        )
        held = _parameters(own)
        expected = _PARAMETERS[target.new]
        if held is None:
            message += (
                "; the project's class makes its parameters in a way not read here: checkpoints "
                "saved without apex may not load"
            )
        elif set(held) != set(expected):
            message += (
                f"; its parameters ({', '.join(f'`{p}`' for p in held) or 'none'}) are not "
                f"torch's ({', '.join(f'`{p}`' for p in expected)}): checkpoints saved where "
                "apex was not installed no longer load by key"
            )
        if len(imported) > 1:
            message += f"; the same for {', '.join(f'`{n}`' for n in sorted(imported)[1:])}"
        if any(t.new == "torch.nn.RMSNorm" for t in targets.values()):
            before = self.source.text[:start]
            blank = len(before) - len(before.rstrip("\n")) - 1 if before.strip() else 2
            lines = 2 if module_level else 1
            text.insert(0, "\n" * max(0, lines - blank))
            text.append(self._gap(end, lines))
        edit = Edit(start, end, "".join(text))
        fix = Fix(
            "unsafe",
            edits=(edit,),
            add_imports=frozenset({"torch"} if add_torch else ()),
            min_torch=max((t.min_torch for t in targets.values()), default=()),
        )
        return Finding(code, message, first, fix)

    def _fallback_uses(self, node: ast.stmt, name: str, target: Target) -> None:
        """Raise ``NoFix`` unless every use of ``name`` outside ``node`` (the ``try``, or the
        import) works alike with
        torch's counterpart as with apex's class or the project's (the rule for replacing a
        project's class): a call whose arguments torch takes with apex's meaning (no splat),
        a type test or annotation, or a subclass whose body reads of ``self`` only what it sets
        itself or what apex's and torch's classes share (``weight``, ``bias``, ``eps``, ...)
        and of ``super()`` only ``__init__`` (called so) and ``forward``. Anything else (a
        value passed on, an attribute of the class) is refused: its uses are not visible."""
        stand_in = target.new == "torch.nn.RMSNorm"  # takes apex's parameters
        accepted = target.params if stand_in else target.new_positional
        for use in ast.walk(self.tree):
            if not (isinstance(use, ast.Name) and use.id == name) or self._inside(use, node):
                continue
            parent = self.names.parent(use)
            if not isinstance(use.ctx, ast.Load):
                raise NoFix(f"`{name}` is bound again at line {use.lineno}")
            if isinstance(parent, ast.Call) and parent.func is use:
                _accepts(parent, accepted, f"the call at line {use.lineno}")
            elif isinstance(parent, ast.ClassDef) and any(use is b for b in parent.bases):
                self._subclass_reads(parent, accepted, _SHARED[target.new])
            elif not (self._typed(use) or self._annotation(use)):
                raise NoFix(
                    f"`{name}` is used as a value at line {use.lineno}: the calls made with it "
                    "are not visible here"
                )

    def _subclass_reads(
        self, cls: ast.ClassDef, accepted: tuple[str, ...], shared: frozenset[str]
    ) -> None:
        """Raise ``NoFix`` where the subclass ``cls`` reads what torch's class may lack."""
        own = {s.name for s in cls.body if isinstance(s, ast.FunctionDef | ast.ClassDef)}
        own |= {
            n.attr
            for n in ast.walk(cls)
            if isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
        }
        for n in ast.walk(cls):
            if not isinstance(n, ast.Attribute):
                continue
            if isinstance(n.value, ast.Call) and dotted(n.value.func) == "super":
                call = self.names.parent(n)
                if n.attr == "__init__" and isinstance(call, ast.Call) and call.func is n:
                    _accepts(call, accepted, f"`super().__init__` at line {n.lineno}")
                elif n.attr != "forward":
                    raise NoFix(f"the subclass `{cls.name}` reads `super().{n.attr}`")
            elif (
                isinstance(n.value, ast.Name)
                and n.value.id == "self"
                and isinstance(n.ctx, ast.Load)
                and n.attr not in own | shared
            ):
                raise NoFix(
                    f"the subclass `{cls.name}` reads `self.{n.attr}` (line {n.lineno}), which "
                    "torch's class may lack"
                )

    def _fallback_differs(self, node: ast.Try, apex_of: dict[str, str]) -> tuple[str | None, str]:
        """Why the fallback that binds the names of ``apex_of`` (name -> the apex name it
        stands for) is not their migration (None: each name is bound to its apex name's
        torch counterpart itself, whose defaults are apex's): a project
        class or function (its parameters, defaults and numerics are its own, not checked),
        another torch object (``FusedAdam = torch.optim.Adam``: L2 decay where apex's is
        decoupled), or the counterpart with a default that differs. A torch fallback that
        differs only where no call of it here goes is the migration after all (FlagPerf's
        GLM passes every argument whose default differs); the second item says so."""
        exact = ""
        for stmt in node.handlers[0].body:
            for name in sorted(apex_of):  # (each name against its own apex name's counterpart)
                apex_name = apex_of[name]
                target = TARGETS.get(apex_name)
                value = None
                if isinstance(stmt, ast.ImportFrom):  # (relative: a module of the project)
                    base = "." * stmt.level + (stmt.module or "")
                    value = next((
                        f"{base}.{a.name}" if stmt.module else f"{base}{a.name}"
                        for a in stmt.names if (a.asname or a.name) == name
                    ), None)  # fmt: skip
                elif isinstance(stmt, ast.Import):
                    value = next((a.name for a in stmt.names if a.asname == name), None)
                elif isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in stmt.targets
                ):
                    value = next(iter(sorted(self.names.qualified(stmt.value))), None)
                    value = value or ast.unparse(stmt.value)
                elif isinstance(stmt, ast.ClassDef | ast.FunctionDef) and stmt.name == name:
                    return (
                        f"it defines `{name}` itself (line {stmt.lineno}), whose parameters, "
                        "defaults and numerics are the project's, not torch's counterpart"
                    ), ""
                if value is None:
                    continue
                counterpart = target.new if target is not None else table.SAME.get(apex_name)
                if value.startswith("."):
                    return (
                        f"it imports `{name}` from the project's `{value.rpartition('.')[0]}` "
                        f"(line {stmt.lineno}), whose parameters, defaults and numerics are the "
                        "project's, not torch's counterpart"
                    ), ""
                if value == counterpart and not (target is not None and target.write):
                    continue
                if target is not None and (why := self._exact_at_calls(node, name, target, value)):
                    exact = why
                    continue
                if value != counterpart:
                    return f"it binds `{name}` to `{value}` (apex's maps to `{counterpart}`)", ""
                written = ", ".join(f"`{k}={v}`" for k, v in target.write)
                return f"`{value}`'s defaults differ from apex's ({written} in apex)", ""
        return None, exact

    def _exact_at_calls(self, node: ast.Try, name: str, target: Target, value: str) -> str:
        """Why every use of ``name`` is a call that builds under the torch fallback ``value``
        what apex built ("": not shown). Each call passes only the leading positional arguments
        both share and keywords torch takes with apex's meaning, and either gives every
        argument whose default differs (``target.write``) or, for ``torch.optim.Adam`` in place
        of FusedAdam, no weight decay (both then apply the same update)."""
        if value != target.new and (target.new, value) != ("torch.optim.AdamW", "torch.optim.Adam"):
            return ""
        if not any(isinstance(a, _SCOPES) for a in self.names.ancestors(node)):
            users = self._importers(name)
            if users is None or users:
                return ""
        shared = 0
        while shared < len(target.new_positional) and (
            target.params[shared] == target.new_positional[shared]
        ):
            shared += 1
        takes = table.TORCH_TAKES.get(value, frozenset(target.new_positional))
        calls = 0
        amend: list[tuple[ast.Call, list[tuple[str, str]]]] = []  # apex's defaults to write
        for use in ast.walk(self.tree):
            if not (isinstance(use, ast.Name) and use.id == name) or self._inside(use, node):
                continue
            if not all(self._inside(b.node, node) for b in self.names.bindings(use)):
                return ""  # bound elsewhere too
            call = self.names.parent(use)
            if not (isinstance(call, ast.Call) and call.func is use) or len(call.args) > shared:
                return ""
            if any(isinstance(a, ast.Starred) for a in call.args):
                return ""
            given = {k.arg: k.value for k in call.keywords}
            if any(
                k is None or k not in takes or k in target.rename or k in target.refuse
                for k in given
            ):
                return ""
            given.update(zip(target.params, call.args, strict=False))
            missing = [(k, v) for k, v in target.write if k not in given]
            if value == target.new and missing:
                amend.append((call, missing))
            decay = given.get("weight_decay")
            if value != target.new and decay is not None and not _literal_in(decay, (0,)):
                return ""
            calls += 1
        if not calls:
            return ""
        if value != target.new:
            return "every call of it here passes no weight decay, where Adam and AdamW agree"
        listed = ", ".join(f"`{k}`" for k, _ in target.write)
        if not amend:
            return f"every call of it here passes {listed}, whose default differs"
        try:
            self._written[id(node)] = [e for c, m in amend for e in self._written_out(c, m)]
        except NoFix:
            return ""
        shown = ", ".join(
            f"`{k}={v}` at line {c.lineno}" for c, missing in amend for k, v in missing
        )
        return (
            f"apex's default is written where a call leaves {listed} out ({shown}): where apex "
            "was not installed, those calls got torch's default, unless their parameter groups "
            "set one"
        )

    def _written_out(self, call: ast.Call, missing: list[tuple[str, str]]) -> list[Edit]:
        """``call`` with ``missing`` (apex's defaults) added as keywords after its last
        argument, in the call's own layout (``NoFix``: its arguments cannot be read)."""
        plan = _Plan(CallText.read(self.source, call))
        for key, value in missing:
            plan.before(None, f"{key}={value}")
        return plan.edits()

    def _statement_lines(self, node: ast.stmt) -> tuple[int, int]:
        """From the start of ``node``'s first line to the start of the line after it."""
        start = self.source.line_start(node.lineno)
        try:
            end = self.source.line_start(node.end_lineno + 1)
        except IndexError:
            end = len(self.source.text)
        return start, end

    def _dedented(self, body: list[ast.stmt], where: ast.stmt) -> str:
        """``body``'s lines, moved to ``where``'s indentation (ending with a newline)."""
        indent = self.source.line_indent(where.lineno)
        first = body[0]
        if first.lineno == self._handler_line(first):  # `except ImportError: X = Y`
            return "".join(indent + self.source.segment(s) + "\n" for s in body)
        own = self.source.line_indent(first.lineno)
        out = []
        for line in range(first.lineno, body[-1].end_lineno + 1):
            text = self.source.line(line)
            out.append(indent + text[len(own) :] if text.startswith(own) else text)
        return "\n".join(out) + "\n"

    def _handler_line(self, stmt: ast.stmt) -> int:
        parent = self.names.parent(stmt)
        return parent.lineno if parent is not None else 0

    def _block_of(self, node: ast.stmt) -> list[ast.stmt]:
        parent = self.names.parent(node)
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and any(s is node for s in block):
                return block
        return [node]

    def _bound_by_consumed(self, node: ast.AST) -> bool:
        """Bound by a ``try`` whose own fix migrates it (its fallback or the swap's deletion)."""
        if not self._consumed:
            return False
        while isinstance(node, ast.Attribute):
            node = node.value
        if not isinstance(node, ast.Name):
            return False
        return any(
            self._inside(b.node, c) for b in self.names.bindings(node) for c in self._consumed
        )

    def _inside(self, node: ast.AST | None, container: ast.AST) -> bool:
        return node is not None and any(a is container for a in self.names.ancestors(node))

    def _used_outside(self, container: ast.AST, bound: set[str]) -> bool:
        for node in ast.walk(self.tree):
            if (
                isinstance(node, ast.Name)
                and node.id in bound
                and not self._inside(node, container)
            ):
                return True
        return False
