"""apex beside native AMP, chosen at run time through two flags on the object.

The Hugging Face 4.x ``Trainer`` and its many copies pick a backend once, in ``__init__``:
``if self.fp16_backend == "amp": self.use_amp = True; self.scaler = GradScaler() else:
self.use_apex = True``, and every later branch asks a flag (``if self.use_apex:
amp.initialize(...)``, ``elif self.use_apex: with amp.scale_loss(...)``, ``amp.master_params(...)
if self.use_apex else model.parameters()``). The native branches already are apex O1's
equivalent, written by the same authors: the migration is to let apex's choice run them. This
mode makes the choice run the native arm and folds every test of the apex flag (now always
false). Once the shape is recognized, everything that would make that inexact is refused with
its reason (the 46th review's probes: a native arm that is not the CUDA one, a forward whose
autocast asks another switch, apex on only under a further condition, `initialize` options
the native path does not keep, a loss scale apex saved and the native path does not, the flag
stored or read elsewhere); where an apex call is left after folding, the O1 planner runs as
usual.
"""

from __future__ import annotations

import ast

import libcst as cst

from ampmigrate.apex.common import _code, _statements, initialize_arguments, literal_bool
from ampmigrate.apex.guards import _branch
from ampmigrate.apex.regions import _KEEP
from ampmigrate.apex.verdict import not_o1
from ampmigrate.replace import ReplaceNodes

# what `initialize` may say besides its models and optimizers for the native arm to stand in
_PLAIN_OPTIONS = frozenset({"models", "optimizers", "opt_level", "verbosity"})


def _self_attribute(node: cst.CSTNode) -> str | None:
    """``self.use_apex`` -> ``use_apex``."""
    if (
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Name)
        and node.value.value == "self"
    ):
        return node.attr.value
    return None


