"""Rules whose logic is code rather than a symbol table (issue: mixed-precision correctness).

Each check is a libcst visitor taking its Rule and the ``target-keras`` setting and collecting
``findings``; a rule names its check in its TOML (``check = "..."``) and lists the names whose
spelling the prefilter must see (``triggers``). The TF/Keras checks live in :mod:`ampmigrate.keras`,
the apex rewrite in :mod:`ampmigrate.apex`; the scaler-flow rules share one analysis instead
(:mod:`ampmigrate.scalerflow`).
"""

from __future__ import annotations

import libcst as cst
from libcst.metadata import ScopeProvider

from ampmigrate.apex import ApexO1
from ampmigrate.catalog import Rule
from ampmigrate.findings import Finding
from ampmigrate.keras import KERAS_CHECKS
from ampmigrate.renames import disabled_by_keyword, is_name, qualified_names

AUTOCAST = frozenset(
    {
        "torch.amp.autocast", "torch.autocast", "torch.amp.autocast_mode.autocast",
        "torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast",
        "torch.cpu.amp.autocast", "torch.cpu.amp.autocast_mode.autocast",
    }
)  # fmt: skip
_OLD_SIGNATURE = frozenset(n for n in AUTOCAST if ".cuda." in n or ".cpu." in n)


class BackwardInAutocast(cst.CSTVisitor):
    """``backward()`` lexically inside an enabled autocast region (``with`` or decorator)."""

    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(self, rule: Rule, target_keras: int = 3) -> None:
        super().__init__()
        self.rule = rule
        self.findings: list[Finding] = []
        self._regions = [False]  # is the code here inside an enabled autocast region?

    def _names(self, node: cst.CSTNode) -> set[str]:
        return qualified_names(self.get_metadata(ScopeProvider, node, None), node)

    def _is_autocast(self, node: cst.BaseExpression) -> bool:
        """A call that opens an autocast region that is not literally disabled."""
        if not isinstance(node, cst.Call):
            return False
        names = self._names(node.func) & AUTOCAST
        if not names or disabled_by_keyword(node.args):
            return False
        positional = [a for a in node.args if not a.keyword and not a.star]
        if names & _OLD_SIGNATURE and positional:  # the old first parameter is `enabled`
            return not is_name(positional[0].value, "False")
        return True

    def visit_With(self, node: cst.With) -> None:
        opens = any(self._is_autocast(item.item) for item in node.items)
        self._regions.append(self._regions[-1] or opens)

    def leave_With(self, original_node: cst.With) -> None:
        self._regions.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        # A def runs later, outside the region it is written in, unless it is decorated.
        self._regions.append(any(self._is_autocast(d.decorator) for d in node.decorators))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._regions.pop()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._regions.append(False)

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
        self._regions.pop()

    def visit_Call(self, node: cst.Call) -> None:
        if not self._regions[-1]:
            return
        is_backward = isinstance(node.func, cst.Attribute) and node.func.attr.value == "backward"
        if is_backward or "torch.autograd.backward" in self._names(node.func):
            message = (
                "`backward()` inside an autocast region: backward ops already run in the dtype "
                "autocast chose for their forward ops; leave the `with` block first (PyTorch AMP "
                "docs: backward passes under autocast are not recommended)"
            )
            self.findings.append(Finding(self.rule.code, message, node, None))


# Every visitor check, built as ``CHECKS[name](rule, target_keras)``.
CHECKS = {
    "backward-in-autocast": BackwardInAutocast,
    "apex-o1-rewrite": ApexO1,
    **KERAS_CHECKS,
}
