"""The generic engine behind every rename rule: resolve names, map arguments, plan text edits.

The rules themselves are data (``rules/AMP1xx.toml``, AMP201, AMP301/AMP302). One walk of the
``ast`` finds every reference whose qualified name is in their symbol table, through any import
form, and decides per context (call, decorator, ``functools.partial``, type position, subclass,
other value) what the replacement is and how safe it is. A fix changes only what changes: the
callee, the arguments that become keywords, and what is inserted (the device first, written-out
defaults where the new signature has them), so a call keeps its layout and comments.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ampmigrate.catalog import Rule, Symbol
from ampmigrate.engine.names import Names, dotted
from ampmigrate.engine.source import Source
from ampmigrate.findings import Edit, Finding, Fix

if TYPE_CHECKING:
    from ampmigrate.engine import Settings

# Names whose presence among a reference's qualified names marks a compatibility shim
# (``try: from torch.amp import X except ImportError: from torch.cuda.amp import X``).
_MODERN_PREFIXES = ("torch.amp.", "torch.autocast", "torch.GradScaler")
_TYPE_CHECKS = {"builtins.isinstance", "builtins.issubclass"}
# unittest's type assertions take the classes second, as isinstance does (any receiver).
_TYPE_ASSERTIONS = frozenset(
    {"assertIsInstance", "assertNotIsInstance", "failUnlessIsInstance", "assert_isinstance"}
)
_IDENTITY_OPS = (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)
_PARTIAL = "functools.partial"
_VERSION_TEST = re.compile(r"version|hasattr|getattr|greater|less|torch_?\d", re.IGNORECASE)
_MODERN_USE = re.compile(
    r"\bamp\.(?:autocast|GradScaler|custom_fwd|custom_bwd)\(\s*(?:[\"']|device)"
    r"|\btorch\.(?:autocast|GradScaler)\b|_autocast_dtype\(\s*\w|is_autocast_enabled\(\s*\w"
)
# Inside these a reference is compared or registered, never called (`f in [old, new]`).
_CONTAINERS = (ast.Compare, ast.List, ast.Set, ast.Dict)
_MISSING_API = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "Exception"})
_PROBES = frozenset({"AttributeError", "Exception", "BaseException"})
_FALLBACK = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "TypeError"})
_OPEN, _CLOSE = {"(", "[", "{"}, {")", "]", "}"}
_SKIP = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}


def is_constant(node: ast.AST | None, value: object) -> bool:
    """``node`` is the literal ``True``/``False``/``None`` given as ``value``."""
    return isinstance(node, ast.Constant) and node.value is value


def disabled_by_keyword(keywords: Iterable[ast.keyword]) -> bool:
    """The call passes ``enabled=False`` literally."""
    return any(k.arg == "enabled" and is_constant(k.value, False) for k in keywords)


def _catches_missing_api(
    handler_type: ast.expr | None, kinds: frozenset[str] = _MISSING_API
) -> bool:
    if handler_type is None:
        return kinds is _MISSING_API  # a bare except probes, but is no fallback
    names = handler_type.elts if isinstance(handler_type, ast.Tuple) else [handler_type]
    return any((dotted(n) or "").rsplit(".", 1)[-1] in kinds for n in names)


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class NoFix(Exception):
    """Raised while planning a fix to say why there is none; the text joins the message."""


# ---- a call's arguments as text ------------------------------------------------------------


@dataclass(frozen=True)
class Arg:
    """One argument of a call as written: its text's extent (parentheses around it included)."""

    node: ast.expr | ast.keyword
    start: int
    end: int
    keyword: str | None
    star: str  # "", "*" or "**"


@dataclass(frozen=True)
class CallText:
    """Where a call's arguments are in the text: after ``(`` at ``open``, before ``)``."""

    open: int
    close: int
    args: tuple[Arg, ...]
    separator: str  # what goes between two arguments in this call's layout

    @classmethod
    def read(cls, source: Source, call: ast.Call) -> CallText:
        text = source.text
        i = source.span(call.func)[1]
        while text[i] != "(":  # past `)` of a parenthesised callee, comments, continuations
            i = text.index("\n", i) if text[i] == "#" else i + 1
        open_ = i + 1
        close = source.span(call)[1] - 1
        region = text[open_:close]
        starts = [0] + [m.end() for m in re.finditer("\n", region)]
        slots: list[list[int]] = []
        current: list[int] | None = None
        depth = 0
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(f"({region})").readline))
        except (tokenize.TokenError, SyntaxError) as exc:
            raise NoFix("cannot read the call's arguments") from exc
        for tok in tokens:
            if tok.type in _SKIP or tok.type == tokenize.ENDMARKER:
                continue
            (row, col), (erow, ecol) = tok.start, tok.end
            start = starts[row - 1] + col - (1 if row == 1 else 0)
            end = starts[erow - 1] + ecol - (1 if erow == 1 else 0)
            if tok.type == tokenize.OP and tok.string in _OPEN:
                depth += 1
                if depth == 1:
                    continue
            elif tok.type == tokenize.OP and tok.string in _CLOSE:
                depth -= 1
                if depth == 0:
                    continue
            elif depth == 1 and tok.string == ",":
                current = None
                continue
            if current is None:
                current = [start, end]
                slots.append(current)
            current[1] = end
        nodes = sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))
        if len(nodes) != len(slots):
            raise NoFix("cannot read the call's arguments")
        args = []
        for node, (start, end) in zip(nodes, slots, strict=True):
            keyword = node.arg if isinstance(node, ast.keyword) else None
            star = "*" if isinstance(node, ast.Starred) else ""
            if isinstance(node, ast.keyword) and node.arg is None:
                star = "**"
            args.append(Arg(node, open_ + start, open_ + end, keyword, star))
        return cls(open_, close, tuple(args), _separator(text, open_, args))


