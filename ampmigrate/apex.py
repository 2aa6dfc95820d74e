"""The apex O1 rewrite: ``amp.initialize`` / ``amp.scale_loss`` -> ``torch.amp`` (one file at once).

apex O1 patched torch globally from ``initialize`` on; native AMP needs an explicit autocast
region and a GradScaler. The rewrite is planned for the whole file and applied only when every
piece is exact, because a partial one leaves code that runs but silently lost mixed precision
(a scaled backward without ``scaler.step`` applies scaled gradients). When something blocks it,
the finding lists what, and the per-use guidance of AMP301 stays.

What the plan needs (the shape of the reference's patterns P1-P3, P5-P7, P11, P14-P15):
one ``initialize(model, optimizer, opt_level="O1" | a variable)`` at module level or in the
function that also holds every ``scale_loss``; each ``with amp.scale_loss(loss, opt) as s:``
starting with ``s.backward(...)``; the loss computed in that function; ``opt.step()`` there too;
``amp.master_params(opt)`` only in a statement before that step; the apex import removable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, ScopeProvider

from ampmigrate.catalog import Rule
from ampmigrate.cstnames import qualified_names
from ampmigrate.findings import Finding, Fix
from ampmigrate.replace import Build, ReplaceNodes

APEX = "apex.amp"
SUPPORTED = {"initialize", "scale_loss", "master_params", "state_dict", "load_state_dict"}
_IGNORED_KWARGS = {"verbosity", "opt_level", "loss_scale"}
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception"}


@dataclass
class Plan:
    anchor: cst.CSTNode | None = None  # where the finding is reported: the initialize call
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    edits: dict[cst.CSTNode, Build] = field(default_factory=dict)


def _code(module: cst.Module, node: cst.CSTNode) -> str:
    return module.code_for_node(node)


def _statements(block: cst.CSTNode) -> list[cst.BaseStatement] | None:
    return list(block.body) if isinstance(block, cst.Module | cst.IndentedBlock) else None


class _Planner:
    def __init__(self, module: cst.Module, scopes: Mapping, parents: Mapping) -> None:
        self.module = module
        self.scopes = scopes
        self.parents = parents
        self.nodes = list(self.parents)  # every node but the module, in source order
        self.plan = Plan()
        self.removed: set[cst.CSTNode] = set()  # statements the plan deletes outright

    # -- tree helpers ----------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode):
        current = self.parent(node)
        while current is not None:
            yield current
            current = self.parent(current)

    def function(self, node: cst.CSTNode) -> cst.CSTNode:
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef | cst.Module):
                return ancestor
        return self.module

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement:
        """The statement (simple line or compound) that contains ``node``."""
        current = node
        while not isinstance(current, cst.BaseStatement):
            current = self.parent(current)
        return current

    def block_of(self, statement: cst.BaseStatement) -> tuple[cst.CSTNode, int] | None:
        block = self.parent(statement)
        body = _statements(block) if block is not None else None
        if body is None:
            return None
        return block, next(i for i, s in enumerate(body) if s is statement)

    def qualified(self, node: cst.CSTNode) -> set[str]:
        return qualified_names(self.scopes.get(node), node)

    def free_name(self, preferred: str) -> str | None:
        """A name the file does not use anywhere, so the new binding shadows nothing."""
        for name in (preferred, f"grad_{preferred}", f"amp_{preferred}"):
            if not re.search(rf"\b{name}\b", self.module.code):
                return name
        return None

    # -- the plan --------------------------------------------------------------------------
    def build(self) -> Plan | None:
        calls: dict[str, list[cst.Call]] = {}
        others: list[cst.CSTNode] = []
        for node in self.nodes:
            if not isinstance(node, cst.Call):
                continue
            for name in self.qualified(node.func):
                if name.startswith(APEX + "."):
                    member = name[len(APEX) + 1 :]
                    if member in SUPPORTED:
                        calls.setdefault(member, []).append(node)
                    else:
                        others.append(node)
                        self.plan.problems.append(f"`amp.{member}` has no O1 rewrite")
        if not calls and not others:
            return None
        self._imports()
        self._values(calls)
        initialize = calls.get("initialize", [])
        if len(initialize) != 1:
            self.plan.anchor = (initialize or others or [next(iter(calls.values()))[0]])[0]
            self.plan.problems.append(
                "no `amp.initialize` call in this file"
                if not initialize
                else "`amp.initialize` is called more than once"
            )
            return self.plan
        init = initialize[0]
        self.plan.anchor = init
        setup = self._initialize(init)
        if setup is None:
            return self.plan
        scaler, condition, home = setup
        for call in calls.get("scale_loss", []):
            self._scale_loss(call, scaler, condition, home)
        for call in calls.get("master_params", []):
            self._master_params(call, scaler, home)
        for member in ("state_dict", "load_state_dict"):
            for call in calls.get(member, []):
                self._state(call, scaler, home)
        if not calls.get("scale_loss"):
            self.plan.problems.append(
                "no `amp.scale_loss` in this file: where the loss is scaled and the optimizer "
                "stepped is not visible here"
            )
        return self.plan

    def _values(self, calls: dict[str, list[cst.Call]]) -> None:
        """``amp`` used other than by a supported call (``amp is None``, passed along)."""
        funcs = {id(c.func) for group in calls.values() for c in group}
        for node in self.nodes:
            if isinstance(node, cst.Name | cst.Attribute) and id(node) not in funcs:
                if isinstance(self.parent(node), cst.Attribute):
                    continue  # part of a longer name, judged there
                if isinstance(node, cst.Name) and isinstance(self.parent(node), cst.ImportAlias):
                    continue
                if APEX in self.qualified(node) and not self._in_import(node):
                    self.plan.problems.append(
                        f"`{_code(self.module, node)}` is used as a value (line "
                        f"{self._line(node)}): remove the apex availability checks first"
                    )

    def _in_import(self, node: cst.CSTNode) -> bool:
        return any(isinstance(a, cst.Import | cst.ImportFrom) for a in self.ancestors(node))

    def _line(self, node: cst.CSTNode) -> int:
        """Only for a problem's message: positions are not resolved otherwise."""
        wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        return wrapper.resolve(PositionProvider)[node].start.line

    def _imports(self) -> None:
        """Remove ``from apex import amp`` / ``import apex``, and a try/except that only
        guarded it (keeping assignments like ``has_apex = True``: native AMP is always there)."""
        for node in self.nodes:
            if isinstance(node, cst.ImportFrom) and node.module is not None:
                module = _code(self.module, node.module)
                names = [] if isinstance(node.names, cst.ImportStar) else node.names
                only_amp = module == "apex" and [a.evaluated_name for a in names] == ["amp"]
                if only_amp or module.startswith("apex.amp"):
                    self._remove_import(node)
                elif module == "apex" or module.startswith("apex."):
                    self.plan.problems.append(f"`from {module} import ...` needs apex")
            elif isinstance(node, cst.Import):
                names = [_code(self.module, a.name) for a in node.names]
                if any(n == "apex" or n.startswith("apex.") for n in names):
                    if all(n in ("apex", "apex.amp") for n in names):
                        self._remove_import(node)
                    else:
                        self.plan.problems.append("`import apex...` of modules besides amp")

    def _remove_import(self, node: cst.CSTNode) -> None:
        line = self.statement(node)
        try_node = self.parent(self.parent(line))
        if isinstance(try_node, cst.Try) and self._guard_only(try_node, line):
            kept = [s for s in try_node.body.body if s is not line]
            if kept:
                first = kept[0].with_changes(leading_lines=try_node.leading_lines)
                self.plan.edits[try_node] = lambda _u, k=[first, *kept[1:]]: cst.FlattenSentinel(k)
            else:
                self.plan.edits[try_node] = lambda _u: cst.RemoveFromParent()
                self.removed.add(try_node)
            return
        self.plan.edits[line] = lambda _u: cst.RemoveFromParent()
        self.removed.add(line)

    def _guard_only(self, node: cst.Try, line: cst.CSTNode) -> bool:
        if node.orelse is not None or node.finalbody is not None:
            return False
        for handler in node.handlers:
            kinds = handler.type
            names = kinds.elements if isinstance(kinds, cst.Tuple) else [kinds] if kinds else []
            if not names or any(
                _code(self.module, n.value if isinstance(n, cst.Element) else n).rsplit(".", 1)[-1]
                not in _IMPORT_ERRORS
                for n in names
            ):
                return False
        others = [s for s in node.body.body if s is not line]
        return all(isinstance(s, cst.SimpleStatementLine) for s in others)

    def _initialize(self, init: cst.Call):
        """``model, opt = amp.initialize(model, opt, ...)`` -> ``scaler = GradScaler(...)``."""
        args = {a.keyword.value: a.value for a in init.args if a.keyword}
        positional = [a.value for a in init.args if not a.keyword and not a.star]
        if any(a.star for a in init.args):
            self.plan.problems.append("`amp.initialize` gets `*args`/`**kwargs`")
            return None
        if len(positional) > 2 or ("optimizers" not in args and len(positional) < 2):
            self.plan.problems.append("`amp.initialize` without an optimizer (inference only)")
            return None
        unknown = sorted(set(args) - _IGNORED_KWARGS - {"models", "optimizers"})
        if unknown:
            listed = ", ".join(f"`{k}`" for k in unknown)
            self.plan.problems.append(f"`amp.initialize` sets {listed}, which O1 cannot express")
            return None
        level = args.get("opt_level")
        if isinstance(level, cst.SimpleString):
            if level.evaluated_value != "O1":
                self.plan.problems.append(
                    f"opt_level {level.evaluated_value}: only O1 (autocast + GradScaler) exists "
                    "in torch.amp; O2/O3 cast the model, which native AMP does not do"
                )
                return None
        elif level is None:
            self.plan.problems.append(
                "`amp.initialize` without opt_level (apex's default O1 is implicit here; write "
                "it to confirm)"
            )
            return None
        else:
            self.plan.notes.append(
                f"opt_level `{_code(self.module, level)}` is not a literal: rewritten as O1"
            )
        scale = args.get("loss_scale")
        if scale is not None and not (
            isinstance(scale, cst.SimpleString) and scale.evaluated_value == "dynamic"
        ):
            self.plan.problems.append("a static `loss_scale`: GradScaler is always dynamic")
            return None
        models = args.get("models", positional[0] if positional else None)
        optimizer = args.get("optimizers", positional[1] if len(positional) > 1 else None)
        if not isinstance(optimizer, cst.Name | cst.Attribute) or not isinstance(
            models, cst.Name | cst.Attribute
        ):
            self.plan.problems.append("lists of models or optimizers in `amp.initialize`")
            return None
        statement = self.statement(init)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if small is None or len(statement.body) != 1 or getattr(small, "value", None) is not init:
            self.plan.problems.append("`amp.initialize` is not a statement of its own")
            return None
        home = self.function(init)
        condition: cst.BaseExpression | None = None
        placed = statement
        holder = self.parent(self.parent(statement))
        if isinstance(holder, cst.If):
            if holder.orelse is not None:
                self.plan.problems.append("`amp.initialize` sits in an if/else")
                return None
            condition, placed = holder.test, holder
        elif not (isinstance(holder, cst.FunctionDef) or self.parent(statement) is self.module):
            self.plan.problems.append("`amp.initialize` is nested in a block other than an `if`")
            return None
        name = self.free_name("scaler")
        if name is None:
            self.plan.problems.append("no free name for the GradScaler")
            return None
        enabled = f", enabled={_code(self.module, condition)}" if condition is not None else ""
        scaler_line = cst.parse_statement(f'{name} = torch.amp.GradScaler("cuda"{enabled})\n')
        assigned = self._rebind(small, models, optimizer)
        if placed is statement:
            lines = [scaler_line.with_changes(leading_lines=statement.leading_lines), *assigned]
            self.plan.edits[statement] = lambda _u: cst.FlattenSentinel(lines)
        else:
            # The scaler must exist on both paths: build it before the `if`, disabled when the
            # condition is false, and drop the initialize (and the if, when nothing is left).
            self.plan.edits[statement] = lambda _u: (
                cst.FlattenSentinel(assigned) if assigned else cst.RemoveFromParent()
            )
            body = [s for s in holder.body.body if s is not statement]
            rest = [s for s in body if s not in self.removed]
            line = scaler_line.with_changes(leading_lines=holder.leading_lines)
            if rest or assigned:
                self.plan.edits[holder] = lambda u: cst.FlattenSentinel(
                    [line, u.with_changes(leading_lines=())]
                )
            else:
                self.plan.edits[holder] = lambda _u: line
        return name, condition, home

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
        return [cst.parse_statement(f"{targets} = {source}\n")]

    def _scale_loss(self, call: cst.Call, scaler: str, condition, home) -> None:
        statement = self.statement(call)
        if not isinstance(statement, cst.With) or len(statement.items) != 1:
            self.plan.problems.append("`amp.scale_loss` is not the only item of a `with`")
            return
        item = statement.items[0]
        if item.item is not call or item.asname is None:
            self.plan.problems.append("`amp.scale_loss` without `as name`")
            return
        alias = _code(self.module, item.asname.name)
        function = self.function(call)
        if home is not self.module and function is not home:
            self.plan.problems.append(
                "`amp.initialize` and `amp.scale_loss` are in different functions: the "
                "GradScaler has to be shared (e.g. `self.scaler`) by hand"
            )
            return
        positional = [a.value for a in call.args if not a.keyword]
        keywords = {a.keyword.value: a.value for a in call.args if a.keyword}
        loss = keywords.get("loss", positional[0] if positional else None)
        optimizer = keywords.get("optimizers", positional[1] if len(positional) > 1 else None)
        if set(keywords) - {"loss", "optimizers", "delay_unscale"} or len(positional) > 2:
            self.plan.problems.append("`amp.scale_loss` with `loss_id`/`model`/more arguments")
            return
        if not isinstance(loss, cst.Name) or not isinstance(optimizer, cst.Name | cst.Attribute):
            self.plan.problems.append("`amp.scale_loss` of an expression (not a named loss)")
            return
        body = list(statement.body.body) if isinstance(statement.body, cst.IndentedBlock) else []
        first = body[0] if body else None
        backward = first.body[0] if isinstance(first, cst.SimpleStatementLine) else None
        if not (
            isinstance(backward, cst.Expr)
            and isinstance(backward.value, cst.Call)
            and isinstance(backward.value.func, cst.Attribute)
            and backward.value.func.attr.value == "backward"
            and _code(self.module, backward.value.func.value) == alias
        ) or any(alias in _code(self.module, s) for s in body[1:]):
            self.plan.problems.append("the `scale_loss` block does more than `backward()`")
            return
        opt = _code(self.module, optimizer)
        new_backward = backward.value.with_changes(
            func=backward.value.func.with_changes(
                value=cst.parse_expression(f"{scaler}.scale({loss.value})")
            )
        )
        lines = [first.with_changes(body=[backward.with_changes(value=new_backward)],
                                    leading_lines=statement.leading_lines), *body[1:]]  # fmt: skip
        self.plan.edits[statement] = lambda _u: cst.FlattenSentinel(lines)
        self._steps(opt, scaler, function)
        self._autocast(statement, loss.value, condition, function)

    def _steps(self, opt: str, scaler: str, function) -> None:
        found = False
        for node in self.nodes:
            if not (
                isinstance(node, cst.SimpleStatementLine)
                and len(node.body) == 1
                and isinstance(node.body[0], cst.Expr)
                and isinstance(node.body[0].value, cst.Call)
            ):
                continue
            call = node.body[0].value
            if not (
                isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "step"
                and _code(self.module, call.func.value) == opt
                and self.function(node) is function
            ):
                continue
            if call.args:
                self.plan.problems.append(f"`{opt}.step(...)` with a closure")
                continue
            found = True
            lines = [
                cst.parse_statement(f"{scaler}.step({opt})\n").with_changes(
                    leading_lines=node.leading_lines
                ),
                cst.parse_statement(f"{scaler}.update()\n"),
            ]
            self.plan.edits[node] = lambda _u, lines=lines: cst.FlattenSentinel(lines)
        if not found:
            self.plan.problems.append(
                f"no `{opt}.step()` statement next to `amp.scale_loss`: scaled gradients must "
                "be stepped through `scaler.step`"
            )

    def _autocast(self, scale_with: cst.With, loss: str, condition, function) -> None:
        """Wrap the statements that compute ``loss`` (before the scale_loss) in autocast."""
        statement: cst.CSTNode = scale_with
        while statement is not None and statement is not function:
            located = self.block_of(statement) if isinstance(statement, cst.BaseStatement) else None
            if located is not None:
                block, index = located
                body = _statements(block) or []
                region = self._region(body[:index], loss)
                if region:
                    self._wrap(region, condition)
                    return
            statement = self.parent(statement)
        self.plan.problems.append(
            f"`{loss}` is not computed in the function that scales it: place "
            '`torch.amp.autocast("cuda", dtype=torch.float16)` around the forward by hand'
        )

    def _region(self, before: list[cst.BaseStatement], loss: str) -> list[cst.BaseStatement]:
        """The forward pass and loss: the statements feeding ``loss``, walking back from the
        scale. Statements that do not feed it are crossed only if they call nothing (`last =
        step % n == 0`); ones that do (`optimizer.zero_grad()`) end the walk."""
        needed: set[str] = {loss}
        feeding: list[int] = []
        starts: list[int] = []  # feeding statements that call something
        for i in range(len(before) - 1, -1, -1):
            assigned, used, calls = self._names(before[i])
            if assigned & needed:
                needed |= used
                feeding.append(i)
                if calls:
                    starts.append(i)
            elif calls:
                break
        # From the first feeding statement that calls something to the last feeding one.
        if not starts:
            return []
        return before[min(starts) : max(feeding) + 1]

    def _names(self, statement: cst.CSTNode) -> tuple[set[str], set[str], bool]:
        assigned: set[str] = set()
        used: set[str] = set()
        calls = False

        class Names(cst.CSTVisitor):
            def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
                assigned.update(_targets(node.target))

            def visit_AugAssign(self, node: cst.AugAssign) -> None:
                assigned.update(_targets(node.target))

            def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
                assigned.update(_targets(node.target))

            def visit_Name(self, node: cst.Name) -> None:
                used.add(node.value)

            def visit_Call(self, node: cst.Call) -> None:
                nonlocal calls
                calls = True

        statement.visit(Names())
        return assigned, used, calls

    def _wrap(self, region: list[cst.BaseStatement], condition) -> None:
        if any(s in self.plan.edits for s in region):
            self.plan.problems.append("the forward pass overlaps another rewritten statement")
            return
        enabled = f", enabled={_code(self.module, condition)}" if condition is not None else ""
        header = f'with torch.amp.autocast("cuda", dtype=torch.float16{enabled}):\n    pass\n'
        with_node = cst.ensure_type(cst.parse_statement(header), cst.With)
        first, rest = region[0], region[1:]
        inner = [first.with_changes(leading_lines=()), *rest]
        wrapped = with_node.with_changes(
            body=with_node.body.with_changes(body=inner), leading_lines=first.leading_lines
        )
        self.plan.edits[first] = lambda _u: wrapped
        for statement in rest:
            self.plan.edits[statement] = lambda _u: cst.RemoveFromParent()

    def _master_params(self, call: cst.Call, scaler: str, home) -> None:
        statement = self.statement(call)
        positional = [a.value for a in call.args if not a.keyword]
        if (
            len(call.args) != 1
            or not positional
            or not isinstance(statement, cst.SimpleStatementLine)
        ):
            self.plan.problems.append("`amp.master_params` outside a simple statement")
            return
        if home is not self.module and self.function(call) is not home:
            self.plan.problems.append("`amp.master_params` in another function than initialize")
            return
        opt = _code(self.module, positional[0])
        params = cst.parse_expression(
            f'(p for group in {opt}.param_groups for p in group["params"])'
        )
        self.plan.edits[call] = lambda _u: params
        unscale = cst.parse_statement(f"{scaler}.unscale_({opt})\n")
        self.plan.edits[statement] = lambda u: cst.FlattenSentinel(
            [unscale.with_changes(leading_lines=u.leading_lines), u.with_changes(leading_lines=())]
        )

    def _state(self, call: cst.Call, scaler: str, home) -> None:
        if home is not self.module and self.function(call) is not home:
            self.plan.problems.append(
                "`amp.state_dict`/`load_state_dict` in another function than initialize"
            )
            return
        member = cst.ensure_type(call.func, cst.Attribute).attr.value
        func = cst.parse_expression(f"{scaler}.{member}")
        self.plan.edits[call] = lambda u: u.with_changes(func=func)
        self.plan.notes.append(
            "checkpoints saved by apex need `ampmigrate convert-checkpoint` before loading"
        )


