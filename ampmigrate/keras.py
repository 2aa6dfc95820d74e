"""TensorFlow/Keras mixed precision: moved names (data) and the Keras 3 optimizer changes (code).

Moved names are rewritten where they are spelled: ``tf.keras.mixed_precision.experimental.X``
keeps its ``tf.`` and loses ``.experimental``; a name bound by importing the old module or the old
symbol itself gets a from-import of the new place instead, and the old import goes once unused.

Loss-scale arguments and the Keras 3 LossScaleOptimizer differ by target (``target-keras``):
what a fix writes for Keras 2 (tf-keras) raises on Keras 3 and the other way round (reference:
tf-keras-mixed-precision.md, rows 7 and 21).

Analysis runs on stdlib ``ast`` in one source-ordered walk shared by every check (the checks
that remember what they saw, such as imported aliases or a scaled loss, depend on that order);
fixes are text edits on the original source (:class:`ampmigrate.findings.Edit`).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ampmigrate.catalog import KERAS_ROOTS, PathRename, Rule
from ampmigrate.engine.names import Names, dotted
from ampmigrate.engine.source import Source
from ampmigrate.findings import Edit, Finding, Fix, ImportEdit, Span

if TYPE_CHECKING:
    from ampmigrate.engine import Settings

LOSS_SCALE_OPTIMIZERS = frozenset(
    f"{root}.{path}"
    for root in KERAS_ROOTS
    for path in (
        "mixed_precision.LossScaleOptimizer",
        "optimizers.LossScaleOptimizer",
        "mixed_precision.experimental.LossScaleOptimizer",
        "mixed_precision.loss_scale_optimizer.LossScaleOptimizer",
    )
)
_DYNAMIC = frozenset({"DynamicLossScale"})
_FIXED = frozenset({"FixedLossScale"})
_LOSS_SCALE_MODULES = (
    "tensorflow.train.experimental.",
    "tensorflow.mixed_precision.experimental.",
    "tensorflow.compat.v1.train.experimental.",
    "tensorflow.compat.v1.mixed_precision.",
    "tensorflow.compat.v1.mixed_precision.experimental.",
)
GRADIENT_PROCESSING = frozenset(
    f"tensorflow.{name}"
    for name in (
        "clip_by_global_norm", "clip_by_norm", "clip_by_value", "linalg.global_norm",
        "math.reduce_euclidean_norm", "norm", "linalg.norm",
    )
)  # fmt: skip
# Keyword arguments the Keras 3 wrapper refuses: "set it on the inner_optimizer".
_INNER_ONLY = ("clipnorm", "global_clipnorm", "clipvalue", "weight_decay", "use_ema")
_NAME = re.compile(r"[^\W\d]\w*(?:\s*\.\s*[^\W\d]\w*)*")  # a dotted name as written
_FROM = re.compile(r"from(?:\s|\\\r?\n)+")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


# Members of the experimental Policy that the stable Policy (Keras 3 and tf-keras) lacks.
_EXPERIMENTAL_ONLY = {
    "loss_scale": "a policy no longer carries a loss scale; it lives on the LossScaleOptimizer",
}


class NoFix(Exception):
    """Raised while building a fix to say why there is none; the text joins the message."""


def _shown(name: str) -> str:
    """Names as users write them: ``tf.keras...`` rather than ``tensorflow.keras...``."""
    return "tf." + name.removeprefix("tensorflow.") if name.startswith("tensorflow.") else name


def _root_name(node: ast.expr) -> ast.Name | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _is_const(node: ast.expr | None, value: bool) -> bool:
    """``True``/``False`` written literally (libcst's ``Name("True")``)."""
    return isinstance(node, ast.Constant) and node.value is value


# -- source text of calls and strings ----------------------------------------------------------


def _string_tokens(text: str) -> list[tuple[int, str, int, int, int, int]] | None:
    """The tokens of an expression's text as (type, string, row, col, end row, end col), rows
    from 1 and columns as in ``text``; None when it does not tokenize. The text is tokenized
    in parentheses, so that its later lines are no indentation."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(f"({text})").readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    skip = (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.COMMENT)
    inside = [t for t in tokens if t.type not in skip][1:-1]  # without our parentheses
    return [
        (t.type, t.string, t.start[0], t.start[1] - (t.start[0] == 1),
         t.end[0], t.end[1] - (t.end[0] == 1))
        for t in inside
    ]  # fmt: skip


def _single_string(source: Source, node: ast.Constant) -> tuple[str, str] | None:
    """(prefix, quote) when ``node`` is one string literal, not an implicit concatenation."""
    text = source.segment(node)
    tokens = _string_tokens(text)
    if not tokens or len(tokens) != 1 or tokens[0][0] != tokenize.STRING:
        return None
    match = re.match(r"([A-Za-z]*)('''|\"\"\"|'|\")", text)
    return (match.group(1), match.group(2)) if match else None


def _literal(source: Source, node: ast.expr) -> object:
    """The value of a string or number literal (with a sign), else a sentinel."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, str | bytes):
            return value if _single_string(source, node) else _literal
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        return _literal
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal(source, node.operand)
        return -inner if isinstance(inner, int | float) else _literal
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, exp = _literal(source, node.left), _literal(source, node.right)
        if isinstance(base, int) and isinstance(exp, int) and 0 <= exp < 64:
            return base**exp
    return _literal  # not a literal


def _skip_space(text: str, i: int, step: int, limit: int) -> int:
    """The first index from ``i`` (moving by ``step``, not past ``limit``) that is not space."""
    while (i < limit if step > 0 else i > limit) and text[i] in " \t\r\n\f\\":
        i += step
    return i


@dataclass(eq=False)
class _Arg:
    """One argument of a call as libcst split it: its text, the comma after it (with the space
    around it) and, for a last argument without a comma, the space before the parenthesis."""

    text: str
    value: str  # the value's text, with its own parentheses
    node: ast.AST | None = None  # the value node (None for an inserted argument)
    keyword: str | None = None
    star: bool = False
    comma: str | None = None
    space_after: str = ""
    start: int = 0
    end: int = 0
    value_start: int = 0


class _Call:
    """A call's arguments in source order, and where its parentheses are."""

    def __init__(self, source: Source, call: ast.Call) -> None:
        text = source.text
        self.source = source
        self.start, self.end = source.span(call)
        self.close = self.end - 1  # ast's call ends after its ")"
        i = source.span(call.func)[1]
        while text[i] != "(":  # past the callee's own closing parentheses
            i += 1
        self.open = i
        self.func_end = _skip_space(text, i - 1, -1, self.start) + 1
        items: list[_Arg] = []
        for node in [*call.args, *call.keywords]:
            start, end = source.span(node)
            if isinstance(node, ast.keyword):
                value_start = start
                if node.arg is not None:  # after `name =`
                    value_start = _skip_space(text, text.index("=", start) + 1, 1, end)
                items.append(
                    _Arg(text[start:end], text[value_start:end], node.value, node.arg,
                         node.arg is None, start=start, end=end, value_start=value_start)
                )  # fmt: skip
                continue
            while True:  # the value's own parentheses belong to it
                before = _skip_space(text, start - 1, -1, self.open)
                after = _skip_space(text, end, 1, self.close)
                if before > self.open and text[before] == "(" and text[after] == ")":
                    start, end = before, after + 1
                else:
                    break
            star = isinstance(node, ast.Starred)
            value = node.value if star else node
            items.append(
                _Arg(text[start:end], text[start:end], value, None, star, start=start, end=end,
                     value_start=start)
            )  # fmt: skip
        items.sort(key=lambda a: a.start)
        for arg, following in zip(items, [*items[1:], None], strict=False):
            gap = text[arg.end : following.start if following else self.close]
            if following is not None or "," in gap:
                arg.comma = gap
            else:
                arg.space_after = gap
        self.args = items

    def arg(self, position: int, name: str) -> _Arg | None:
        """libcst-era lookup: the keyword ``name``, else the ``position``-th plain positional."""
        for a in self.args:
            if a.keyword == name:
                return a
        positional = [a for a in self.args if a.keyword is None and not a.star]
        return positional[position] if position < len(positional) else None

    def find(self, name: str) -> _Arg:
        return next(a for a in self.args if a.keyword == name)

    def region(self) -> tuple[int, int]:
        """What an argument list rewrite replaces: from the first argument to the ``)``."""
        return (self.args[0].start if self.args else self.close, self.close)

    def rewritten(self, new: list[_Arg], fresh: set[int]) -> Edit:
        start, end = self.region()
        return _minimal(self.source.text, start, end, _join(self.args, new, fresh))


def _minimal(text: str, start: int, end: int, new: str) -> Edit:
    """Replace ``text[start:end]`` by ``new``, as an edit of only the part that changes: edits of
    other fixes beside it (a policy's name in an argument list that loses another argument) then
    do not overlap it and apply in the same pass, as nested libcst rewrites composed."""
    old = text[start:end]
    prefix = 0
    limit = min(len(old), len(new))
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    limit -= prefix
    while suffix < limit and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    return Edit(start + prefix, end - suffix, new[prefix : len(new) - suffix])


def _kw(name: str, value: str) -> _Arg:
    return _Arg(f"{name}={value}", value, keyword=name)


def _join(original: Sequence[_Arg], new: Sequence[_Arg], fresh: set[int]) -> str:
    """The text of ``new`` with commas that keep the layout of ``original`` (one line or one
    per line): arguments carried over keep their own comma (and its comments) unless they were
    last; inserted ones (indices in ``fresh``) copy the separator the call already uses."""
    sep = ", "
    if len(original) > 1 and original[0].comma is not None:
        sep = original[0].comma
    trailing = original[-1].comma if original else None
    last_original = original[-1] if original else None
    out = []
    for i, arg in enumerate(new):
        if i == len(new) - 1:
            comma = trailing
        elif i in fresh or arg.comma is None or arg is last_original:
            comma = sep
        else:
            comma = arg.comma
        # libcst wrote a last argument's space before ")" after whatever comma it gets now
        out.append(arg.text + (comma or "") + arg.space_after)
    return "".join(out)


def _with_keywords(kept: Sequence[_Arg], extra: Sequence[tuple[str, str]]) -> list[_Arg]:
    """``kept`` plus ``extra`` as keyword arguments (name, value text)."""
    return [*kept, *(_kw(name, value) for name, value in extra)]


def _keywords_text(call: _Call, extra: Sequence[tuple[str, str]]) -> str:
    """The call's argument list (the region) with ``extra`` keyword arguments appended."""
    fresh = set(range(len(call.args), len(call.args) + len(extra)))
    return _join(call.args, _with_keywords(call.args, extra), fresh)


def _inner_with_keywords(source: Source, inner: _Arg, extra: Sequence[tuple[str, str]]) -> str:
    """The text of an argument whose value is an optimizer call, with ``extra`` appended to that
    call's arguments (the value keeps its own parentheses)."""
    assert isinstance(inner.node, ast.Call)
    call = _Call(source, inner.node)
    start, end = call.region()
    text = source.text
    return text[inner.start : start] + _keywords_text(call, extra) + text[end : inner.end]


# -- the walk shared by every check -------------------------------------------------------------


class _Check:
    """One rule's logic: ``enter_<Type>`` methods see the nodes of that type (see ``_walk``),
    ``finish`` runs after."""

    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx
        self.source = ctx.source
        self.names = ctx.names
        self.findings: list[Finding] = []

    def identifiers(self, aliases: Sequence[_Alias]) -> set[str]:
        """The names whose nodes (and the attributes and calls around them) the check reads."""
        return set()

    def finish(self) -> None:
        return None


@dataclass
class _Context:
    source: Source
    names: Names
    target_keras: int
    calls: dict[int, _Call]

    def call(self, node: ast.Call) -> _Call:
        found = self.calls.get(id(node))
        if found is None:
            found = self.calls[id(node)] = _Call(self.source, node)
        return found

    def own_span(self, node: ast.AST) -> tuple[int, int]:
        """``node``'s span with the parentheses around it that are its own: libcst kept them on
        the node, so they went with a replaced node and were part of its source text."""
        start, end = self.source.span(node)
        parent = self.names.parent(node)
        if parent is None or not hasattr(parent, "lineno") or isinstance(parent, ast.ClassDef):
            return start, end
        if isinstance(parent, ast.Call) and node is not parent.func:
            call = self.call(parent)
            lo, hi = call.open, call.close
        else:
            lo, hi = self.source.span(parent)
            lo -= 1
        text = self.source.text
        while True:
            before = _skip_space(text, start - 1, -1, lo)
            after = _skip_space(text, end, 1, hi)
            if lo < before and after < hi and text[before] == "(" and text[after] == ")":
                start, end = before, after + 1
            else:
                return start, end

    def own_text(self, node: ast.AST) -> str:
        start, end = self.own_span(node)
        return self.source.text[start:end]

    def function(self, node: ast.AST) -> ast.AST | None:
        """The innermost def around ``node`` (its decorators and defaults included)."""
        return next((a for a in self.names.ancestors(node) if isinstance(a, _FUNCTIONS)), None)


def _order(node: ast.AST) -> tuple[int, int, int, int]:
    """libcst's visiting order: by start, a node before the nodes inside it (the same start:
    a call before its callee, an attribute before its value)."""
    return (node.lineno, node.col_offset, -node.end_lineno, -node.end_col_offset)


_Alias = tuple[str, str, str | None]  # (module, name, asname) of a from-import


def _walk(names: Names, checks: Sequence[_Check]) -> None:
    """Call each check's ``enter_<Type>`` on the nodes of that type that can matter to it: the
    imports, the names and attributes spelled as one of the check's identifiers, the attribute
    chains above them and the call (and the assignment of that call) they are the callee of.
    In source order, a node before the nodes inside it, as libcst visited them: the checks that
    remember what they saw (aliases imported so far, a scaled loss) depend on it."""
    enter: dict[type, list[Callable]] = {}
    for check in checks:
        for attr in dir(check):
            if attr.startswith("enter_"):
                enter.setdefault(getattr(ast, attr[6:]), []).append(getattr(check, attr))
    found: dict[int, ast.AST] = {id(b.node): b.node for b in names.imports() if b.node}
    aliases = [
        (stmt.module or "", alias.name, alias.asname)
        for stmt in found.values()
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    ]
    identifiers: set[str] = set()
    for check in checks:
        identifiers |= check.identifiers(aliases)
    parent_of = names.parent
    for identifier in identifiers:
        for node in names.spelled(identifier):
            top: ast.AST = node
            found[id(top)] = top
            parent = parent_of(top)
            while isinstance(parent, ast.Attribute):
                top = found[id(parent)] = parent
                parent = parent_of(top)
            if isinstance(parent, ast.Call) and parent.func is top:
                found[id(parent)] = parent
                above = parent_of(parent)
                if isinstance(above, ast.Assign) and above.value is parent:
                    found[id(above)] = above
    for node in sorted(found.values(), key=_order):
        for handler in enter.get(type(node), ()):
            handler(node)


class _CheapNames(_Check):
    """Resolving a qualified name costs; only nodes whose last name (through an import alias)
    is one a check cares about are resolved."""

    WANTED: frozenset[str] = frozenset()
    METHODS: frozenset[str] = frozenset()  # method names read whatever the receiver

    def __init__(self, ctx: _Context) -> None:
        super().__init__(ctx)
        self._aliases: dict[str, str] = {}

    def identifiers(self, aliases: Sequence[_Alias]) -> set[str]:
        imported = {asname for _, name, asname in aliases if asname and name in self.WANTED}
        return self.WANTED | self.METHODS | imported

    def enter_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.asname is not None and alias.name != "*":
                self._aliases[alias.asname] = alias.name

    def wanted(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in self.WANTED
        if isinstance(node, ast.Name):
            return self._aliases.get(node.id, node.id) in self.WANTED
        return False


def _first_value(call: ast.Call) -> ast.expr | None:
    """The value of the call's first argument as written (positional, starred or keyword)."""
    first = sorted([*call.args, *call.keywords], key=lambda a: (a.lineno, a.col_offset))
    if not first:
        return None
    arg = first[0]
    return arg.value if isinstance(arg, ast.keyword | ast.Starred) else arg


# -- moved names (`[[paths]]` and `[[modules]]`) ------------------------------------------------


class _Paths(_Check):
    """Every reference to a moved TF/Keras name, with its fix (``[[paths]]`` in the rules)."""

    def __init__(self, ctx: _Context, paths: Sequence[PathRename]) -> None:
        super().__init__(ctx)
        self.table = {p.old: p for p in paths if p.kind != "module"}
        self.modules = {p.old: p for p in paths if p.kind == "module"}
        self.last_names = {p.old.rsplit(".", 1)[-1] for p in self.table.values()}
        self.target_keras = ctx.target_keras
        self._done: set[int] = set()

    def identifiers(self, aliases: Sequence[_Alias]) -> set[str]:
        renamed = {a for m, name, a in aliases if a and f"{m}.{name}" in self.table}
        return self.last_names | renamed

    # -- imports -------------------------------------------------------------------------------
    def enter_Import(self, node: ast.Import) -> None:
        if len(node.names) != 1:
            return
        alias = node.names[0]
        moved = self.modules.get(alias.name)
        if moved is not None:
            start = self.source.span(alias)[0]
            name = _NAME.match(self.source.text, start)
            assert name is not None
            self._module_finding(moved, node, (Edit(start, name.end(), moved.new),))

    def enter_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or node.module is None or node.names[0].name == "*":
            return
        for alias in node.names:  # `import X as Y`: references are spelled Y
            if alias.asname and f"{node.module}.{alias.name}" in self.table:
                self.last_names.add(alias.asname)
        renamed = self._symbol_import(node)
        if renamed is not None:
            path = self.table[f"{node.module}.{node.names[0].name}"]
            old, new = path.old.rpartition(".")[0], path.new.rpartition(".")[0]
            message = f"`{old}` was removed: import from `{new}`"
            self.findings.append(Finding(path.code, message, node, Fix("safe", edits=renamed)))
            return
        for alias in node.names:
            moved = self.modules.get(f"{node.module}.{alias.name}")
            if moved is None:
                continue
            parent, _, name = moved.new.rpartition(".")
            bound = alias.asname or alias.name
            edits = None
            if len(node.names) == 1:
                start, end = self._alias_span(node, alias)
                written = name if bound == name else f"{name} as {bound}"
                edits = (self._module_edit(node, parent), Edit(start, end, written))
            self._module_finding(moved, node, edits)

    def _module_edit(self, node: ast.ImportFrom, module: str) -> Edit:
        """Replace the module of ``from <module> import ...``."""
        text = self.source.text
        start = self.source.span(node)[0]
        keyword = _FROM.match(text, start)
        assert keyword is not None
        name = _NAME.match(text, keyword.end())
        assert name is not None
        return Edit(name.start(), name.end(), module)

    def _alias_span(self, node: ast.ImportFrom, alias: ast.alias) -> tuple[int, int]:
        """The only alias of ``node`` with its trailing comma, up to the ``)`` (libcst's rebuilt
        alias had no comma, and the space after the comma went with it)."""
        start, end = self.source.span(alias)
        text = self.source.text
        after = _skip_space(text, end, 1, len(text))
        if after < len(text) and text[after] == ",":
            return start, self.source.span(node)[1] - 1
        return start, end

    def _symbol_import(self, node: ast.ImportFrom) -> tuple[Edit, ...] | None:
        """``from old import a, b as c`` -> ``from new import a2, b2 as c`` when every name moved
        to the same module by a plain rename; else None."""
        paths = [self.table.get(f"{node.module}.{alias.name}") for alias in node.names]
        if any(p is None or p.kind != "rename" for p in paths):
            return None
        parents = {p.new.rpartition(".")[0] for p in paths}
        if len(parents) != 1:
            return None
        edits = [self._module_edit(node, parents.pop())]
        for alias, path in zip(node.names, paths, strict=True):
            start = self.source.span(alias)[0]
            name = _NAME.match(self.source.text, start)
            assert name is not None
            edits.append(Edit(start, name.end(), path.new.rpartition(".")[2]))
        return tuple(edits)

    def _module_finding(
        self, moved: PathRename, node: ast.stmt, edits: tuple[Edit, ...] | None
    ) -> None:
        message = f"module `{moved.old}` was removed: import `{moved.new}` instead"
        fix = None
        if edits is None:
            message += " (no automatic fix: the import names other things too)"
        else:
            fix = Fix("safe", edits=edits)
        self.findings.append(Finding(moved.code, message, node, fix))

    # -- references ------------------------------------------------------------------------------
    def _match(self, node: ast.expr) -> PathRename | None:
        last = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
        if last not in self.last_names:
            return None
        found = [self.table[q] for q in sorted(self.names.qualified(node)) if q in self.table]
        return found[0] if found else None

    def enter_Call(self, node: ast.Call) -> None:
        path = self._match(node.func)
        if path is None:
            return
        self._done.add(id(node.func))
        self._report(path, node, node.func, call=node)

    def enter_Attribute(self, node: ast.Attribute) -> None:
        self._reference(node)

    def enter_Name(self, node: ast.Name) -> None:
        self._reference(node)

    def _reference(self, node: ast.expr) -> None:
        if id(node) in self._done:
            return
        path = self._match(node)
        if path is not None:
            self._done.add(id(node))
            self._report(path, node, node)

    # -- findings and fixes ----------------------------------------------------------------------
    def _report(
        self, path: PathRename, target: ast.expr, ref: ast.expr, call: ast.Call | None = None
    ) -> None:
        message = f"`{_shown(path.old)}` " + (path.guidance or f"moved: use `{_shown(path.new)}`")
        fix = None
        if path.kind != "manual":
            try:
                fix = self._fix(path, ref, call)
            except NoFix as reason:
                message += f" (no automatic fix: {reason})"
        self.findings.append(Finding(path.code, message, target, fix))

    def _fix(self, path: PathRename, ref: ast.expr, call: ast.Call | None) -> Fix:
        if path.kind == "attribute":  # get_layer_policy(layer) -> layer.dtype_policy
            if call is None:
                raise NoFix("it is not called")
            args = self.ctx.call(call).args
            positional = [a for a in args if a.keyword is None and not a.star]
            if len(args) != 1 or len(positional) != 1:
                raise NoFix("it takes exactly one layer")
            layer = positional[0]
            if not isinstance(layer.node, ast.Name | ast.Attribute | ast.Call | ast.Subscript):
                raise NoFix("the layer is not a simple expression")
            start, end = self.ctx.own_span(call)
            root = _root_name(ref)
            removals = self.names.import_edits(root) if root is not None else ()
            edit = Edit(start, end, f"{layer.value}.{path.new}")
            return Fix("safe", edits=(edit,), remove_imports=removals)
        if call is not None and path.args != "loss_scale_optimizer":
            for member in self._members_read(call):
                if member in _EXPERIMENTAL_ONLY:
                    raise NoFix(
                        f"`.{member}` of its result exists only on the experimental class "
                        "(AttributeError on Keras 3 and tf-keras): " + _EXPERIMENTAL_ONLY[member]
                    )
        spelled, imports, removals = self._spelling(path.new, ref)
        start, end = self.ctx.own_span(ref)
        edits = [Edit(start, end, spelled)]
        safety = "safe"
        if call is not None and path.args:
            more, safety, whole = self._call_edits(path, call)
            if whole:  # the wrapper goes: the whole call is rewritten
                edits = []
            edits += [more] if more is not None else []
        return Fix(safety, edits=tuple(edits), add_imports=imports, remove_imports=removals)

    def _members_read(self, call: ast.Call) -> set[str]:
        """The attributes read off the call's result: directly, or through the name it is
        assigned to (``p = global_policy(); p.loss_scale``) in the same scope."""
        above = self.names.parent(call)
        if isinstance(above, ast.Attribute):
            return {above.attr}
        if not (
            isinstance(above, ast.Assign)
            and len(above.targets) == 1
            and isinstance(above.targets[0], ast.Name)
        ):
            return set()
        name = above.targets[0].id
        scope = self.names.scope(call)
        out = set()
        for node in self.names.spelled(name):
            parent = self.names.parent(node)
            if (
                type(node) is ast.Name
                and isinstance(parent, ast.Attribute)
                and self.names.scope(node) is scope
            ):
                out.add(parent.attr)
        return out

    def _spelling(
        self, new: str, ref: ast.expr
    ) -> tuple[str, frozenset[str], tuple[ImportEdit, ...]]:
        """How to write ``new`` here: through the same root name, or via a fresh from-import."""
        root = _root_name(ref)
        if root is None or dotted(ref) is None:
            raise NoFix("the reference is not a dotted name")
        for bound in sorted(self.names.qualified(root)):
            direct = isinstance(ref, ast.Attribute) and ref.value is root
            if bound in self.modules and direct and self._import_rewritten(root):
                bound = self.modules[bound].new  # its import is rewritten alongside
            if new.startswith(bound + "."):
                return root.id + new[len(bound) :], frozenset(), ()
        module, _, name = new.rpartition(".")
        statement = self._binding_import(root)
        if isinstance(ref, ast.Name) and statement and self._symbol_import(statement):
            # its import is rewritten by its own finding; an `as` alias stays the bound name
            [alias] = [a for a in statement.names if (a.asname or a.name) == root.id]
            return (root.id if alias.asname else name), frozenset(), ()
        if isinstance(ref, ast.Attribute):
            # `mp.set_policy` with `mp` the old module: import the new module's parent instead
            module, _, name = module.rpartition(".")
            written = name + new[len(module) + len(name) + 1 :]
        else:
            written = name
        if self.names.is_bound(ref, name) and name != root.id:
            raise NoFix(f"`{name}` is already bound here")
        return written, frozenset({f"{module}:{name}"}), self.names.import_edits(root)

    def _binding_import(self, root: ast.Name) -> ast.ImportFrom | None:
        statements = {id(b.node): b.node for b in self.names.bindings(root)}
        if len(statements) != 1:
            return None
        statement = next(iter(statements.values()))
        return statement if isinstance(statement, ast.ImportFrom) else None

    def _import_rewritten(self, root: ast.Name) -> bool:
        """``root`` is bound only by one-name imports, which the module finding rewrites."""
        bindings = self.names.bindings(root)
        return bool(bindings) and all(
            isinstance(b.node, ast.Import | ast.ImportFrom)
            and b.node.names[0].name != "*"
            and len(b.node.names) == 1
            for b in bindings
        )

    def _call_edits(self, path: PathRename, node: ast.Call) -> tuple[Edit | None, str, bool]:
        """The argument rewrite for calls whose signature changed with the move: an edit of the
        argument list, or of the whole call (then True) when the wrapper goes."""
        call = self.ctx.call(node)
        if any(a.star for a in call.args):
            raise NoFix("a `*`/`**` splat hides the arguments")
        if path.args == "policy":
            loss_scale = call.arg(1, "loss_scale")
            if loss_scale is None:
                return None, "safe", False
            if _literal(self.source, loss_scale.node) not in ("dynamic", "auto"):
                raise NoFix(
                    "a Policy no longer carries a loss scale: pass it to "
                    "`LossScaleOptimizer(opt, initial_scale=...)`; `loss_scale=None` is "
                    "`model.compile(..., auto_scale_loss=False)` on Keras 3"
                )
            kept = [a for a in call.args if a is not loss_scale]
            return call.rewritten(kept, set()), "safe", False
        return self._loss_scale_optimizer(node, call)

    def _loss_scale_optimizer(self, node: ast.Call, call: _Call) -> tuple[Edit | None, str, bool]:
        """experimental LossScaleOptimizer(opt, loss_scale) -> the stable class's arguments."""
        loss_scale = call.arg(1, "loss_scale")
        if loss_scale is None:
            return None, "safe", False
        value = loss_scale.node
        literal = _literal(self.source, value)
        extra: list[tuple[str, str]]
        if literal == "dynamic":
            extra = []
        elif isinstance(literal, int | float) and not isinstance(literal, bool):
            return self._fixed_scale(node, call, loss_scale.value)
        elif isinstance(value, ast.Call) and self._loss_scale_class(value) in _FIXED:
            inner = self.ctx.call(value)
            scale = inner.arg(0, "loss_scale_value")
            if scale is None or len(inner.args) != 1:
                raise NoFix("FixedLossScale takes exactly one value")
            return self._fixed_scale(node, call, scale.value)
        elif isinstance(value, ast.Call) and self._loss_scale_class(value) in _DYNAMIC:
            extra = self._dynamic(self.ctx.call(value))
        else:
            raise NoFix("the loss scale is not a literal: map it to `initial_scale=` by hand")
        return _replace_loss_scale(call, loss_scale, extra), "safe", False

    def _loss_scale_class(self, call: ast.Call) -> str:
        for name in self.names.qualified(call.func):
            if name.startswith(_LOSS_SCALE_MODULES):
                return name.rsplit(".", 1)[-1]
        return ""

    def _dynamic(self, value: _Call) -> list[tuple[str, str]]:
        names = ("initial_loss_scale", "increment_period", "multiplier")
        if len(value.args) > len(names) or any(a.star for a in value.args):
            raise NoFix("DynamicLossScale's arguments cannot be read")
        extra = []
        for i, new in enumerate(("initial_scale", "dynamic_growth_steps", "")):
            arg = value.arg(i, names[i])
            if arg is None:
                continue
            if not new:
                if _literal(self.source, arg.node) not in (2, 2.0):
                    raise NoFix("only multiplier=2 exists in the stable LossScaleOptimizer")
                continue
            extra.append((new, arg.value))
        known = {a.keyword for a in value.args if a.keyword}
        if known - set(names):
            raise NoFix("DynamicLossScale got unknown arguments")
        return extra

    def _fixed_scale(self, node: ast.Call, call: _Call, value: str) -> tuple[Edit, str, bool]:
        """A fixed scale: `dynamic=False, initial_scale=N` on Keras 2; on Keras 3 there is no
        wrapper for it, the inner optimizer takes `loss_scale_factor=N`."""
        if self.target_keras == 2:
            extra = [("dynamic", "False"), ("initial_scale", value)]
            return _replace_loss_scale(call, call.arg(1, "loss_scale"), extra), "safe", False
        inner = call.arg(0, "optimizer")
        if inner is None or not isinstance(inner.node, ast.Call) or len(call.args) != 2:
            raise NoFix(
                "Keras 3 has no fixed-scale LossScaleOptimizer: set `loss_scale_factor=N` on the "
                "optimizer and drop the wrapper"
            )
        edit = _move_to_inner(call, self.ctx.own_span(node), inner, [("loss_scale_factor", value)])
        return edit, "unsafe", True


def _replace_loss_scale(call: _Call, dropped: _Arg | None, extra: list[tuple[str, str]]) -> Edit:
    """The call's arguments without ``loss_scale``, plus ``extra``, in the call's layout."""
    args = call.args
    kept = [a for a in args if a is not dropped]
    new = _with_keywords(kept, extra)
    if new and dropped is args[-1]:  # keep what stood before the closing parenthesis
        last = new[-1]
        new[-1] = _Arg(last.text, last.value, last.node, last.keyword, last.star, last.comma,
                       dropped.space_after)  # fmt: skip
    return call.rewritten(new, set(range(len(kept), len(new))))


def _move_to_inner(
    call: _Call, span: tuple[int, int], inner: _Arg, extra: list[tuple[str, str]]
) -> Edit:
    """Drop the wrapper call (``span``: with its own parentheses): its inner optimizer call
    (``inner``) gets ``extra`` keyword arguments."""
    value = _Arg(inner.value, inner.value, inner.node, start=inner.value_start, end=inner.end)
    return Edit(*span, _inner_with_keywords(call.source, value, extra))


def _move_kwargs(call: _Call, inner: _Arg, names: list[str]) -> Edit:
    """Keep the wrapper; move ``names`` from its arguments into the inner optimizer call."""
    moving = [call.find(n) for n in names]
    extra = [(a.keyword or "", a.value) for a in moving]
    value = _Arg(inner.value, inner.value, inner.node, start=inner.value_start, end=inner.end)
    text = call.source.text
    rebuilt = text[inner.start : inner.value_start] + _inner_with_keywords(
        call.source, value, extra
    )
    moved = _Arg(rebuilt, rebuilt, inner.node, inner.keyword, inner.star, inner.comma,
                 inner.space_after)  # fmt: skip
    kept = [moved if a is inner else a for a in call.args if a not in moving]
    start, end = call.region()
    return _minimal(text, start, end, _join(call.args, kept, set()))


# -- the Keras 3 LossScaleOptimizer (AMP406) ---------------------------------------------------

_LSO_NAMES = frozenset({"LossScaleOptimizer"})
_PROCESSING_NAMES = frozenset(name.rsplit(".", 1)[-1] for name in GRADIENT_PROCESSING)


class Keras3Optimizer(_CheapNames):
    """The Keras 3 LossScaleOptimizer: renamed methods and attributes, rejected arguments.

    Only on target-keras 3, and only for receivers built from a LossScaleOptimizer in this file
    (by their source text, ``self.optimizer`` included): the method names are too generic to
    rename on anything else.
    """

    WANTED = _LSO_NAMES | _PROCESSING_NAMES
    METHODS = frozenset(
        {"get_scaled_loss", "get_unscaled_gradients", "loss_scale", "dynamic_counter", "dynamic"}
    )

    def __init__(self, ctx: _Context, rule: Rule) -> None:
        super().__init__(ctx)
        self.rule = rule
        self.active = ctx.target_keras == 3
        self._receivers: set[str] = set()
        # (node, member name, receiver)
        self._pending: list[tuple[ast.expr, str, ast.expr]] = []
        self._processing: set[int] = set()  # functions that clip or reduce gradients

    def _is_lso(self, node: ast.expr) -> bool:
        return self.wanted(node) and bool(self.names.qualified(node) & LOSS_SCALE_OPTIMIZERS)

    def enter_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Call) and self._is_lso(node.value.func):
            self._receivers.update(self.ctx.own_text(t) for t in node.targets)

    def enter_Call(self, node: ast.Call) -> None:
        if not self.active:
            return
        if self._is_lso(node.func):
            self._constructor(node)
        elif isinstance(node.func, ast.Attribute):
            self._pending.append((node, node.func.attr, node.func.value))
        if self.wanted(node.func) and self.names.qualified(node.func) & GRADIENT_PROCESSING:
            self._processing.add(id(self.ctx.function(node)))

    def enter_Attribute(self, node: ast.Attribute) -> None:
        if self.active and node.attr in ("loss_scale", "dynamic_counter", "dynamic"):
            self._pending.append((node, node.attr, node.value))

    def finish(self) -> None:
        if not self.active or not self._pending:
            return
        calls = {id(n.func) for n, *_ in self._pending if isinstance(n, ast.Call)}
        for node, name, receiver in self._pending:
            text = self.ctx.own_text(receiver)
            if text not in self._receivers and not self._narrowed(node, text):
                continue
            if isinstance(node, ast.Attribute) and id(node) in calls:
                continue  # the method call itself is judged
            self._member(node, name, id(self.ctx.function(node)) in self._processing)

    def _drop_self_assignment(
        self, call: ast.Call, value: str
    ) -> tuple[Edit | None, tuple[ImportEdit, ...]]:
        """``grads = opt.get_unscaled_gradients(grads)`` would become ``grads = grads``: the
        statement goes instead (its lines), and so does an ``if isinstance(...)`` left empty; a
        block it leaves empty gets ``pass``. None when the call is not such a statement; the
        imports that a removed ``isinstance`` test used go once unused."""
        statement = self.names.parent(call)
        if not (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and self.ctx.own_text(statement.targets[0]) == value
            and self._own_lines(statement)
        ):
            return None, ()
        block = self.names.parent(statement)
        body = next(
            (getattr(block, f) for f in ("body", "orelse", "finalbody")
             if any(s is statement for s in getattr(block, f, ()) or ())),
            [],
        )  # fmt: skip
        if len(body) > 1:
            return self._delete_lines(statement), ()
        if (
            isinstance(block, ast.If)
            and body is block.body
            and not block.orelse
            and self._pure_test(block.test)
            and self._own_lines(block)
        ):
            used = [
                n for n in ast.walk(block.test) if isinstance(n, ast.Name) and n is not block.test
            ]
            removals = tuple(e for n in used for e in self.names.import_edits(n))
            return self._delete_lines(block), removals
        start, end = self.source.span(statement)
        return Edit(start, end, "pass"), ()

    def _pure_test(self, test: ast.expr) -> bool:
        """A test without side effects (``if amp:``, ``if params.use_amp:``,
        ``if isinstance(opt, LossScaleOptimizer):``): an ``if`` left empty can go with it."""
        if isinstance(test, ast.Name | ast.Constant):
            return True
        if isinstance(test, ast.Attribute):
            return self._pure_test(test.value)
        if isinstance(test, ast.UnaryOp | ast.BoolOp | ast.Compare):
            parts = (
                [test.operand] if isinstance(test, ast.UnaryOp)
                else test.values if isinstance(test, ast.BoolOp)
                else [test.left, *test.comparators]
            )  # fmt: skip
            return all(self._pure_test(p) for p in parts)
        return (
            isinstance(test, ast.Call)
            and "builtins.isinstance" in self.names.qualified(test.func)
            and all(self._pure_test(a) for a in test.args)
            and not test.keywords
        )

    def _own_lines(self, statement: ast.stmt) -> bool:
        """Nothing else shares the statement's first and last lines."""
        start, end = self.source.span(statement)
        text, last = self.source.text, statement.end_lineno
        before = text[self.source.line_start(statement.lineno) : start]
        rest = text[end : self.source.line_start(last) + len(self.source.line(last))].strip()
        return not before.strip() and (not rest or rest.startswith("#"))

    def _delete_lines(self, statement: ast.stmt) -> Edit:
        start = self.source.line_start(statement.lineno)
        try:
            end = self.source.line_start(statement.end_lineno + 1)
        except IndexError:
            end = len(self.source.text)
        return Edit(start, end, "")

    def _narrowed(self, node: ast.AST, receiver: str) -> bool:
        """``node`` runs only where ``receiver`` is a LossScaleOptimizer: inside the body of
        ``if isinstance(receiver, LossScaleOptimizer)`` (alone or in an ``and``)."""
        child = node
        for above in self.names.ancestors(node):
            if isinstance(above, ast.If) and any(child is s for s in above.body):
                test = above.test
                tests = (
                    test.values
                    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)
                    else [test]
                )
                if any(self._isinstance_lso(t, receiver) for t in tests):
                    return True
            child = above
        return False

    def _isinstance_lso(self, test: ast.expr, receiver: str) -> bool:
        if not (isinstance(test, ast.Call) and len(test.args) == 2 and not test.keywords):
            return False
        if "builtins.isinstance" not in self.names.qualified(test.func):
            return False
        if self.ctx.own_text(test.args[0]) != receiver:
            return False
        classes = test.args[1]
        options = classes.elts if isinstance(classes, ast.Tuple) else [classes]
        return any(self.names.qualified(c) & LOSS_SCALE_OPTIMIZERS for c in options)

    def _attr_edit(self, node: ast.Attribute, new: str) -> Edit:
        end = self.source.span(node)[1]
        return Edit(end - len(node.attr), end, new)

    def _member(self, node: ast.expr, name: str, processed: bool) -> None:
        code = self.rule.code
        if isinstance(node, ast.Call) and name == "get_scaled_loss":
            assert isinstance(node.func, ast.Attribute)
            fix = Fix("safe", edits=(self._attr_edit(node.func, "scale_loss"),))
            message = "Keras 3's LossScaleOptimizer has no `get_scaled_loss`: use `scale_loss`"
            self.findings.append(Finding(code, message, node, fix))
        elif isinstance(node, ast.Call) and name == "get_unscaled_gradients":
            message = (
                "Keras 3's LossScaleOptimizer has no `get_unscaled_gradients`: "
                "`apply_gradients` unscales (and skips non-finite steps) itself"
            )
            fix = None
            args = self.ctx.call(node).args
            if processed:
                message += (
                    "; not removed automatically: this function clips or reduces the gradients, "
                    "which in Keras 3 would then see them still scaled (see AMP407)"
                )
            elif len(args) == 1 and args[0].keyword is None and not args[0].star:
                start, end = self.ctx.own_span(node)
                edit, removals = self._drop_self_assignment(node, args[0].value)
                fix = Fix(
                    "safe",
                    edits=(edit or Edit(start, end, args[0].value),),
                    remove_imports=removals,
                )
            self.findings.append(Finding(code, message, node, fix))
        elif isinstance(node, ast.Call) and name == "loss_scale":  # the TF <= 2.3 method
            assert isinstance(node.func, ast.Attribute)
            call = self.ctx.call(node)
            callee = self.source.text[call.start : call.func_end]
            offset = self.source.span(node.func)[1] - call.start
            renamed = callee[: offset - len(node.func.attr)] + "dynamic_scale" + callee[offset:]
            fix = Fix("safe", edits=(Edit(*self.ctx.own_span(node), renamed),))
            message = "`loss_scale()` is gone (a tensor since TF 2.4); Keras 3: `dynamic_scale`"
            self.findings.append(Finding(code, message, node, fix))
        elif isinstance(node, ast.Attribute) and name in ("loss_scale", "dynamic_counter"):
            new = {"loss_scale": "dynamic_scale", "dynamic_counter": "step_counter"}[name]
            fix = Fix("safe", edits=(self._attr_edit(node, new),))
            message = f"Keras 3's LossScaleOptimizer renamed `{name}` to `{new}`"
            self.findings.append(Finding(code, message, node, fix))
        elif isinstance(node, ast.Attribute) and name == "dynamic":
            message = (
                "Keras 3's LossScaleOptimizer has no `dynamic` (it is always dynamic; a fixed "
                "scale is `loss_scale_factor` on the optimizer)"
            )
            self.findings.append(Finding(code, message, node, None))

    def _constructor(self, node: ast.Call) -> None:
        """LossScaleOptimizer(opt, dynamic=..., initial_scale=..., clipnorm=...) on Keras 3."""
        call = self.ctx.call(node)
        keywords: dict[str, _Arg] = {}
        for a in call.args:
            if a.keyword is not None:
                keywords[a.keyword] = a
        dynamic = keywords.get("dynamic")
        inner_only = [keywords[k] for k in _INNER_ONLY if k in keywords]
        if dynamic is None and not inner_only:
            return
        inner = call.arg(0, "inner_optimizer")
        inline = inner is not None and isinstance(inner.node, ast.Call)
        code = self.rule.code
        if dynamic is not None and _is_const(dynamic.node, True):
            dropped = call.find("dynamic")
            edit = call.rewritten([a for a in call.args if a is not dropped], set())
            message = "`dynamic=True` is the only mode in Keras 3: drop it"
            self.findings.append(Finding(code, message, node, Fix("safe", edits=(edit,))))
            return
        moved: list[tuple[str, str]] = []
        what = []
        if dynamic is not None and not _is_const(dynamic.node, False):
            message = (
                "`dynamic=` is not accepted by Keras 3 (always dynamic; a fixed scale is "
                "`loss_scale_factor=N` on the inner optimizer)"
            )
            self.findings.append(Finding(code, message, node, None))
            return
        if dynamic is not None:  # dynamic=False
            scale = keywords.get("initial_scale")
            what.append("`dynamic=False` raises ValueError in Keras 3")
            if scale is None:
                self.findings.append(Finding(code, what[0], node, None))
                return
            moved.append(("loss_scale_factor", scale.value))
        for arg in inner_only:
            what.append(f"`{arg.keyword}=` is rejected by the Keras 3 wrapper")
            moved.append((arg.keyword or "", arg.value))
        message = "; ".join(what) + ": set it on the inner optimizer"
        fix = None
        if inline and inner and dynamic is not None and len(call.args) == len(moved) + 2:
            edit = _move_to_inner(call, self.ctx.own_span(node), inner, moved)
            fix = Fix("unsafe", edits=(edit,))
        elif inline and inner and dynamic is None:
            fix = Fix("safe", edits=(_move_kwargs(call, inner, [n for n, _ in moved]),))
        self.findings.append(Finding(code, message, node, fix))


