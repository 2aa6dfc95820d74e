"""apex amp as a file uses it, on ``ast``: its ``amp`` calls and references, the handle stored
or handed on (``args.amp = amp``, a module that returns apex's, a star import that binds it),
and the calls through a holder the planner cannot follow (``stray_calls``); ``_parsed`` gives
each file of a run with these facts."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ampmigrate.apex.ondisk import _defs, _module_file, _module_level, _package_init, _read
from ampmigrate.engine.names import Names
from ampmigrate.scalerflow import _module_paths

APEX = "apex.amp."


def _apex_roots(names: Names) -> dict[str, ast.Import | ast.ImportFrom]:
    """The names an ``apex`` import binds (the root of a dotted one), each with its first
    import statement."""
    roots: dict[str, ast.Import | ast.ImportFrom] = {}
    for binding in names.imports():
        stmt, alias = binding.node, binding.alias
        module = alias.name if isinstance(stmt, ast.Import) else stmt.module or ""
        if module == "apex" or module.startswith("apex."):
            roots.setdefault(binding.name.partition(".")[0], stmt)
    return roots


# torch.cuda.amp's own names: under a name also bound to it they are native AMP's, not apex's
NATIVE_MEMBERS = frozenset({"GradScaler", "autocast", "custom_fwd", "custom_bwd"})


def native(call: ast.Call, names: Names) -> bool:
    """``amp.GradScaler()`` where ``amp`` is torch.cuda.amp too: native AMP's own, as the
    planner reads it (the 78th review's cosmo-3D: `from apex import amp` rebound by `import
    torch.cuda.amp as amp`, and "`amp.GradScaler` has no O1 rewrite")."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr in NATIVE_MEMBERS
        and f"torch.cuda.amp.{func.attr}" in names.qualified(func)
    )


def apex_calls(names: Names) -> list[ast.Call]:
    """The calls whose callee resolves to ``apex.amp.*``; only calls rooted at a name an
    ``apex`` import binds are resolved."""
    return [node for node in _apex_uses(names) if isinstance(node, ast.Call)]


def stored_calls(tree: ast.Module, names: Names) -> list[ast.Call]:
    """The apex calls made through apex's module kept on an object in this file (``self.amp =
    amp``), where one of them is ``initialize`` (RetinaNet: ``self.amp.initialize(...)``): the
    planner takes them as apex's own. Empty: not so."""
    stored = _stored_handles(names, _apex_roots(names), plain=True)
    through = [
        n for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and ast.unparse(n.func.value) in stored and n.func.attr in _MEMBERS
    ]  # fmt: skip
    blocks = {  # where each is kept: the planner follows a store in the block of `initialize`
        id(holder)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
        and any(ast.unparse(t) in stored for t in n.targets)
        and (holder := names.parent(n)) is not None
    }  # fmt: skip
    initializes = [
        c for c in through
        if c.func.attr == "initialize" and id(names.parent(_statement_of(c, names))) in blocks
    ]  # fmt: skip
    scaled = any(c.func.attr != "initialize" for c in through)  # (else apex only casts)
    return through if initializes and scaled else []


def _statement_of(node: ast.AST, names: Names) -> ast.AST:
    while not isinstance(node, ast.stmt):
        node = names.parent(node)
    return node


def apex_references(names: Names) -> list[ast.Attribute]:
    """The members of ``apex.amp`` read but not called here: a bare decorator
    (``@amp.float_function``) or an alias (``float_function = amp.float_function``), whose
    calls elsewhere are apex's."""
    return [node for node in _apex_uses(names) if isinstance(node, ast.Attribute)]


def _apex_uses(names: Names) -> list[ast.Call | ast.Attribute]:
    """Each ``apex.amp.X`` rooted at a name an ``apex`` import binds: the call when it is
    called, else the attribute itself."""
    roots = _apex_roots(names)
    uses: list[ast.Call | ast.Attribute] = []
    for root in sorted(roots):  # from each use of the name up its attribute chain: no walk
        for node in names.spelled(root):
            if not isinstance(node, ast.Name) or node.id != root:
                continue
            chain, parent = node, names.parent(node)
            while isinstance(parent, ast.Attribute) and parent.value is chain:
                chain, parent = parent, names.parent(parent)
            qualified = [q for q in names.qualified(chain) if q.startswith(APEX)]
            if not qualified:
                continue
            if isinstance(parent, ast.Call) and parent.func is chain:
                uses.append(parent)
            elif isinstance(chain, ast.Attribute):
                uses.append(chain)
    return uses


_AMP = APEX.rstrip(".")  # the module itself
_MEMBERS = {"scale_loss", "master_params", "state_dict", "load_state_dict", "initialize"}


def _published(tree: ast.Module, name: str) -> int | None:
    """The line of ``globals()["name"] = ...`` (or ``globals().update(name=...)``) in ``tree``:
    a module global bound by a store into the module's dict (None: none)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Subscript)
                    and _globals_call(target.value)
                    and isinstance(target.slice, ast.Constant)
                    and target.slice.value == name
                ):
                    return node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "update"
            and _globals_call(node.func.value)
            and any(k.arg in (name, None) for k in node.keywords)
        ):
            return node.lineno
    return None


def _globals_call(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "globals"
        and not node.args
    )


def _handed_in(holder: ast.Name, names: Names) -> str | None:
    """How ``holder`` got its value when a caller hands it in: a parameter, or a name bound
    from a parameter's contents (``amp, opt = handles.values()``); None otherwise."""
    bindings = names.bindings(holder)
    if len(bindings) != 1:
        return None
    node, where = bindings[0].node, names.scope(holder)
    name = getattr(where, "name", None)
    if isinstance(node, ast.arg):
        return f"a parameter of `{name}`"
    statement = names.parent(node)
    while statement is not None and not isinstance(statement, ast.stmt):
        statement = names.parent(statement)
    params = {a.arg for a in ast.walk(where.args) if isinstance(a, ast.arg)} if name else set()
    if isinstance(statement, ast.Assign) and any(
        isinstance(n, ast.Name) and n.id in params for n in ast.walk(statement.value)
    ):
        return f"bound at line {statement.lineno} from `{ast.unparse(statement.value)}`"
    return None


def stray_calls(
    tree: ast.Module, names: Names, path: str | None = None
) -> list[tuple[ast.AST, str]]:
    """apex amp calls that do not resolve to apex, so no other check sees them, each with what
    it is: ``amp.scale_loss`` where the apex import binds ``amp`` only inside another function
    (NameError as written), ``self.amp.scale_loss`` through an attribute that holds apex's
    module, set in another file, or ``amp.scale_loss`` through what a function that returns
    apex's module gave (``amp = get_amp(fp16)``, that function here or imported from a module
    on disk next to ``path``); and such a function's own ``return amp``."""
    found: list[tuple[ast.AST, str]] = []
    roots = _apex_roots(names)  # (an import binding always has its alias)
    stored = _stored_handles(names, roots)
    # `amp = apex.amp` (after `import apex`), `mod = amp`: a name bound to apex's module by
    # an assignment, which no import resolution reaches (the 46th review: no finding at all)
    aliases = {
        n.targets[0].id: (n.lineno, ast.unparse(n.value))
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name) and n.targets[0].id not in roots
        and any(q == APEX.rstrip(".") for q in names.qualified(n.value))
    } if roots else {}  # fmt: skip
    scaling = {  # (a name a caller hands in, how) where it scales a loss
        (c.func.value.id, _handed_in(c.func.value, names))
        for c in ast.walk(tree)
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
        and c.func.attr in ("scale_loss", "master_params") and isinstance(c.func.value, ast.Name)
    }  # fmt: skip
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and roots:
            if _hands_out(node, names):
                function = next(
                    (a.name for a in names.ancestors(node) if isinstance(a, ast.FunctionDef)),
                    "module-level code",
                )
                found.append((node, (
                    f"line {node.lineno}: `{function}` returns apex's amp module: the code "
                    "that calls it uses apex amp through the value it returns, which the "
                    f"rewrite does not follow; hand a GradScaler from `{function}` instead "
                    "and migrate its callers with it, by hand"
                )))  # fmt: skip
            continue
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MEMBERS
        ):
            continue
        holder = node.func.value
        shown = ast.unparse(node.func)
        function = next(
            (a.name for a in names.ancestors(node) if isinstance(a, ast.FunctionDef)), None
        )
        inside = f"`{function}`" if function else "module-level code"
        if isinstance(holder, ast.Name) and holder.id in aliases:
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through `{holder.id}`, bound to "
                f"`{aliases[holder.id][1]}` at line {aliases[holder.id][0]}, which the rewrite "
                f"does not follow: write `from apex import amp` (or migrate it by hand) first"
            )))  # fmt: skip
            continue
        if (
            isinstance(holder, ast.Name)
            and holder.id in roots
            and not names.bindings(holder)
            and (published := _published(tree, holder.id)) is not None
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` reads `{holder.id}`, which the apex import at "
                f"line {roots[holder.id].lineno} binds inside another function and line "
                f"{published} makes a module global through `globals()`, which the rewrite "
                "does not follow: bind it with a module-level import or `global` first, or "
                "migrate by hand"
            )))  # fmt: skip
        elif isinstance(holder, ast.Name) and holder.id in roots and not names.bindings(holder):
            found.append((node, (
                f"line {node.lineno}: `{shown}` reads `{holder.id}`, which the apex import at "
                f"line {roots[holder.id].lineno} binds only inside another function, not in "
                f"{inside}: that call raises NameError, so the original's mixed-precision path "
                f"cannot run as written; import `{holder.id}` at module level (or fix the "
                "original) before migrating"
            )))  # fmt: skip
        elif isinstance(holder, ast.Name) and (given := _given_by(holder, names, path)):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through `{holder.id}`, which "
                f"holds what {given} returns: apex's amp module, which the rewrite does not "
                "follow through a function's return; hand a GradScaler there instead and "
                "migrate both, by hand"
            )))  # fmt: skip
        elif (
            isinstance(holder, ast.Name)
            and path
            and (exporter := _reexported(holder, names, tree, path))
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through `{holder.id}`, which "
                f"this file takes from {exporter} (it imports apex's amp there): the rewrite "
                "does not follow apex's amp through another module; import it from apex in "
                f"this file (`from apex import amp`) and run again, or migrate it by hand"
            )))  # fmt: skip
        elif (
            isinstance(holder, ast.Name)
            and holder.id == "amp"
            and node.func.attr in ("scale_loss", "master_params", "initialize")
            and not roots
            and not names.bindings(holder)
            and not _star_binds(tree, path, "amp")
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` reads `amp`, which nothing in this file binds "
                "(no apex import, no star import that gives it): that call raises NameError, "
                "so the "
                "original's mixed-precision path cannot run as written; fix the original "
                "(import apex's amp, or take the GradScaler that replaces it) before migrating"
            )))  # fmt: skip
        elif isinstance(holder, ast.Name) and (loaded := _imported_by_name(holder, names)):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through `{holder.id}`, which "
                f"`importlib.import_module({loaded!r})` gives: the rewrite follows only import "
                f"statements; write `from apex import amp` (or migrate it by hand) first"
            )))  # fmt: skip
        elif (
            isinstance(holder, ast.Attribute)
            and holder.attr == "amp"
            and isinstance(holder.value, ast.Name)
            and (loaded := _imported_by_name(holder.value, names)) == "apex"
        ):  # (Young: `apex = importlib.import_module("apex")` in the function)
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through `{holder.value.id}`, "
                f"which `importlib.import_module({loaded!r})` gives: the rewrite follows only "
                "import statements; write `import apex` or `from apex import amp` (or migrate "
                "it by hand) first"
            )))  # fmt: skip
        elif isinstance(holder, ast.Attribute) and (given := _loaded_by_helper(holder, names)):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through "
                f"`{ast.unparse(holder)}`, whose `{given[0]}` is what `{given[1]}(...)` (line "
                f"{given[2]}) returns: `importlib.import_module({given[3]!r})`; the rewrite "
                "follows only import statements; write `import apex` or `from apex import amp` "
                "(or migrate it by hand) first"
            )))  # fmt: skip
        elif isinstance(holder, ast.Attribute) and (loaded := _imported_into(holder, tree, names)):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through "
                f"`{ast.unparse(holder)}`, which `importlib.import_module({loaded[0]!r})` gives "
                f"at line {loaded[1]}: the rewrite follows only import statements; write "
                "`from apex import amp` (or migrate it by hand) first"
            )))  # fmt: skip
        elif isinstance(holder, ast.Attribute) and (
            kept := _stored_from_helper(holder, tree, names, path)
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through "
                f"`{ast.unparse(holder)}`, which holds what {kept[0]} returns (stored at line "
                f"{kept[1]}): apex's amp module, which the rewrite does not follow through a "
                "function's return; hand a GradScaler there instead and migrate both, by hand"
            )))  # fmt: skip
        elif isinstance(holder, ast.Attribute) and ast.unparse(holder) in stored:
            called = {
                c.func.attr
                for c in ast.walk(tree)
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                and ast.unparse(c.func.value) in (ast.unparse(holder), "amp")
            }  # fmt: skip
            remedy = (
                "keep a GradScaler there instead "
                f"(`{ast.unparse(holder.value)}.scaler`) and migrate its uses, by hand"
                if called - {"initialize"}
                else "nothing in this file scales a loss through it (only `initialize` is "
                "called), so apex only casts here (O1's autocast, no loss scaling): delete "
                "the `initialize` and run the forwards under "
                '`torch.amp.autocast("cuda", dtype=torch.float16)`, with no GradScaler, by '
                "hand (if another file scales through it, migrate the two together)"
            )
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through "
                f"`{ast.unparse(holder)}`, which holds apex's module (stored at line "
                f"{stored[ast.unparse(holder)]}); the rewrite does not follow apex's calls "
                f"through a stored module here: {remedy}"
            )))  # fmt: skip
        elif (
            not roots
            and node.func.attr in ("scale_loss", "master_params", "initialize")
            and isinstance(holder, ast.Attribute)
            and holder.attr == "amp"
            and isinstance(holder.value, ast.Name)
            and not names.bindings(holder.value)
            and not _star_imports(tree)
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` reads `{holder.value.id}`, which nothing in "
                "this file binds (no import of it, no star import): that call raises "
                "NameError, so the original's "
                "mixed-precision path cannot run as written; fix the original before migrating"
            )))  # fmt: skip
        elif (
            not roots
            and node.func.attr in ("scale_loss", "master_params")
            and isinstance(holder, ast.Attribute)
            and (holder.attr in ("amp", "apex") or "amp_handle" in holder.attr)
        ):  # (SR-Stereo's subclasses: `self.amp_handle = amp.init(half)` in the base's module;
            # rtm3d's solver: `self.apex`, apex's amp module handed to its constructor)
            what = (
                "apex's module" if holder.attr in ("amp", "apex")
                else "apex amp (its module, or the handle the pre-2019 `amp.init()` returns)"
            )  # fmt: skip
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp's `{node.func.attr}` through "
                f"`{ast.unparse(holder)}`, which can hold {what} only where another "
                "file keeps it there (apex is not imported here); migrate this file with the "
                "one that keeps it (a GradScaler kept there instead, "
                f"`{ast.unparse(holder.value)}.scaler`), by hand"
            )))  # fmt: skip
        elif (
            isinstance(holder, ast.Name)
            and holder.id not in roots  # (a file that imports other apex names: Hongik's)
            and (
                node.func.attr in ("scale_loss", "master_params")
                # (its state, where the same name also scales: nlp-recipes' `fine_tune`)
                or (
                    node.func.attr in _MEMBERS and (holder.id, _handed_in(holder, names)) in scaling
                )
            )
            and "amp" in holder.id.lower()
            and (given := _handed_in(holder, names))
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp's `{node.func.attr}` through "
                f"`{holder.id}`, {given}: it holds apex's module only where a caller hands it "
                f"in ({'no import here binds it' if roots else 'apex is not imported here'}), "
                "which the rewrite does not follow; migrate this code with the caller that "
                "hands it (a GradScaler handed in instead: `scaler.scale(loss).backward()`, "
                "`scaler.step(optimizer)` + `scaler.update()`), by hand"
            )))  # fmt: skip
    private = {
        name: stmt
        for name, stmt in roots.items()
        if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("apex.amp.")
    }  # `from apex.amp._amp_state import _amp_state`: apex's internals, read as attributes
    for name, stmt in sorted(private.items()):
        use = next(
            (n for n in names.spelled(name) if isinstance(n, ast.Name) and n.id == name), None
        )
        if use is not None and not found:
            found.append((use, (
                f"line {use.lineno}: `{name}` (from `{stmt.module}`, imported at line "
                f"{stmt.lineno}) is apex amp's internal state, with no torch.amp counterpart "
                "(a GradScaler's `get_scale()`/`state_dict()` hold its loss scale): migrate "
                "this use by hand"
            )))  # fmt: skip
    return sorted(found, key=lambda f: (f[0].lineno, f[0].col_offset))  # (walked breadth-first)


