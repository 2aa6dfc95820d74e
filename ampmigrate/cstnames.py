"""Name resolution on libcst, for the one planner that still works on libcst (the apex rewrite,
:mod:`ampmigrate.apex`); everything else resolves names on ``ast`` (:mod:`ampmigrate.engine.names`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

import libcst as cst
from libcst.metadata import (
    BatchableMetadataProvider,
    ExpressionContextProvider,
    MetadataWrapper,
    Scope,
    ScopeProvider,
)
from libcst.metadata.scope_provider import ScopeVisitor

from ampmigrate.engine.names import canonical


def qualified_names(scope: Scope | None, node: cst.CSTNode) -> set[str]:
    """The dotted names ``node`` may refer to through the file's imports."""
    if scope is None:
        return set()
    return {canonical(q.name) for q in scope.get_qualified_names_for(node)}


def scopes(module: cst.Module) -> Mapping[cst.CSTNode, Scope | None]:
    """``ScopeProvider``'s map of ``module``, as ``MetadataWrapper.resolve`` gives it, at about
    half the cost: the wrapper calls each provider's ``visit_Module`` (the expression contexts,
    then the scopes that read them) from a visit of the whole module that does nothing else,
    where ``visit_Module`` does all the work in a visit of its own; here it is called
    directly. Through the wrapper wherever a provider does more than that (another libcst)."""
    if (
        not all(map(_module_only, (ExpressionContextProvider, ScopeProvider)))
        or ExpressionContextProvider.get_inherited_dependencies()
        or ScopeProvider.get_inherited_dependencies() != {ExpressionContextProvider}
    ):
        return MetadataWrapper(module, unsafe_skip_copy=True).resolve(ScopeProvider)
    contexts = ExpressionContextProvider()
    contexts.visit_Module(module)
    found = ScopeProvider()
    found.metadata = {ExpressionContextProvider: contexts._computed}
    late = _late_globals(module)
    if late and hasattr(ScopeVisitor, "_new_scope"):
        visitor = _GlobalsFirst(found, late)
        module.visit(visitor)
        visitor.infer_accesses()
    else:
        found.visit_Module(module)
    return found._computed


def _late_globals(module: cst.Module) -> dict[cst.FunctionDef, set[str]]:
    """The functions whose ``global x`` follows an import of ``x`` in them. CPython lets an
    import bind a name before its ``global`` statement (mt-dnn: ``from apex import amp`` then
    ``global amp``, which binds the module's ``amp``); libcst's scopes record that import as
    a local. Rare: only such modules take the visit below. Statements only, not expressions:
    a small part of the cost of a visit."""
    found: dict[cst.FunctionDef, set[str]] = {}

    def scan(body: Sequence[cst.CSTNode], function: cst.FunctionDef | None, bound: set[str]):
        for statement in body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.Import | cst.ImportFrom) and function is not None:
                        names = small.names if isinstance(small.names, Sequence) else ()
                        bound.update(_bound_name(a) for a in names)
                    elif isinstance(small, cst.Global) and function is not None:
                        late = {n.name.value for n in small.names} & bound
                        if late:
                            found.setdefault(function, set()).update(late)
            elif isinstance(statement, cst.FunctionDef):
                scan(statement.body.body, statement, set())
            elif isinstance(statement, cst.ClassDef):
                scan(statement.body.body, None, set())
            else:
                scan(_blocks(statement), function, bound)

    scan(module.body, None, set())
    return found


def _bound_name(alias: cst.ImportAlias) -> str:
    node = alias.asname.name if alias.asname else alias.name
    while isinstance(node, cst.Attribute):
        node = node.value
    return node.value if isinstance(node, cst.Name) else ""


def _blocks(statement: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements of a compound statement's blocks (``if``/``elif``/``else``, ``try``
    and its handlers, loops, ``with``, ``match``)."""
    found: list[cst.CSTNode] = []
    pending = [statement]
    while pending:
        node = pending.pop()
        for child in node.children:
            if isinstance(child, cst.IndentedBlock | cst.SimpleStatementSuite):
                found.extend(child.body)
            elif isinstance(
                child,
                cst.If
                | cst.Else
                | cst.ExceptHandler
                | cst.ExceptStarHandler
                | cst.Finally
                | cst.MatchCase,
            ):
                pending.append(child)
    return found


class _GlobalsFirst(ScopeVisitor):
    """libcst's scope visit, with each late ``global`` of a function declared as its scope
    opens, as CPython's symbol table reads it."""

    def __init__(self, provider: ScopeProvider, late: dict[cst.FunctionDef, set[str]]) -> None:
        super().__init__(provider)
        self.late = late

    @contextlib.contextmanager
    def _new_scope(self, kind, node, name=None):  # libcst's (private) signature
        with super()._new_scope(kind, node, name):
            for declared in self.late.get(node, ()):
                self.scope.record_global_overwrite(declared)
            yield


def _module_only(provider: type[BatchableMetadataProvider]) -> bool:
    """``provider`` works in ``visit_Module`` alone: no other visit or leave method, no cache,
    no base between it and ``BatchableMetadataProvider``."""
    return (
        provider.__bases__ == (BatchableMetadataProvider,)
        and provider.gen_cache is None
        and not any(
            name.startswith(("visit_", "leave_")) and name != "visit_Module"
            for name in vars(provider)
        )
    )