class BackendSwitch:
    """The planner's mode for apex chosen beside native AMP by a flag on ``self``."""

    def _backend_switched(self, init: cst.Call) -> str | None:
        """The rewritten module's code (its plan refused where a check fails), or None (not
        this mode: nothing planned)."""
        for flag in self._apex_flags(init):
            chosen = self._choice(flag)
            if chosen is not None:
                return self._run_native(init, flag, *chosen)
        return None

    def _apex_flags(self, init: cst.Call) -> list[str]:
        """The ``self`` attributes tested by the ``if``s whose body holds ``initialize``."""
        flags: list[str] = []
        for outer in self.ancestors(init):
            if isinstance(outer, cst.If) and self.within(init, outer.body):
                flags += [
                    name
                    for node in self._subtree(outer.test)
                    if (name := _self_attribute(node)) is not None and name not in flags
                ]
        return flags

    def _cuda_scaler(self, node: cst.CSTNode) -> bool:
        """``torch.amp.GradScaler(...)`` / ``torch.cuda.amp.GradScaler(...)``: CUDA's own
        (not torch_xla's, nor a text that only names it)."""
        if not isinstance(node, cst.Call) or not any(
            q.startswith("torch.") and q.endswith(".GradScaler") for q in self.qualified(node.func)
        ):
            return False
        device = next((a.value for a in node.args if a.keyword is None or a.keyword.value
                       == "device"), None)  # fmt: skip
        return device is None or (
            isinstance(device, cst.SimpleString) and device.evaluated_value == "cuda"
        )

    def _guarded_by(self, node: cst.CSTNode, flag: str) -> bool:
        """``node`` sits in the body of an ``if`` (or the true side of a conditional
        expression) whose test reads ``self.<flag>``."""
        for outer in self.ancestors(node):
            body = outer.body if isinstance(outer, cst.If | cst.IfExp) else None
            if (
                body is not None
                and self.within(node, body)
                and any(_self_attribute(n) == flag for n in self._subtree(outer.test))
            ):
                return True
        return False

    def _choice(
        self, flag: str
    ) -> tuple[cst.If, cst.IndentedBlock, cst.If | cst.Else, str, cst.CSTNode] | None:
        """The ``if``/``elif``/``else`` chain that sets the apex flag true in one arm and
        turns native AMP on in another: another flag set true there, and CUDA's GradScaler
        made in that arm or under a test of that flag. (Its first ``if``, the native arm's
        block, the apex arm, the native flag, the apex flag's store.) None: not that shape."""
        stores = [
            n for n in self.nodes
            if isinstance(n, cst.Assign) and len(n.targets) == 1
            and _self_attribute(n.targets[0].target) == flag and literal_bool(n.value) is True
        ]  # fmt: skip
        for store in stores:  # (another store of True is the refusal's: _inexact)
            chosen = self._chosen_by(store, flag)
            if chosen is not None:
                return chosen
        return None

    def _chosen_by(
        self, store: cst.Assign, flag: str
    ) -> tuple[cst.If, cst.IndentedBlock, cst.If | cst.Else, str, cst.CSTNode] | None:
        """``_choice`` for the one store ``self.<flag> = True``."""
        statement = self.statement(store)
        if self.block_of(statement) is None:
            return None
        arm = self.parent(self.parent(statement))
        if not isinstance(arm, cst.If | cst.Else) or arm.body is not self.parent(statement):
            return None
        root = self.parent(arm) if isinstance(arm, cst.Else) else arm
        while self._is_elif(root):
            root = self.parent(root)
        arms: list[cst.CSTNode] = [root]
        while isinstance(arms[-1], cst.If) and arms[-1].orelse is not None:
            arms.append(arms[-1].orelse)
        scalers = [n for n in self.nodes if self._cuda_scaler(n)]
        for other in arms:
            native = other.body
            if other is arm or not isinstance(native, cst.IndentedBlock):
                continue
            for node in self._subtree(native):
                name = (
                    _self_attribute(node.targets[0].target)
                    if isinstance(node, cst.Assign) and len(node.targets) == 1
                    and literal_bool(node.value) is True
                    else None
                )  # fmt: skip
                if name is None or name == flag:
                    continue
                if any(self.within(s, native) or self._guarded_by(s, name) for s in scalers):
                    return root, native, arm, name, store
        return None

    def _run_native(
        self,
        init: cst.Call,
        flag: str,
        switch: cst.If,
        native: cst.IndentedBlock,
        apex: cst.If | cst.Else,
        on: str,
        store: cst.Assign,
    ) -> str | None:
        saved = (dict(self.plan.edits), set(self.removed), list(self.plan.notes))
        problems = list(self.plan.problems)
        if isinstance(switch.orelse, cst.Else) and not self.facts(switch.test).calls:
            # `if <native chosen>: ... else: <apex>`: the native arm's statements alone
            first = native is switch.body
            self.plan.edits[switch] = lambda u: _branch(u, u.body if first else u.orelse.body)
        else:  # an arm of a longer chain: the apex arm does what the native arm does
            self.plan.edits[apex] = lambda u: u.with_changes(body=native)
        reads = [
            node
            for node in self.nodes
            if _self_attribute(node) == flag and not isinstance(self.parent(node), cst.AssignTarget)
        ]
        folded = 0
        for node in reads:
            test = self._test_holding(node)
            if test is not None and not self.facts(test).calls:
                self._fold(node, False, "where apex was the chosen backend")
                folded += 1
        code = self.module.visit(ReplaceNodes(self.plan.edits)).code
        if self._apex_left(code):
            self.plan.edits, self.removed, self.plan.notes = saved
            self.plan.problems = problems
            return None
        # what was reported so far (apex imports and members) is all in the path that goes;
        # what is left to decide: the level, and that the native path stands in exactly
        level, refusals = self._level_of(init)
        chooser = _code(self.module, switch.test)
        if refusals:
            refusals[-1] += (
                f" (the rest would be rewritten: apex is chosen beside native AMP at run time, "
                f"by `self.{flag}`, set by the `if {chooser}:` at line {self.line(switch)}; once "
                "the level is O1, the choice of apex can run the native arm, whose autocast and "
                "GradScaler are apex O1's equivalent)"
            )
        where = (
            f"apex is chosen beside native AMP at run time, by `self.{flag}` (the `if {chooser}:` "
            f"at line {self.line(switch)}), and the arm that chooses it could do what the native "
            f"arm does (`self.{on}`), but "
        )
        refusals += [f"line {line}: {where}{why}" for line, why in self._inexact(
            init, flag, on, native, apex, store, reads
        )]  # fmt: skip
        self.plan.problems = refusals
        self.plan.min_torch = None  # nothing new is written: the native path stays
        if self.plan.problems:
            return code
        self.plan.summary = (
            f"apex.amp beside native AMP, chosen at run time by `self.{flag}`: the choice of "
            "apex runs the native path (autocast + GradScaler), apex O1's equivalent"
        )
        self.plan.notes.append(
            f"in the `if {chooser}:` at line {self.line(switch)}, the arm that chose apex does "
            f"what the native arm does, and `self.{flag}` is never true now: {folded} test(s) "
            "of it were folded and the apex branches went (behaviour change: a run that chose "
            "apex trains with the native path, autocast + GradScaler; one without apex "
            "installed no longer raises; a log line may still name apex; a forward the "
            f"native path runs outside its autocast (not under `if self.{on}:`, an "
            "evaluation say) ran under apex's casts after `initialize` and runs in float32 "
            "now"
            + (
                "; checkpoints saved under apex hold its loss-scale format: convert them with "
                "`ampmigrate convert-checkpoint`)"
                if self._apex_state_calls()
                else ")"
            )
        )
        self._float32_forwards(init, on)
        for node in reads:  # `if self.use_apex and training:` (_read_checked)
            parent = self.parent(node)
            if isinstance(parent, cst.BooleanOperation) and parent.left is node:
                also = _code(self.module, parent.right)
                self.plan.notes.append(
                    f"behaviour change: `amp.initialize` ran only where `{also}` held too (line "
                    f"{self.line(node)}): a run that chose apex ran without apex's casts and "
                    f"loss scale where `{also}` was false until then (an evaluation before any "
                    "training, say), and runs the native path there now"
                )
        if level != "O1":
            self.plan.notes.append(level)
        return code

    def _inexact(
        self,
        init: cst.Call,
        flag: str,
        on: str,
        native: cst.IndentedBlock,
        apex: cst.If | cst.Else,
        store: cst.Assign,
        reads: list[cst.CSTNode],
    ) -> list[tuple[int, str]]:
        """Why the apex choice running the native arm would not be apex O1: (line, reason)
        each, none where it would."""
        found: list[tuple[int, str]] = []
        statement = self.statement(store)
        for other in apex.body.body:  # the apex arm only sets the flag, or raises
            last = other.body.body[-1] if isinstance(other, cst.If) else None
            if other is statement or (
                isinstance(other, cst.If)
                and other.orelse is None
                and isinstance(last, cst.SimpleStatementLine)
                and isinstance(last.body[-1], cst.Raise)
            ):
                continue
            found.append((
                self.line(other),
                f"that arm also runs `{_code(self.module, other).strip()[:60]}`, which the "
                "native arm does not: make the apex arm only set the flag, then migrate",
            ))  # fmt: skip
        for node in self.nodes:  # the flag set anywhere else, in any form
            target = node.target if isinstance(node, cst.AnnAssign | cst.AugAssign) else None
            stored = target is not None and _self_attribute(target) == flag
            if isinstance(node, cst.Element) and _self_attribute(node.value) == flag:
                stored = isinstance(self.parent(self.parent(node)), cst.AssignTarget)
            if (
                isinstance(node, cst.Assign)
                and node is not store
                and any(_self_attribute(t.target) == flag for t in node.targets)
            ):
                stored = literal_bool(node.value) is not False or len(node.targets) != 1
            if isinstance(node, cst.SimpleString) and node.evaluated_value == flag:
                stored = True  # (`setattr(self, "use_apex", ...)`)
            if stored:
                found.append((
                    self.line(node),
                    f"`{_code(self.module, self.statement(node)).strip()[:60]}` sets it too, "
                    "which may choose apex where the fold says it is never chosen: migrate by "
                    "hand",
                ))  # fmt: skip
        elsewhere = self._flag_elsewhere(flag)
        if elsewhere is not None:
            shown, line, how = elsewhere
            found.append((
                self.line(store),
                f"{shown} {how} `.{flag}` at its line {line} (a subclass or another object "
                "choosing apex, or code that runs apex's path where it is chosen): migrate "
                f"{shown}'s use with this file's, by hand",
            ))  # fmt: skip
        options = sorted(set(initialize_arguments(init)[0]) - _PLAIN_OPTIONS - {"enabled"})
        if options:
            found.append((
                self.line(init),
                f"`amp.initialize` also sets {', '.join(f'`{o}`' for o in options)}, which the "
                "native arm's GradScaler does not: migrate by hand",
            ))  # fmt: skip
        found += self._native_differs(init, flag, on, native, reads)
        return found

    def _native_differs(
        self,
        init: cst.Call,
        flag: str,
        on: str,
        native: cst.IndentedBlock,
        reads: list[cst.CSTNode],
    ) -> list[tuple[int, str]]:
        """Where the native path would not do what apex's did (the 46th review's second round
        of probes: a native scaler or autocast switched or configured otherwise, a bfloat16
        arm, an apex branch that also clips, accumulates or steps, a native path without
        `scaler.step`): the native path is taken only in the exact form the Hugging Face 4.x
        Trainer and its copies have; every other read of the apex flag is refused."""
        found: list[tuple[int, str]] = []
        scaler = None
        for statement in native.body:  # `self.use_amp = True`, `self.scaler = GradScaler()`
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
            target = (
                small.targets[0].target
                if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
            )  # fmt: skip
            if _self_attribute(target) == on and literal_bool(small.value) is True:
                continue
            if _self_attribute(target) is not None and self._plain_scalers(small.value):
                scaler = _code(self.module, target)
                continue
            found.append((
                self.line(statement),
                f"the native arm also runs `{_code(self.module, statement).strip()[:60]}`, "
                "which the apex choice would run too: migrate by hand",
            ))  # fmt: skip
        for made in (n for n in self.nodes if self._cuda_scaler(n)):
            if len(made.args) > 1 or any(a.keyword is not None for a in made.args):
                found.append((
                    self.line(made),
                    f"the native GradScaler is made with `{_code(self.module, made)}`, where "
                    "apex's loss scale was dynamic from 2**16: migrate by hand",
                ))  # fmt: skip
        for block in (n for n in self.nodes if isinstance(n, cst.With)):
            calls = [i.item for i in block.items if isinstance(i.item, cst.Call)]
            if not any("autocast" in _code(self.module, c.func) for c in calls):
                continue
            if any(
                a.keyword is not None
                and (a.keyword.value != "dtype"
                     or _code(self.module, a.value) not in ("torch.float16", "torch.half"))
                for c in calls for a in c.args
            ):  # fmt: skip
                found.append((
                    self.line(block),
                    "the native autocast here is switched or typed by its arguments "
                    f"(`{_code(self.module, calls[0])}`), not by `self.{on}` alone: migrate "
                    "by hand",
                ))  # fmt: skip
        autocasts = [
            n for n in self.nodes
            if isinstance(n, cst.Call)
            and any(q in ("torch.amp.autocast", "torch.cuda.amp.autocast",
                          "torch.autocast", "torch.cuda.amp.autocast_mode.autocast")
                    for q in self.qualified(n.func))
            and isinstance(self.parent(self.parent(n)), cst.With)
        ]  # fmt: skip
        apart = [a for a in autocasts if not self._guarded_by(a, on)]
        if not autocasts or apart:
            found.append((
                self.line(apart[0]) if apart else self.line(native),
                f"the forward's autocast at this line runs under another test than `self.{on}`"
                if apart
                else f"no `with autocast(...)` is under a test of `self.{on}` here (an autocast "
                "made in a helper or kept in a variable is not followed)",
            ))  # fmt: skip
        steps = [
            n for n in self.nodes
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
            and n.func.attr.value == "step" and scaler is not None
            and _code(self.module, n.func.value) == scaler and self._exactly_under(n, on)
        ]  # fmt: skip
        if scaler is None or not steps:
            found.append((
                self.line(native),
                f"the native path steps through no `{scaler or 'scaler'}.step(...)` under "
                f"`if self.{on}:`: migrate by hand",
            ))  # fmt: skip
        for node in reads:
            if not self._read_checked(node, init, flag, on, scaler):
                found.append((
                    self.line(node),
                    f"`self.{flag}` is read here in a form whose native counterpart this rewrite "
                    "does not check (it takes an `if` holding `initialize` alone, an `elif` "
                    "holding `amp.scale_loss(...)` after the native scaled backward, and the "
                    "`amp.master_params(...) if ... else ...` of a clip after the native "
                    "`unscale_`): migrate by hand",
                ))  # fmt: skip
        state = self._apex_state_calls()
        if state:
            found.append((
                self.line(state[0]),
                "apex's state is saved or loaded here under the apex choice, and the native "
                "path's checkpoint is not checked against it: migrate by hand",
            ))  # fmt: skip
        return found

    def _plain_scalers(self, value: cst.BaseExpression) -> bool:
        """A GradScaler made with no options (CUDA's, or fairscale's ``ShardedGradScaler()``),
        or a conditional expression between two such."""
        if isinstance(value, cst.IfExp):
            return self._plain_scalers(value.body) and self._plain_scalers(value.orelse)
        if not isinstance(value, cst.Call):
            return False
        sharded = _code(self.module, value.func).endswith("ShardedGradScaler")
        return (self._cuda_scaler(value) or sharded) and all(
            a.keyword is None and isinstance(a.value, cst.SimpleString) for a in value.args
        )

    def _exactly_under(self, node: cst.CSTNode, on: str) -> bool:
        """``node`` in the body of an ``if``/``elif`` whose test is ``self.<on>`` alone."""
        return any(
            isinstance(a, cst.If) and self.within(node, a.body) and _self_attribute(a.test) == on
            for a in self.ancestors(node)
        )

    def _read_checked(
        self, node: cst.CSTNode, init: cst.Call, flag: str, on: str, scaler: str | None
    ) -> bool:
        """``node`` (a read of ``self.<flag>``) is one of the three forms whose native
        counterpart is checked: ``if self.use_apex: <initialize alone>``; ``if self.use_amp:
        <scaler>.scale(loss).backward() elif self.use_apex: with amp.scale_loss(loss, ...) as s:
        s.backward()``; ``amp.master_params(opt) if self.use_apex else ...`` in a statement
        after ``if self.use_amp: <scaler>.unscale_(opt)``."""
        parent = self.parent(node)
        if (  # `if self.use_apex and training:` (HF 4.5's `_wrap_model`, UniPELT, the 47th
            # review): False stops `and` before it reads the rest, a name or attribute
            isinstance(parent, cst.BooleanOperation)
            and isinstance(parent.operator, cst.And)
            and parent.left is node
            and isinstance(parent.right, cst.Name | cst.Attribute)
        ):
            node, parent = parent, self.parent(parent)
            if not (isinstance(parent, cst.If) and parent.test is node):
                return False
            body = list(parent.body.body) if isinstance(parent.body, cst.IndentedBlock) else []
            return len(body) == 1 and self.within(init, body[0]) and not self._is_elif(parent)
        if isinstance(parent, cst.If) and parent.test is node:
            body = list(parent.body.body) if isinstance(parent.body, cst.IndentedBlock) else []
            if len(body) == 1 and self.within(init, body[0]) and not self._is_elif(parent):
                return True
            before = self.parent(parent) if self._is_elif(parent) else None
            with_ = body[0] if len(body) == 1 else None
            return (
                isinstance(before, cst.If)
                and _self_attribute(before.test) == on
                and isinstance(with_, cst.With)
                and "amp.scale_loss" in _code(self.module, with_.items[0].item)
                and len(with_.body.body) == 1
                and _code(self.module, with_.body.body[0]).strip().endswith(".backward()")
                and len(before.body.body) == 1
                and scaler is not None
                and _code(self.module, before.body.body[0]).strip().startswith(f"{scaler}.scale(")
            )
        if isinstance(parent, cst.IfExp) and parent.test is node:
            if "master_params" not in _code(self.module, parent.body) or scaler is None:
                return False
            statement: cst.CSTNode = self.statement(parent)
            for outer in (statement, *self.ancestors(statement)):
                located = self.block_of(outer) if isinstance(outer, cst.BaseStatement) else None
                if located is None:
                    continue
                block, index = located
                for earlier in (_statements(block) or [])[:index]:
                    if (
                        isinstance(earlier, cst.If)
                        and _self_attribute(earlier.test) == on
                        and f"{scaler}.unscale_(" in _code(self.module, earlier.body)
                    ):
                        return True
            return False
        return False

    def _apex_state_calls(self) -> list[cst.Call]:
        return [
            n for n in self.nodes
            if isinstance(n, cst.Call)
            and {"apex.amp.state_dict", "apex.amp.load_state_dict"} & set(self.qualified(n.func))
        ]  # fmt: skip

    def _flag_elsewhere(self, flag: str) -> tuple[str, int, str] | None:
        """Another file of the project that stores into ``.<flag>`` anything but False, in any
        form (a tuple, an annotation, ``setattr``), or reads it (its apex branch would be dead,
        and it would still need apex): (the file as shown, the line, "sets" or "reads")."""
        word = flag.encode()
        for shown, data in self._other_files():
            if word not in data:
                continue
            try:
                tree = ast.parse(data)
            except (SyntaxError, ValueError):
                continue
            cleared = {  # `x.use_apex = False`: the fold holds there
                id(node.targets[0])
                for node in ast.walk(tree)
                if isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.value, ast.Constant) and node.value.value is False
            }  # fmt: skip
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and node.value == flag:
                    return shown, node.lineno, "names"
                if not (isinstance(node, ast.Attribute) and node.attr == flag):
                    continue
                if isinstance(node.ctx, ast.Load):
                    return shown, node.lineno, "reads"
                if id(node) not in cleared:
                    return shown, node.lineno, "sets"
        return None

    def _float32_forwards(self, init: cst.Call, on: str) -> None:
        """The initialized model's forwards that no autocast of the native path holds
        (``self.model(x)`` in an evaluation): apex O1 cast them once the apex choice had
        initialized; the native path runs them in float32. Stated."""
        statement = self.statement(init)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        if not isinstance(small, cst.Assign) or len(small.targets) != 1:
            return
        target = small.targets[0].target
        first = target.elements[0].value if isinstance(target, cst.Tuple) else target
        home = self.function(init)
        spelled = {_code(self.module, first)}
        spelled |= {  # `self.model = model`
            _code(self.module, t.target)
            for n in self._subtree(home)
            if isinstance(n, cst.Assign) and _code(self.module, n.value) in spelled
            for t in n.targets
        }
        outside = [  # (a plain name only where `initialize` binds it; `self.model` anywhere)
            n for n in self.nodes
            if isinstance(n, cst.Call) and _code(self.module, n.func) in spelled
            and ("." in _code(self.module, n.func) or self.function(n) is home)
            and not any(isinstance(a, cst.With) and self._autocast_on(a, on)
                        for a in self.ancestors(n))
            and not any(  # (`if self.use_amp: <autocast> else: <this>`: not on that path)
                isinstance(a, cst.If) and isinstance(a.orelse, cst.Else)
                and self.within(n, a.orelse) and _self_attribute(a.test) == on
                for a in self.ancestors(n)
            )
        ]  # fmt: skip
        if outside:
            listed = ", ".join(
                f"`{_code(self.module, n.func)}(...)` (line {self.line(n)})" for n in outside[:4]
            )
            self.plan.notes.append(
                f"behaviour change: the model's forward in {listed} is outside the native "
                "path's autocast regions: under the apex choice apex O1 cast it (every forward "
                f"from `initialize` on), and it runs in float32 now: {_KEEP}"
            )

    def _autocast_on(self, block: cst.With, on: str) -> bool:
        """``with autocast(...):`` under a test of ``self.<on>``."""
        return self._guarded_by(block, on) and any(
            isinstance(i.item, cst.Call) and "autocast" in _code(self.module, i.item.func)
            for i in block.items
        )

    def _level_of(self, init: cst.Call) -> tuple[str, list[str]]:
        """("O1", []) where ``initialize``'s level is O1 for sure; the setting's note where the
        setting declares it; the blockers where neither."""
        level = initialize_arguments(init)[0].get("opt_level")
        if level is None or (isinstance(level, cst.SimpleString) and level.evaluated_value == "O1"):
            return "O1", []
        blockers = len(self.plan.problems)
        notes = len(self.plan.notes)
        if isinstance(level, cst.SimpleString):
            switch = None
            self.problem(init, not_o1(level.evaluated_value))
        else:
            switch = self._level_switch(level, init)
            if switch is None and len(self.plan.problems) == blockers:
                switch = self._level_choices(level, init)
        del self.plan.notes[notes:]
        refusals = self.plan.problems[blockers:]
        del self.plan.problems[blockers:]
        if refusals or switch is None:
            spelled = _code(self.module, level)
            return "", refusals or [
                f"line {self.line(init)}: opt_level `{spelled}` is not provably O1"
            ]
        if switch is True:
            return "O1", []
        spelled = _code(self.module, level)
        return "", [  # (the 74th review's TorchBlocks: an O0 run, float32 under apex, got fp16)
            f"line {self.line(init)}: opt_level `{spelled}` is taken as O1 or O0, as the "
            f"setting `apex-opt-level` ({self.declared}) declares, and a run given O0 (apex "
            "off, float32) would train on the native arm in float16: this shape's rewrite "
            f'does not keep the apex arm\'s `{spelled} == "O1"`; add it by hand'
        ]
