"""Which dotted names an expression may refer to through the file's imports, on stdlib ``ast``.

A port of the part of libcst's scope analysis the rules used (``scope.get_qualified_names_for``,
``scope[name]``, ``name in scope``), with the same answers: a name is resolved in the scope it is
evaluated in (decorators, defaults and bases in the enclosing one; class bodies invisible to the
functions inside them; ``global``/``nonlocal``; comprehensions), every binding that may reach it is
kept (try/except and if/else alternatives give a set, and a binding made later in the same scope
does not count for a plain name), ``import a.b.c`` binds ``a.b.c``, ``a.b`` and ``a``, ``import
a.b as c`` binds ``c`` only, builtins resolve to ``builtins.X`` and other local bindings to their
``<locals>``-style name (so a parameter that shadows ``torch`` is not ``torch``). Cross-module
re-exports are not followed (as before): a package's ``__init__.py`` keeps its imports on ``fix``.

Why hand-written: measured on the 5 largest files of torch 2.x (3.3 MB; best of 3, load 2 on a
2-core machine): ``ast.parse`` 1.36 s, ``Names(tree)`` 0.22 s (one walk: parents, scopes where they
change, bindings, an index by spelling; names are resolved per query), ``beniget`` DefUseChains +
Ancestors 3.67 s (17x slower, and flow-sensitive: a rebinding kills the import before it, where
libcst kept both, so its answers differ from the snapshotted findings), ``ast-grep-py`` parse + one
pattern 0.43 s with no import resolution at all (it would still have to be written on top, over a
second parse). Same answers as libcst for every Name and Attribute of the fixtures
(tests/test_names.py) and of 150 ecosystem files that use AMP APIs (249,167 nodes, 0 differences);
the one deliberate difference: a ``match`` capture (``case x:``) binds its name here.

Positions: the order of a binding and a use in one scope is decided on ``ast`` positions (a
binding counts from the end of its statement; parameters and comprehension targets from the start
of their scope), which is the order libcst's visitor counted in.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from ampmigrate.findings import ImportEdit

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = frozenset({*_FUNCTIONS, ast.Lambda, ast.ClassDef, *_COMPREHENSIONS})
# Fields never walked: contexts and operators (shared singletons that carry no names, never
# anybody's child in ``parents``) and the commonest string fields (not ``name``: on Python 3.12
# a ``type X = ...`` statement's name is a node).
_NO_NODES = frozenset({"ctx", "op", "ops", "id", "attr", "arg", "asname", "module"})
_START = (0, 0)
# What the walk treats specially; anything else just has its children walked.
_SPECIAL = frozenset(
    {
        ast.Name, ast.Attribute, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal,
        ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, *_COMPREHENSIONS,
        ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.withitem,
        ast.NamedExpr, ast.ExceptHandler, ast.MatchAs, ast.MatchStar, ast.MatchMapping,
    }
)  # fmt: skip  # bound before anything in the scope is evaluated (parameters, loop targets)


@dataclass(eq=False)
class Scope:
    """A namespace: the module, a function or lambda, a class body or a comprehension."""

    node: ast.AST
    parent: Scope | None
    kind: str  # "module" | "function" | "class" | "comprehension"
    prefix: str  # how libcst spelled local names here: "f.<locals>", "C", "<comprehension>"
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    overwrites: dict[str, Scope] = field(default_factory=dict)  # `global` / `nonlocal` names

    def visible_parent(self, first: Scope | None = None) -> Scope | None:
        """The next enclosing scope whose names code here can see (class bodies are skipped)."""
        parent = first if first is not None else self.parent
        while parent is not None and parent.kind == "class":
            parent = parent.parent
        return parent

    def target(self, name: str) -> Scope:
        """The scope an assignment to ``name`` here binds in."""
        if name in self.overwrites:
            outer = self.visible_parent(self.overwrites[name])
            return outer.target(name) if outer is not None else self
        return self

    def __contains__(self, name: str) -> bool:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.overwrites:
                scope = scope.overwrites[name]
                continue
            if scope.bindings.get(name):
                return True
            if scope.kind == "module":
                return _builtin(name)
            scope = scope.visible_parent()
        return False

    def resolve(self, name: str, origin: Scope | None = None) -> list[Binding]:
        """Every binding of ``name`` that code here may see (libcst's ``scope[name]``)."""
        origin = origin or self
        scope: Scope | None = self
        while scope is not None:
            if name in scope.overwrites:
                scope = origin.visible_parent(scope.overwrites[name])
                continue
            if name in scope.bindings:
                return scope.bindings[name]
            if scope.kind == "module":
                return [Binding(name, None, scope, builtin=True)] if _builtin(name) else []
            scope = origin.visible_parent(scope.parent)
        return []


# What ``from M import *`` binds, for the modules whose names the rules resolve: their public
# names (``__all__``, or the names their ``__init__.py`` imports), read from their sources
# (torch 2.13's torch/cuda/amp and torch/cpu/amp; NVIDIA/apex's apex/fp16_utils/__init__.py in
# both its forms: 2018's, and the one of 2019 until its removal in 2025, cb65b8ed's parent,
# which added `clip_grad_norm`, `convert_module`, `convert_network` and `FP16Model`).
STAR_EXPORTS: dict[str, tuple[str, ...]] = {
    "torch.cuda.amp": (
        "amp_definitely_not_available", "autocast", "custom_bwd", "custom_fwd", "GradScaler",
    ),
    "torch.cpu.amp": ("autocast", "GradScaler"),
    "apex.fp16_utils": (
        "BN_convert_float", "network_to_half", "prep_param_lists", "model_grads_to_master_grads",
        "master_params_to_model_params", "tofp16", "to_python_float", "Fused_Weight_Norm",
        "fp32_to_fp16", "fp16_to_fp32", "FP16_Module", "FP16_Optimizer", "LossScaler",
        "DynamicLossScaler", "clip_grad_norm", "convert_module", "convert_network", "FP16Model",
    ),
}  # fmt: skip


@dataclass(eq=False)
class Binding:
    """One assignment of ``name``: an import (``node`` is the ``ast.Import``/``ast.ImportFrom``
    and ``alias`` the ``ast.alias``), a def/class, a parameter (``ast.arg``), an ``except ... as``
    (``ast.ExceptHandler``), a match capture, or a plain target (the ``ast.Name``)."""

    name: str
    node: ast.AST | None
    scope: Scope
    alias: ast.alias | None = None
    order: tuple[int, int] = _START  # from where on the name is bound (see the module docstring)
    builtin: bool = False
    hidden: tuple[tuple[int, int], tuple[int, int]] | None = None  # not bound in [start, end)

    @property
    def is_import(self) -> bool:
        return isinstance(self.node, ast.Import | ast.ImportFrom)

    def qualified(self, full_name: str) -> set[str]:
        """The dotted names ``full_name`` (which starts with this binding's name) stands for."""
        if self.builtin:
            return {f"builtins.{self.name}"}
        if not self.is_import:
            return {f"{self.scope.prefix}.{full_name}" if self.scope.prefix else full_name}
        if self.alias is not None and self.alias.name == "*":  # a name of STAR_EXPORTS
            return {f"{self.node.module}.{full_name}"}  # type: ignore[union-attr]
        return {canonical(q) for q in _import_names(self.node, full_name)}


# apex's `apex/amp/amp.py` re-exports the frontend (`from .frontend import *`) beside its own
# functions: `from apex.amp import amp` then `amp.initialize(...)` is `apex.amp.initialize`
_APEX_AMP_MODULE = frozenset({
    "initialize", "state_dict", "load_state_dict", "init", "half_function", "float_function",
    "promote_function", "register_half_function", "register_float_function",
    "register_promote_function",
})  # fmt: skip


def canonical(name: str) -> str:
    """``name`` with apex's ``apex.amp.amp.<f>`` spelled as the ``apex.amp.<f>`` it is."""
    if name.startswith("apex.amp.amp.") and name.split(".")[3] in _APEX_AMP_MODULE:
        return "apex.amp." + name[len("apex.amp.amp.") :]
    return name


def _import_names(stmt: ast.Import | ast.ImportFrom, full_name: str) -> set[str]:
    """libcst's ``ImportAssignment.get_qualified_names_for``: every alias of the statement is
    tried (longest dotted prefix first), relative modules keep their dots."""
    module, aliases = "", stmt.names
    if isinstance(stmt, ast.ImportFrom):
        module = "." * stmt.level + (stmt.module or "")
        # its names have no dots: only the one bound as the head of ``full_name`` can match
        head = full_name.partition(".")[0]
        aliases = [a for a in aliases if (a.asname or a.name) == head]
    out = set()
    for alias in aliases:
        if alias.name == "*":
            continue
        parts = alias.name.split(".")
        for i in range(len(parts), 0, -1):
            real = ".".join(parts[:i])
            as_name = alias.asname or real
            if module.endswith("."):
                real = module + real
            elif module:
                real = f"{module}.{real}"
            if full_name.startswith(as_name):
                rest = full_name[len(as_name) :]
                if rest and not rest.startswith("."):
                    continue
                rest = rest.lstrip(".")
                out.add(f"{real}.{rest}" if rest else real)
                break
    return out


_BLOCK_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.Module)