def _targets(node: cst.BaseExpression) -> set[str]:
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, cst.Tuple | cst.List):
        return {n for e in node.elements for n in _targets(e.value)}
    return set()


def rewrite(module: cst.Module) -> cst.Module:
    """Apply the plan to ``module`` (re-planned: other fixes may have changed it)."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    scopes, parents = wrapper.resolve(ScopeProvider), wrapper.resolve(ParentNodeProvider)
    found = _Planner(module, scopes, parents).build()
    if found is None or found.problems:
        return module
    return module.visit(ReplaceNodes(found.edits))


class ApexO1(cst.CSTVisitor):
    """One finding per file that uses apex.amp: the O1 rewrite, or what blocks it."""

    METADATA_DEPENDENCIES = (ScopeProvider, ParentNodeProvider)  # shared with the other rules

    def __init__(self, rule: Rule, target_keras: int = 3) -> None:
        super().__init__()
        self.rule = rule
        self.findings: list[Finding] = []

    def visit_Module(self, node: cst.Module) -> bool:
        scopes, parents = self.metadata[ScopeProvider], self.metadata[ParentNodeProvider]
        found = _Planner(node, scopes, parents).build()
        if found is None or found.anchor is None:
            return False
        notes = "".join(f"; note: {n}" for n in found.notes)
        if found.problems:
            message = "apex O1 cannot be rewritten automatically here: " + "; ".join(
                dict.fromkeys(found.problems)
            )
            self.findings.append(Finding(self.rule.code, message, found.anchor, None))
            return False
        message = (
            "apex.amp O1 can be rewritten to torch.amp: GradScaler instead of "
            "`amp.initialize`, an autocast region around the forward pass and loss, "
            "`scaler.scale(loss).backward()`, `scaler.step` + `scaler.update`" + notes
        )
        fix = Fix("unsafe", cst_target=node, cst_build=rewrite, add_imports=frozenset({"torch"}))
        self.findings.append(Finding(self.rule.code, message, found.anchor, fix))
        return False
