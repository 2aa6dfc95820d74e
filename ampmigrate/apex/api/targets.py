"""The torch name each apex reference becomes, by its context (a call, a type test, a value,
a class rebinding), and the fixes that rebase a name the file binds to apex's class."""

from __future__ import annotations

import ast
import itertools
from dataclasses import replace

from ampmigrate.apex.api import table
from ampmigrate.apex.api.common import (
    _SCOPES,
    _SHARED,
    _accepts,
    _bound_names,
    _catches_import_error,
    _FallbackCall,
    _handler_flags,
    _literal_in,
    _probing_tries,
    _rms_class,
)
from ampmigrate.apex.api.table import TARGETS, Target
from ampmigrate.engine.names import dotted
from ampmigrate.findings import Edit, Fix
from ampmigrate.renames import NoFix


def _l2_mode(call: ast.Call, target: Target) -> bool:
    """A FusedAdam call with ``adam_w_mode=False`` written: torch's Adam, not AdamW."""
    if "adam_w_mode" not in target.params:
        return False
    given = {k.arg: k.value for k in call.keywords}
    index = target.params.index("adam_w_mode")
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args):
        given["adam_w_mode"] = call.args[index]
    return "adam_w_mode" in given and _literal_in(given["adam_w_mode"], table.FALSE)


_WORLD_SIZE = frozenset({
    "torch.distributed.get_world_size", "torch.distributed.distributed_c10d.get_world_size",
})  # fmt: skip


_NORM_MODULES = frozenset({"apex.normalization", "apex.normalization.fused_layer_norm"})


# what a rewrite needs where the torch name itself is older than its floor
_FLOORED = {
    "torch.nn.parallel.DistributedDataParallel": "`find_unused_parameters=True` (which keeps "
    "apex's tolerance of parameters without a gradient)",
}


def _adam_l2(node: ast.expr, parent: ast.AST | None) -> bool:
    """``FusedAdam(..., adam_w_mode=False)``: its rewrite is ``torch.optim.Adam``, which every
    torch has (AdamW's floor is not its)."""
    return (
        isinstance(parent, ast.Call)
        and parent.func is node
        and any(
            k.arg == "adam_w_mode" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in parent.keywords
        )
    )