def _top_bindings(statement: ast.stmt) -> set[str]:
    """The names ``statement`` binds at its own top level (not in blocks it holds)."""
    if isinstance(statement, ast.Assign):
        return {n.id for t in statement.targets for n in _target_names(t)}
    if isinstance(statement, ast.AnnAssign) and statement.value is not None:
        return {n.id for n in _target_names(statement.target)}
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).partition(".")[0] for a in statement.names}
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    return set()


def _target_names(target: ast.expr) -> list[ast.Name]:
    if isinstance(target, ast.Name):
        return [target]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for e in target.elts for n in _target_names(e)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def full_name(node: ast.AST) -> str | None:
    """libcst's ``get_full_name_for_node``: calls and subscripts stand for their callee/value,
    anything else inside an attribute chain for ``None``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{full_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return full_name(node.func)
    if isinstance(node, ast.Subscript):
        return full_name(node.value)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    return None


class Names:
    """Parents, scopes and bindings of one module, computed in one walk; names are resolved on
    demand for the few nodes a rule asks about."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self._parents: dict[ast.AST, ast.AST] = {}
        self._scopes: dict[ast.AST, Scope] = {}
        self._imports: list[Binding] = []
        self._spelled: dict[str, list[ast.Name | ast.Attribute]] = {}
        self._dotted: set[str] = set()  # the dotted names bound (by `import a.b`)
        self._roots: dict[str, frozenset[str] | None] = {}  # see may_be_in
        self._store_counts: dict[str, int] | None = None  # see _stores
        self.module_scope = Scope(tree, None, "module", "")
        self._walk()

    def release(self) -> None:
        """Break the scope <-> binding reference cycles once nobody will ask again. Each scope
        lists its bindings and each binding names its scope, and through them the whole syntax
        tree stays alive until the cycle collector walks it (a full tree per file: most of the
        collector's time in a run); released, it is freed the moment the file is done."""
        for scope in (self.module_scope, *self._scopes.values()):
            while scope is not None and (scope.bindings or scope.overwrites):
                scope.bindings = {}
                scope.overwrites = {}
                scope = scope.parent

    # ---- queries ---------------------------------------------------------------------------

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self._parents.get(node)

    def nodes(self) -> Iterable[ast.AST]:
        """Every node below the module (contexts and operators aside), each after its parent."""
        return self._parents.keys()

    def spelled(self, identifier: str) -> list[ast.Name | ast.Attribute]:
        """The names ``identifier`` and the attributes ``x.identifier``, each after its parent."""
        return self._spelled.get(identifier, [])

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        parent = self._parents.get(node)
        while parent is not None:
            yield parent
            parent = self._parents.get(parent)

    def bound_before(self, node: ast.Name, stop: set[int] = frozenset()) -> ast.stmt | None:
        """The statement that last binds ``node``'s name before it in a block that holds it
        (up to its scope, or an ancestor in ``stop``), at that statement's top level (an
        assignment, an import, a def): ``node`` reads what it binds (a loop body's earlier
        statements run first on every pass). None: none does."""
        child: ast.AST = node
        for above in self.ancestors(node):
            for arm in ("body", "orelse", "finalbody"):
                block = getattr(above, arm, None)
                if isinstance(block, list) and child in block:
                    for statement in reversed(block[: block.index(child)]):
                        if node.id in _top_bindings(statement):
                            return statement
            if id(above) in stop or isinstance(above, _BLOCK_SCOPES):
                return None
            child = above
        return None

    def exclusive(self, a: ast.AST, b: ast.AST) -> bool:
        """``a`` and ``b`` sit in different arms of one ``if``/``else`` (``elif`` included),
        conditional expression, or ``try`` (two handlers, a handler and ``else``): they
        never both run in one pass through that statement (Ruff's branch exclusivity)."""
        arms = {}
        child = a
        for above in self.ancestors(a):
            arms[id(above)] = _arm(above, child)
            child = above
        child = b
        for above in self.ancestors(b):
            mine = arms.get(id(above))
            if mine is not None:
                theirs = _arm(above, child)
                if mine != theirs and mine != "" and theirs != "":
                    return True
                break
            child = above
        return self._contradictory(a, b)

    def _contradictory(self, a: ast.AST, b: ast.AST) -> bool:
        """``a`` and ``b`` sit under ``if`` tests that need one name to equal two different
        constants (``if impl == "keras": ...`` and, later, ``if impl == "graph_rewrite": ...``),
        a name the file never rebinds (bound at most once, by a plain assignment): a flag read
        once decides both."""
        theirs = self._required(b)
        for name, value in self._required(a).items():
            if name in theirs and theirs[name] != value and self._fixed(name):
                return True
        return False

    def _required(self, node: ast.AST) -> dict[str, object]:
        """name -> constant, for each ``name == constant`` an enclosing ``if`` (body arm) or
        conditional expression needs (alone or in an ``and``)."""
        out: dict[str, object] = {}
        child = node
        for above in self.ancestors(node):
            if isinstance(above, ast.If | ast.IfExp) and _arm(above, child) == "body":
                tests = [above.test]
                while tests:
                    test = tests.pop()
                    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
                        tests += test.values
                    elif (
                        isinstance(test, ast.Compare)
                        and len(test.ops) == 1
                        and isinstance(test.ops[0], ast.Eq)
                        and isinstance(test.comparators[0], ast.Constant)
                        and (name := full_name(test.left)) is not None
                        and not isinstance(test.left, ast.Call | ast.Subscript)
                    ):
                        out.setdefault(name, test.comparators[0].value)
            child = above
        return out

    def _fixed(self, name: str) -> bool:
        """``name`` (or the name its attribute chain starts from, beyond one plain assignment)
        is never rebound in the file: no second assignment, no loop, ``with``, augmented or
        attribute assignment of it."""
        stores = self._stores()
        head = name.partition(".")[0]
        return stores.get(head, 0) <= 1 and (head == name or not stores.get(name, 0))

    def _stores(self) -> dict[str, int]:
        """How often each dotted name is bound; a binding other than a plain ``=`` counts twice
        (a loop or ``with`` target, ``+=``, ``global`` ...: it may change between two tests)."""
        if self._store_counts is None:
            counts: dict[str, int] = {}
            for node in self.nodes():
                if isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Store):
                    name = full_name(node)
                    if name is not None:
                        plain = isinstance(self._parents.get(node), ast.Assign)
                        counts[name] = counts.get(name, 0) + (1 if plain else 2)
                elif isinstance(node, ast.Global | ast.Nonlocal):
                    for name in node.names:
                        counts[name] = counts.get(name, 0) + 2
            self._store_counts = counts
        return self._store_counts

    def scope(self, node: ast.AST) -> ast.AST:
        """The node of the scope ``node`` is evaluated in: Module, FunctionDef, AsyncFunctionDef,
        Lambda, ClassDef or a comprehension (a decorator or a default belongs to the enclosing
        one)."""
        return self.scope_of(node).node

    def scope_of(self, node: ast.AST) -> Scope:
        scopes, parents = self._scopes, self._parents
        while node not in scopes:  # written down only where it changes
            node = parents.get(node)
            if node is None:
                return self.module_scope
        return scopes[node]

    def qualified(self, node: ast.AST) -> set[str]:
        """The dotted names a Name, an attribute chain or a call's callee may refer to (libcst's
        ``scope.get_qualified_names_for(node)``)."""
        scope = self.scope_of(node)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own = [b for b in scope.target(node.id).resolve(node.id) if b.node is node]
            if own:
                return own[0].qualified(node.id)
        name = full_name(node)
        if name is None:
            return set()
        if isinstance(node, ast.Name | ast.Attribute) and self._is_access(node, scope):
            return {q for b in self._referents(node, name, scope) for q in b.qualified(b.name)}
        return self.qualified_text(node, name)

    def may_be_in(self, node: ast.AST, package: str) -> bool:
        """False when no name :meth:`qualified` gives for ``node`` can be ``package`` or inside
        it (a test on the first part of its spelled name, to skip resolving a call's callee
        when only names inside one package matter)."""
        name = full_name(node)
        if name is None:
            return False
        if package not in self._roots:
            self._roots[package] = self._roots_of(package)
        roots = self._roots[package]
        return roots is None or name.partition(".")[0] in roots

    def _roots_of(self, package: str) -> frozenset[str] | None:
        """The first parts of the names that may resolve into ``package`` (None: any may).
        A qualified name comes from the bindings of the first part of the name written: a
        builtin gives ``builtins.X``; another local binding its scope's prefix (the names of
        the enclosing defs and classes) and the name as written; an import the names of its
        statement, so only an import that names the package binds a way in."""
        top = package.partition(".")[0]
        for binding in self.module_scope.bindings.get(top, ()):
            if isinstance(binding.node, (*_FUNCTIONS, ast.ClassDef)):
                return None  # `def torch(): x = ...` prefixes its locals with `torch.<locals>`
        roots = {top}
        for binding in self._imports:
            stmt = binding.node
            modules = [a.name for a in stmt.names]  # type: ignore[union-attr]
            if isinstance(stmt, ast.ImportFrom) and not stmt.level:
                modules.append(stmt.module or "")
            if any(m == top or m.startswith(top + ".") for m in modules):
                roots.add(binding.name.partition(".")[0])
        return frozenset(roots)

    def qualified_text(self, node: ast.AST, name: str) -> set[str]:
        """What the dotted ``name`` would refer to if written where ``node`` is (libcst's
        ``scope.get_qualified_names_for(str)``): every binding of its longest bound prefix."""
        scope = self.scope_of(node)
        prefix: str | None = name
        while prefix:
            if self._bound(prefix, scope):
                found = scope.resolve(prefix)
                if len(found) > 1 and hasattr(node, "lineno"):
                    at = (node.lineno, node.col_offset) if scope is self.module_scope else None
                    found = self._live(found, at)
                return {q for b in found for q in b.qualified(name)}
            prefix = prefix.rpartition(".")[0] or None
        return set()

    def bindings(self, node: ast.AST, name: str | None = None) -> list[Binding]:
        """The bindings of ``name`` (default: the Name ``node``'s id) in the scope it resolves in
        from ``node``, wherever in that scope they are (libcst's ``scope[name]``)."""
        if name is None:
            assert isinstance(node, ast.Name)
            name = node.id
        return self.scope_of(node).resolve(name)

    def reaching(self, node: ast.Name) -> list[Binding]:
        """The bindings a read of ``node`` may see (:meth:`qualified`'s): in its own scope only
        those made before it."""
        return self._referents(node, node.id, self.scope_of(node))

    def is_bound(self, node: ast.AST, name: str) -> bool:
        """``name`` is bound where ``node`` is (here or in an enclosing scope, builtins too)."""
        return name in self.scope_of(node)

    def imports(self) -> list[Binding]:
        """Every import binding of the file, in source order."""
        return self._imports

    def import_edits(self, node: ast.AST) -> tuple[ImportEdit, ...]:
        """The imports that bind the root name of ``node`` (a Name or attribute chain) where it
        is, as edits for the import manager to apply once they are unused."""
        while isinstance(node, ast.Attribute):
            node = node.value
        if not isinstance(node, ast.Name):
            return ()
        edits = []
        for binding in self.bindings(node):
            stmt = binding.node
            if not binding.is_import or binding.alias is None:
                continue
            alias = binding.alias
            if alias.name == "*":
                continue  # a star import may bind more than the names known here: it stays
            if isinstance(stmt, ast.Import):
                if alias.asname is None:
                    continue  # `import torch.cuda.amp` binds `torch`, which stays in use
                edits.append(ImportEdit(alias.name, None, alias.asname))
            elif stmt.module is not None and not stmt.level:
                edits.append(ImportEdit(stmt.module, alias.name, alias.asname))
        return tuple(edits)

    # ---- resolution ------------------------------------------------------------------------

    def _is_access(self, node: ast.Name | ast.Attribute, scope: Scope) -> bool:
        """libcst records one access per name read, at the longest attribute chain above it
        whose dotted name is bound; only that node resolves with the order of bindings."""
        chain = []
        parent = self._parents.get(node)
        while isinstance(parent, ast.Attribute):
            chain.append(parent)
            parent = self._parents.get(parent)
        for above in reversed(chain):  # the outermost first, as libcst tries them
            name = dotted(above)
            if name is not None and self._bound(name, scope):
                return False
        if isinstance(node, ast.Name):
            return True
        name = dotted(node)
        return name is not None and self._bound(name, scope)

    def _bound(self, name: str, scope: Scope) -> bool:
        """``name in scope``, where a dotted name not bound anywhere in the file (only ``import
        a.b`` binds one) is answered without walking the scopes: most attribute chains."""
        return ("." not in name or name in self._dotted) and name in scope

    def _referents(self, node: ast.AST, name: str, scope: Scope) -> list[Binding]:
        """The bindings a read of ``name`` at ``node`` sees: in its own scope only those made
        before it (if there are none, the enclosing scope's)."""
        found = scope.resolve(name)
        where = (node.lineno, node.col_offset)
        seen = [b for b in found if b.scope is not scope or _before(b, where)]
        if not seen and found and scope.parent is not None:
            seen = scope.parent.resolve(name, scope)
        if len(seen) > 1:
            seen = self._live(seen, where if scope is self.module_scope else None)
        return seen

    def _live(self, seen: list[Binding], where: tuple[int, int] | None) -> list[Binding]:
        """``seen`` without the module-level imports that a later module-level import of the
        same name replaces before any code of the module can run (only imports between them):
        `from apex import amp` then `import torch.cuda.amp as amp` (cosmo-3D, the 78th review)
        is torch's everywhere after the second. ``where``: a read at module level, which sees
        the first where it comes between them."""
        body = self.tree.body
        index = {id(s): i for i, s in enumerate(body)}
        tops = [
            (index[id(b.node)], b)
            for b in seen
            if b.scope is self.module_scope and b.is_import and id(b.node) in index
        ]
        dead = set()
        for i, b in tops:
            for j, later in tops:
                if (
                    j > i
                    and (where is None or _before(later, where))
                    and all(isinstance(s, ast.Import | ast.ImportFrom) for s in body[i + 1 : j])
                ):
                    dead.add(id(b))
                    break
        return [b for b in seen if id(b) not in dead] if dead else seen

    # ---- the walk --------------------------------------------------------------------------

    def _bind(self, scope: Scope, name: str, node: ast.AST, order, alias=None) -> None:
        target = scope.target(name)
        hidden = None
        if len(order) == 4:  # a later comprehension target: unbound in its own generator
            order, hidden = _START, (order[:2], order[2:])
        binding = Binding(name, node, target, alias, order, hidden=hidden)
        if "." in name:
            self._dotted.add(name)
        target.bindings.setdefault(name, []).append(binding)
        if alias is not None:
            self._imports.append(binding)

    def _walk(self) -> None:
        parents = self._parents
        spelled = self._spelled
        self._scopes[self.tree] = self.module_scope
        # (node, parent, scope, from where on a Store name here is bound)
        stack: list[tuple] = [(self.tree, None, self.module_scope, None)]
        push = stack.append
        while stack:
            node, parent, scope, order = stack.pop()
            kind = type(node)
            if parent is not None:
                parents[node] = parent
            if kind not in _SPECIAL:  # most nodes: their children, in the same scope
                if kind is ast.Constant:
                    continue
                fields = _REVERSED.get(kind)
                if fields is None:
                    fields = _REVERSED[kind] = child_fields(kind)[::-1]
                for name in fields:  # pushed last to first: popped in source order
                    value = getattr(node, name)
                    if type(value) is list:
                        for child in reversed(value):
                            if isinstance(child, ast.AST):
                                push((child, node, scope, order))
                    elif isinstance(value, ast.AST):
                        push((value, node, scope, order))
                continue
            if kind is ast.Name:
                spelled.setdefault(node.id, []).append(node)
                if type(node.ctx) is ast.Store:
                    end = order or (node.end_lineno, node.end_col_offset)
                    self._bind(scope, node.id, node, end)
                continue
            if kind is ast.Attribute:
                spelled.setdefault(node.attr, []).append(node)
                stack.append((node.value, node, scope, None))
                continue
            if kind is ast.Import or kind is ast.ImportFrom:
                self._import(node, scope)
                continue
            if kind is ast.Global or kind is ast.Nonlocal:
                if scope.kind != "module":
                    outer = self.module_scope if kind is ast.Global else scope.parent
                    for name in node.names:
                        scope.overwrites[name] = outer
                        # the declaration holds for the whole function: a binding written
                        # above it (mt-dnn's `from apex import amp` then `global amp`) is outer
                        for early in scope.bindings.pop(name, []):
                            moved = replace(early, scope=outer)
                            outer.bindings.setdefault(name, []).append(moved)
                            if early.alias is not None:
                                self._imports[self._imports.index(early)] = moved
                continue
            if kind in _FUNCTIONS or kind is ast.Lambda or kind is ast.ClassDef:
                children = self._scope_children(node, scope)
            elif kind in _COMPREHENSIONS:
                children = self._comprehension_children(node, scope)
            if kind in _SCOPES:  # where the scope changes, each child's is written down
                for child, _, child_scope, _ in children:
                    self._scopes[child] = child_scope
            elif kind is ast.Assign or kind is ast.AugAssign or kind is ast.AnnAssign:
                end = (node.end_lineno, node.end_col_offset)
                targets = node.targets if kind is ast.Assign else [node.target]
                children = [(t, node, scope, end) for t in targets]
                if kind is ast.AnnAssign:
                    children.append((node.annotation, node, scope, None))
                if node.value is not None:
                    children.append((node.value, node, scope, None))
            elif kind is ast.For or kind is ast.AsyncFor:
                end = (node.target.end_lineno, node.target.end_col_offset)
                children = [(node.target, node, scope, end), (node.iter, node, scope, None)]
                children += [(s, node, scope, None) for s in node.body + node.orelse]
            elif kind is ast.withitem:
                children = [(node.context_expr, node, scope, None)]
                if node.optional_vars is not None:
                    v = node.optional_vars
                    children.append((v, node, scope, (v.end_lineno, v.end_col_offset)))
            elif kind is ast.NamedExpr:
                end = (node.end_lineno, node.end_col_offset)
                children = [(node.target, node, scope, end), (node.value, node, scope, None)]
            else:
                if kind is ast.ExceptHandler and node.name:
                    at = node.type or node
                    self._bind(scope, node.name, node, (at.end_lineno, at.end_col_offset))
                elif kind is ast.MatchAs or kind is ast.MatchStar or kind is ast.MatchMapping:
                    name = node.rest if kind is ast.MatchMapping else node.name
                    if name:
                        self._bind(scope, name, node, (node.end_lineno, node.end_col_offset))
                children = [(c, node, scope, order) for c in _children(node, kind)]
            stack.extend(reversed(children))

    def _import(self, node: ast.Import | ast.ImportFrom, scope: Scope) -> None:
        """``import a.b`` binds ``a.b`` and ``a``; ``import a.b as c`` and from-imports one name."""
        end = (node.end_lineno, node.end_col_offset)
        for alias in node.names:
            self._parents[alias] = node
            self._scopes[alias] = scope
            if alias.asname:
                self._bind(scope, alias.asname, node, end, alias)
            elif isinstance(node, ast.ImportFrom):
                if alias.name != "*":
                    self._bind(scope, alias.name, node, end, alias)
                elif not node.level and node.module in STAR_EXPORTS:
                    for name in STAR_EXPORTS[node.module]:
                        self._bind(scope, name, node, end, alias)
            else:
                parts = alias.name.split(".")
                for i in range(len(parts), 0, -1):
                    self._bind(scope, ".".join(parts[:i]), node, end, alias)

    def _scope_children(self, node, scope: Scope) -> list:
        """A def, lambda or class: its name binds outside, its body runs in a scope of its own;
        decorators, defaults, annotations and bases are evaluated outside."""
        kind = type(node)
        if kind is ast.Lambda:
            inner = Scope(node, scope, "function", _join(scope.prefix, "<locals>"))
        else:
            self._bind(scope, node.name, node, (node.end_lineno, node.end_col_offset))
            if kind is ast.ClassDef:
                inner = Scope(node, scope, "class", _join(scope.prefix, node.name))
            else:
                inner = Scope(node, scope, "function", _join(scope.prefix, node.name, "<locals>"))
        children: list = [(d, node, scope, None) for d in getattr(node, "decorator_list", ())]
        if kind is ast.ClassDef:
            children += [(b, node, scope, None) for b in node.bases + node.keywords]
            children += [(s, node, inner, None) for s in node.body]
            return children
        args = node.args
        self._scopes[args] = inner
        self._parents[args] = node
        for arg in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
            if arg is None:
                continue
            self._parents[arg] = args
            self._scopes[arg] = inner
            self._bind(inner, arg.arg, arg, _START)
            if arg.annotation is not None:
                children.append((arg.annotation, arg, scope, None))
        children += [(d, args, scope, None) for d in args.defaults + args.kw_defaults if d]
        if kind is ast.Lambda:
            children.append((node.body, node, inner, None))
            return children
        if node.returns is not None:
            children.append((node.returns, node, scope, None))
        children += [(s, node, inner, None) for s in node.body]
        return children

    def _comprehension_children(self, node, scope: Scope) -> list:
        """The first iterable is evaluated outside; the targets bind inside, before the rest."""
        inner = Scope(node, scope, "comprehension", _join(scope.prefix, "<comprehension>"))
        children: list = []
        last = node.generators[-1]
        tail = last.ifs[-1] if last.ifs else last.iter  # (comprehension nodes have no position)
        end = (tail.end_lineno, tail.end_col_offset)
        for i, gen in enumerate(node.generators):
            self._parents[gen] = node
            self._scopes[gen] = inner
            # libcst counted a later generator's targets as bound once all of it was read
            order = _START if i == 0 else (gen.target.lineno, gen.target.col_offset, *end)
            children.append((gen.target, gen, inner, order))
            children.append((gen.iter, gen, scope if i == 0 else inner, None))
            children += [(c, gen, inner, None) for c in gen.ifs]
        if isinstance(node, ast.DictComp):
            children += [(node.key, node, inner, None), (node.value, node, inner, None)]
        else:
            children.append((node.elt, node, inner, None))
        return children


