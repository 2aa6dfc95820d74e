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
import sys
from dataclasses import dataclass, field

from ampmigrate.apex.ondisk import _module_file, module_definition, module_tree

# builtins that read an object and keep nothing of it
SHOWING = frozenset({"print", "len", "str", "repr", "isinstance", "type", "id", "hasattr"})
# a module's methods that return the module itself (`models.append(model.eval())` keeps it:
# the 58th review), and those that hand it (or its layers) to other code
RETURNS_SELF = frozenset({
    "train", "eval", "to", "cuda", "cpu", "float", "half", "double", "bfloat16",
    "requires_grad_", "type", "share_memory", "to_empty",
})  # fmt: skip
HANDS_ON = frozenset({
    "modules", "children", "named_modules", "named_children", "apply", "register_module",
    "add_module", "register_forward_hook", "register_forward_pre_hook",
    "register_backward_hook", "register_full_backward_hook",
    "register_full_backward_pre_hook",
})  # fmt: skip

_DEPTH = 3
# the libraries a training script takes names from with a star import: none binds a name of
# the project (a function it hands its model to)
_LIBRARIES = frozenset({
    "torch", "torchvision", "torchaudio", "numpy", "scipy", "pandas", "sklearn", "tqdm",
    "transformers", "timm", "apex", "tensorflow", "keras", "matplotlib", "PIL", "cv2",
})  # fmt: skip
Callee = tuple[ast.FunctionDef, "Lookup", str]  # (the function, what it calls, its file)


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
    lookup = lookup.within(function)
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


def _use_keeps(node: ast.expr, parents: dict, lookup: Lookup, depth: int) -> bool | str | None:
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
            method = top.attr if isinstance(top, ast.Attribute) else ""
            if method in HANDS_ON:
                return True
            if method in RETURNS_SELF:  # (the call is the object again)
                return _use_keeps(above, parents, lookup, depth)
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
    if index is not None and any(isinstance(a, ast.Starred) for a in call.args[:index]):
        return True  # (its place among the parameters is not known: 58a's K09)
    found = lookup(call.func)
    if found is None:
        shown = isinstance(call.func, ast.Name) and call.func.id in SHOWING
        return None if shown and not lookup.bound(call.func.id) else True
    function, further, file = found
    return keeps(function, index, keyword, further, file, depth + 1)