# -- the other TF checks -------------------------------------------------------------------------

_ENV_NAME = "TF_ENABLE_AUTO_MIXED_PRECISION"


class AutoMixedPrecisionVariable(_Check):
    """The NVIDIA-container-only ``TF_ENABLE_AUTO_MIXED_PRECISION`` switch, in any string."""

    def __init__(self, ctx: _Context, rule: Rule) -> None:
        super().__init__(ctx)
        self.rule = rule

    def finish(self) -> None:
        if _ENV_NAME not in self.source.text:
            return
        for node in self.names.nodes():
            if isinstance(node, ast.JoinedStr) and _ENV_NAME in self.source.segment(node):
                self._tokens(node)  # plain strings concatenated with an f-string
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _ENV_NAME in node.value
                and not isinstance(self.names.parent(node), ast.JoinedStr)  # an f-string's piece
            ):
                if _single_string(self.source, node):
                    self._report(node)
                else:
                    self._tokens(node)

    def _tokens(self, node: ast.expr) -> None:
        """Each plain string literal of an implicit concatenation on its own."""
        text = self.source.segment(node)
        line0, col0 = node.lineno, self.source.char_col(node.lineno, node.col_offset)
        for kind, string, row, col, end_row, end_col in _string_tokens(text) or ():
            if kind != tokenize.STRING or not re.match(r"[rRuU]?['\"]", string):
                continue
            if _ENV_NAME in ast.literal_eval(string):
                self._report(
                    Span(
                        line0 + row - 1,
                        (col0 if row == 1 else 0) + col + 1,
                        line0 + end_row - 1,
                        (col0 if end_row == 1 else 0) + end_col + 1,
                    )
                )

    def _report(self, where: ast.AST | Span) -> None:
        message = (
            "`TF_ENABLE_AUTO_MIXED_PRECISION` is read only by NVIDIA's TensorFlow 1 builds: "
            "upstream TensorFlow ignores it, so this enables nothing; use "
            "`tf.keras.mixed_precision.set_global_policy('mixed_float16')`"
        )
        self.findings.append(Finding(self.rule.code, message, where, None))


