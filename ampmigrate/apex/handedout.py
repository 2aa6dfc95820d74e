"""apex's amp module handed to a function of another file of the run: Lightning's
``model.configure_apex(amp, model, optimizers, level)``, a ``prepare(model, optimizer, amp=amp)``
helper. The callee calls apex through its parameter in a file that imports nothing of apex, so
no name resolution (nor the prefilter) reaches it, and ``check`` said nothing there. This project
pass finds the functions whose parameter receives apex's module, has the engine analyse their
files, and reports each use with the calls that hand the module over. The rewrite does not
follow the module there: the callers refuse too (:func:`ampmigrate.apex.verdict.used_as_value`).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampmigrate.apex.linkbase import _listed, shown_among
from ampmigrate.apex.strays import _File, _parsed
from ampmigrate.apex.users import _resolves
from ampmigrate.catalog import Rule
from ampmigrate.engine.names import Names
from ampmigrate.engine.settings import Settings
from ampmigrate.engine.source import Source
from ampmigrate.engine.write import read
from ampmigrate.findings import Finding, Span

PASS = "apex_handed"
Item = tuple[str, bytes, frozenset[str]]
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Handed:
    """The parameter ``parameter`` of the function defined at ``line`` receives apex's module
    from the calls ``calls`` (path, line); ``method``: they call a method of that name on an
    object whose class is not known (they may call another class's)."""

    line: int
    function: str
    parameter: str
    calls: tuple[tuple[str, int], ...]
    method: bool = False


def handed_calls(names: Names) -> Iterator[tuple[ast.Name, ast.Call]]:
    """apex's amp module (``from apex import amp``, ``import apex.amp as amp``) read as an
    argument of a call: positional or keyword."""
    for binding in names.imports():
        stmt, alias = binding.node, binding.alias
        module = stmt.module if isinstance(stmt, ast.ImportFrom) and not stmt.level else None
        if alias is None or not (
            (module == "apex" and alias.name == "amp")
            or (isinstance(stmt, ast.Import) and alias.name == "apex.amp" and alias.asname)
        ):
            continue
        for node in names.spelled(alias.asname or alias.name):
            parent = names.parent(node)
            call = names.parent(parent) if isinstance(parent, ast.keyword) else parent
            if (
                isinstance(node, ast.Name)
                and isinstance(node.ctx, ast.Load)
                and isinstance(call, ast.Call)
                and (node in call.args or parent in call.keywords)
            ):
                yield node, call


def prepare(settings: Settings, candidates: list[Item], paths: Sequence[Path]) -> Any:
    """By the callee's absolute path, the functions that receive apex's module from a call in
    another file (None: no call hands it over, the usual run: nothing else is read)."""
    handing = [(n, s) for n, s, _ in candidates if b"apex" in s and re.search(rb"\bamp\s*[,)]", s)]
    wanted: list[tuple[_File, ast.Name, ast.Call]] = []
    for name, data in handing:
        file = _parsed(name, data)
        if file is not None:
            wanted += [(file, node, call) for node, call in handed_calls(file.names)]
    if not wanted:
        return None
    spelled = {_called(call) for _, _, call in wanted}
    known = {os.path.abspath(n): s for n, s, _ in candidates}
    # by callee: (the function's line and name, the parameter, a method's) -> the calls
    found: dict[str, dict[tuple[int, str, str, bool], set[tuple[str, int]]]] = {}
    for path in map(os.path.abspath, map(str, paths)):
        data = known.get(path)
        if data is None:
            try:
                data = read(Path(path))
            except OSError:
                continue
        if not any(b"def " + s.encode() in data for s in spelled):
            continue
        callee = _parsed(path, data)
        if callee is None:
            continue
        for caller, node, call in wanted:
            if caller.path == path:
                continue  # (the file's own planner sees its functions)
            method = _on_object(caller.names, call)
            for function, parameter in _targets(caller, node, call, callee, method):
                key = (function.lineno, function.name, parameter, method)
                places = found.setdefault(path, {}).setdefault(key, set())
                places.add((shown_among((caller.path, path), caller.path), call.lineno))
    out = {
        path: tuple(
            Handed(line, name, parameter, tuple(sorted(calls)), method)
            for (line, name, parameter, method), calls in sorted(functions.items())
        )
        for path, functions in found.items()
    }
    return out or None


def adopt(found: dict[str, tuple[Handed, ...]]) -> dict[str, frozenset[str]]:
    """The callees' files, analysed for AMP303 though the prefilter dropped them."""
    return {path: frozenset({"AMP303"}) for path in found}


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _targets(
    caller: _File, node: ast.Name, call: ast.Call, callee: _File, on_object: bool
) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """The functions of ``callee`` that ``call`` may run, with the parameter ``node`` fills: a
    module-level function that the caller imports (resolved), or, where ``call`` calls a
    method of an object (``_on_object``), a method of that name (``model.configure_apex``:
    any class's, as the object's class is not known)."""
    name = _called(call)
    qualified = caller.names.qualified(call.func)
    for statement in callee.tree.body:
        if (
            isinstance(statement, _FUNCTIONS)
            and statement.name == name
            and any(_resolves(caller, q, callee, name) for q in qualified)
        ):
            parameter = _parameter(statement, node, call, method=False)
            if parameter:
                yield statement, parameter
        if isinstance(statement, ast.ClassDef) and on_object:
            for method in statement.body:
                if isinstance(method, _FUNCTIONS) and method.name == name:
                    parameter = _parameter(method, node, call, method=True)
                    if parameter:
                        yield method, parameter


def _on_object(names: Names, call: ast.Call) -> bool:
    """``call`` calls a method of an object (``model.configure_apex``, ``self.net.setup``), not
    a function of an imported module."""
    if not isinstance(call.func, ast.Attribute):
        return False
    base = call.func.value
    while isinstance(base, ast.Attribute):
        base = base.value
    return not isinstance(base, ast.Name) or not any(b.is_import for b in names.bindings(base))


def _parameter(
    function: ast.FunctionDef | ast.AsyncFunctionDef, node: ast.Name, call: ast.Call, method: bool
) -> str | None:
    """The parameter of ``function`` that ``node`` (an argument of ``call``) binds."""
    arguments = function.args
    if node in call.args:
        if any(isinstance(a, ast.Starred) for a in call.args[: call.args.index(node)]):
            return None
        static = any(getattr(d, "id", None) == "staticmethod" for d in function.decorator_list)
        skip = 1 if method and not static else 0
        positional = [*arguments.posonlyargs, *arguments.args][skip:]
        index = call.args.index(node)
        return positional[index].arg if index < len(positional) else None
    keyword = next(k.arg for k in call.keywords if k.value is node)
    places = [*arguments.args, *arguments.kwonlyargs]
    return keyword if any(a.arg == keyword for a in places) else None


def check(
    tree: ast.Module, source: Source, rules: list[Rule], handed: tuple[Handed, ...]
) -> list[Finding]:
    """AMP303 at each use of apex's module through a parameter that another file fills."""
    defs = {d.lineno: d for d in ast.walk(tree) if isinstance(d, _FUNCTIONS)}
    problems: list[str] = []
    anchor: ast.AST | None = None
    for item in handed:
        function = defs.get(item.line)
        if function is None or function.name != item.function:
            continue
        if _rebinds(function, item.parameter):
            continue  # (the 73rd review: `amp = FakeAmp()` before its uses)
        uses = list(_uses(function, item.parameter))
        if not uses:
            continue
        anchor = anchor or uses[0]
        callers = _listed([f"{path}:{line}" for path, line in item.calls])
        spelled = _listed(
            [f"`{ast.unparse(u)}`" + (f" (line {u.lineno})" if len(uses) > 1 else "") for u in uses]
        )
        problems.append(
            f"line {uses[0].lineno}: {spelled} call{'s' if len(uses) == 1 else ''} apex amp "
            f"through the parameter "
            f"`{item.parameter}` of `{function.name}`, which {callers} "
            + (
                "may fill with apex's module (a method of that name called on an object, "
                "whose class the tool does not know)"
                if item.method
                else f"fill{'s' if len(item.calls) == 1 else ''} with apex's module"
            )
            + ": the rewrite does not "
            "follow apex's module into a function of another file; migrate it with those "
            "calls by hand (create the GradScaler where they call it and pass it in the "
            "module's place, run the forward under "
            '`torch.amp.autocast("cuda", dtype=torch.float16)` and delete `amp.initialize`)'
        )
    if anchor is None:
        return []
    from ampmigrate.apex.verdict import refusal

    message = refusal(problems)
    where = Span(*source.position(anchor))
    return [Finding(rule.code, message, where) for rule in rules]


def _rebinds(function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str) -> bool:
    """``function`` assigns ``parameter`` anew (its uses may not be apex's)."""
    return any(
        isinstance(n, ast.Name) and n.id == parameter and isinstance(n.ctx, ast.Store | ast.Del)
        for n in ast.walk(function)
    )


def _uses(function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str) -> Iterator[ast.expr]:
    """``parameter.member`` read in ``function`` (not in a nested function or class that binds
    the name anew), in source order."""
    stack: list[ast.AST] = list(reversed(function.body))
    while stack:
        node = stack.pop()
        if isinstance(node, (*_FUNCTIONS, ast.Lambda)) and parameter in {
            a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)
        }:
            continue
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == parameter
            and isinstance(node.ctx, ast.Load)
        ):
            yield node
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
