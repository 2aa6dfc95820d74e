"""Adding and dropping imports on the text, where that is exactly what libcst's codemod would do.

``fix`` used libcst's ``RemoveImportsVisitor``/``AddImportsVisitor`` for every file it changed:
~0.5 s to import and ~0.2-0.8 s per file (matchers and scope metadata), most of a ``fix`` run.
The common cases are decided here on ``ast`` and done as text edits with libcst's exact result:

- an import to drop whose name occurs nowhere else in the file (no reference, no ``__all__``
  entry, no string annotation: unused by libcst's criteria too), as a whole statement on its own
  line(s) at module level after a simple statement (libcst drops the blank lines above it with
  it; comment lines above it stay, as Ruff's F401 fix keeps them: see ``apply.keep_comments``),
  or as one name of a one-line ``from m import a, b`` spelled the canonical way;
- an import to drop whose name is still used and bound nowhere else: nothing to do;
- an import to add that the top import block already has: nothing to do; one to add after a
  non-empty top import block of one-line statements: the new lines after it, and a blank line
  before the next statement as libcst puts one.

Anything else returns ``None`` and the caller runs libcst's codemod as before.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable

from ampmigrate.findings import ImportEdit

_WORD = r"(?<![\w.]){}(?!\w)"


def _newline(text: str) -> str:
    match = re.search(r"\r\n|\r|\n", text)
    return match.group() if match else "\n"


class _Lines:
    """Line starts of a text, for turning ast line numbers into offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]

    def start(self, line: int) -> int:
        return self.starts[line - 1]

    def end(self, line: int) -> int:
        """Offset after line ``line``'s line break."""
        return self.starts[line] if line < len(self.starts) else len(self.text)


def _alias_name(stmt: ast.Import | ast.ImportFrom, alias: ast.alias) -> str | None:
    """The name an alias binds, or None where the binding is not one plain name."""
    if alias.asname:
        return alias.asname
    if isinstance(stmt, ast.Import) and "." in alias.name:
        return None
    return alias.name


def _matches(stmt: ast.AST, alias: ast.alias, edit: ImportEdit) -> bool:
    if isinstance(stmt, ast.Import):
        return edit.obj is None and alias.name == edit.module and alias.asname == edit.asname
    if isinstance(stmt, ast.ImportFrom):
        return (
            not stmt.level
            and stmt.module == edit.module
            and alias.name == edit.obj
            and alias.asname == edit.asname
        )
    return False


def _one_line(stmt: ast.stmt, tree: ast.Module, lines: _Lines) -> bool:
    """``stmt`` alone on its line(s): nothing else starts or ends there (no ``;``)."""
    for other in tree.body:
        if other is not stmt and (
            other.lineno <= stmt.end_lineno and other.end_lineno >= stmt.lineno
        ):
            return False
    return True


def _canonical(stmt: ast.ImportFrom, names: list[ast.alias]) -> str:
    rendered = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in names)
    return f"from {stmt.module} import {rendered}"


def _bindings(tree: ast.Module, name: str) -> int:
    """How many places bind ``name`` anywhere in the file (any scope)."""
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            count += 1
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            count += node.name == name
        elif isinstance(node, ast.arg):
            count += node.arg == name
        elif isinstance(node, ast.alias):
            count += (node.asname or node.name.partition(".")[0]) == name
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar):
            count += node.name == name
        elif isinstance(node, ast.Global | ast.Nonlocal):
            count += name in node.names
    return count


_STRING_READERS = ("cast", "TypeVar", "NewType", "ForwardRef")


def _string_uses(tree: ast.Module, name: str) -> bool:
    """A string that names ``name`` where a string is code: an annotation (``x: "amp.Foo"``),
    ``__all__``, or an argument of ``typing.cast`` / ``TypeVar`` / ``NewType`` /
    ``ForwardRef``."""
    word = re.compile(_WORD.format(re.escape(name)))
    holders: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            holders.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            holders.append(node.returns)
        elif isinstance(node, ast.Assign | ast.AugAssign) and any(
            isinstance(t, ast.Name) and t.id == "__all__"
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        ):
            holders.append(node.value)
        elif isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in _STRING_READERS:
                holders.append(node)
    return any(
        isinstance(n, ast.Constant) and isinstance(n.value, str) and word.search(n.value)
        for holder in holders
        for n in ast.walk(holder)
    )


