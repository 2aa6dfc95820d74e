"""The apex O1 rewrite: ``amp.initialize`` / ``amp.scale_loss`` -> ``torch.amp`` (one file at once).

apex O1 patched torch globally from ``initialize`` on; native AMP needs an explicit autocast
region and a GradScaler. The rewrite is planned for the whole file and applied only when every
piece is exact, because a partial one leaves code that runs but silently lost mixed precision
(a scaled backward without ``scaler.step`` applies scaled gradients). When something blocks it,
the finding lists every blocker with its line, and the per-use guidance of AMP301 stays.

The plan, in the order it is built:

- the apex imports and availability checks (``amp is None``, ``assert amp is not None``) go;
- ``initialize(model, optimizer, opt_level="O1" | a variable)`` becomes the GradScaler, created
  where it was (before its ``if``, disabled when the condition is false);
- the scaler reaches every function that needs it: directly (same function, closures, module
  level), as ``self.<name>`` in the methods of one class, or through a new parameter of a
  same-file function passed at every call site;
- each ``with amp.scale_loss(loss, opt) as s: s.backward()`` becomes ``scaler.scale(loss)
  .backward()``; ``opt.step()`` becomes ``scaler.step(opt)`` + ``scaler.update()``;
- ``amp.master_params(opt)`` gets one ``scaler.unscale_(opt)`` per step, under the step's
  condition (a clip that ran every micro-batch moves there: a stated behaviour change);
- ``amp.state_dict()``/``load_state_dict()`` become the scaler's, under a key of their own;
- last, the autocast regions: found from the data flow into each scaled loss, level by level
  up to the loop body, so a forward in the loop body and a loss in nested branches are both
  covered; no ``backward()`` is ever inside one, and a call of an initialized model before the
  backward that stays outside blocks the rewrite.

A file without ``initialize`` that is not one side of a pair (:mod:`ampmigrate.apex.links`) is
only ever refused: the engine gets that refusal on ``ast`` from :mod:`ampmigrate.apex.verdict`
(which holds the blocker texts both use) and runs this planner for it only where ``ast`` is
unsure.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Callable, Mapping

import libcst as cst
from libcst.metadata import ParentNodeProvider, ScopeProvider

from ampmigrate.apex.backends import BackendSwitch
from ampmigrate.apex.backwards import Backwards
from ampmigrate.apex.banned import _banned_elsewhere, _banned_in_regions
from ampmigrate.apex.callees import Callees
from ampmigrate.apex.casts import Casts
from ampmigrate.apex.checkpoints import Checkpoints
from ampmigrate.apex.clip import Clip
from ampmigrate.apex.common import (
    Plan,
    _argument,
    _code,
    _correctness,
    _optimizers,
    _Setup,
    initialize_arguments,
    without_optimizer,
)
from ampmigrate.apex.delegate import Delegate
from ampmigrate.apex.elsewhere import Elsewhere
from ampmigrate.apex.facts import Facts, Walk, _Facts
from ampmigrate.apex.family import ClassFamily
from ampmigrate.apex.flow import SwitchFlow
from ampmigrate.apex.forwards import Forwards
from ampmigrate.apex.gates import VersionGates
from ampmigrate.apex.guards import Guards
from ampmigrate.apex.handedon import HandedOn
from ampmigrate.apex.handles import Handles
from ampmigrate.apex.hooks import RunnerHooks
from ampmigrate.apex.infer import HandleInit, InferenceOnly
from ampmigrate.apex.initialize import Initialize
from ampmigrate.apex.levels import Levels
from ampmigrate.apex.linkbase import Link
from ampmigrate.apex.outflow import Outflow
from ampmigrate.apex.overflows import Overflows
from ampmigrate.apex.passed import Initializers, PassedHandles
from ampmigrate.apex.passes import Passes
from ampmigrate.apex.probes import InterpreterProbes
from ampmigrate.apex.regions import Regions
from ampmigrate.apex.scaler import Scaler
from ampmigrate.apex.shared import SharedState
from ampmigrate.apex.step import Step
from ampmigrate.apex.stores import Stores
from ampmigrate.apex.strays import NATIVE_MEMBERS
from ampmigrate.apex.switches import Switches
from ampmigrate.apex.unscale import Unscale
from ampmigrate.apex.verdict import APEX, SUPPORTED, no_rewrite, refusal
from ampmigrate.catalog import Rule
from ampmigrate.cstnames import scopes
from ampmigrate.engine.names import Names
from ampmigrate.findings import Finding, Fix
from ampmigrate.replace import ReplaceNodes

_LOSS_SCALE = "_amp_state.loss_scalers.loss_scale"


# the ops CUDA autocast runs in float16 (torch.amp's "CUDA Ops that can autocast to float16")
_AUTOCAST_HALF = frozenset({
    "addbmm", "addmm", "addmv", "addr", "baddbmm", "bmm", "chain_matmul", "conv1d", "conv2d",
    "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "matmul", "mm", "mv",
    "prelu",
})  # fmt: skip


class _Planner(
    Facts,
    Handles,
    Stores,
    Elsewhere,
    PassedHandles,
    Initializers,
    RunnerHooks,
    ClassFamily,
    Guards,
    InterpreterProbes,
    Initialize,
    Levels,
    Passes,
    Scaler,
    Step,
    Overflows,
    Switches,
    Backwards,
    Callees,
    Delegate,
    Outflow,
    Unscale,
    Clip,
    Checkpoints,
    Regions,
    Forwards,
    HandedOn,
    VersionGates,
    BackendSwitch,
    SwitchFlow,
    InferenceOnly,
    HandleInit,
    SharedState,
):
    def __init__(
        self,
        module: cst.Module,
        scopes: Mapping,
        parents: Mapping | Walk,
        link: tuple[Link, str] | None = None,
        path: str | None = None,
        declared: str | None = None,
        casts: Casts | None = None,
    ) -> None:
        self.module = module
        # layer modules whose apex casts are rewritten with this file (apex.casts)
        self.casts = casts
        self.path = path  # the file on disk (None: no sibling modules are looked up)
        # where the setting apex-opt-level = "O1" was made (None: not): an opt level the code
        # leaves open is taken as O1 or O0 (_level_choices)
        self.declared = declared
        # the file is one side ("caller" or "callee") of a pair of modules (apex.links)
        self.link, self.role = link if link is not None else (None, None)
        self.scopes = scopes
        self.parents = parents
        walk = parents if isinstance(parents, Walk) else Walk(module)
        self.nodes = walk.nodes[1:]  # every node but the module, in source order
        self.order = {id(n): i for i, n in enumerate(self.nodes)}
        self.ends = walk.ends  # where each subtree ends in walk.nodes (one past nodes' index)
        self.plan = Plan()
        self.removed: set[cst.CSTNode] = set()  # statements the plan deletes outright
        self.dissolved: set[cst.If] = set()  # `if amp is not None:` whose body stays in its place
        self.folded_else: set[cst.If] = set()  # `if amp is None: ... else:`, its `else:` stays
        self.folded_first: set[cst.If] = set()  # `if <probe>: ... elif ...:`, the first arm goes
        self.initialize_calls: set[cst.Call] = set()
        self._qualified: dict[cst.CSTNode, set[str]] = {}
        self._facts: dict[tuple[int, frozenset[str]], _Facts] = {}
        self.file_loads: list[cst.Call] = []  # `amp.load_state_dict(torch.load(".../amp.pt"))`
        self.file_saves: list[cst.Call] = []  # `torch.save(amp.state_dict(), ".../amp.pt")`
        self.state_files: dict[str, set[str]] = {}  # "amp.pt" -> {"saved", "loaded"}
        self.mode = "module"  # where the scaler lives: "module", "function" or "class"
        self.home: cst.CSTNode = module
        self.cls: cst.ClassDef | None = None
        self.family: list[cst.ClassDef] = []  # classes derived from `cls` that reach its scaler
        self.threaded: set[cst.FunctionDef] = set()
        self.name = "scaler"
        self.steps: dict[tuple[int, str], list[cst.SimpleStatementLine]] = {}
        self.dead_steps: dict[str, list[cst.CSTNode]] = {}  # steps in code only apex-less ran
        self.native_receivers: set[str] | None = None  # torch GradScalers the file scales through
        self.condition_moves: dict[int, bool] = {}  # by setup: code after it rebinds its test
        self.scaled: dict[tuple[int, str], list[cst.With]] = {}  # the scale_loss blocks per step
        # a call of a helper that scales (a caller's scaled backward): the helper, its optimizer
        self.delegates: dict[cst.CSTNode, tuple[cst.FunctionDef, str]] = {}
        # a call through a local `alias = functools.partial(helper, ...)`: that partial call
        self.through_partial: dict[int, cst.Call] = {}
        # tests of a handed handle that is None where apex is off (`if amp is not None:` in
        # the function it is handed to): the switch, as the GradScaler's `is_enabled()`
        self.handle_tests: set[int] = set()
        self.stepped_by_callers: set[tuple[int, str]] = set()  # scaled here, stepped by callers
        self.before_step: dict[cst.CSTNode, list[Callable[[], list]]] = {}
        # apex's `min_loss_scale`/`max_loss_scale`, kept after each `update()`: (test, value)
        self.bounds: list[tuple[str, str]] = []
        # steps a path reaches with no scaled backward since the last one: the scale_loss
        # statement that does not always run, then whether the step is guarded
        self.unsure: dict[cst.CSTNode, cst.CSTNode] = {}
        self.guarded: set[cst.CSTNode] = set()
        # steps after an `if` whose other branch backpropagates plainly with the scaler
        # possibly on: the test under which the scaled branch ran
        self.branch_guards: dict[cst.CSTNode, str] = {}
        self.guarded_unscales: dict[str, str] = {}  # unscale_ lines asked as a guarded step: opt
        self.unscale_gates: dict[cst.CSTNode, list] = {}  # gradient reader: the steps it serves
        self.groups: list[list[cst.CSTNode]] = []  # steps of one `scale_loss(loss, [a, b])`
        self.served: set[cst.CSTNode] = set()  # steps an unscale_ placed before a read serves
        # steps under a test of the iteration whose gradients are cleared either way, whose
        # `update()` follows that test, an inf check in its `else:` (``_update_after_test``)
        self.updated_after: set[cst.CSTNode] = set()
        self.requests: list[tuple[cst.With, cst.BaseExpression, cst.CSTNode, str | None]] = []
        self.moved: set[int] = set()
        # where an unscale_ is placed (before it, or a step), and which one (which optimizer's)
        self.unscales: dict[cst.CSTNode, str] = {}
        self.dropped: set[int] = set()  # statements removed with the apex import
        self.bound: set[str] = set()  # names the removed apex imports bound
        self.early: cst.BaseStatement | None = None  # the scaler is created right before it
        self.made_before: cst.If | None = None  # the `if` the scaler is made before
        self.init_scale: str | None = None  # apex's initial loss scale, set after initialize
        self.late: str | None = None  # why it cannot be created before an earlier restore
        self.scale_gap = False  # apex never checkpointed its scale, nor does the rewrite
        self.global_home: cst.FunctionDef | None = None  # creates the module-level scaler
        self.siblings: list | None = None  # apex_siblings of the file (None: not looked up)
        self.scaling_subclasses: list[str] = []  # derived classes elsewhere that call apex amp
        self.refused_here = False  # this file broke its link (see build)
        self.footers: list[cst.CSTNode] = []  # statements that go: their footer comments stay
        # `args.amp = amp`: apex's module kept on an object, by where (`args.amp`)
        self.kept: dict[str, cst.CSTNode] = {}
        # the calls made through a kept module that the GradScaler takes over (_through_stores)
        self.followed: set[cst.Call] = set()
        self._only_amp: bool | None = None  # (guards._amp_only_apex, asked once)
        # how functions that called apex through a kept handle reach the GradScaler
        self.stored_access: dict[int, str] = {}
        # `amp` handed to a function (`train(model, optimizer, amp)`): pending, then refused
        self.passed: list[cst.CSTNode] = []
        # tests of `amp` where a switch binds it (None where its test failed) that cannot be
        # read again as that test: (the expression, True where apex on makes it true, the if)
        self.switch_reads: list[tuple[cst.CSTNode, bool, cst.If]] = []
        self.handing = False
        # the function that initializes through its parameter, handed apex's module
        self.initializer = None
        self.merged: list[cst.Call] = []  # initialize calls planned as one with the first
        self.repeated: set[cst.Call] = set()  # the same initialize again: it goes (_reinitialize)
        self.branched: cst.If | None = None  # an `if` whose branches both initialize
        # an `if` with an initialize on each path among other statements (handles._split)
        self.split: tuple[cst.If, cst.CSTNode, cst.CSTNode, cst.BaseExpression | None] | None = None
        self.scale_reads: list[cst.Call] = []  # apex's loss scale read through its state
        self.unkeyed: list[cst.Call] = []  # `amp.state_dict()` stored under no key followed
        self.renamed_loads: list[cst.Call] = []  # `amp.load_state_dict(ckpt[key])`, key renamed
        self.handed: list = []  # the arguments that are handed the GradScaler instead
        self.after_scaler: list[str] = []  # statements right after the GradScaler is made
        self.scale_guard: cst.BaseExpression | None = None  # `loss_scale=` from a flag
        self.timm_noted = False  # the note on timm's CheckpointSaver is given
        self.unbound_flags: list[str] = []  # flags only a dropped version gate set (gates)
        self.wrapped: set[int] = set()  # the statements the autocast regions hold
        # regions (by their first statement) whose code may step an optimizer (_wrap)
        self.uncached: set[int] = set()

    def verify(self, code: str | None = None) -> None:
        """The last guard against a wrong rewrite: apply the plan in memory (``code``: already
        applied); the result must compile, must not read a name only apex bound, and must not
        get a correctness finding (AMP2xx: a clip of scaled gradients, a checkpoint without the
        scaler's state...) that the original did not have."""
        if code is None:
            code = self.module.visit(ReplaceNodes(self.plan.edits)).code
        try:
            tree = ast.parse(code)
        except SyntaxError as exc:  # a bug in the plan; refuse rather than write it
            self.plan.problems.append(f"internal: the rewrite does not compile ({exc.msg})")
            return
        names = Names(tree)  # (the rewrite's: its regions, and the reads below)
        banned = _banned_in_regions(tree, names)
        if banned is not None:
            line, spelled = banned
            self.plan.problems.append(
                f"line {line} of the rewrite runs `{spelled}` (binary cross entropy) in an "
                "autocast region, where CUDA autocast refuses it (apex O1 ran it on float32 "
                "inputs and raised on a float16 one, such as a sigmoid of a float16 linear "
                "output): compute it on logits with "
                "`torch.nn.BCEWithLogitsLoss`, or run it under "
                '`torch.amp.autocast("cuda", enabled=False)` on `.float()` inputs, by hand'
            )
            return
        elsewhere = _banned_elsewhere(tree, names, self.path or "<this file>", code)
        if elsewhere is not None:
            line, spelled, where = elsewhere
            self.plan.problems.append(
                f"line {line} of the rewrite runs `{spelled}(...)` in an autocast region, and "
                f"{where} calls binary cross entropy, which CUDA autocast refuses whatever the "
                "inputs' dtype (apex O1 ran it on float32 inputs and raised on a float16 one, "
                "such as a sigmoid of a float16 linear output): compute it on logits with "
                "`torch.nn.BCEWithLogitsLoss`, or run it under "
                '`torch.amp.autocast("cuda", enabled=False)` on `.float()` inputs, by hand'
            )
            return
        kept = _module_imports(tree)  # (`import apex.optimizers` stays, and binds `apex`)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in self.bound - kept:
                if isinstance(node.ctx, ast.Store):
                    continue  # (binds the name, reads nothing)
                local = names.bindings(node)
                if local and all(b.scope is not names.module_scope for b in local):
                    continue  # a function's own `apex` (a parameter, 49a), not the import's
                rebound = names.bound_before(node)
                if isinstance(rebound, ast.Assign) and not (
                    isinstance(rebound.value, ast.Constant) and rebound.value.value is None
                ):
                    continue  # just bound by the code itself (`amp = peak * 0.8`), not by apex
                self.plan.problems.append(
                    f"line {node.lineno} of the rewrite still reads `{node.id}`: replace that "
                    "use of apex by hand"
                )
                return
        probe = _probed_switch(tree)
        if probe is not None:
            name, line = probe
            self.plan.notes.append(
                f"the GradScaler and autocast are switched by `{name}`, which "
                f'`importlib.util.find_spec("apex")` sets at line {line} of the rewrite: they '
                "are on only where apex is installed, so a run after apex is uninstalled "
                "trains in float32; test the flag you mean there instead"
            )
        before = {d.code for d in _correctness(self.text)}
        if self.scale_gap:
            before.add("AMP208")  # apex's own gap (see _resume_state), reported on its own
        found_codes = _correctness(code)
        gap = next((f for f in found_codes if f.code == "AMP208"), None)
        if gap is not None and self.scale_gap and not any("AMP208" in n for n in self.plan.notes):
            self.plan.notes.append(
                "apex never checkpointed its loss scale here, and the rewrite does not add "
                f"the GradScaler's state to the checkpoint at its line {gap.line}: the scale "
                "restarts on resume, as it did under apex (AMP208 reports this gap on its own)"
            )
        for found in found_codes:
            if found.code not in before:
                self.plan.problems.append(
                    f"the rewrite would get {found.code} at its line {found.line} "
                    f"({found.message}): change the original so that it does not, or migrate "
                    "by hand"
                )

    def _registered_half(self, call: cst.CSTNode, member: str, initialize: list) -> bool:
        """``amp.register_half_function(torch, "einsum")``, a statement of its own (the
        transformers SQuAD recipe): autocast needs no registry, its own lists cast the torch op
        (einsum through the ``bmm`` it calls for each contraction), so the statement goes.
        einsum is stated: one that contracts no index between operands (a transpose, a trace,
        an elementwise or outer product) keeps its inputs' dtype, where apex cast them to
        float16. Only where it runs before an ``initialize`` of this file: apex read its
        registry there and ignored later entries (one in another file has no order here).
        False: not this call (the usual blocker)."""
        entry = self._registry_entry(call, member, "register_half_function", {"torch"}, initialize)
        if entry is None:
            return False
        statement, name = entry
        op = name.evaluated_value
        if op != "einsum" and op not in _AUTOCAST_HALF:
            return False
        self._remove_statement(statement)
        self.plan.notes.append(
            f"`amp.register_half_function(torch, {name.value})` at line {self.line(call)} goes: "
            + (
                "autocast runs einsum's contractions in float16 (through `bmm`, on its float16 "
                "list); behaviour change: an einsum that contracts no index between operands (a "
                "transpose, a trace, an elementwise or outer product) keeps its inputs' dtype, "
                "where apex cast them to float16"
                if op == "einsum"
                else f"autocast casts `torch.{op}` to float16 itself (its float16 list)"
            )
        )
        return True

    def _registered_float(self, call: cst.CSTNode, member: str, initialize: list) -> bool:
        """``amp.register_float_function(torch, "sigmoid")``, a statement of its own before
        this file's ``initialize`` (BraTS: a loss's sigmoid kept in float32): apex wrapped the
        module's function to cast its float16 arguments to float32 once amp was initialized;
        ``torch.amp.custom_fwd(..., cast_inputs=torch.float32)`` does that inside autocast,
        which is where the rewrite casts. Functions of ``torch`` and ``torch.nn.functional``;
        a module class of ``torch.nn`` (``ReLU6``): apex wrapped its constructor, not its
        forward, so the statement just goes. False: not this call."""
        modules = {"torch", "torch.nn.functional", "torch.nn"}
        entry = self._registry_entry(call, member, "register_float_function", modules, initialize)
        if entry is None:
            return False
        statement, name = entry
        op = name.evaluated_value
        if not (isinstance(op, str) and op.isidentifier()):
            return False
        where = f"{_code(self.module, call.args[0].value)}.{op}"
        if self.qualified(call.args[0].value) == {"torch.nn"}:
            if not op[0].isupper() or op == "Parameter":  # (a module class; not a submodule)
                return False
            self._remove_statement(statement)
            self.plan.notes.append(
                f"`amp.register_float_function({_code(self.module, call.args[0].value)}, "
                f"{name.value})` at line {self.line(call)} goes: apex wrapped the class's "
                f"constructor, casting only float16 tensors given to `{where}(...)`, and left "
                "its forward to O1's cast lists, as autocast's lists now run it (a test "
                f"`isinstance(x, {where})` after `initialize`, which the wrapper broke, works "
                "again)"
            )
            return True
        if not op.islower():
            return False
        line = cst.parse_statement(
            f'{where} = torch.amp.custom_fwd({where}, device_type="cuda", '
            "cast_inputs=torch.float32)\n"
        )
        self.plan.edits[statement] = lambda u: line.with_changes(leading_lines=u.leading_lines)
        self.plan.min_torch = (2, 4)  # (torch.amp.custom_fwd)
        self.plan.notes.append(
            f"`amp.register_float_function({_code(self.module, call.args[0].value)}, "
            f"{name.value})` at line {self.line(call)} becomes `{where} = torch.amp."
            f'custom_fwd({where}, device_type="cuda", cast_inputs=torch.float32)`: inside the '
            "autocast regions its floating CUDA tensor arguments become float32, as apex cast "
            "them; behaviour change: outside them it casts nothing (apex cast float16 arguments "
            "anywhere once amp was initialized), it runs with autocast off (apex kept casting "
            "inside it), and custom_fwd sets `_dtype` on its first argument (a call that passes "
            "no positional argument raises IndexError)"
        )
        return True

    def _registry_entry(
        self, call: cst.CSTNode, member: str, wanted: str, modules: set[str], initialize: list
    ) -> tuple[cst.SimpleStatementLine, cst.SimpleString] | None:
        """``amp.<wanted>(<one of modules>, "name")``, a statement of its own that runs before
        every ``initialize`` of this file (apex read its registry there and ignored later
        entries): the statement and the name."""
        statement = self.statement(call)
        found = (
            self.qualified(call.args[0].value)
            if isinstance(call, cst.Call) and call.args
            else set()
        )
        if (
            member == wanted
            and isinstance(call, cst.Call)
            and isinstance(statement, cst.SimpleStatementLine)
            and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and statement.body[0].value is call
            and len(call.args) == 2
            and not any(a.keyword or a.star for a in call.args)
            and isinstance(name := call.args[1].value, cst.SimpleString)
            and found
            and found <= modules
            and initialize
            and all(self._registered_first(call, i) for i in initialize)
        ):
            return statement, name
        return None

    def _registered_first(self, call: cst.Call, init: cst.Call) -> bool:
        """The registry entry ``call`` runs before ``init``: it comes first in the file, or
        its function (or the script's module-level code) calls the module-level function that
        initializes after it (``main()`` registers, then calls ``train()``)."""
        if self.order[id(call)] < self.order[id(init)]:
            return True
        home, caller = self.function(init), self.function(call)
        if not (
            isinstance(home, cst.FunctionDef)
            and isinstance(caller, cst.FunctionDef | cst.Module)
            and self.parent(home) is self.module
        ):
            return False
        if self._calls_after(caller, call, home):
            return True  # (also a script's module-level code: ORConvQA's notebook exports)
        if caller is self.module:
            return False
        # NeuralKpGen: `main()` calls `prepare(args)`, which registers, then `train(...)`, which
        # reaches the function that initializes
        if self.parent(caller) is not self.module:
            return False
        return any(
            self._calls_after(outer, first, home)
            for outer in self.module.body
            if isinstance(outer, cst.FunctionDef)
            for first in self._subtree(outer.body)
            if isinstance(first, cst.Call)
            and isinstance(first.func, cst.Name)
            and first.func.value == caller.name.value
            and self.function(first) is outer
        )

    def _calls_after(self, caller, after: cst.CSTNode, home: cst.FunctionDef, depth=0) -> bool:
        """``caller`` calls ``home`` after ``after`` (one of its nodes), directly or through a
        module-level function of this file that does (up to two calls deep)."""
        functions = {f.name.value: f for f in self.module.body if isinstance(f, cst.FunctionDef)}
        for n in self._subtree(caller.body) if caller is not self.module else self.nodes:
            if not (
                isinstance(n, cst.Call)
                and isinstance(n.func, cst.Name)
                and self.function(n) is caller
                and (after is None or self.order[id(n)] > self.order[id(after)])
            ):
                continue
            if n.func.value == home.name.value:
                return True
            callee = functions.get(n.func.value)
            if (
                callee is not None
                and callee is not caller
                and depth < 2
                and self._calls_after(callee, None, home, depth + 1)
            ):
                return True
        return False

    def _scaled_where_apex_was_off(
        self, init: cst.Call, setup: _Setup, scaled: list[cst.Call]
    ) -> None:
        """``if fp16: amp.initialize(...)`` and an ``amp.scale_loss`` under no test of
        ``fp16``: where the switch is off and it runs, apex raised ("internal Amp state has not
        been initialized"), and the disabled GradScaler passes the loss through: a crash that
        became a float32 run, stated (the 46th review: GenerativeSourceSeparation's
        `fp16_run=False`)."""
        switch = setup.condition
        if not switch or not any(
            isinstance(a, cst.If)
            and self.within(init, a.body)
            and _code(self.module, a.test) == switch
            for a in self.ancestors(init)
        ):
            return  # (not under an `if`: `enabled=False` set apex's state up, and it passed)
        paths = {p for p in re.findall(r"[A-Za-z_][\w.]*", switch) if p not in ("and", "or", "not")}
        loose = [  # (a test of the handle governs both arms: `if amp is None: ... else:`)
            c for c in scaled
            if not any(
                isinstance(a, cst.If | cst.IfExp)
                and ((self.within(c, a.body)
                      and any(p in _code(self.module, a.test) for p in paths))
                     or any(id(n) in self.handle_tests for n in self._subtree(a.test)))
                for a in self.ancestors(c)
            )
        ]  # fmt: skip
        if loose:
            lines = ", ".join(str(self.line(c)) for c in loose)
            self.plan.notes.append(
                f"behaviour change: `amp.scale_loss` at line {lines} is under no test of "
                f"`{switch}`, the switch `amp.initialize` runs under: where it is false and that "
                'runs, apex raised (its amp state was never set up: "internal Amp state has '
                'not been initialized"), and the disabled GradScaler passes the loss through '
                "(a plain backward in float32)"
            )

    def build(self) -> Plan | None:
        calls: dict[str, list[cst.Call]] = {}
        others: list[tuple[cst.Call, str]] = []
        for node in self.nodes:
            if isinstance(node, cst.Attribute) and isinstance(
                self.parent(node), cst.Decorator | cst.Assign
            ):  # `@amp.float_function`, `f = amp.float_function`: apex's casts where it is used
                others += [(node, n[len(APEX) + 1 :]) for n in self.qualified(node)
                           if n.startswith(APEX + ".")][:1]  # fmt: skip
            if not isinstance(node, cst.Call):
                continue
            qualified = self.qualified(node.func)
            for name in qualified:
                if name.startswith(APEX + "."):
                    member = name[len(APEX) + 1 :]
                    if member in SUPPORTED:
                        calls.setdefault(member, []).append(node)
                    elif not (member in NATIVE_MEMBERS and f"torch.cuda.amp.{member}" in qualified):
                        others.append((node, member))
                    # (else `amp.GradScaler()` where `amp` is torch.cuda.amp, apex only the
                    # `except ImportError:` fallback of old torch: native AMP's own, the 43rd
                    # review's kuma_utils; "has no O1 rewrite" was false)
        if "initialize" not in calls:  # `self.amp = amp; self.amp.initialize(...)` (RetinaNet)
            through = [c for kept in self._stores.values() for c in kept
                       if c.func.attr.value == "initialize"]  # fmt: skip
            if through:
                calls["initialize"] = through
        if not calls and not any(isinstance(node, cst.Call) for node, _ in others):
            return None  # (a bare `@amp.float_function` alone is AMP301's)
        initialize = calls.get("initialize", [])
        self.initialize_calls = set(initialize)  # (companions too: they go with the first)
        companions = self._companions(initialize) if len(initialize) > 1 else []
        if companions:  # (casts only, beside the training call: they go with it)
            initialize = calls["initialize"] = [c for c in initialize if c not in companions]
        self.plan.anchor = (initialize or [c for c, _ in others] or next(iter(calls.values())))[0]
        self.merged = self._merged(initialize) if initialize else []
        one = len(initialize) - len(self.merged) == 1  # (several in a row planned as one)
        if one:  # `amp._amp_state.loss_scalers[0].loss_scale()`: _read_scales
            self.scale_reads = [c for c, m in others if m == _LOSS_SCALE]
            others = [(c, m) for c, m in others if m != _LOSS_SCALE]
        if not initialize and not self.link:
            self.initializer = self._initializer()
            if self.initializer is not None:
                self.plan.anchor = self.initializer.init
        # (a registry entry runs before whichever initializes, here or through a parameter)
        initializing = initialize or ([self.initializer.init] if self.initializer else [])
        inits = [c for c, m in others if m == "init"] if not calls else []
        for node, member in others:
            if node in inits:
                continue  # the file's whole apex: planned below
            if not (
                self._registered_half(node, member, initializing)
                or self._registered_float(node, member, initializing)
            ):
                self.problem(node, no_rewrite(member, bool(initializing)))
        # a handed module can become the GradScaler
        self.handing = one or self.initializer is not None
        self._imports()
        gated = self._version_gated()
        if gated is None and len(initialize) == 1 and not self.link:
            gated = self._backend_switched(initialize[0])
        if gated is not None:
            self.verify(gated)
            return self.plan
        self._values(calls)
        self._interpreter_probes()
        # a store that is followed goes; one that is not keeps the plan from being applied
        self.removed |= {self.statement(n) for n in self.kept.values()}
        if self.kept and not one:
            for where, node in self.kept.items():
                self.problem(node, self._stored(node, where))
            self.kept = {}
        refused_here = bool(
            self.path is not None
            and self.link
            and (self.link.broken_by == os.path.abspath(self.path))
        )
        # the file that broke its link plans as it did, so its own blockers are said again
        self.refused_here = refused_here
        role = self.role if self.link and (not self.link.broken or refused_here) else None
        if self.link and self.link.broken and not refused_here:
            self.problem(self.plan.anchor, self._broken())
        if inits and role is None:
            self._siblings(role)
            self._amp_init(inits)
            if not self.plan.problems:
                self.verify()
            return self.plan
        reader = role == "caller" and self._sharing()
        if not (initialize or self.initializer) and role not in ("callee", "state") and not reader:
            self._no_initialize(calls)
            return self.plan
        alone = set(calls) == {"initialize"} and len(initialize) == 1 and not self.kept
        if alone and self._dual(initialize[0]):
            # the modules it imports are read as the rewrite leaves it: an apex helper only its
            # apex branch used (timm's `ApexScaler` in a copy of `utils/cuda.py`) is not its
            code = self.module.visit(ReplaceNodes(self.plan.edits)).code
            self._siblings(role, ast.parse(code))
            if not self.plan.problems:
                self.verify(code)
            return self.plan
        self._siblings(role)
        if alone and _literal_o0(initialize[0]) and self._off_alone(initialize[0]):
            if not self.plan.problems:
                self.verify()
            return self.plan
        if self._casting_together(initialize, calls):
            self._inference_only(initialize[0], also=initialize[1:])
            if not self.plan.problems:
                self.verify()
            return self.plan
        for extra in initialize[1 + len(self.merged) :]:
            self._reinitialize(initialize[0], extra)
        if alone and (
            without_optimizer(initialize_arguments(initialize[0])[0])
            or self._casts_alone(initialize[0])
        ):
            self._inference_only(initialize[0])
            if not self.plan.problems:
                self.verify()
            return self.plan
        if initialize:
            setup = self._initialize(initialize[0])
        elif self.initializer is not None:
            setup = self._initializer_setup(self.initializer)
        elif self.hooked("callee"):
            setup = self._hook_setup(calls)
        elif self.family_linked("callee"):
            setup = self._family_setup(calls)
        elif role == "state":
            setup = self._state_setup()
        elif reader:
            setup = self._shared_setup()
        else:
            setup = self._linked_setup()
        if setup is None:
            why = "`amp.initialize` itself is not rewritten (see the other blockers)"
            for where, node in self.kept.items():
                self.problem(node, self._stored(node, where, why))
            self._refuse_passed(why)
            return self.plan
        if initialize:
            self._switch_leaks(setup.statement)
        for companion in companions:
            given = _argument(companion, "models", 0)
            model = _code(self.module, given)
            shown = f"{model} = amp.initialize({model}, ...)"
            if isinstance(given, cst.Call):  # `crit = amp.initialize(Loss().cuda())`: what
                target = self.statement(companion).body[0].targets[0].target  # O1 returns
                self.plan.edits[companion] = lambda _u, m=given: m
                model = target.value
                shown = f"{model} = amp.initialize({_code(self.module, given)}, ...)"
            else:
                self._remove_statement(self.statement(companion))
            setup.models.add(model)
            self.plan.notes.append(
                f"`{shown}` at line {self.line(companion)} (no "
                "optimizer) goes: it only turned on O1's casts, which the training "
                f"`amp.initialize` at line {self.line(initialize[0])} turns on too, "
                f"process-wide; `{model}`'s forwards are the autocast regions' like the "
                "trained models'"
                + (
                    ""
                    if self.function(companion) is self.function(initialize[0])
                    else f"; behaviour change: apex also made new loss scalers at each "
                    f"`initialize`, so its loss scale restarted at 2**16 wherever "
                    f"`{self.function(companion).name.value}` ran after training steps; the "
                    "GradScaler keeps its scale"
                )
            )
        stored = self._through_stores(setup, calls) | self._through_params(setup, calls)
        # (refused above: their uses are theirs, not this scaler's to reach)
        others = {id(self.function(c)) for c in initialize[1:] if c not in self.repeated}
        uses = [
            c for m in SUPPORTED - {"initialize"} for c in calls.get(m, [])
            if c not in stored and id(self.function(c)) not in others
        ]  # fmt: skip
        self._scope(setup, uses + [h.call for h in self.handed] + self.scale_reads)
        if initialize and role == "callee" and self._sharing():
            self._shared_owner(setup)
        self._hand_scaler()
        self._switch_reads(setup)
        for call in calls.get("scale_loss", []):
            self._scale_loss(call, setup)
        if initialize and self.delegating("caller"):  # its calls of the helper scale
            self._linked_backwards(setup, self._pass_to_linked(setup, initialize[0]))
        if initialize:
            self._scaled_where_apex_was_off(initialize[0], setup, calls.get("scale_loss", []))
        several = [_argument(c, "optimizers", 1) for c in initialize[: 1 + len(self.merged)]]
        # every `initialize` at literal O0 (no loss_scale: refused where given) is apex off: the
        # GradScaler is made disabled, which steps plainly and scales nothing, so the order of
        # steps, plain backwards and steps with no scaled backward keep their meaning
        off = bool(initialize) and all(_literal_o0(c) for c in initialize)
        optimizers = {_code(self.module, o) for s in several for o in _optimizers(s)}
        if off and (len(initialize) > 1 or len(optimizers) > 1):
            self.plan.notes.append(
                "every `amp.initialize` here is opt_level O0 (apex off): with the GradScaler "
                "made disabled, the order of the steps and the backwards it does not scale "
                "keep apex's meaning (a disabled GradScaler steps plainly and scales nothing); "
                "before turning it on, place the steps for one `update()` per iteration and "
                "scale those backwards, by hand"
            )
        if initialize and not off and len(optimizers) > 1:
            self._steps_in_turn(calls.get("scale_loss", []))
        if not off:
            self._unscaled_steps()
        self._sure_groups()
        self._master_params(
            calls.get("master_params", []),
            self._grad_readers(calls, setup.condition, set(setup.models)),
        )
        self._one_unscale_per_step()
        if not off:
            self._plain_backwards(setup)
        self._guard_steps()
        if self.bounds and not self.before_step:
            self.problem(
                self.plan.anchor,
                "`amp.initialize` bounds the loss scale, and no step of this file becomes "
                "`scaler.step` + `update()`, after which the bound would be kept: keep it "
                "there by hand (`if scaler.get_scale() < floor: scaler.update(floor)`)",
            )
        if not off:
            self._discarded_overflows()
            self._skipped_steps()
        self._accumulation_note()
        self._cleared_backwards()
        self._read_scales(initialize[0] if initialize else None)
        for member in ("state_dict", "load_state_dict"):
            for call in calls.get(member, []):
                self._state(call, member, bool(setup.condition))
        for value, sides in self.state_files.items():
            if sides == {"loaded"}:  # saved elsewhere (as apex's), loaded from the new name
                self.problem(
                    self.file_loads[0],
                    f"apex's state is loaded from `{value}`, which nothing in this file saves: "
                    "the rewrite renames the file it loads, so whatever saves it must save the "
                    "GradScaler's state under the new name too; migrate the two together by hand",
                )
        if self.unkeyed and self.renamed_loads:  # saved as it was, loaded from the new key
            saved, loaded = self.unkeyed[0], self.renamed_loads[0]
            self.problem(
                saved,
                f"`amp.state_dict()` at line {self.line(saved)} is stored under no key this "
                f"rewrite can follow, while line {self.line(loaded)} loads it from a key that "
                f'becomes "{self.name}": save and load would disagree; store it under the '
                "checkpoint key directly, by hand",
            )
        resumed = initialize[0] if initialize else self._initializer_resumed()
        if resumed and not calls.get("state_dict") and not calls.get("load_state_dict"):
            self._resume_state(setup, resumed)
        elif not initialize and not calls.get("state_dict") and not calls.get("load_state_dict"):
            # the other side of a link (a Trainer class, a hook, a training module) that never
            # checkpointed apex's scale: a checkpoint of its own without the GradScaler's state
            # is apex's own gap (the 45th review's SMART), reported by AMP208 on its own
            self.scale_gap = True
        elif initialize and not calls.get("state_dict"):  # restored, never saved (GANTTS)
            self.scale_gap = True
            line = self.line(calls["load_state_dict"][0])
            self.plan.notes.append(
                f"apex's loss scale is restored here (line {line}) from what timm's "
                "`CheckpointSaver` saved, which it saves no more (above): the scale restarts "
                "on resume (AMP208 reports this gap on its own)"
                if self.timm_noted
                else f"apex's loss scale is restored here (line {line}) but never saved, so no "
                "checkpoint this code writes holds it: the GradScaler's is not saved either, "
                "and the scale restarts on resume, as under apex (AMP208 reports this gap on "
                "its own)"
            )
        if initialize and (
            self.hooked("caller") or self.family_linked("caller") or (self.link and self.link.kept)
        ):  # the hook makes its own GradScaler, the family reads the object's; a kept handle
            pass  # is judged by its store
        elif initialize and role == "caller":
            if not self.delegating("caller"):  # (a helper that scales: passed above)
                self._pass_to_linked(setup, initialize[0])
        elif initialize and role == "callee" and self._sharing():
            pass  # the importers scale, reading the module's GradScaler (_shared_owner)
        elif initialize and not calls.get("scale_loss") and not self._stores and not self.passed:
            # (kept as `args.amp` or handed to a function: that blocker says where it goes)
            self.problem(initialize[0], self._scaled_elsewhere(initialize[0]))
        self._keys_left_behind()
        self._regions(setup)
        self._forwards_elsewhere(setup)
        self._helper_notes()
        self._move_footers()
        if not self.plan.problems:
            self.verify()  # (first: where this file refused at that check, it says so again)
        if refused_here and not self.plan.problems:  # suppressed, or only offered
            self.problem(self.plan.anchor, self._broken())
        return self.plan


def rewrite(
    module: cst.Module,
    link: tuple[Link, str] | None = None,
    declared: str | None = None,
    path: str | None = None,
    casts: Casts | None = None,
) -> cst.Module:
    """Apply the plan to ``module`` (re-planned: other fixes may have changed it), planned with
    the same setting, file and components as the finding (``declared``: see ``_Planner``)."""
    found = _Planner(module, scopes(module), Walk(module), link, path, declared, casts).build()
    if found is None or found.problems:
        return module
    return module.visit(ReplaceNodes(found.edits))


class ApexO1(cst.CSTVisitor):
    """One finding per file that uses apex.amp: the O1 rewrite, or every blocker with its line."""

    METADATA_DEPENDENCIES = (ScopeProvider, ParentNodeProvider)  # shared with the other rules

    def __init__(
        self,
        rule: Rule,
        link: tuple[Link, str] | None = None,
        path: str | None = None,
        declared: str | None = None,
        casts: Casts | None = None,
    ) -> None:
        super().__init__()
        self.rule = rule
        self.link = link
        self.path = path
        self.declared = declared  # see _Planner
        self.casts = casts
        self.findings: list[Finding] = []

    def visit_Module(self, node: cst.Module) -> bool:
        scopes, parents = self.metadata[ScopeProvider], self.metadata[ParentNodeProvider]
        found = _Planner(
            node, scopes, parents, self.link, self.path, self.declared, self.casts
        ).build()
        if found is None or found.anchor is None:
            return False
        notes = "".join(f"; note: {n}" for n in dict.fromkeys(found.notes))
        if found.problems:
            message = refusal(found.problems)
            self.findings.append(Finding(self.rule.code, message, found.anchor, None))
            return False
        message = (
            found.summary
            or "apex.amp O1 can be rewritten to torch.amp: GradScaler instead of "
            "`amp.initialize`, an autocast region around the forward pass and loss, "
            "`scaler.scale(loss).backward()`, `scaler.step` + `scaler.update`"
        ) + notes
        build = functools.partial(
            rewrite, link=self.link, declared=self.declared, path=self.path, casts=self.casts
        )
        fix = Fix(
            "unsafe",
            cst_target=node,
            cst_build=build,
            add_imports=frozenset({"torch"}),
            min_torch=found.min_torch or (),
        )
        self.findings.append(Finding(self.rule.code, message, found.anchor, fix))
        return False


def _module_imports(tree: ast.Module) -> set[str]:
    """The names apex imports the rewrite keeps bind module-wide (not a function's or a
    class's): `import apex.optimizers` still binds `apex`."""
    bound: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            bound |= {
                a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("apex")
            }
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("apex"):
            bound |= {a.asname or a.name for a in node.names}
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            todo += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)]
    return bound


