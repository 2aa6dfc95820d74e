"""Where a GradScaler's calls sit relative to each other, for the correctness rules.

Rules like "clip only after ``unscale_``" are about order within one training step, which a
linter can only approximate. One pass records, per function, the calls that matter in source
order, each with the loops and ``if`` branches around it, so that a check can ask "does this run
on every iteration of that loop?" and "can these two ever run in the same pass?". Names are
compared by their source text (``self.scaler``), the way a reader would.

The judgments are deliberately one-sided: a finding needs the scaled backward and the offending
call in the same function; code split across helpers is not flagged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import GlobalScope, ScopeProvider

from ampmigrate.catalog import Rule
from ampmigrate.checks import AUTOCAST
from ampmigrate.findings import Finding, Fix
from ampmigrate.renames import disabled_by_keyword, qualified_names

GRAD_SCALER = frozenset(
    {
        "torch.amp.GradScaler", "torch.GradScaler", "torch.amp.grad_scaler.GradScaler",
        "torch.cuda.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler",
        "torch.cpu.amp.GradScaler", "torch.cpu.amp.grad_scaler.GradScaler",
    }
)  # fmt: skip
CLIP = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grad_norm", "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_value_", "torch.nn.utils.clip_grad.clip_grad_norm",
    }
)  # fmt: skip
NORM = frozenset({"torch.norm", "torch.linalg.norm", "torch.linalg.vector_norm"})
SAVE = frozenset({"torch.save"})
_OLD_CPU_AUTOCAST = frozenset(n for n in AUTOCAST if ".cpu." in n)
_OLD_CUDA_AUTOCAST = frozenset(n for n in AUTOCAST if ".cuda." in n)

# (the test of an `if`, "body" or "orelse"): two `if`s on the same test text are one decision,
# as in `if amp: scaled backward ... if amp: scaler.step else: optimizer.step()`.
Branch = tuple[str, str]


@dataclass(frozen=True)
class Event:
    kind: str  # backward | unscale | clip | norm | step | update | call_step
    node: cst.Call
    receiver: str  # the scaler (or, for call_step, the object whose .step() is called)
    arg: str  # the optimizer passed to step/unscale_
    scope: cst.CSTNode
    loops: tuple[cst.CSTNode, ...]
    branches: tuple[Branch, ...]
    statement: cst.SimpleStatementLine | None
    order: int

    def exclusive(self, other: Event) -> bool:
        """True when an if/else keeps the two from running in the same pass."""
        mine = dict(self.branches)
        return any(mine.get(key, side) != side for key, side in other.branches)


@dataclass
class Flow:
    """What one module does with scalers, optimizers and checkpoints."""

    module: cst.Module
    calls: list[Event] = field(default_factory=list)
    scalers: set[str] = field(default_factory=set)  # receivers that are GradScalers
    constructions: list[tuple[cst.Call, bool]] = field(default_factory=list)  # (call, enabled)
    # Where a scaler lives, so that a checkpoint or cast is only judged next to it: functions
    # (ids) that build or use one, classes with a `self.` scaler, and a module-level one.
    scaler_scopes: set[int] = field(default_factory=set)
    scaler_classes: set[int] = field(default_factory=set)
    training_scopes: set[int] = field(default_factory=set)  # also: builds an optimizer
    where: dict[int, tuple[int, int]] = field(default_factory=dict)  # call id -> (scope, class)
    optimizers: set[str] = field(default_factory=set)
    autocast_dtypes: list[str] = field(default_factory=list)  # bf16 | fp16 | unknown
    saves: list[tuple[cst.Call, cst.BaseExpression]] = field(default_factory=list)
    state_dicts: list[str] = field(default_factory=list)  # receivers of .state_dict()
    loads: list[tuple[cst.Call, str]] = field(default_factory=list)  # .load_state_dict()
    models: set[str] = field(default_factory=set)  # receivers of .parameters()
    casts: list[tuple[cst.Call, str]] = field(default_factory=list)  # fp16 casts, target
    model_scopes: set[tuple[int, str]] = field(default_factory=set)  # (scope, M) of M.parameters()
    dicts: dict[tuple[int, str], cst.Dict] = field(default_factory=dict)  # (scope, name) -> {}

    def events(self, kind: str) -> Iterator[Event]:
        return (e for e in self.calls if e.kind == kind)

    def in_scope(self, event: Event, kind: str) -> list[Event]:
        return [e for e in self.calls if e.kind == kind and e.scope is event.scope]

    def scaler_near(self, call: cst.Call) -> bool:
        """A scaler is built or used in ``call``'s function, its class (``self.scaler``) or at
        module level: only then does a checkpoint or cast there concern it."""
        scope, cls = self.where[id(call)]
        return (
            scope in self.scaler_scopes
            or (cls != 0 and cls in self.scaler_classes)
            or id(self.module) in self.scaler_scopes
        )


def _method(node: cst.Call) -> tuple[str, cst.BaseExpression] | None:
    if isinstance(node.func, cst.Attribute):
        return node.func.attr.value, node.func.value
    return None


def _dtype_name(node: cst.BaseExpression | None) -> str:
    if isinstance(node, cst.Attribute):
        name = node.attr.value
    elif isinstance(node, cst.SimpleString):
        name = node.evaluated_value if isinstance(node.evaluated_value, str) else ""
    else:
        return "unknown"
    return {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}.get(name, "unknown")


class _Collector(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(self, flow: Flow) -> None:
        super().__init__()
        self.flow = flow
        self._scopes: list[cst.CSTNode] = [flow.module]
        self._classes: list[cst.ClassDef] = []
        self._loops: list[list[cst.CSTNode]] = [[]]
        self._branches: list[list[Branch]] = [[]]
        self._statement: cst.SimpleStatementLine | None = None
        self._assigned: list[str] = []  # targets of the assignment being visited
        self._norms: list[cst.Call] = []  # a norm inside a norm is one finding, not two

    def _code(self, node: cst.CSTNode) -> str:
        return self.flow.module.code_for_node(node)

    def _names(self, node: cst.CSTNode) -> set[str]:
        return qualified_names(self.get_metadata(ScopeProvider, node, None), node)

    # -- where we are ------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append(node)
        self._loops.append([])
        self._branches.append([])

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._scopes.pop()
        self._loops.pop()
        self._branches.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._classes.pop()

    def _place(self, node: cst.Call) -> None:
        cls = id(self._classes[-1]) if self._classes else 0
        self.flow.where[id(node)] = (id(self._scopes[-1]), cls)

    def _scaler_here(self, receiver: str, node: cst.CSTNode | None = None) -> None:
        self.flow.scaler_scopes.add(id(self._scopes[-1]))
        self.flow.training_scopes.add(id(self._scopes[-1]))
        if receiver.startswith("self.") and self._classes:
            self.flow.scaler_classes.add(id(self._classes[-1]))
        if isinstance(node, cst.Name) and self._global(node):
            self.flow.scaler_scopes.add(id(self.flow.module))

    def _global(self, name: cst.Name) -> bool:
        """A name bound at module level, or not bound in the file at all (a global)."""
        scope = self.get_metadata(ScopeProvider, name, None)
        if scope is None:
            return False
        assignments = scope[name.value]
        return not assignments or all(isinstance(a.scope, GlobalScope) for a in assignments)

    def _enter_loop(self, node: cst.CSTNode) -> None:
        self._loops[-1].append(node)

    def _leave_loop(self, node: cst.CSTNode) -> None:
        self._loops[-1].pop()

    visit_For_body = visit_While_body = _enter_loop
    leave_For_body = leave_While_body = _leave_loop

    def visit_If_body(self, node: cst.If) -> None:
        self._branches[-1].append((self._code(node.test), "body"))

    def visit_If_orelse(self, node: cst.If) -> None:
        self._branches[-1].append((self._code(node.test), "orelse"))

    def _leave_branch(self, node: cst.If) -> None:
        if self._branches[-1] and self._branches[-1][-1][0] == self._code(node.test):
            self._branches[-1].pop()

    leave_If_body = leave_If_orelse = _leave_branch

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._statement = node

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine) -> None:
        self._statement = None

    def visit_Assign(self, node: cst.Assign) -> None:
        self._assigned = [self._code(t.target) for t in node.targets]
        if isinstance(node.value, cst.Dict):
            for target in self._assigned:
                self.flow.dicts[(id(self._scopes[-1]), target)] = node.value

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._assigned = [self._code(node.target)]

    def leave_Assign(self, original_node: cst.Assign) -> None:
        self._assigned = []

    leave_AnnAssign = leave_Assign

    # -- what happens ------------------------------------------------------------------
    def _event(self, kind: str, node: cst.Call, receiver: str = "", arg: str = "") -> None:
        self.flow.calls.append(
            Event(
                kind=kind,
                node=node,
                receiver=receiver,
                arg=arg,
                scope=self._scopes[-1],
                loops=tuple(self._loops[-1]),
                branches=tuple(self._branches[-1]),
                statement=self._statement,
                order=len(self.flow.calls),
            )
        )

    def visit_Call(self, node: cst.Call) -> None:
        names = self._names(node.func)
        if names & GRAD_SCALER:
            enabled = not disabled_by_keyword(node.args)
            self.flow.constructions.append((node, enabled))
            self.flow.scalers.update(self._assigned)
            for target in self._assigned if enabled else ():
                self._scaler_here(target)
        elif names & AUTOCAST:
            self.flow.autocast_dtypes.append(self._autocast_dtype(node, names))
        elif names & CLIP:
            self._event("clip", node)
        elif names & NORM and any(".grad" in self._code(a.value) for a in node.args):
            self._norm(node)
        elif names & SAVE and node.args:
            self.flow.saves.append((node, self._saved(node.args[0].value)))
            self._place(node)
        elif any(n.startswith("torch.optim.") and "lr_scheduler" not in n for n in names):
            self.flow.optimizers.update(self._assigned)
            self.flow.training_scopes.add(id(self._scopes[-1]))
        method = _method(node)
        if method is not None:
            self._method_call(node, *method)

    def _norm(self, node: cst.Call) -> None:
        if not self._norms:
            self._event("norm", node)
        self._norms.append(node)

    def leave_Call(self, original_node: cst.Call) -> None:
        if self._norms and self._norms[-1] is original_node:
            self._norms.pop()

    def _saved(self, payload: cst.BaseExpression) -> cst.BaseExpression:
        """The dict a ``torch.save`` writes, looked through one local name."""
        if isinstance(payload, cst.Name | cst.Attribute):
            found = self.flow.dicts.get((id(self._scopes[-1]), self._code(payload)))
            return found if found is not None else payload
        return payload

    def _method_call(self, node: cst.Call, name: str, receiver: cst.BaseExpression) -> None:
        text = self._code(receiver)
        first = self._code(node.args[0].value) if node.args else ""
        if name == "backward" and isinstance(receiver, cst.Call):
            inner = _method(receiver)
            if inner and inner[0] == "scale" and len(receiver.args) == 1:
                scaler = self._code(inner[1])
                self.flow.scalers.add(scaler)
                self._scaler_here(scaler, inner[1])
                self._event("backward", node, scaler)
        elif name == "unscale_" and len(node.args) == 1:
            self.flow.scalers.add(text)
            self.flow.optimizers.add(first)
            self._event("unscale", node, text, first)
        elif name == "step":
            self._event("call_step", node, text, first)
        elif name == "update" and len(node.args) <= 1:
            self._event("update", node, text, first)
        elif name == "norm" and ".grad" in text:
            self._norm(node)
        elif name == "state_dict" and not node.args:
            self.flow.state_dicts.append(text)
        elif name == "load_state_dict":
            self.flow.loads.append((node, text))
            self._place(node)
        elif name == "parameters":
            self.flow.models.add(text)
            self.flow.model_scopes.add((id(self._scopes[-1]), text))
        elif (name == "half" and not node.args) or (name == "to" and self._to_fp16(node)):
            self._place(node)
            self.flow.casts.append((node, text))
            for target in self._assigned:
                self.flow.casts.append((node, target))

    @staticmethod
    def _to_fp16(node: cst.Call) -> bool:
        return any(
            (not a.keyword or a.keyword.value == "dtype") and _dtype_name(a.value) == "fp16"
            for a in node.args
        )

    def _autocast_dtype(self, node: cst.Call, names: set[str]) -> str:
        """The dtype a region computes in, where the call spells it out; else unknown."""
        old = names & (_OLD_CPU_AUTOCAST | _OLD_CUDA_AUTOCAST)
        keyword = {a.keyword.value: a.value for a in node.args if a.keyword}
        positional = [a.value for a in node.args if not a.keyword and not a.star]
        if any(a.star for a in node.args):
            return "unknown"
        if "dtype" in keyword:
            return _dtype_name(keyword["dtype"])
        if len(positional) >= 2:
            return _dtype_name(positional[1])
        if old:
            return "bf16" if old & _OLD_CPU_AUTOCAST else "fp16"
        device = keyword.get("device_type", positional[0] if positional else None)
        if isinstance(device, cst.SimpleString):
            return {"cpu": "bf16", "cuda": "fp16"}.get(str(device.evaluated_value), "unknown")
        return "unknown"


def build_flow(wrapper: cst.MetadataWrapper) -> Flow:
    flow = Flow(module=wrapper.module)
    wrapper.visit(_Collector(flow))
    # `.step(x)` / `.update()` mean the scaler's only on a known scaler.
    resolved = []
    for event in flow.calls:
        if event.kind == "call_step" and event.receiver in flow.scalers:
            flow.optimizers.add(event.arg)
            event = Event(**{**event.__dict__, "kind": "step"})
        elif event.kind == "update" and event.receiver not in flow.scalers:
            continue
        resolved.append(event)
    flow.calls = resolved
    return flow


# -- the checks ------------------------------------------------------------------------
FlowCheck = Callable[[Flow, Rule], list[Finding]]


def _before(flow: Flow, kind: str, event: Event) -> list[Event]:
    """Same-function events of ``kind`` earlier in the source that can run with ``event``."""
    return [
        e for e in flow.in_scope(event, kind) if e.order < event.order and not e.exclusive(event)
    ]


def _pending_backward(flow: Flow, event: Event) -> Event | None:
    """The latest scaled backward before ``event`` with no unscale_/update since."""
    backwards = _before(flow, "backward", event)
    if not backwards:
        return None
    last = backwards[-1]
    resets = _before(flow, "unscale", event) + _before(flow, "update", event)
    return None if any(r.order > last.order for r in resets) else last


def clip_before_unscale(flow: Flow, rule: Rule) -> list[Finding]:
    findings = []
    for event in (e for e in flow.calls if e.kind in {"clip", "norm"}):
        backward = _pending_backward(flow, event)
        if backward is None:
            continue
        what = "clips" if event.kind == "clip" else "takes the norm of"
        scaler = backward.receiver
        message = (
            f"{what} gradients still multiplied by the loss scale (after "
            f"`{scaler}.scale(loss).backward()`): call `{scaler}.unscale_(optimizer)` first"
        )
        fix = _insert_unscale(flow, event, backward) if event.kind == "clip" else None
        findings.append(Finding(rule.code, message, event.node, fix))
    return findings


def _insert_unscale(flow: Flow, clip: Event, backward: Event) -> Fix | None:
    """``scaler.unscale_(opt)`` on the line before the clip, when the optimizer is certain."""
    statement = clip.statement
    if statement is None or len(statement.body) != 1:
        return None
    small = statement.body[0]
    value = getattr(small, "value", None)
    if value is not clip.node or not isinstance(small, cst.Expr | cst.Assign | cst.AnnAssign):
        return None
    optimizers = {
        e.arg for e in flow.in_scope(clip, "step") if e.receiver == backward.receiver and e.arg
    }
    if len(optimizers) != 1:
        return None
    line = cst.parse_statement(f"{backward.receiver}.unscale_({optimizers.pop()})\n")

    def build(updated: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(updated, cst.SimpleStatementLine)
        first = line.with_changes(leading_lines=updated.leading_lines)
        return cst.FlattenSentinel([first, updated.with_changes(leading_lines=())])

    return Fix("unsafe", statement, build)


def _update_missing(flow: Flow, event: Event) -> str:
    """Why no ``update()`` follows ``event`` in the same step, or '' when one does."""
    updates = [
        u
        for u in flow.in_scope(event, "update")
        if u.receiver == event.receiver and not u.exclusive(event)
    ]
    if event.loops:
        loop = event.loops[-1]
        if updates and not any(loop in u.loops for u in updates):
            return "loop"
    if not any(u.order > event.order for u in updates) and event.kind == "step":
        return "none"
    return ""


def double_unscale(flow: Flow, rule: Rule) -> list[Finding]:
    findings = []
    for event in flow.events("unscale"):
        earlier = [
            e
            for e in _before(flow, "unscale", event)
            if (e.receiver, e.arg) == (event.receiver, event.arg)
            and not any(e.order < u.order < event.order for u in _before(flow, "update", event))
        ]
        if earlier:
            message = (
                f"`{event.receiver}.unscale_({event.arg})` already ran earlier with no "
                f"`{event.receiver}.update()` between: the second call raises RuntimeError"
            )
        elif _update_missing(flow, event) == "loop":
            message = (
                f"`{event.receiver}.unscale_({event.arg})` runs on every iteration of this loop "
                f"but `{event.receiver}.update()` runs outside it: the second iteration raises "
                "RuntimeError (unscale_ once per optimizer step, just before clipping)"
            )
        else:
            continue
        findings.append(Finding(rule.code, message, event.node, None))
    return findings


def step_without_update(flow: Flow, rule: Rule) -> list[Finding]:
    findings = []
    for event in flow.events("step"):
        missing = _update_missing(flow, event)
        if missing == "none":
            message = (
                f"`{event.receiver}.step({event.arg})` with no `{event.receiver}.update()` after "
                "it: the scale never adapts, and the next step() raises RuntimeError"
            )
        elif missing == "loop":
            message = (
                f"`{event.receiver}.step({event.arg})` runs on every iteration of this loop but "
                f"`{event.receiver}.update()` runs outside it: the second step() raises "
                "RuntimeError"
            )
        else:
            continue
        findings.append(Finding(rule.code, message, event.node, None))
    return findings


def _optimizer_like(flow: Flow, text: str) -> bool:
    last = text.rsplit(".", 1)[-1].lower()
    return text in flow.optimizers or "optim" in last or last in {"opt", "opt_g", "opt_d"}


def optimizer_step_bypasses_scaler(flow: Flow, rule: Rule) -> list[Finding]:
    findings = []
    for event in flow.events("call_step"):
        if not _optimizer_like(flow, event.receiver) or not _before(flow, "backward", event):
            continue
        steps = flow.in_scope(event, "step")
        if any(s.exclusive(event) for s in steps):
            continue  # `if amp: scaler.step(opt) else: opt.step()`
        stepped = {s.arg for s in steps}
        if event.receiver in stepped:
            message = (
                f"`{event.receiver}` is stepped twice: by `scaler.step({event.receiver})` and "
                f"by `{event.receiver}.step()`, which also skips the scaler's inf/NaN check"
            )
        elif not steps:
            scaler = _before(flow, "backward", event)[-1].receiver
            message = (
                f"`{event.receiver}.step()` after `{scaler}.scale(loss).backward()`: the "
                f"gradients are still scaled and inf/NaN steps are not skipped; use "
                f"`{scaler}.step({event.receiver})` then `{scaler}.update()`"
            )
        else:
            continue  # another, unscaled optimizer
        findings.append(Finding(rule.code, message, event.node, None))
    return findings


def grad_scaler_with_bfloat16(flow: Flow, rule: Rule) -> list[Finding]:
    dtypes = flow.autocast_dtypes
    if not dtypes or any(d != "bf16" for d in dtypes):
        return []
    message = (
        "GradScaler where every autocast region computes in bfloat16: bfloat16 has float32's "
        "exponent range, so loss scaling does nothing; drop the scaler (or use float16 if "
        "scaling was intended)"
    )
    return [
        Finding(rule.code, message, call, None) for call, enabled in flow.constructions if enabled
    ]


def _mentions_scaler(flow: Flow, payload: cst.BaseExpression) -> bool:
    text = flow.module.code_for_node(payload).lower()
    return "scaler" in text or any(s.lower() in text for s in flow.scalers)


def checkpoint_without_scaler_state(flow: Flow, rule: Rule) -> list[Finding]:
    findings = []
    saves_scaler = any(r in flow.scalers for r in flow.state_dicts)
    loads_scaler = any(r in flow.scalers for _, r in flow.loads)
    for call, payload in flow.saves:
        text = flow.module.code_for_node(payload)
        if "state_dict()" not in text or saves_scaler or _mentions_scaler(flow, payload):
            continue
        if not flow.scaler_near(call):
            continue
        message = (
            "checkpoint saves model/optimizer state but not the GradScaler's: a resume restarts "
            "the loss scale at its initial value and is not bit-exact; add "
            '`"scaler": scaler.state_dict()`'
        )
        findings.append(Finding(rule.code, message, call, None))
    if not loads_scaler:
        for call, receiver in flow.loads:
            if receiver in flow.scalers or not _optimizer_like(flow, receiver):
                continue
            if not flow.scaler_near(call):
                continue
            message = (
                f"`{receiver}` state is restored but the GradScaler's is not: the resumed run "
                'restarts the loss scale; also call `scaler.load_state_dict(checkpoint["scaler"])`'
            )
            findings.append(Finding(rule.code, message, call, None))
    return findings


def fp16_params_with_grad_scaler(flow: Flow, rule: Rule) -> list[Finding]:
    flagged: dict[int, Finding] = {}
    for call, target in flow.casts:
        scope, _ = flow.where[id(call)]
        trains = scope in flow.training_scopes or (scope, target) in flow.model_scopes
        # A model cast for evaluation, away from any optimizer or scaler, is not judged.
        if target in flow.models and trains and flow.scaler_near(call) and id(call) not in flagged:
            message = (
                f"`{target}` is cast to float16 while a GradScaler steps its optimizer: "
                "`unscale_` raises 'Attempting to unscale FP16 gradients'; keep the parameters "
                "in float32 and let autocast run the forward pass in float16"
            )
            flagged[id(call)] = Finding(rule.code, message, call, None)
    return list(flagged.values())


FLOW_CHECKS: dict[str, FlowCheck] = {
    "clip-before-unscale": clip_before_unscale,
    "double-unscale": double_unscale,
    "step-without-update": step_without_update,
    "optimizer-step-bypasses-scaler": optimizer_step_bypasses_scaler,
    "grad-scaler-with-bfloat16": grad_scaler_with_bfloat16,
    "checkpoint-without-scaler-state": checkpoint_without_scaler_state,
    "fp16-params-with-grad-scaler": fp16_params_with_grad_scaler,
}