class ScaledGradients(_CheapNames):
    """Gradients of a scaled loss clipped or reduced before they are unscaled (per function)."""

    WANTED = _PROCESSING_NAMES
    METHODS = frozenset({"get_scaled_loss", "scale_loss", "get_unscaled_gradients"})

    def __init__(self, ctx: _Context, rule: Rule) -> None:
        super().__init__(ctx)
        self.rule = rule
        self.keras = ctx.target_keras
        self._calls: list[tuple[ast.Call, str]] = []  # scaling, unscaling, maybe processing

    def enter_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else ""
        if name in ("get_scaled_loss", "scale_loss", "get_unscaled_gradients"):
            self._calls.append((node, name))
        elif self.wanted(func):  # by the aliases imported so far, as libcst's visitor saw them
            self._calls.append((node, ""))

    def finish(self) -> None:
        """The calls of each def in the order they are written, the loss scaled or not."""
        state: dict[int, str] = {}  # per def: "scaled" or "unscaled"
        self._calls.sort(key=lambda c: _order(c[0]))
        for node, name in self._calls:
            function = id(self.ctx.function(node))
            if name == "get_unscaled_gradients":
                state[function] = "unscaled"
            elif name:
                state[function] = "scaled"
            elif state.get(function) == "scaled" and (
                self.names.qualified(node.func) & GRADIENT_PROCESSING
            ):
                self._report(node)

    def _report(self, node: ast.Call) -> None:
        where = (
            "move the clipping onto the inner optimizer (`global_clipnorm=` / `clipnorm=` / "
            "`clipvalue=`), which sees unscaled gradients, or divide by `opt.dynamic_scale` "
            "first"
            if self.keras == 3
            else "do it after `opt.get_unscaled_gradients(grads)`"
        )
        message = (
            "gradients of a scaled loss are clipped or reduced while still multiplied by the "
            "loss scale (measured on Keras 3: training stalls); " + where
        )
        self.findings.append(Finding(self.rule.code, message, node, None))


