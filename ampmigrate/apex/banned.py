"""Binary cross entropy under autocast: CUDA autocast refuses it whatever the inputs' dtype,
where apex O1 ran it on float32 inputs (and raised on float16 ones); the rewrite's regions must
not run it, in the file or in the objects and functions they call, one step into the project.
A branch a constant attribute rules out never runs it."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator

from ampmigrate.apex.ondisk import _project_files, _read, _tree_of, module_definition
from ampmigrate.checks import calls_in_autocast
from ampmigrate.engine.names import Names

_BCE = ("torch.nn.functional.binary_cross_entropy", "torch.binary_cross_entropy")


def _banned_in_regions(tree: ast.Module, names: Names) -> tuple[int, str] | None:
    """A call of binary cross entropy (``F.binary_cross_entropy``, a ``torch.nn.BCELoss``
    called, or a name or attribute the module binds to one) inside an enabled autocast region
    (``checks.calls_in_autocast``): CUDA autocast raises there whatever the inputs' dtype.
    (line, as spelled)."""
    losses = {  # `crit = nn.BCELoss().cuda()`, `self.bce = nn.BCELoss()`
        target for target, made in _constructed(tree) if "torch.nn.BCELoss" in names.qualified(made)
    }
    for node in calls_in_autocast(tree, names):
        func = node.func
        if (
            ast.unparse(func) in losses
            or any(q in _BCE for q in names.qualified(func))
            or (isinstance(func, ast.Call) and "torch.nn.BCELoss" in names.qualified(func.func))
        ):
            return node.lineno, ast.unparse(func)
    return None


def _constructed(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """``target = Maker(...)`` (also ``.cuda()``, ``.to(...)``, ``.float()`` on it): the target
    as spelled and what was called to make it."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            value = node.value
            while (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr in ("cuda", "to", "float")
            ):
                value = value.func.value
            if isinstance(value, ast.Call):
                yield ast.unparse(node.targets[0]), value.func


_BCE_TEXT = re.compile(r"\b(?:BCELoss|binary_cross_entropy)\s*\(")
# attributes set by name, which a constant's reading cannot follow
_BY_NAME = re.compile(r"\bsetattr\s*\(|__dict__|\bvars\s*\(")


def _banned_elsewhere(
    tree: ast.Module, names: Names, path: str, code: str
) -> tuple[int, str, str] | None:
    """A call in an enabled autocast region of an object or function whose definition (in
    this file, ``code``, or another module on disk) calls binary cross entropy, or that is
    handed such an object (CSP: `criterion(out, label, center, ...)` runs `center`, a
    `loss_cls()` whose `nn.BCELoss` CUDA autocast refuses; CodeXGLUE: a model whose forward
    computes its loss with `nn.BCELoss`): what ``_banned_in_regions`` finds in the region's
    own lines, followed one step into the project. (line, the call as spelled, where the
    cross entropy is)."""
    cache: dict[str, str | None] = {}
    own = {s.name for s in tree.body if isinstance(s, ast.FunctionDef | ast.ClassDef)}

    def bce(callee: ast.expr) -> str | None:
        if isinstance(callee, ast.Name) and callee.id in own:
            return _bce_in(code, tree, callee.id, path)
        for qualified in sorted(names.qualified(callee)):
            if qualified.startswith(("torch.", "builtins.")) or "<locals>" in qualified:
                continue
            if qualified not in cache:
                located = module_definition(path, qualified)
                cache[qualified] = (
                    _calls_bce(*located)
                    if located is not None and os.path.abspath(located[0]) != os.path.abspath(path)
                    else None
                )
            if cache[qualified] is not None:
                return cache[qualified]
        return None

    # what the file binds to such an object (`center = loss_cls().cuda()` in `main`, handed
    # to the training function under the same name: read by name, wherever it is bound)
    made = {target: where for target, func in _constructed(tree) if (where := bce(func))}
    for call in calls_in_autocast(tree, names):
        spelled = ast.unparse(call.func)
        handed = [ast.unparse(a) for a in call.args if isinstance(a, ast.Name | ast.Attribute)]
        found = next((made[n] for n in (spelled, *handed) if n in made), None) or bce(call.func)
        if found is not None:
            return call.lineno, spelled, found
    return None


