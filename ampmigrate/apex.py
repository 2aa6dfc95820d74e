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

A file without ``initialize`` that is not one side of a pair (:mod:`ampmigrate.apexlinks`) is
only ever refused: the engine gets that refusal on ``ast`` from :mod:`ampmigrate.apexverdict`
(which holds the blocker texts both use) and runs this planner for it only where ``ast`` is
unsure.
"""

from __future__ import annotations

import ast
import functools
import itertools
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, ScopeProvider

from ampmigrate.apexflow import SwitchFlow
from ampmigrate.apexgates import VersionGates
from ampmigrate.apexinfer import InferenceOnly
from ampmigrate.apexlinks import Link, apex_siblings
from ampmigrate.apexverdict import (
    APEX,
    ASSERTS_MISSING,
    BESIDES_AMP,
    GUARD_DOES_MORE,
    IMPORT_ERRORS,
    NOT_PRECISION,
    SUPPORTED,
    needs_apex,
    no_rewrite,
    refusal,
    used_as_value,
    without_initialize,
)
from ampmigrate.catalog import Rule
from ampmigrate.cstnames import qualified_names
from ampmigrate.findings import Finding, Fix
from ampmigrate.replace import Build, ReplaceNodes

_KNOWN_KWARGS = {
    "models", "optimizers", "verbosity", "opt_level", "loss_scale", "enabled", "num_losses",
}  # fmt: skip
_HELPER = re.compile(r"checkpoint|^(save|load|resume)", re.IGNORECASE)
Loop = cst.For | cst.While


@dataclass
class Plan:
    anchor: cst.CSTNode | None = None  # where the finding is reported: the initialize call
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    edits: dict[cst.CSTNode, Build] = field(default_factory=dict)
    summary: str | None = None  # what the rewrite does, where it is not the O1 mapping


@dataclass
class _Setup:
    """What ``initialize`` tells the rest of the plan."""

    statement: cst.SimpleStatementLine
    home: cst.CSTNode  # the function (or module) holding it
    models: set[str]  # spellings of the initialized models (`model`, `self.model`)
    condition: str | None  # apex was enabled under this expression (None: always)
    by_scaler: bool = False  # autocast asks the scaler (`enabled=scaler.is_enabled()`)


def _code(module: cst.Module, node: cst.CSTNode) -> str:
    return module.code_for_node(node)


def _statements(block: cst.CSTNode) -> list[cst.BaseStatement] | None:
    return list(block.body) if isinstance(block, cst.Module | cst.IndentedBlock) else None


def _appended(items: Sequence[cst.Arg | cst.Param], new: cst.Arg | cst.Param) -> list:
    """``items`` with ``new`` last; a trailing comma stays trailing (the layout is kept)."""
    items = list(items)
    if items and isinstance(items[-1].comma, cst.Comma):
        new = new.with_changes(comma=items[-1].comma)
        previous = items[-2].comma if len(items) > 1 else cst.Comma(
            whitespace_after=cst.SimpleWhitespace(" ")
        )  # fmt: skip
        items[-1] = items[-1].with_changes(comma=previous)
    return [*items, new]


def _correctness(code: str) -> list:
    """The AMP2xx diagnostics of ``code`` (the engine's own analysis, imported here: the
    engine imports this module lazily)."""
    from ampmigrate.catalog import all_rules
    from ampmigrate.engine.analyze import Analysis
    from ampmigrate.engine.settings import Settings

    settings = Settings(rules=tuple(r for c, r in all_rules().items() if c.startswith("AMP2")))
    try:
        return [d for _, d in Analysis(code.encode("utf-8"), settings).diagnostics(settings)]
    except (SyntaxError, ValueError, UnicodeError, LookupError, RecursionError):
        return []


def _imports_something(statement: cst.BaseStatement) -> bool:
    """An import statement (which may raise ImportError)."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Import | cst.ImportFrom) for small in statement.body
    )