_POLICY_SETTERS = frozenset(
    f"{root}.{name}"
    for root in KERAS_ROOTS
    for name in (
        "mixed_precision.set_global_policy", "mixed_precision.experimental.set_policy",
        "mixed_precision.Policy", "mixed_precision.experimental.Policy",
        "mixed_precision.set_dtype_policy", "mixed_precision.DTypePolicy",
        "config.set_dtype_policy", "DTypePolicy",
    )
)  # fmt: skip
_TPU_OR_CPU = frozenset(
    {
        "tensorflow.distribute.TPUStrategy", "tensorflow.distribute.experimental.TPUStrategy",
        "tensorflow.distribute.cluster_resolver.TPUClusterResolver",
    }
)  # fmt: skip


class _Policies(_CheapNames):
    """What a TF program sets up: mixed policies, the graph rewrite, custom loops, devices."""

    WANTED = frozenset(
        name.rsplit(".", 1)[-1] for name in _POLICY_SETTERS | _TPU_OR_CPU | LOSS_SCALE_OPTIMIZERS
    ) | {"enable_mixed_precision_graph_rewrite", "GradientTape", "device"}
    METHODS = frozenset({"scale_loss", "get_scaled_loss"})

    def __init__(self, ctx: _Context, rule: Rule) -> None:
        super().__init__(ctx)
        self.rule = rule
        self.policies: list[tuple[ast.Call, ast.Constant, str]] = []
        self.graph_rewrites: list[ast.Call] = []
        self.tapes: list[ast.Call] = []  # the custom loops' GradientTape calls
        self.loss_scaling = False
        self.tpu_or_cpu: list[str] = []

    def enter_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in (
            "scale_loss", "get_scaled_loss",
        ):  # fmt: skip
            self.loss_scaling = True
        if not self.wanted(node.func):
            return
        names = self.names.qualified(node.func)
        first = _first_value(node)
        if names & _POLICY_SETTERS and first is not None:
            literal = _literal(self.source, first)
            if isinstance(literal, str) and literal.startswith("mixed_"):
                assert isinstance(first, ast.Constant)
                self.policies.append((node, first, literal))
        if any(n.endswith(".enable_mixed_precision_graph_rewrite") for n in names):
            self.graph_rewrites.append(node)
        if "tensorflow.GradientTape" in names:
            self.tapes.append(node)
        if names & LOSS_SCALE_OPTIMIZERS:
            self.loss_scaling = True
        if names & _TPU_OR_CPU:
            self.tpu_or_cpu.append("a TPU strategy")
        if "tensorflow.device" in names and first is not None:
            device = _literal(self.source, first)
            if isinstance(device, str) and "cpu" in device.lower():
                self.tpu_or_cpu.append(f"`tf.device({device!r})`")

    def float16_policies(self) -> list[tuple[ast.Call, ast.Constant, str]]:
        return [p for p in self.policies if p[2] == "mixed_float16"]


