"""A plain backward that a called function runs (the 62nd review's q18/d08: `aux_backward(aux)`
between the scaled backward and the step): its gradients join the scaled ones, and
``scaler.step`` would divide them by the scale, where apex had unscaled before they were added.
Read on ``ast``: the function called, and the module-level functions of its file that it calls.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


@dataclass(frozen=True)
class HiddenBackward:
    """The plain backward a call runs: its text, line, and the file it is in (None: this one)."""

    code: str
    line: int
    path: str | None
    # the parameters of the called function whose `.zero_grad()` always follows the backward
    # in its block (ANCE's `evaluate_dev`: `loss.backward()`, then `model.zero_grad()`, the
    # 66th review): those gradients never reach a step
    cleared: tuple[str, ...] = ()


def plain_backward(
    function: ast.FunctionDef | ast.Lambda, tree: ast.Module | None, path: str | None
) -> HiddenBackward | None:
    """The first plain ``x.backward()`` (or ``torch.autograd.backward``) that ``function`` runs,
    itself or through the module-level functions of ``tree`` it calls by name. None where it
    runs none, and where it uses apex's ``scale_loss`` or steps an optimizer itself: a
    function that scales is the rewrite's own to plan, one that steps trains on its own."""
    return _first(function, tree, path, steps=False)


def touches_gradients(
    function: ast.FunctionDef | ast.Lambda, tree: ast.Module | None, path: str | None
) -> HiddenBackward | None:
    """The first plain backward or optimizer step (``x.step()``, an LR scheduler's aside)
    that ``function`` runs, itself or through the module-level functions of ``tree`` it
    calls: between a scaled backward and its step, apex had unscaled the gradients both
    see (the 65th review's h17: a helper that steps its own optimizer over shared parameters).
    None where it runs neither, or uses apex's ``scale_loss`` (the rewrite's own to plan)."""
    return _first(function, tree, path, steps=True)


def top_level(
    tree: ast.Module, name: str, besides: ast.AST | None = None
) -> ast.FunctionDef | None:
    """The one module-level function of ``tree`` named ``name``, ``besides`` aside (None:
    none, or several)."""
    found = [
        s
        for s in tree.body
        if isinstance(s, ast.FunctionDef) and s.name == name and s is not besides
    ]
    return found[0] if len(found) == 1 else None


def _first(
    function: ast.FunctionDef | ast.Lambda,
    tree: ast.Module | None,
    path: str | None,
    steps: bool,
    depth: int = 0,
) -> HiddenBackward | None:
    """:func:`touches_gradients` where ``steps``, else :func:`plain_backward` (which also
    gives up on a function that steps)."""
    nodes = list(ast.walk(function))
    given_up = ("scale_loss",) if steps else ("scale_loss", "step")
    if any(isinstance(n, ast.Attribute) and n.attr in given_up for n in nodes):
        return None
    for node in nodes:
        if not isinstance(node, ast.Call):
            continue
        if _plain(node) or (steps and _steps(node)):
            cleared = _cleared_after(function, node) if depth == 0 and not steps else ()
            return HiddenBackward(ast.unparse(node), node.lineno, path, cleared)
        if depth < 2 and tree is not None and isinstance(node.func, ast.Name):
            called = top_level(tree, node.func.id, function)
            if called is not None:
                found = _first(called, tree, path, steps, depth + 1)
                if found is not None:
                    return found
    return None


def _steps(call: ast.Call) -> bool:
    """``x.step()`` of something named for an optimizer (see :func:`optimizer_named`)."""
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "step"
        and optimizer_named(ast.unparse(func.value))
    )


def optimizer_named(receiver: str) -> bool:
    """``receiver`` (``aux_opt``, ``self.optimizer_d``, ``optim``) is named for an optimizer:
    not a logger's or a scheduler's ``step()`` (``TB_LOGGER.step()``, UNITER)."""
    last = receiver.rpartition(".")[2].lower()
    if any(word in last for word in ("sched", "lr", "warmup", "scaler")):
        return False
    return "optim" in last or last.startswith("opt") or last.endswith("opt")


def _plain(call: ast.Call) -> bool:
    """``x.backward(...)`` through no ``scaler.scale(...)``, or ``torch.autograd.backward``."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr == "backward"):
        return False
    receiver = func.value
    scaled = (
        isinstance(receiver, ast.Call)
        and isinstance(receiver.func, ast.Attribute)
        and receiver.func.attr == "scale"
    )
    return not scaled


def _cleared_after(function: ast.FunctionDef | ast.Lambda, call: ast.Call) -> tuple[str, ...]:
    """The parameters of ``function`` whose ``.zero_grad()`` follows the statement of
    ``call`` in its block, with nothing between that could leave the block."""
    if isinstance(function, ast.Lambda):
        return ()
    params = {a.arg for a in (*function.args.posonlyargs, *function.args.args)}
    for block in _blocks(function):
        at = next((i for i, s in enumerate(block) if isinstance(s, ast.Expr) and s.value is call),
                  None)  # fmt: skip
        if at is None:
            continue
        cleared = []
        for statement in block[at + 1 :]:
            if isinstance(statement, ast.Return | ast.Break | ast.Continue | ast.Raise):
                break
            value = statement.value if isinstance(statement, ast.Expr) else None
            if (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr == "zero_grad"
                and isinstance(value.func.value, ast.Name)
                and value.func.value.id in params
            ):
                cleared.append(value.func.value.id)
        return tuple(cleared)
    return ()


def _blocks(function: ast.FunctionDef) -> list[list[ast.stmt]]:
    """Every statement list in ``function`` (bodies, ``else`` and ``finally`` arms)."""
    return [
        block
        for node in ast.walk(function)
        for name in ("body", "orelse", "finalbody")
        if isinstance(block := getattr(node, name, None), list)
        and all(isinstance(s, ast.stmt) for s in block)
    ]
