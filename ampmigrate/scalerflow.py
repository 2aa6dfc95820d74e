"""Where a GradScaler's calls sit relative to each other, for the correctness rules.

Rules like "clip only after ``unscale_``" are about order within one training step, which a
linter can only approximate. One pass over the ``ast`` records, per function, the calls that
matter in source order, each with the loops and ``if`` branches around it, so that a check can
ask "does this run on every iteration of that loop?" and "can these two ever run in the same
pass?". Names are compared by their source text (``self.scaler``), the way a reader would.

The judgments are deliberately one-sided: a finding needs the scaled backward and the offending
call in the same function. Checkpoints are the exception: a checkpoint helper (a function of the
same file, or of a sibling module when a tree is checked) is followed from the call that a
scaler's owner makes to it, because that is where real projects write their checkpoints.
"""

from __future__ import annotations

import ast
import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple

from ampmigrate.catalog import Rule
from ampmigrate.checks import AUTOCAST
from ampmigrate.engine.names import Names, child_fields
from ampmigrate.engine.source import Source
from ampmigrate.findings import Edit, Finding, Fix
from ampmigrate.renames import disabled_by_keyword

if TYPE_CHECKING:
    from ampmigrate.engine import Settings

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
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SIMPLE = (
    ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Delete, ast.Pass,
    ast.Break, ast.Continue, ast.Raise, ast.Assert, ast.Import, ast.ImportFrom, ast.Global,
    ast.Nonlocal,
)  # fmt: skip
_BLANK = re.compile(r"[ \t\f]*")
_SPACE = re.compile(r"(?:[ \t\f\r\n]|\\\r?\n|#[^\r\n]*)*")

# (the test of an `if`, "body" or "orelse"): two `if`s on the same test text are one decision,
# as in `if amp: scaled backward ... if amp: scaler.step else: optimizer.step()`.
Branch = tuple[str, str]


@dataclass(frozen=True)
class Event:
    kind: str  # backward | unscale | clip | norm | step | update | call_step
    node: ast.Call
    receiver: str  # the scaler (or, for call_step, the object whose .step() is called)
    arg: str  # the optimizer passed to step/unscale_
    scope: ast.AST
    loops: tuple[ast.AST, ...]
    branches: tuple[Branch, ...]
    depths: tuple[int, ...]  # per branch: how many of ``loops`` were open when it was entered
    statement: ast.stmt | None  # the statement when it is alone on its line (for a fix)
    order: int

    def exclusive(self, other: Event) -> bool:
        """True when an if/else keeps the two from running in the same pass."""
        mine = dict(self.branches)
        return any(mine.get(key, side) != side for key, side in other.branches)

    def conditions_in(self, depth: int) -> set[Branch]:
        """The branches entered once ``depth`` loops were open: inside the innermost of them,
        so decided afresh on each of its iterations (``depth`` 0: every branch)."""
        return {b for b, d in zip(self.branches, self.depths, strict=True) if d >= depth}


@dataclass(frozen=True)
class Helper:
    """What a module-level function does with checkpoints: picklable, so that the summary of a
    sibling module can travel to the worker that checks its caller."""

    module: str = ""  # the file name of a sibling module ("" for the file checked)
    save_line: int = 0  # a torch.save of model/optimizer state without a scaler's
    passes: tuple[int, ...] = ()  # parameters (by position) handed to torch.save as the payload
    passes_line: int = 0
    params: tuple[str, ...] = ()
    load: str = ""  # the optimizer whose state it restores without a scaler's
    load_line: int = 0
    scaler_state: bool = False  # it saves or restores a scaler's state itself
    judged: bool = False  # a scaler is next to its save/load there: flagged where it is

    def at(self, line: int) -> str:
        """Where ``line`` is, for a message."""
        return f"{self.module}:{line}" if self.module else f"line {line}"


class Siblings:
    """The sibling modules a call next to a scaler may lead into (absolute paths), each read
    and summarized (:func:`_summarize`) only when a call first leads there, in the process that
    checks the caller: most are never asked about, and none is parsed before the run starts.
    Pickled without the summaries (each worker makes the ones it needs)."""

    def __init__(self, wanted: Iterable[str] = ()) -> None:
        self.wanted = frozenset(wanted)
        self._summaries: dict[str, dict[str, Helper]] = {}
        self._places: dict[tuple[str, int, str], tuple[str, ...]] = {}
        # the module name each sibling is imported by: `utils` for utils.py and utils/__init__.py
        self._stems = {_stem(p) for p in self.wanted}

    def __bool__(self) -> bool:
        return bool(self.wanted)

    def __getstate__(self) -> tuple[frozenset[str]]:
        return (self.wanted,)  # never a false value: pickle would skip __setstate__

    def __setstate__(self, state: tuple[frozenset[str]]) -> None:
        self.__init__(state[0])

    def places(self, path: str, dots: int, module: str) -> tuple[str, ...]:
        """The sibling modules among the places ``module``, imported from ``path``, may live
        (:func:`_module_paths`, in its order): worked out once per import, since every call
        next to a scaler asks, and most of the places are folders up to the root."""
        key = (path, dots, module)
        found = self._places.get(key)
        if found is None:
            found = self._places[key] = (
                tuple(p for p in _module_paths(path, dots, module) if p in self.wanted)
                if module.rpartition(".")[2] in self._stems
                else ()  # no sibling has the file or folder name the module needs
            )
        return found

    def helpers(self, path: str) -> Mapping[str, Helper]:
        """What the module-level functions of ``path`` do with checkpoints ({} when it is not
        one of the sibling modules)."""
        if path not in self.wanted:
            return {}
        found = self._summaries.get(path)
        if found is None:
            try:
                with open(path, "rb") as file:
                    found = _summarize(path, file.read())
            except OSError:
                found = {}
            self._summaries[path] = found
        return found