class GraphRewriteWithPolicy(_Policies):
    def finish(self) -> None:
        if not self.policies:
            return
        message = (
            "the graph rewrite and a mixed Keras policy in one program: tf-keras raises "
            "ValueError, Keras 3 silently enables both (casts applied twice); keep the policy"
        )
        for call in self.graph_rewrites:
            # Judged one-sidedly, as the scaler-flow rules are: both in one function (or both
            # at module level) and not in exclusive arms of an if/else. In two functions, the
            # callers decide (a flag picks one), which this file does not show.
            scope = self.ctx.function(call)
            if all(
                self.ctx.function(policy) is not scope or self.names.exclusive(call, policy)
                for policy, _, _ in self.policies
            ):
                continue
            self.findings.append(Finding(self.rule.code, message, call, None))


class Float16WithoutLossScaling(_Policies):
    def finish(self) -> None:
        if not self.tapes or self.loss_scaling:
            return
        message = (
            "'mixed_float16' with a custom GradientTape loop and no loss scaling: small float16 "
            "gradients underflow to zero (only `Model.fit` scales automatically); wrap the "
            "optimizer in `LossScaleOptimizer` and use `scale_loss`, or use 'mixed_bfloat16'"
        )
        loops = {self.ctx.function(tape) for tape in self.tapes}
        for call, _, _ in self.float16_policies():
            if self._reaches(self.ctx.function(call), loops):
                self.findings.append(Finding(self.rule.code, message, call, None))

    def _reaches(self, start: ast.AST | None, loops: set[ast.AST | None]) -> bool:
        """A policy set at module level governs every loop; one set in a function governs the
        loops of that function and of the functions it calls or hands on in this file (by name,
        any depth), and a loop at module level: a test method that sets the policy for itself
        says nothing of another test's loop."""
        if start is None or None in loops:
            return True
        defs: dict[str, list[ast.AST]] = {}
        for node in self.names.nodes():
            if isinstance(node, _FUNCTIONS):
                defs.setdefault(node.name, []).append(node)
        seen, todo = {start}, [start]
        while todo:
            function = todo.pop()
            if function in loops:
                return True
            for node in ast.walk(function):  # a call or a reference (strategy.run(step))
                name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
                for target in defs.get(name, ()):
                    if target not in seen:
                        seen.add(target)
                        todo.append(target)
        return False


