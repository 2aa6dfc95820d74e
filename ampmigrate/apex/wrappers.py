"""An optimizer wrapper's step (glow-tts's ``commons.Adam``: ``step()`` runs ``self._optim.step()``
and then updates the learning rate), read on ``ast``.

apex patched the step of the optimizer ``amp.initialize`` received, the wrapper's inner one
(``optimizer_g._optim``): on overflow that step did nothing and the wrapper's other work still
ran. ``scaler.step`` must make that call itself, so the wrapper's step is written out where the
training function calls it: ``scaler.step(optimizer_g._optim)``, ``scaler.update()``, then the
rest of the wrapper's body on the same object. Only where that body is provably just that.
"""

from __future__ import annotations

import ast

from ampmigrate.apex.ondisk import module_function
from ampmigrate.engine.names import Names

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def wrapper_step(
    tree: ast.Module, path: str | None, function: str, holder: str, attribute: str
) -> tuple[str, list[str]] | None:
    """For ``holder.step()`` in the module-level function ``function``, where the optimizer
    apex initialized is ``holder.attribute``: the wrapper class as the file names it and the
    statements that follow the inner step in its ``step`` method, on ``holder``. None: the
    class is not one class made in this file, or its ``step`` is not the inner step followed by
    calls of its own methods with literal arguments."""
    names = Names(tree)
    made = _made_as(names, function, holder)
    if made is None:
        return None
    method = _method(names, path, made, "step")
    if method is None:
        return None
    arguments = method.args
    if (
        len(arguments.args) != 1
        or arguments.posonlyargs
        or arguments.kwonlyargs
        or arguments.vararg
        or arguments.kwarg
        or method.decorator_list
    ):
        return None
    this = arguments.args[0].arg
    body = method.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body or not _is_call(body[0], this, f"{attribute}.step"):
        return None
    tail: list[str] = []
    for statement in body[1:]:
        if not (
            isinstance(statement, ast.Expr)
            and isinstance(call := statement.value, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == this
            and call.func.attr != "step"
            and not call.keywords
            and all(isinstance(a, ast.Constant) for a in call.args)
        ):
            return None
        tail.append(f"{holder}.{ast.unparse(call)[len(this) + 1 :]}")
    return made, tail


def _is_call(statement: ast.stmt, this: str, dotted: str) -> bool:
    """``statement`` is ``<this>.<dotted>()`` with no arguments."""
    return (
        isinstance(statement, ast.Expr)
        and isinstance(call := statement.value, ast.Call)
        and not call.args
        and not call.keywords
        and ast.unparse(call.func) == f"{this}.{dotted}"
    )


def _made_as(names: Names, function: str, holder: str) -> str | None:
    """The class that makes ``holder`` as ``function`` sees it, qualified: bound there by one
    ``holder = C(...)``, or a parameter that every call of ``function`` in this file fills with
    a name its caller binds once by ``name = C(...)``, the same ``C`` at every call."""
    defs = [d for d in names.tree.body if isinstance(d, ast.FunctionDef) and d.name == function]
    if len(defs) != 1:
        return None
    [training] = defs
    if _stores(training, holder):
        return _bound_by_call(names, training, holder)
    params = [a.arg for a in training.args.posonlyargs + training.args.args]
    if holder not in params or training.args.vararg:
        return None
    position = params.index(holder)
    found: set[str] = set()
    for node in names.spelled(function):
        if not (isinstance(node, ast.Name) and node.id == function):
            continue
        call = names.parent(node)
        if not (isinstance(call, ast.Call) and call.func is node):
            return None  # handed on as a value: its other callers are unknown
        argument = next((k.value for k in call.keywords if k.arg == holder), None)
        if argument is None and position < len(call.args):
            if any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
                return None
            argument = call.args[position]
        caller = next((a for a in names.ancestors(call) if isinstance(a, _FUNCTIONS)), None)
        made = (
            _bound_by_call(names, caller, argument.id)
            if isinstance(argument, ast.Name) and isinstance(caller, ast.FunctionDef)
            else None
        )
        if made is None:
            return None
        found.add(made)
    return found.pop() if len(found) == 1 else None


def _stores(function: ast.FunctionDef, name: str) -> list[ast.Name]:
    """The bindings of ``name`` in ``function``'s body (not its parameters)."""
    return [
        node
        for node in ast.walk(function)
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load)
    ]


def _bound_by_call(names: Names, function: ast.FunctionDef, name: str) -> str | None:
    """The qualified class ``C`` where ``name`` is bound in ``function`` only by one
    ``name = C(...)`` (not a parameter, a global or any other binding)."""
    if any(a.arg == name for a in ast.walk(function.args) if isinstance(a, ast.arg)):
        return None
    stores = _stores(function, name)
    if any(
        isinstance(n, ast.Global | ast.Nonlocal) and name in n.names for n in ast.walk(function)
    ):
        return None
    assigns = [
        node
        for node in ast.walk(function)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == name
    ]
    if len(stores) != 1 or len(assigns) != 1:
        return None
    value = assigns[0].value
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Name | ast.Attribute):
        return None
    qualified = names.qualified(value.func)
    return next(iter(qualified)) if len(qualified) == 1 else None


def _method(names: Names, path: str | None, made: str, name: str) -> ast.FunctionDef | None:
    """The method ``name`` of the class ``made`` (qualified as this file sees it): a class of
    this file, or one of a module on disk that this file imports."""
    classes = [c for c in names.tree.body if isinstance(c, ast.ClassDef) and c.name == made]
    if len(classes) == 1:
        found = [d for d in classes[0].body if isinstance(d, ast.FunctionDef) and d.name == name]
        return found[0] if len(found) == 1 else None
    if "." not in made or path is None:
        return None
    return module_function(path, f"{made}.{name}")