def _separator(text: str, open_: int, args: Sequence[Arg]) -> str:
    """The call's own separator: the one between its first two arguments, or (arguments on lines
    of their own, comments or not) a comma, a newline and the indentation of the first argument."""
    if not args:
        return ", "
    gap = text[open_ : args[0].start]
    if len(args) > 1:
        gap = text[args[0].end : args[1].start]
        if gap.strip() == "," and "\\" not in gap:
            return gap
    if "\n" in gap:
        i = gap.rindex("\n")
        indent = gap[i + 1 :]
        if not indent.strip():
            return ("\r\n" if gap[i - 1 : i] == "\r" else "\n").join([",", indent])
    return ", "


_SIMPLE = (ast.Constant, ast.Name, ast.Attribute)


def _pure(node: ast.AST) -> bool:
    """Evaluating ``node`` has no side effect, so it may move among the arguments."""
    if isinstance(node, ast.UnaryOp):
        return _pure(node.operand)
    if isinstance(node, ast.Attribute):
        return _pure(node.value)
    return isinstance(node, _SIMPLE)


class _Plan:
    """Text edits to one call's arguments; insertions at one place are joined in order."""

    def __init__(self, call: CallText) -> None:
        self.call = call
        self.inserts: dict[int, list[str]] = {}
        self.replaces: dict[int, tuple[int, str]] = {}

    def before(self, arg: Arg | None, text: str) -> None:
        """``text`` as an argument of its own before ``arg`` (None: after the last argument)."""
        sep = self.call.separator
        if arg is not None:
            self.inserts.setdefault(arg.start, []).append(text + sep)
        elif self.call.args:
            self.inserts.setdefault(self.call.args[-1].end, []).append(sep + text)
        else:
            self.inserts.setdefault(self.call.open, []).append(
                (", " if self.inserts.get(self.call.open) else "") + text
            )

    def replace(self, start: int, end: int, text: str) -> None:
        self.replaces[start] = (end, text)

    def edits(self) -> list[Edit]:
        out = []
        for start in sorted(self.inserts.keys() | self.replaces.keys()):
            prefix = "".join(self.inserts.get(start, ()))
            end, text = self.replaces.get(start, (start, ""))
            out.append(Edit(start, end, prefix + text))
        return out


# ---- the rule family -----------------------------------------------------------------------


def check(
    tree: ast.Module,
    source: Source,
    names: Names,
    rules: Sequence[Rule],
    settings: Settings,
) -> list[Finding]:
    """Every finding of the symbol-table rules in ``rules``."""
    symbols = [s for r in rules for s in r.symbols]
    if not symbols:
        return []
    visitor = _Renames(symbols, source, names, settings.target_torch)
    visitor.run()
    _constructors_beside_values(visitor, source.path, settings.project.get("class_values", {}))
    for rule in rules:
        for module in rule.unused_imports:
            visitor.findings += _unused_imports(module, rule.code, names, source)
    return visitor.findings


def _one(finding: Finding | None) -> list[Finding]:
    return [finding] if finding is not None else []


def _unused_imports(module: str, code: str, names: Names, source: Source) -> list[Finding]:
    """Imports of ``module`` (or its submodules) that nothing reads: a file whose
    ``from apex.fp16_utils import *`` outlived its uses had no finding, and after ``fix`` it
    still needed apex to import (the 41st review). Named imports get the apex families'
    unused-import finding; a star import is unused when no name it binds is read here."""
    from ampmigrate.apex.api.unused import unused_import, unused_star

    found: list[Finding] = []
    stars: dict[ast.ImportFrom, list[str]] = {}
    for binding in names.imports():
        stmt, alias = binding.node, binding.alias
        if alias is None:
            continue
        if isinstance(stmt, ast.ImportFrom):
            base = stmt.module or ""
            parent, _, leaf = module.rpartition(".")
            if not stmt.level and base == parent and alias.name == leaf:
                found += _one(unused_import(names, stmt, alias, module, code, source.path, source))
                continue  # (`from apex import fp16_utils`)
            if stmt.level or not (base == module or base.startswith(module + ".")):
                continue
            if alias.name == "*":
                stars.setdefault(stmt, []).append(binding.name)
                continue
            full = f"{base}.{alias.name}"
        elif alias.name == module or alias.name.startswith(module + "."):
            if binding.name != (alias.asname or alias.name.partition(".")[0]):
                continue  # (`import a.b` binds `a` and `a.b`: one finding)
            full = alias.name
        else:
            continue
        found += _one(unused_import(names, stmt, alias, full, code, source.path, source))
    for stmt, bound in stars.items():
        found += _one(unused_star(names, stmt, bound, code, source.path, source))
    return found


def _constructors_beside_values(
    visitor: _Renames, path: str, elsewhere: Mapping[tuple[str, str], tuple[str, ...]]
) -> None:
    """A constructor migrated while the old class is also used as a value (a registry key,
    ``type(x) is``) in this file or another of the run is unsafe: the new instance is no longer
    that class there. The message names the places."""
    here = visitor.value_places(path or "<source>")
    for finding, sym in visitor.constructors:
        key = (sym.code, sym.device)
        places = sorted(set(here.get(key, [])) | set(elsewhere.get(key, ())))
        if not places or finding.fix is None:
            continue
        finding.fix = replace(finding.fix, safety="unsafe")
        shown = ", ".join(places[:5]) + (f" and {len(places) - 5} more" if len(places) > 5 else "")
        finding.message += (
            f"; the old class is also used as a value at {shown}: an instance of `{sym.new}` "
            "is not the old class there"
            + (", and a patch of the old name (`mock.patch`) no longer intercepts the call"
               if _BY_NAME in shown else "")
        )  # fmt: skip