def remove_unused(text: str, edits: Iterable[ImportEdit]) -> str | None:
    """``text`` without the imports of ``edits`` that are unused; None: libcst must decide."""
    edits = list(edits)
    if not edits:
        return text
    tree = ast.parse(text)
    lines = _Lines(text)
    drop: dict[ast.stmt, list[ast.alias]] = {}
    guards = _import_guards(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for alias in node.names:
            if not any(_matches(node, alias, e) for e in edits):
                continue
            name = _alias_name(node, alias)
            if name is None:
                return None
            # a `try:` of imports only goes with its last import: its handlers (a fallback
            # binding of the same name) are no use of it
            region = guards.get(node, node)
            start = lines.start(region.lineno)
            outside = text[:start] + text[lines.end(region.end_lineno) :]
            if not re.search(_WORD.format(re.escape(name)), outside):
                drop.setdefault(node, []).append(alias)
                continue
            used = any(
                isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                for n in ast.walk(tree)
            )
            bound = _bindings(tree, name)
            if not used and bound == 1 and not _string_uses(tree, name):
                # mentioned only in comments or plain strings (`"--amp"`, the 75th review:
                # libcst's own removal kept the emptied `try` around a flag)
                drop.setdefault(node, []).append(alias)
                continue
            if not used or bound != 1:
                return None  # a mention libcst might not count as a use, or another binding
    cuts: list[tuple[int, int, str]] = []
    emptied: dict[ast.Try, list[ast.stmt]] = {}
    for stmt, aliases in drop.items():
        guard = _parent_try(tree, stmt)
        if guard is not None and len(aliases) == len(stmt.names):
            if not _alone(stmt, guard.body, lines):
                return None
            emptied.setdefault(guard, []).append(stmt)
            continue
        if stmt not in tree.body or not _one_line(stmt, tree, lines):
            return None
        index = tree.body.index(stmt)
        if len(aliases) == len(stmt.names):
            previous = tree.body[index - 1] if index else None
            if previous is None or not isinstance(previous, _SIMPLE):
                return None  # the module header or a block's footer: libcst's own rules
            above = range(previous.end_lineno + 1, stmt.lineno)
            if any(
                text[lines.start(n) : lines.end(n)].lstrip(" \t").startswith("#") for n in above
            ):
                # comment lines above it are the user's: only the statement's own lines go
                cuts.append((lines.start(stmt.lineno), lines.end(stmt.end_lineno), ""))
            else:
                cuts.append((lines.end(previous.end_lineno), lines.end(stmt.end_lineno), ""))
            continue
        if stmt.lineno != stmt.end_lineno or not isinstance(stmt, ast.ImportFrom):
            return None
        start, end = lines.start(stmt.lineno), lines.end(stmt.lineno)
        line = text[start:end].rstrip("\r\n")
        head = line[: len(line) - len(line.lstrip())]
        if line != head + _canonical(stmt, stmt.names):
            return None
        kept = [a for a in stmt.names if a not in aliases]
        cuts.append((start, start + len(line), head + _canonical(stmt, kept)))
    for guard, dropped in emptied.items():
        if any(s not in dropped for s in guard.body):
            dissolved = _dissolved(guard, dropped, lines)
            if dissolved is not None:  # nothing left that can raise what its handlers catch
                cuts.append((lines.start(guard.lineno), lines.end(guard.end_lineno), dissolved))
                continue
            # the try keeps a body: only the imports' own lines go (comments above stay)
            cuts += [(lines.start(s.lineno), lines.end(s.end_lineno), "") for s in dropped]
            continue
        if guard.orelse or guard.finalbody or not _alone(guard, None, lines):
            return None  # libcst's rules
        # Nothing left to guard: the try goes with its handlers (they can no longer run);
        # the comment lines of its body stay, at the try's indentation.
        indent = _indent(text, lines, guard.lineno)
        body_end = guard.handlers[0].lineno if guard.handlers else guard.end_lineno + 1
        kept = [
            indent + text[lines.start(n) : lines.end(n)].lstrip(" \t")
            for n in range(guard.lineno + 1, body_end)
            if text[lines.start(n) : lines.end(n)].lstrip(" \t").startswith("#")
        ]
        end = guard.end_lineno
        if not kept and _opens_block(tree, guard):  # (no blank first line in the block)
            while (
                end + 1 < len(lines.starts)
                and not text[lines.start(end + 1) : lines.end(end + 1)].strip()
            ):
                end += 1
        cuts.append((lines.start(guard.lineno), lines.end(end), "".join(kept)))
    for start, end, new in sorted(cuts, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _dissolved(guard: ast.Try, dropped: list[ast.stmt], lines: _Lines) -> str | None:
    """The text of ``guard``'s body without ``dropped``, one level out, where its handlers
    only catch ImportError and nothing left in the body can raise it: no import and no call
    but torch's own constructors (MPNet's ``try: return FusedLayerNorm(...) except
    ImportError: pass`` once that is ``torch.nn.LayerNorm(...)``, the 72nd review: a dead
    ``except`` was left). None: the try stays."""
    kept = [s for s in guard.body if s not in dropped]
    if guard.orelse or guard.finalbody or not _alone(guard, None, lines):
        return None
    if not all(_catches_import_error(h) for h in guard.handlers):
        return None
    if any(isinstance(n, ast.Global | ast.Nonlocal) for h in guard.handlers for n in ast.walk(h)):
        return None  # (a declaration for the whole function: the 73rd review's UnboundLocalError)
    for node in (n for s in kept for n in ast.walk(s)):
        if isinstance(node, ast.Import | ast.ImportFrom | ast.Lambda | ast.FunctionDef):
            return None
        if isinstance(node, ast.Call) and not ast.unparse(node.func).startswith("torch."):
            return None
    text = lines.text
    outer = _indent(text, lines, guard.lineno)
    inner = _indent(text, lines, kept[0].lineno)
    out = []
    for number in range(guard.lineno + 1, guard.handlers[0].lineno):
        if any(s.lineno <= number <= s.end_lineno for s in dropped):
            continue
        line = text[lines.start(number) : lines.end(number)]
        if line.strip() and not line.startswith(inner):
            return None  # (a continuation line left of the body: left as it is)
        out.append(outer + line[len(inner) :] if line.strip() else line)
    return "".join(out)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return bool(names) and all(
        isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names
    )


def _opens_block(tree: ast.Module, stmt: ast.stmt) -> bool:
    """``stmt`` is the first statement of a compound statement's block (an ``if``'s body)."""
    return any(
        isinstance(body, list) and body and body[0] is stmt
        for node in ast.walk(tree)
        if not isinstance(node, ast.Module)
        for field in ("body", "orelse", "finalbody")
        if (body := getattr(node, field, None)) is not None
    )


def _import_guards(tree: ast.Module) -> dict[ast.stmt, ast.Try]:
    """Import statements of a ``try:`` whose body is imports only -> that try."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and all(
            isinstance(s, ast.Import | ast.ImportFrom) for s in node.body
        ):
            out.update((s, node) for s in node.body)
    return out


def _parent_try(tree: ast.Module, stmt: ast.stmt) -> ast.Try | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(s is stmt for s in node.body):
            return node
    return None


def _alone(stmt: ast.stmt, siblings: list[ast.stmt] | None, lines: _Lines) -> bool:
    """Nothing but space before ``stmt`` on its first line, and no sibling statement shares
    its lines (``a; b``)."""
    text = lines.text
    if text[lines.start(stmt.lineno) : lines.start(stmt.lineno) + stmt.col_offset].strip():
        return False  # `try: import x`
    return not any(
        other is not stmt and other.lineno <= stmt.end_lineno and other.end_lineno >= stmt.lineno
        for other in siblings or ()
    )


def _indent(text: str, lines: _Lines, line: int) -> str:
    start = lines.start(line)
    content = text[start : lines.end(line)]
    return content[: len(content) - len(content.lstrip(" \t"))]


_SIMPLE = (
    ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Import, ast.ImportFrom, ast.Pass,
    ast.Global, ast.Nonlocal, ast.Delete, ast.Assert, ast.Raise, ast.Return, ast.Break,
    ast.Continue,
)  # fmt: skip


def _top_block(tree: ast.Module) -> tuple[int, list[ast.stmt]]:
    """(index of the first statement after the docstring / ``__strict__`` flag, the import
    statements that follow it up to the first other statement), as libcst's AddImportsVisitor
    splits a module."""
    body = tree.body
    skip = 0
    if body and (
        (
            isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        )
        or (
            isinstance(body[0], ast.Assign)
            and [getattr(t, "id", None) for t in body[0].targets] == ["__strict__"]
        )
    ):
        skip = 1
    block = []
    for stmt in body[skip:]:
        if not isinstance(stmt, ast.Import | ast.ImportFrom):
            break
        block.append(stmt)
    return skip, block


def reads(text: str, name: str) -> bool:
    """``text`` loads the name ``name`` somewhere (an import it needs)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return True
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(tree))


def add_needed(text: str, names: Iterable[str]) -> str | None:
    """``text`` with the imports ``names`` ("module" or "module:obj") the top import block lacks;
    None: libcst must do it."""
    names = sorted(set(names))
    if not names:
        return text
    tree = ast.parse(text)
    lines = _Lines(text)
    skip, block = _top_block(tree)
    modules = {a.name for s in block if isinstance(s, ast.Import) for a in s.names if not a.asname}
    modules |= imported_below_the_top(text, tree)
    objects: dict[str, set[str]] = {}
    for stmt in block:
        if isinstance(stmt, ast.ImportFrom) and not stmt.level:
            objects.setdefault(stmt.module, set()).update(
                a.name for a in stmt.names if not a.asname
            )
    new_modules, new_objects = [], {}
    for name in names:
        module, _, obj = name.partition(":")
        if not obj and module not in modules:
            new_modules.append(module)
        elif obj and not objects.get(module, set()) & {obj, "*"}:
            if module in objects:
                return None  # libcst extends that statement
            new_objects.setdefault(module, []).append(obj)
    if not new_modules and not new_objects:
        return text
    if not block or any(not _one_line(s, tree, lines) for s in block):
        return None
    if "__future__" in new_objects:
        return None
    newline = _newline(text)
    inserts: list[tuple[int, str]] = []
    for module in [m for m in new_modules if _stdlib(m)]:
        place = _stdlib_place(block, module, lines)
        if place is not None:
            new_modules.remove(module)
            inserts.append((place[0], f"import {module}{newline}" + newline * place[1]))
    if not new_modules and not new_objects:
        return _insert(text, inserts)
    added = "".join(f"import {m}{newline}" for m in new_modules)
    added += "".join(
        f"from {m} import {', '.join(sorted(objs))}{newline}"
        for m, objs in sorted(new_objects.items())
    )
    at = lines.end(block[-1].end_lineno)
    if at == len(text) and not text.endswith(("\n", "\r")):
        return None
    after = tree.body[skip + len(block)] if len(tree.body) > skip + len(block) else None
    if after is not None:
        between = text[at : lines.start(_first_line(after))]
        if not between or between.lstrip(" \t").startswith("#"):
            added += newline  # libcst: an empty line before the first statement after imports
    return _insert(text, [*inserts, (at, added)])


def _insert(text: str, inserts: list[tuple[int, str]]) -> str:
    for at, added in sorted(inserts, key=lambda i: i[0], reverse=True):
        text = text[:at] + added + text[at:]
    return text


def _top(stmt: ast.Import | ast.ImportFrom) -> str:
    """The top-level package a statement imports from ("." for a relative import)."""
    if isinstance(stmt, ast.ImportFrom):
        return "." if stmt.level else (stmt.module or "").partition(".")[0]
    return stmt.names[0].name.partition(".")[0]


def _stdlib(module: str) -> bool:
    return module.partition(".")[0] in sys.stdlib_module_names


def _stdlib_place(block: list[ast.stmt], module: str, lines: _Lines) -> tuple[int, bool] | None:
    """Where ``import <module>`` (a standard library module) goes in the top import block, as
    isort sorts it: among the block's standard library imports (alphabetically among their
    ``import x`` lines), or before the first third-party / first-party one as a section of its
    own (then True: a blank line follows it). None: the block has no such place (it is empty
    or only standard library, so the end is right)."""
    imports = [s for s in block if isinstance(s, ast.Import | ast.ImportFrom)]
    body = [s for s in imports if _top(s) != "__future__"]
    std = [s for s in body if _top(s) != "." and _stdlib(_top(s))]
    if not body or len(std) == len(body):
        return None
    if not std:
        return lines.start(body[0].lineno), True
    for stmt in std:
        if isinstance(stmt, ast.Import) and stmt.names[0].name > module:
            return lines.start(stmt.lineno), False
    return lines.end(std[-1].end_lineno), False


def imported_below_the_top(text: str, tree: ast.Module | None = None) -> set[str]:
    """Modules a module-level ``import m`` below the top import block binds before any
    module-level code reads ``m`` (``import sys; sys.path.insert(...); import torch``): libcst's
    import manager looks at the top block only, and would import them again there."""
    tree = ast.parse(text) if tree is None else tree
    skip, block = _top_block(tree)
    found: set[str] = set()
    read: set[str] = set()
    for stmt in tree.body[skip + len(block) :]:
        if isinstance(stmt, ast.Import):
            found |= {
                a.name for a in stmt.names if not a.asname and a.name.split(".")[0] not in read
            }
            continue
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            break  # what runs later is not ordered by its position any more
        read |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    return found


def bound_by_submodule_imports(text: str) -> set[str]:
    """Packages that a module-level ``import torch.nn`` (no ``as``) of the top import block
    binds: ``torch`` is bound, and an added ``import torch`` would only repeat it (the 57th
    review; libcst's import manager adds it)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    _, block = _top_block(tree)
    return {
        a.name.partition(".")[0]
        for s in block
        if isinstance(s, ast.Import)
        for a in s.names
        if not a.asname and "." in a.name
    }


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None)
    return min([stmt.lineno] + [d.lineno for d in decorators or ()])