def _bound_calls(holder: ast.Name, names: Names) -> Iterator[ast.Call]:
    """The calls whose results bind ``holder`` (``holder = f(...)``)."""
    for binding in names.bindings(holder):
        target = binding.node
        assign = names.parent(target) if isinstance(target, ast.Name) else None
        if isinstance(assign, ast.Assign) and isinstance(assign.value, ast.Call):
            yield assign.value


def _imported_by_name(holder: ast.Name, names: Names) -> str | None:
    """The apex module that ``holder`` is bound to by ``importlib.import_module("apex...")``
    (None: not so bound)."""
    for call in _bound_calls(holder, names):
        if (
            "importlib.import_module" in names.qualified(call.func)
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
            and call.args[0].value.split(".")[0] == "apex"
        ):
            return call.args[0].value
    return None


def _loaded_by_helper(holder: ast.Attribute, names: Names) -> tuple[str, str, int, str] | None:
    """``apex.amp`` whose ``apex`` is bound by ``apex = get_apex()``, a function of this file
    that returns ``importlib.import_module("apex...")``, or a name bound to it (Young's adapter
    module): (the name,
    the function, its line, the module loaded); None: not so."""
    root = holder
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return None
    for call in _bound_calls(root, names):
        if not isinstance(call.func, ast.Name):
            continue
        for helper in names.bindings(call.func):
            function = helper.node
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                value = node.value if isinstance(node, ast.Return) else None
                if isinstance(value, ast.Name):  # `apex = import_module("apex")`, returned
                    value = next(_bound_calls(value, names), None)
                if (
                    isinstance(value, ast.Call)
                    and "importlib.import_module" in names.qualified(value.func)
                    and value.args
                    and isinstance(value.args[0], ast.Constant)
                    and isinstance(value.args[0].value, str)
                    and value.args[0].value.split(".")[0] == "apex"
                ):
                    return root.id, function.name, function.lineno, value.args[0].value
    return None