def class_values(items: Iterable[tuple[str, bytes]], settings: Settings) -> dict:
    """(rule code, device) -> "path:line" of every place in these files where an old class is
    used as a value that is not rewritten safely (the project pass behind the message above)."""
    from ampmigrate.engine.analyze import parse

    rules = [r for r in settings.rules if any(s.kind == "class" for s in r.symbols)]
    symbols = [s for r in rules for s in r.symbols if s.kind == "class" and not s.when_missing]
    out: dict[tuple[str, str], list[str]] = {}
    for path, data in items:
        try:
            tree = parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        visitor = _Renames(symbols, Source.from_bytes(data, path), Names(tree))
        visitor.run()
        for key, places in visitor.value_places(path).items():
            out.setdefault(key, []).extend(places)
    return {key: tuple(places) for key, places in out.items()}


_BY_NAME = "(by name, in a string)"
# an old dotted name written in a string: `mock.patch("torch.cuda.amp.autocast")`
_NAMED = re.compile(r"""["'](torch\.(?:cuda|cpu)\.amp\.[\w.]+)["']""")


class _Renames:
    def __init__(
        self,
        symbols: Iterable[Symbol],
        source: Source,
        names: Names,
        target_torch: tuple[int, ...] | None = None,
    ) -> None:
        self.table = {s.old: _for_target(s, target_torch) for s in symbols}
        self.source = source
        self.names = names
        self.findings: list[Finding] = []
        self._last_segments = {name.rsplit(".", 1)[-1] for name in self.table}
        # Names a symbol may be imported as (`from torch.cuda.amp import autocast as ac`).
        self._aliases = {b.alias.asname for b in names.imports() if b.alias and b.alias.asname}
        self._stopped: set[ast.AST] = set()  # matched: nothing inside is looked at
        # (rule code, device, line) where an old class is used as a value that is not rewritten
        # safely: a constructor migrated anywhere in the run changes what matches there
        self.class_values: list[tuple[str, str, int]] = []
        self.constructors: list[tuple[Finding, Symbol]] = []  # class calls that got a fix
        # (rule code, device, line) where an old class is named in a string (a patch target)
        self.named_strings: list[tuple[str, str, int]] = []
        self._dispatched: set[ast.AST] = set()  # names bound per device by an if/else
        self._gates: dict[ast.AST, bool] = {}

    def value_places(self, path: str) -> dict[tuple[str, str], list[str]]:
        """(rule code, device) -> "path:line" of each use of an old class as a value, and of
        its old name in a string, in this file."""
        places: dict[tuple[str, str], list[str]] = {}
        for code, device, line in self.class_values:
            places.setdefault((code, device), []).append(f"{path}:{line}")
        for code, device, line in self.named_strings:
            places.setdefault((code, device), []).append(f"{path}:{line} {_BY_NAME}")
        return places

    # ---- name resolution -------------------------------------------------------------------

    def _match(self, node: ast.AST) -> tuple[Symbol, bool] | None:
        """The symbol ``node`` refers to, and whether the binding is unconditional."""
        if isinstance(node, ast.Attribute):
            if node.attr not in self._last_segments:
                return None
        elif isinstance(node, ast.Name):
            if node.id not in self._last_segments and node.id not in self._aliases:
                return None
        else:
            return None
        if self._gated(node):
            return None
        names = self.names.qualified(node)
        hits = [self.table[n] for n in sorted(names) if n in self.table]  # deterministic
        if not hits:
            return None
        if hits[0].when_missing:  # a current API, checked for an argument it should have
            return (hits[0], True) if len(names) == 1 else None
        if any(n.startswith(_MODERN_PREFIXES) for n in names):
            return None  # a compatibility shim: bound to the new API on current torch
        if len(hits) == len(names):  # every binding is a deprecated symbol
            if len({(h.new, h.device) for h in hits}) > 1:
                self._dispatched.add(node)  # `if cuda: from torch.cuda.amp import X else: cpu`
            return hits[0], True
        return hits[0], False

    def _binding(self, node: ast.AST, module: str) -> tuple[str, bool]:
        """A name bound to ``module`` where ``node`` is, and whether an import must be added."""
        for name in [module, *sorted(self._aliases)]:
            qualified = self.names.qualified_text(node, name)
            if qualified and qualified == {module}:
                return name, False
        if not self.names.bindings(node, module):
            return module, True
        raise NoFix(f"`{module}` is bound to something else here")

    # ---- planning replacements ---------------------------------------------------------------

    @staticmethod
    def _new_expr(text: str, torch_name: str) -> str:
        if text.startswith("torch.") and torch_name != "torch":
            return torch_name + text[len("torch") :]
        return text

    def _fix(
        self,
        sym: Symbol,
        node: ast.AST,
        ref: ast.AST,
        safety: str,
        edits: Callable[[str], list[Edit]],
        unconditional: bool,
        extra_imports: frozenset[str] = frozenset(),
    ) -> Fix:
        if self._dispatched and (node in self._dispatched or ref in self._dispatched):
            raise NoFix(
                "the name is bound to the classes of different devices by a branch (`"
                + "`, `".join(sorted(self.names.qualified(ref)))
                + "`): write the device in each branch"
            )
        torch_name, add_torch = self._binding(node, "torch")
        branch = self._branch_floor(node)
        return Fix(
            safety if unconditional else "unsafe",
            edits=tuple(edits(torch_name)),
            add_imports=extra_imports | ({"torch"} if add_torch else set()),
            remove_imports=self.names.import_edits(ref),
            # on the newer side of a version branch the branch is the floor
            min_torch=() if branch and branch >= sym.min_torch else sym.min_torch,
        )

    def _branch_floor(self, node: ast.AST) -> tuple[int, ...] | None:
        """The torch version the innermost version branch around ``node`` guarantees."""
        child = node
        for above in self.names.ancestors(node):
            if type(above) is ast.If or type(above) is ast.IfExp:
                newer = _version_side(self.source, above, child)
                if newer:
                    return newer
            child = above
        return None

    def _map_args(self, sym: Symbol, plan: _Plan, args: Sequence[Arg], torch_name: str) -> bool:
        """Plan the old call arguments -> the new ones; returns whether the mapping is exact.

        Kept arguments stay where they are; positional ones that become keywords get their name
        (and, when they are side-effect free, the new signature's order); inserted keywords go
        where the new signature puts them among the call's keywords.
        """
        if any(a.star == "*" for a in args):
            raise NoFix("a `*args` splat cannot be mapped to the new signature")
        positional = [a for a in args if not a.keyword and not a.star]
        named = [a for a in args if a.keyword or a.star == "**"]
        has_splat = any(a.star == "**" for a in args)
        if len(positional) > len(sym.params):
            raise NoFix(f"takes at most {len(sym.params)} positional argument(s)")
        given = {sym.params[i] for i in range(len(positional))}
        given |= {a.keyword for a in named if a.keyword}
        required = set(sym.params[: sym.required])
        if not has_splat and not required <= given:
            raise NoFix("the call is missing a required argument and already fails")
        for text in sym.prepend:
            plan.before(args[0] if args else None, self._new_expr(text, torch_name))
        order = sym.signature or sym.params
        rank = {name: i for i, name in enumerate(order)}
        keywords: list[tuple[str, Arg]] = [(a.keyword, a) for a in named if a.keyword]
        values = {a.keyword: _value(a.node) for a in named if a.keyword}
        if sym.positional == "keywords":
            values |= {sym.params[i]: a.node for i, a in enumerate(positional)}
        if sym.positional == "keywords" and positional:
            slots = [(sym.params[i], a) for i, a in enumerate(positional)]
            moved = sorted(slots, key=lambda s: rank.get(s[0], len(order)))
            if moved != slots and all(_pure(a.node) for _, a in slots):
                for (_, slot), (name, arg) in zip(slots, moved, strict=True):
                    text = self.source.text[arg.start : arg.end]
                    plan.replace(slot.start, slot.end, f"{name}={text}")
                keywords = [(name, slot) for (_, slot), (name, _) in zip(slots, moved, strict=True)]
                keywords += [(a.keyword, a) for a in named if a.keyword]
            else:
                for name, arg in slots:
                    plan.replace(arg.start, arg.start, f"{name}=")
                keywords = slots + keywords
        disabled = is_constant(values.get("enabled"), False)
        inserted = [(k, v) for k, v in sym.keywords if k not in given]
        exact = True
        for name, text in sym.defaults:
            if name in given or disabled:
                continue
            if has_splat:
                exact = False  # the default may come from the splat; adding it could clash
                continue
            inserted.append((name, text))
        first_splat = next((a for a in args if a.star == "**"), None)
        for name, text in sorted(inserted, key=lambda kv: rank.get(kv[0], len(order))):
            later = [a for k, a in keywords if rank.get(k, len(order)) > rank.get(name, len(order))]
            at = min(later, key=lambda a: a.start, default=first_splat)
            if at is not None and first_splat is not None and first_splat.start < at.start:
                at = first_splat
            plan.before(at, f"{name}={self._new_expr(text, torch_name)}")
        return exact

    # ---- contexts ----------------------------------------------------------------------------

    def _report(self, sym: Symbol, node: ast.AST, detail: str, fix: Fix | None) -> None:
        if sym.kind == "manual":
            self.findings.append(Finding(sym.code, f"`{sym.old}`: {sym.guidance}", node, None))
            return
        call = f'`{sym.new}("{sym.device}", ...)`' if sym.prepend else f"`{sym.new}(...)`"
        if sym.keywords:
            kws = ", ".join(f"{k}={v}" for k, v in sym.keywords)
            call = f"`{sym.new}({kws}, ...)`"
        message = f"`{sym.old}` is deprecated, use {call}"
        if sym.note:
            message += f"; {sym.note}"
        if detail:
            message += f"; {detail}"
        self.findings.append(Finding(sym.code, message, node, fix))

    def _call(self, node: ast.Call, sym: Symbol, unconditional: bool) -> None:
        try:
            call = CallText.read(self.source, node)
            torch_name, _ = self._binding(node, "torch")
            exact = self._map_args(sym, _Plan(call), call.args, torch_name)

            def edits(torch_name: str) -> list[Edit]:
                plan = _Plan(call)
                self._map_args(sym, plan, call.args, torch_name)
                start, end = self.source.span(node.func)
                return [Edit(start, end, self._new_expr(sym.new, torch_name)), *plan.edits()]

            fix = self._fix(
                sym, node, node.func, "safe" if exact else "unsafe", edits, unconditional
            )
            notes = [] if exact else ["a `**` splat hides whether the old dtype default applies"]
            if not unconditional:
                notes.append("the name is also bound by a fallback, which the fix bypasses")
            self._report(sym, node, "; ".join(notes), fix)
            if sym.kind == "class":
                self.constructors.append((self.findings[-1], sym))
        except NoFix as reason:
            self._report(sym, node, f"no automatic fix: {reason}", None)

    def _missing_argument(self, node: ast.Call, sym: Symbol, unconditional: bool) -> None:
        """A current API called without an argument whose default is about to change."""
        name = sym.when_missing
        index = sym.params.index(name)
        if any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) > index:
            return  # given positionally, or possibly through a splat
        if any(k.arg is None for k in node.keywords):
            return
        if any(k.arg == name for k in node.keywords):
            return
        try:
            call = CallText.read(self.source, node)
            plan = _Plan(call)
            # Only string literals are inserted: no import is needed, none is touched.
            self._map_args(sym, plan, call.args, "torch")
        except NoFix:
            return
        safety = "safe" if unconditional else "unsafe"
        fix = Fix(safety, edits=tuple(plan.edits()), min_torch=sym.min_torch)
        self.findings.append(Finding(sym.code, sym.guidance, node, fix))

    def _partial(self, node: ast.Call, sym: Symbol, unconditional: bool) -> None:
        """``functools.partial(old, ...)``: the bound arguments map like a call's."""
        ref = node.args[0]
        if sym.kind == "manual":
            self._report(sym, ref, "", None)
            return
        try:
            call = CallText.read(self.source, node)
            torch_name, _ = self._binding(node, "torch")
            self._map_args(sym, _Plan(call), call.args[1:], torch_name)

            def edits(torch_name: str) -> list[Edit]:
                plan = _Plan(call)
                self._map_args(sym, plan, call.args[1:], torch_name)
                start, end = self.source.span(ref)
                return [Edit(start, end, self._new_expr(sym.new, torch_name)), *plan.edits()]

            # Positional arguments at the partial's call sites would land in new parameters.
            safety = "unsafe" if sym.positional == "keywords" else "safe"
            fix = self._fix(sym, node, ref, safety, edits, unconditional)
            self._report(sym, ref, "", fix)
        except NoFix as reason:
            self._report(sym, ref, f"no automatic fix: {reason}", None)

    def _reference(
        self, node: ast.expr, sym: Symbol, unconditional: bool, identity: str = ""
    ) -> None:
        """A reference that is not called here.

        A conditionally bound name (``except ImportError: GradScaler = None``) read as a value is
        a feature check, not a use: it is left alone, and so is the import it reads. A class
        stays a class: in a type position or used by identity (a dict key, ``type(x) is``) it
        becomes the new class; elsewhere it becomes a ``functools.partial`` only where the value
        is only ever called, and is refused otherwise.
        """
        typed = self._typed(node)
        if not unconditional and not typed and not identity:
            return
        if sym.kind == "manual":
            self._report(sym, node, "", None)
            return
        start, end = self.source.span(node)
        try:
            if typed or identity:
                if sym.kind != "class":
                    raise NoFix("a function used as a type")

                def as_type(torch_name: str) -> list[Edit]:
                    return [Edit(start, end, self._new_expr(sym.new, torch_name))]

                detail = ""
                if identity:
                    self.class_values.append((sym.code, sym.device, node.lineno))
                    detail = (
                        f"used as {identity}: becomes the class `{sym.new}`, which an instance "
                        "made with the old class elsewhere (code not migrated) no longer is"
                    )
                safety = "unsafe" if identity else "safe"
                fix = self._fix(sym, node, node, safety, as_type, unconditional)
                self._report(sym, node, detail, fix)
                return
            if sym.kind == "class" and not self._only_called(node):
                if isinstance(self.names.parent(node), ast.Call | ast.keyword):
                    # passed on: maybe registered (`register(cls, save)`), as a key is
                    self.class_values.append((sym.code, sym.device, node.lineno))
                raise NoFix(
                    "the class is used as a value that is not only called (it may be compared, "
                    f"registered or subclassed): `{sym.new}` is the class but takes the device "
                    "first, a `functools.partial` takes the old arguments but is no class; "
                    "choose per use"
                )
            functools_name, add_functools = self._binding(node, "functools")

            def as_partial(torch_name: str) -> list[Edit]:
                args = [self._new_expr(sym.new, torch_name)]
                args += [self._new_expr(s, torch_name) for s in sym.prepend]
                args += _keywords(sym, sym.keywords + sym.defaults, torch_name, self._new_expr)
                return [Edit(start, end, f"{functools_name}.partial({', '.join(args)})")]

            extra = frozenset({"functools"} if add_functools else ())
            fix = self._fix(sym, node, node, "unsafe", as_partial, unconditional, extra)
            detail = "used as a value: becomes a `functools.partial`"
            if sym.kind == "class":
                detail += (
                    " (it is only called, here or in the functions of this file it is handed "
                    "to; it is no class for `isinstance`)"
                )
            self._report(sym, node, detail, fix)
        except NoFix as reason:
            self._report(sym, node, f"no automatic fix: {reason}", None)

    def _aliased(self, node: ast.expr) -> bool:
        """``node`` is the whole value of an assignment (``float_function =
        amp.float_function``), outside a ``try:`` that catches AttributeError (there it probes
        for the attribute; one that catches only ImportError guards the package's import)."""
        parent = self.names.parent(node)
        if not (isinstance(parent, ast.Assign | ast.AnnAssign) and parent.value is node):
            return False
        child = node
        for above in self.names.ancestors(node):
            if (
                type(above) is ast.Try
                and any(child is s for s in above.body)
                and any(h.type is None or _catches_missing_api(h.type, _PROBES)
                        for h in above.handlers)
            ):  # fmt: skip
                return False
            child = above
        return True

    def _only_called(self, node: ast.expr) -> bool:
        """``node`` is assigned (possibly as one side of ``a if c else b``) to a name or
        attribute whose every read in this file calls it (``ctx = old``; ``with ctx():``)."""
        value: ast.AST = node
        parent = self.names.parent(value)
        while isinstance(parent, ast.IfExp | ast.BoolOp) and value is not getattr(
            parent, "test", None
        ):
            value, parent = parent, self.names.parent(parent)
        if not isinstance(parent, ast.Assign | ast.AnnAssign) or parent.value is not value:
            return False
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name | ast.Attribute):
            return False
        target = targets[0]
        text = dotted(target)
        last = target.id if isinstance(target, ast.Name) else target.attr
        reads = [
            n for n in self.names.spelled(last) if isinstance(n.ctx, ast.Load) and dotted(n) == text
        ]
        return bool(reads) and all(
            (isinstance(p := self.names.parent(n), ast.Call) and p.func is n)
            or self._handed_to_caller(n)
            for n in reads
        )

    def _handed_to_caller(self, read: ast.expr) -> bool:
        """``read`` is an argument of a call of a function of this file whose parameter for it
        is only ever called there (timm's ``train_one_epoch(..., amp_autocast=amp_autocast)``,
        ``with amp_autocast():``): handing the value on is no other use."""
        parent = self.names.parent(read)
        call = self.names.parent(parent) if isinstance(parent, ast.keyword) else parent
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            return False
        [*bindings] = self.names.bindings(call.func)
        if len(bindings) != 1 or not isinstance(bindings[0].node, _FUNCTIONS):
            return False
        function = bindings[0].node
        positional = [*function.args.posonlyargs, *function.args.args]
        if isinstance(parent, ast.keyword):
            params = [a for a in [*positional, *function.args.kwonlyargs] if a.arg == parent.arg]
        elif any(isinstance(a, ast.Starred) for a in call.args):
            return False
        else:
            index = next(i for i, a in enumerate(call.args) if a is read)
            params = positional[index : index + 1]
        if not params:
            return False
        uses = [
            n for n in self.names.spelled(params[0].arg)
            if isinstance(n, ast.Name) and function in self.names.ancestors(n)
        ]  # fmt: skip
        return bool(uses) and all(
            isinstance(n.ctx, ast.Load)
            and [b.node for b in self.names.bindings(n)] == [params[0]]
            and isinstance(p := self.names.parent(n), ast.Call)
            and p.func is n
            for n in uses
        )

    def _decorator(self, node: ast.expr) -> bool:
        """A bare decorator (``@old``) becomes a call; whether ``node`` was one."""
        match = self._match(node)
        if not match or match[0].when_missing:
            return False
        sym, unconditional = match
        if sym.kind == "manual":
            self._report(sym, node, "", None)
            return True
        if sym.kind != "decorator":
            message = "a bare class decorator passes the function as `enabled`"
            self._report(sym, node, f"no automatic fix: {message}", None)
            return True
        start, end = self.source.span(node)
        try:

            def as_call(torch_name: str) -> list[Edit]:
                args = [self._new_expr(s, torch_name) for s in sym.prepend]
                args += _keywords(sym, sym.keywords + sym.defaults, torch_name, self._new_expr)
                callee = self._new_expr(sym.new, torch_name)
                return [Edit(start, end, f"{callee}({', '.join(args)})")]

            fix = self._fix(sym, node, node, "safe", as_call, unconditional)
            self._report(sym, node, "", fix)
        except NoFix as reason:
            self._report(sym, node, f"no automatic fix: {reason}", None)
        return True

    def _base(self, base: ast.expr) -> bool:
        """A class's base: reported, never fixed; whether ``base`` was a symbol."""
        match = self._match(base)
        if not match or match[0].when_missing:
            return False
        sym, _ = match
        if sym.kind == "manual":
            self._report(sym, base, "", None)
            return True
        detail = (
            "no automatic fix: a subclass's constructor arguments shift when its base "
            f'becomes `{sym.new}`; rebase it and pass "{sym.device}" as the first argument'
        )
        self._report(sym, base, detail, None)
        return True

    # ---- contexts of a reference, read off its ancestors --------------------------------------

    def _gated(self, node: ast.AST) -> bool:
        """Inside compatibility code: a branch on the torch version whose other side uses the
        new API, or an ``except AttributeError:``-style fallback (its clause included)."""
        child = node
        for above in self.names.ancestors(node):
            kind = type(above)
            side = (kind is ast.If or kind is ast.IfExp) and _version_side(
                self.source, above, child, older=True
            )
            newer = (kind is ast.If or kind is ast.IfExp) and _version_side(
                self.source, above, child
            )
            child = above
            if side and side <= DEPRECATED_SINCE:
                return True  # the older side runs only where nothing is deprecated yet
            if newer:
                continue  # the side for the newer torch: its deprecated calls warn there
            if kind is ast.If or kind is ast.IfExp or kind is ast.ExceptHandler:
                gate = self._gates.get(above)
                if gate is None:
                    if kind is ast.ExceptHandler:
                        gate = _catches_missing_api(above.type, _FALLBACK)
                    else:
                        gate = self._gate(above)
                    self._gates[above] = gate
                if gate:
                    return True
        return False

    def _probed(self, node: ast.AST) -> bool:
        """Read in the body of a ``try:`` that catches a missing API: a feature probe."""
        child = node
        for above in self.names.ancestors(node):
            if (
                type(above) is ast.Try
                and any(child is s for s in above.body)
                and any(_catches_missing_api(h.type) for h in above.handlers)
            ):
                return True
            child = above
        return False

    def _contained(self, node: ast.AST) -> bool:
        """Compared or registered (`f in [old, new]`), never called."""
        return any(isinstance(above, _CONTAINERS) for above in self.names.ancestors(node))

    def _typed(self, node: ast.AST) -> bool:
        """A type position: an annotation, an ``except`` clause, ``isinstance``'s classes."""
        child = node
        marked = True  # still on the chain of tuples that `_mark_types` followed
        for above in self.names.ancestors(node):
            kind = type(above)
            if kind is ast.arg or kind is ast.AnnAssign:
                if above.annotation is child:
                    return True
            elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                if above.returns is child:
                    return True
            elif marked and (kind is ast.ExceptHandler or kind is ast.Call):
                classes = above.type if kind is ast.ExceptHandler else self._classes(above)
                if classes is child:
                    return True
            if kind is not ast.Tuple:
                marked = False
            child = above
        return False

    def _classes(self, call: ast.Call) -> ast.AST | None:
        """The classes argument of ``isinstance``/``issubclass`` (two arguments) and of
        ``self.assertIsInstance(x, cls[, msg])``: the second positional argument."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _TYPE_ASSERTIONS:
            return call.args[1] if len(call.args) >= 2 else None
        args = _ordered(call)
        if len(args) != 2 or self._match(call.func):
            return None
        return _value(args[1]) if self.names.qualified(call.func) & _TYPE_CHECKS else None

    def _identity(self, node: ast.AST) -> str:
        """How a class is used by identity here, or "": a dict key, a subscript's key (a registry
        lookup), an operand of ``is``/``==`` (``type(x) is cls``)."""
        parent = self.names.parent(node)
        kind = type(parent)
        if kind is ast.Dict and any(node is k for k in parent.keys):
            return "a dict key"
        if kind is ast.Subscript and parent.slice is node:
            return "a registry key"
        if (
            kind is ast.Compare
            and all(type(op) in _IDENTITY_OPS for op in parent.ops)
            and not any(isinstance(o, ast.Constant) for o in [parent.left, *parent.comparators])
        ):  # `type(x) is cls`; `cls is not None` is a feature check
            return "an operand of `is`/`==`"
        return ""

    # ---- the walk ----------------------------------------------------------------------------

    def run(self) -> None:
        """Only names spelled like a symbol are candidates; each one's context is read off its
        ancestors, outer candidates first (a matched one hides what is inside it)."""
        text = self.source.text
        if "amp." in text:
            for match in _NAMED.finditer(text):
                sym = self.table.get(match.group(1))
                if sym is not None and sym.kind == "class":
                    line = self.source.line_of(match.start())
                    self.named_strings.append((sym.code, sym.device, line))
        found = [n for s in self._last_segments for n in self.names.spelled(s)]
        found += [n for a in self._aliases for n in self.names.spelled(a) if type(n) is ast.Name]
        for node in sorted(set(found), key=_outer_first):
            self._candidate(node)

    def _candidate(self, node: ast.expr) -> None:
        if self._stopped and any(a in self._stopped for a in self.names.ancestors(node)):
            return
        parent = self.names.parent(node)
        kind = type(parent)
        if kind is ast.Call:
            if parent.func is node:
                if self._visit_call(parent):
                    self._stopped.add(node)
                    return
            elif self._visit_partial(parent, node):
                self._stopped.add(node)
                return
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            if any(node is d for d in parent.decorator_list) and self._decorator(node):
                self._stopped.add(node)
                return
            if kind is ast.ClassDef and any(node is b for b in parent.bases) and self._base(node):
                self._stopped.add(node)
                return
        if self._visit_reference(node):
            self._stopped.add(node)

    def _visit_call(self, node: ast.Call) -> bool:
        """A call of a symbol; whether it was one."""
        match = self._match(node.func)
        if not match:
            return False
        if match[0].when_missing:
            self._missing_argument(node, *match)
        elif match[0].kind == "manual":
            self._report(match[0], node, "", None)
        else:
            self._call(node, *match)
        return True

    def _visit_partial(self, node: ast.Call, first: ast.expr) -> bool:
        """``functools.partial(symbol, ...)``; whether ``first`` was taken as its symbol."""
        args = _ordered(node)
        if args[0] is not first or self._match(node.func):
            return False
        if _PARTIAL not in self.names.qualified(node.func):
            return False
        match = self._match(first)
        if not match or match[0].when_missing:
            return False
        self._partial(node, *match)
        return True

    def _visit_reference(self, node: ast.expr) -> bool:
        """A symbol read here; whether the walk stops at ``node`` (it matched)."""
        match = self._match(node)
        if match is None:
            return False
        if match[0].when_missing:
            return True  # only calls can miss an argument
        if match[0].kind == "manual" and self._aliased(node):
            self._report(match[0], node, "", None)  # `f = amp.float_function`: each use is one
            return True
        typed = self._typed(node)
        identity = "" if typed or match[0].kind != "class" else self._identity(node)
        if self._probed(node) and not typed:
            return True  # `try: torch.cpu.amp.autocast except AttributeError`: a probe
        if not typed and not identity and self._contained(node):
            return True  # `func in [torch.cuda.amp.autocast, ...]`: a membership test
        self._reference(node, *match, identity)
        return True

    # Compatibility code is left alone: a branch chosen by the torch version, and a value
    # read inside `try:` to probe for the API. Rewriting either defeats its purpose.

    def _gate(self, node: ast.If | ast.IfExp) -> bool:
        """A branch on the torch version (or on ``hasattr``) whose other side uses the new API."""
        if not _VERSION_TEST.search(self.source.segment(node.test)):
            return False
        return bool(_MODERN_USE.search(self._leading_comments(node) + self.source.segment(node)))

    def _leading_comments(self, node: ast.stmt | ast.expr) -> str:
        """The comment lines right above a statement (libcst counted them as part of it)."""
        if not isinstance(node, ast.stmt):
            return ""
        lines = []
        line = node.lineno - 1
        while line >= 1:
            text = self.source.line(line).strip()
            if text and not text.startswith("#"):
                break
            lines.append(text)
            line -= 1
        return "\n".join(reversed(lines))


DEPRECATED_SINCE = (2, 4)  # every torch AMP deprecation starts in 2.4.0 (torch-amp-api.md)
_VERSION_NUMBER = re.compile(r"(\d+)\s*[._,]\s*(\d+)")  # "2.4", 2_4, (2, 4)
_AT_LEAST = re.compile(r"greater|_ge_|_ge\b|at_?least|newer|_gte?_?\d", re.IGNORECASE)
_BELOW = re.compile(r"less|_lt_|_lt\b|older|below|lower", re.IGNORECASE)


def _version_side(
    source: Source, branch: ast.If | ast.IfExp, child: ast.AST, older: bool = False
) -> tuple | None:
    """The torch version ``child``'s side of a torch-version branch runs on at least, where that
    side is the newer one (``if Version(torch.__version__) < Version("2.4"): ... else: <here>``,
    ``if is_torch_greater_or_equal("2.4"): <here>``); with ``older``: the version it runs
    below, where it is the older side. None otherwise."""
    if child is branch.test:
        return None
    body = branch.body if type(branch) is ast.If else [branch.body]
    in_body = any(child is s for s in body)
    test, flipped = branch.test, False
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, flipped = test.operand, not flipped
    if isinstance(test, ast.BoolOp):
        return None  # `new or forced`: no side is known to run on one torch only
    text = source.segment(test)
    if "torch" not in text.lower():
        return None
    number = _VERSION_NUMBER.search(text)
    if number is None:
        return None
    version = (int(number.group(1)), int(number.group(2)))
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left = source.segment(test.left).lower()
        op = type(test.ops[0])
        if "version" not in left:  # `Version("2.4") <= torch_version`
            op = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}.get(op)
        if op in (ast.Gt, ast.GtE):
            newer_body = True
        elif op in (ast.Lt, ast.LtE):
            newer_body = False
        else:
            return None
        if older and op in (ast.Gt, ast.LtE):
            return None  # the older side includes the release named: not below it
    elif isinstance(test, ast.Call) and test.args and isinstance(test.args[0], ast.Constant):
        op = str(test.args[0].value)  # is_torch_version("<", "2.4")
        if op in (">=", ">"):
            newer_body = True
        elif op in ("<", "<="):
            newer_body = False
        elif _AT_LEAST.search(source.segment(test.func)):
            newer_body = True
        else:
            return None
    elif _AT_LEAST.search(text) and not _BELOW.search(text):
        newer_body = True
    elif _BELOW.search(text) and not _AT_LEAST.search(text):
        newer_body = False
    else:
        return None
    if flipped:
        newer_body = not newer_body
    return version if (newer_body == in_body) != older else None


def _for_target(sym: Symbol, target: tuple[int, ...] | None) -> Symbol:
    """The symbol as the target torch can take it: below its replacement's first release, the
    replacement an older release has (``torch.autocast`` for 1.10-1.11), where there is one."""
    if target is None or target >= sym.min_torch:
        return sym
    for since, new in sorted(sym.older, reverse=True):
        if target >= since:
            note = (
                f"written as `{new}`: the project's torch floor "
                f"{'.'.join(map(str, target))} has no `{sym.new}` (since "
                f"{'.'.join(map(str, sym.min_torch))})"
            )
            return replace(sym, new=new, min_torch=since, note=note)
    return sym


def _outer_first(node: ast.AST) -> tuple[int, int, int, int]:
    """Source order, an ancestor before what it contains (it starts no later, ends no earlier)."""
    return (node.lineno, node.col_offset, -node.end_lineno, -node.end_col_offset)


def _ordered(call: ast.Call) -> list[ast.expr | ast.keyword]:
    """A call's arguments in source order (positional and keyword ones may interleave)."""
    if not call.keywords:
        return list(call.args)
    return sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))


def _value(node: ast.AST | None) -> ast.AST | None:
    return node.value if isinstance(node, ast.keyword) else node


def _keywords(sym: Symbol, pairs, torch_name: str, new_expr) -> list[str]:
    """``name=value`` for each pair, in the new signature's order."""
    order = sym.signature or sym.params
    rank = {name: i for i, name in enumerate(order)}
    ordered = sorted(pairs, key=lambda kv: rank.get(kv[0], len(order)))
    return [f"{k}={new_expr(v, torch_name)}" for k, v in ordered]
