"""Replace nodes of a tree by functions of their updated selves.

How every fix is applied, and how the apex rewrite applies its plan: a replacement is keyed by a
node of the tree being visited and built from the node's updated form, so nested replacements
compose (an argument rewritten on its own survives the rewrite of the call around it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import libcst as cst

Build = Callable[[cst.CSTNode], cst.CSTNode | cst.FlattenSentinel | cst.RemovalSentinel]


class ReplaceNodes(cst.CSTTransformer):
    def __init__(self, builds: Mapping[cst.CSTNode, Build]) -> None:
        super().__init__()
        self._builds = builds

    def on_leave(self, original_node, updated_node):
        build = self._builds.get(original_node)
        return build(updated_node) if build else updated_node