@dataclass
class Flow:
    """What one module does with scalers, optimizers and checkpoints."""

    module: ast.Module
    source: Source
    names: Names
    calls: list[Event] = field(default_factory=list)
    scalers: set[str] = field(default_factory=set)  # receivers that are GradScalers
    constructions: list[tuple[ast.Call, bool]] = field(default_factory=list)  # (call, enabled)
    # per scaler: the tests whose falsehood turns it off (its `enabled=` and each `and` operand),
    # as ``_normal`` spells them: in their `else:` nothing it scales is scaled
    switches: dict[str, set[str]] = field(default_factory=dict)
    # Where a scaler lives, so that a checkpoint or cast is only judged next to it: functions
    # (ids) that build or use one, classes with a `self.` scaler, and a module-level one; each
    # with the scaler's name as the code spells it, for messages.
    scaler_scopes: dict[int, str] = field(default_factory=dict)
    scaler_classes: dict[int, str] = field(default_factory=dict)
    training_scopes: set[int] = field(default_factory=set)  # also: builds an optimizer
    where: dict[int, tuple[int, int]] = field(default_factory=dict)  # call id -> (scope, class)
    optimizers: set[str] = field(default_factory=set)
    autocast_dtypes: list[str] = field(default_factory=list)  # bf16 | fp16 | unknown
    # torch.save calls: (call, the payload looked through a local dict name, the payload as passed)
    saves: list[tuple[ast.Call, ast.expr, ast.expr]] = field(default_factory=list)
    state_dicts: list[str] = field(default_factory=list)  # receivers of .state_dict()
    loads: list[tuple[ast.Call, str]] = field(default_factory=list)  # .load_state_dict()
    models: set[str] = field(default_factory=set)  # receivers of .parameters()
    casts: list[tuple[ast.Call, str]] = field(default_factory=list)  # fp16 casts, target
    model_scopes: set[tuple[int, str]] = field(default_factory=set)  # (scope, M) of M.parameters()
    dicts: dict[tuple[int, str], ast.Dict] = field(default_factory=dict)  # (scope, name) -> {}
    # f(...) / mod.f(...), with what the callee may name (None: not resolved yet): calls to a
    # checkpoint helper?
    plain_calls: list[tuple[ast.Call, set[str] | None]] = field(default_factory=list)
    siblings: Siblings = field(default_factory=Siblings)
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    properties: list[ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=list)

    def events(self, kind: str) -> Iterator[Event]:
        return (e for e in self.calls if e.kind == kind)

    def in_scope(self, event: Event, kind: str) -> list[Event]:
        return [e for e in self.calls if e.kind == kind and e.scope is event.scope]

    def text(self, node: ast.AST) -> str:
        return self.source.segment(node)

    def scaler_near(self, call: ast.Call) -> bool:
        """A scaler is built or used in ``call``'s function, its class (``self.scaler``) or at
        module level: only then does a checkpoint or cast there concern it."""
        return self.scaler_name(call) is not None

    def scaler_name(self, call: ast.Call) -> str | None:
        """The scaler next to ``call``, as the code names it (None: no scaler there)."""
        scope, cls = self.where[id(call)]
        if scope in self.scaler_scopes:
            return self.scaler_scopes[scope]
        if cls != 0 and cls in self.scaler_classes:
            return self.scaler_classes[cls]
        return self.scaler_scopes.get(id(self.module))


def _method(node: ast.Call) -> tuple[str, ast.expr] | None:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr, node.func.value
    return None


def _dtype_name(node: ast.expr | None) -> str:
    if isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Constant):
        name = node.value if isinstance(node.value, str) else ""
    else:
        return "unknown"
    return {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}.get(name, "unknown")


class _Arg(NamedTuple):  # a tuple: one is made per argument of every call in the file
    keyword: str | None
    value: ast.expr
    star: str  # "", "*" or "**"


def _args(call: ast.Call) -> list[_Arg]:
    """Positional and keyword arguments together in source order (as libcst lists them)."""
    args = [
        _Arg(None, a.value, "*") if type(a) is ast.Starred else _Arg(None, a, "") for a in call.args
    ]
    if not call.keywords:
        return args
    keywords = [_Arg(k.arg, k.value, "" if k.arg else "**") for k in call.keywords]
    if not any(a.star for a in args):  # only `*rest` may follow a keyword: `f(k=1, *rest)`
        return args + keywords
    nodes, merged = [*call.args, *call.keywords], args + keywords
    order = sorted(range(len(nodes)), key=lambda i: (nodes[i].lineno, nodes[i].col_offset))
    return [merged[i] for i in order]


