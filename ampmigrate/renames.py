"""The generic engine behind every rename rule: resolve names, map arguments, build fixes.

The rules themselves are data (``rules/AMP1xx.toml``). This visitor finds every reference whose
qualified name is in their symbol table, through any import form, and decides per context
(call, decorator, ``functools.partial``, type position, subclass, other value) what the
replacement is and how safe it is.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

import libcst as cst
from libcst.metadata import (
    ImportAssignment,
    QualifiedName,
    Scope,
    ScopeProvider,
)

from ampmigrate.catalog import Symbol
from ampmigrate.findings import Finding, Fix, ImportEdit

# Names whose presence among a reference's qualified names marks a compatibility shim
# (``try: from torch.amp import X except ImportError: from torch.cuda.amp import X``).
_MODERN_PREFIXES = ("torch.amp.", "torch.autocast", "torch.GradScaler")
_TYPE_CHECKS = {"builtins.isinstance", "builtins.issubclass"}
_PARTIAL = "functools.partial"
_ALIAS = re.compile(rb"\bas\s+([A-Za-z_]\w*)")
_VERSION_TEST = re.compile(r"version|hasattr|getattr|greater|less|torch_?\d", re.IGNORECASE)
_MODERN_USE = re.compile(
    r"\bamp\.(?:autocast|GradScaler|custom_fwd|custom_bwd)\(\s*(?:[\"']|device)"
    r"|\btorch\.(?:autocast|GradScaler)\b|_autocast_dtype\(\s*\w|is_autocast_enabled\(\s*\w"
)
# Inside these a reference is compared or registered, never called (`f in [old, new]`).
_CONTAINERS = (cst.Comparison, cst.List, cst.Set, cst.Dict)
_MISSING_API = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "Exception"})
_FALLBACK = frozenset({"AttributeError", "ImportError", "ModuleNotFoundError", "TypeError"})


def _catches_missing_api(
    handler_type: cst.BaseExpression | None, kinds: frozenset[str] = _MISSING_API
) -> bool:
    if handler_type is None:
        return kinds is _MISSING_API  # a bare except probes, but is no fallback
    if isinstance(handler_type, cst.Tuple):
        names = [element.value for element in handler_type.elements]
    else:
        names = [handler_type]
    return any((_dotted(n) or "").rsplit(".", 1)[-1] in kinds for n in names)


@functools.cache
def _expr(source: str) -> cst.BaseExpression:
    return cst.parse_expression(source)


def _dotted(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


def qualified_names(scope: Scope | None, node: cst.CSTNode) -> set[str]:
    """The dotted names ``node`` may refer to through the file's imports."""
    return {q.name for q in scope.get_qualified_names_for(node)} if scope is not None else set()


def is_name(node: cst.BaseExpression, value: str) -> bool:
    return isinstance(node, cst.Name) and node.value == value


def disabled_by_keyword(args: Sequence[cst.Arg]) -> bool:
    """The call passes ``enabled=False`` literally."""
    return any(
        a.keyword and a.keyword.value == "enabled" and is_name(a.value, "False") for a in args
    )


def _root_name(node: cst.BaseExpression) -> cst.Name | None:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node if isinstance(node, cst.Name) else None


def _kw(name: str, value: cst.BaseExpression, comma=cst.MaybeSentinel.DEFAULT) -> cst.Arg:
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
        comma=comma,
    )


def _join(original: Sequence[cst.Arg], new: list[cst.Arg], fresh: set[int]) -> list[cst.Arg]:
    """Give ``new`` commas that keep the layout of ``original`` (one line or one per line).

    Arguments carried over keep their own comma (and its comments) unless they were last;
    inserted ones (indices in ``fresh``) copy the separator the call already uses.
    """
    sep: cst.Comma | cst.MaybeSentinel = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if len(original) > 1 and isinstance(original[0].comma, cst.Comma):
        sep = original[0].comma
    trailing = original[-1].comma if original else cst.MaybeSentinel.DEFAULT
    last_original = original[-1] if original else None
    out = []
    for i, arg in enumerate(new):
        if i == len(new) - 1:
            comma = trailing
        elif i in fresh or arg.comma is cst.MaybeSentinel.DEFAULT or arg is last_original:
            comma = sep
        else:
            comma = arg.comma
        out.append(arg.with_changes(comma=comma))
    return out