class Float16OnCpuOrTpu(_Policies):
    def finish(self) -> None:
        if not self.tpu_or_cpu or any(name == "mixed_bfloat16" for *_, name in self.policies):
            return  # the program already picks bfloat16 where it runs on a TPU/CPU
        message = (
            f"'mixed_float16' where the program targets {self.tpu_or_cpu[0]}: float16 is a GPU "
            "format (TPUs and most CPUs run it slowly or emulate it); use 'mixed_bfloat16'"
        )
        for call, string, _ in self.float16_policies():
            prefix, quote = _single_string(self.source, string) or ("", '"')
            start, end = self.source.span(string)
            edit = Edit(start, end, f"{prefix}{quote}mixed_bfloat16{quote}")
            self.findings.append(
                Finding(self.rule.code, message, call, Fix("unsafe", edits=(edit,)))
            )


_LEGACY_OPTIMIZERS = tuple(f"{root}.optimizers.legacy." for root in KERAS_ROOTS)


class LegacyOptimizer(_Check):
    """``tf.keras.optimizers.legacy.*`` under Keras 3, where the module does not exist."""

    def __init__(self, ctx: _Context, rule: Rule) -> None:
        super().__init__(ctx)
        self.rule = rule
        self.active = ctx.target_keras == 3
        self._imported: set[str] = set()  # names bound by `from ...legacy import X`

    def identifiers(self, aliases: Sequence[_Alias]) -> set[str]:
        legacy = {a or n for m, n, a in aliases if m.endswith("optimizers.legacy")}
        return {"legacy"} | legacy

    def enter_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module and module.endswith("optimizers.legacy") and node.names[0].name != "*":
            self._imported |= {a.asname or a.name for a in node.names}

    # Only names that can be a legacy optimizer are resolved (resolving every name is slow):
    # a dotted name with `.legacy.` inside, or one whose root was imported from a legacy module.
    def enter_Attribute(self, node: ast.Attribute) -> None:
        inner, legacy = node.value, False
        while isinstance(inner, ast.Attribute):
            legacy = legacy or inner.attr == "legacy"
            inner = inner.value
        if isinstance(inner, ast.Name) and (legacy or inner.id in self._imported):
            self._check(node)

    def enter_Name(self, node: ast.Name) -> None:
        if node.id in self._imported:
            self._check(node)

    def _check(self, node: ast.expr) -> None:
        if not self.active:
            return
        names = [n for n in self.names.qualified(node) if n.startswith(_LEGACY_OPTIMIZERS)]
        if names and "." not in names[0].split("optimizers.legacy.", 1)[1]:
            message = (
                f"`{_shown(names[0])}` does not exist in Keras 3 (ImportError on TF >= 2.16; "
                "tf_upgrade_v2 writes it): use the non-legacy optimizer, or tf-keras with "
                "TF_USE_LEGACY_KERAS=1 and target-keras = 2"
            )
            self.findings.append(Finding(self.rule.code, message, node, None))


