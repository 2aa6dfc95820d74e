"""Whether a function keeps an object handed to it past the call.

A k-fold loop hands each pass's initialized model to a function of the project: where that
function puts it in a global list or on a module's object (the 56c review's ``register(model)``:
``REG.append(m)``), a forward of it after the loop ran under apex O1's casts and runs in float32
after the rewrite. Read on ``ast``: the function's own uses of its parameter, and the functions
of the file or of project modules on disk it hands the object to, a few calls deep; a use not
followed counts as keeping it.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable

from ampmigrate.apex.links import _tree_of, module_definition

# builtins that read an object and keep nothing of it
SHOWING = frozenset({"print", "len", "str", "repr", "isinstance", "type", "id", "hasattr"})

_DEPTH = 3
Callee = tuple[ast.FunctionDef, "Lookup", str]  # (the function, what it calls, its file)
Lookup = Callable[[ast.expr], Callee | None]


def keeps(
    function: ast.FunctionDef,
    index: int | None,
    keyword: str | None,
    lookup: Lookup,
    file: str = "",
    depth: int = 0,
) -> str | None:
    """Where ``function``, given the object as its ``index``-th positional argument (or by
    ``keyword``), may keep it after it returns (it stores it, returns it, hands it to code
    not followed, or a closure reads it): the statement and its line; None where it
    cannot. ``file`` names the function's file in the text, where it is another one."""
    at = f"`{function.name}` ({file + ', ' if file else ''}line"
    arguments = function.args
    positional = arguments.posonlyargs + arguments.args
    if keyword is not None:
        named = [a.arg for a in positional + arguments.kwonlyargs if a.arg == keyword]
    else:
        named = [positional[index].arg] if index is not None and index < len(positional) else []
    if not named or depth > _DEPTH:
        return f"{at} {function.lineno}), whose parameters are not followed"
    declared = {
        n for node in ast.walk(function) if isinstance(node, ast.Global | ast.Nonlocal)
        for n in node.names
    }  # fmt: skip
    parents = {child: node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}
    tracked, done = set(named), set()
    while tracked - done:
        name = next(iter(tracked - done))
        done.add(name)
        if name in declared:
            return f"`{name}`, a global of {at} {function.lineno})"
        for node in ast.walk(function):
            if not (
                isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
            ):
                continue
            kept = _in_closure(node, function, parents) or _use_keeps(node, parents, lookup, depth)
            if kept is True:
                return f"`{_line_of(node, parents)}` in {at} {node.lineno})"
            if isinstance(kept, str) and kept.startswith("`"):
                return kept  # (where a function it is handed to keeps it)
            if isinstance(kept, str):
                tracked.add(kept)
    return None


def _line_of(node: ast.AST, parents: dict) -> str:
    while not isinstance(node, ast.stmt) and parents.get(node) is not None:
        node = parents[node]
    return ast.unparse(node).splitlines()[0]


def _in_closure(node: ast.AST, function: ast.FunctionDef, parents: dict) -> bool:
    current = parents.get(node)
    while current is not None and current is not function:
        if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return True
        current = parents.get(current)
    return False


def _use_keeps(node: ast.Name, parents: dict, lookup: Lookup, depth: int) -> bool | str | None:
    """True where this use may keep the object; where a function it is handed to keeps it
    (a text in backquotes); the name it binds it to (an alias, to follow); None where it keeps
    nothing."""
    parent = parents.get(node)
    if isinstance(parent, ast.Call) and parent.func is node:
        return None  # (its forward)
    if isinstance(parent, ast.Attribute | ast.Subscript) and parent.value is node:
        top = parent  # `m.module.state_dict()`, `m.layers[0](x)`, `m.frozen = True`
        while isinstance(up := parents.get(top), ast.Attribute | ast.Subscript) and up.value is top:
            top = up
        above = parents.get(top)
        if isinstance(getattr(top, "ctx", None), ast.Store | ast.Del):
            return None
        if isinstance(above, ast.Call) and above.func is top:
            return None
        return None if _read_only(top, parents) else True
    if isinstance(parent, ast.Call) and node in parent.args:
        return _handed(parent, parent.args.index(node), None, lookup, depth)
    if isinstance(parent, ast.keyword) and parent.arg is not None:
        call = parents.get(parent)
        return (
            _handed(call, None, parent.arg, lookup, depth) if isinstance(call, ast.Call) else True
        )
    if isinstance(parent, ast.Assign) and parent.value is node:
        if len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
            return parent.targets[0].id
        return True
    return None if _read_only(node, parents) else True


def _read_only(node: ast.AST, parents: dict) -> bool:
    """``node``'s value is only looked at: compared, tested, formatted, shown (``print``), or
    a bare expression."""
    parent = parents.get(node)
    if isinstance(parent, ast.Compare | ast.FormattedValue | ast.Expr | ast.UnaryOp):
        return True
    if isinstance(parent, ast.Call) and node in parent.args:
        return isinstance(parent.func, ast.Name) and parent.func.id in SHOWING
    return isinstance(parent, ast.If | ast.While | ast.Assert) and parent.test is node


def _handed(call: ast.Call, index: int | None, keyword: str | None, lookup: Lookup, depth: int):
    if isinstance(call.func, ast.Name) and call.func.id in SHOWING:
        return None
    found = lookup(call.func)
    if found is None:
        return True
    function, further, file = found
    return keeps(function, index, keyword, further, file, depth + 1)


def module_lookup(path: str | None, tree: ast.Module, own: bool = True) -> Lookup:
    """The functions a module's code calls by a plain name: its own, and those it imports
    from project modules on disk (by name or through a star import). ``own``: the module
    whose findings these are (its functions' texts name no file)."""

    shown = os.path.basename(path) if path is not None and not own else ""

    def lookup(func: ast.expr) -> Callee | None:
        if not isinstance(func, ast.Name):
            return None
        for statement in tree.body:
            if isinstance(statement, ast.FunctionDef) and statement.name == func.id:
                return statement, lookup, shown
        if path is None:
            return None
        for statement in tree.body:
            if not isinstance(statement, ast.ImportFrom):
                continue
            dots = "." * statement.level
            prefix = f"{dots}{statement.module}." if statement.module else dots
            for alias in statement.names:
                if alias.name == "*" or (alias.asname or alias.name) == func.id:
                    original = func.id if alias.name == "*" else alias.name
                    found = _defined(path, prefix + original)
                    if found is not None:
                        return found
        return None

    return lookup


def _defined(path: str, qualified: str) -> Callee | None:
    found = module_definition(path, qualified)
    if found is None or not isinstance(found[1], ast.FunctionDef):
        return None
    file, function = found
    try:
        stat = os.stat(file)
    except OSError:
        return None
    tree = _tree_of(file, stat.st_mtime_ns, stat.st_size)
    if tree is None:
        return None
    return function, module_lookup(file, tree, own=False), os.path.basename(file)
