"""The apex imports and availability checks (``amp is None``, ``try: from apex import amp``) that
the rewrite removes or folds.
"""

from __future__ import annotations

import os
import re

import libcst as cst

from ampmigrate.apex.common import _code, _imports_something, _statements, none_comparison
from ampmigrate.apex.verdict import (
    APEX,
    ASSERTS_MISSING,
    FP16_UTILS,
    GUARD_DOES_MORE,
    IMPORT_ERRORS,
    NOT_PRECISION,
    SUPPORTED,
    besides_amp,
    beyond_amp,
    needs_apex,
    not_precision,
    used_as_value,
)


class Guards:
    """The guards stage of ``_Planner`` (mixed into it)."""

    def _imports(self) -> None:
        """Remove ``from apex import amp`` / ``import apex``, and a try/except that only
        guarded them (keeping assignments like ``has_apex = True``: native AMP is always there)."""
        lines: list[cst.BaseStatement] = []
        for node in self.nodes:
            if isinstance(node, cst.ImportFrom) and node.module is not None:
                module = _code(self.module, node.module)
                names = [] if isinstance(node.names, cst.ImportStar) else node.names
                if self._amp_only_import(node):
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
                elif (
                    module == "apex.fp16_utils"
                    and isinstance(node.names, cst.ImportStar)
                    and self.handing
                    and not self._reads_any(FP16_UTILS)
                ):  # nothing of it is used: it goes with amp's import
                    lines.append(self.statement(node))
                    self.plan.notes.append(
                        "`from apex.fp16_utils import *` goes: this file uses none of its names"
                    )
                elif module == "apex" or module.startswith("apex."):
                    listed = ", ".join(a.evaluated_name for a in names) or "*"
                    bound = frozenset(a.evaluated_alias or a.evaluated_name for a in names)
                    read = self._read_among(bound if names else FP16_UTILS)
                    unused = bool(names) and not read
                    unread = not names and module == "apex.fp16_utils"  # (its `*`)
                    if unread and not read:
                        self.problem(node, needs_apex(module, listed, True))
                        continue
                    if unused and (module.startswith("apex.fp16_utils") or self._unexported(node)):
                        lines.append(self.statement(node))  # (never read: it only needs apex)
                        self.plan.notes.append(
                            f"`from {module} import {listed}` goes: this file never reads it"
                        )
                        continue
                    self.problem(node, needs_apex(module, listed, unused, sorted(read)))
            elif isinstance(node, cst.Import):
                names = [_code(self.module, a.name) for a in node.names]
                if any(n == "apex" or n.startswith("apex.") for n in names):
                    if names == ["apex"] and node.names[0].asname is None and self._beyond_amp():
                        self._stays("import apex")  # for `apex.parallel...`; amp's uses go
                    elif self._amp_only_import(node):
                        lines.append(self.statement(node))
                        self.bound |= {
                            a.evaluated_alias or _code(self.module, a.name).split(".")[0]
                            for a in node.names
                        }
                    elif all(map(not_precision, names)):
                        self._stays(f"import {', '.join(names)}")  # `import apex.optimizers`
                    elif beyond_amp(names):
                        self.problem(node, besides_amp(names))
                    else:  # `import os, apex.amp as amp, apex, torch`: amp's go, the others stay
                        beyond = self._beyond_amp()  # (then a bare `apex` stays for those)
                        going = [
                            a
                            for a in node.names
                            if _code(self.module, a.name) == "apex.amp"
                            or (_code(self.module, a.name) == "apex" and not beyond)
                        ]
                        kept = [a for a in node.names if a not in going]
                        staying = [_code(self.module, a.name) for a in kept]
                        staying = [n for n in staying if n == "apex" or n.startswith("apex.")]
                        if staying:
                            self._stays(f"import {', '.join(staying)}")
                        self.bound |= {
                            a.evaluated_alias or _code(self.module, a.name).split(".")[0]
                            for a in going
                        }
                        last = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                        self.plan.edits[node] = lambda u, k=[*kept[:-1], last]: u.with_changes(
                            names=k
                        )
        for node in self.nodes:  # `global amp` beside the import it made module-wide
            if isinstance(node, cst.Global) and {g.name.value for g in node.names} <= self.bound:
                statement = self.statement(node)
                if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
                    lines.append(statement)
        # `import os; from apex import amp; import torch` (or after `if x:` on one line): only
        # amp's import goes, and the last one left ends without a `;`
        for node in [
            n
            for n in self.nodes
            if isinstance(n, cst.SimpleStatementLine | cst.SimpleStatementSuite)
        ]:
            going = [s for s in node.body if self._amp_only_import(s)]
            if not going or len(going) == len(node.body):
                continue
            lines[:] = [
                line
                for line in lines
                if not (line is node or (isinstance(line, cst.If) and line.body is node))
            ]
            kept = [s for s in node.body if s not in going]
            kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
            self.plan.edits[node] = lambda u, k=kept: u.with_changes(body=k)
        guarded: dict[cst.Try, list[cst.BaseStatement]] = {}
        for line in lines:
            try_node = self.parent(self.parent(line))
            if isinstance(try_node, cst.Try) and self.parent(line) is try_node.body:
                guarded.setdefault(try_node, []).append(line)
            else:
                self._remove_statement(line)
        for try_node, imports in guarded.items():
            self._remove_guard(try_node, imports)
        for node in self.nodes:  # `try: from apex import amp ... else: amp = None`
            if isinstance(node, cst.Try) and isinstance(node.orelse, cst.Else):
                for statement in _statements(node.orelse.body) or []:
                    spelled = _code(self.module, statement).strip()
                    if any(spelled == f"{n} = None" for n in self.bound) and self._imports_amp_as(
                        node.body, spelled.split(" ")[0]
                    ):
                        self.problem(
                            statement,
                            f"`{spelled}` is in the `else:` of the `try` that imports apex, "
                            "which runs where the import succeeded: the original's apex path "
                            "raises on None there; put that `else:` on the `if` around the "
                            "`try` (None where the flag is off), then migrate",
                        )
        for line in lines:  # `if COND: <the import> else: amp = None` goes whole once emptied
            holder = self.parent(self.parent(line))
            if isinstance(holder, cst.Try):
                holder = self.parent(self.parent(holder))
            if not isinstance(holder, cst.If) or self.block_of(holder) is None:
                continue
            previous = self._before(holder)
            if any(self._switch_if(holder, n, previous) for n in self.bound) and all(
                s in self.removed for s in holder.body.body
            ):
                if holder not in self.removed:
                    self._remove_statement(holder)
                if holder.orelse is None and previous not in self.removed:
                    self._remove_statement(previous)  # (`amp = None` right before it)

    def _amp_only_import(self, small: cst.BaseSmallStatement) -> bool:
        """``from apex import amp``, ``from apex.amp import ...``, ``import apex.amp``: an
        import of amp alone, which goes with the rewrite."""
        if isinstance(small, cst.ImportFrom) and small.module is not None:
            module = _code(self.module, small.module)
            names = [] if isinstance(small.names, cst.ImportStar) else small.names
            return module.startswith("apex.amp") or (
                module == "apex" and [a.evaluated_name for a in names] == ["amp"]
            )
        return isinstance(small, cst.Import) and all(
            _code(self.module, a.name) in ("apex", "apex.amp") for a in small.names
        )

    def _unexported(self, node: cst.ImportFrom) -> bool:
        """An import of its own line that no other module can take from this one: not in a
        package's ``__init__``, in a module without ``__all__``, or inside a function."""
        statement = self.statement(node)
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return False
        if self.function(node) is not self.module:
            return True
        init = self.path is not None and os.path.basename(self.path) == "__init__.py"
        return not init and "__all__" not in self.text

    def _reads_any(self, names: frozenset[str]) -> bool:
        return any(self._reads(n, names) for n in self.nodes)

    def _read_among(self, names: frozenset[str]) -> set[str]:
        """The ones of ``names`` this file reads (one pass)."""
        return {n.value for n in self.nodes if self._reads(n, names)}

    def _reads(self, node: cst.CSTNode, names: frozenset[str]) -> bool:
        return (
            isinstance(node, cst.Name)
            and node.value in names
            and not (
                isinstance(self.parent(node), cst.Attribute) and self.parent(node).attr is node
            )
            and not isinstance(self.parent(node), cst.ImportAlias | cst.AsName)
        )

    def _beyond_amp(self) -> bool:
        """``apex.<member>`` is read for a member that is not mixed precision
        (``apex.parallel.convert_syncbn_model``), and for nothing else but amp."""
        members = self._apex_members()
        return bool(members & NOT_PRECISION) and members <= NOT_PRECISION | {"amp"}

    def _apex_members(self) -> set[str]:
        """The members read of ``apex`` itself (``apex.parallel``, ``apex.amp``)."""
        return {
            node.attr.value
            for node in self.nodes
            if isinstance(node, cst.Attribute)
            and isinstance(node.value, cst.Name)
            and node.value.value == "apex"
            and "apex" in self.qualified(node.value)
            and not self._in_import(node)
        }

    def _stays(self, what: str) -> None:
        self.plan.notes.append(
            f"`{what}` is not this rewrite's: it is not mixed precision, and runs with "
            "torch.amp as it ran with apex.amp; the rules for the rest of apex (AMP31x) migrate "
            "what has a torch counterpart, and where none does, apex stays a dependency for it"
        )

    def _remove_guard(self, try_node: cst.Try, imports: list[cst.BaseStatement]) -> None:
        if not self._guard_only(try_node, imports):
            self.problem(try_node, GUARD_DOES_MORE)
            return
        kept = [s for s in try_node.body.body if s not in imports and s not in self.removed]
        if any(_imports_something(s) for s in kept):
            # the guard still guards those imports (`from apex.parallel import ...`): dropping it
            # would make a program that ran without apex fail at import; only amp's import goes
            for statement in imports:
                self._remove_statement(statement)
            return
        self.dropped.add(id(try_node))
        flags = sorted(
            (
                {n for h in try_node.handlers for s in h.body.body for n in self.facts(s).assigned}
                | {  # `args.fp16 = False`, `cfg["amp"] = False`
                    _code(self.module, n.target)
                    for h in try_node.handlers
                    for n in self._subtree(h.body)
                    if isinstance(n, cst.AssignTarget) and not isinstance(n.target, cst.Name)
                }
            )
            - {"amp", "apex"}  # `amp = None`: the name itself, no switch (its use raised)
            - {n for s in imports for n in self.facts(s).assigned}  # (`apex_amp = None`)
        )
        if flags:
            listed = ", ".join(f"`{f}`" for f in flags)
            self.plan.notes.append(
                f"behaviour change: where apex was not installed, the `except` at line "
                f"{self.line(try_node.handlers[0])} set {listed}; native AMP is always there, "
                "so that branch goes: a run without apex that trained in float32 now trains "
                f"in mixed precision where the flag turns it on{self._flag_reads(try_node, flags)}"
            )
        if try_node.orelse is not None:
            kept += list(try_node.orelse.body.body)
        if kept:
            first = kept[0].with_changes(leading_lines=try_node.leading_lines)
            self.plan.edits[try_node] = lambda _u, k=[first, *kept[1:]]: cst.FlattenSentinel(k)
        else:
            self._remove_statement(try_node)

    def _flag_reads(self, try_node: cst.Try, flags: list[str]) -> str:
        """Where else the flags are read: each such test now takes its apex-installed path, also
        where it chose code other than mixed precision (apex's or torch's DDP)."""
        inside = {id(n) for n in self._subtree(try_node)}
        lines = sorted({
            self.line(n) for n in self.nodes
            if isinstance(n, cst.Name) and n.value in flags and id(n) not in inside
            and not isinstance(self.parent(n), cst.AssignTarget | cst.Attribute)
        })  # fmt: skip
        if not lines:
            return ""
        shown = ", ".join(str(n) for n in lines[:6]) + (", ..." if len(lines) > 6 else "")
        return (
            f"; every test of it (line{'s' if len(lines) > 1 else ''} {shown}) now takes the "
            "path that ran where apex was installed, also where it chose code other than "
            "mixed precision"
        )

    def _guard_only(self, node: cst.Try, imports: list[cst.BaseStatement]) -> bool:
        """Only the import and flags in the ``try``, handlers for import errors (or bare) that
        bind nothing the ``try`` does not (``amp = None``, ``has_apex = False``, a print, an
        ``if`` around a log line)."""
        if node.finalbody is not None:
            return False
        body = [s for s in node.body.body if s not in imports and s not in self.removed]
        if node.orelse is not None:
            body += list(node.orelse.body.body)
        if not all(isinstance(s, cst.SimpleStatementLine) for s in body):
            return False
        located = self.block_of(node)
        before = _statements(located[0])[: located[1]] if located else []
        # (the names the import binds: `from apex import amp as apex_amp`, `apex_amp = None`)
        bound = {n for s in [*before, *body, *imports] for n in self.facts(s).assigned}
        bound |= {"amp", "apex"}
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
            if not all(isinstance(s, cst.SimpleStatementLine | cst.If) for s in statements):
                return False  # (an `if` that only logs the missing apex binds nothing either)
            last = statements[-1]
            raises = isinstance(last, cst.SimpleStatementLine) and isinstance(
                last.body[-1], cst.Raise
            )  # what a handler that always raises binds is never read after the `try`
            if not raises and {n for s in statements for n in self.facts(s).assigned} - bound:
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
                    and all(
                        _probe(n)
                        for n in self._subtree(owner.test)
                        if isinstance(n, cst.Call | cst.Await | cst.NamedExpr | cst.Yield)
                    )
                    and self.block_of(owner) is not None
                ):
                    self.plan.edits[statement] = lambda _u: cst.RemoveFromParent()
                    self._remove_statement(owner)
                    return
                clause = self.parent(block)
                if isinstance(clause, cst.Else):  # `else: pass` is no `else`
                    self.plan.edits[statement] = lambda _u: cst.RemoveFromParent()
                    self.plan.edits[clause] = lambda _u: cst.RemoveFromParent()
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
                if any(self.within(node, c) for c in self.scale_reads):
                    continue  # apex's loss scale, read through its state (_read_scales)
                if self._probe(node):
                    continue
                if (
                    (APEX in self.qualified(node) or self._amp_only_apex(node))
                    and not self._in_import(node)
                    and not self._rebound_here(node)
                ):
                    self._guard(node)

    def _amp_only_apex(self, node: cst.CSTNode) -> bool:
        """``apex`` itself (``import apex``) in a file that uses nothing of apex but its amp:
        its import goes with the rewrite, so a test of it (mmdetection's ``if apex is None:
        raise ...``) is an availability test like one of ``amp``."""
        if not (isinstance(node, cst.Name) and self.qualified(node) == {"apex"}):
            return False
        if self._only_amp is None:
            chains = [
                n for n in self.nodes
                if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name)
                and self.qualified(n.value) == {"apex"}
            ]  # fmt: skip
            self._only_amp = all(c.attr.value == "amp" for c in chains)
        return self._only_amp

    def _rebound_here(self, node: cst.CSTNode) -> bool:
        """``amp`` read after an earlier statement of a block that holds it assigned the
        name something else (CLVC's ``amp = 32768 * 0.8 / peak``): not apex's module there
        (verdict's ``_rebound``)."""
        while isinstance(node, cst.Attribute):
            node = node.value
        if not isinstance(node, cst.Name):
            return False
        child: cst.CSTNode = self.statement(node)
        for above in self.ancestors(child):
            body = _statements(above) if isinstance(above, cst.IndentedBlock | cst.Module) else None
            if body is not None and child in body:
                for earlier in reversed(body[: body.index(child)]):
                    small = earlier.body if isinstance(earlier, cst.SimpleStatementLine) else []
                    compound = not small and not isinstance(earlier, cst.FunctionDef | cst.ClassDef)
                    if compound and self._imports_amp_as(earlier, node.value):
                        return False  # (`if fp16: from apex import amp` after `amp = None`)
                    if any(isinstance(b, cst.Import | cst.ImportFrom) for b in small):
                        if node.value in self.facts(earlier).assigned | {
                            _code(self.module, a.asname.name if a.asname else a.name)
                            for b in small
                            if isinstance(b, cst.Import | cst.ImportFrom)
                            and not isinstance(b.names, cst.ImportStar)
                            for a in b.names
                        }:
                            return False  # imported again: apex's (or another module)
                        continue
                    if (
                        any(isinstance(b, cst.Assign | cst.AnnAssign) for b in small)
                        and node.value in self.facts(earlier).assigned
                    ):
                        return True
            if isinstance(above, cst.FunctionDef | cst.ClassDef | cst.Lambda):
                return False
            child = above
        return False

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
            on = none_comparison(parent, node)
            if on is not None:
                expr, value = parent, on
            else:
                parent = None
        elif not isinstance(
            parent, cst.If | cst.Assert | cst.BooleanOperation | cst.UnaryOperation
        ):
            parent = None
        holder = self.parent(node)
        if (
            parent is None
            and isinstance(holder, cst.Assign)
            and holder.value is node
            and len(holder.targets) == 1
            and isinstance(holder.targets[0].target, cst.Attribute)
        ):
            # judged once the GradScaler exists (Handles._through_stores)
            self.kept[_code(self.module, holder.targets[0].target)] = node
            return
        switch = self._switch_of(node) if parent is not None else None
        if switch is not None:  # `amp` is apex's module exactly where the switch holds
            test = cst.parse_expression(switch[1] if value else f"not {switch[1]}")
            self.plan.edits[expr] = lambda _u, t=test: t
            return
        loose = self._switch_of(node, readable=False) if parent is not None else None
        if loose is not None:  # (a test that cannot be read again: the scaler's switch)
            self.switch_reads.append((expr, value, loose[0]))
            return
        unset = self._unset_elsewhere(node) if parent is not None else None
        if unset is not None:  # a test of `amp` that is not (only) apex's availability
            self.problem(node, unset)
            return
        if parent is None:
            arg = self.parent(node)
            call = self.parent(arg) if isinstance(arg, cst.Arg) else None
            if self.handing and isinstance(call, cst.Call) and not arg.star:
                self.passed.append(node)  # judged once the GradScaler exists (PassedHandles)
                return
            callee = _code(self.module, call.func) if isinstance(call, cst.Call) else None
            self.problem(node, used_as_value(_code(self.module, node), callee))
            return
        self._fold(expr, value)

    def _switch_of(self, node: cst.CSTNode, readable: bool = True) -> tuple[cst.If, str] | None:
        """``if COND: from apex import amp`` (or in a ``try`` there) ``else: amp = None``, a
        statement of the body that reads ``node`` (the name ``amp``), before it, and nothing
        else binds ``amp`` there: the name is apex's module exactly where COND holds (a flag
        that needs no call to read, stored nowhere in the file, unless not ``readable``: COND
        is not read again), so a test of it is a test of COND, not of apex's availability.
        (that ``if``, COND's text); None: not so bound."""
        if not isinstance(node, cst.Name):
            return None
        reader, name = self.function(node), node.value
        found, home = None, reader
        for home in (reader, self.module) if reader is not self.module else (reader,):
            if home is self.module and name in self._assigned_here(reader):
                break  # (a local of the reading function, not the module's switch)
            body = home.body.body if isinstance(home, cst.FunctionDef) else self.module.body
            found = next(
                (s for i, s in reversed(list(enumerate(body)))
                 if (home is self.module or self.order[id(s)] < self.order[id(node)])
                 and self._switch_if(s, name, body[i - 1] if i else None)),
                None,
            )  # fmt: skip
            if found is not None:
                break
        if found is None:
            return None
        condition = _code(self.module, found.test)
        if home is not reader and condition.split(".")[0] in self._bound_names(reader):
            return None  # (the reading function has a name of its own for the flag)
        stores = [
            n for n in self._subtree(home)
            if isinstance(n, cst.AssignTarget | cst.AugAssign | cst.AnnAssign | cst.Global)
            and name in {x.value for x in self._subtree(n) if isinstance(x, cst.Name)}
        ]  # fmt: skip
        changed = any(  # (a name's definition before the switch is what the switch reads)
            isinstance(n, cst.AssignTarget | cst.AugAssign | cst.AnnAssign)
            and _code(self.module, n.target) == condition
            and ("." in condition or self.order[id(n)] > self.order[id(found)])
            for n in self.nodes
        )
        if len(stores) != 1:
            return None
        if readable and (changed or self.facts(found.test).calls or not _path(condition)):
            return None
        return found, condition

    def _unset_elsewhere(self, node: cst.CSTNode) -> str | None:
        """Why a test of ``node`` (the name ``amp``) is not apex's availability, which the
        rewrite folds as true: the name is set to None somewhere other than the ``except`` of
        the ``try`` that imports it (``global amp; if not use_apex: amp = None``; the
        ``else:`` of that ``try``, which runs where the import succeeded). None: it is not."""
        if not isinstance(node, cst.Name):
            return None
        name = node.value
        for store in self.nodes:
            if not (
                isinstance(store, cst.AssignTarget)
                and isinstance(store.target, cst.Name)
                and store.target.value == name
                and _code(self.module, self.parent(store).value) == "None"
            ):
                continue
            handler = next(
                (a for a in self.ancestors(store) if isinstance(a, cst.ExceptHandler | cst.Try)),
                None,
            )
            if isinstance(handler, cst.ExceptHandler):
                continue  # apex missing: the availability fallback the rewrite folds
            statement = self.statement(store)
            located = self.block_of(statement)
            holder = self.owner(located[0]) if located is not None else None
            if isinstance(holder, cst.Try):
                continue  # (the `else:` of the `try` that imports it: _imports says so)
            if isinstance(holder, cst.If) and self._switch_if(holder, name, self._before(holder)):
                continue  # a switch (in another function than the test: not followed)
            after = self._after(statement)
            if isinstance(after, cst.Try) and self._imports_amp_as(after.body, name):
                continue  # `amp = None` right before `try: from apex import amp`: availability
            if (
                not isinstance(holder, cst.If)
                and after is not None
                and self._switch_if(after, name, statement)
            ):
                continue  # `amp = None` right before a switch
            return (
                f"`{name}` is set to None at line {self.line(store)}, not only where apex is "
                f"missing, so the test of `{name}` at line {self.line(node)} also tests what "
                "set it, which the rewrite does not follow (it reads such a test as apex's "
                "availability, true once native AMP replaces it); test that condition itself "
                "there, then migrate"
            )
        return None

    def _before(self, statement: cst.CSTNode) -> cst.CSTNode | None:
        located = self.block_of(statement)
        return _statements(located[0])[located[1] - 1] if located and located[1] else None

    def _after(self, statement: cst.CSTNode) -> cst.CSTNode | None:
        located = self.block_of(statement)
        if located is None:
            return None
        body = _statements(located[0])
        return body[located[1] + 1] if located[1] + 1 < len(body) else None

    def _switch_if(
        self, statement: cst.CSTNode, name: str, previous: cst.CSTNode | None = None
    ) -> bool:
        """``statement`` is ``if COND: from apex import amp`` (or in a ``try`` there) with
        ``else: amp = None``, or without an ``else:`` right after ``previous``, ``amp = None``
        (see ``_switch_of``)."""
        if not isinstance(statement, cst.If) or isinstance(statement.orelse, cst.If):
            return False
        fallback = (
            _statements(statement.orelse.body) or []
            if statement.orelse is not None
            else [previous] if previous is not None else []
        )  # fmt: skip
        imports = [
            i for s in statement.body.body
            for i in (s.body.body if isinstance(s, cst.Try) else [s])
            if isinstance(i, cst.SimpleStatementLine)
            and any(isinstance(b, cst.Import | cst.ImportFrom) and self._apex_binds(b, name)
                    for b in i.body)
        ]  # fmt: skip
        return (
            bool(imports)
            and len(fallback) == 1
            and _code(self.module, fallback[0]).strip() == f"{name} = None"
        )

    def _imports_amp_as(self, node: cst.CSTNode, name: str) -> bool:
        """An import in ``node`` binds ``name`` to apex's amp."""
        return any(
            isinstance(b, cst.Import | cst.ImportFrom) and self._apex_binds(b, name)
            for b in self._subtree(node)
        )

    def _apex_binds(self, node: cst.Import | cst.ImportFrom, name: str) -> bool:
        """``node`` binds ``name`` to apex's amp."""
        if isinstance(node, cst.ImportFrom):
            if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
                return False
            return _code(self.module, node.module) == "apex" and any(
                a.evaluated_name == "amp" and (a.evaluated_alias or "amp") == name
                for a in node.names
            )
        return any(
            _code(self.module, a.name) == "apex.amp" and a.evaluated_alias == name
            for a in node.names
        )

    def _fold(
        self, expr: cst.CSTNode, value: bool, ran: str = "where apex was not installed"
    ) -> None:
        """An availability test ``expr`` whose value is now ``value``, folded into what holds
        it (``x and True`` is ``x``, an ``if`` keeps the branch that runs); ``ran``: when the
        branch that goes ran (a version test's ran on old torch, apex or not)."""
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
                self.dissolved.add(parent)
                self.plan.edits[parent] = lambda u: _branch(u, u.body)
                if isinstance(parent.orelse, cst.Else):
                    self._fallback_note(parent, parent.orelse.body, "the `else:`", ran)
            elif isinstance(parent.orelse, cst.Else):
                self.folded_else.add(parent)
                self.plan.edits[parent] = lambda u: _branch(u, u.orelse.body if u.orelse else None)
                self._fallback_note(parent, parent.body, "the first branch", ran)
            elif isinstance(parent.orelse, cst.If):
                self.folded_first.add(parent)
                self.plan.edits[parent] = lambda u: u.orelse.with_changes(
                    leading_lines=u.leading_lines
                )
            else:
                self._remove_statement(parent)
        elif isinstance(parent, cst.IfExp) and parent.test is expr:
            # `a if True else b` is `a` (its parentheses kept)
            self.plan.edits[parent] = lambda u, v=value: (u.body if v else u.orelse).with_changes(
                lpar=u.lpar, rpar=u.rpar
            )
        elif isinstance(parent, cst.Assert) and parent.test is expr and value:
            self._remove_statement(self.statement(parent))
        elif isinstance(parent, cst.Assert):
            self.problem(parent, ASSERTS_MISSING)
        else:
            self.plan.edits[expr] = lambda _u, v=value: cst.Name(str(v))

    def _fallback_note(self, node: cst.If, dropped: cst.BaseSuite, which: str, ran: str) -> None:
        """The branch of an availability test that ran without apex goes; what it set (the
        opt level put back to "O0", a flag turned off) is set no more."""
        names = {n for s in _statements(dropped) for n in self.facts(s).assigned} | {
            _code(self.module, n.target)
            for n in self._subtree(dropped)
            if isinstance(n, cst.AssignTarget) and not isinstance(n.target, cst.Name)
        }
        if names:
            listed = ", ".join(f"`{n}`" for n in sorted(names))
            self.plan.notes.append(
                f"behaviour change: {which} of the `if` at line {self.line(node)} ran {ran}, "
                f"and set {listed}; native AMP is always there, so it goes: a run that took "
                "it now takes the path the other runs took"
            )

    def dead(self, node: cst.CSTNode) -> bool:
        """``node`` is in a branch that the folded availability tests drop: code that runs
        only where apex is missing, which never happens once native AMP replaces it."""
        if not self.folded_else and not self.dissolved:
            return False
        for above in self.ancestors(node):
            if isinstance(above, cst.If) and (
                (above in self.folded_else and self.within(node, above.body))
                or (
                    above in self.dissolved
                    and above.orelse is not None
                    and self.within(node, above.orelse)
                )
            ):
                return True
        return False

    def _is_elif(self, node: cst.If) -> bool:
        parent = self.parent(node)
        return isinstance(parent, cst.If) and parent.orelse is node

    def _in_import(self, node: cst.CSTNode) -> bool:
        return any(isinstance(a, cst.Import | cst.ImportFrom) for a in self.ancestors(node))


def _probe(call: cst.Call) -> bool:
    """``is_apex_available()``: an availability probe (transformers' and its copies'), which
    only reads whether a package is installed: dropping its call drops no effect."""
    func = call.func.attr if isinstance(call.func, cst.Attribute) else call.func
    return (
        not call.args
        and isinstance(func, cst.Name)
        and re.fullmatch(r"is_\w+_available", func.value) is not None
    )


def _branch(u: cst.If, kept: cst.BaseSuite | None) -> cst.FlattenSentinel | cst.RemovalSentinel:
    """The ``if`` gives way to the branch that runs (nothing, where the plan emptied it)."""
    if isinstance(kept, cst.SimpleStatementSuite):  # `else: x = 1` on one line
        kept = cst.IndentedBlock([cst.SimpleStatementLine(body=kept.body)])
    body = list(kept.body) if kept is not None else []
    if not body:
        return cst.RemoveFromParent()
    return cst.FlattenSentinel([body[0].with_changes(leading_lines=u.leading_lines), *body[1:]])


def _path(text: str) -> bool:
    """``args.fp16``, ``use_amp``: a name or attribute chain."""
    return all(part.isidentifier() for part in text.split("."))
