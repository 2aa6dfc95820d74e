"""What the planes of the non-amp apex planner share: import-error handlers, the names a block
binds, the fallback a call may take, the RMSNorm stand-in class."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ampmigrate.engine.names import Names, dotted
from ampmigrate.renames import NoFix

_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception"})


def _literal_in(node: ast.expr, allowed: tuple[object, ...]) -> bool:
    """``node`` is a literal equal (same type) to one of ``allowed``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return False
    if not isinstance(node, ast.Constant):
        return False
    return any(
        (type(node.value) is type(a) and node.value == a)
        or (type(a) is int and type(node.value) is float and node.value == a)
        for a in allowed
    )


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((dotted(k) or "").rsplit(".", 1)[-1] in _IMPORT_ERRORS for k in kinds)


_PROBED = " (an availability probe: code that tests its outcome now runs as if apex were installed)"


def _probing_tries(names: Names, stmt: ast.stmt) -> list[ast.Try]:
    """The ``try``s around ``stmt`` that catch its ImportError: it probes for apex."""
    return [
        a
        for a in names.ancestors(stmt)
        if isinstance(a, ast.Try) and any(_catches_import_error(h) for h in a.handlers)
    ]


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _handler_flags(guard: ast.Try) -> set[str]:
    """The names the handlers of ``guard`` assign (``has_apex = False``): flags that record
    whether apex imported."""
    return {
        t.id
        for h in guard.handlers
        for n in ast.walk(h)
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }


def _bound_names(body: list[ast.stmt]) -> set[str]:
    """The names a block binds at its top level."""
    out: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.Assign):
            out |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            out.add(stmt.target.id)
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            out |= {(a.asname or a.name).partition(".")[0] for a in stmt.names}
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(stmt.name)
    return out


def _logs(stmt: ast.stmt) -> bool:
    """A log line of a fallback (``logger.info(...)``, ``print(...)``, ``warnings.warn``) or a
    string: nothing the code after it uses."""
    if not isinstance(stmt, ast.Expr):
        return False
    if isinstance(stmt.value, ast.Constant):
        return isinstance(stmt.value.value, str)
    call = stmt.value
    return isinstance(call, ast.Call) and (dotted(call.func) or "").rpartition(".")[2] in _LOGS


def _accepts(call: ast.Call, accepted: tuple[str, ...], where: str) -> None:
    """Raise ``NoFix`` unless ``call`` passes only ``accepted`` parameters, without splats."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        raise NoFix(f"{where} passes a splat, which may carry what torch's class rejects")
    if len(call.args) > len(accepted):
        raise NoFix(f"{where} passes more positional arguments than torch's class takes alike")
    for k in call.keywords:
        if k.arg not in accepted:
            raise NoFix(f"{where} passes `{k.arg}`, which torch's class does not take alike")


class _FallbackCall(Exception):
    """A call that can only be of the torch fallback a name is also bound to."""


# What apex's norm classes (and SyncBatchNorm) and torch's share with one meaning (beyond
# ``torch.nn.Module``'s).
_SHARED = {
    "torch.nn.LayerNorm": frozenset({"weight", "bias", "eps", "normalized_shape",
                                     "elementwise_affine"}),
    "torch.nn.RMSNorm": frozenset({"weight", "eps", "normalized_shape", "elementwise_affine"}),
    # (apex's SyncBatchNorm is a `_BatchNorm` too: all of it but `channel_last`, `fuse_relu`)
    "torch.nn.SyncBatchNorm": frozenset({"weight", "bias", "eps", "momentum", "num_features",
                                         "affine", "track_running_stats", "running_mean",
                                         "running_var", "num_batches_tracked", "process_group",
                                         "reset_parameters", "reset_running_stats"}),
}  # fmt: skip
_LOGS = frozenset({"print", "info", "warning", "warn", "debug", "error", "exception", "critical"})


def _rms_class(name: str, apex_name: str, torch_name: str, indent: str) -> str:
    """The class ``name`` that stands in for apex's RMSNorm ``apex_name`` where its calls are
    not visible: torch's with FusedRMSNorm's parameters, so apex's ``eps`` default (1e-5;
    torch's is the input dtype's machine epsilon) holds for every call, value and subclass."""
    short = apex_name.rpartition(".")[2]
    lines = [
        f"class {name}({torch_name}.nn.RMSNorm):",
        f'    """apex\'s {short} on torch: `torch.nn.RMSNorm` with apex\'s `eps` default (1e-5,',
        "    not the input dtype's machine epsilon); apex's `memory_efficient` only saved "
        'memory."""',
        "",
        "    def __init__(",  # (one parameter a line: black and ruff keep it so)
        "        self,",
        "        normalized_shape,",
        "        eps=1e-5,",
        "        elementwise_affine=True,",
        "        memory_efficient=False,",
        "    ):",
        "        super().__init__(normalized_shape, eps, elementwise_affine)",
    ]
    return "".join(f"{indent}{line}\n" if line else "\n" for line in lines)


def _executed(stmt: ast.stmt) -> Iterator[ast.AST]:
    """The nodes running ``stmt`` runs: a ``def`` or ``lambda`` only defines its body (its
    decorators, defaults and annotations run); a class runs its body's other statements
    (fairseq's `class FusedLayerNorm(_FusedLayerNorm)` in the `try`: its methods run later)."""
    pending: list[ast.AST] = [stmt]
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            arguments = node.args
            pending += [*arguments.defaults, *(d for d in arguments.kw_defaults if d)]
            if not isinstance(node, ast.Lambda):
                pending += [*node.decorator_list, *(n for n in [node.returns] if n)]
            continue
        pending += ast.iter_child_nodes(node)
