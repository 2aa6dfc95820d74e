"""Rules whose logic is code rather than a symbol table (issue: mixed-precision correctness).

A rule names its check in its TOML (``check = "..."``) and lists the names whose spelling the
prefilter must see (``triggers``). Here: AMP202 (``backward()`` under autocast). The TF/Keras checks
live in :mod:`ampmigrate.keras`, the apex rewrite in :mod:`ampmigrate.apex`, the scaler-flow rules
in :mod:`ampmigrate.scalerflow`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ampmigrate.catalog import Rule
from ampmigrate.engine.names import Names
from ampmigrate.engine.source import Source
from ampmigrate.findings import Finding
from ampmigrate.renames import disabled_by_keyword, is_constant

if TYPE_CHECKING:
    from ampmigrate.engine import Settings

AUTOCAST = frozenset(
    {
        "torch.amp.autocast", "torch.autocast", "torch.amp.autocast_mode.autocast",
        "torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast",
        "torch.cpu.amp.autocast", "torch.cpu.amp.autocast_mode.autocast",
    }
)  # fmt: skip
_OLD_SIGNATURE = frozenset(n for n in AUTOCAST if ".cuda." in n or ".cpu." in n)
_MESSAGE = (
    "`backward()` inside an autocast region: backward ops already run in the dtype autocast "
    "chose for their forward ops; leave the `with` block first (PyTorch AMP docs: backward "
    "passes under autocast are not recommended)"
)


def _is_autocast(node: ast.expr, names: Names) -> bool:
    """A call that opens an autocast region that is not literally disabled."""
    if not isinstance(node, ast.Call):
        return False
    found = names.qualified(node.func) & AUTOCAST
    if not found or disabled_by_keyword(node.keywords):
        return False
    positional = [a for a in node.args if not isinstance(a, ast.Starred)]
    if found & _OLD_SIGNATURE and positional:  # the old first parameter is `enabled`
        return not is_constant(positional[0], False)
    return True


def calls_in_autocast(tree: ast.Module, names: Names) -> Iterator[ast.Call]:
    """The calls lexically inside an enabled autocast region (``with`` or decorator).

    A def runs later, outside the region it is written in, unless it is decorated; so does a
    lambda.
    """
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, inside = stack.pop()
        if isinstance(node, ast.With | ast.AsyncWith):
            inside = inside or any(_is_autocast(item.context_expr, names) for item in node.items)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside = any(_is_autocast(d, names) for d in node.decorator_list)
        elif isinstance(node, ast.Lambda):
            inside = False
        elif inside and isinstance(node, ast.Call):
            yield node
        stack.extend((child, inside) for child in ast.iter_child_nodes(node))


def backward_in_autocast(tree: ast.Module, names: Names, rule: Rule) -> list[Finding]:
    """``backward()`` lexically inside an enabled autocast region (``calls_in_autocast``)."""
    findings = []
    for node in calls_in_autocast(tree, names):
        func = node.func
        backward = isinstance(func, ast.Attribute) and func.attr == "backward"
        if backward or "torch.autograd.backward" in names.qualified(func):
            findings.append(Finding(rule.code, _MESSAGE, node, None))
    return findings


# Every code check of this module, by the name rules give in ``check = "..."``.
CHECKS = {"backward-in-autocast": backward_in_autocast}


def check(
    tree: ast.Module,
    source: Source,
    names: Names,
    rules: Sequence[Rule],
    settings: Settings,
) -> list[Finding]:
    """The findings of the code checks among ``rules``."""
    return [f for r in rules if r.check in CHECKS for f in CHECKS[r.check](tree, names, r)]