def _arm(node: ast.AST, child: ast.AST) -> str:
    """Which arm of a branching ``node`` its ``child`` is in ("" for none: the test, a
    ``finally``, a statement that does not branch)."""
    kind = type(node)
    if kind is ast.If or kind is ast.IfExp:
        if child is node.test:
            return ""
        body = node.body if kind is ast.If else [node.body]
        return "body" if any(child is s for s in body) else "orelse"
    if kind is ast.Try or kind is getattr(ast, "TryStar", None):
        if any(child is h for h in node.handlers):
            return f"handler{node.handlers.index(child)}"
        if any(child is s for s in node.orelse):
            return "else"  # runs only where no handler does
        return ""  # the body may run in part before a handler; finally runs always
    return ""


def child_fields(kind: type) -> tuple[str, ...]:
    """The fields of a node type that may hold nodes worth walking: not its contexts, operators
    or strings (read once per type: a walk that asks per node spends its time there)."""
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = tuple(f for f in kind._fields if f not in _NO_NODES)
    return fields


def _children(node: ast.AST, kind: type) -> list[ast.AST]:
    """``ast.iter_child_nodes`` without contexts and operators."""
    out: list[ast.AST] = []
    for name in child_fields(kind):
        value = getattr(node, name)
        if type(value) is list:
            out += [c for c in value if isinstance(c, ast.AST)]
        elif isinstance(value, ast.AST):
            out.append(value)
    return out


_FIELDS: dict[type, tuple[str, ...]] = {}
_REVERSED: dict[type, tuple[str, ...]] = {}


def _builtin(name: str) -> bool:
    """``hasattr(builtins, name)`` with a dict lookup first (most names asked about are found
    there; only dunders can be attributes of the module object without being in it)."""
    return name in _BUILTINS or (name.startswith("__") and hasattr(builtins, name))


_BUILTINS = vars(builtins)


def _before(binding: Binding, where: tuple[int, int]) -> bool:
    if binding.hidden is not None:
        return not binding.hidden[0] <= where < binding.hidden[1]
    return binding.order <= where


def _join(*parts: str) -> str:
    return ".".join(p for p in parts if p)