def _argument(call: cst.Call, keyword: str, index: int) -> cst.BaseExpression | None:
    """The argument of ``call`` passed as ``keyword=`` or at position ``index``."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a.value for a in call.args if not a.keyword and not a.star]
    return positional[index] if len(positional) > index else None


def _optimizers(node: cst.BaseExpression | None) -> list[cst.BaseExpression]:
    """The optimizers ``initialize`` is given: a name, or a list/tuple of names (apex kept one
    loss scale for all of them, updated after each ``scale_loss``, as ``scaler.update()``
    after each ``scaler.step`` does)."""
    if isinstance(node, cst.Name | cst.Attribute):
        return [node]
    if isinstance(node, cst.List | cst.Tuple) and node.elements:
        values = [e.value for e in node.elements]
        if all(isinstance(v, cst.Name | cst.Attribute) for v in values):
            return values
    return []


def _targets(node: cst.BaseExpression) -> set[str]:
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, cst.Tuple | cst.List):
        return {n for e in node.elements for n in _targets(e.value)}
    return set()


def _is_call_of(node: cst.CSTNode, attr: str) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == attr
    )


_NO_SPACE = cst.AssignEqual(
    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
)


class _Facts(cst.CSTVisitor):
    """Names a statement binds and reads, and the calls it makes (data flow of the loss)."""

    def __init__(self, module: cst.Module, models: set[str]) -> None:
        super().__init__()
        self.module, self.models = module, models
        self.assigned: set[str] = set()
        self.used: set[str] = set()
        self.calls = False
        self.model_calls: list[cst.Call] = []
        self.backward = False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.assigned |= _targets(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self.assigned |= _targets(node.target)

    def visit_For(self, node: cst.For) -> None:
        self.assigned |= _targets(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self.assigned |= _targets(node.name)

    def visit_Name(self, node: cst.Name) -> None:
        self.used.add(node.value)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        self.calls |= isinstance(node.operator, cst.MatrixMultiply)  # autocast casts `@`

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.assigned |= _targets(node.target)
        self.calls |= isinstance(node.operator, cst.MatrixMultiplyAssign)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls = True
        func = _code(self.module, node.func)
        base, _, attr = func.rpartition(".")
        if func in self.models or (base in self.models and attr in ("forward", "module")):
            self.model_calls.append(node)
        if _is_call_of(node, "backward"):
            self.backward = True


class _Planner(VersionGates, SwitchFlow, InferenceOnly):
    def __init__(
        self,
        module: cst.Module,
        scopes: Mapping,
        parents: Mapping,
        link: tuple[Link, str] | None = None,
        path: str | None = None,
    ) -> None:
        self.module = module
        self.path = path  # the file on disk (None: no sibling modules are looked up)
        # the file is one side ("caller" or "callee") of a pair of modules (apexlinks)
        self.link, self.role = link if link is not None else (None, None)
        self.scopes = scopes
        self.parents = parents
        self.nodes = list(self._subtree(module))[1:]  # every node but the module, in source order
        self.order = {id(n): i for i, n in enumerate(self.nodes)}
        self.plan = Plan()
        self.removed: set[cst.CSTNode] = set()  # statements the plan deletes outright
        self._positions: Mapping | None = None
        self.mode = "module"  # where the scaler lives: "module", "function" or "class"
        self.home: cst.CSTNode = module
        self.cls: cst.ClassDef | None = None
        self.threaded: set[cst.FunctionDef] = set()
        self.name = "scaler"
        self.steps: dict[tuple[int, str], list[cst.SimpleStatementLine]] = {}
        self.scaled: dict[tuple[int, str], list[cst.With]] = {}  # the scale_loss blocks per step
        self.before_step: dict[cst.CSTNode, list[Callable[[], list]]] = {}
        self.requests: list[tuple[cst.With, str, cst.CSTNode, str | None]] = []
        self.moved: set[int] = set()
        self.unscales: list[cst.CSTNode] = []  # where an unscale_ is placed (before, or a step)
        self.dropped: set[int] = set()  # statements removed with the apex import
        self.bound: set[str] = set()  # names the removed apex imports bound
        self.early: cst.BaseStatement | None = None  # the scaler is created right before it
        self.late: str | None = None  # why it cannot be created before an earlier restore
        self.scale_gap = False  # apex never checkpointed its scale, nor does the rewrite
        self.global_home: cst.FunctionDef | None = None  # creates the module-level scaler
        self.siblings: list | None = None  # apex_siblings of the file (None: not looked up)

    def verify(self) -> None:
        """The last guard against a wrong rewrite: apply the plan in memory; the result must
        compile, must not read a name only apex bound, and must not get a correctness finding
        (AMP2xx: a clip of scaled gradients, a checkpoint without the scaler's state...) that
        the original did not have."""
        code = self.module.visit(ReplaceNodes(self.plan.edits)).code
        try:
            tree = ast.parse(code)
        except SyntaxError as exc:  # a bug in the plan; refuse rather than write it
            self.plan.problems.append(f"internal: the rewrite does not compile ({exc.msg})")
            return
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in self.bound:
                self.plan.problems.append(
                    f"line {node.lineno} of the rewrite still reads `{node.id}`: replace that "
                    "use of apex by hand"
                )
                return
        before = {d.code for d in _correctness(self.module.code)}
        if self.scale_gap:
            before.add("AMP208")  # apex's own gap (see _resume_state), reported on its own
        for found in _correctness(code):
            if found.code not in before:
                self.plan.problems.append(
                    f"the rewrite would get {found.code} at its line {found.line} "
                    f"({found.message}): change the original so that it does not, or migrate "
                    "by hand"
                )

    # -- tree helpers ----------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def function(self, node: cst.CSTNode) -> cst.CSTNode:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef | cst.Module):
                return ancestor
        return self.module

    def within(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        return node is outer or any(a is outer for a in self.ancestors(node))

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement:
        """The statement (simple line or compound) that contains ``node``."""
        current = node
        while not isinstance(current, cst.BaseStatement):
            current = self.parent(current)
        return current

    def block_of(self, statement: cst.CSTNode) -> tuple[cst.CSTNode, int] | None:
        """The block holding ``statement`` and its index there (an ``elif`` climbs to its
        ``if``)."""
        while statement is not None:
            block = self.parent(statement)
            body = _statements(block) if block is not None else None
            if body is not None:
                return block, next(i for i, s in enumerate(body) if s is statement)
            if not isinstance(block, cst.If):
                return None
            statement = block
        return None

    def owner(self, block: cst.CSTNode) -> cst.CSTNode | None:
        """The statement whose body ``block`` is (None for the module)."""
        for ancestor in self.ancestors(block):
            if isinstance(ancestor, cst.BaseStatement):
                return ancestor
        return None

    def qualified(self, node: cst.CSTNode) -> set[str]:
        return qualified_names(self.scopes.get(node), node)

    def line(self, node: cst.CSTNode) -> int:
        if self._positions is None:  # resolved only when a message needs a line
            wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
            self._positions = wrapper.resolve(PositionProvider)
        return self._positions[node].start.line

    def problem(self, node: cst.CSTNode, text: str) -> None:
        self.plan.problems.append(f"line {self.line(node)}: {text}")

    def free_name(self, preferred: str) -> str | None:
        """A name the file does not use anywhere, so the new binding shadows nothing."""
        taken = {n.value for n in self.nodes if isinstance(n, cst.Name)}
        for name in (preferred, f"grad_{preferred}", f"amp_{preferred}"):
            if name not in taken and not re.search(rf"[\"']{name}[\"']", self.module.code):
                return name
        return None

    def facts(self, statement: cst.CSTNode, models: set[str] = frozenset()) -> _Facts:
        found = _Facts(self.module, models)
        statement.visit(found)
        return found

    def top_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The module-level function around ``node`` (None in a class or at module level)."""
        outer = None
        for ancestor in [node, *self.ancestors(node)]:
            if isinstance(ancestor, cst.FunctionDef):
                outer = ancestor
            elif isinstance(ancestor, cst.ClassDef):
                return None
        return outer

    def method_of(self, node: cst.CSTNode, cls: cst.ClassDef) -> cst.FunctionDef | None:
        """The method of ``cls`` around ``node``."""
        nodes = [node, *self.ancestors(node)]
        for inner, outer in itertools.pairwise(nodes):
            if outer is cls.body and isinstance(inner, cst.FunctionDef):
                return inner
        return None

    def access(self, where: cst.CSTNode) -> str | None:
        """How code in ``where`` reaches the scaler (None: it cannot)."""
        if self.mode == "module":
            return self.name
        if self.mode == "class":
            method = self.method_of(where, self.cls)
            params = method.params.params if method is not None else ()
            return f"{params[0].name.value}.{self.name}" if params else None
        if self.within(where, self.home) or any(self.within(where, f) for f in self.threaded):
            return self.name
        return None

    # -- the plan --------------------------------------------------------------------------
    def build(self) -> Plan | None:
        calls: dict[str, list[cst.Call]] = {}
        others: list[tuple[cst.Call, str]] = []
        for node in self.nodes:
            if not isinstance(node, cst.Call):
                continue
            for name in self.qualified(node.func):
                if name.startswith(APEX + "."):
                    member = name[len(APEX) + 1 :]
                    if member in SUPPORTED:
                        calls.setdefault(member, []).append(node)
                    else:
                        others.append((node, member))
        if not calls and not others:
            return None
        initialize = calls.get("initialize", [])
        self.plan.anchor = (initialize or [c for c, _ in others] or next(iter(calls.values())))[0]
        for node, member in others:
            self.problem(node, no_rewrite(member))
        self._imports()
        if self._version_gated():
            self.verify()
            return self.plan
        self._values(calls)
        role = self.role if self.link and not self.link.broken else None
        if self.link and self.link.broken and self.link.broken_by != self.role:
            self.problem(self.plan.anchor, self._broken())
        if not initialize and role != "callee":
            self._no_initialize(calls)
            return self.plan
        self._siblings(role)
        for extra in initialize[1:]:
            self._reinitialize(initialize[0], extra)
        if set(calls) == {"initialize"} and len(initialize) == 1 and self._dual(initialize[0]):
            if not self.plan.problems:
                self.verify()
            return self.plan
        if (
            set(calls) == {"initialize"}
            and len(initialize) == 1
            and _argument(initialize[0], "optimizers", 1) is None
        ):
            self._inference_only(initialize[0])
            if not self.plan.problems:
                self.verify()
            return self.plan
        setup = self._initialize(initialize[0]) if initialize else self._linked_setup()
        if setup is None:
            return self.plan
        if initialize:
            self._switch_leaks(setup.statement)
        uses = [c for m in SUPPORTED - {"initialize"} for c in calls.get(m, [])]
        self._scope(setup, uses)
        for call in calls.get("scale_loss", []):
            self._scale_loss(call, setup)
        if initialize and len(_optimizers(_argument(initialize[0], "optimizers", 1))) > 1:
            self._steps_in_turn(calls.get("scale_loss", []))
        self._unscaled_steps()
        self._master_params(calls.get("master_params", []), self._grad_readers(calls))
        self._one_unscale_per_step()
        for member in ("state_dict", "load_state_dict"):
            for call in calls.get(member, []):
                self._state(call, member)
        if initialize and not calls.get("state_dict") and not calls.get("load_state_dict"):
            self._resume_state(setup, initialize[0])
        if initialize and not calls.get("scale_loss"):
            if role == "caller":
                self._pass_to_linked(setup, initialize[0])
            else:
                self.problem(initialize[0], self._scaled_elsewhere(initialize[0]))
        self._regions(setup)
        self._helper_notes()
        if not self.plan.problems:
            self.verify()
        return self.plan

    def _reinitialize(self, first: cst.Call, extra: cst.Call) -> None:
        """``a, b = amp.initialize(a, b, <same options>)`` again (allennlp does it before
        ``amp.load_state_dict``, as apex's docs advised): a no-op for native AMP, so it goes.
        Any other second initialize blocks."""
        statement = self.statement(extra)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        same = (
            isinstance(small, cst.Assign)
            and len(statement.body) == 1
            and small.value is extra
            and _code(self.module, extra.with_changes(func=first.func)) == _code(self.module, first)
        )
        if same:
            targets = _code(self.module, small.targets[0].target).replace(" ", "").strip("()")
            values = [_code(self.module, a.value) for a in extra.args if not a.keyword][:2]
            same = targets == ",".join(values)
        if same:
            self._remove_statement(statement)
            return
        self.problem(
            extra,
            "`amp.initialize` is called more than once: one GradScaler per optimizer must be "
            "placed by hand",
        )

    def _scaled_elsewhere(self, init: cst.Call) -> str:
        """The blocker for a file that initializes but scales the loss in another file: name
        the calls that receive the optimizer, where the GradScaler has to be passed."""
        text = (
            "no `amp.scale_loss` in this file: the loss is scaled and the optimizer stepped in "
            "another file; create the GradScaler here and pass it there"
        )
        if self.siblings == [] and self.path is not None and os.path.isfile(self.path):
            # nothing it imports calls apex: perhaps nothing scales at all
            return (
                "no `amp.scale_loss` in this file, and none of the modules it imports that are "
                "on disk calls apex amp: if no other code scales the loss, apex only casts here "
                "(O1's autocast, no loss scaling): delete `amp.initialize` and run the forward "
                'under `torch.amp.autocast("cuda", dtype=torch.float16)`, by hand; if other code '
                "does, create the GradScaler here and pass it there"
            )
        args = {a.keyword.value: a.value for a in init.args if a.keyword}
        positional = [a.value for a in init.args if not a.keyword]
        optimizer = args.get("optimizers", positional[1] if len(positional) > 1 else None)
        if optimizer is None:
            return text
        name = _code(self.module, optimizer)
        home = self.function(init)
        calls = [
            n for n in self._subtree(home)
            if isinstance(n, cst.Call) and self.order[id(n)] > self.order[id(init)]
            and any(_code(self.module, a.value) == name for a in n.args)
            and not _is_call_of(n, "step")
        ]  # fmt: skip
        if not calls:
            return text
        listed = ", ".join(
            f"`{_code(self.module, c.func)}` (line {self.line(c)})" for c in calls[:3]
        )
        return f"{text} (it receives `{name}` through {listed}: add a `scaler` argument there)"

    def _dual(self, init: cst.Call) -> bool:
        """apex beside native AMP (timm's ``--apex-amp``/``--native-amp``): ``if use_amp ==
        "apex": <initialize, a scaler object, logs> elif use_amp == "native": <autocast,
        a native scaler>``, with no other apex amp call in the file. Native AMP is apex O1's
        equivalent, so the apex branch goes and its value runs the native branch
        (``if use_amp in ("apex", "native"):``). False: not this shape."""
        statement = self.statement(init)
        holder = self.parent(self.parent(statement))
        if not isinstance(holder, cst.If) or self.parent(statement) is not holder.body:
            return False
        root = holder
        while self._is_elif(root):
            root = self.parent(root)
        if self.block_of(root) is None:
            return False
        chain = [root]
        while isinstance(chain[-1].orelse, cst.If):
            chain.append(chain[-1].orelse)

        def compared(branch: cst.If) -> tuple[str, cst.SimpleString] | None:
            t = branch.test
            if (
                isinstance(t, cst.Comparison)
                and len(t.comparisons) == 1
                and isinstance(t.comparisons[0].operator, cst.Equal)
                and isinstance(t.comparisons[0].comparator, cst.SimpleString)
            ):
                return _code(self.module, t.left), t.comparisons[0].comparator
            return None

        apex_at = chain.index(holder)
        apex_test = compared(holder)
        if apex_test is None or "apex" not in str(apex_test[1].evaluated_value).lower():
            return False
        subject = apex_test[0]
        native_at = next(
            (
                i
                for i, branch in enumerate(chain)
                if i != apex_at
                and (found := compared(branch)) is not None
                and found[0] == subject
                and "apex" not in str(found[1].evaluated_value).lower()
                and any(w in _code(self.module, branch.body) for w in ("autocast", "Scaler"))
            ),
            None,
        )
        if native_at is None:
            return False
        others = [x for x in holder.body.body if x is not statement]
        if any(n.value in self.bound for x in others for n in self._subtree(x)
               if isinstance(n, cst.Name)):  # fmt: skip
            return False
        first, second = sorted((apex_at, native_at))
        listed = ", ".join(_code(self.module, compared(chain[i])[1]) for i in (first, second))
        test = cst.parse_expression(f"{subject} in ({listed})")

        def rebuild(u: cst.If) -> cst.If:
            branches = [u]
            while isinstance(branches[-1].orelse, cst.If):
                branches.append(branches[-1].orelse)
            tail = branches[-1].orelse
            kept = [
                b.with_changes(test=test) if i == native_at else b
                for i, b in enumerate(branches)
                if i != apex_at
            ]
            node = tail
            for branch in reversed(kept):
                node = branch.with_changes(orelse=node)
            return node.with_changes(leading_lines=u.leading_lines)

        self.plan.edits[root] = rebuild
        values = [compared(holder)[1], compared(chain[native_at])[1]]
        self.plan.summary = (
            "apex.amp beside native AMP can be rewritten to native AMP alone: the apex branch "
            "goes, the native one (autocast + GradScaler) takes its place"
        )
        self.plan.notes.append(
            f"the apex branch (line {self.line(holder)}) goes and "
            f"`{subject} == {_code(self.module, values[0])}` runs the native branch, apex O1's "
            "native equivalent (behaviour change: what it did besides `amp.initialize` there, "
            "such as its own scaler object, goes with it; checkpoints saved under apex hold "
            "its loss-scale format: convert them with `ampmigrate convert-checkpoint`)"
        )
        return True

    def _siblings(self, role: str | None) -> None:
        """A module this file imports (directly or through others) that calls apex amp without
        initializing it shares this file's amp state (a checkpoint module saving
        ``amp.state_dict()``): migrating this file alone leaves it calling apex, which is gone
        or uninitialized then. The whole component is migrated or none of it."""
        if self.path is None:
            return
        other = self.link.callee if role == "caller" else None
        folder = os.path.dirname(os.path.abspath(self.path))
        self.siblings = apex_siblings(self.path)
        for sibling in self.siblings:
            if sibling.path == other:
                continue
            shown = os.path.relpath(sibling.path, folder)
            via = os.path.relpath(sibling.importer, folder)
            if sibling.member in SUPPORTED:
                how = (
                    "migrate the two together (the GradScaler passed there, "
                    "`scaler.state_dict()` for `amp.state_dict()`) or neither"
                )
            else:  # a cast helper: no scaler involved, its native form is AMP301's
                how = f"replace its `amp.{sibling.member}` first ({no_rewrite(sibling.member)})"
            self.problem(
                self.plan.anchor,
                f"{shown} (imported by {via} at line {sibling.import_line}) calls "
                f"`amp.{sibling.member}` at its line {sibling.line} and does not initialize "
                "amp: it relies on the amp state this file sets up and would still call apex "
                f"after this file alone were migrated; {how}",
            )

    def _broken(self) -> str:
        return (
            f"this file and {self.link.other(self.role)} (`{self.link.function}` and the "
            "`amp.initialize` that feeds it) can only be rewritten together, and they are not: "
            f"{self.link.broken}"
        )

    def _linked_setup(self) -> _Setup | None:
        """The training function of a pair: it gets a ``scaler`` parameter, which the
        initializing module passes (``_pass_to_linked`` there, in the same run)."""
        function = next(
            (
                s
                for s in self.module.body
                if isinstance(s, cst.FunctionDef) and s.name.value == self.link.function
            ),
            None,
        )
        if function is None or self.free_name("scaler") != "scaler":
            self.problem(
                self.plan.anchor,
                f"`{self.link.function}` cannot take a new `scaler` parameter (the name is in "
                "use here): pass the GradScaler by hand",
            )
            return None
        self.name = "scaler"
        self.threaded.add(function)
        self.plan.edits[function.params] = self._add_parameter
        self.plan.notes.append(
            f"`{self.link.function}` gets a `scaler` parameter, passed by "
            f"{self.link.other(self.role)} in the same run"
        )
        return _Setup(function, function, {self.link.model}, None, by_scaler=True)

    def _pass_to_linked(self, setup: _Setup, init: cst.Call) -> None:
        """The initializing side of a pair: pass the GradScaler at each call of the training
        function (the pre-pass counted them; a different count here blocks)."""
        calls = [
            n
            for n in self._subtree(setup.home)
            if isinstance(n, cst.Call)
            and self.order[id(n)] > self.order[id(setup.statement)]
            and _code(self.module, n.func) == self.link.spelling
        ]
        if len(calls) != self.link.calls:
            self.problem(init, self._scaled_elsewhere(init))
            return
        for call in calls:  # the training function's parameter is `scaler` (_linked_setup)
            self.plan.edits[call] = functools.partial(self._pass_scaler, keyword="scaler")
        self.plan.notes.append(
            f"the GradScaler is passed to `{self.link.function}` "
            f"({self.link.other(self.role)}), which is rewritten in the same run"
        )

    def _no_initialize(self, calls: dict[str, list[cst.Call]]) -> None:
        """A module that only uses the scaler (a checkpoint helper, a ``do_train`` called from
        another file): the rewrite needs the GradScaler passed in; say exactly where."""
        for member, group in calls.items():
            for call in group:
                function = self.function(call)
                where = (
                    f"`{function.name.value}`"
                    if isinstance(function, cst.FunctionDef)
                    else "module-level code"
                )
                self.problem(call, without_initialize(where, member))

    # -- imports and availability checks -------------------------------------------------------
    def _imports(self) -> None:
        """Remove ``from apex import amp`` / ``import apex``, and a try/except that only
        guarded them (keeping assignments like ``has_apex = True``: native AMP is always there)."""
        lines: list[cst.BaseStatement] = []
        for node in self.nodes:
            if isinstance(node, cst.ImportFrom) and node.module is not None:
                module = _code(self.module, node.module)
                names = [] if isinstance(node.names, cst.ImportStar) else node.names
                only_amp = module == "apex" and [a.evaluated_name for a in names] == ["amp"]
                if only_amp or module.startswith("apex.amp"):
                    lines.append(self.statement(node))
                    self.bound |= {a.evaluated_alias or a.evaluated_name for a in names}
                elif (
                    not node.relative
                    and module.partition(".")[0] == "apex"
                    and module.partition(".")[2].partition(".")[0] in NOT_PRECISION
                ):  # apex's own `apex.optimizers`, not a project module of that name
                    self._stays(f"from {module} import ...")
                elif module == "apex" and {a.evaluated_name for a in names} <= {
                    "amp",
                    *NOT_PRECISION,
                }:  # `from apex import amp, optimizers`: amp goes, the others stay
                    kept = [a for a in names if a.evaluated_name != "amp"]
                    self.bound |= {
                        a.evaluated_alias or a.evaluated_name for a in names if a not in kept
                    }
                    listed = ", ".join(a.evaluated_name for a in kept)
                    self._stays(f"from apex import {listed}")
                    if len(kept) < len(names):
                        last = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                        self.plan.edits[node] = lambda u, k=[*kept[:-1], last]: u.with_changes(
                            names=k, lpar=None, rpar=None
                        )
                elif module == "apex" or module.startswith("apex."):
                    listed = ", ".join(a.evaluated_name for a in names) or "*"
                    self.problem(node, needs_apex(module, listed))
            elif isinstance(node, cst.Import):
                names = [_code(self.module, a.name) for a in node.names]
                if any(n == "apex" or n.startswith("apex.") for n in names):
                    if all(n in ("apex", "apex.amp") for n in names):
                        lines.append(self.statement(node))
                        self.bound |= {
                            a.evaluated_alias or _code(self.module, a.name).split(".")[0]
                            for a in node.names
                        }
                    else:
                        self.problem(node, BESIDES_AMP)
        guarded: dict[cst.Try, list[cst.BaseStatement]] = {}
        for line in lines:
            try_node = self.parent(self.parent(line))
            if isinstance(try_node, cst.Try) and self.parent(line) is try_node.body:
                guarded.setdefault(try_node, []).append(line)
            else:
                self._remove_statement(line)
        for try_node, imports in guarded.items():
            self._remove_guard(try_node, imports)

    def _stays(self, what: str) -> None:
        self.plan.notes.append(
            f"`{what}` stays: it is not mixed precision, and runs with torch.amp as it ran with "
            "apex.amp (apex stays a dependency for it)"
        )

    def _remove_guard(self, try_node: cst.Try, imports: list[cst.BaseStatement]) -> None:
        if not self._guard_only(try_node, imports):
            self.problem(try_node, GUARD_DOES_MORE)
            return
        kept = [s for s in try_node.body.body if s not in imports]
        if any(_imports_something(s) for s in kept):
            # the guard still guards those imports (`from apex.parallel import ...`): dropping it
            # would make a program that ran without apex fail at import; only amp's import goes
            for statement in imports:
                self._remove_statement(statement)
            return
        self.dropped.add(id(try_node))
        if try_node.orelse is not None:
            kept += list(try_node.orelse.body.body)
        if kept:
            first = kept[0].with_changes(leading_lines=try_node.leading_lines)
            self.plan.edits[try_node] = lambda _u, k=[first, *kept[1:]]: cst.FlattenSentinel(k)
        else:
            self._remove_statement(try_node)

    def _guard_only(self, node: cst.Try, imports: list[cst.BaseStatement]) -> bool:
        """Only the import and flags in the ``try``, handlers for import errors (or bare) that
        bind nothing the ``try`` does not (``amp = None``, ``has_apex = False``, a print)."""
        if node.finalbody is not None:
            return False
        body = [s for s in node.body.body if s not in imports]
        if node.orelse is not None:
            body += list(node.orelse.body.body)
        if not all(isinstance(s, cst.SimpleStatementLine) for s in body):
            return False
        located = self.block_of(node)
        before = _statements(located[0])[: located[1]] if located else []
        bound = {n for s in [*before, *body] for n in self.facts(s).assigned} | {"amp", "apex"}
        for handler in node.handlers:
            kinds = handler.type
            names = kinds.elements if isinstance(kinds, cst.Tuple) else [kinds] if kinds else []
            if any(
                _code(self.module, n.value if isinstance(n, cst.Element) else n).rsplit(".", 1)[-1]
                not in IMPORT_ERRORS
                for n in names
            ):
                return False
            statements = list(handler.body.body)
            if not all(isinstance(s, cst.SimpleStatementLine) for s in statements):
                return False
            if {n for s in statements for n in self.facts(s).assigned} - bound:
                return False
        return True

    def _remove_statement(self, statement: cst.BaseStatement) -> None:
        """Delete ``statement``; when that empties its block, delete the ``if`` around it too
        (a test without calls), or leave ``pass`` (never an empty block)."""
        self.removed.add(statement)
        located = self.block_of(statement)
        if located is not None:
            block, _ = located
            left = [s for s in _statements(block) if s not in self.removed]
            owner = self.owner(block)
            if not left and not isinstance(block, cst.Module):
                if (
                    isinstance(owner, cst.If)
                    and owner.orelse is None
                    and owner.body is block
                    and not self.facts(owner.test).calls
                    and self.block_of(owner) is not None
                ):
                    self.plan.edits[statement] = lambda _u: cst.RemoveFromParent()
                    self._remove_statement(owner)
                    return
                self.plan.edits[statement] = lambda _u: cst.parse_statement("pass\n")
                return
        self.plan.edits[statement] = lambda _u: cst.RemoveFromParent()

    def _values(self, calls: dict[str, list[cst.Call]]) -> None:
        """``amp`` used other than by a supported call: availability checks fold away
        (``amp is not None`` is true now); anything else blocks."""
        funcs = {id(c.func) for group in calls.values() for c in group}
        for node in self.nodes:
            if isinstance(node, cst.Name | cst.Attribute) and id(node) not in funcs:
                if isinstance(self.parent(node), cst.Attribute):
                    continue  # part of a longer name, judged there
                if isinstance(self.parent(node), cst.ImportAlias | cst.AsName):
                    continue
                if any(id(a) in self.dropped for a in self.ancestors(node)):
                    continue
                if self._probe(node):
                    continue
                if APEX in self.qualified(node) and not self._in_import(node):
                    self._guard(node)

    def _probe(self, node: cst.CSTNode) -> bool:
        """A feature probe of the amp module for a member the rewrite provides
        (``'load_state_dict' in amp.__dict__``, ``hasattr(amp, "state_dict")``, written for
        apex releases without it): true now, folded."""
        parent = self.parent(node)
        if f"{APEX}.__dict__" in self.qualified(node) and isinstance(parent, cst.ComparisonTarget):
            comparison = self.parent(parent)
            if (
                isinstance(parent.operator, cst.In | cst.NotIn)
                and len(comparison.comparisons) == 1
                and isinstance(comparison.left, cst.SimpleString)
                and comparison.left.evaluated_value in SUPPORTED
            ):
                self._fold(comparison, isinstance(parent.operator, cst.In))
                return True
        call = self.parent(parent) if isinstance(parent, cst.Arg) else None
        if (
            APEX in self.qualified(node)
            and isinstance(call, cst.Call)
            and isinstance(call.func, cst.Name)
            and call.func.value == "hasattr"
            and len(call.args) == 2
            and call.args[0] is parent
            and isinstance(call.args[1].value, cst.SimpleString)
            and call.args[1].value.evaluated_value in SUPPORTED
        ):
            self._fold(call, True)
            return True
        return False

    def _guard(self, node: cst.CSTNode) -> None:
        parent = self.parent(node)
        expr: cst.CSTNode = node
        value = True  # `amp` itself is truthy now
        if isinstance(parent, cst.Comparison) and parent.left is node:
            target = parent.comparisons[0] if len(parent.comparisons) == 1 else None
            if (
                target is not None
                and isinstance(target.operator, cst.Is | cst.IsNot)
                and isinstance(target.comparator, cst.Name)
                and target.comparator.value == "None"
            ):
                expr, value = parent, isinstance(target.operator, cst.IsNot)
            else:
                parent = None
        elif not isinstance(
            parent, cst.If | cst.Assert | cst.BooleanOperation | cst.UnaryOperation
        ):
            parent = None
        if parent is None:
            arg = self.parent(node)
            call = self.parent(arg) if isinstance(arg, cst.Arg) else None
            callee = _code(self.module, call.func) if isinstance(call, cst.Call) else None
            self.problem(node, used_as_value(_code(self.module, node), callee))
            return
        self._fold(expr, value)

    def _fold(self, expr: cst.CSTNode, value: bool) -> None:
        """An availability test ``expr`` whose value is now ``value``, folded into what holds
        it (``x and True`` is ``x``, an ``if`` keeps the branch that runs)."""
        while True:
            parent = self.parent(expr)
            if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not):
                expr, value = parent, not value
            elif isinstance(parent, cst.BooleanOperation):
                neutral = value == isinstance(parent.operator, cst.And)
                if neutral:  # `x and True` is `x` (the updated `x`: it may hold edits)
                    first = parent.left is expr

                    def keep(u: cst.CSTNode, first: bool = first, p: cst.CSTNode = parent):
                        o = u.right if first else u.left
                        return o.with_changes(lpar=p.lpar, rpar=p.rpar) if p.lpar else o

                    self.plan.edits[parent] = keep
                    return
                expr = parent
            else:
                break
        if isinstance(parent, cst.If) and parent.test is expr and self._is_elif(parent):
            # `elif x:` becomes `else:` (true) or gives way to what follows it (false)
            self.plan.edits[parent] = lambda u, v=value: (
                cst.Else(body=u.body) if v else u.orelse or cst.RemoveFromParent()
            )
        elif isinstance(parent, cst.If) and parent.test is expr:
            if value:
                self.plan.edits[parent] = lambda u: cst.FlattenSentinel(
                    [
                        u.body.body[0].with_changes(leading_lines=u.leading_lines),
                        *u.body.body[1:],
                    ]
                )
            elif isinstance(parent.orelse, cst.Else):
                self.plan.edits[parent] = lambda u: cst.FlattenSentinel(
                    [
                        u.orelse.body.body[0].with_changes(leading_lines=u.leading_lines),
                        *u.orelse.body.body[1:],
                    ]
                )
            elif isinstance(parent.orelse, cst.If):
                self.plan.edits[parent] = lambda u: u.orelse.with_changes(
                    leading_lines=u.leading_lines
                )
            else:
                self._remove_statement(parent)
        elif isinstance(parent, cst.Assert) and parent.test is expr and value:
            self._remove_statement(self.statement(parent))
        elif isinstance(parent, cst.Assert):
            self.problem(parent, ASSERTS_MISSING)
        else:
            self.plan.edits[expr] = lambda _u, v=value: cst.Name(str(v))

    def _is_elif(self, node: cst.If) -> bool:
        parent = self.parent(node)
        return isinstance(parent, cst.If) and parent.orelse is node

    def _in_import(self, node: cst.CSTNode) -> bool:
        return any(isinstance(a, cst.Import | cst.ImportFrom) for a in self.ancestors(node))

    # -- initialize ---------------------------------------------------------------------------
    def _initialize(self, init: cst.Call) -> _Setup | None:
        """``model, opt = amp.initialize(model, opt, ...)`` -> ``scaler = GradScaler(...)``.
        Problems that do not stop the rest of the plan are only recorded."""
        args = {a.keyword.value: a.value for a in init.args if a.keyword}
        positional = [a.value for a in init.args if not a.keyword and not a.star]
        if any(a.star for a in init.args):
            self.problem(init, "`amp.initialize` gets `*args`/`**kwargs`: spell them out")
            return None
        models = args.get("models", positional[0] if positional else None)
        optimizer = args.get("optimizers", positional[1] if len(positional) > 1 else None)
        level = args.get("opt_level")
        if optimizer is None or len(positional) > 2:
            self.problem(
                init,
                "`amp.initialize` without an optimizer (inference only): nothing is scaled, so "
                "no GradScaler; delete it and run the forward under "
                '`torch.amp.autocast("cuda", dtype=torch.float16)` (O1), or call `model.half()` '
                "and feed half inputs (O2/O3)",
            )
            return None
        unknown = sorted(set(args) - _KNOWN_KWARGS)
        if unknown:
            listed = ", ".join(f"`{k}`" for k in unknown)
            self.problem(init, f"`amp.initialize` sets {listed}, which O1 cannot express")
        if "num_losses" in args:
            self.plan.notes.append(
                f"behaviour change: apex kept one loss scale per loss (`num_losses="
                f"{_code(self.module, args['num_losses'])}`, `loss_id=`); the one GradScaler "
                "keeps one scale for all of them, so an overflow in any loss lowers it for all "
                "(each optimizer's step is still skipped only when its own gradients overflow)"
            )
        if isinstance(level, cst.SimpleString):
            if level.evaluated_value != "O1":
                self.problem(
                    init,
                    f"opt_level {level.evaluated_value}: only O1 (autocast + GradScaler) exists "
                    "in torch.amp; O2/O3 cast the model, which native AMP does not do (switch "
                    "to O1 first if that is acceptable)",
                )
        elif level is None:
            self.problem(
                init,
                "`amp.initialize` without opt_level (apex's default O1 is implicit here; write "
                '`opt_level="O1"` to confirm)',
            )
        else:
            blockers = len(self.plan.problems)
            switch = self._level_switch(level, init)
            if switch is None and len(self.plan.problems) == blockers:
                switch = self._level_choices(level, init)
            if switch is not None and switch is not True and "enabled" not in args:
                args["enabled"] = switch
            elif switch is not None and switch is not True:
                args["enabled"] = cst.parse_expression(
                    f"({_code(self.module, args['enabled'])}) and {_code(self.module, switch)}"
                )
        scale = args.get("loss_scale")
        if scale is not None and not (
            isinstance(scale, cst.SimpleString) and scale.evaluated_value == "dynamic"
        ):
            self.problem(init, "a static `loss_scale`: GradScaler is always dynamic")
        statement = self.statement(init)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        # `model, opt = amp.initialize(model.cuda(), opt)`: initialize returns the model it
        # is given, so the rewrite keeps `model, opt = model.cuda(), opt` (_rebind)
        assigned = isinstance(small, cst.Assign) and len(small.targets) == 1 and small.value is init
        if isinstance(models, cst.List | cst.Tuple):
            self.problem(
                init,
                "lists of models in `amp.initialize`: one GradScaler steps each optimizer "
                "(`scaler.step(o)` for each, one `scaler.update()`); place them by hand",
            )
            return None
        if not isinstance(models, cst.Name | cst.Attribute) and not assigned:
            self.problem(
                init,
                f"`amp.initialize` is given the model `{_code(self.module, models)}` and its "
                "result is not assigned: assign it (`model, optimizer = amp.initialize(...)`)",
            )
            return None
        if not _optimizers(optimizer):
            self.problem(
                init,
                f"the optimizer `{_code(self.module, optimizer)}` of `amp.initialize` is not a "
                "name or an attribute: bind it to a name first",
            )
            return None
        if small is None or len(statement.body) != 1 or getattr(small, "value", None) is not init:
            self.problem(init, "`amp.initialize` is not a statement of its own")
            return None
        holder = self.parent(self.parent(statement))
        condition = None
        if isinstance(holder, cst.If) and re.fullmatch(
            r"__name__ *== *['\"]__main__['\"]", _code(self.module, holder.test)
        ):
            holder = None  # the script's main block: not a condition on mixed precision
        if isinstance(holder, cst.If):
            # an `else:` stays as it is (the scaler is built before the `if`, disabled there)
            # while the `if` keeps a body; an `elif` chain is not taken apart
            kept = [s for s in holder.body.body if s is not statement]
            if (
                not (holder.orelse is None or (isinstance(holder.orelse, cst.Else) and kept))
                or self.block_of(holder) is None
            ):
                self.problem(init, "`amp.initialize` sits in an if/else or elif")
                return None
            # with the availability checks folded (`amp is not None and x` is `x`)
            condition = _code(self.module, holder.test.visit(ReplaceNodes(self.plan.edits)))
        elif not (
            holder is None
            or isinstance(holder, cst.FunctionDef)
            or self.parent(statement) is self.module
        ):
            self.problem(init, "`amp.initialize` is nested in a block other than an `if`")
            return None
        enabled = args.get("enabled")
        if enabled is not None:
            text = _code(self.module, enabled)
            condition = f"({condition}) and ({text})" if condition else text
        level_text = _code(self.module, level) if level is not None else None
        if condition is not None and level_text is not None and level_text in condition:
            tests = [holder.test if isinstance(holder, cst.If) else None, enabled]
            if any(_code(self.module, t) == level_text for t in tests if t is not None):
                # `if args.fp16:` where args.fp16 is the opt level ("" or "O1"): autocast
                # takes only a bool
                condition = f"bool({condition})"
        name = self.free_name("scaler")
        if name is None:
            self.problem(init, "no free name for the GradScaler")
            return None
        self.name = name
        targets = set()
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
            elements = target.elements if isinstance(target, cst.Tuple | cst.List) else [target]
            if elements:
                first = elements[0]
                first = first.value if isinstance(first, cst.Element) else first
                targets.add(_code(self.module, first))
        setup = _Setup(
            statement, self.function(init), {_code(self.module, models), *targets}, condition
        )
        if (
            isinstance(holder, cst.If)
            and enabled is not None
            and self._set_in(enabled, holder, statement)
        ):
            # the switch is computed inside the `if`: the GradScaler goes where initialize was,
            # a disabled one before the `if` (the other path), and autocast asks the scaler
            setup.condition = _code(self.module, enabled)
            self._place_scaler(setup, small, models, optimizer, None, enabled)
            self._disabled_before(setup, holder)
            setup.condition, setup.by_scaler = None, True
            return setup
        self._place_scaler(setup, small, models, optimizer, holder, enabled)
        return setup

    def _set_in(self, expression: cst.CSTNode, holder: cst.If, statement: cst.CSTNode) -> bool:
        """A name ``expression`` reads is assigned in ``holder``'s body before ``statement``."""
        read = {n.value for n in self._subtree(expression) if isinstance(n, cst.Name)}
        before = itertools.takewhile(lambda s: s is not statement, holder.body.body)
        return any(self.facts(s).assigned & read for s in before)

    def _disabled_before(self, setup: _Setup, holder: cst.If) -> None:
        def build(u: cst.CSTNode) -> cst.FlattenSentinel:
            target = self.access(setup.home) or self.name
            line = cst.parse_statement(f'{target} = torch.amp.GradScaler("cuda", enabled=False)\n')
            return cst.FlattenSentinel(
                [line.with_changes(leading_lines=u.leading_lines), u.with_changes(leading_lines=())]
            )

        previous = self.plan.edits.get(holder)
        self.plan.edits[holder] = build if previous is None else lambda u: build(previous(u))

    def _level_switch(self, level: cst.CSTNode, init: cst.Call) -> cst.BaseExpression | None:
        """``level = "O1" if x else "O0"``, assigned once before ``initialize``: O0 is apex
        switched off, so the GradScaler and autocast are ``enabled=x`` (and the assignment goes
        when only ``initialize`` read it), else ``enabled=level == "O1"``. A branch naming
        another level blocks; anything else is None (taken as O1, with a note)."""
        if not isinstance(level, cst.Name):
            return None
        function = self.function(init)
        refs = [
            n
            for n in self._subtree(function)
            if isinstance(n, cst.Name)
            and n.value == level.value
            and not (isinstance(self.parent(n), cst.Arg) and self.parent(n).keyword is n)
            and not (isinstance(self.parent(n), cst.Attribute) and self.parent(n).attr is n)
        ]
        stores = [n for n in refs if not self._read(n)]
        assign = self.parent(self.parent(stores[0])) if len(stores) == 1 else None
        if not (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and assign.targets[0].target is stores[0]
            and isinstance(assign.value, cst.IfExp)
            and self.order[id(assign)] < self.order[id(init)]
        ):
            return None
        branches = [assign.value.body, assign.value.orelse]
        levels = [b.evaluated_value if isinstance(b, cst.SimpleString) else None for b in branches]
        if None in levels:
            return None
        other = [v for v in levels if v not in ("O0", "O1")]
        if other:
            self.problem(
                assign,
                f'opt_level `{level.value}` may be "{other[0]}": only O1 (autocast + '
                "GradScaler) exists in torch.amp; O2/O3 cast the model, which native AMP does "
                "not do",
            )
            return None
        if set(levels) != {"O0", "O1"}:
            return None  # one level either way: the plain reading (a note) says it
        reads = [n for n in refs if n is not stores[0]]
        if len(reads) != 1 or not self.within(reads[0], init):
            return cst.parse_expression(f'{level.value} == "O1"')  # the name stays, read later
        self._remove_statement(self.statement(assign))
        if levels == ["O1", "O0"]:
            return assign.value.test
        return cst.UnaryOperation(
            cst.Not(), cst.parse_expression(f"({_code(self.module, assign.value.test)})")
        )

    def _level_choices(
        self, level: cst.CSTNode, init: cst.Call
    ) -> cst.BaseExpression | bool | None:
        """An opt level read from a flag is O1 only where the flag cannot say otherwise: its
        ``add_argument`` in this file has ``choices`` within O0/O1 and nothing assigns it
        again. O0 is apex switched off, so a possible O0 that no ``if <level> != "O0":``
        around ``initialize`` excludes gives ``enabled=<level> == "O1"``. Anything else
        (a config value, a parameter, a flag that accepts O2/O3) is not provably O1: O2/O3 cast
        the model and keep fp32 master weights, which torch.amp cannot express, so a rewrite
        "as O1" would change those runs. True: O1 for sure; None: refused (said here)."""
        spelled = _code(self.module, level)
        attr = level.attr.value if isinstance(level, cst.Attribute) else None
        flag = None
        if attr is not None:
            for node in self.nodes:
                if isinstance(node, cst.Call) and _is_call_of(node, "add_argument"):
                    options = [a.value for a in node.args if not a.keyword]
                    names = [o.evaluated_value for o in options
                             if isinstance(o, cst.SimpleString)]  # fmt: skip
                    dest = _argument(node, "dest", 99)
                    long = next((n for n in names if n.startswith("--")), None)
                    derived = (
                        dest.evaluated_value if isinstance(dest, cst.SimpleString)
                        else long[2:].replace("-", "_") if long else None
                    )  # fmt: skip
                    if derived == attr:
                        flag = (long or attr, node)
            reassigned = any(
                isinstance(n, cst.AssignTarget | cst.AugAssign)
                and isinstance(n.target, cst.Attribute)
                and n.target.attr.value == attr
                for n in self.nodes
            )
        levels = None
        if flag is not None and not reassigned:
            choices = _argument(flag[1], "choices", 99)
            elements = (
                choices.elements if isinstance(choices, cst.List | cst.Tuple | cst.Set) else ()
            )
            values = {e.value.evaluated_value for e in elements
                      if isinstance(e.value, cst.SimpleString)}  # fmt: skip
            if elements and len(values) == len(elements) and values <= {"O0", "O1"}:
                levels = values
        if levels is None:
            if flag is not None:
                origin = (
                    f"the flag `{flag[0]}`, which accepts any level (no `choices` within O0/O1)"
                )
                if reassigned:
                    origin = f"the flag `{flag[0]}`, reassigned in this file"
            elif isinstance(level, cst.Name) and any(
                isinstance(p, cst.Param) and p.name.value == level.value for p in self.nodes
            ):
                origin = f"the parameter `{level.value}`: a caller may pass any level"
            elif isinstance(level, cst.Name):
                origin = f"`{spelled}`, which this file does not fix to O0/O1"
            else:
                origin = f"`{spelled}`, set outside this file (a config, an argument)"
            branches = [
                n for n in self.nodes if isinstance(n, cst.Comparison)
                and _code(self.module, n.left) == spelled
                and any(isinstance(c.comparator, cst.SimpleString)
                        and c.comparator.evaluated_value in ("O2", "O3") for c in n.comparisons)
            ]  # fmt: skip
            also = (
                f"; this file itself branches on `{_code(self.module, branches[0])}` at line "
                f"{self.line(branches[0])}"
                if branches
                else ""
            )
            self.problem(
                init,
                f"opt_level `{spelled}` is not provably O1: it comes from {origin}{also}; O2/O3 "
                "cast the model and keep fp32 master weights, which torch.amp cannot express, "
                'so rewriting it as O1 changes those runs; fix the level (`opt_level="O1"`, or '
                '`choices=["O0", "O1"]` on its flag) to allow the rewrite',
            )
            return None
        guards = [a.test for a in self.ancestors(init) if isinstance(a, cst.If)
                  and self.within(init, a.body)]  # fmt: skip
        excluded = any(
            isinstance(t, cst.Comparison) and _code(self.module, t.left) == spelled
            and len(t.comparisons) == 1 and isinstance(t.comparisons[0].operator, cst.NotEqual)
            and isinstance(t.comparisons[0].comparator, cst.SimpleString)
            and t.comparisons[0].comparator.evaluated_value == "O0"
            for t in guards
        )  # fmt: skip
        if levels == {"O1"} or excluded:
            return True
        return cst.parse_expression(f'{spelled} == "O1"')

    def _read(self, name: cst.Name) -> bool:
        """``name`` is not the target of an assignment (a plain read, a call argument...)."""
        parent = self.parent(name)
        return not isinstance(
            parent,
            cst.AssignTarget | cst.AnnAssign | cst.AugAssign | cst.For | cst.Param | cst.Element
            | cst.AsName,
        )  # fmt: skip

    def _place_scaler(self, setup: _Setup, small, models, optimizer, holder, switch) -> None:
        """The GradScaler goes where ``initialize`` was, or earlier when the optimizer's state
        is restored before it (see ``_early``); its line is built at apply time, once the plan
        knows whether it is ``self.scaler``."""
        statement = setup.statement
        enabled = f", enabled={setup.condition}" if setup.condition else ""

        def scaler_line(leading) -> cst.SimpleStatementLine:
            target = self.access(setup.home) or self.name
            code = f'{target} = torch.amp.GradScaler("cuda"{enabled})\n'
            return cst.parse_statement(code).with_changes(leading_lines=leading)

        assigned = self._rebind(small, models, optimizer)
        tests = [holder.test if isinstance(holder, cst.If) else None, switch]
        anchor = self._early(setup, _code(self.module, optimizer), holder, tests)
        if anchor is not None:
            self.early = anchor
            self.plan.edits[anchor] = lambda u: cst.FlattenSentinel(
                [scaler_line(anchor.leading_lines), u.with_changes(leading_lines=())]
            )
            self.plan.edits[statement] = lambda _u: (
                cst.FlattenSentinel(assigned) if assigned else cst.RemoveFromParent()
            )
            rest = [s for s in getattr(holder, "body", cst.IndentedBlock([])).body
                    if s is not statement and s not in self.removed]  # fmt: skip
            if isinstance(holder, cst.If) and not rest and not assigned:
                self.plan.edits[holder] = lambda _u: cst.RemoveFromParent()
            return
        if not isinstance(holder, cst.If):
            self.plan.edits[statement] = lambda _u: cst.FlattenSentinel(
                [scaler_line(statement.leading_lines), *assigned]
            )
            return
        # The scaler must exist on both paths: build it before the `if`, disabled when the
        # condition is false, and drop the initialize (and the if, when nothing is left).
        self.plan.edits[statement] = lambda _u: (
            cst.FlattenSentinel(assigned) if assigned else cst.RemoveFromParent()
        )
        rest = [s for s in holder.body.body if s is not statement and s not in self.removed]
        if rest or assigned:
            self.plan.edits[holder] = lambda u: cst.FlattenSentinel(
                [scaler_line(holder.leading_lines), u.with_changes(leading_lines=())]
            )
        else:
            self.plan.edits[holder] = lambda _u: scaler_line(holder.leading_lines)

    def _rebind(self, small, models, optimizer) -> list[cst.SimpleStatementLine]:
        """``a, b = amp.initialize(m, o)``: keep ``a, b = m, o`` unless the names are the same."""
        if not isinstance(small, cst.Assign):
            return []
        targets = _code(self.module, small.targets[0].target)
        values = f"{_code(self.module, models)}, {_code(self.module, optimizer)}"
        if len(small.targets) != 1 or targets.replace(" ", "").strip("()") in (
            values.replace(" ", ""),
            _code(self.module, models),
        ):
            return []
        single = "," not in targets
        source = _code(self.module, models) if single else values
        target = small.targets[0].target
        if (
            isinstance(target, cst.Tuple)
            and len(target.elements) == 2
            and _code(self.module, target.elements[0].value) == _code(self.module, models)
        ):  # `model, [a, b] = amp.initialize(model, [...])`: only the optimizers are rebound
            targets = _code(self.module, target.elements[1].value)
            source = _code(self.module, optimizer)
        elif (
            isinstance(target, cst.Tuple)
            and len(target.elements) == 2
            and _code(self.module, target.elements[1].value) == _code(self.module, optimizer)
        ):  # `model, opt = amp.initialize(model.cuda(), opt)`: only the model is rebound
            targets = _code(self.module, target.elements[0].value)
            source = _code(self.module, models)
        return [cst.parse_statement(f"{targets} = {source}\n")]

    def _early(self, setup: _Setup, opt: str, holder, tests: list) -> cst.BaseStatement | None:
        """The statement of the function holding ``initialize`` that first restores ``opt``'s
        state before it (yolo, flowtron): the GradScaler is created right before it instead, so
        its state can be restored beside the optimizer's. Only when that is exact: the
        ``enabled`` condition has the same value there (plain names that nothing rebinds in
        between), and ``initialize`` is a statement of that function or of one ``if`` in it.
        Otherwise ``self.late`` says why and the restore stays a blocker."""
        block = setup.home.body if isinstance(setup.home, cst.FunctionDef) else self.module
        body = _statements(block) or []
        top = next((a for a in [setup.statement, *self.ancestors(setup.statement)]
                    if self.parent(a) is block), None)  # fmt: skip
        index = next((i for i, s in enumerate(body) if s is top), len(body))
        first = next((i for i in range(index) if self._restores(body[i], opt)), None)
        if first is None:
            return None
        where = f"line {self.line(body[first])}"
        if top is not setup.statement and top is not holder:
            self.late = "`amp.initialize` is nested deeper than one `if` of its function"
            return None
        if body[first] in self.plan.edits:
            self.late = f"{where} is rewritten itself"
            return None
        names = {"torch"}  # the GradScaler line reads `torch` and the condition
        for test in tests:
            for node in self._subtree(test) if test is not None else ():
                if isinstance(node, cst.Name):
                    names.add(node.value)
                elif isinstance(node, cst.BaseExpression) and not isinstance(
                    node, cst.BooleanOperation | cst.UnaryOperation | cst.Comparison
                    | cst.Integer | cst.SimpleString
                ):  # fmt: skip
                    self.late = (
                        f"the condition of `amp.initialize` reads `{_code(self.module, node)}`, "
                        f"which may change between {where} and it"
                    )
                    return None
        between = body[first:index]
        for node in self.nodes:
            declared = isinstance(node, cst.Global | cst.Nonlocal) and names & {
                n.name.value for n in node.names
            }
            if declared:
                self.late = (
                    f"`{sorted(declared)[0]}` (in the condition of `amp.initialize`) is declared "
                    f"`global`/`nonlocal` at line {self.line(node)}: a call may change it"
                )
                return None
            if (
                isinstance(node, cst.Del)
                and names & _targets(node.target)
                and any(self.within(node, s) for s in between)
            ):
                self.late = f"line {self.line(node)} deletes a name `amp.initialize` tests"
                return None
        scope = self.scopes.get(body[first])
        for name in sorted(names):
            for assignment in scope.assignments[name] if scope is not None else ():
                bound = getattr(assignment, "node", None)
                if bound is not None and any(self.within(bound, s) for s in between):
                    self.late = (
                        f"`{name}` (in the condition of `amp.initialize`) is assigned at line "
                        f"{self.line(bound)}, between {where} and it"
                    )
                    return None
        return body[first]

    def _restores(self, statement: cst.CSTNode, opt: str) -> bool:
        """``statement`` restores ``opt``'s state: itself, or by calling a module-level function
        of this file that does, given ``opt``."""
        functions = {s.name.value: s for s in self.module.body if isinstance(s, cst.FunctionDef)}

        def direct(node: cst.CSTNode) -> bool:
            return any(
                _is_call_of(n, "load_state_dict") and _code(self.module, n.func.value) == opt
                for n in self._subtree(node)
            )

        for node in self._subtree(statement):
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Name)
                and node.func.value in functions
                and any(_code(self.module, a.value) == opt for a in node.args)
                and direct(functions[node.func.value])
            ):
                return True
        return direct(statement)

    # -- where the scaler lives -----------------------------------------------------------------
    def _scope(self, setup: _Setup, uses: list[cst.Call]) -> None:
        home = self.home = setup.home
        if home is self.module:
            return
        outside = [u for u in uses if not self.within(u, home)]
        self.mode = "function"
        if not outside:
            return
        holder = self.parent(self.parent(home))
        if isinstance(holder, cst.ClassDef) and home.params.params:
            self.mode, self.cls = "class", holder
            for use in outside:
                if self.method_of(use, holder) is None:
                    self.problem(
                        use,
                        f"`amp` is used outside class `{holder.name.value}`, whose "
                        "`self.scaler` replaces `amp.initialize`: pass the GradScaler by hand",
                    )
            return
        pending: list[cst.FunctionDef] = []
        for use in outside:
            top = self.top_function(use)
            if top is None:
                self.problem(use, "`amp` is used in a class while `amp.initialize` is not")
            else:
                pending.append(top)
        saved = (dict(self.plan.edits), list(self.plan.problems), list(self.plan.notes))
        self._thread(pending, home)
        if len(self.plan.problems) > len(saved[1]) and self.parent(home) is self.module:
            # the functions that scale are not all reached from `home` with the scaler in hand:
            # the GradScaler becomes module state, as apex's amp state was process state
            self.plan.edits, self.plan.problems, self.plan.notes = saved
            self.threaded = set()
            self._global_scaler(setup)

    def _global_scaler(self, setup: _Setup) -> None:
        """A disabled module-level GradScaler before ``home``, which rebinds it (``global``)
        where ``initialize`` was; every function of the file reads it, and autocast asks it."""
        home, name = setup.home, self.name
        self.mode, setup.by_scaler, self.global_home = "module", True, home
        placeholder = cst.parse_statement(f'{name} = torch.amp.GradScaler("cuda", enabled=False)\n')
        declaration = cst.parse_statement(f"global {name}\n")
        before = self.plan.edits.get(home)

        def define(u: cst.FunctionDef) -> cst.FlattenSentinel:
            u = before(u) if before is not None else u
            line = placeholder.with_changes(leading_lines=u.leading_lines)
            return cst.FlattenSentinel([line, u.with_changes(leading_lines=[cst.EmptyLine()] * 2)])

        inner = self.plan.edits.get(home.body)

        def declare(u: cst.IndentedBlock) -> cst.IndentedBlock:
            u = inner(u) if inner is not None else u
            body = list(u.body)
            docstring = (
                bool(body)
                and isinstance(body[0], cst.SimpleStatementLine)
                and (
                    isinstance(body[0].body[0], cst.Expr)
                    and isinstance(body[0].body[0].value, cst.SimpleString | cst.ConcatenatedString)
                )
            )
            at = 1 if docstring else 0
            return u.with_changes(body=[*body[:at], declaration, *body[at:]])

        self.plan.edits[home] = define
        self.plan.edits[home.body] = declare
        self.plan.notes.append(
            f"apex's amp state was process-wide, and the functions that scale the loss are not "
            f"all called from `{home.name.value}` with the GradScaler in hand: it is module "
            f"state here, `{name}` (disabled until `{home.name.value}` creates it where "
            "`amp.initialize` was; `global` there), read by every function of this file"
        )

    def _thread(self, pending: list[cst.FunctionDef], home: cst.CSTNode | None) -> None:
        """Give each function in ``pending`` a scaler parameter and pass it at every call in
        the file, making the callers' functions take it too (up to ``home``)."""
        while pending:
            function = pending.pop()
            if function in self.threaded:
                continue
            self.threaded.add(function)
            for ref in self._references(function.name.value):
                call = self.parent(ref)
                if not (isinstance(call, cst.Call) and call.func is ref):
                    self.problem(ref, f"`{function.name.value}` is used as a value, so the "
                                 "GradScaler cannot be passed to it")  # fmt: skip
                    continue
                caller = self.function(call)
                if caller is self.module:
                    self.problem(call, f"`{function.name.value}` is called at module level, "
                                 "where there is no GradScaler")  # fmt: skip
                    continue
                if not self.within(caller, home):
                    top = self.top_function(caller)
                    if top is None:
                        self.problem(call, f"`{function.name.value}` is called from a method")
                        continue
                    pending.append(top)
                self.plan.edits[call] = self._pass_scaler
            self.plan.edits[function.params] = self._add_parameter
        for function in sorted(self.threaded, key=lambda f: self.order[id(f)]):
            note = (
                f"`{function.name.value}` gets a `{self.name}` parameter, passed at every call "
                "in this file (callers in other files must pass it too)"
            )
            if note not in self.plan.notes:
                self.plan.notes.append(note)

    def _references(self, name: str) -> Iterator[cst.Name]:
        for node in self.nodes:
            if not isinstance(node, cst.Name) or node.value != name:
                continue
            parent = self.parent(node)
            if (
                (isinstance(parent, cst.Attribute) and parent.attr is node)
                or (isinstance(parent, cst.Arg) and parent.keyword is node)
                or isinstance(parent, cst.FunctionDef | cst.Param | cst.ImportAlias)
            ):
                continue
            yield node

    def _pass_scaler(self, call: cst.Call, keyword: str | None = None) -> cst.Call:
        """``call`` with ``<keyword>=<the scaler>`` appended (keyword: the scaler's own name)."""
        name = cst.Name(keyword or self.name)
        arg = cst.Arg(keyword=name, value=cst.Name(self.name), equal=_NO_SPACE)
        return call.with_changes(args=_appended(call.args, arg))

    def _add_parameter(self, params: cst.Parameters) -> cst.Parameters:
        """A plain last parameter; keyword-only after defaults or ``*args``."""
        new = cst.Param(cst.Name(self.name))
        plain = not any(p.default for p in params.params) and not isinstance(
            params.star_arg, cst.Param | cst.ParamStar
        )
        if plain and params.star_kwarg is None and not params.kwonly_params:
            return params.with_changes(params=_appended(params.params, new))
        star = params.star_arg if isinstance(params.star_arg, cst.Param) else cst.ParamStar()
        last = params.params[-1] if params.params else None
        if (
            isinstance(star, cst.ParamStar)
            and not params.kwonly_params
            and params.star_kwarg is None
            and last is not None
            and isinstance(last.comma, cst.Comma)
        ):  # one parameter per line, trailing comma: `*,` and the new one on lines of their own
            inner = params.params[-2].comma if len(params.params) > 1 else cst.Comma(
                whitespace_after=cst.SimpleWhitespace(" ")
            )  # fmt: skip
            return params.with_changes(
                params=[*params.params[:-1], last.with_changes(comma=inner)],
                star_arg=cst.ParamStar(comma=inner),
                kwonly_params=[new.with_changes(comma=last.comma)],
            )
        return params.with_changes(star_arg=star, kwonly_params=[*params.kwonly_params, new])

    # -- the backward and the step ----------------------------------------------------------
    def _scale_loss(self, call: cst.Call, setup: _Setup) -> None:
        statement = self.statement(call)
        function = self.function(call)
        access = self.access(function)
        if not isinstance(statement, cst.With) or len(statement.items) != 1:
            self.problem(call, "`amp.scale_loss` is not the only item of a `with`")
            return
        item = statement.items[0]
        if item.item is not call or item.asname is None:
            self.problem(call, "`amp.scale_loss` without `as name`")
            return
        alias = _code(self.module, item.asname.name)
        positional = [a.value for a in call.args if not a.keyword]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword}
        loss = keywords.get("loss", positional[0] if positional else None)
        optimizer = keywords.get("optimizers", positional[1] if len(positional) > 1 else None)
        extra = set(keywords) - {"loss", "optimizers", "delay_unscale", "loss_id"}
        if extra or len(positional) > 2:
            listed = ", ".join(f"`{k}`" for k in sorted(extra)) or "a third positional argument"
            self.problem(call, f"`amp.scale_loss` with {listed}: migrate this call by hand")
            return
        if not isinstance(loss, cst.Name):
            self.problem(
                call,
                "`amp.scale_loss` of an expression: assign the loss to a name first (`loss = ...`)",
            )
            if isinstance(optimizer, cst.Name | cst.Attribute) and access is not None:
                self._steps(_code(self.module, optimizer), access, function, call)  # all blockers
            return
        if not isinstance(optimizer, cst.Name | cst.Attribute):
            self.problem(
                call,
                "`amp.scale_loss` for several optimizers at once: after the backward, "
                "`scaler.step(o)` for each and one `scaler.update()`; place them by hand",
            )
            return
        suite = statement.body if isinstance(statement.body, cst.SimpleStatementSuite) else None
        if suite is not None:  # `with amp.scale_loss(...) as s: s.backward()` on one line
            first = cst.SimpleStatementLine(
                body=suite.body[:1], trailing_whitespace=suite.trailing_whitespace
            )
            body = [first, *suite.body[1:]]
        else:
            body = list(statement.body.body)
        first = body[0] if body else None
        backward = first.body[0] if isinstance(first, cst.SimpleStatementLine) else None
        if not (
            isinstance(backward, cst.Expr)
            and _is_call_of(backward.value, "backward")
            and _code(self.module, backward.value.func.value) == alias
        ) or any(alias in _code(self.module, s) for s in body[1:]):
            self.problem(call, "the `scale_loss` block does more than `backward()`")
            return
        if access is None:
            return  # _scope said why
        new_backward = backward.value.with_changes(
            func=backward.value.func.with_changes(
                value=cst.parse_expression(f"{access}.scale({loss.value})")
            )
        )
        head = first.with_changes(
            body=[backward.with_changes(value=new_backward)], leading_lines=statement.leading_lines
        )
        # the rest of the body as updated (it may hold other edits, e.g. a region)
        self.plan.edits[statement] = lambda u: cst.FlattenSentinel(
            [head] if suite is not None else [head, *u.body.body[1:]]
        )
        opt = _code(self.module, optimizer)
        self.scaled.setdefault((id(function), opt), []).append(statement)
        self._steps(opt, access, function, call)
        if function is setup.home and not setup.by_scaler:
            enabled = setup.condition
        else:  # another function: the condition's names may not exist there
            enabled = f"{access}.is_enabled()" if setup.condition or setup.by_scaler else None
        self.requests.append((statement, loss.value, function, enabled))

    def _steps(self, opt: str, access: str, function: cst.CSTNode, call: cst.Call) -> None:
        key = (id(function), opt)
        if key in self.steps:
            return
        found = self.steps[key] = []
        for node in self.nodes:
            if not (
                isinstance(node, cst.SimpleStatementLine)
                and len(node.body) == 1
                and isinstance(node.body[0], cst.Expr)
                and _is_call_of(node.body[0].value, "step")
                and _code(self.module, node.body[0].value.func.value) == opt
                and self.function(node) is function
            ):
                continue
            if node.body[0].value.args:
                self.problem(node, f"`{opt}.step(...)` with a closure")
                continue
            found.append(node)
            self.before_step[node] = []

            def build(_u, node=node):
                lines = [
                    *[s for make in self.before_step[node] for s in make()],
                    cst.parse_statement(f"{access}.step({opt})\n"),
                    cst.parse_statement(f"{access}.update()\n"),
                ]
                lines[0] = lines[0].with_changes(leading_lines=node.leading_lines)
                return cst.FlattenSentinel(lines)

            self.plan.edits[node] = build
        if not found:
            self.problem(
                call,
                f"no `{opt}.step()` statement in the function that scales the loss: scaled "
                "gradients must be stepped through `scaler.step`",
            )

    def _unscaled_steps(self) -> None:
        """apex ran a plain ``optimizer.step()`` when no scaled backward had happened since the
        last step (a NaN loss whose backward is skipped while the step keeps its gradient
        accumulation schedule); ``GradScaler.step`` raises there instead (``_scale is None``
        before the first ``scale``, "No inf checks were recorded" once ``zero_grad`` cleared the
        gradients). The rewrite is exact only where a backward runs on every path from the
        start of the loop iteration (or of the function) to the step."""
        for key, steps in self.steps.items():
            withs = self.scaled.get(key, [])
            for step in steps:
                if withs and not self._backward_before(step, withs):
                    self.problem(
                        step,
                        f"`{_code(self.module, step.body[0].value)}` can be reached without a "
                        "backward since the previous step (the `amp.scale_loss` at line "
                        f"{self.line(withs[0])} does not run on every path to it, e.g. a "
                        "skipped NaN loss): apex ran a plain optimizer step there, "
                        "`scaler.step` raises (AssertionError: `_scale is None` before the "
                        "first scaled backward, 'No inf checks were recorded' after "
                        "`zero_grad`); guard the step by hand (a flag set after the scaled "
                        "backward: `scaler.step` + `scaler.update()` when set, "
                        "`optimizer.step()` otherwise)",
                    )

    def _backward_before(self, step: cst.CSTNode, withs: list[cst.With]) -> bool:
        """Whether a backward surely runs before ``step`` in the same loop iteration (or
        function call): some earlier statement of a block around it, inside the innermost
        loop or function, backpropagates on every path through it."""
        node = step
        while True:
            block = self.parent(node)
            body = _statements(block)
            if body is None:
                return False
            index = next(i for i, s in enumerate(body) if s is node)
            if any(self._surely_backward(s, withs) for s in body[:index]):
                return True
            owner = self.owner(block)
            while isinstance(self.parent(owner), cst.If):  # an elif: climb to its `if`
                owner = self.parent(owner)
            if owner is None or isinstance(owner, Loop | cst.FunctionDef | cst.ClassDef):
                return False
            node = owner

    def _surely_backward(self, statement: cst.CSTNode, withs: list[cst.With]) -> bool:
        """``statement`` backpropagates on every path through it that goes on: a scaled
        backward, a plain ``x.backward()`` (the branch where apex was off), or a ``with``/
        ``if``-``else`` whose every branch does."""
        if any(statement is w for w in withs):
            return True
        if isinstance(statement, cst.SimpleStatementLine | cst.SimpleStatementSuite):
            return any(isinstance(s, cst.Expr) and _is_call_of(s.value, "backward")
                       for s in statement.body)  # fmt: skip
        blocks: list[cst.CSTNode] = []
        if isinstance(statement, cst.With):
            blocks = [statement.body]
        elif isinstance(statement, cst.If):
            current = statement
            while isinstance(current, cst.If):
                blocks.append(current.body)
                current = current.orelse
            if current is None:  # no `else`: the path through none of the branches
                return False
            blocks.append(current.body)
        return bool(blocks) and all(self._leaves_or_backward(b, withs) for b in blocks)

    def _leaves_or_backward(self, block: cst.CSTNode, withs: list[cst.With]) -> bool:
        """A branch that backpropagates, or that leaves (``continue``, ``return``, ``raise``,
        ``break``: it never reaches a step later in the same iteration)."""
        lines = [block] if isinstance(block, cst.SimpleStatementSuite) else list(block.body)
        last = lines[-1] if lines else None
        simple = isinstance(last, cst.SimpleStatementLine | cst.SimpleStatementSuite)
        leaves = simple and isinstance(
            last.body[-1], cst.Continue | cst.Return | cst.Raise | cst.Break
        )
        return leaves or any(self._surely_backward(s, withs) for s in lines)

    # -- master_params: unscale once per step ---------------------------------------------------
    def _steps_in_turn(self, scales: list[cst.Call]) -> None:
        """Several optimizers, one scale: each optimizer's ``scaler.step`` + ``update()`` must
        come before another optimizer's loss is scaled, or the ``update()`` changes the scale
        that the other's gradients were made with before they are unscaled."""
        events: dict[int, list[tuple[int, str, str, cst.CSTNode]]] = {}
        for call in scales:
            opt = _argument(call, "optimizers", 1)
            if opt is None:
                continue
            text = _code(self.module, opt)
            statement = self.statement(call)
            function = self.function(call)
            events.setdefault(id(function), []).append(
                (self.order[id(statement)], "scale", text, statement)
            )
            for step in self.steps.get((id(function), text), []):
                events[id(function)].append((self.order[id(step)], "step", text, step))
        for found in events.values():
            pending: dict[str, cst.CSTNode] = {}
            for _, kind, opt, node in sorted(found, key=lambda e: e[0]):
                if kind == "step":
                    pending.pop(opt, None)
                    continue
                other = next((o for o, n in pending.items() if o != opt
                              and not self._exclusive(n, node)), None)  # fmt: skip
                if other is not None:
                    self.problem(
                        node,
                        f"`{opt}`'s loss is scaled before `{other}` has stepped: the "
                        "GradScaler's `update()` after the first step would change the scale "
                        "the other's gradients were made with; step each optimizer right after "
                        "its own backward, or place the steps and one `update()` by hand",
                    )
                    return
                pending[opt] = node

    def _grad_readers(self, calls: dict[str, list[cst.Call]]) -> list[tuple[cst.CSTNode, str]]:
        """Statements that read gradients between a scaled backward and its step (a clip of
        ``model.parameters()``, a norm logged from ``p.grad``): apex had unscaled them when
        ``scale_loss`` exited, so each needs ``scaler.unscale_`` before it, as ``master_params``
        does. Not one in the ``else:`` of an ``if <test>:`` around a ``master_params`` clip
        when the scaled backward itself runs only under an ``if <test>:`` (hf_glue's two ``if
        args.fp16:``): on that path nothing was scaled."""
        clips = [self.statement(c) for c in calls.get("master_params", [])]
        gates = {  # the tests the scaled backwards run under
            _code(self.module, a.test)
            for c in calls.get("scale_loss", [])
            for a in self.ancestors(c)
            if isinstance(a, cst.If) and self.within(c, a.body)
        }
        found: dict[cst.CSTNode, str] = {}
        for call in calls.get("scale_loss", []):
            optimizer = _argument(call, "optimizers", 1)
            if not isinstance(optimizer, cst.Name | cst.Attribute):
                continue
            opt, scaled, function = (
                _code(self.module, optimizer),
                self.statement(call),
                self.function(call),
            )
            steps = self.steps.get((id(function), opt), [])
            after = [self.order[id(s)] for s in steps if self.order[id(s)] > self.order[id(scaled)]]
            if not after:
                continue
            for node in self.nodes[self.order[id(scaled)] + 1 : min(after)]:
                if (
                    isinstance(node, cst.SimpleStatementLine)
                    and node not in clips
                    and not self.within(node, scaled)
                    and self.function(node) is function
                    and node not in found
                    and self._reads_gradients(node)
                ):
                    found[node] = opt
        return [
            (statement, opt)
            for statement, opt in found.items()
            if not any(
                isinstance(holder := self.parent(self.parent(clip)), cst.If)
                and _code(self.module, holder.test) in gates
                and self.within(statement, holder)
                and self._exclusive(statement, clip)
                for clip in clips
            )
        ]

    def _reads_gradients(self, statement: cst.CSTNode) -> bool:
        """Gradient values are read: not ``p.grad = None`` (a write) nor ``p.grad is None``
        (scaling never changes which gradients exist)."""
        for node in self._subtree(statement):
            if isinstance(node, cst.Attribute) and node.attr.value == "grad":
                parent = self.parent(node)
                if isinstance(parent, cst.AssignTarget | cst.Del):
                    continue
                if isinstance(parent, cst.Comparison) and all(
                    isinstance(t.operator, cst.Is | cst.IsNot)
                    and isinstance(t.comparator, cst.Name)
                    and t.comparator.value == "None"
                    for t in parent.comparisons
                ):
                    continue
                return True
            if isinstance(node, cst.Call):
                if any(q.startswith("torch.nn.utils.clip_grad") for q in self.qualified(node.func)):
                    return True
                for arg in node.args:
                    value = arg.value
                    if (
                        isinstance(value, cst.Call)
                        and isinstance(value.func, cst.Attribute)
                        and (value.func.attr.value in ("parameters", "named_parameters"))
                    ):
                        return True
        return False

    def _master_params(
        self, calls: list[cst.Call], readers: list[tuple[cst.CSTNode, str]] = ()
    ) -> None:
        by_statement: dict[cst.CSTNode, list[cst.Call]] = {}
        for call in calls:
            positional = [a.value for a in call.args if not a.keyword]
            statement = self.statement(call)
            if len(call.args) != 1 or not positional:
                self.problem(call, "`amp.master_params` with other arguments than the optimizer")
                continue
            if not isinstance(statement, cst.SimpleStatementLine):
                self.problem(call, "`amp.master_params` outside a simple statement")
                continue
            opt = _code(self.module, positional[0])
            params = cst.parse_expression(
                f'(p for group in {opt}.param_groups for p in group["params"])'
            )
            self.plan.edits[call] = lambda _u, params=params: params
            by_statement.setdefault(statement, []).append(opt)
        for statement, opt in readers:
            by_statement.setdefault(statement, []).append(opt)
        by_statement = dict(sorted(by_statement.items(), key=lambda i: self.order[id(i[0])]))
        per_function: dict[cst.CSTNode, list[tuple[cst.CSTNode, str]]] = {}
        for statement, opts in by_statement.items():
            function = self.function(statement)
            if self.access(function) is None:
                continue  # _scope said why
            per_function.setdefault(function, []).append((statement, opts[0]))
        for function, statements in per_function.items():
            access = self.access(function)
            clusters: list[list[tuple[cst.CSTNode, str]]] = []
            for statement, opt in statements:
                joined = [
                    c for c in clusters if any(not self._exclusive(s, statement) for s, _ in c)
                ]
                if joined:
                    joined[0].append((statement, opt))
                else:
                    clusters.append([(statement, opt)])
            for cluster in clusters:
                anchor = self._one_anchor([s for s, _ in cluster])
                opts = {o for _, o in cluster}
                if anchor is None or len(opts) > 1:
                    first, again = cluster[0][0], cluster[1][0]
                    self.problem(
                        again,
                        f"{self._reader(again)} again after line {self.line(first)} in the same "
                        "step, and no one place before both runs once per step: "
                        "`scaler.unscale_` may run only once per step; unscale before the "
                        "first use by hand",
                    )
                    continue
                if len(cluster) > 1:
                    listed = ", ".join(str(self.line(s)) for s, _ in cluster)
                    self.plan.notes.append(
                        f"one `{access}.unscale_` before line {self.line(anchor)} serves the "
                        f"gradient reads at lines {listed} (apex had unscaled them all when "
                        "`scale_loss` exited)"
                    )
                self._place_unscale(anchor, cluster[0][1], function, access)

    def _reader(self, statement: cst.CSTNode) -> str:
        """How a blocker names a gradient read: what it is, not what it is not."""
        if "master_params" in _code(self.module, statement):
            return "`amp.master_params`"
        return "the gradient read"

    def _one_anchor(self, statements: list[cst.CSTNode]) -> cst.CSTNode | None:
        """The statement before which one unscale_ serves every read in ``statements``: the
        first one's ancestor in the innermost block holding them all (None: no such block, or
        it holds a backward)."""
        if len(statements) == 1:
            return statements[0]
        paths = [[s, *self.ancestors(s)] for s in statements]
        for candidate in paths[0]:
            body = _statements(candidate)
            if body is None or not all(any(n is candidate for n in p) for p in paths[1:]):
                continue
            anchor = next(s for s in body if any(s is n for n in paths[0]))
            if self.facts(anchor).backward or any(
                any(q.startswith(APEX + ".scale_loss") for q in self.qualified(n))
                for n in self._subtree(anchor)
                if isinstance(n, cst.Call)
            ):
                return None
            return anchor
        return None

    def _exclusive(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """``a`` and ``b`` are in different branches of one ``if``."""
        path_a = [a, *self.ancestors(a)]
        path_b = [b, *self.ancestors(b)]
        common = next(n for n in path_a if any(n is m for m in path_b))
        if not isinstance(common, cst.If):
            return False
        child_a = path_a[path_a.index(common) - 1]
        child_b = path_b[[id(n) for n in path_b].index(id(common)) - 1]
        return {id(child_a), id(child_b)} == {id(common.body), id(common.orelse)}

    def _one_unscale_per_step(self) -> None:
        """Two unscale_ that can run in one step raise at the second: every pair placed in one
        function must sit in different branches of an ``if``."""
        placed = list(dict.fromkeys(self.unscales))
        for i, later in enumerate(placed):
            for earlier in placed[:i]:
                same = self.function(earlier) is self.function(later)
                if same and not self._exclusive(earlier, later):
                    self.problem(
                        later,
                        "`scaler.unscale_` would run twice in one step (before lines "
                        f"{min(self.line(earlier), self.line(later))} and "
                        f"{max(self.line(earlier), self.line(later))}; apex's `master_params` is "
                        "read twice): unscale once, before the first use, by hand",
                    )
                    return

    def _place_unscale(self, statement, opt: str, function, access: str, depth: int = 0) -> None:
        steps = self.steps.get((id(function), opt), [])
        unscale = f"{access}.unscale_({opt})\n"
        scaled = [
            s for s, _, f, _ in self.requests
            if f is function and self.order[id(s)] < self.order[id(statement)]
        ]  # fmt: skip
        if not steps or not scaled:
            caller = self._helper_call(function, opt) if depth < 3 else None
            if caller is not None:  # a helper called once per step: unscale before the call
                call_statement, outer = caller
                self._place_unscale(call_statement, opt, outer, self.access(outer), depth + 1)
                return
            self.problem(
                statement,
                f"{self._reader(statement)} is not between a scaled backward and `{opt}.step()` "
                "in this function: place `scaler.unscale_` by hand",
            )
            return
        current = statement
        while True:
            located = self.block_of(current)
            if located is None:
                break
            block, index = located
            later = _statements(block)[index + 1 :]
            if any(self._always_steps(s, steps) for s in later):
                self._unscale_before(statement, unscale)
                return
            nested = [p for p in steps if any(self.within(p, s) for s in later)]
            if nested:
                self._move_to_step(statement, _statements(block)[index], nested, unscale)
                return
            owner = self.owner(block)
            if owner is None or owner is function or isinstance(owner, Loop):
                break
            current = owner
        self.problem(
            statement,
            f"{self._reader(statement)} is not followed by `{opt}.step()` in the same step: "
            "place `scaler.unscale_` by hand",
        )

    def _always_steps(self, statement: cst.CSTNode, steps: list) -> bool:
        """``statement`` is a step, or an if/else whose every branch always steps."""
        if statement in steps:
            return True
        if not isinstance(statement, cst.If) or statement.orelse is None:
            return False
        branches = [statement.body]
        orelse = statement.orelse
        if isinstance(orelse, cst.If):
            return any(self._always_steps(s, steps) for s in statement.body.body) and (
                self._always_steps(orelse, steps)
            )
        branches.append(orelse.body)
        return all(any(self._always_steps(s, steps) for s in b.body) for b in branches)

    def _helper_call(self, function, opt: str) -> tuple[cst.CSTNode, cst.CSTNode] | None:
        """``function`` (allennlp's ``rescale_gradients``) is called exactly once in the file,
        as a statement of a function that scales the loss and steps ``opt``, and uses
        ``master_params`` outside any loop: its one call is where unscale_ goes."""
        if not isinstance(function, cst.FunctionDef):
            return None
        name = function.name.value
        references = [
            n for n in self.nodes
            if (isinstance(n, cst.Attribute) and n.attr.value == name)
            or (isinstance(n, cst.Name) and n.value == name
                and not isinstance(self.parent(n), cst.Attribute | cst.FunctionDef))
        ]  # fmt: skip
        if len(references) != 1:
            return None
        call = self.parent(references[0])
        if not isinstance(call, cst.Call) or call.func is not references[0]:
            return None
        outer = self.function(call)
        if outer is function or not self.steps.get((id(outer), opt)):
            return None
        if any(isinstance(n, Loop) for n in self._subtree(function)):
            return None
        if self.access(outer) is None:
            return None
        return self.statement(call), outer

    def _scaled_clip(self, statement: cst.CSTNode, used: cst.Name) -> bool:
        """``norm = clip_grad_norm_(amp.master_params(opt), max_norm)`` on every micro-batch,
        its result used there too: unscale_ may run once per step, so the clip stays where it
        is and works on the scaled gradients, at ``max_norm * scale``, its norm divided by the
        same scale (a power of two, 1.0 when the scaler is off): apex's clip up to float
        rounding. False: not that statement."""
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        call = small.value if isinstance(small, cst.Assign) and len(statement.body) == 1 else None
        if not (
            isinstance(call, cst.Call)
            and _code(self.module, call.func).rpartition(".")[2] == "clip_grad_norm_"
            and 2 <= len(call.args) <= 3
            and not any(a.star for a in call.args)
            and [a.keyword.value if a.keyword else None for a in call.args][:2]
            in ([None, None], [None, "max_norm"])
            and _is_call_of(call.args[0].value, "master_params")
        ):
            return False
        access = self.access(self.function(statement))
        if access is None:
            return False
        scale = f"{access}.get_scale()"
        max_norm = call.args[1].value

        simple = isinstance(max_norm, cst.Name | cst.Attribute | cst.Integer | cst.Float)
        bound = _code(self.module, max_norm) if simple else f"({_code(self.module, max_norm)})"

        def build(u: cst.Call) -> cst.BaseExpression:
            limit = cst.parse_expression(f"{bound} * {scale}")
            args = [*u.args]
            args[1] = args[1].with_changes(value=limit)
            return cst.BinaryOperation(
                u.with_changes(args=args), cst.Divide(), cst.parse_expression(scale)
            )

        self.plan.edits[call] = build
        self.plan.notes.append(
            f"behaviour change: the clip of `amp.master_params` at line {self.line(statement)} "
            "runs on every micro-batch and its result is used there "
            f"(`{used.value}`), so it clips the scaled gradients at "
            f"`max_norm * {scale}` and divides the returned norm by the same scale (apex "
            "unscaled first; equal up to float rounding)"
        )
        return True

    def _unscale_before(self, statement: cst.CSTNode, unscale: str) -> None:
        self.unscales.append(statement)
        own = self.plan.edits.get(statement)

        def insert(u: cst.CSTNode) -> cst.FlattenSentinel:
            u = own(u) if own is not None else u
            return cst.FlattenSentinel(
                [
                    cst.parse_statement(unscale).with_changes(leading_lines=u.leading_lines),
                    u.with_changes(leading_lines=()),
                ]
            )

        self.plan.edits[statement] = insert

    def _move_to_step(self, statement, unit, nested: list, unscale: str) -> None:
        """The clip ran every micro-batch (apex unscaled at each ``scale_loss`` exit); with a
        GradScaler, unscale_ may run once per ``update()``: move it under the step's
        condition, right before the step."""
        if len(nested) != 1:
            self.problem(statement, "the clip is followed by several conditional steps")
            return
        step = nested[0]
        conditions: list[cst.BaseExpression] = []
        if self._blocks_move(unit):  # the clip shares its block with the backward
            narrowed = self._narrow(statement, unit)
            if narrowed is not None:
                unit, conditions = narrowed
        facts = self.facts(unit)
        inside = {id(n) for n in self._subtree(unit)}
        function = self.function(unit)
        reads = [
            n for n in self._subtree(function)
            if isinstance(n, cst.Name) and n.value in facts.assigned and id(n) not in inside
            and not isinstance(self.parent(n), cst.AssignTarget | cst.AnnAssign | cst.AugAssign)
        ]  # fmt: skip
        blockers = self._blocks_move(unit)
        if reads or blockers:
            own = self.facts(statement).assigned
            used = [n for n in reads if n.value in own]
            if used and self._scaled_clip(statement, used[0]):
                return
            why = (
                f"; its result `{used[0].value}` is used at line {self.line(used[0])}"
                if used
                else "; it shares a block with the scaled backward"
                if blockers
                else f"; `{reads[0].value}` from its block is used at line {self.line(reads[0])}"
            )
            self.problem(
                statement,
                "the clip of `amp.master_params` runs on every micro-batch while "
                f"`optimizer.step()` (line {self.line(step)}) runs under a condition{why}: move "
                "the clip under the step's condition (after `scaler.unscale_(optimizer)`) by hand",
            )
            return
        if id(unit) in self.moved:  # another use in the same moved block
            if unit is not statement:
                self._unscale_before(statement, unscale)
            return
        self.moved.add(id(unit))
        moved: dict[str, cst.CSTNode] = {}
        alone = len(_statements(self.block_of(unit)[0])) == 1

        def take(u: cst.CSTNode) -> cst.CSTNode | cst.RemovalSentinel:
            moved["unit"] = u.with_changes(leading_lines=())
            return cst.parse_statement("pass\n") if alone else cst.RemoveFromParent()

        def lines() -> list[cst.BaseStatement]:
            body = [cst.parse_statement(unscale)] if unit is statement else []
            body.append(moved["unit"])
            for test in reversed(conditions):  # under the conditions it ran under
                header = cst.ensure_type(
                    cst.parse_statement(f"if {_code(self.module, test)}:\n    pass\n"), cst.If
                )
                body = [header.with_changes(body=header.body.with_changes(body=body))]
            return body

        if unit is not statement:
            self._unscale_before(statement, unscale)
        self.plan.edits[unit] = take
        self.before_step[step].append(lines)
        if unit is statement:
            self.unscales.append(step)
        around = (
            f"; the whole statement at line {self.line(unit)} moves with it, so its other "
            "branches (a clip for runs without mixed precision) run once per step too"
            if unit is not statement and not isinstance(unit, cst.SimpleStatementLine)
            else ""
        )
        self.plan.notes.append(
            f"behaviour change: apex clipped `amp.master_params` on every micro-batch (line "
            f"{self.line(statement)}); the clip now runs once per optimizer step, under the "
            f"step's condition (line {self.line(step)}), after `scaler.unscale_`{around}"
        )

    def _blocks_move(self, unit: cst.CSTNode) -> bool:
        """``unit`` holds a backward, a scaled loss or a step: it cannot move to the step."""
        inside = {id(n) for n in self._subtree(unit)}
        steps = [p for group in self.steps.values() for p in group]
        return self.facts(unit).backward or any(
            id(n) in inside for n in [*steps, *(s for s, _, _, _ in self.requests)]
        )

    def _narrow(self, statement, unit) -> tuple[cst.CSTNode, list] | None:
        """The largest statement around the clip, inside ``unit``, that can move alone, and
        the ``if`` tests (without calls) it sits under there: ``if args.fp16: <backward>;
        clip(...)`` moves as ``if args.fp16: unscale_; clip(...)``."""
        chain = [statement, *self.ancestors(statement)]
        chain = chain[: next(i for i, n in enumerate(chain) if n is unit)]
        movable = [n for n in chain if isinstance(n, cst.BaseStatement)]
        movable = [n for n in movable if not self._blocks_move(n)]
        if not movable:
            return None
        top = movable[-1]
        conditions = []
        previous = top
        for node in chain[chain.index(top) + 1 :]:
            if isinstance(node, cst.IndentedBlock):
                previous = node
                continue
            if not (isinstance(node, cst.If) and node.body is previous):
                return None
            if self.facts(node.test).calls:
                return None
            conditions.insert(0, node.test)
            previous = node
        if isinstance(unit, cst.If) and unit.body is previous and not self.facts(unit.test).calls:
            conditions.insert(0, unit.test)
        else:
            return None
        return top, conditions

    def _subtree(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        nodes: list[cst.CSTNode] = []

        class Collect(cst.CSTVisitor):
            def on_visit(self, n: cst.CSTNode) -> bool:
                nodes.append(n)
                return True

        node.visit(Collect())
        return iter(nodes)

    # -- checkpoints ------------------------------------------------------------------------
    def _state(self, call: cst.Call, member: str) -> None:
        access = self.access(self.function(call))
        if access is None:
            return  # _scope said why
        if member == "state_dict" and call.args:
            self.problem(call, "`amp.state_dict(destination)`: GradScaler has no destination")
            return
        func = cst.parse_expression(f"{access}.{member}")
        self.plan.edits[call] = lambda u: u.with_changes(func=func)
        if member == "state_dict":
            self._rename_saved_key(call)
        else:
            self._rename_loaded_key(call)
        note = (
            f'the GradScaler state is saved under "{self.name}"; checkpoints saved by apex keep '
            "apex's state under their old key: convert them with `ampmigrate convert-checkpoint` "
            f'and store the result under "{self.name}"'
        )
        if note not in self.plan.notes:
            self.plan.notes.append(note)

    def _resume_state(self, setup: _Setup, init: cst.Call) -> None:
        """apex's loss scale was never checkpointed here; the optimizer's is. Put the
        GradScaler's state next to it, under its own key, where the scaler exists: a dict
        literal holding ``opt.state_dict()`` gains ``"scaler": scaler.state_dict()``, and
        ``opt.load_state_dict(ckpt[...])`` is followed by a guarded ``scaler.load_state_dict``
        (old checkpoints have no such key; a disabled scaler saved ``{}``, which an enabled one
        refuses to load)."""
        args = {a.keyword.value: a.value for a in init.args if a.keyword}
        positional = [a.value for a in init.args if not a.keyword]
        optimizer = args.get("optimizers", positional[1] if len(positional) > 1 else None)
        opt = _code(self.module, optimizer)
        created = self.order[id(self.early or setup.statement)]
        done: set[cst.CSTNode] = set()
        gaps: list[str] = []  # where the scaler's state cannot join the optimizer's
        joined: list[cst.CSTNode] = []  # the edits that make it join

        def helper(function: cst.CSTNode) -> bool:
            """A module-level checkpoint helper given ``opt`` only by the function holding the
            scaler, after it exists: it can take the scaler as a parameter."""
            if self.mode != "function" or not isinstance(function, cst.FunctionDef):
                return False
            if function in self.threaded or self.within(function, setup.home):
                return function in self.threaded
            if self.top_function(function) is not function:
                return False
            for ref in self._references(function.name.value):
                call = self.parent(ref)
                if not (
                    isinstance(call, cst.Call)
                    and call.func is ref
                    and self.function(call) is setup.home
                    and self.order[id(call)] > created
                    and any(_code(self.module, a.value) == opt for a in call.args)
                ):
                    return False
            self._thread([function], setup.home)
            return True

        def reachable(node: cst.CSTNode) -> str | None:
            function = self.function(node)
            if self.access(function) is None and helper(function):
                return self.access(function)
            access = self.access(function)
            if access is None or (function is setup.home and self.order[id(node)] < created):
                return None
            return access

        for node in self.nodes:
            if _is_call_of(node, "state_dict") and _code(self.module, node.func.value) == opt:
                holder = next((a for a in self.ancestors(node) if isinstance(a, cst.Dict)), None)
                if holder is None or holder in self.plan.edits:
                    continue
                access = reachable(node)
                keys = [e.key for e in holder.elements if isinstance(e, cst.DictElement)]
                if access is None or not all(isinstance(k, cst.SimpleString) for k in keys):
                    gaps.append(
                        f"the checkpoint dict at line {self.line(node)} (the GradScaler is not "
                        "created yet there, or not reachable, or the keys are not strings)"
                    )
                    continue
                quote = keys[0].quote
                element = cst.DictElement(
                    cst.SimpleString(f"{quote}{self.name}{quote}"),
                    cst.parse_expression(f"{access}.state_dict()"),
                )
                self.plan.edits[holder] = lambda u, e=element: u.with_changes(
                    elements=_appended(u.elements, e)
                )
                joined.append(holder)
            elif (
                _is_call_of(node, "load_state_dict") and _code(self.module, node.func.value) == opt
            ):
                statement = self.statement(node)
                source = node.args[0].value if len(node.args) == 1 else None
                access = reachable(node)
                if statement in done or (
                    statement in self.plan.edits and statement is not self.early
                ):
                    continue
                if not isinstance(source, cst.Subscript) or not isinstance(
                    source.value, cst.Name | cst.Attribute
                ):
                    gaps.append(
                        f"the restore at line {self.line(node)} (from a value that is not a "
                        "checkpoint key: a file of its own?)"
                    )
                    continue
                home = self.global_home
                if home is not None and self.function(node) is not home:
                    gaps.append(
                        f"the restore at line {self.line(node)} (in "
                        f"`{self.function(node).name.value}`, which may run before "
                        f"`{home.name.value}` creates the GradScaler)"
                    )
                    continue
                if access is None:
                    gaps.append(
                        f"the restore at line {self.line(node)} (before the GradScaler exists "
                        f"where `amp.initialize` was, line {self.line(setup.statement)}, or "
                        "where it is not reachable"
                        + (f"; it cannot be created earlier: {self.late}" if self.late else "")
                        + ")"
                    )
                    continue
                if not isinstance(statement, cst.SimpleStatementLine) or statement.body[
                    0
                ] is not self.parent(node):
                    gaps.append(f"the restore at line {self.line(node)} (inside an expression)")
                    continue
                container = _code(self.module, source.value)
                quote = '"'
                load = cst.parse_statement(
                    f"if {quote}{self.name}{quote} in {container} and "
                    f"{container}[{quote}{self.name}{quote}]:\n"
                    f"    {access}.load_state_dict({container}[{quote}{self.name}{quote}])\n"
                )
                done.add(statement)
                previous = self.plan.edits.get(statement)  # the early scaler line before it
                self.plan.edits[statement] = lambda u, load=load, p=previous: cst.FlattenSentinel(
                    [*(p(u).nodes if p else [u]), load]
                )
                joined.append(statement)
                self.plan.notes.append(
                    f"the GradScaler's state is restored after `{opt}`'s (line "
                    f"{self.line(statement)}) when the checkpoint has it"
                )
        if gaps:
            # apex never checkpointed its loss scale here: leaving the GradScaler's out is
            # exactly what apex did (the scale restarts on resume); AMP208 reports that gap
            for node in joined:
                if node is self.early:
                    previous = self.plan.edits[node]
                    self.plan.edits[node] = lambda u, p=previous: cst.FlattenSentinel(
                        p(u).nodes[:-1]
                    )
                else:
                    del self.plan.edits[node]
            self.plan.notes = [
                n for n in self.plan.notes if "GradScaler's state is restored" not in n
            ]
            self.plan.notes.append(
                "apex never checkpointed its loss scale here and the GradScaler's state is "
                f"not added beside `{opt}`'s either ({'; '.join(gaps)}): the scale restarts "
                "on resume, as it did under apex (AMP208 reports this gap on its own)"
            )
            self.scale_gap = True

    def _new_key(self, node: cst.SimpleString) -> None:
        quote = node.quote
        self.plan.edits[node] = lambda _u: cst.SimpleString(f"{quote}{self.name}{quote}")

    def _rename_saved_key(self, call: cst.Call) -> None:
        parent = self.parent(call)
        if isinstance(parent, cst.DictElement) and isinstance(parent.key, cst.SimpleString):
            self._new_key(parent.key)
            return
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            target = parent.targets[0].target
            index = self._key_of(target)
            if index is not None:
                self._new_key(index)
                return
        self.plan.notes.append(
            f"`amp.state_dict()` at line {self.line(call)} is not stored under a key: make "
            "sure apex-format state is never fed to `scaler.load_state_dict`"
        )

    def _key_of(self, node: cst.CSTNode) -> cst.SimpleString | None:
        """The string of ``x["amp"]`` or ``x.get("amp")``."""
        if isinstance(node, cst.Subscript) and len(node.slice) == 1:
            index = node.slice[0].slice
            if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
                return index.value
        if (
            _is_call_of(node, "get")
            and node.args
            and isinstance(node.args[0].value, cst.SimpleString)
        ):
            return node.args[0].value
        return None

    def _rename_loaded_key(self, call: cst.Call) -> None:
        source = call.args[0].value if len(call.args) == 1 else None
        key = self._key_of(source) if source is not None else None
        if key is None:
            self.problem(
                call,
                "`amp.load_state_dict` of a value not read from a checkpoint key here: load "
                f'the GradScaler from its own key (`checkpoint["{self.name}"]`), never from '
                "apex's old entry (convert old checkpoints with `ampmigrate convert-checkpoint`)",
            )
            return
        self._new_key(key)
        container = _code(self.module, source.value if isinstance(source, cst.Subscript)
                          else source.func.value)  # fmt: skip
        old = key.evaluated_value
        for ancestor in self.ancestors(call):
            if isinstance(ancestor, cst.FunctionDef):
                break
            if isinstance(ancestor, cst.If):
                for node in self._subtree(ancestor.test):
                    if (
                        isinstance(node, cst.Comparison)
                        and isinstance(node.left, cst.SimpleString)
                        and node.left.evaluated_value == old
                        and len(node.comparisons) == 1
                        and isinstance(node.comparisons[0].operator, cst.In)
                        and _code(self.module, node.comparisons[0].comparator) == container
                    ):
                        self._new_key(node.left)

    def _helper_notes(self) -> None:
        """Checkpoint helpers imported from sibling modules are not visible here."""
        imported: dict[str, str] = {}
        for node in self.nodes:
            if isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar):
                module = "." * len(node.relative) + (
                    _code(self.module, node.module) if node.module else ""
                )
                if module.split(".")[0] in ("torch", "apex", "numpy", "os", "typing"):
                    continue
                for alias in node.names:
                    imported[alias.evaluated_alias or alias.evaluated_name] = module
        for name, module in imported.items():
            if not _HELPER.search(name):
                continue
            for ref in self._references(name):
                call = self.parent(ref)
                reached = isinstance(call, cst.Call) and call.func is ref
                if reached and self.access(self.function(call)) is not None:
                    self.plan.notes.append(
                        f"`{module}.{name}` (called at line {self.line(call)}) is in another "
                        "module: if it saves or loads apex amp state, give it a "
                        f"`{self.name}` parameter, pass `{self.name}={self.name}` here and "
                        f'use the key "{self.name}"'
                    )
                    break

    # -- the autocast regions ------------------------------------------------------------------
    def _regions(self, setup: _Setup) -> None:
        """Wrap the forward pass and loss of every scaled backward in autocast (see the
        module docstring); then check the invariant: no initialized model is called before the
        backward outside a region."""
        forbidden: dict[int, bool] = {}
        edited = set(map(id, self.plan.edits))

        def blocked(statement: cst.CSTNode) -> bool:
            if id(statement) not in forbidden:
                nodes = list(self._subtree(statement))
                forbidden[id(statement)] = any(
                    id(n) in edited
                    or _is_call_of(n, "backward")
                    or isinstance(n, cst.FunctionDef | cst.ClassDef)
                    for n in nodes
                )
            return forbidden[id(statement)]

        chosen: dict[cst.CSTNode, tuple[set[int], set[int], str | None]] = {}
        checks: list[tuple[cst.CSTNode, str, str | None]] = []
        for scale, loss, function, enabled in self.requests:
            needed = {loss}
            current: cst.CSTNode = scale
            picked = False
            while True:
                located = self.block_of(current)
                if located is None:
                    break
                block, index = located
                body = _statements(block)
                feeding, calling, forward = [], [], []
                for i in range(index - 1, -1, -1):
                    facts = self.facts(body[i], setup.models)
                    if facts.assigned & needed:
                        needed |= facts.used
                        feeding.append(i)
                        calling += [i] if facts.calls else []
                        forward += [i] if facts.model_calls else []
                if calling:  # from the forward (or the first call feeding the loss) on
                    picked = True
                    indices, feeds, _ = chosen.setdefault(block, (set(), set(), enabled))
                    indices.update(range(min(forward or calling), max(calling) + 1))
                    feeds.update(feeding)
                owner = self.owner(block)
                if owner is None or owner is function or (isinstance(owner, Loop) and picked):
                    break
                current = owner
            if not picked:
                self.problem(
                    scale,
                    f"`{loss}` is not computed before its `scale_loss` in this function: place "
                    '`torch.amp.autocast("cuda", dtype=torch.float16)` around the forward by hand',
                )
            checks.append((function, loss, enabled))
        wrapped: set[int] = set()
        planned: dict[cst.CSTNode, tuple[list[list[cst.BaseStatement]], str | None]] = {}
        for block, (indices, feeds, enabled) in chosen.items():
            body = _statements(block)
            runs: list[list[int]] = []
            for i in sorted(indices):
                if blocked(body[i]):
                    if i in feeds and self.facts(body[i], setup.models).model_calls:
                        self.problem(
                            body[i],
                            "the forward pass shares a statement with the backward or another "
                            "rewritten line: split it so autocast can cover only the forward",
                        )
                    continue
                if runs and runs[-1][-1] == i - 1:
                    runs[-1].append(i)
                else:
                    runs.append([i])
            runs = [r for r in runs if feeds & set(r)]
            for run in runs:
                wrapped.update(id(body[i]) for i in run)
            planned[block] = ([[body[i] for i in run] for run in runs], enabled)
        seen: set[int] = set()
        for function, loss, enabled in checks:
            body = function.body if isinstance(function, cst.FunctionDef) else function
            for call in self.facts(body, setup.models).model_calls:
                if id(call) in seen or self.function(call) is not function:
                    continue
                seen.add(id(call))
                if any(id(a) in wrapped for a in self.ancestors(call)):
                    continue
                # Another forward of the model in the training function (in-loop validation):
                # apex O1 ran it in float16 too, so its simple statement gets a region.
                statement = self.statement(call)
                located = self.block_of(statement)
                if (
                    isinstance(statement, cst.SimpleStatementLine)
                    and located is not None
                    and not blocked(statement)
                ):
                    runs, _ = planned.setdefault(located[0], ([], enabled))
                    runs.append([statement])
                    wrapped.add(id(statement))
                    note = (
                        "other calls of the model in the training function (e.g. validation) "
                        "get their own autocast region, as apex O1 ran them in float16"
                    )
                    if note not in self.plan.notes:
                        self.plan.notes.append(note)
                else:
                    self.problem(
                        call,
                        f"`{_code(self.module, call.func)}(...)` runs in the function that scales "
                        f"`{loss}` but not in the autocast region of its forward (apex O1 ran it "
                        "in float16 too): wrap it in `torch.amp.autocast` by hand",
                    )
        for block, (runs, enabled) in planned.items():
            order = {id(s): i for i, s in enumerate(_statements(block))}
            self._wrap(block, sorted(runs, key=lambda r: order[id(r[0])]), enabled)

    def _wrap(self, block: cst.CSTNode, runs: list[list[cst.BaseStatement]], enabled) -> None:
        """One ``with autocast`` per run; the block regroups its updated statements."""
        if not runs:
            return
        flag = f", enabled={enabled}" if enabled else ""
        header = f'with torch.amp.autocast("cuda", dtype=torch.float16{flag}):\n    pass\n'
        template = cst.ensure_type(cst.parse_statement(header), cst.With)
        updated: dict[int, cst.CSTNode] = {}

        def keep(u: cst.CSTNode, statement: cst.CSTNode) -> cst.CSTNode:
            updated[id(statement)] = u
            return u

        for run in runs:
            for statement in run:
                self.plan.edits[statement] = lambda u, s=statement: keep(u, s)

        def regroup(u: cst.CSTNode) -> cst.CSTNode:
            starts = {id(updated[id(r[0])]): r for r in runs}
            skip = {id(updated[id(s)]) for r in runs for s in r[1:]}
            body = []
            for statement in u.body:
                run = starts.get(id(statement))
                if run is not None:
                    inner = [updated[id(s)] for s in run]
                    body.append(
                        template.with_changes(
                            body=template.body.with_changes(
                                body=[inner[0].with_changes(leading_lines=()), *inner[1:]]
                            ),
                            leading_lines=inner[0].leading_lines,
                        )
                    )
                elif id(statement) not in skip:
                    body.append(statement)
            return u.with_changes(body=body)

        previous = self.plan.edits.get(block)
        self.plan.edits[block] = regroup if previous is None else lambda u: regroup(previous(u))


def rewrite(module: cst.Module, link: tuple[Link, str] | None = None) -> cst.Module:
    """Apply the plan to ``module`` (re-planned: other fixes may have changed it)."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    scopes, parents = wrapper.resolve(ScopeProvider), wrapper.resolve(ParentNodeProvider)
    found = _Planner(module, scopes, parents, link).build()
    if found is None or found.problems:
        return module
    return module.visit(ReplaceNodes(found.edits))


class ApexO1(cst.CSTVisitor):
    """One finding per file that uses apex.amp: the O1 rewrite, or every blocker with its line."""

    METADATA_DEPENDENCIES = (ScopeProvider, ParentNodeProvider)  # shared with the other rules

    def __init__(
        self, rule: Rule, link: tuple[Link, str] | None = None, path: str | None = None
    ) -> None:
        super().__init__()
        self.rule = rule
        self.link = link
        self.path = path
        self.findings: list[Finding] = []

    def visit_Module(self, node: cst.Module) -> bool:
        scopes, parents = self.metadata[ScopeProvider], self.metadata[ParentNodeProvider]
        found = _Planner(node, scopes, parents, self.link, self.path).build()
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
        build = functools.partial(rewrite, link=self.link) if self.link else rewrite
        fix = Fix(
            "unsafe",
            cst_target=node,
            cst_build=build,
            add_imports=frozenset({"torch"}),
            min_torch=(2, 3),  # torch.amp.GradScaler (AMP102's replacement)
        )
        self.findings.append(Finding(self.rule.code, message, found.anchor, fix))
        return False