def _imported_into(holder: ast.Attribute, tree: ast.Module, names: Names) -> tuple[str, int] | None:
    """The apex module that ``importlib.import_module("apex...")`` stores in the attribute
    ``holder`` spells (``self.amp = importlib.import_module("apex.amp")``), and the line."""
    spelled = ast.unparse(holder)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and ast.unparse(node.targets[0]) == spelled
            and isinstance(call := node.value, ast.Call)
            and "importlib.import_module" in names.qualified(call.func)
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
            and call.args[0].value.split(".")[0] == "apex"
        ):
            return call.args[0].value, node.lineno
    return None


def _reexported(holder: ast.Name, names: Names, tree: ast.Module, path: str) -> str | None:
    """Where ``holder`` comes from when it is apex's amp taken from a project module on disk
    (``from pkg.utils import amp``, ``from .utils import *`` where utils imports it from
    apex): that module's path, relative to ``path``'s folder (None: not so)."""
    bindings = names.bindings(holder)
    imports = [
        (b.node, b.alias.name) for b in bindings
        if isinstance(b.node, ast.ImportFrom) and b.alias is not None
    ]  # fmt: skip
    if bindings and len(imports) != len(bindings):
        return None
    if not bindings:
        imports = [
            (n, holder.id) for n in tree.body
            if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
        ]  # fmt: skip
    for node, name in imports:
        if node.module and node.module.partition(".")[0] == "apex" and not node.level:
            continue
        found = _apex_binding(path, node, name)
        if found is not None:
            return os.path.relpath(found, os.path.dirname(os.path.abspath(path)))
    return None


