"""A module that shares the GradScaler as module state (a setup module that initializes
for its importers), and helpers that only save or restore the state of what they are given."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable

from ampmigrate.apex.hooklinks import _REGISTERS
from ampmigrate.apex.linkbase import Link, _checked, _spellings
from ampmigrate.apex.ondisk import _defs, _import_statements, _module_file, _read
from ampmigrate.apex.strays import _File, _function
from ampmigrate.apex.users import _uses
from ampmigrate.scalerflow import _module_paths


def _returned_models(file: _File, init: ast.Call, home: ast.FunctionDef) -> tuple[int, ...]:
    """The places of the initialized models in the tuple every ``return`` of ``home`` gives
    (none: a return that is not such a tuple)."""
    models = _spellings(file, init)["models"]
    returns = [n for n in ast.walk(home) if isinstance(n, ast.Return)
               and _function(file, n) is home]  # fmt: skip
    places = set()
    for node in returns:
        if not isinstance(node.value, ast.Tuple):
            return ()
        places |= {i for i, e in enumerate(node.value.elts) if ast.unparse(e) in models}
    return tuple(sorted(places)) if returns else ()


def _switch(file: _File, init: ast.Call, home: ast.FunctionDef) -> tuple[tuple[str, int], ...]:
    """The parameters of ``home`` that are ``and`` terms of the tests of the ``if``s around
    ``init`` in it (``if fp16:``), with their positions."""
    listed = [a.arg for a in (*home.args.posonlyargs, *home.args.args)]
    named = listed + [a.arg for a in home.args.kwonlyargs]
    found = []
    for ancestor in file.names.ancestors(init):
        if ancestor is home:
            break
        if isinstance(ancestor, ast.If) and any(n is init for s in ancestor.body
                                                 for n in ast.walk(s)):  # fmt: skip
            test = ancestor.test
            terms = (
                test.values
                if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)
                else [test]
            )
            found += [
                (t.id, listed.index(t.id) if t.id in listed else -1)
                for t in terms if isinstance(t, ast.Name) and t.id in named
            ]  # fmt: skip
    return tuple(found)


def _importing(file: _File, owner: _File, function: str) -> str | None:
    """The absolute module ``file`` imports ``function`` of ``owner`` from, by name
    (``from pkg.setup import make``: ``pkg.setup``), where that module is ``owner``'s."""
    for node in _import_statements(file.tree.body):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and any(a.name == function and a.asname in (None, function) for a in node.names)
            and owner.path in {os.path.abspath(p) for p in _module_paths(file.path, 0, node.module)}
        ):
            return node.module
    return None


def _shared_links(
    files: list[_File], taken: set[str], everything: Callable[[], Iterable[tuple[str, bytes]]]
) -> dict[str, Link]:
    """A module-level function that initializes amp and returns the models (DPR's
    ``setup_for_distributed_mode``), and the files that import it and scale the loss with
    what it returns: apex's state was the process's, so the GradScaler becomes the function's
    module state, which they read there. One component, rewritten together; broken where a
    file of the run uses the function otherwise."""
    by_path = {f.path: f for f in files}
    out: dict[str, Link] = {}
    for owner in files:
        inits = owner.members.get("initialize", [])
        if (
            owner.path in taken
            or len(inits) != 1
            or set(owner.members) - {"initialize", *_REGISTERS}
        ):
            continue
        home = _function(owner, inits[0])
        if not (isinstance(home, ast.FunctionDef) and home in owner.tree.body):
            continue
        places = _returned_models(owner, inits[0], home)
        readers = {  # each file that imports the function and scales: from which module
            f.path: (f, module)
            for f in files
            if f is not owner and f.path not in taken and "scale_loss" in f.members
            and "initialize" not in f.members
            and (module := _importing(f, owner, home.name)) is not None
        }  # fmt: skip
        if not places or not readers:
            continue
        item = Link(
            callers=tuple(readers),
            callee=owner.path,
            functions=(home.name,),
            calls=tuple(
                sum(
                    isinstance(p := f.names.parent(u), ast.Call) and p.func is u
                    for u in _uses(f, owner, home.name)
                )
                for f, _ in readers.values()
            ),
            spellings=tuple((module,) for _, module in readers.values()),
            shared=places,
            switch=_switch(owner, inits[0], home),
        )
        missing = (
            "where the rewrite does not follow it (a file that scales no loss with apex: the "
            "forwards of what it returns ran under apex's casts there, and no autocast would "
            "replace them)"
        )
        item = _checked(item, by_path, everything, missing)
        out.update((f, item) for f in item.files)
    return out