class _Collector:
    """One source-order walk (libcst's visiting order: decorators and defaults belong to the
    function they decorate) that fills a :class:`Flow`."""

    def __init__(self, flow: Flow, names: Names) -> None:
        self.flow = flow
        self.names = names
        self.text = flow.source.text
        self._scopes: list[ast.AST] = [flow.module]
        self._classes: list[ast.ClassDef] = []
        self._loops: list[list[ast.AST]] = [[]]
        self._branches: list[list[tuple[Branch, int]]] = [[]]
        self._statement: ast.stmt | None = None  # the simple statement being visited
        self._assigned: list[str] = []  # targets of the assignment being visited
        self._norms: list[ast.Call] = []  # a norm inside a norm is one finding, not two

    def _code(self, node: ast.AST) -> str:
        return self.flow.source.segment(node)

    def _own(self, node: ast.AST, low: int, high: int) -> str:
        """``node``'s text with the parentheses that belong to it (libcst counts them as part
        of the expression; ast does not): those strictly inside (low, high)."""
        text = self.text
        start, end = self.flow.source.span(node)
        while True:
            left = start - 1
            while left > low and text[left] in " \t\f\r\n\\":
                left -= 1
            right = _SPACE.match(text, end).end()
            if not (low < left and right < high and text[left] == "(" and text[right] == ")"):
                return text[start:end]
            start, end = left, right + 1

    def _receiver(self, attribute: ast.Attribute) -> str:
        start = self.flow.source.span(attribute)[0]
        return self._own(attribute.value, start - 1, len(self.text))

    def _arg_text(self, call: ast.Call, value: ast.expr) -> str:
        end = self.flow.source.span(call)[1]
        opening = _SPACE.match(self.text, self.flow.source.span(call.func)[1]).end()
        while self.text[opening : opening + 1] == ")":  # `(f)(x)`: skip the callee's parens
            opening = _SPACE.match(self.text, opening + 1).end()
        return self._own(value, opening, end - 1)

    def _names(self, node: ast.expr) -> set[str]:
        return self.names.qualified(node)

    # -- the walk, in source order -------------------------------------------------------
    def visit(self, node: ast.AST) -> None:
        kind = type(node)
        handler = _HANDLERS.get(kind)
        if handler is None:
            handler = _HANDLERS[kind] = _handler(kind)
        handler(self, node)

    def _children(self, node: ast.AST) -> None:
        for name in child_fields(type(node)):
            value = getattr(node, name)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST) and type(item) not in _BARE:
                        self.visit(item)
            elif isinstance(value, ast.AST) and type(value) not in _BARE:
                self.visit(value)

    def _skip(self, node: ast.AST) -> None:
        """Nothing the checks ask about can be inside (names, literals, operators, imports)."""

    def _all(self, nodes: Iterable[ast.AST | None]) -> None:
        for node in nodes:
            if node is not None and type(node) not in _BARE:
                self.visit(node)

    def visit_Module(self, node: ast.Module) -> None:
        self._all(node.body)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if self._scopes[-1] is self.flow.module and not self._classes:
            self.flow.functions[node.name] = node
        elif self._classes and any(_is_property(d) for d in node.decorator_list):
            self.flow.properties.append(node)
        self._scopes.append(node)
        self._loops.append([])
        self._branches.append([])
        self._all(node.decorator_list)
        self._arguments(node.args)
        self._all([node.returns])
        self._all(node.body)
        self._scopes.pop()
        self._loops.pop()
        self._branches.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def _arguments(self, args: ast.arguments) -> None:
        every = [*args.posonlyargs, *args.args]
        defaults: list[ast.AST | None] = [None] * (len(every) - len(args.defaults))
        defaults += args.defaults
        for arg, default in zip(every, defaults, strict=True):
            self._all([arg.annotation, default])
        self._all([args.vararg and args.vararg.annotation])
        for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
            self._all([arg.annotation, default])
        self._all([args.kwarg and args.kwarg.annotation])

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._classes.append(node)
        self._all(node.decorator_list)
        self._all(sorted([*node.bases, *node.keywords], key=_start))
        self._all(node.body)
        self._classes.pop()

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._arguments(node.args)
        self.visit(node.body)

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        if isinstance(node, ast.While):
            self.visit(node.test)
        else:
            self._all([node.target, node.iter])
        self._loops[-1].append(node)
        self._all(node.body)
        self._loops[-1].pop()
        self._all(node.orelse)

    visit_For = visit_AsyncFor = visit_While = _loop

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        test = self._own(node.test, self.flow.source.span(node)[0], len(self.text))
        for side, body in (("body", node.body), ("orelse", node.orelse)):
            self._branches[-1].append(((test, side), len(self._loops[-1])))
            self._all(body)
            self._branches[-1].pop()

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._all([node.body, node.test, node.orelse])

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            self._all([key, value])

    def _simple(self, node: ast.stmt) -> None:
        start, end = self.flow.source.span(node)
        named_dict = isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
        if not named_dict and self.text.find("(", start, end) < 0:
            return  # below a simple statement only calls matter, and a call is spelled with "("
        self._statement = node  # alone on its line? asked only where an event is recorded
        if isinstance(node, ast.Assign):
            self._assigned = [self._code(t) for t in node.targets]
            if isinstance(node.value, ast.Dict):
                for target in self._assigned:
                    self.flow.dicts[(id(self._scopes[-1]), target)] = node.value
        elif isinstance(node, ast.AnnAssign):
            self._assigned = [self._code(node.target)]
        self._children(node)
        self._assigned = []
        self._statement = None

    def _alone(self, node: ast.stmt | None) -> bool:
        """Nothing else on the statement's lines: not after `if x:` or `a;`, nor before `; b`."""
        if node is None:
            return False
        start, end = self.flow.source.span(node)
        line = self.flow.source.line_start(node.lineno)
        if self.text[line:start].strip(" \t\f"):
            return False
        rest = _BLANK.match(self.text, end).end()
        if not self.text.startswith(";", rest):
            return True
        rest = _BLANK.match(self.text, rest + 1).end()
        return rest == len(self.text) or self.text[rest] in "\r\n#"

    # -- where we are ----------------------------------------------------------------------
    def _place(self, node: ast.Call) -> None:
        cls = id(self._classes[-1]) if self._classes else 0
        self.flow.where[id(node)] = (id(self._scopes[-1]), cls)

    def _scaler_here(self, receiver: str, node: ast.expr | None = None) -> None:
        self.flow.scaler_scopes.setdefault(id(self._scopes[-1]), receiver)
        self.flow.training_scopes.add(id(self._scopes[-1]))
        if receiver.startswith("self.") and self._classes:
            self.flow.scaler_classes.setdefault(id(self._classes[-1]), receiver)
        if isinstance(node, ast.Name) and self._global(node):
            self.flow.scaler_scopes.setdefault(id(self.flow.module), receiver)

    def _global(self, name: ast.Name) -> bool:
        """A name bound at module level, or not bound in the file at all (a global)."""
        return all(b.scope.kind == "module" and not b.builtin for b in self.names.bindings(name))

    # -- what happens ----------------------------------------------------------------------
    def _event(self, kind: str, node: ast.Call, receiver: str = "", arg: str = "") -> None:
        branches = self._branches[-1]
        self.flow.calls.append(
            Event(
                kind=kind,
                node=node,
                receiver=receiver,
                arg=arg,
                scope=self._scopes[-1],
                loops=tuple(self._loops[-1]),
                branches=tuple(b for b, _ in branches),
                depths=tuple(d for _, d in branches),
                statement=self._statement if self._alone(self._statement) else None,
                order=len(self.flow.calls),
            )
        )

    def visit_Call(self, node: ast.Call) -> None:
        args = _args(node)
        # the names tested below are all torch's: a callee that cannot be one is not resolved
        resolved = self.names.may_be_in(node.func, "torch")
        names = self._names(node.func) if resolved else set()
        if names & GRAD_SCALER:
            enabled = not disabled_by_keyword(node.keywords)
            self.flow.constructions.append((node, enabled))
            switch = next((k.value for k in node.keywords if k.arg == "enabled"), None)
            for target in self._assigned if switch is not None else ():
                self.flow.switches[target] = _switch_off(switch)
            self.flow.scalers.update(self._assigned)
            for target in self._assigned if enabled else ():
                self._scaler_here(target)
        elif names & AUTOCAST:
            self.flow.autocast_dtypes.append(self._autocast_dtype(args, names))
        elif names & CLIP:
            self._event("clip", node)
        elif names & NORM and any(".grad" in self._code(a.value) for a in args):
            self._norm(node)
        elif names & SAVE and args:
            payload = args[0].value
            self.flow.saves.append((node, self._saved(node, payload), payload))
            self._place(node)
        elif any(n.startswith("torch.optim.") and "lr_scheduler" not in n for n in names):
            self.flow.optimizers.update(self._assigned)
            self.flow.training_scopes.add(id(self._scopes[-1]))
        method = _method(node)
        if method is not None:
            self._method_call(node, args, *method)
        if isinstance(node.func, ast.Name | ast.Attribute) and not names & SAVE:
            self._place(node)
            self.flow.plain_calls.append((node, names if resolved else None))
        self.visit(node.func)
        self._all(a.value for a in args)
        if self._norms and self._norms[-1] is node:
            self._norms.pop()

    def _norm(self, node: ast.Call) -> None:
        if not self._norms:
            self._event("norm", node)
        self._norms.append(node)

    def _saved(self, call: ast.Call, payload: ast.expr) -> ast.expr:
        """The dict a ``torch.save`` writes, looked through one local name."""
        if isinstance(payload, ast.Name | ast.Attribute):
            key = (id(self._scopes[-1]), self._arg_text(call, payload))
            found = self.flow.dicts.get(key)
            return found if found is not None else payload
        return payload

    def _method_call(self, node: ast.Call, args: list[_Arg], name: str, receiver: ast.expr) -> None:
        assert isinstance(node.func, ast.Attribute)
        if name not in _METHODS:
            return
        text = self._receiver(node.func)
        first = self._arg_text(node, args[0].value) if args else ""
        if name == "backward" and isinstance(receiver, ast.Call):
            inner = _method(receiver)
            if inner and inner[0] == "scale" and len(_args(receiver)) == 1:
                assert isinstance(receiver.func, ast.Attribute)
                scaler = self._receiver(receiver.func)
                self.flow.scalers.add(scaler)
                self._scaler_here(scaler, inner[1])
                self._event("backward", node, scaler)
        elif name == "unscale_" and len(args) == 1:
            self.flow.scalers.add(text)
            self.flow.optimizers.add(first)
            self._event("unscale", node, text, first)
        elif name == "step":
            self._event("call_step", node, text, first)
        elif name == "update" and len(args) <= 1:
            self._event("update", node, text, first)
        elif name == "norm" and ".grad" in text:
            self._norm(node)
        elif name == "state_dict" and not args:
            self.flow.state_dicts.append(text)
        elif name == "load_state_dict":
            copied = args and isinstance(args[0].value, ast.Call) and _method(args[0].value)
            if not (copied and copied[0] == "state_dict"):  # `a.load_state_dict(b.state_dict())`
                self.flow.loads.append((node, text))  # copies live state: no checkpoint read
                self._place(node)
        elif name == "parameters":
            self.flow.models.add(text)
            self.flow.model_scopes.add((id(self._scopes[-1]), text))
        elif (
            (name == "half" and not args) or (name == "to" and self._to_fp16(args))
        ) and not self._cast_back(node):
            self._place(node)
            self.flow.casts.append((node, text))
            for target in self._assigned:
                self.flow.casts.append((node, target))

    def _cast_back(self, node: ast.Call) -> bool:
        """``model.half().float()``: cast back to float32 at once (yolov5 rounds its anchors
        this way); the parameters end in float32."""
        above = self.names.parent(node)
        if not isinstance(above, ast.Attribute) or above.value is not node:
            return False
        call = self.names.parent(above)
        return (
            isinstance(call, ast.Call)
            and call.func is above
            and (above.attr == "float" or (above.attr == "to" and "float32" in self._code(call)))
        )

    @staticmethod
    def _to_fp16(args: list[_Arg]) -> bool:
        return any(
            (a.keyword is None or a.keyword == "dtype") and _dtype_name(a.value) == "fp16"
            for a in args
        )

    @staticmethod
    def _autocast_dtype(args: list[_Arg], names: set[str]) -> str:
        """The dtype a region computes in, where the call spells it out; else unknown."""
        old = names & (_OLD_CPU_AUTOCAST | _OLD_CUDA_AUTOCAST)
        keyword = {a.keyword: a.value for a in args if a.keyword}
        positional = [a.value for a in args if not a.keyword and not a.star]
        if any(a.star for a in args):
            return "unknown"
        if "dtype" in keyword:
            return _dtype_name(keyword["dtype"])
        if len(positional) >= 2:
            return _dtype_name(positional[1])
        if old:
            return "bf16" if old & _OLD_CPU_AUTOCAST else "fp16"
        device = keyword.get("device_type", positional[0] if positional else None)
        if isinstance(device, ast.Constant) and isinstance(device.value, str):
            return {"cpu": "bf16", "cuda": "fp16"}.get(device.value, "unknown")
        return "unknown"