KERAS_CHECKS: dict[str, Callable[[_Context, Rule], _Check]] = {
    "keras3-legacy-optimizer": LegacyOptimizer,
    "keras3-loss-scale-optimizer": Keras3Optimizer,
    "auto-mixed-precision-variable": AutoMixedPrecisionVariable,
    "scaled-gradients-processed": ScaledGradients,
    "graph-rewrite-with-policy": GraphRewriteWithPolicy,
    "float16-without-loss-scaling": Float16WithoutLossScaling,
    "float16-on-cpu-or-tpu": Float16OnCpuOrTpu,
}


def check(
    tree: ast.Module, source: Source, names: Names, rules: Sequence[Rule], settings: Settings
) -> list[Finding]:
    """Every TF/Keras finding in one file: the moved-name tables of the selected rules and their
    code checks, in one walk."""
    paths = [p for r in rules for p in r.paths]
    mine = [r for r in rules if r.check in KERAS_CHECKS]
    if not paths and not mine:
        return []
    ctx = _Context(source, names, settings.target_keras, {})
    checks: list[_Check] = [_Paths(ctx, paths)] if paths else []
    checks += [KERAS_CHECKS[r.check](ctx, r) for r in mine]
    _walk(names, checks)
    findings: list[Finding] = []
    for c in checks:
        c.finish()
        findings += c.findings
    return findings