def import_edits(scope: Scope | None, root: cst.Name | None) -> tuple[ImportEdit, ...]:
    """The imports that bind ``root`` in ``scope``, as edits to apply once they are unused."""
    if root is None or scope is None:
        return ()
    edits = []
    for assignment in scope[root.value]:
        if not isinstance(assignment, ImportAssignment):
            continue
        stmt = assignment.node
        if isinstance(stmt.names, cst.ImportStar):
            continue
        for alias in stmt.names:
            if (alias.evaluated_alias or alias.evaluated_name) != root.value:
                continue
            if isinstance(stmt, cst.Import):
                if alias.asname is None:
                    continue  # `import torch.cuda.amp` binds `torch`, which stays in use
                edits.append(ImportEdit(alias.evaluated_name, None, alias.evaluated_alias))
            elif stmt.module is not None and not stmt.relative:
                module = _dotted(stmt.module)
                edits.append(ImportEdit(module, alias.evaluated_name, alias.evaluated_alias))
    return tuple(edits)


class NoFix(Exception):
    """Raised while building a fix to say why there is none; the text joins the message."""


class RenameVisitor(cst.CSTVisitor):
    # Qualified names are asked of the scope for the few candidate nodes only: libcst's
    # QualifiedNameProvider would resolve every name in the file first (a third of the time).
    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(self, symbols: Iterable[Symbol], source: bytes) -> None:
        super().__init__()
        self.table = {s.old: s for s in symbols}
        self.findings: list[Finding] = []
        self._last_segments = {name.rsplit(".", 1)[-1] for name in self.table}
        self._aliases = {m.decode() for m in _ALIAS.findall(source)}
        self._consumed: set[cst.CSTNode] = set()
        self._type_context: set[cst.CSTNode] = set()
        self._annotation_depth = 0
        self._version_gates: list[bool] = []
        self._probes: list[bool] = []
        self._containers = 0

    # ---- name resolution -------------------------------------------------------------------

    def _qualified(self, node: cst.CSTNode) -> set[QualifiedName]:
        scope = self.get_metadata(ScopeProvider, node, None)
        return scope.get_qualified_names_for(node) if scope is not None else set()

    def _match(self, node: cst.BaseExpression) -> tuple[Symbol, bool] | None:
        """The symbol ``node`` refers to, and whether the binding is unconditional."""
        if any(self._version_gates):
            return None
        if isinstance(node, cst.Attribute):
            if node.attr.value not in self._last_segments:
                return None
        elif isinstance(node, cst.Name):
            if node.value not in self._last_segments and node.value not in self._aliases:
                return None
        else:
            return None
        names = {q.name for q in self._qualified(node)}
        hits = [self.table[n] for n in sorted(names) if n in self.table]  # deterministic
        if not hits:
            return None
        if hits[0].when_missing:  # a current API, checked for an argument it should have
            return (hits[0], len(names) == 1) if len(names) == 1 else None
        if any(n.startswith(_MODERN_PREFIXES) for n in names):
            return None  # a compatibility shim: bound to the new API on current torch
        return hits[0], len(names) == 1

    def _binding(self, node: cst.CSTNode, module: str) -> tuple[str, bool]:
        """A name bound to ``module`` where ``node`` is, and whether an import must be added."""
        scope: Scope | None = self.get_metadata(ScopeProvider, node, None)
        if scope is None:
            raise NoFix("cannot resolve the scope")
        candidates = [module, *sorted(self._aliases)]
        for name in candidates:
            qualified = scope.get_qualified_names_for(name)
            if qualified and {q.name for q in qualified} == {module}:
                return name, False
        if not scope[module]:
            return module, True
        raise NoFix(f"`{module}` is bound to something else here")

    def _import_edits(self, node: cst.BaseExpression) -> tuple[ImportEdit, ...]:
        """Imports that bound the root of ``node`` and may become unused after the fix."""
        root = _root_name(node)
        return import_edits(self.get_metadata(ScopeProvider, node, None), root)

    # ---- building replacements -------------------------------------------------------------

    def _new_expr(self, source: str, torch_name: str) -> cst.BaseExpression:
        if source.startswith("torch.") and torch_name != "torch":
            source = torch_name + source[len("torch") :]
        return _expr(source)

    def _fix(
        self,
        sym: Symbol,
        node: cst.CSTNode,
        ref: cst.BaseExpression,
        safety: str,
        build,
        unconditional: bool,
        extra_imports: frozenset[str] = frozenset(),
    ) -> Fix:
        torch_name, add_torch = self._binding(node, "torch")
        if not unconditional:
            safety = "unsafe"
        return Fix(
            safety=safety,
            target=node,
            build=lambda updated: build(updated, torch_name),
            add_imports=extra_imports | ({"torch"} if add_torch else set()),
            remove_imports=self._import_edits(ref),
            min_torch=sym.min_torch,
        )

    def _map_args(
        self, sym: Symbol, args: Sequence[cst.Arg], torch_name: str, bare: bool = False
    ) -> tuple[list[cst.Arg], bool]:
        """Old call arguments -> new ones; returns (arguments, exact).

        ``bare`` is a decorator without parentheses: the decorated function is the first argument.
        """
        if any(a.star == "*" for a in args):
            raise NoFix("a `*args` splat cannot be mapped to the new signature")
        positional = [a for a in args if not a.keyword and not a.star]
        named = [a for a in args if a.keyword or a.star == "**"]
        has_splat = any(a.star == "**" for a in args)
        if len(positional) > len(sym.params):
            raise NoFix(f"takes at most {len(sym.params)} positional argument(s)")
        given = {sym.params[i] for i in range(len(positional))}
        given |= {a.keyword.value for a in named if a.keyword}
        required = set(sym.params[: sym.required])
        if not has_splat and not bare and not required <= given:
            raise NoFix("the call is missing a required argument and already fails")
        new: list[cst.Arg] = []
        fresh: set[int] = set()
        for source in sym.prepend:
            fresh.add(len(new))
            new.append(cst.Arg(value=self._new_expr(source, torch_name)))
        for i, arg in enumerate(positional):
            new.append(
                arg if sym.positional == "keep" else _kw(sym.params[i], arg.value, arg.comma)
            )
        for name, source in sym.keywords:
            if name not in given:
                fresh.add(len(new))
                new.append(_kw(name, self._new_expr(source, torch_name)))
        splats = [a for a in named if a.star == "**"]
        new.extend(a for a in named if not a.star)
        exact = True
        disabled = disabled_by_keyword(new)
        for name, source in sym.defaults:
            if name in given or disabled:
                continue
            if has_splat:
                exact = False  # the default may come from the splat; adding it could clash
                continue
            fresh.add(len(new))
            new.append(_kw(name, self._new_expr(source, torch_name)))
        new.extend(splats)
        return _join(args, new, fresh), exact

    # ---- contexts ---------------------------------------------------------------------------

    def _report(self, sym: Symbol, node: cst.CSTNode, detail: str, fix: Fix | None) -> None:
        if sym.kind == "manual":
            self.findings.append(Finding(sym.code, f"`{sym.old}`: {sym.guidance}", node, None))
            return
        call = f'`{sym.new}("{sym.device}", ...)`' if sym.prepend else f"`{sym.new}(...)`"
        if sym.keywords:
            kws = ", ".join(f"{k}={v}" for k, v in sym.keywords)
            call = f"`{sym.new}({kws}, ...)`"
        message = f"`{sym.old}` is deprecated, use {call}"
        if detail:
            message += f"; {detail}"
        self.findings.append(Finding(sym.code, message, node, fix))

    def _call(self, node: cst.Call, sym: Symbol, unconditional: bool) -> None:
        try:
            torch_name, _ = self._binding(node, "torch")
            _, exact = self._map_args(sym, node.args, torch_name)

            def build(updated: cst.Call, torch_name: str) -> cst.Call:
                args, _ = self._map_args(sym, updated.args, torch_name)
                return updated.with_changes(func=self._new_expr(sym.new, torch_name), args=args)

            fix = self._fix(
                sym, node, node.func, "safe" if exact else "unsafe", build, unconditional
            )
            notes = [] if exact else ["a `**` splat hides whether the old dtype default applies"]
            if not unconditional:
                notes.append("the name is also bound by a fallback, which the fix bypasses")
            self._report(sym, node, "; ".join(notes), fix)
        except NoFix as reason:
            self._report(sym, node, f"no automatic fix: {reason}", None)

    def _missing_argument(self, node: cst.Call, sym: Symbol, unconditional: bool) -> None:
        """A current API called without an argument whose default is about to change."""
        name = sym.when_missing
        index = sym.params.index(name)
        positional = [a for a in node.args if not a.keyword and not a.star]
        if any(a.star for a in node.args) or len(positional) > index:
            return  # given positionally, or possibly through a splat
        if any(a.keyword and a.keyword.value == name for a in node.args):
            return

        def build(updated: cst.Call) -> cst.Call:
            # Only string literals are inserted: no import is needed, none is touched.
            args, _ = self._map_args(sym, updated.args, "torch")
            return updated.with_changes(args=args)

        fix = Fix(
            safety="safe" if unconditional else "unsafe",
            target=node,
            build=build,
            min_torch=sym.min_torch,
        )
        self.findings.append(Finding(sym.code, sym.guidance, node, fix))

    def _partial(self, node: cst.Call, sym: Symbol, unconditional: bool) -> None:
        """``functools.partial(old, ...)``: the bound arguments map like a call's."""
        ref = node.args[0].value
        if sym.kind == "manual":
            self._report(sym, ref, "", None)
            return
        try:
            torch_name, _ = self._binding(node, "torch")
            self._map_args(sym, node.args[1:], torch_name)

            def build(updated: cst.Call, torch_name: str) -> cst.Call:
                first, *rest = updated.args
                mapped, _ = self._map_args(sym, rest, torch_name)
                new_first = first.with_changes(value=self._new_expr(sym.new, torch_name))
                return updated.with_changes(args=_join(updated.args, [new_first, *mapped], set()))

            # Positional arguments at the partial's call sites would land in new parameters.
            safety = "unsafe" if sym.positional == "keywords" else "safe"
            fix = self._fix(sym, node, ref, safety, build, unconditional)
            self._report(sym, ref, "", fix)
        except NoFix as reason:
            self._report(sym, ref, f"no automatic fix: {reason}", None)

    def _reference(self, node: cst.BaseExpression, sym: Symbol, unconditional: bool) -> None:
        """A reference that is not called here.

        A conditionally bound name (``except ImportError: GradScaler = None``) read as a value is
        a feature check, not a use: it is left alone, and so is the import it reads.
        """
        if not unconditional and not (node in self._type_context or self._annotation_depth):
            return
        if sym.kind == "manual":
            self._report(sym, node, "", None)
            return
        try:
            if node in self._type_context or self._annotation_depth:
                if sym.kind != "class":
                    raise NoFix("a function used as a type")

                def build_type(updated, torch_name):
                    return self._new_expr(sym.new, torch_name)

                fix = self._fix(sym, node, node, "safe", build_type, unconditional)
                self._report(sym, node, "", fix)
                return
            functools_name, add_functools = self._binding(node, "functools")

            def build(updated, torch_name):
                args = [cst.Arg(self._new_expr(sym.new, torch_name))]
                args += [cst.Arg(self._new_expr(s, torch_name)) for s in sym.prepend]
                args += [_kw(k, self._new_expr(v, torch_name)) for k, v in sym.keywords]
                args += [_kw(k, self._new_expr(v, torch_name)) for k, v in sym.defaults]
                return cst.Call(_expr(f"{functools_name}.partial"), _join([], args, set()))

            extra = frozenset({"functools"} if add_functools else ())
            fix = self._fix(sym, node, node, "unsafe", build, unconditional, extra)
            self._report(sym, node, "used as a value: becomes a `functools.partial`", fix)
        except NoFix as reason:
            self._report(sym, node, f"no automatic fix: {reason}", None)

    # ---- visitor ------------------------------------------------------------------------------

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        match = self._match(node.func)
        if match:
            self._consumed.add(node.func)
            if match[0].when_missing:
                self._missing_argument(node, *match)
            elif match[0].kind == "manual":
                self._report(match[0], node, "", None)
            else:
                self._call(node, *match)
            return
        names = {q.name for q in self._qualified(node.func)} if node.args else set()
        if names & _TYPE_CHECKS and len(node.args) == 2:
            self._mark_types(node.args[1].value)
        elif _PARTIAL in names:
            match = self._match(node.args[0].value)
            if match and match[0].when_missing:
                return
            if match and not node.args[0].keyword and not node.args[0].star:
                self._consumed.add(node.args[0].value)
                self._partial(node, *match)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        match = self._match(node.decorator)
        if not match or match[0].when_missing:
            return
        sym, unconditional = match
        self._consumed.add(node.decorator)
        if sym.kind == "manual":
            self._report(sym, node.decorator, "", None)
            return
        if sym.kind != "decorator":
            message = "a bare class decorator passes the function as `enabled`"
            self._report(sym, node.decorator, f"no automatic fix: {message}", None)
            return
        try:

            def build(updated, torch_name):
                args, _ = self._map_args(sym, [], torch_name, bare=True)
                return cst.Call(func=self._new_expr(sym.new, torch_name), args=args)

            fix = self._fix(sym, node.decorator, node.decorator, "safe", build, unconditional)
            self._report(sym, node.decorator, "", fix)
        except NoFix as reason:
            self._report(sym, node.decorator, f"no automatic fix: {reason}", None)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            match = self._match(base.value)
            if match and not match[0].when_missing:
                sym, _ = match
                self._consumed.add(base.value)
                if sym.kind == "manual":
                    self._report(sym, base.value, "", None)
                    continue
                detail = (
                    "no automatic fix: a subclass's constructor arguments shift when its base "
                    f'becomes `{sym.new}`; rebase it and pass "{sym.device}" as the first argument'
                )
                self._report(sym, base.value, detail, None)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.type is not None:
            self._mark_types(node.type)
        # `except AttributeError:` runs on a torch without the new API: a fallback path.
        self._version_gates.append(_catches_missing_api(node.type, _FALLBACK))

    def leave_ExceptHandler(self, original_node: cst.ExceptHandler) -> None:
        self._version_gates.pop()

    def _mark_types(self, node: cst.BaseExpression) -> None:
        """``isinstance``'s second argument and ``except`` clauses: a class or a tuple of them."""
        if isinstance(node, cst.Tuple):
            for element in node.elements:
                self._mark_types(element.value)
        else:
            self._type_context.add(node)

    def visit_Annotation(self, node: cst.Annotation) -> None:
        self._annotation_depth += 1

    def leave_Annotation(self, original_node: cst.Annotation) -> None:
        self._annotation_depth -= 1

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        return self._visit_reference(node)

    def visit_Name(self, node: cst.Name) -> bool:
        return self._visit_reference(node)

    def _visit_reference(self, node: cst.BaseExpression) -> bool:
        if node in self._consumed:
            return False
        match = self._match(node)
        if match is None:
            return True
        if match[0].when_missing:
            return False  # only calls can miss an argument
        if not (node in self._type_context or self._annotation_depth):
            if any(self._probes):
                return False  # `try: torch.cpu.amp.autocast except AttributeError`: a probe
            if self._containers:
                return False  # `func in [torch.cuda.amp.autocast, ...]`: identity, not a use
        self._reference(node, *match)
        return False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _CONTAINERS):
            self._containers += 1
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if isinstance(original_node, _CONTAINERS):
            self._containers -= 1
        super().on_leave(original_node)

    # Compatibility code is left alone: a branch chosen by the torch version, and a value
    # read inside `try:` to probe for the API. Rewriting either defeats its purpose.

    def _gate(self, node: cst.If | cst.IfExp) -> None:
        """A branch on the torch version (or on ``hasattr``) whose other side uses the new API."""
        code = cst.Module([]).code_for_node
        gated = bool(_VERSION_TEST.search(code(node.test))) and bool(_MODERN_USE.search(code(node)))
        self._version_gates.append(gated)

    def visit_If(self, node: cst.If) -> None:
        self._gate(node)

    def leave_If(self, original_node: cst.If) -> None:
        self._version_gates.pop()

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._gate(node)

    def leave_IfExp(self, original_node: cst.IfExp) -> None:
        self._version_gates.pop()

    def visit_Try_body(self, node: cst.Try) -> None:
        self._probes.append(any(_catches_missing_api(h.type) for h in node.handlers))

    def leave_Try_body(self, node: cst.Try) -> None:
        self._probes.pop()