def _probed_switch(tree: ast.Module) -> tuple[str, int] | None:
    """A name bound to ``importlib.util.find_spec("apex")`` (an availability probe) that an
    ``enabled=`` of the rewrite's GradScaler or autocast reads (bert_document_classification):
    (the name, the line of the probe)."""
    probes = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func).endswith("find_spec")
            and node.value.args
            and isinstance(node.value.args[0], ast.Constant)
            and node.value.args[0].value == "apex"
        ):
            probes.setdefault(node.targets[0].id, node.lineno)
    for node in ast.walk(tree) if probes else ():
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
            ("GradScaler", "autocast")
        ):
            for keyword in node.keywords:
                if keyword.arg == "enabled":
                    read = {n.id for n in ast.walk(keyword.value) if isinstance(n, ast.Name)}
                    for name in sorted(read & set(probes)):
                        return name, probes[name]
    return None


def _literal_o0(init: cst.Call) -> bool:
    """``amp.initialize(..., opt_level="O0")`` with no ``loss_scale`` other than 1.0: apex off."""
    args, _ = initialize_arguments(init)
    level, scale = args.get("opt_level"), args.get("loss_scale")
    return (
        isinstance(level, cst.SimpleString)
        and level.evaluated_value == "O0"
        and (
            scale is None
            or (isinstance(scale, cst.Integer | cst.Float) and float(scale.value) == 1.0)
        )
    )