# The methods whose calls the flow records (on their receiver's text).
_METHODS = frozenset(
    {"backward", "unscale_", "step", "update", "norm", "state_dict", "load_state_dict",
     "parameters", "half", "to"}
)  # fmt: skip
_LEAVES = (
    ast.Name, ast.Constant, ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop,
    ast.Import, ast.ImportFrom, ast.Pass, ast.Break, ast.Continue, ast.Global, ast.Nonlocal,
)  # fmt: skip
_HANDLERS: dict[type, Callable[[_Collector, ast.AST], None]] = {}
# Half of a file's nodes are names and literals: the walk does not even visit them.
_BARE = frozenset({ast.Name, ast.Constant})


def _handler(kind: type) -> Callable[[_Collector, ast.AST], None]:
    """How the walk treats a node type (looked up once per type: the walk visits every node)."""
    method = getattr(_Collector, "visit_" + kind.__name__, None)
    if method is not None:
        return method
    if issubclass(kind, _LEAVES):
        return _Collector._skip
    return _Collector._simple if issubclass(kind, _SIMPLE) else _Collector._children


def _start(node: ast.AST) -> tuple[int, int]:
    return node.lineno, node.col_offset  # type: ignore[attr-defined]


def build_flow(
    tree: ast.Module,
    source: Source,
    names: Names,
    siblings: Siblings | None = None,
) -> Flow:
    """Everything the checks ask about one file; ``siblings``: the other modules of the tree
    being checked whose checkpoint helpers it may call (:func:`sibling_modules`)."""
    flow = Flow(module=tree, source=source, names=names, siblings=siblings or Siblings())
    _Collector(flow, names).visit(tree)
    # `.step(x)` / `.update()` mean the scaler's only on a known scaler.
    resolved = []
    for event in flow.calls:
        if event.kind == "call_step" and event.receiver in flow.scalers:
            flow.optimizers.add(event.arg)
            event = replace(event, kind="step")
        elif event.kind == "update" and event.receiver not in flow.scalers:
            continue
        resolved.append(event)
    flow.calls = resolved
    _scaler_properties(flow)
    return flow


def _is_property(decorator: ast.expr) -> bool:
    name = decorator.attr if isinstance(decorator, ast.Attribute) else getattr(decorator, "id", "")
    return name in ("property", "cached_property")


def _scaler_properties(flow: Flow) -> None:
    """A property that returns a scaler (``return self._scaler``, built lazily on first use,
    or a GradScaler made there) is that scaler: ``self.scaler.load_state_dict(...)`` restores
    it."""
    for function in flow.properties:
        for node in ast.walk(function):
            if not isinstance(node, ast.Return) or node.value is None:
                continue
            value = node.value
            made = isinstance(value, ast.Call) and flow.names.qualified(value.func) & GRAD_SCALER
            if made or flow.text(value) in flow.scalers:
                flow.scalers.add(f"self.{function.name}")


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