def _from_module(path: str, node: ast.ImportFrom) -> tuple[str, ast.Module] | None:
    """The file on disk that ``from m import ...`` (or ``from . import ...``) in ``path``
    reads, and its tree (None: not on disk, or it does not parse)."""
    target = (
        _module_file(path, node.level, node.module) if node.module
        else _package_init(path, node.level)
    )  # fmt: skip
    if target is None:
        return None
    try:
        return target, ast.parse(_read(target))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _apex_binding(path: str, node: ast.ImportFrom, name: str, depth: int = 0) -> str | None:
    """The module file that binds ``name`` to apex's amp for ``from m import name`` (or
    ``from m import *``) in ``path``, following such imports through modules on disk."""
    found = _from_module(path, node) if depth <= 8 else None
    if found is None:
        return None
    target, tree = found
    for statement in _module_level(tree.body):
        if isinstance(statement, ast.Import):
            if any(a.name == "apex.amp" and a.asname == name for a in statement.names):
                return target
        elif isinstance(statement, ast.ImportFrom):
            apex = (statement.module or "").partition(".")[0] == "apex" and not statement.level
            for alias in statement.names:
                if alias.name == "*" and not apex:
                    found = _apex_binding(target, statement, name, depth + 1)
                elif (alias.asname or alias.name) != name:
                    continue
                elif apex:
                    found = target if f"{statement.module}.{alias.name}" == "apex.amp" else None
                else:
                    found = _apex_binding(target, statement, alias.name, depth + 1)
                if found is not None:
                    return found
    return None