@dataclass(frozen=True)
class Lookup:
    """The functions a module's code calls by a plain name, as Python binds it: its own
    (one undecorated `def`, bound once), and those it imports from project modules on disk
    (by name, or through its one star import); None for anything else (58a: a name bound
    twice, rebound, decorated, or a parameter shadowing a module function). ``shown``: the
    file's name in the texts (empty for the module whose findings these are)."""

    path: str | None
    tree: ast.Module
    shown: str = ""
    local: frozenset[str] = field(default=frozenset())

    def within(self, function: ast.FunctionDef) -> Lookup:
        """The lookup from inside ``function``: its parameters and locals shadow the module."""
        arguments = function.args
        params = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        params += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        local = {a.arg for a in params} | {
            n.id
            for n in ast.walk(function)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        nested = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Import | ast.ImportFrom
        local |= {  # (a nested `def keep`, a local `from keeper import keep`: 59a)
            name
            for n in ast.walk(function)
            if n is not function and isinstance(n, nested)
            for name in _binds(n)
        }
        return Lookup(self.path, self.tree, self.shown, frozenset(local))

    def bound(self, name: str) -> bool:
        """``name`` is bound here (not the builtin of that name)."""
        return name in self.local or any(
            name in (binds := _binds(s)) or "*" in binds for s in self.tree.body
        )

    def __call__(self, func: ast.expr) -> Callee | None:
        if not isinstance(func, ast.Name) or func.id in self.local:
            return None
        found = _bound_in(self.path, self.tree, func.id, self)
        return None if found is _UNBOUND else found


# what a module's star import gives where it binds no such name
_UNBOUND = object()


def _bound_in(path: str | None, tree: ast.Module, name: str, lookup: Lookup | None, depth=0):
    """The function ``name`` is bound to at the end of the module ``tree`` (at ``path``), as
    Python binds it: its one binding there, unless a star import after it binds the name
    again (the last that does wins: UER-py's five star imports); None where that is not a
    function read here (bound twice, decorated, an assignment); ``_UNBOUND``: not bound."""
    direct = [s for s in tree.body if name in _binds(s)]
    rebound = any(  # (`global keep; keep = ...` in a function: 59a's A24)
        isinstance(n, ast.Global) and name in n.names for n in ast.walk(tree)
    )
    if len(direct) > 1 or rebound:
        return None
    start = tree.body.index(direct[0]) + 1 if direct else 0
    for star in reversed([s for s in tree.body[start:] if "*" in _binds(s)]):
        found = _star_binding(path, star, name, depth) if path is not None else None
        if found is not _UNBOUND:
            return found
    if not direct:
        return _UNBOUND
    [statement] = direct
    if isinstance(statement, ast.FunctionDef):
        if statement.decorator_list:
            return None
        shown = os.path.basename(path) if lookup is None and path else ""
        return statement, lookup or Lookup(path, tree, shown), shown
    if not isinstance(statement, ast.ImportFrom) or path is None:
        return None
    dots = "." * statement.level
    prefix = f"{dots}{statement.module}." if statement.module else dots
    original = next((a.name for a in statement.names if (a.asname or a.name) == name), name)
    return _defined(path, prefix + original)


def _star_binding(path: str, star: ast.ImportFrom, name: str, depth: int):
    """What ``from m import *`` in ``path`` binds ``name`` to (``_UNBOUND``: nothing; a
    module not on disk, a library, is taken to bind no name of the project)."""
    if depth > _DEPTH or not star.module:
        return None
    file = _module_file(path, star.level, star.module)
    if file is None:  # (a library binds no name of the project; a module of the project not
        root = star.module.partition(".")[0]  # found on disk may: 59a's A07, on `sys.path`)
        known = not star.level and (root in sys.stdlib_module_names or root in _LIBRARIES)
        return _UNBOUND if known else None
    tree = module_tree(file)
    if tree is None:
        return None
    public = _all(tree)
    if public is False:
        return None
    if (name not in public) if public is not None else name.startswith("_"):
        return _UNBOUND
    return _bound_in(file, tree, name, None, depth + 1)


def _all(tree: ast.Module) -> set[str] | bool | None:
    """The names a literal ``__all__`` lists (None: no such list; False: one the module
    changes or builds otherwise, which is not read: 59a's `__all__.append(...)`)."""
    found: set[str] | None = None
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign)
            else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
        )  # fmt: skip
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            if found is not None or not (
                isinstance(node, ast.Assign) and node in tree.body
                and isinstance(node.value, ast.List | ast.Tuple)
            ):  # fmt: skip
                return False
            found = {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
        elif (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "__all__"
        ):  # fmt: skip
            return False  # (`__all__.append(...)`, `.extend(...)`)
    return found


def module_lookup(path: str | None, tree: ast.Module) -> Lookup:
    """The lookup of the module whose findings these are."""
    return Lookup(path, tree)


def _binds(statement: ast.stmt) -> set[str]:
    """The module-level names ``statement`` binds ("*": any, through a star import), also in
    the blocks of an `if`, `try`, `with` or loop (59a: `try: from keeper import keep`)."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).partition(".")[0] for a in statement.names}
    found = {
        n.id for n in ast.walk(statement)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }  # fmt: skip
    for block in ("body", "orelse", "finalbody"):
        for inner in getattr(statement, block, None) or ():
            found |= _binds(inner)
    for handler in [
        *(getattr(statement, "handlers", None) or ()),
        *(getattr(statement, "cases", None) or ()),
    ]:  # (`match`: 60a's W15)
        for inner in handler.body:
            found |= _binds(inner)
    return found


def _defined(path: str, qualified: str) -> Callee | None:
    found = module_definition(path, qualified)
    if found is None or not isinstance(found[1], ast.FunctionDef):
        return None
    file, function = found
    tree = module_tree(file)
    if tree is None:
        return None
    return function, Lookup(file, tree, os.path.basename(file)), os.path.basename(file)