class Targets:
    """The targets stage of the non-amp planner (mixed into ``plan._Planner``)."""

    def _target(
        self, node: ast.expr, parent: ast.AST | None, name: str, target: Target, conditional: bool
    ) -> None:
        head = f"`{name}` -> `{target.new}`"
        least = () if _adam_l2(node, parent) else target.min_torch
        if least and self.floor is not None and self.floor < least:
            needs, floor = (".".join(map(str, v)) for v in (least, self.floor))
            what = _FLOORED.get(target.new, f"`{target.new}`")
            reason = f"{what} needs torch >= {needs}; the project supports torch {floor}"
            self._report(target, node, f"{head}: no automatic fix: {reason}", None)
            return
        if isinstance(parent, ast.Call) and parent.func is node:
            # another binding of the name (torch's class, or a third-party one: sagemaker-cv's
            # smdistributed DDP in the other arm, the 34th review) takes a call with arguments
            # apex's signature lacks: that call is not apex's
            fallback = conditional or target.new in self.names.qualified(node)
            wraps = target.new == "torch.nn.parallel.DistributedDataParallel"
            given = self._initialized_with(parent) if wraps else None
            if given is not None:
                reason = (
                    f"the wrapped model reaches `amp.initialize` at line {given}, which raises "
                    "RuntimeError for a torch DistributedDataParallel (parallel wrappers go "
                    "after `initialize`) and let apex's through: migrate apex amp first "
                    "(AMP303; where it rewrites this file, the next pass of `fix` makes this "
                    "one), or wrap the model after `initialize`"
                )
                self._report(target, parent, f"{head}: no automatic fix: {reason}", None)
                return
            if self._exported(node, target, head, parent):
                return
            try:
                new, fix, notes = self._call(parent, node, target, fallback)
            except _FallbackCall:
                return  # torch's own class, called with torch's arguments: nothing to migrate
            except NoFix as reason:
                if _l2_mode(parent, target):  # (the refusal names the class it would be)
                    head = f"`{name}` -> `torch.optim.Adam`"
                self._report(target, parent, f"{head}: no automatic fix: {reason}", None)
                return
            if conditional:
                notes.append("the name is also bound by a fallback, which the fix bypasses")
            message = f"`{name}` -> `{new}`: {target.accepts}"
            if notes:
                message += "; " + "; ".join(notes)
            self._report(target, parent, message, fix)
            return
        base = isinstance(parent, ast.ClassDef) and any(node is b for b in parent.bases)
        if (
            target.new == "torch.nn.RMSNorm"
            and (base or not (self._annotation(node) or self._typed(node)))
            and self._stand_in_import(node) is not None
        ):
            try:
                fix = self._rms_stand_in(node, name)
            except NoFix as reason:
                self._report(target, node, f"{head}: no automatic fix: {reason}", None)
                return
            bound = node.id  # type: ignore[union-attr]
            use = "a base class" if base else "a value"
            message = (
                f"{head}: used as {use}, so the import becomes `class {bound}(torch.nn.RMSNorm)` "
                "with apex's parameters and `eps=1e-5` default (torch's is the input dtype's "
                f"machine epsilon), and every use of `{bound}` keeps working; {target.accepts}"
            )
            if not base:
                message += (
                    f"; a type test against this value matches the modules `{bound}` builds, "
                    "not those of the calls rewritten to `torch.nn.RMSNorm`"
                )
            self._report(target, node, message, fix)
            return
        if base:
            try:
                fix, message = self._rebased(node, parent, target, head)
            except NoFix as reason:
                self._report(target, node, f"{head}: no automatic fix: {reason}", None)
                return
            self._report(target, node, message, fix)
            return
        if self._exported(node, target, head, node):
            return
        renamed = None
        if self._annotation(node):  # (constructs nothing: torch's defaults cannot matter)
            renamed = "in an annotation, which constructs nothing (its value changes)"
        elif not conditional and (local := self._local_calls(node, parent, target)):
            renamed = f"{local}; {target.accepts}"
        if renamed is not None:
            try:
                fix = self._rename_fix(node, target.new, "unsafe", target.min_torch)
            except NoFix as reason:
                self._report(target, node, f"{head}: no automatic fix: {reason}", None)
                return
            self._report(target, node, f"{head}: {renamed}", fix)
            return
        typed = self._typed(node)
        keyed = None if typed else self._identity_use(node)
        if keyed is not None:
            reason = (
                f"used as a key of the class itself ({keyed}): code that tells classes apart by "
                f"identity would treat every `{target.new}` of the process as it treated apex's "
                "class (a registry of apex's classes would take torch's own); delete or re-key "
                "it by hand"
            )
            self._report(target, node, f"{head}: no automatic fix: {reason}", None)
            return
        if conditional and not typed:
            reason = (
                "read as a value while a fallback binds the name too (an availability check): "
                "remove the check by hand; the torch replacement is always there"
            )
            self._report(target, node, f"{head}: no automatic fix: {reason}", None)
            return
        is_class = target.new.rpartition(".")[2][:1].isupper()
        refusal = (target.as_type or ("" if is_class else "not a class")) if typed else ""
        refusal = refusal or ("" if typed else target.as_value) or self._apex_ddp_only(target)
        if refusal:
            self._report(target, node, f"{head}: no automatic fix: {refusal}", None)
            return
        try:
            fix = self._rename_fix(node, target.new, "unsafe", target.min_torch)
        except NoFix as reason:
            self._report(target, node, f"{head}: no automatic fix: {reason}", None)
            return
        if not typed:
            extra = f"used as a value: its calls get `{target.new}`'s defaults"
            self._report(target, node, f"{head}: {extra}; {target.accepts}", fix)
            return
        # a type test constructs nothing: of the differences only its reach is accepted (the
        # 76th review: the constructor's were listed); a tuple that names torch's class
        # already loses apex's instead of naming torch's twice
        extra = f"the type test now matches every `{target.new}`, not only apex's"
        dropped = self._dropped_from_tuple(node, target.new)
        if dropped is not None:
            fix = replace(fix, edits=dropped, add_imports=frozenset())
            extra = f"apex's class leaves the type test, which names `{target.new}` already"
        self._report(target, node, f"{head}: {extra}", fix)

    def _dropped_from_tuple(self, node: ast.expr, new: str) -> tuple[Edit, ...] | None:
        """The edit that takes ``node`` out of the one-line tuple of classes it is in, where
        another of its elements is ``new`` already (None: it is in none, none is, or the tuple
        spans lines or holds comments: torch's class is named twice there, harmlessly). What is
        left stays a tuple (``(A, B)`` -> ``(B,)``: a class alone breaks ``W + (C,)``, the
        77th review)."""
        tuple_ = self.names.parent(node)
        if not isinstance(tuple_, ast.Tuple) or not any(
            new in self.names.qualified(e) for e in tuple_.elts if e is not node
        ):
            return None
        start, end = self.source.span(tuple_)
        if tuple_.lineno != tuple_.end_lineno or "#" in self.source.text[start:end]:
            return None
        elts = tuple_.elts
        between = [
            self.source.text[self.source.span(a)[1] : self.source.span(b)[0]]
            for a, b in itertools.pairwise(elts)
        ]
        if any(gap.strip() != "," for gap in between) or any(
            self.source.text[self.source.span(e)[0] - 1 : self.source.span(e)[0]] == "("
            and e is not elts[0]
            for e in elts
        ):
            return None  # (a parenthesized element, `(T, (A))`: the 79th review)
        kept = [self.source.segment(e) for e in elts if e is not node]
        first, last = self.source.span(elts[0])[0], self.source.span(elts[-1])[1]
        trailing = self.source.text[last:end].lstrip().startswith(",")
        if trailing:  # (taken with the elements, and put back)
            last += self.source.text[last:end].index(",") + 1
        text = ", ".join(kept) + ("," if len(kept) == 1 or trailing else "")
        return (Edit(first, last, text),)

    def _world_size(self, value: ast.expr) -> bool:
        """``value`` is ``torch.distributed.get_world_size()`` (the default group's)."""
        return (
            isinstance(value, ast.Call)
            and not value.args
            and not value.keywords
            and bool(self.names.qualified(value.func) & _WORLD_SIZE)
        )

    def _identity_use(self, node: ast.expr) -> str | None:
        """Where the class is read for its identity, not to build with (ColossalAI's tracer:
        ``register_leaf_module(apex.normalization.FusedLayerNorm)``, the 64th review): a dict
        key, a subscript key, an operand of a comparison, an argument of a call whose name
        says it registers. None for other values (a factory, a default, an alias)."""
        parent = self.names.parent(node)
        if isinstance(parent, ast.Dict) and any(k is node for k in parent.keys):
            return "a dict key"
        if isinstance(parent, ast.Subscript) and parent.slice is node:
            return "a subscript key"
        if isinstance(parent, ast.Compare) and not all(
            isinstance(o, ast.Constant) and o.value is None
            for o in [parent.left, *parent.comparators]
            if o is not node
        ):  # (`FusedAdam is None` tests availability: a key of nothing)
            return "compared"
        element = node
        if isinstance(parent, ast.Tuple | ast.List | ast.Set):  # `register((A, B))`, `in (A, B)`
            holder = self.names.parent(parent)
            if isinstance(holder, ast.Compare):
                return "compared"
            element, parent = parent, holder
        if isinstance(parent, ast.Call) and any(a is element for a in parent.args):
            called = parent.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if "regist" in name.lower():
                return f"handed to `{ast.unparse(called)}(...)`"
        return None

    def _rebased(
        self, node: ast.expr, cls: ast.ClassDef, target: Target, head: str
    ) -> tuple[Fix, str]:
        """``class FusedLayerNorm(_FusedLayerNorm)`` whose methods read of ``self`` only what
        apex's and torch's classes share and of ``super()`` only ``forward`` (fairseq's
        ``layer_norm.py``, copied in many projects: ``forward`` under ``torch.cuda.device``),
        built in this file only, with arguments torch's class takes alike: rebased on torch's
        class. Raises ``NoFix`` with the reason otherwise."""
        if target.new not in _SHARED or target.new == "torch.nn.RMSNorm":
            raise NoFix(
                "a subclass relies on apex's constructor arguments and internals (its overrides "
                f"may read apex's state or kernels): rebase it on `{target.new}` by hand"
            )
        accepted = target.new_positional
        self._subclass_reads(cls, accepted, _SHARED[target.new])
        # a constructor of its own that hands torch's class, through `super().__init__`, only
        # what it takes alike (checked above) builds the same module on it (fast-reid's
        # SyncBatchNorm, the 67th review); its calls are of its own signature
        own_init = next(
            (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
        )
        if own_init is not None and not _calls_super_init(own_init):
            raise NoFix(
                f"the subclass `{cls.name}` has a constructor of its own that does not call "
                "`super().__init__(...)`"
            )
        guard = next(
            (a for a in self.names.ancestors(cls) if isinstance(a, ast.Try)
             and any(_catches_import_error(h) for h in a.handlers)),
            None,
        )  # fmt: skip
        if guard is not None and self._falls_back_to(guard, cls.name, target.new):
            # (ESM, the 47th review: where apex was missing the name was torch's class, so
            # every use of it, here or in another module, already builds torch's alike)
            return self._rebase_fix(node, cls, target, head, guard, fell_back=True)
        for use in ast.walk(self.tree):
            if not (isinstance(use, ast.Name) and use.id == cls.name):
                continue
            call = self.names.parent(use)
            if not (isinstance(use.ctx, ast.Load) and isinstance(call, ast.Call)
                    and call.func is use):  # fmt: skip
                raise NoFix(
                    f"the subclass `{cls.name}` is used at line {use.lineno} other than by a "
                    "call: what is built with it is not visible here"
                )
            if own_init is None:
                _accepts(call, accepted, f"the call of `{cls.name}` at line {use.lineno}")
        if not any(isinstance(a, _SCOPES) for a in self.names.ancestors(cls)):
            users = self._importers(cls.name)
            if users is None or users:
                where = self._shown(users) if users else "the project is too large to look"
                raise NoFix(f"other modules take the subclass `{cls.name}` ({where})")
        return self._rebase_fix(node, cls, target, head, guard, fell_back=False)

    def _local_calls(self, node: ast.expr, parent: ast.AST | None, target: Target) -> str | None:
        """``opt_cls = Adam`` in a function (Megatron's ``adam_optimizer = Adam`` beside
        CPUAdam or bitsandbytes in the other arms; the 49th review) whose every read there is
        a call giving each argument whose default differs, and only arguments torch's class
        takes with apex's meaning: ``torch.optim.AdamW`` builds at those calls what apex
        built. Why (the message's part), or None."""
        function = next((a for a in self.names.ancestors(node) if isinstance(a, _SCOPES)), None)
        if not (
            isinstance(parent, ast.Assign)
            and parent.value is node
            and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name)
            and isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            and target.new in table.TORCH_TAKES
        ):
            return None
        local = parent.targets[0].id
        takes = table.TORCH_TAKES[target.new]
        calls = []
        for use in ast.walk(function):
            if not (isinstance(use, ast.Name) and use.id == local) or use is parent.targets[0]:
                continue
            if isinstance(use.ctx, ast.Store):
                continue  # (another arm's class: `opt_cls = torch.optim.Adam`)
            call = self.names.parent(use)
            if not (isinstance(call, ast.Call) and call.func is use) or any(
                isinstance(a, ast.Starred) for a in call.args
            ):
                return None
            given = dict(zip(target.params, call.args, strict=False))
            if len(call.args) > len(target.new_positional) or any(
                target.params[i] != p for i, p in enumerate(target.new_positional[: len(call.args)])
            ):
                return None
            given.update((k.arg, k.value) for k in call.keywords if k.arg is not None)
            if any(k.arg is None for k in call.keywords) or any(
                k not in takes or k not in target.params or k in target.rename
                or k in target.refuse or k in target.drop or k in target.drop_any
                for k in given
            ) or any(k not in given for k, _ in target.write):  # fmt: skip
                return None
            calls.append(call)
        if not calls or any(
            (isinstance(n, ast.Global | ast.Nonlocal) and local in n.names)
            or (  # (50a: `locals()["opt_cls"](...)` reads it where no call shows; `vars(x)`
                # reads an object's, not the function's; 52a: `get = locals`, `vars(*[])`)
                isinstance(n, ast.Name)
                and n.id in ("locals", "eval", "exec", "vars")
                and not (
                    n.id == "vars"
                    and isinstance(call := self.names.parent(n), ast.Call)
                    and call.func is n
                    and call.args
                    and not isinstance(call.args[0], ast.Starred)
                )
            )
            or (isinstance(n, ast.Attribute) and n.attr in ("_getframe", "f_locals"))
            for n in ast.walk(function)
        ):
            return None
        lines = ", ".join(str(c.lineno) for c in calls)
        written = ", ".join(f"`{k}`" for k, _ in target.write)
        gives = f"passes {written} itself and only" if written else "passes only"
        return (
            f"bound to `{local}` (line {parent.lineno}), whose every call in `{function.name}` "
            f"(line{'s' if len(calls) > 1 else ''} {lines}) {gives} arguments `{target.new}` "
            "takes alike, so it builds there what apex built"
        )

    def _falls_back_to(self, guard: ast.Try, name: str, new: str) -> bool:
        """An ``except ImportError`` of ``guard`` binds ``name`` to ``new`` itself (``from
        torch.nn import LayerNorm as FastLN``, ``FastLN = nn.LayerNorm``), last."""
        for handler in guard.handlers:
            if not _catches_import_error(handler):
                continue
            last = None  # (49a: `FastLN = torch.nn.GroupNorm` after the LayerNorm import)
            for stmt in handler.body:
                if name not in _bound_names([stmt]):
                    continue
                last = False
                if isinstance(stmt, ast.ImportFrom) and not stmt.level:
                    last = any(
                        (a.asname or a.name) == name and f"{stmt.module}.{a.name}" == new
                        for a in stmt.names
                    )
                elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    last = new in self.names.qualified(stmt.value)
            if last:
                return True
        return False

    def _rebase_fix(
        self,
        node: ast.expr,
        cls: ast.ClassDef,
        target: Target,
        head: str,
        guard: ast.Try | None,
        fell_back: bool,
    ) -> tuple[Fix, str]:
        """The rebase on torch's class; ``fell_back``: the guard's ``except`` binds the name
        to it (``_falls_back_to``), which is why every use builds torch's class alike."""
        fix = self._rename_fix(node, target.new, "unsafe", target.min_torch)
        if fell_back:
            built = (
                "and wherever it is built (here or in another module) torch's class was built "
                f"in its place where apex was missing (the `except` at line "
                f"{guard.handlers[0].lineno} binds `{cls.name}` to `{target.new}`)"
            )
        else:
            built = "built here only with arguments torch's class takes alike"
        message = (
            f"{head}: as the base of `{cls.name}` (line {cls.lineno}), whose methods read only "
            f"what both classes share and call `super().forward`, {built}: it is rebased on "
            f"`{target.new}`; {target.accepts}"
        )
        if guard is not None:
            flags = sorted(_handler_flags(guard))
            message += (
                f"; the `try` at line {guard.lineno} stays, and its `except` (line "
                f"{guard.handlers[0].lineno}) can no longer run"
                + (
                    f": {', '.join(f'`{f}`' for f in flags)} now "
                    f"{'keeps the value' if len(flags) == 1 else 'keep the values'} the `try` "
                    "sets (a run without apex took the other path)"
                    if flags
                    else ""
                )
            )
        return fix, message

    def _exported(self, node: ast.expr, target: Target, head: str, where: ast.AST) -> bool:
        """Reported here (True) where the name's module-level import, which a call's fix
        deletes once unused, is imported from this module by others (ru-gpts:
        `mpu/__init__.py` re-exports `transformer.LayerNorm`, and every entry point imports
        `mpu`): rebound to torch's class where that keeps every use (``_rebind``), else
        refused, naming the importers."""
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return False
        bindings = self.names.bindings(root)
        if not bindings or any(
            b.alias is None or any(isinstance(a, _SCOPES) for a in self.names.ancestors(b.node))
            for b in bindings
        ):
            return False
        users = self._importers(root.id)
        if users == []:
            return False
        if users is None:
            why = f"the project is too large to tell whether other modules import `{root.id}`"
        else:
            why = f"other modules take `{root.id}` from this one ({self._shown(users)})"
            try:
                fix, bound = self._rebind(bindings[0].node, root.id, target)
            except NoFix as reason:
                why += f"; its import cannot become torch's class under the name: {reason}"
            else:
                self._report(target, where, (
                    f"{head}: {why}, so the import binds the name to torch's class "
                    f"(`{bound}`) and every use, here and there, gets it: {target.accepts}; "
                    "their uses are not read here (a `memory_efficient=` argument raises in "
                    "torch, a type test matches every torch LayerNorm)"
                ), fix)  # fmt: skip
                return True
        reason = (
            f"{why}, and the fix deletes its import once unused here: bind the name to "
            f"`{target.new}` at the import and check those uses, by hand"
        )
        self._report(target, where, f"{head}: no automatic fix: {reason}", None)
        return True

    def _rebind(self, stmt: ast.AST | None, name: str, target: Target) -> tuple[Fix, str]:
        """``from apex.normalization import FusedLayerNorm as LayerNorm`` that other modules
        import the name from (HERO's `BertLayerNorm`, ru-gpts' `mpu.LayerNorm`): the import
        becomes ``from torch.nn import LayerNorm as <name>``, so the name stays and means
        torch's class everywhere. Only for FusedLayerNorm, whose defaults torch's class shares,
        and where this file's own uses work alike with it."""
        if target is not TARGETS["apex.normalization.FusedLayerNorm"]:
            raise NoFix(f"`{target.new}`'s defaults or arguments differ from apex's")
        if (
            not isinstance(stmt, ast.ImportFrom)
            or stmt.level
            or stmt.module not in _NORM_MODULES
            or len(stmt.names) != 1
        ):
            raise NoFix("it is not a one-name `from apex.normalization import` of its own")
        guard = next((a for a in self.names.ancestors(stmt) if isinstance(a, ast.Try)), None)
        if guard is not None:
            raise NoFix(
                f"it sits in the `try` at line {guard.lineno}, whose other statements and "
                "`except` are not rewritten with it"
            )
        self._no_memory_efficient()
        self._fallback_uses(stmt, name, target)
        bound = f"from torch.nn import LayerNorm as {name}"
        start, end = self.source.span(stmt)
        return Fix("unsafe", edits=(Edit(start, end, bound),)), bound

    def _stand_in_import(self, node: ast.AST) -> tuple[ast.ImportFrom, ast.alias] | None:
        """The one import that binds the Name ``node``, where it is a single-line ``from
        apex.normalization import ...`` outside a ``try`` that catches ImportError (those are
        ``_try``'s): the statement a stand-in class can replace."""
        if not isinstance(node, ast.Name):
            return None
        bindings = self.names.bindings(node)
        if len(bindings) != 1 or bindings[0].alias is None:
            return None
        stmt = bindings[0].node
        if (
            not isinstance(stmt, ast.ImportFrom)
            or stmt.level
            or stmt.module not in _NORM_MODULES
            or stmt.lineno != stmt.end_lineno
            or self.source.line(stmt.lineno).strip() != self.source.segment(stmt)
        ):
            return None
        if _probing_tries(self.names, stmt):
            return None
        return stmt, bindings[0].alias

    def _rms_stand_in(self, node: ast.Name, name: str) -> Fix:
        """The fix for apex's RMSNorm ``name`` read as a value or a base class: its import
        becomes ``_rms_class`` under the same name (after the top import block, so that
        ``torch`` is bound before it), so every use keeps apex's parameters and defaults."""
        found = self._stand_in_import(node)
        assert found is not None
        stmt, alias = found
        self._no_memory_efficient()
        torch_name, add_torch = self._torch(stmt)
        module_level = not any(isinstance(a, _SCOPES) for a in self.names.ancestors(stmt))
        start, end = self._statement_lines(stmt)
        rest = [a for a in stmt.names if a is not alias]
        indent = self.source.line_indent(stmt.lineno)
        kept = ""
        if rest:
            listed = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in rest)
            kept = f"{indent}from {stmt.module} import {listed}\n"
        text = _rms_class(node.id, name, torch_name, indent)
        body = self.tree.body
        top = []
        for first in body[1:] if body and ast.get_docstring(self.tree) is not None else body:
            if not isinstance(first, ast.Import | ast.ImportFrom):
                break
            top.append(first)
        in_top = module_level and any(s is stmt for s in top)
        anchor = top[-1] if in_top else stmt  # the class goes after it
        later = [
            b.node.lineno
            for b in self.names.bindings(stmt, "torch")
            if module_level and b.node is not None and b.node.lineno > anchor.lineno
        ]
        if later:
            raise NoFix(
                f"`torch` is imported at line {later[0]}, after the apex import: move that "
                "import up first (the class that replaces apex's must follow it)"
            )
        if in_top:
            at = self._statement_lines(anchor)[1]
            edits = [Edit(start, end, kept), Edit(at, at, "\n\n" + text + self._gap(at, 2))]
        else:
            lead = "\n\n" if module_level and start else ""
            gap = self._gap(end, 2 if module_level else 1)
            edits = [Edit(start, end, kept + lead + text + gap)]
        return Fix(
            "unsafe",
            edits=tuple(edits),
            add_imports=frozenset({"torch"} if add_torch else ()),
            min_torch=TARGETS[name].min_torch,
        )

    def _gap(self, at: int, lines: int) -> str:
        """The newlines that leave ``lines`` blank lines between a class inserted at ``at`` and
        the code after it."""
        rest = self.source.text[at:]
        if not rest.strip():
            return ""
        blank = len(rest) - len(rest.lstrip("\n"))
        return "\n" * max(0, lines - blank)

    def _no_memory_efficient(self) -> None:
        """torch's norms have no ``memory_efficient`` attribute: a read of it (apex's) fails."""
        for node in ast.walk(self.tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "memory_efficient"
                and isinstance(node.ctx, ast.Load)
            ):
                raise NoFix(
                    f"`.memory_efficient` is read at line {node.lineno}, which may be apex's "
                    "norm attribute (torch's norms have none)"
                )


def _calls_super_init(init: ast.FunctionDef) -> bool:
    """``init`` calls ``super().__init__(...)`` once, in its own body (not under a test)."""
    calls = [
        s
        for s in init.body
        if isinstance(s, ast.Expr)
        and isinstance(s.value, ast.Call)
        and isinstance(s.value.func, ast.Attribute)
        and s.value.func.attr == "__init__"
        and isinstance(s.value.func.value, ast.Call)
        and dotted(s.value.func.value.func) == "super"
    ]
    return len(calls) == 1