def _star_binds(tree: ast.Module, path: str | None, name: str) -> bool:
    """A star import of ``tree`` may bind ``name``: its module is not on disk next to
    ``path``, or its text spells the name (THETA's ``from deepxml.modules import *``, whose
    module never mentions ``amp``, binds no ``amp``)."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)):
            continue
        found = next(
            (p for p in _module_paths(path, node.level, node.module or "") if os.path.isfile(p)),
            None,
        ) if path and node.module else None  # fmt: skip
        text = _read(found) if found is not None else b""
        if found is None or b"import *" in text or re.search(rb"\b%s\b" % name.encode(), text):
            return True
    return False


def _star_imports(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
        for n in ast.walk(tree)
    )


def _stored_handles(
    names: Names, roots: dict[str, ast.stmt], plain: bool = False
) -> dict[str, int]:
    """Where apex's module is stored on an object (``self.amp = amp``; unless ``plain``, also
    ``amp if fp16 else None``, ``fp16 and amp``, ``apex.amp``, a place of a tuple): the target
    as written, and the line of its first store."""
    stored: dict[str, int] = {}
    for root in roots:
        for node in names.spelled(root):
            if not isinstance(node, ast.Name):
                continue
            value, assign = node, names.parent(node)
            position = None
            if not plain:
                if isinstance(assign, ast.Attribute) and assign.attr == "amp":  # `apex.amp`
                    value, assign = assign, names.parent(assign)
                while (
                    isinstance(assign, ast.IfExp) and value in (assign.body, assign.orelse)
                ) or isinstance(assign, ast.BoolOp):
                    value, assign = assign, names.parent(assign)
                if isinstance(assign, ast.Tuple | ast.List) and isinstance(
                    names.parent(assign), ast.Assign
                ):
                    position = assign.elts.index(value)
                    value, assign = assign, names.parent(assign)
            if isinstance(assign, ast.AnnAssign) and assign.value is value:
                targets = [assign.target]  # (`self.amp: object = amp`)
            elif isinstance(assign, ast.Assign) and assign.value is value:
                targets = assign.targets
            else:
                continue
            for target in targets:
                if position is not None:
                    elements = target.elts if isinstance(target, ast.Tuple | ast.List) else []
                    target = elements[position] if len(elements) == len(value.elts) else None
                if isinstance(target, ast.Attribute):
                    stored.setdefault(ast.unparse(target), assign.lineno)
    return stored


def _given_by(holder: ast.Name, names: Names, path: str | None) -> str | None:
    """``holder`` is bound by ``holder = helper(...)`` where ``helper`` returns apex's amp
    module (defined in this file, or imported from a module on disk): how to name it (None:
    not so)."""
    for call in _bound_calls(holder, names):
        given = _apex_helper(call, names, path)
        if given is not None:
            return given
    return None


def _stored_from_helper(
    holder: ast.Attribute, tree: ast.Module, names: Names, path: str | None
) -> tuple[str, int] | None:
    """``self.amp = get_amp(fp16)`` somewhere in the file, where ``get_amp`` returns apex's
    amp module (nlp-recipes' summarizer, the 71st review: its ``self.amp.initialize`` had no
    finding): how to name the helper and the store's line (None: not so)."""
    spelled = ast.unparse(holder)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Attribute)
            and ast.unparse(node.targets[0]) == spelled
            and isinstance(node.value, ast.Call)
            and (given := _apex_helper(node.value, names, path)) is not None
        ):
            return given, node.lineno
    return None


