"""apex amp beyond this file: the modules it imports that scale, save amp state or cast with
apex without initializing (migrated with it, or a blocker that names them), its class's
subclasses in other modules, an apex import that a star import or a use before it leaves
unbound, and native AMP beside apex (`--apex-amp` / `--native-amp`)."""

from __future__ import annotations

import ast
import os

import libcst as cst

from ampmigrate.apex.casts import (
    CAST_MEMBERS,
    _convertible,
    _read,
    cast_modules_under,
    loads_by_name,
    never_casts,
    outside_casts,
)
from ampmigrate.apex.common import (
    _argument,
    _code,
    _is_call_of,
    initialize_arguments,
    without_optimizer,
)
from ampmigrate.apex.linkbase import _listed
from ampmigrate.apex.ondisk import _project_files
from ampmigrate.apex.siblings import _Graph, apex_siblings, initializing_imports, star_may_bind
from ampmigrate.apex.strays import _parsed
from ampmigrate.apex.users import apex_subclasses, user_texts
from ampmigrate.apex.verdict import (
    APEX,
    SUPPORTED,
    no_rewrite,
)

# apex amp calls on the state `initialize` set up (a file that only makes these relies on it)
_STATE_USES = frozenset({"state_dict", "load_state_dict", "scale_loss", "master_params"})


def _publishes(node: cst.CSTNode, names: set[str]) -> bool:
    """``globals()["amp"] = ...`` or ``globals().update(amp=...)`` for one of ``names``."""
    if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Subscript):
        target = node.target
        key = target.slice[0].slice if len(target.slice) == 1 else None
        return (
            _is_globals(target.value)
            and isinstance(key, cst.Index)
            and isinstance(key.value, cst.SimpleString)
            and key.value.evaluated_value in names
        )
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        return (
            node.func.attr.value == "update"
            and _is_globals(node.func.value)
            and any(
                (a.keyword is not None and a.keyword.value in names) or a.star for a in node.args
            )
        )
    return False


def _is_globals(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == "globals"
        and not node.args
    )


