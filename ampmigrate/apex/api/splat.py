"""The keys a ``**`` splat can carry, read where the splatted dict is built and changed.

A timm-style optimizer factory builds ``opt_args = dict(lr=..., weight_decay=...)``, adds or
pops a key or two, and calls ``FusedAdam(params, **opt_args)``. When the dict is a local of the
function and every use of its name there is one this module understands (a literal or
``dict(k=...)`` assignment, ``d["k"] = ...``, ``del d["k"]``, ``d.pop("k")``,
``d.update(k=...)``, ``d.setdefault("k", ...)``, reads, other splats), the keys it may carry
are a closed set, and the call can be mapped as if they were written out. Anything else (the
dict passed to a function, aliased, returned, a parameter, a key that is not a literal) leaves
them unknown, and the caller refuses with that reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ampmigrate.engine.names import Names
from ampmigrate.renames import NoFix

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_READS = frozenset({"get", "keys", "items", "values", "copy", "__contains__", "__getitem__"})


@dataclass(frozen=True)
class Keys:
    """What ``**name`` carries: every key it may (``possible``), those it always does."""

    name: str
    possible: frozenset[str]
    certain: frozenset[str]


def splat_keys(names: Names, call: ast.Call, value: ast.expr) -> Keys:
    """The keys of ``**value`` in ``call``; ``NoFix`` naming why where they are not visible."""
    if not isinstance(value, ast.Name):
        raise NoFix("a `**` splat of an expression: the keys it carries are not visible")
    name = value.id
    unknown = f"the keys of `**{name}` are not all visible here"
    scope = next(  # (a comprehension or lambda in the function reads the function's local)
        (a for a in names.ancestors(call) if isinstance(a, _SCOPES)), None
    )
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        raise NoFix(f"{unknown}: `{name}` is not a local dict of a function")
    arguments = scope.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    if any(a.arg == name for a in every):
        raise NoFix(f"{unknown}: `{name}` is a parameter, built by the callers")
    built: list[tuple[int, frozenset[str]]] = []
    added: set[str] = set()
    removed: set[str] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Global | ast.Nonlocal) and name in node.names:
            raise NoFix(f"{unknown}: `{name}` is declared {type(node).__name__.lower()}")
        if not (isinstance(node, ast.Name) and node.id == name) or node is value:
            continue
        use = _use(names, node)
        if use is None and isinstance(node.ctx, ast.Store):  # (the 81st review's AdvXL:
            raise NoFix(  # `opt_args = dict(weight_decay=wd, **kwargs)` was "a use")
                f"{unknown}: line {node.lineno} binds `{name}` to a value whose keys are not "
                "all literal (a `**` splat, a call, a name)"
            )
        if use is None:
            raise NoFix(f"{unknown}: line {node.lineno} uses `{name}` in a way that may change it")
        kind, keys = use
        if kind == "built":
            built.append((node.lineno, keys))
        elif kind == "added":
            added |= keys
        elif kind == "removed":
            removed |= keys
    if not built:
        raise NoFix(f"{unknown}: `{name}` is not built in this function")
    possible = frozenset(added.union(*(k for _, k in built)))
    before = [k for line, k in built if line < call.lineno]
    certain = frozenset.intersection(*before) - removed if len(before) == len(built) else set()
    return Keys(name, possible, frozenset(certain))


def _use(names: Names, node: ast.Name) -> tuple[str, frozenset[str]] | None:
    """How one occurrence of the dict's name uses it: ("built" | "added" | "removed" | "read",
    the keys), or None where the use may change the dict in a way not read here."""
    parent = names.parent(node)
    if isinstance(node.ctx, ast.Store):
        if isinstance(parent, ast.Assign | ast.AnnAssign) and _targets(parent) == [node]:
            keys = _literal_keys(names, parent.value) if parent.value is not None else None
            return None if keys is None else ("built", keys)
        return None
    if isinstance(parent, ast.Subscript) and parent.value is node:
        key = _key(parent.slice)
        if isinstance(parent.ctx, ast.Load):
            return "read", frozenset()
        if key is None:
            return None
        if isinstance(parent.ctx, ast.Del):
            return "removed", frozenset({key})
        holder = names.parent(parent)
        if isinstance(holder, ast.Assign) and parent in holder.targets:
            return "added", frozenset({key})
        return None
    if isinstance(parent, ast.Attribute) and parent.value is node:
        call = names.parent(parent)
        if not (isinstance(call, ast.Call) and call.func is parent):
            return None
        method = parent.attr
        if method in _READS:
            return "read", frozenset()
        if method == "pop" and call.args and not call.keywords:
            key = _key(call.args[0])
            return None if key is None else ("removed", frozenset({key}))
        if method == "setdefault" and call.args and not call.keywords:
            key = _key(call.args[0])
            return None if key is None else ("added", frozenset({key}))
        if method == "update" and not call.args:
            keys = [k.arg for k in call.keywords]
            return None if None in keys else ("added", frozenset(keys))
        if method == "update" and len(call.args) == 1 and not call.keywords:
            keys = _literal_keys(names, call.args[0])
            return None if keys is None else ("added", keys)
        return None
    if isinstance(parent, ast.keyword) and parent.arg is None:
        return "read", frozenset()  # splatted into another call: the callee gets a copy
    if isinstance(parent, ast.Dict) and node in parent.values:
        index = parent.values.index(node)
        return ("read", frozenset()) if parent.keys[index] is None else None
    if isinstance(parent, ast.Compare) and node in parent.comparators:
        return "read", frozenset()  # `"eps" in opt_args`
    if isinstance(parent, ast.FormattedValue):
        return "read", frozenset()  # f"{opt_args}"
    if isinstance(parent, ast.Call) and node in parent.args and _reader(names, parent.func):
        return "read", frozenset()  # `print("optimizer settings:", opt_args)`
    return None


# Callables that only read their arguments: the builtins that show or copy a value, and a
# logger's methods (`logger.info(opt_args)`; VideoMAE's factory prints the dict).
_READERS = frozenset({"print", "str", "repr", "len", "format", "sorted", "dict", "list", "bool"})
_LOGS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "exception", "log"})


def _reader(names: Names, func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr in _LOGS
    return any(f"builtins.{r}" in names.qualified(func) for r in _READERS)


def _targets(statement: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return statement.targets if isinstance(statement, ast.Assign) else [statement.target]


def _key(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _literal_keys(names: Names, node: ast.expr) -> frozenset[str] | None:
    """The keys of ``{"k": v}`` or ``dict(k=v)`` written out, None for any other value."""
    if isinstance(node, ast.Dict):
        keys = [None if k is None else _key(k) for k in node.keys]
        return None if None in keys else frozenset(keys)
    if (
        isinstance(node, ast.Call)
        and "builtins.dict" in names.qualified(node.func)
        and not node.args
        and all(k.arg is not None for k in node.keywords)
    ):
        return frozenset(k.arg for k in node.keywords)
    return None


def groups_carry(names: Names, call: ast.Call, value: ast.expr | None, key: str) -> bool | None:
    """``value`` is a list of parameter groups each of which sets ``key`` (DLRM's FusedSGD
    takes no ``lr`` because every group has its own): a list of literal dicts, or a local of
    the function built only from such lists and ``.append`` of such dicts. False: a list
    written here holds a group written without it; None: not visible."""
    if isinstance(value, ast.List):
        if all(_sets(names, e, key) for e in value.elts):
            return True
        lacking = (_literal_keys(names, e) for e in value.elts)
        return False if any(k is not None and key not in k for k in lacking) else None
    if not isinstance(value, ast.Name):
        return None
    scope = next((a for a in names.ancestors(call) if isinstance(a, _SCOPES)), None)
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        return None
    arguments = scope.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    if any(a.arg == value.id for a in every):
        return None
    built = False
    for node in ast.walk(scope):
        if isinstance(node, ast.Global | ast.Nonlocal) and value.id in node.names:
            return None
        if not (isinstance(node, ast.Name) and node.id == value.id) or node is value:
            continue
        parent = names.parent(node)
        if isinstance(node.ctx, ast.Store):
            if not (
                isinstance(parent, ast.Assign)
                and parent.targets == [node]
                and isinstance(parent.value, ast.List)
                and all(_sets(names, e, key) for e in parent.value.elts)
            ):
                return None
            built = True
            continue
        if names.exclusive(node, call):
            continue  # (read in the other arm of an `if`: `FusedAdam(groups)` there, 64th review)
        holder = names.parent(parent)
        if not (
            isinstance(parent, ast.Attribute)
            and parent.attr == "append"
            and isinstance(holder, ast.Call)
            and holder.func is parent
            and len(holder.args) == 1
            and not holder.keywords
            and _sets(names, holder.args[0], key)
        ):
            return None
    return built or None


def _sets(names: Names, group: ast.expr, key: str) -> bool:
    keys = _literal_keys(names, group)
    return keys is not None and key in keys