def _apex_helper(call: ast.Call, names: Names, path: str | None) -> str | None:
    """``call`` calls a function that returns apex's amp module (defined in this file, or
    imported from a module on disk): how to name it (None: not so)."""
    if isinstance(call.func, ast.Name):
        for helper in names.bindings(call.func):
            if isinstance(helper.node, ast.FunctionDef) and _returns_apex(helper.node, names):
                return f"`{call.func.id}(...)` (line {helper.node.lineno})"
            imported = helper.node
            if not (isinstance(imported, ast.ImportFrom) and helper.alias and path):
                continue
            found = _module_file(path, imported.level, imported.module or "")
            other = _parsed(found, _read(found)) if found is not None else None
            defs = _defs(other.tree, helper.alias.name) if other is not None else []
            if defs and _returns_apex(defs[0], other.names):
                shown = os.path.relpath(found, os.path.dirname(os.path.abspath(path)))
                return f"`{call.func.id}(...)` ({shown}:{defs[0].lineno})"
    return None


def _hands_out(node: ast.Return, names: Names) -> bool:
    """``return amp``: the value returned is apex's amp module itself."""
    return node.value is not None and _AMP in names.qualified(node.value)


def _returns_apex(function: ast.FunctionDef, names: Names) -> bool:
    return any(isinstance(n, ast.Return) and _hands_out(n, names) for n in ast.walk(function))


@dataclass
class _File:
    path: str
    tree: ast.Module
    names: Names
    members: dict[str, list[ast.Call]]


def _parsed(path: str, data: bytes) -> _File | None:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names = Names(tree)
    members: dict[str, list[ast.Call]] = {}
    for call in apex_calls(names):
        for name in names.qualified(call.func):
            if name.startswith(APEX):
                members.setdefault(name[len(APEX) :], []).append(call)
    return _File(os.path.abspath(path), tree, names, members)


def _function(file: _File, node: ast.AST) -> ast.AST:
    return function_around(file.names, file.tree, node)


def function_around(names: Names, tree: ast.Module, node: ast.AST) -> ast.AST:
    """The innermost function around ``node`` (``tree``, the module, at module level)."""
    for ancestor in names.ancestors(node):
        if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef):
            return ancestor
    return tree
