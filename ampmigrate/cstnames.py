"""Name resolution on libcst, for the one planner that still works on libcst (the apex rewrite,
:mod:`ampmigrate.apex`); everything else resolves names on ``ast`` (:mod:`ampmigrate.engine.names`).
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst
from libcst.metadata import (
    BatchableMetadataProvider,
    ExpressionContextProvider,
    MetadataWrapper,
    Scope,
    ScopeProvider,
)


def qualified_names(scope: Scope | None, node: cst.CSTNode) -> set[str]:
    """The dotted names ``node`` may refer to through the file's imports."""
    return {q.name for q in scope.get_qualified_names_for(node)} if scope is not None else set()


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
    found.visit_Module(module)
    return found._computed


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
