"""How the apex handles flow: ``initialize`` again, losses scaled in other functions, dual (apex or
native) setups, sibling modules and the pair of modules (:mod:`ampmigrate.apex.links`), files
without ``initialize``.
"""

from __future__ import annotations

import functools
import os

import libcst as cst

from ampmigrate.apex.common import _code, _is_call_of, _Setup
from ampmigrate.apex.links import apex_siblings
from ampmigrate.apex.verdict import SUPPORTED, no_rewrite, without_initialize


class Handles:
    """The handles stage of ``_Planner`` (mixed into it)."""

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

    @functools.cached_property
    def _stores(self) -> dict[str, list[cst.Call]]:
        """``args.amp = amp``: apex's module kept on an object, by where it is kept, with the
        calls this file makes through it (``args.amp.scale_loss(...)``); read once, as the
        module does not change while it is planned."""
        stores: dict[str, list[cst.Call]] = {}
        for node in self.nodes:
            if (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Attribute)
                and isinstance(node.value, cst.Name | cst.Attribute)
                and "apex.amp" in self.qualified(node.value)
            ):
                stores[_code(self.module, node.targets[0].target)] = []
        for node in self.nodes:
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
                calls = stores.get(_code(self.module, node.func.value))
                if calls is not None:
                    calls.append(node)
        return stores

    def _stored(self, node: cst.CSTNode, where: str) -> str:
        """The blocker for ``where = amp``: what is called through it, and what replaces it."""
        calls = self._stores.get(where, [])
        listed = ", ".join(
            f"`{_code(self.module, c.func)}` at line {self.line(c)}" for c in calls[:4]
        )
        through = (
            f" and called through it ({listed})"
            if calls
            else ", where code outside this file may call it"
        )
        scaler = where.rsplit(".", 1)[0] + ".scaler"
        return (
            f"`{_code(self.module, node)}` is kept as `{where}`{through}: the rewrite does not "
            "follow apex's module through an attribute; put the GradScaler there in its place "
            f"(`{scaler} = scaler`, `{scaler}.scale(loss).backward()`, `{scaler}.step(optimizer)` "
            f"+ `{scaler}.update()`, `{scaler}.state_dict()`), by hand"
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
        self.plan.min_torch = None  # nothing new is written: the native branch stays
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
            f"this file and {self.link.other(self.role)} ({self.link.named}, with the "
            "`amp.initialize` that feeds them) can only be rewritten together, and they are "
            f"not: {self.link.broken}"
        )

    def _linked_setup(self) -> _Setup | None:
        """The functions of a link (the training function, checkpoint helpers): each gets a
        ``scaler`` parameter, which every initializing module passes (``_pass_to_linked``
        there, in the same run)."""
        functions = [
            s
            for s in self.module.body
            if isinstance(s, cst.FunctionDef) and s.name.value in self.link.functions
        ]
        if len(functions) != len(self.link.functions) or self.free_name("scaler") != "scaler":
            self.problem(
                self.plan.anchor,
                f"{self.link.named} cannot take a new `scaler` parameter (the name is in use "
                "here): pass the GradScaler by hand",
            )
            return None
        self.name = "scaler"
        for function in functions:
            self.threaded.add(function)
            self.plan.edits[function.params] = self._add_parameter
        plural = "each get" if len(functions) > 1 else "gets"
        self.plan.notes.append(
            f"{self.link.named} {plural} a `scaler` parameter, passed by "
            f"{self.link.other(self.role)} in the same run"
        )
        home = next((f for f in functions if f.name.value == self.link.trains), functions[0])
        models = {self.link.model} if self.link.model else set()
        return _Setup(home, home, models, None, by_scaler=True)

    def _pass_to_linked(self, setup: _Setup, init: cst.Call) -> None:
        """The initializing side of a link: pass the GradScaler at each call of the linked
        functions (the pre-pass counted them; a different count here blocks)."""
        calls = [
            n
            for n in self._subtree(setup.home)
            if isinstance(n, cst.Call)
            and self.order[id(n)] > self.order[id(setup.statement)]
            and _code(self.module, n.func) in self.link.spellings[0]
        ]
        if len(calls) != self.link.calls[0]:
            self.problem(
                init,
                self._scaled_elsewhere(init)
                if self.link.trains
                else f"{self.link.named} ({self.link.other(self.role)}) must be given the "
                "GradScaler where the scaler exists, after `amp.initialize` in this function: "
                "pass it by hand",
            )
            return
        for call in calls:  # the linked functions' parameter is `scaler` (_linked_setup)
            value = self.access(self.function(call))
            if value is None:
                self.problem(call, "this call cannot reach the GradScaler to pass it")
                return
            self.plan.edits[call] = functools.partial(
                self._pass_scaler, keyword="scaler", value=value
            )
        spelled = [f"`{s}`" for s in self.link.spellings[0]]
        verb = "is" if len(spelled) == 1 else "are"
        self.plan.notes.append(
            f"the GradScaler is passed to {' and '.join(spelled)} ({self.link.other(self.role)}), "
            f"which {verb} rewritten in the same run"
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
