"""The functions of a file that call apex amp on what they are given (a training function
that scales, a helper that only scales and leaves the step to its caller): the callee side of
a link."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ampmigrate.apex.linkbase import Delegated
from ampmigrate.apex.strays import _File, _function

_LINKED = {"scale_loss", "master_params", "state_dict", "load_state_dict"}


def _linked_functions(file: _File) -> tuple[list[ast.FunctionDef], ast.FunctionDef | None]:
    """The module-level functions holding every apex call of a file without ``initialize``, and
    the one that scales the loss (every ``master_params`` with it), if any: the rewrite adds a
    parameter to each, whose every caller the pre-pass checks. ([], None): not such a file."""
    if "initialize" in file.members or set(file.members) - _LINKED:
        return [], None
    homes = {_function(file, c) for calls in file.members.values() for c in calls}
    if not all(isinstance(h, ast.FunctionDef) and h in file.tree.body for h in homes):
        return [], None
    scaling = {_function(file, c) for c in file.members.get("scale_loss", [])}
    reading = {_function(file, c) for c in file.members.get("master_params", [])}
    if len(scaling) > 1 or not reading <= scaling:
        return [], None
    trains = scaling.pop() if scaling else None
    return sorted(homes, key=lambda f: f.lineno), trains


def delegated(file: _File, trains: ast.FunctionDef | None) -> Delegated | None:
    """``trains`` only backpropagates a loss it is given, scaled for an optimizer it is given,
    and leaves the step to its caller: its calls are scaled backwards (``Link.delegated``).
    Strict, since the caller plans around a body it cannot see: no call in it but apex's
    ``scale_loss`` and ``.backward()``, the optimizer never rebound or stepped, no
    ``master_params`` in the file, and the loss and optimizer plain parameters."""
    if trains is None or "master_params" in file.members:
        return None
    params = [a.arg for a in (*trains.args.posonlyargs, *trains.args.args)]
    where = {p: i for i, p in enumerate(params)} | {a.arg: -1 for a in trains.args.kwonlyargs}
    scaled = file.members.get("scale_loss", [])
    given = {
        (ast.unparse(a), ast.unparse(o))
        for c in scaled
        if (a := _argument_of(c, "loss", 0)) is not None
        and (o := _argument_of(c, "optimizers", 1)) is not None
    }
    if len(given) != 1:
        return None
    loss, optimizer = given.pop()
    if loss not in where or optimizer not in where:
        return None
    for node in ast.walk(trains):
        if isinstance(node, ast.Call):
            if node in scaled or (
                isinstance(node.func, ast.Attribute) and node.func.attr == "backward"
            ):
                continue
            return None
        if (
            isinstance(node, ast.Name)
            and node.id == optimizer
            and not isinstance(node.ctx, ast.Load)
        ):
            return None
        nested = isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef
        )
        if (nested and node is not trains) or isinstance(
            node, ast.Yield | ast.YieldFrom | ast.Global | ast.Nonlocal
        ):
            return None
    switch = []
    for node in ast.walk(trains):
        for term in _leaves(node.test) if isinstance(node, ast.If | ast.IfExp) else ():
            root = term
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in where:
                switch.append((ast.unparse(term), root.id, where[root.id]))
    named = [*trains.args.posonlyargs, *trains.args.args]
    defaults = dict(zip([a.arg for a in named[len(named) - len(trains.args.defaults) :]],
                        trains.args.defaults, strict=True))  # fmt: skip
    defaults |= {a.arg: d for a, d in zip(trains.args.kwonlyargs, trains.args.kw_defaults,
                                          strict=True) if d is not None}  # fmt: skip
    return Delegated(
        (loss, where[loss]),
        (optimizer, where[optimizer]),
        _backs_always(trains.body),
        tuple(dict.fromkeys(switch)),
        tuple((p, ast.unparse(defaults[p])) for _, p, _ in switch if p in defaults),
    )


def _leaves(test: ast.expr) -> Iterator[ast.expr]:
    """The operands of a test's ``and`` and ``or`` (not those under a ``not``: where a caller
    gave them the switch, the helper would scale nothing; the 62nd review's d05)."""
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from _leaves(value)
    elif not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
        yield test


def _argument_of(call: ast.Call, keyword: str, index: int) -> ast.expr | None:
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    keywords = {k.arg: k.value for k in call.keywords}
    return keywords.get(keyword, call.args[index] if len(call.args) > index else None)


def _backs_always(body: list[ast.stmt]) -> bool:
    """A statement of ``body`` backpropagates on every path through it, none leaving before
    (a ``raise`` leaves for the caller's step too)."""
    for statement in body:
        if _backs(statement):
            return True
        if any(isinstance(n, ast.Return | ast.Break | ast.Continue) for n in ast.walk(statement)):
            return False
    return False


def _backs(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Expr):
        call = statement.value
        return (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "backward"
        )
    if isinstance(statement, ast.With):
        return _backs_always(statement.body)
    if isinstance(statement, ast.If):
        return _backs_always(statement.body) and _backs_always(statement.orelse)
    return isinstance(statement, ast.Raise)