def _switch_off(enabled: ast.expr) -> set[str]:
    """The tests whose falsehood turns off a scaler made with ``enabled=<enabled>``: the
    expression, each operand of an ``and`` in it, what ``bool(...)`` wraps."""
    found, pending = set(), [enabled]
    while pending:
        node = pending.pop()
        found.add(ast.unparse(node))
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            pending += node.values
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "bool" and node.args:
            pending.append(node.args[0])
    return found


def _normal(text: str) -> str:
    try:
        return ast.unparse(ast.parse(text.strip(), mode="eval").body)
    except SyntaxError:
        return text


def _scaler_off(flow: Flow, event: Event, scaler: str) -> bool:
    """``event`` runs only in the ``else:`` of a test whose falsehood turns ``scaler`` off:
    there its ``scale`` returned the loss as it was, and nothing it scaled is scaled."""
    off = flow.switches.get(scaler)
    return bool(off) and any(
        side == "orelse" and _normal(test) in off for test, side in event.branches
    )


def clip_before_unscale(flow: Flow, rule: Rule) -> list[Finding]:
    findings = []
    for event in (e for e in flow.calls if e.kind in {"clip", "norm"}):
        backward = _pending_backward(flow, event)
        if backward is None or _scale_aware(event.node, backward.receiver):
            continue
        if _scaler_off(flow, event, backward.receiver):
            continue
        what = "clips" if event.kind == "clip" else "takes the norm of"
        scaler = backward.receiver
        message = (
            f"{what} gradients still multiplied by the loss scale (after "
            f"`{scaler}.scale(loss).backward()`): call `{scaler}.unscale_(optimizer)` first"
        )
        fix = None
        if event.kind == "clip":
            fix, refused = _insert_unscale(flow, event, backward)
            message += refused
        findings.append(Finding(rule.code, message, event.node, fix))
    return findings


def _scale_aware(node: ast.AST, scaler: str) -> bool:
    """``clip_grad_norm_(params, max_norm * scaler.get_scale())``: a clip of the scaled
    gradients at a scaled bound is the clip of the unscaled ones (the form that needs no
    ``unscale_``, for a clip on every micro-batch of an accumulation window)."""
    if not isinstance(node, ast.Call):
        return False
    limit = node.args[1] if len(node.args) > 1 else None
    limit = next((k.value for k in node.keywords if k.arg == "max_norm"), limit)
    return (
        isinstance(limit, ast.BinOp)
        and isinstance(limit.op, ast.Mult)
        and f"{scaler}.get_scale()" in (ast.unparse(limit.left), ast.unparse(limit.right))
    )


def _insert_unscale(flow: Flow, clip: Event, backward: Event) -> tuple[Fix | None, str]:
    """``scaler.unscale_(opt)`` on the line before the clip, when the optimizer is certain;
    and why not, for the message, when that line would run more than once per ``update()``
    (the clip of an accumulation loop on every micro-batch): AMP204 would flag the result."""
    statement = clip.statement
    if not isinstance(statement, ast.Expr | ast.Assign | ast.AnnAssign):
        return None, ""
    if statement.value is not clip.node:
        return None, ""
    optimizers = {
        e.arg for e in flow.in_scope(clip, "step") if e.receiver == backward.receiver and e.arg
    }
    if len(optimizers) != 1:
        return None, ""
    optimizer = optimizers.pop()
    only = [b for b in backward.branches if b not in clip.branches]
    if only:  # (SwinBERT: `if method == "fairscale": scaler.scale(loss).backward()` beside
        # an apex and a deepspeed arm, one clip after them all)
        test, side = only[-1]
        arm = f"`if {test}:`" if side == "body" else f"the `else:` of `if {test}:`"
        return None, (
            f" (no fix: the scaled backward at line {backward.node.lineno} runs only in {arm}, "
            "the clip on every path: an unscale_ on the others would run where nothing was "
            "scaled (a GradScaler that is on raises there); unscale_ under the same test, by "
            "hand)"
        )
    unscale = replace(clip, kind="unscale", receiver=backward.receiver, arg=optimizer)
    condition = _update_only_if(flow, unscale)
    if condition or _update_missing(flow, unscale) == "loop":
        where = f"under `if {condition}:`" if condition else "outside this loop"
        return None, (
            f" (no fix: an unscale_ here would run on every iteration while "
            f"`{backward.receiver}.update()` runs {where}; unscale_ and clip where the step is)"
        )
    source = flow.source
    newline = m.group() if (m := re.search(r"\r\n|\r|\n", source.text)) else "\n"
    line = f"{source.line_indent(statement.lineno)}{backward.receiver}.unscale_({optimizer})"
    at = source.line_start(statement.lineno)
    return Fix("unsafe", edits=(Edit(at, at, line + newline),)), ""


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


def _callers(flow: Flow, function: ast.AST) -> list[ast.Call]:
    """The calls in this file of a function or method, by its name (``f(...)``,
    ``self.f(...)``): the call graph the way a reader follows it."""
    if not isinstance(function, _FUNCTIONS):
        return []
    name = function.name
    out = []
    for call, _ in flow.plain_calls:
        func = call.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if called == name and flow.where[id(call)][0] != id(function):
            out.append(call)
    return out


def _updated_by_caller(flow: Flow, event: Event, depth: int = 3) -> bool:
    """A function that steps the scaler and leaves the update to its caller: some call of it
    (up to ``depth`` calls up) is followed in the caller by an ``update()`` of the same scaler
    (the same text, ``self.scaler``), that can run with the call."""
    frontier = [event.scope]
    seen: set[int] = set()
    for _ in range(depth):
        callers = [c for f in frontier for c in _callers(flow, f) if id(c) not in seen]
        if not callers:
            return False
        seen.update(id(c) for c in callers)
        frontier = []
        for call in callers:
            scope = flow.where[id(call)][0]
            at = (call.lineno, call.col_offset)
            for update in flow.events("update"):
                if (
                    id(update.scope) == scope
                    and update.receiver == event.receiver
                    and (update.node.lineno, update.node.col_offset) > at
                    and not _exclusive_with(flow, update, call)
                ):
                    return True
            frontier += _enclosing(flow, call)
    return False


def _hook_of_another_module(flow: Flow, event: Event) -> bool:
    """The step is in a method on ``self`` that nothing in this file calls, of a class whose
    base comes from another module: that base's training loop calls it (``_amp_step`` of a
    trainer subclass) and may update the scaler right after, out of this file's sight."""
    method = event.scope
    if not isinstance(method, _FUNCTIONS) or not event.receiver.startswith("self."):
        return False
    cls = flow.names.parent(method)
    if not isinstance(cls, ast.ClassDef) or _callers(flow, method):
        return False
    local = {c.name for c in ast.walk(flow.module) if isinstance(c, ast.ClassDef)}
    return any(
        not (isinstance(b, ast.Name) and b.id in local) and ast.unparse(b) not in _PLAIN_BASES
        for b in cls.bases
    )