def _calls_bce(path: str, definition: ast.FunctionDef | ast.ClassDef) -> str | None:
    """:func:`_bce_in` for a definition of a module on disk (its tree: the one
    ``module_definition`` parsed, kept per version of the file)."""
    try:
        stat = os.stat(path)
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    module = _tree_of(path, stat.st_mtime_ns, stat.st_size)
    if module is None:
        return None
    return _bce_in(text, module, definition.name, path)


def _bce_in(text: str, module: ast.Module, name: str, path: str) -> str | None:
    """Where the module-level class or function ``name`` of the module ``path`` (or one of
    that module that it names, and so on) calls binary cross entropy: "`Name` (file:line)";
    None: nowhere."""
    shown = os.path.basename(path)
    defined = {s.name: s for s in module.body if isinstance(s, ast.FunctionDef | ast.ClassDef)}
    todo, seen = [name], set()
    while todo:
        name = todo.pop()
        node = defined.get(name)
        if node is None or name in seen:
            continue
        seen.add(name)
        segment = ast.get_source_segment(text, node) or ""
        dead = _dead_lines(module, node, text, path) if isinstance(node, ast.ClassDef) else set()
        for match in _BCE_TEXT.finditer(segment):
            line = node.lineno + segment[: match.start()].count(chr(10))
            if line not in dead:
                return f"`{name}` ({shown}:{line})"
        todo += [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in defined]
    return None


def _dead_lines(module: ast.Module, cls: ast.ClassDef, text: str, path: str) -> set[int]:
    """The lines of ``cls`` that cannot run: the branch of an ``if self.<attr> == <constant>:``
    (or ``!=``) that the constant ``__init__`` gives the attribute rules out, where nothing
    else in the module assigns that attribute (HCL's discriminator: ``self.gan_type =
    'lsgan'``, and its ``elif self.gan_type == 'nsgan':`` branch calls binary cross entropy;
    the 69th review), nor sets attributes by name (``setattr``, ``__dict__``, ``vars``), nor
    does any other file of the project (the 70th review's p61-p65)."""
    if _BY_NAME.search(text):
        return set()
    init = next(
        (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
    )
    if init is None or not init.args.args:
        return set()
    me = init.args.args[0].arg
    constants: dict[str, object] = {}
    stores: dict[str, int] = {}
    for node in ast.walk(module):
        targets = (
            node.targets if isinstance(node, ast.Assign)
            else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
        )  # fmt: skip
        for target in targets:
            if isinstance(target, ast.Attribute):
                stores[target.attr] = stores.get(target.attr, 0) + 1
    for statement in init.body:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(target := statement.targets[0], ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == me
            and isinstance(statement.value, ast.Constant)
            and stores.get(target.attr) == 1
        ):
            constants[target.attr] = statement.value.value
    if constants and os.path.isfile(path):  # (a text with no file has no project)
        others = _project_files(path, every_folder=True)
        if others is None:
            return set()
        for other in others:
            if os.path.abspath(other) == os.path.abspath(path):
                continue
            data = _read(other)  # (`x.gan_type = ...`, or the name as a string: `setattr(x,
            # "gan_type", ...)`, a dict that updates `__dict__`)
            if any(
                re.search(rb"\." + re.escape(a.encode()) + rb"\s*(?:[-+*/|&]?=(?!=)|:)", data)
                or re.search(rb"[\"']" + re.escape(a.encode()) + rb"[\"']", data)
                for a in constants
            ):
                return set()
    dead: set[int] = set()
    for node in ast.walk(cls):
        test = node.test if isinstance(node, ast.If) else None
        if not (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq | ast.NotEq)
            and isinstance(test.left, ast.Attribute)
            and isinstance(test.left.value, ast.Name)
            and test.left.value.id == "self"
            and test.left.attr in constants
            and isinstance(test.comparators[0], ast.Constant)
        ):
            continue
        holds = constants[test.left.attr] == test.comparators[0].value
        holds = holds if isinstance(test.ops[0], ast.Eq) else not holds
        branch = node.orelse if holds else node.body
        dead |= {line for s in branch for line in range(s.lineno, (s.end_lineno or s.lineno) + 1)}
    return dead