_STATE_ONLY = {"state_dict", "load_state_dict"}


def keeps_state_only(path: str | None, text: str, qualified: str, keyword: str) -> str | None:
    """Why the function ``qualified`` (as the calling file at ``path`` names it; its own
    source is ``text``) may do more with the value passed to it as ``keyword=`` than keep its
    state: a generic checkpoint helper (``restart_from_checkpoint(path, **kwargs)`` calling
    ``value.load_state_dict(checkpoint[key])`` for each keyword) treats apex's module and a
    GradScaler alike, as both take one state dict and give one back (None: it does only that)."""
    dots = len(qualified) - len(qualified.lstrip("."))
    module, _, name = qualified[dots:].rpartition(".")
    if not module and not dots:
        source = text
    elif path is None:
        return "it is defined in another module, which a file read alone cannot see"
    else:
        found = _module_file(path, dots, module)
        if found is None:
            return f"its module `{qualified.rpartition('.')[0]}` is not on disk here"
        source = _read(found).decode("utf-8", "replace")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "its module does not parse"
    defs = _defs(tree, name)
    if len(defs) != 1:
        return f"`{name}` is not one function of its module"
    function = defs[0]
    named = [a.arg for a in (*function.args.posonlyargs, *function.args.args,
                             *function.args.kwonlyargs)]  # fmt: skip
    if keyword in named or function.args.kwarg is None:
        return f"it takes `{keyword}` as a parameter of its own, not as one of its `**` keywords"
    return _state_only_uses(function, function.args.kwarg.arg)


def _state_only_uses(function: ast.FunctionDef, kwargs: str) -> str | None:
    """Why ``function`` may use a value of its ``**kwargs`` other than to save or restore its
    state (None: each value is only tested against None and asked ``state_dict()`` or
    ``load_state_dict(state)``)."""
    parents = {id(c): p for p in ast.walk(function) for c in ast.iter_child_nodes(p)}
    values: set[str] = set()
    for node in ast.walk(function):
        nested = ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
        if isinstance(node, nested) and node is not function:
            return f"it defines `{getattr(node, 'name', 'lambda')}` inside, not followed"
        if not (isinstance(node, ast.Name) and node.id == kwargs):
            continue
        attribute = parents.get(id(node))
        call = parents.get(id(attribute))
        member = attribute.attr if isinstance(attribute, ast.Attribute) else None
        loop = parents.get(id(call))
        if member in ("keys", "__len__") or (
            isinstance(attribute, ast.Compare) and node is not attribute.left
        ):
            continue  # which keys there are, or `key in kwargs`
        if (
            member in ("items", "values")
            and isinstance(call, ast.Call)
            and isinstance(loop, ast.For)
            and loop.iter is call
        ):
            target = loop.target
            if member == "items" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
                target = target.elts[1]
            if isinstance(target, ast.Name):
                values.add(target.id)
                continue
        return f"it uses `{kwargs}` at its line {node.lineno} other than to loop over its values"
    if not values:
        return f"it does not loop over the values of `{kwargs}`"
    for node in ast.walk(function):
        if not isinstance(node, ast.Name) or node.id not in values:
            continue
        parent = parents.get(id(node))
        if isinstance(node.ctx, ast.Store) and isinstance(parent, ast.Tuple | ast.For):
            continue  # the loop's own target
        if isinstance(parent, ast.Compare) and len(parent.ops) == 1:
            other = parent.comparators[0] if parent.left is node else parent.left
            if isinstance(parent.ops[0], ast.Is | ast.IsNot) and (
                isinstance(other, ast.Constant) and other.value is None
            ):
                continue
        call = parents.get(id(parent))
        if (
            isinstance(parent, ast.Attribute)
            and parent.attr in _STATE_ONLY
            and isinstance(call, ast.Call)
            and call.func is parent
            and not any(isinstance(a, ast.Starred) for a in call.args)
            and (
                (parent.attr == "state_dict" and not call.args and not call.keywords)
                or (parent.attr == "load_state_dict" and len(call.args) == 1)
            )
        ):
            continue  # a keyword of `load_state_dict` (`strict=False`) raises in both alike
        return (
            f"it uses a value of `{kwargs}` at its line {node.lineno} other than to save or "
            "restore its state"
        )
    return None