def _handed_in(flow: Flow, event: Event) -> bool:
    """The scaler stepped is a parameter of the function that steps it (``loss_scaler`` of a
    model's ``train_step``), and nothing in this file calls that function: the caller that
    owns the scaler is elsewhere and may update it after the call (mmgeneration's runner)."""
    function = event.scope
    if not isinstance(function, _FUNCTIONS) or _callers(flow, function):
        return False
    if any(  # read as a value (an alias, a callback): its calls here are out of sight (65th M1)
        (isinstance(n, ast.Name) and n.id == function.name and isinstance(n.ctx, ast.Load))
        or (isinstance(n, ast.Attribute) and n.attr == function.name)
        for n in ast.walk(flow.module)
    ):
        return False
    root = event.receiver.partition(".")[0]
    arguments = function.args
    given = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    first = (
        given[0].arg if given and flow.names.parent(function).__class__ is ast.ClassDef else None
    )
    return root != first and any(a.arg == root for a in given)


# bases that never call a subclass's methods from a training loop
_PLAIN_BASES = frozenset({
    "object", "ABC", "abc.ABC", "Generic", "Protocol", "Module", "nn.Module", "torch.nn.Module",
})  # fmt: skip


def _exclusive_with(flow: Flow, event: Event, call: ast.Call) -> bool:
    return flow.names.exclusive(event.node, call)


def _enclosing(flow: Flow, call: ast.Call) -> list[ast.AST]:
    """The function (a method too) the call is in."""
    for above in flow.names.ancestors(call):
        if isinstance(above, _FUNCTIONS):
            return [above]
    return []


def _update_only_if(flow: Flow, event: Event) -> str:
    """The condition that every ``update()`` of ``event``'s scaler in its loop (or, outside
    loops, its function) runs under while ``event`` does not, when that condition changes from
    one iteration or call to the next (a ``%`` test, or a name the loop assigns): gradient
    accumulation with ``unscale_`` left on every micro-batch. '' when there is none."""
    depth = len(event.loops)
    updates = [
        u
        for u in flow.in_scope(event, "update")
        if u.receiver == event.receiver and not u.exclusive(event)
    ]
    # Those in the same loop; one in a loop of its own may run any number of times.
    if any(u.loops[:depth] == event.loops and len(u.loops) > depth for u in updates):
        return ""
    updates = [u for u in updates if u.loops == event.loops]
    mine = event.conditions_in(depth)
    varying = _loop_assigned(flow, event.loops[-1]) if depth else set()
    found = ""
    for update in updates:
        extra = [test for test, _ in update.conditions_in(depth) - mine]
        changing = [t for t in extra if "%" in t or any(_mentions(t, n) for n in varying)]
        if not changing:
            return ""  # this update runs whenever the unscale_ does (as far as can be told)
        found = found or " ".join(min(changing).split())
    return found


def _loop_assigned(flow: Flow, loop: ast.AST) -> set[str]:
    """The names (as spelled: ``step``, ``self.it``) a loop's header or body assigns."""
    nodes: list[ast.AST] = [loop.target] if isinstance(loop, ast.For | ast.AsyncFor) else []
    nodes += loop.body  # type: ignore[attr-defined]
    assigned = set()
    while nodes:
        node = nodes.pop()
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Store):
            assigned.add(flow.text(node))
        nodes.extend(ast.iter_child_nodes(node))
    return assigned


def _tested_per_iteration(flow: Flow, event: Event) -> bool:
    """``event`` sits under a test decided on each iteration of its innermost loop that reads
    what the loop changes (``if j == len(chunks) - 1:``): it may run once per loop, as the
    step after the loop needs, so "every iteration" cannot be told."""
    varying = _loop_assigned(flow, event.loops[-1])
    tests = [test for test, _ in event.conditions_in(len(event.loops))]
    return any(_mentions(test, name) for test in tests for name in varying)