class Elsewhere:
    """Mixed into ``_Planner`` after ``Handles``."""

    def _scaled_elsewhere(self, init: cst.Call) -> str:
        """The blocker for a file that initializes but scales the loss in another file: name
        the calls that receive the optimizer, where the GradScaler has to be passed."""
        broken = self._unbound_use() or self._never_set(_argument(init, "optimizers", 1))
        if broken is not None:
            return broken
        unresolved = self._unresolved_scaling()
        if unresolved is not None:
            return unresolved
        value = next(
            (
                n
                for n in self.nodes
                if isinstance(n, cst.Attribute | cst.Name)
                and not (isinstance(self.parent(n), cst.Call) and self.parent(n).func is n)
                and not isinstance(self.parent(n), cst.Attribute)
                and APEX + ".scale_loss" in self.qualified(n)
            ),
            None,
        )
        if value is not None:
            holder = self.parent(self.parent(value))
            how = (
                f"handed to `{_code(self.module, holder.func)}(...)`"
                if isinstance(self.parent(value), cst.Arg) and isinstance(holder, cst.Call)
                else "used as a value"
            )
            return (
                f"`{_code(self.module, value)}` is {how} at line {self.line(value)}, and the "
                "loss is scaled "
                "where that value is called, which the rewrite does not follow: replace each "
                "`with <it>(loss) as scaled: scaled.backward()` by "
                "`scaler.scale(loss).backward()`, the step by `scaler.step(optimizer)` + "
                "`scaler.update()`, by hand"
            )
        text = (
            "no `amp.scale_loss` in this file: the loss is scaled in another file; create the "
            "GradScaler here and pass it there"
        )
        handed = next(  # apex's module itself handed on (`{"amp": amp}`, `criterion(amp)`)
            (
                n
                for n in self.nodes
                if isinstance(n, cst.Name)
                and APEX in self.qualified(n)
                and not isinstance(self.parent(n), cst.Attribute)
                and not self._in_import(n)
                and not self._availability_test(n)
            ),
            None,
        )
        if handed is not None:
            return (
                f"no `amp.scale_loss` in this file: apex's `{handed.value}` itself is handed on "
                f"at line {self.line(handed)}, and the code that receives it may scale the loss "
                "with it, which the rewrite does not follow: migrate the two together by hand"
            )
        timm_scaler = next(
            (
                n for n in self.nodes
                if isinstance(n, cst.Name | cst.Attribute)
                and any(q.startswith("timm.") and q.endswith(".ApexScaler")
                        for q in self.qualified(n))
                and not self._in_import(n)
            ),
            None,
        )  # fmt: skip
        if timm_scaler is not None:
            return (
                "no `amp.scale_loss` in this file: the loss is scaled by timm's "
                f"`ApexScaler` (line {self.line(timm_scaler)}), which calls `amp.scale_loss` "
                "inside timm, outside the run: use timm's `NativeScaler` there (the same "
                "call; it keeps a `torch.amp.GradScaler`), run the forward under "
                '`torch.amp.autocast("cuda", dtype=torch.float16)` and delete '
                "`amp.initialize`, by hand"
            )
        outside = self._outside_base(init)
        if outside is not None:
            return outside
        if (
            self.siblings == []
            and not self.scaling_subclasses  # (they scale: "nothing scales" would be false)
            and self.path is not None
            and os.path.isfile(self.path)
        ):
            scaling = self._importers_that_scale(init)
            if scaling:
                return (  # (the 82nd review's F1: "not with its importers" was false)
                    f"no `amp.scale_loss` in this file: {scaling} takes "
                    f"`{self.function(init).name.value}` from this file and scales the loss "
                    "with what it returns, and this run does not rewrite them with it: give "
                    "`fix` them all in one run (where the function returns the models in a "
                    "tuple and nothing else uses it, they are rewritten together; otherwise "
                    "their findings say why), or migrate them together by hand"
                )
            initializing = initializing_imports(self.path)
            if initializing:
                folder = os.path.dirname(os.path.abspath(self.path))
                listed = _listed([
                    f"{os.path.relpath(p, folder)} (`amp.{m}` at its line {n})"
                    for p, m, n in initializing
                ])  # fmt: skip
                return (
                    f"no `amp.scale_loss` in this file, but {listed}, which it imports, "
                    "initializes apex amp itself and calls it: apex keeps one amp state for "
                    "the whole process, which both set up and use; migrate them together by hand"
                )
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
        stepped = [
            n for n in self._subtree(home)
            if isinstance(n, cst.Call) and _is_call_of(n, "step")
            and _code(self.module, n.func.value) == name
        ]  # fmt: skip
        if stepped:  # its step is here: `scaler.step` there needs the GradScaler here too
            text += (
                f", and make `{name}.step()` (line {self.line(stepped[0])}) "
                f"`scaler.step({name})` + `scaler.update()`"
            )
        calls = [
            n for n in self._subtree(home)
            if isinstance(n, cst.Call) and self.order[id(n)] > self.order[id(init)]
            and any(_code(self.module, a.value) == name for a in n.args)
            and not _is_call_of(n, "step")
            and not any(q.startswith(APEX + ".") for q in self.qualified(n.func))
        ]  # fmt: skip  # (apex's own calls take no scaler: `initialize` again, the 53rd review)
        if not calls:
            return text
        toward = [c for c in calls if self._toward_sibling(c)]
        listed = ", ".join(
            f"`{_code(self.module, c.func)}` (line {self.line(c)})" for c in (toward or calls)[:3]
        )
        if toward or len(calls) == 1:  # (the one way the optimizer leaves)
            return f"{text} (it receives `{name}` through {listed}: add a `scaler` argument there)"
        more = f" and {len(calls) - 3} more" if len(calls) > 3 else ""
        return (
            f"{text} (it receives `{name}` through {listed}{more}: the call that leads to the "
            "scaling needs a `scaler` argument too)"
        )

    def _unresolved_scaling(self) -> str | None:
        """A ``.scale_loss(...)`` call on something that is not apex's amp as far as the
        rewrite resolves (elektronn3's ``self.amp_handle.scale_loss``, left over from apex's
        first API, ``amp_handle = amp.init()``): the loss is scaled here, through it."""
        call = next(
            (
                n for n in self.nodes
                if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                and n.func.attr.value == "scale_loss"
                and not any(q.startswith(APEX + ".") for q in self.qualified(n.func))
            ),
            None,
        )  # fmt: skip
        if call is None:
            return None
        holder = _code(self.module, call.func.value)
        assigned = next(
            (
                t for t in self.nodes
                if isinstance(t, cst.Name | cst.Attribute) and _code(self.module, t) == holder
                and self._assigned_to(t)
            ),
            None,
        )  # fmt: skip
        function = self.function(call)
        param = next(
            (
                p for p in (*function.params.params, *function.params.kwonly_params)
                if p.name.value == holder
            ),
            None,
        ) if isinstance(function, cst.FunctionDef) else None  # fmt: skip
        if param is not None:  # (`def train(..., amp=amp)`: the 68th review's p3)
            default = f", by default `{_code(self.module, param.default)}`" if param.default else ""
            return (
                f"the loss is scaled at line {self.line(call)} through "
                f"`{holder}.scale_loss(...)`, which `{function.name.value}` receives as its "
                f"parameter `{holder}`{default}: the rewrite follows apex's module into a "
                "parameter where a call of this file passes it, not through a default: pass "
                "it at the calls and drop the default (or migrate by hand)"
            )
        if assigned is not None:
            where = f"which line {self.line(assigned)} assigns"
        else:
            where = (
                "which nothing in this file assigns (as written, that call raises; apex's "
                "first API kept such a handle: `amp_handle = amp.init()`)"
            )
        return (
            f"the loss is scaled at line {self.line(call)} through `{holder}.scale_loss(...)`, "
            f"{where}: the rewrite does not take `{holder}` for apex's amp; write "
            "`amp.scale_loss(...)` there (or migrate by hand)"
        )

    def _toward_sibling(self, call: cst.Call) -> bool:
        """``call`` calls into a module of the run that calls apex amp (a sibling): its
        qualified name names that module's file."""
        for qualified in self.qualified(call.func):
            parts = qualified.split(".")
            for cut in range(len(parts) - 1, 0, -1):
                tail = os.path.join(*parts[:cut])
                if any(
                    os.path.splitext(s.path)[0].endswith(os.sep + tail)
                    or s.path.endswith(os.path.join(tail, "__init__.py"))
                    for s in self.siblings or ()
                ):
                    return True
        return False

    def _availability_test(self, node: cst.Name) -> bool:
        """``amp`` read by an availability test (``if amp is not None:``, ``if amp:``, ``not
        amp``, an ``and``): not handed on."""
        parent = self.parent(node)
        if isinstance(parent, cst.Comparison):
            return parent.left is node and all(
                isinstance(c.operator, cst.Is | cst.IsNot) for c in parent.comparisons
            )
        return isinstance(parent, cst.If | cst.BooleanOperation | cst.UnaryOperation)

    def _importers_that_scale(self, init: cst.Call) -> str | None:
        """The project files that import the function holding ``init`` (a set-up helper that
        returns the initialized pair: OVANet's ``get_models``) and call ``amp.scale_loss``:
        "train.py (line 12)"; None when it is not a module-level function or none does."""
        home = self.function(init)
        if not isinstance(home, cst.FunctionDef) or self.parent(home) is not self.module:
            return None
        folder = os.path.dirname(os.path.abspath(self.path))
        shown = [
            f"{os.path.relpath(file, folder)} (line {line})"
            for file, line, text in user_texts(self.path, [home.name.value])
            if "scale_loss" in text
        ]
        return ", ".join(dict.fromkeys(shown)) or None

    def _unbound_use(self) -> str | None:
        """An ``amp.scale_loss`` (or another amp call) in a function that cannot see the name
        apex was imported as: the import binds it only inside another function (``main``), so
        the original's mixed-precision path raises NameError there. That is the true reason,
        not a loss scaled in another file."""
        homes = {
            id(self.function(n))
            for n in self.nodes
            if isinstance(n, cst.ImportFrom | cst.Import) and self._apex_import(n)
        }
        if id(self.module) in homes or any(
            isinstance(n, cst.Global) and {g.name.value for g in n.names} & self.bound
            for n in self.nodes
        ):  # a module-level binding or a `global` gives it
            return None
        published = next((n for n in self.nodes if _publishes(n, self.bound)), None)
        if published is not None:  # `globals()["amp"] = amp`: module state, by a dict store
            return (
                f"apex's module is made a module global through `globals()` at line "
                f"{self.line(published)} and called from other functions, which the rewrite "
                "does not follow (no import or `global` binds it there): bind it with a "
                "module-level import or `global` first, or migrate by hand"
            )
        stars = [  # a star import may give it: followed where its module is on disk
            n for n in self.nodes
            if isinstance(n, cst.ImportFrom) and isinstance(n.names, cst.ImportStar)
        ]  # fmt: skip
        for node in self.nodes:
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value in SUPPORTED - {"initialize"}
                and isinstance(node.func.value, cst.Name)
                and node.func.value.value in self.bound
                and not any(id(a) in homes for a in self.ancestors(node))
            ):
                name = node.func.value.value
                function = self.function(node)
                inside = (
                    f"`{function.name.value}`" if isinstance(function, cst.FunctionDef) else "it"
                )
                star = next((n for n in stars if self._star_may_bind(n, name)), None)
                if star is not None:
                    return (
                        f"`{_code(self.module, node.func)}` at line {self.line(node)} reads "
                        f"`{name}`, which the apex import binds only inside another function, "
                        f"not in {inside}; only the star import at line {self.line(star)} could "
                        "bind it there (if it does not, that call raises NameError): the "
                        "rewrite cannot tell which `amp` it calls; import it at module level "
                        "before migrating, or migrate it by hand"
                    )
                return (
                    f"`{_code(self.module, node.func)}` at line {self.line(node)} reads `{name}`, "
                    f"which the apex import binds only inside another function, not in {inside}: "
                    "that call raises NameError, so the original's mixed-precision path cannot "
                    f"run as written; import `{name}` at module level (or fix the original) "
                    "before migrating"
                )
        return None

    def _star_may_bind(self, node: cst.ImportFrom, name: str) -> bool:
        if self.path is None:
            return True
        statement = ast.parse(_code(self.module, node).strip()).body[0]
        return star_may_bind(self.path, statement, name)

    def _apex_import(self, node: cst.Import | cst.ImportFrom) -> bool:
        if isinstance(node, cst.ImportFrom):
            return node.module is not None and _code(self.module, node.module).startswith("apex")
        return any(_code(self.module, a.name).startswith("apex") for a in node.names)

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

    def _siblings(self, role: str | None, rewritten: ast.Module | None = None) -> None:
        """A module this file imports (directly or through others) that calls apex amp without
        initializing it shares this file's amp state (a checkpoint module saving
        ``amp.state_dict()``): migrating this file alone leaves it calling apex, which is gone
        or uninitialized then. The whole component is migrated or none of it. ``rewritten``:
        this file as the plan leaves it, whose imports and names are read instead."""
        if self.path is None:
            return
        # (a broken link's files: its own blocker says they move together or not at all)
        linked = set(self.link.files) if self.link else set()
        if self.link is not None and self.link.family is not None:  # (a part of a family's
            # link sees its own two files; the others are rewritten with it too: nnUNet's
            # grandchild imports its parent's module, the 66th review)
            linked |= {f for f, *_ in apex_subclasses(self.link.callers[0], self.link.family)}
        folder = os.path.dirname(os.path.abspath(self.path))
        graph = _Graph()  # (the import edges, read once for both walks)
        if rewritten is not None:
            before = {s.path: s for s in apex_siblings(self.path)}
            graph.trees[os.path.abspath(self.path)] = rewritten
        self.siblings = apex_siblings(self.path, graph)
        if rewritten is not None:
            kept = {s.path for s in self.siblings}
            for sibling in (s for path, s in before.items() if path not in kept):
                self.plan.notes.append(
                    f"{os.path.relpath(sibling.path, folder)} calls `amp.{sibling.member}` at its "
                    f"line {sibling.line} in code that only the apex branch reached: the rewrite "
                    "no longer uses it, and it keeps its own finding"
                )
        self._importers_with_state(linked, folder, graph)
        casts = self.casts if self.casts is not None and not self.casts.broken else None
        reached = {sibling.path for sibling in self.siblings}
        self._loaded_casts(casts, reached, folder, graph)
        self._outside_casts(folder, graph)
        unseen = [f for f in casts.layers if f not in reached] if casts is not None else []
        if unseen and os.path.abspath(self.path) in casts.initializing:
            listed = _listed([f"{os.path.relpath(f, folder)}" for f in unseen])
            loader = loads_by_name(self.path)
            where = (
                "this file imports"
                if loader is None or loader == os.path.abspath(self.path)
                else f"{os.path.relpath(loader, folder)}, which this file imports, imports"
            )
            self.plan.notes.append(
                f"{where} modules by a computed name (`importlib.import_module`), so this file "
                f"may run the apex casts of {listed}, which no import of it reaches: they get "
                "their torch.amp forms in this run too (see their AMP303 findings)"
            )
        plain = never_casts(self.text.encode())
        for sibling in self.siblings:
            if sibling.path in linked:
                continue
            if plain and sibling.member in CAST_MEMBERS:
                continue  # (apex's casts acted only under O1; at this file's O2/O3 they were
                # plain calls, and its finding says why it stays on apex)
            if casts is not None and sibling.path in casts.layers:
                self.plan.notes.append(
                    f"{os.path.relpath(sibling.path, folder)}'s `amp.{sibling.member}` at its line "
                    f"{sibling.line} gets its torch.amp form in this run (see its AMP303 "
                    "finding): the two are migrated together"
                )
                continue
            shown = os.path.relpath(sibling.path, folder)
            held = self.casts if self.casts is not None and self.casts.broken else None
            if held is not None and sibling.path in held.layers:
                # its casts have a rewrite, written with this file's: no step of its own (the
                # 42nd review: "has no O1 rewrite ... replace it first" sent users to do by
                # hand what the run does once the real blocker is gone)
                cast = f"{shown}'s `amp.{sibling.member}` at its line {sibling.line}"
                if held.broken_by == os.path.abspath(self.path):
                    self.plan.notes.append(
                        f"{cast} gets its torch.amp form in the same run as this file, once "
                        "this file's blockers are gone"
                    )
                else:
                    self.problem(
                        self.plan.anchor,
                        f"{cast} gets its torch.amp form only together with every file that "
                        f"initializes amp and reaches it: {held.broken}",
                    )
                continue
            via = os.path.relpath(sibling.importer, folder)
            uses = f"calls `amp.{sibling.member}`"
            if sibling.member in SUPPORTED:
                how = (
                    "migrate the two together (the GradScaler passed there, "
                    "`scaler.state_dict()` for `amp.state_dict()`) or neither; the rewrite "
                    "links two files of one run only where this one calls the one function "
                    "of that file that scales, directly or through functions of that file "
                    "that hand it the model and the optimizer as they are (or a helper that "
                    "only scales the loss and optimizer it is given, its caller stepping; or a "
                    "runner's hook ties them, or a class family whose base class "
                    "initializes), not through a "
                    "closure that function returns, an object it builds or a base class it "
                    "derives from, so in such a shape by hand"
                )
                count = sum(  # (one for inference only beside it, a teacher's, is allowed;
                    1 for n in self.nodes  # `optimizers=None` is one: 58b's ClassyVision)
                    if isinstance(n, cst.Call) and APEX + ".initialize" in self.qualified(n.func)
                    and not without_optimizer(initialize_arguments(n)[0])
                )  # fmt: skip
                if count > 1:  # (a link's caller initializes once: HPA's k-fold and single run)
                    how = (
                        f"this file calls `amp.initialize` with an optimizer {count} times, and "
                        "the rewrite links a file that calls it once: make one GradScaler that "
                        "each of them "
                        "reaches (apex kept one loss scaler for all), pass it at each call "
                        "there, and migrate the two together by hand"
                    )
            elif sibling.member == "amp":  # `return amp`: hands out the module itself
                uses = "returns apex's amp module"
                how = "hand out a GradScaler there instead and migrate the two together"
            elif sibling.member in ("float_function", "disable_casts") and not _convertible(
                sibling.path, _read(sibling.path)
            ):  # casts move with this file where their form is one the rewrite takes (STEP:
                how = (  # an alias with an ImportError fallback is not)
                    f"its `amp.{sibling.member}` is not in a form the rewrite takes with this "
                    f"file (`@amp.{sibling.member}` on a function, `name = amp."
                    f"{sibling.member}(f)`, `with amp.disable_casts():`, under a plain "
                    "`from apex import amp`; not an alias of it, nor one an `except "
                    "ImportError:` replaces): write it in such a form, or migrate it by hand "
                    "(AMP301's guidance)"
                )
            else:  # a cast helper: no scaler involved, its native form is AMP301's
                how = f"replace its `amp.{sibling.member}` first ({no_rewrite(sibling.member)})"
            self.problem(
                self.plan.anchor,
                f"{shown} (imported by {via} at line {sibling.import_line}) {uses} "
                f"at its line {sibling.line} and does not initialize "
                "amp: it relies on the amp state this file sets up and would still call apex "
                f"after this file alone were migrated; {how}",
            )
        self._subclasses(linked, folder)

    def _importers_with_state(self, linked: set[str], folder: str, graph: _Graph) -> None:
        """A file of the project that imports this one and calls apex amp on the state this
        file's ``initialize`` sets up (``import train; model, opt = train.main(True)``, then
        ``amp.state_dict()``; the 82nd review's f03), without initializing it, and is not
        rewritten with it: once this file is rewritten, nothing initializes apex for it."""
        if not self.initialize_calls or self.path is None:
            return
        me = os.path.abspath(self.path)
        stem = os.path.splitext(os.path.basename(me))[0].encode()
        for other in _project_files(me, every_folder=True, through_top=True) or ():
            if other == me or other in linked:
                continue
            data = _read(other)
            if b"apex" not in data or stem not in data:
                continue
            parsed = _parsed(other, data)
            if parsed is None or {"initialize", "init"} & set(parsed.members):
                continue
            used = sorted(set(parsed.members) & _STATE_USES)
            if not used or me not in graph.targets_of(other):
                continue
            line = parsed.members[used[0]][0].lineno
            self.problem(
                min(self.initialize_calls, key=self.line),
                f"{os.path.relpath(other, folder)} imports this file and calls `amp.{used[0]}` "
                f"(its line {line}) on the amp state this file's `amp.initialize` sets up, "
                "without initializing it: rewritten alone, this file would leave it calling "
                "apex uninitialized; migrate the two together, by hand",
            )
            return

    def _subclasses(self, linked: set[str], folder: str) -> None:
        """A class whose method initializes amp, subclassed in another module that calls apex
        amp (nnU-Net: the base trainer initializes, each variant's ``run_iteration`` scales):
        the variants share its amp state, which no import of this file reaches."""
        anchor = self.plan.anchor
        if self.family_linked("caller") or (
            not isinstance(anchor, cst.Call)
            or APEX + ".initialize" not in self.qualified(anchor.func)
        ):  # (a family's link holds every derived module that scales: the pre-pass found them)
            return
        owner = next((a for a in self.ancestors(anchor) if isinstance(a, cst.ClassDef)), None)
        if owner is None:
            return
        found = [
            f"`{name}` in {os.path.relpath(other, folder)} (line {line}; `{member}` at its "
            f"line {at})"
            for other, line, name, member, at in apex_subclasses(self.path, owner.name.value)
            if other not in linked
        ]
        self.scaling_subclasses = found
        if found:
            self.problem(
                anchor,
                f"classes derived from `{owner.name.value}` in other modules that call apex amp "
                f"({_listed(found)}) rely on the amp state this class's `amp.initialize` sets "
                "up and would still call apex after this file alone were migrated; migrate the "
                "class family together (the GradScaler kept on the object, `self.scaler`) or "
                "neither",
            )

    def _outside_casts(self, folder: str, graph: _Graph) -> None:
        """A package outside the run that the program imports casts through apex in its layers
        (an installed maskrcnn-benchmark's ``ROIAlign``): apex's casts there switched on with
        this file's ``initialize``; with apex gone, autocast hands those layers float16."""
        mine = os.path.abspath(self.path)
        for module, package, line, where in outside_casts(self.path, graph):
            via = (
                "this file imports"
                if module == mine
                else f"{os.path.relpath(module, folder)}, which this file imports, imports"
            )
            self.problem(
                self.plan.anchor,
                f"{via} `{package}` (line {line}), a package outside this run: {where}. Once "
                "this file initialized amp, apex gave those layers float32 arguments; with apex "
                "gone, autocast hands them float16, which their kernels may not take. Migrate "
                "the package's casts first (`ampmigrate fix` on it: each becomes "
                '`torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)`) or '
                "keep apex",
            )

    def _loaded_casts(self, casts, reached: set[str], folder: str, graph: _Graph) -> None:
        """This file (or a module it imports) imports modules by a computed name, and a module
        of its folder's tree casts through apex (``@amp.float_function``) where no import of
        this file reaches it: apex cast there once this file initialized amp. It can move only
        with that module, in one run (the pre-pass then joins them; see ``casts``)."""
        loader = loads_by_name(self.path, graph)
        if loader is None:
            return
        joined = set(casts.layers) if casts is not None else set()
        mine = os.path.abspath(self.path)
        left = [
            f for f in cast_modules_under(
                os.path.commonpath([os.path.dirname(mine), os.path.dirname(loader)])
            )
            if f != mine and f not in reached and f not in joined
        ]  # fmt: skip
        if not left:
            return
        shown = _listed([os.path.relpath(f, folder) for f in left[:4]])
        via = (
            "this file imports"
            if loader == mine
            else f"{os.path.relpath(loader, folder)}, which this file imports, imports"
        )
        self.problem(
            self.plan.anchor,
            f"{via} modules by a computed name (`importlib.import_module`), and {shown} "
            f"{'casts' if len(left) == 1 else 'cast'} through apex (`amp.float_function` and "
            "the like), which no import of this file reaches: apex cast there once this file "
            "initialized amp, and rewritten alone this file would leave those casts inactive "
            "(float16 under autocast); migrate them in one run with it (their casts become "
            "`torch.amp.custom_fwd`), or neither",
        )