def _mentions(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None


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
        elif _update_missing(flow, event) == "loop" and not _tested_per_iteration(flow, event):
            message = (
                f"`{event.receiver}.unscale_({event.arg})` runs on every iteration of this loop "
                f"but `{event.receiver}.update()` runs outside it: the second iteration raises "
                "RuntimeError (unscale_ once per optimizer step, just before clipping)"
            )
        elif condition := _update_only_if(flow, event):
            where = "iteration of this loop" if event.loops else "call"
            message = (
                f"`{event.receiver}.unscale_({event.arg})` runs on every {where} but "
                f"`{event.receiver}.update()` only under `if {condition}:`: the second unscale_ "
                "before an update raises RuntimeError; call unscale_ (and clip) under the same "
                f"condition as `{event.receiver}.step({event.arg})`"
            )
        else:
            continue
        findings.append(Finding(rule.code, message, event.node, None))
    return findings


def step_without_update(flow: Flow, rule: Rule) -> list[Finding]:
    findings = []
    raises = (
        "an enabled scaler raises `RuntimeError: step() has already been called since the last "
        "update()` on the next step of that optimizer"
    )
    for event in flow.events("step"):
        missing = _update_missing(flow, event)
        if missing == "none" and _updated_by_caller(flow, event):
            continue  # the function that calls this one updates the scaler after the call
        if missing == "none" and _hook_of_another_module(flow, event):
            continue  # a base class in another module calls it (and may update after it)
        if missing == "none" and _handed_in(flow, event):
            continue  # the caller that owns the scaler, outside this file, may update it
        if missing == "none":
            message = (
                f"`{event.receiver}.step({event.arg})` with no `{event.receiver}.update()` after "
                f"it (here or in a caller in this file): the scale never adapts, and {raises}"
            )
        elif missing == "loop":
            message = (
                f"`{event.receiver}.step({event.arg})` runs on every iteration of this loop but "
                f"`{event.receiver}.update()` runs outside it: {raises}"
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


def _mentions_scaler(flow: Flow, payload: ast.AST) -> bool:
    text = flow.text(payload).lower()
    return "scaler" in text or any(s.lower() in text for s in flow.scalers)


def _model_state(flow: Flow, payload: ast.expr) -> bool:
    """A checkpoint of model/optimizer state that leaves the scaler's out."""
    return "state_dict()" in flow.text(payload) and not _mentions_scaler(flow, payload)


def _weights_only(flow: Flow, payload: ast.expr) -> bool:
    """The payload is one model's ``state_dict()``, nothing else: a weights export."""
    if not (isinstance(payload, ast.Call) and not payload.args and not payload.keywords):
        return False
    method = _method(payload)
    if method is None or method[0] != "state_dict":
        return False
    return not _optimizer_like(flow, flow.text(method[1]))


def _checkpoint_name(flow: Flow, load: ast.Call) -> str:
    """``ckpt`` in ``optimizer.load_state_dict(ckpt["optimizer"])``, for the advice."""
    argument = load.args[0] if load.args else None
    if isinstance(argument, ast.Subscript) and isinstance(argument.value, ast.Name | ast.Attribute):
        return flow.text(argument.value)
    return "checkpoint"


def helpers(flow: Flow, module: str = "") -> dict[str, Helper]:
    """What each module-level function of ``flow``'s file does with checkpoints (``module``:
    the file's name when it is a sibling of the file checked)."""
    out = {}
    for name, function in flow.functions.items():
        scope = id(function)
        params = tuple(a.arg for a in (*function.args.posonlyargs, *function.args.args))
        saves = [s for s in flow.saves if flow.where[id(s[0])][0] == scope]
        loads = [(c, r) for c, r in flow.loads if flow.where[id(c)][0] == scope]
        # A checkpoint is a dict of states; `torch.save(model.state_dict(), path)` exports weights.
        writes = [c for c, p, _ in saves if isinstance(p, ast.Dict) and _model_state(flow, p)]
        passing = [
            (c, params.index(raw.id))
            for c, _, raw in saves
            if isinstance(raw, ast.Name) and raw.id in params
        ]
        restores = [(c, r) for c, r in loads if r not in flow.scalers and _optimizer_like(flow, r)]
        scaler_state = any(_mentions_scaler(flow, p) for _, p, _ in saves) or any(
            r in flow.scalers or "scaler" in r.lower() for _, r in loads
        )
        if not (writes or passing or restores or scaler_state):
            continue
        out[name] = Helper(
            module=module,
            save_line=writes[0].lineno if writes else 0,
            passes=tuple(i for _, i in passing),
            passes_line=passing[0][0].lineno if passing else 0,
            params=params,
            load=restores[0][1] if restores else "",
            load_line=restores[0][0].lineno if restores else 0,
            scaler_state=scaler_state,
            judged=any(flow.scaler_near(c) for c in [*writes, *(c for c, _ in restores)]),
        )
    return out


def sibling_modules(candidates: Iterable[tuple[str, bytes]], checked: Iterable[str]) -> Siblings:
    """The sibling modules (its folder or below) that ``candidates`` (the files of a run that
    use a scaler: path, bytes) import, among the ``checked`` paths: read off the import lines of
    their bytes, before the run, so that a call into a sibling module is judged. Only those a
    call leads into are then parsed, and of those only module-level code and the functions that
    spell a save or a restore are analysed."""
    inside = {os.path.abspath(p) for p in checked}
    stems = {_stem(p) for p in inside}
    wanted: set[str] = set()
    for path, data in candidates:
        folder = os.path.dirname(os.path.abspath(path)) + os.sep
        for dots, module in _imported(data):
            if module.rpartition(".")[2] not in stems:
                continue  # no file checked has the name the module would be found under
            # a folder more levels above this file's than the module has parts cannot hold a
            # path inside this file's folder: stop there instead of walking up to the root
            levels = module.count(".") + 2
            paths = itertools.islice(_module_paths(path, dots, module), 2 * levels)
            wanted.update(c for c in paths if c in inside and c.startswith(folder))
    return Siblings(wanted)


_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+\(?([\w \t,]*)|import[ \t]+([\w. \t,]+))",
    re.MULTILINE,
)


def _imported(data: bytes) -> Iterator[tuple[int, str]]:
    """(leading dots, dotted module) of what a file imports, read off its bytes: for
    ``from m import a`` both ``m`` and ``m.a`` (``a`` may be a submodule)."""
    for match in _IMPORT.finditer(data):
        dots, module, names, plain = (
            g.decode("ascii", "replace") if g else "" for g in match.groups()
        )
        if plain:
            for part in plain.split(","):
                yield 0, part.split()[0] if part.split() else ""
            continue
        yield len(dots), module
        for name in names.split(","):
            words = name.split()
            if words:
                yield len(dots), f"{module}.{words[0]}" if module else words[0]


def _module_paths(path: str, dots: int, module: str) -> Iterator[str]:
    """Where ``module`` imported from ``path`` may live: next to it (or up ``dots`` - 1 levels
    for a relative import), else, for an absolute import, next to a folder above it."""
    if not module:
        return
    folder = os.path.dirname(os.path.abspath(path))
    for _ in range(max(dots - 1, 0)):
        folder = os.path.dirname(folder)
    relative = module.replace(".", os.sep)
    while True:
        yield os.path.join(folder, relative + ".py")
        yield os.path.join(folder, relative, "__init__.py")
        if dots or os.path.dirname(folder) == folder:
            return
        folder = os.path.dirname(folder)


def _stem(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.basename(folder) if name == "__init__.py" else name.removesuffix(".py")


def _summarize(path: str, data: bytes) -> dict[str, Helper]:
    if b"torch.save" not in data and b"load_state_dict" not in data:
        return {}
    try:
        tree = ast.parse(data)
        source = Source.from_bytes(data, path)
    except (SyntaxError, ValueError, UnicodeDecodeError, LookupError):
        return {}
    tree.body = [s for s in tree.body if _may_help(source, s)]
    if not any(isinstance(s, _FUNCTIONS) for s in tree.body):
        return {}
    return helpers(build_flow(tree, source, Names(tree)), os.path.basename(path))


def _may_help(source: Source, statement: ast.stmt) -> bool:
    """Module-level code stays (imports, a module-level scaler); of the definitions only the
    functions that spell a save or a restore."""
    if isinstance(statement, ast.ClassDef):
        return False
    if not isinstance(statement, _FUNCTIONS):
        return True
    text = source.segment(statement)
    return "save" in text or "load_state_dict" in text


def _sibling(flow: Flow, names: set[str], index: Siblings) -> Helper | None:
    """The helper a call's callee names in a sibling module of the checked tree
    (``from utils import f``, ``from .utils import f``, ``import pkg.utils``)."""
    for qualified in sorted(names):
        dots = len(qualified) - len(qualified.lstrip("."))
        module, _, function = qualified.lstrip(".").rpartition(".")
        for candidate in index.places(flow.source.path, dots, module):
            helper = index.helpers(candidate).get(function)
            if helper is not None:
                return helper
    return None


def _helper_calls(flow: Flow) -> Iterator[tuple[ast.Call, Helper]]:
    """Calls made next to a scaler to a checkpoint helper of this file or a sibling module."""
    own = helpers(flow)
    names = flow.names
    index = flow.siblings if flow.source.path else Siblings()
    for call, callee in flow.plain_calls:
        if not flow.scaler_near(call):
            continue
        func = call.func
        helper = own.get(func.id) if isinstance(func, ast.Name) else None
        if helper is None or any(b.scope.kind != "module" for b in names.bindings(func)):
            if index and callee is None:
                callee = names.qualified(func)
            helper = _sibling(flow, callee, index) if index else None
        if helper is not None:
            yield call, helper


def _passed(call: ast.Call, helper: Helper) -> Iterator[ast.expr]:
    """The arguments of ``call`` that the helper saves."""
    for i in helper.passes:
        if i < len(call.args) and not isinstance(call.args[i], ast.Starred):
            yield call.args[i]
        for keyword in call.keywords:
            if keyword.arg == helper.params[i]:
                yield keyword.value


def checkpoint_without_scaler_state(flow: Flow, rule: Rule) -> list[Finding]:
    """Checkpoints next to a scaler that leave its state out, written here or by a helper the
    scaler's owner calls; a scaler state restored from checkpoints written without it."""
    findings = []
    saves_scaler = any(r in flow.scalers for r in flow.state_dicts)
    loads_scaler = any(r in flow.scalers for _, r in flow.loads)
    writers: list[tuple[str | None, str]] = []  # (scaler, where) of checkpoints without its state
    reported: set[int] = set()  # a dict saved twice misses the key once
    for call, payload, raw in flow.saves:
        if not _model_state(flow, payload) or not flow.scaler_near(call):
            continue
        if _weights_only(flow, payload):
            continue  # `torch.save(model.state_dict(), path)` exports weights, resumes nothing
        scaler = flow.scaler_name(call)
        if isinstance(payload, ast.Dict):
            writers.append((scaler, f"line {call.lineno}"))
        if saves_scaler or id(payload) in reported:
            continue
        reported.add(id(payload))
        named = f" `{flow.text(raw)}`" if isinstance(raw, ast.Name | ast.Attribute) else ""
        message = (
            f"checkpoint{named} saves model/optimizer state but not the GradScaler's: a resume "
            "restarts the loss scale at its initial value and is not bit-exact; add "
            f'`"scaler": {scaler}.state_dict()`'
        )
        findings.append(Finding(rule.code, message, call, None))
    if not loads_scaler:
        for call, receiver in flow.loads:
            if receiver in flow.scalers or not _optimizer_like(flow, receiver):
                continue
            if not flow.scaler_near(call):
                continue
            scaler, checkpoint = flow.scaler_name(call), _checkpoint_name(flow, call)
            message = (
                f"`{receiver}` state is restored but the GradScaler's is not: the resumed run "
                "restarts the loss scale; also call "
                f'`{scaler}.load_state_dict({checkpoint}["scaler"])`'
            )
            findings.append(Finding(rule.code, message, call, None))
    helper_scaler_state = False
    for call, helper in _helper_calls(flow):
        found, wrote = _helper_finding(flow, call, helper, saves_scaler, loads_scaler)
        helper_scaler_state = helper_scaler_state or helper.scaler_state
        writers += [(flow.scaler_name(call), wrote)] if wrote else []
        findings += [Finding(rule.code, m, call, None) for m in found]
    if saves_scaler or helper_scaler_state or not writers:
        return findings
    for call, receiver in flow.loads:
        if receiver in flow.scalers and flow.scaler_near(call):
            written = next((w for s, w in writers if s == receiver), writers[0][1])
            message = (
                f"`{receiver}.load_state_dict(...)` restores the GradScaler's state, but the "
                f"checkpoint written at {written} does not hold it: the resume fails on the "
                f'missing key; add `"scaler": {receiver}.state_dict()` to what is saved'
            )
            findings.append(Finding(rule.code, message, call, None))
    return findings


def _helper_finding(
    flow: Flow, call: ast.Call, helper: Helper, saves_scaler: bool, loads_scaler: bool
) -> tuple[list[str], str]:
    """(messages for a call to a checkpoint helper, where it writes a checkpoint without the
    scaler's state or '')."""
    if helper.scaler_state or any(_mentions_scaler(flow, a) for a in (*call.args, *call.keywords)):
        return [], ""
    scaler = flow.scaler_name(call)
    name = flow.text(call.func)
    messages, wrote = [], ""
    if helper.save_line and not helper.judged:
        wrote = helper.at(helper.save_line)
        if not saves_scaler:
            messages.append(
                f"`{name}(...)` saves model/optimizer state without the GradScaler's "
                f"(`torch.save` at {wrote}): a resume restarts the loss scale at its "
                f'initial value; pass `{scaler}` to `{name}` and save `"scaler": '
                f"{scaler}.state_dict()` with the rest"
            )
    for argument in _passed(call, helper):
        payload = argument
        if isinstance(argument, ast.Name | ast.Attribute):
            where = flow.where[id(call)][0]
            payload = flow.dicts.get((where, flow.text(argument)), argument)
        if not isinstance(payload, ast.Dict) or not _model_state(flow, payload):
            continue
        wrote = wrote or f"line {call.lineno}"
        held = f"`{flow.text(argument)}`" if payload is not argument else "the dict"
        if not saves_scaler:
            messages.append(
                f"{held} holds model/optimizer state but not the GradScaler's and `{name}` "
                f"saves it (`torch.save` at {helper.at(helper.passes_line)}): a resume "
                "restarts the loss scale at its initial value; add "
                f'`"scaler": {scaler}.state_dict()` to it'
            )
    if helper.load and not helper.judged and not loads_scaler:
        messages.append(
            f"`{name}(...)` restores `{helper.load}` state but not the GradScaler's "
            f"(`load_state_dict` at {helper.at(helper.load_line)}): the resumed run restarts "
            f"the loss scale; pass `{scaler}` to `{name}` and restore "
            f"`{scaler}.load_state_dict(...)` there too"
        )
    return messages, wrote


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


def check(
    tree: ast.Module, source: Source, names: Names, rules: Sequence[Rule], settings: Settings
) -> list[Finding]:
    """The scaler-flow findings of the selected rules (one shared walk of the file)."""
    mine = [r for r in rules if r.check in FLOW_CHECKS]
    if not mine:
        return []
    flow = build_flow(tree, source, names, settings.project.get("checkpoint_helpers"))
    findings: list[Finding] = []
    for rule in mine:
        findings += FLOW_CHECKS[rule.check](flow, rule)
    return findings
