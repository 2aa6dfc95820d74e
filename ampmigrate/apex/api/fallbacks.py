"""``try: <apex import> except ImportError: <fallback>``: the fallback already is the
migration where it computes what apex did; the ``try`` goes, or the swap of the project's own
class for apex's goes."""

from __future__ import annotations

import ast
import os
import re

from ampmigrate.apex.api import table
from ampmigrate.apex.api.common import (
    _SCOPES,
    _SHARED,
    _accepts,
    _bound_names,
    _catches_import_error,
    _literal_in,
    _logs,
    _rms_class,
)
from ampmigrate.apex.api.table import TARGETS, Target
from ampmigrate.apex.ondisk import _project_files, module_definition, module_tree
from ampmigrate.apex.users import users_on_disk
from ampmigrate.engine.names import dotted
from ampmigrate.findings import Edit, Finding, Fix, ImportEdit
from ampmigrate.renames import CallText, NoFix, _Plan, _pure

_STDLIB = frozenset({"functools", "typing", "warnings", "logging", "os", "sys", "math"})


def _uses_in(path: str, name: str, accepted: tuple[str, ...]) -> bool:
    """Raise ``NoFix`` unless every use, in the module at ``path``, of ``name`` imported
    from the module being fixed is its import, a call that passes only ``accepted``
    arguments (no splat), or a type test (``isinstance``, ``issubclass``): the 64th review's
    Lumina, whose blocks import the norm (`RMSNorm(dim, eps=norm_eps)`) from the module that
    swaps it for apex's. True where a type test was seen."""
    tree = module_tree(path)
    shown = os.path.basename(path)
    if tree is None:
        raise NoFix(f"{shown}, which uses the name, does not parse")
    bound = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
        if a.name == name
    }
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    typed = False
    for use in ast.walk(tree):
        if isinstance(use, ast.Attribute) and use.attr == name:
            raise NoFix(f"{shown}:{use.lineno} reads the name through its module")
        if not (isinstance(use, ast.Name) and use.id in bound):
            continue
        parent = parents.get(use)
        where = f"{shown}:{use.lineno}"
        if not isinstance(use.ctx, ast.Load):
            raise NoFix(f"{where} binds the name again")
        if isinstance(parent, ast.Call) and parent.func is use:
            _accepts(parent, accepted, f"the call at {where}")
            continue
        holder = parents.get(parent) if isinstance(parent, ast.Tuple) else parent
        tested = parent if isinstance(parent, ast.Tuple) else use
        if not (
            isinstance(holder, ast.Call)
            and dotted(holder.func) in ("isinstance", "issubclass")
            and len(holder.args) == 2
            and holder.args[1] is tested
        ):
            raise NoFix(f"{where} uses the name other than by a call or a type test")
        typed = True
    return typed


def _parameters(cls: ast.ClassDef) -> list[str] | None:
    """The parameters the class ``cls`` makes (``self.x = nn.Parameter(...)``,
    ``self.register_parameter("x", ...)``); None: one it makes otherwise (a submodule)."""
    found: list[str] = []
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            kind = (dotted(node.value.func) or "").rpartition(".")[2]
            for t in node.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name):
                    if t.value.id == "self" and kind == "Parameter":
                        found.append(t.attr)
                    elif t.value.id == "self" and kind[:1].isupper():
                        return None  # a submodule: its parameters are nested
        elif isinstance(node, ast.Call) and dotted(node.func) == "self.register_parameter":
            name = node.args[0] if node.args else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                return None
            found.append(name.value)
    return found


def _same_computation(apex: ast.FunctionDef, fallback: ast.FunctionDef | None) -> bool:
    """``fallback`` takes ``apex``'s parameters alike and returns what ``apex`` itself returns
    for some inputs (fairseq's ``cross_entropy`` returns ``_cross_entropy_pytorch(...)`` for a
    CPU tensor, its fallback for every tensor): the project defines the two as one
    computation, apex's kernel a faster path of it."""
    if fallback is None or ast.dump(apex.args) != ast.dump(fallback.args):
        return False
    if [ast.dump(d) for d in apex.decorator_list] != [ast.dump(d) for d in fallback.decorator_list]:
        return False
    body = fallback.body[1:] if ast.get_docstring(fallback) is not None else fallback.body
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return False
    returned = ast.dump(body[0].value)
    # the return runs first thing, behind `if` tests only (50a: a parameter changed before
    # it, or a return in a nested function, is no evidence)
    block = apex.body[1:] if ast.get_docstring(apex) is not None else apex.body
    while block:
        first = block[0]
        if isinstance(first, ast.Return):
            return first.value is not None and ast.dump(first.value) == returned
        if not isinstance(first, ast.If) or any(  # (a test that changes an argument, 51a)
            isinstance(n, ast.NamedExpr)
            or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr.endswith("_") and not n.func.attr.startswith("_"))
            for n in ast.walk(first.test)
        ):  # fmt: skip
            return False
        block = first.body
    return False


def _replaces(stmt: ast.stmt) -> bool:
    """A statement of a fallback that provides a replacement: an import, a definition, an
    assignment of something other than a literal (``X = None`` is an availability flag), a
    call (a log line)."""
    if isinstance(stmt, ast.Assign | ast.AnnAssign):
        return stmt.value is not None and not isinstance(stmt.value, ast.Constant)
    kinds = ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef | ast.Expr
    return isinstance(stmt, kinds)


_PARAMETERS = {"torch.nn.LayerNorm": ("weight", "bias"), "torch.nn.RMSNorm": ("weight",)}


# builtins through which code reads a module's names without spelling them
_DYNAMIC = frozenset({"globals", "locals", "vars", "eval", "exec", "__import__"})


class Fallbacks:
    """The fallbacks stage of the non-amp planner (mixed into ``plan._Planner``)."""

    # ---- guarded imports ---------------------------------------------------------------------

    def _try(self, node: ast.Try) -> None:
        """``try: from apex.x import Y [as Z] ... except ImportError: <fallback>``."""
        if node.orelse or node.finalbody or not node.handlers:
            return
        if self._own_fallback(node):
            return
        if not all(_catches_import_error(h) for h in node.handlers):
            return
        imported: dict[str, str] = {}  # bound name -> apex name
        swaps: list[ast.Assign] = []
        helpers: set[str] = set()  # names a stdlib import of the `try` binds (`partial`)
        partial = False  # a swap binds `functools.partial(<apex class>, ...)` (InternVL)
        probes: list[int] = []
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("apex."):
                if stmt.level:
                    return
                for alias in stmt.names:
                    full = f"{stmt.module}.{alias.name}"
                    if full not in TARGETS and full not in table.SAME:
                        return
                    imported[alias.asname or alias.name] = full
            elif isinstance(stmt, ast.Assign) and self._swaps(stmt, imported):
                swaps.append(stmt)
                partial = partial or not isinstance(stmt.value, ast.Name)
            elif self._probe_build(stmt, imported, node):
                probes.append(stmt.lineno)  # (goes with the `try`)
            elif (
                isinstance(stmt, ast.Import | ast.ImportFrom)
                and not getattr(stmt, "level", 0)
                and all(
                    (a.name if isinstance(stmt, ast.Import) else stmt.module or "").partition(".")[
                        0
                    ]
                    in _STDLIB
                    for a in stmt.names
                )
            ):  # (the 64th review's InternVL: `from functools import partial` in the `try`)
                helpers |= {(a.asname or a.name).partition(".")[0] for a in stmt.names}
            elif not isinstance(stmt, ast.Expr):
                return
        if not imported or (helpers and self._used_outside(node, helpers)):
            return
        first = next(s for s in node.body if isinstance(s, ast.ImportFrom))
        apex_name = imported[sorted(imported)[0]]
        target = TARGETS.get(apex_name)
        code = target.code if target else table.SAME_OBJECT
        bound = set(imported) | {s.targets[0].id for s in swaps}
        if (
            not partial
            and len(node.handlers) == 1
            and bound <= _bound_names(node.handlers[0].body)
            and all(_replaces(stmt) for stmt in node.handlers[0].body)
        ):
            handler = node.handlers[0]
            binds = next((st for st in handler.body if not _logs(st)), handler.body[0])
            fallback = self.source.segment(binds).splitlines()[0]
            apex_of = {**imported, **{w.targets[0].id: imported[w.value.id] for w in swaps}}
            differs, exact = self._fallback_differs(node, apex_of)
            if differs is not None:  # (keeping it would run other code where apex ran)
                found = self._class_fallback(node, imported, swaps, first, code)
                if found is not None:
                    self.findings.append(found)
                    self._consumed.add(node)
                    return
                self.findings.append(Finding(code, (
                    f"`{apex_name}` is imported with a fallback (`{fallback}`), but the "
                    f"fallback is not its migration: {differs}; dropping the `try` would run "
                    "it where apex was installed. Replace the apex import by the torch "
                    "counterpart with apex's defaults written out, by hand"
                ), first))  # fmt: skip
                self._consumed.add(node)
                return
            message = (
                f"`{apex_name}` is imported with a fallback (`{fallback}`): the fallback is the "
                "migration; the fix keeps it and drops the `try` (the code now runs the "
                "fallback where apex was installed"
            )
            message += f": {target.accepts})" if target else ")"
            for other in sorted(set(imported.values()) - {apex_name}):
                if (also := TARGETS.get(other)) is not None and also is not target:
                    message += f"; `{other}` -> `{also.new}`: {also.accepts}"
            if exact:
                message += f"; {exact}"
            if probes:
                listed = ", ".join(map(str, probes))
                message += f"; the module built to probe apex's kernel (line {listed}) goes too"
            kept = list(handler.body)  # the log lines that announced a missing apex go
            while len(kept) > 1 and _logs(kept[0]):
                kept.pop(0)
            while len(kept) > 1 and _logs(kept[-1]):
                kept.pop()
            dropped = [s for s in handler.body if s not in kept]
            if dropped:
                lines = ", ".join(str(s.lineno) for s in dropped)
                message += f"; what the fallback logged where apex was missing (line {lines}) goes"
            edit = Edit(*self._statement_lines(node), self._dedented(kept, node))
            edits = (edit, *self._written.get(id(node), ()))
            fix = Fix("unsafe", edits=edits, remove_imports=self._log_imports(dropped))
            self.findings.append(Finding(code, message, first, fix))
            self._consumed.add(node)
            return
        if not swaps or any(
            not all(isinstance(s, ast.Pass | ast.Expr) for s in h.body) for h in node.handlers
        ):
            return
        if self._used_outside(node, set(imported)):
            return
        for swap in swaps:
            own = [b for b in self.names.bindings(swap.targets[0]) if b.node is not swap.targets[0]]
            if not own or any(self._inside(b.node, node) for b in own):
                return  # the name is bound only by the swap: deleting it would unbind it
        swapped = ", ".join(f"`{s.targets[0].id}`" for s in swaps)
        message = (
            f"{swapped} is swapped for apex's `{apex_name}` when apex is installed: the fix "
            "deletes the swap and keeps the project's own class (its numerics replace apex's "
            "kernel where apex was installed)"
        )
        if partial:
            message += (
                "; the arguments `functools.partial` gave apex's class go with the swap: the "
                "project's class takes its own defaults there"
            )
        start, end = self._statement_lines(node)
        block = self._block_of(node)
        replacement = self.source.line_indent(node.lineno) + "pass\n" if len(block) == 1 else ""
        if replacement:
            start = self.source.line_start(node.lineno)
        fix = Fix("unsafe", edits=(Edit(start, end, replacement),))
        self.findings.append(Finding(code, message, first, fix))
        self._consumed.add(node)

    def _probe_build(self, stmt: ast.stmt, imported: dict[str, str], node: ast.Try) -> bool:
        """``_ = LayerNorm(8, eps=1e-5)`` in the ``try`` (or ``LayerNorm(8).cuda()``, the 81st
        review): a module of the apex class built only
        to learn whether its kernel loads (Megatron's and its copies', the 76th review), bound
        to ``_`` and read by nothing outside the ``try``; it goes with the ``try``."""
        return (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == "_"  # (a named one may be imported: the 77th review)
            and _built_from(stmt.value, imported)
            and not self._used_outside(node, {stmt.targets[0].id})
            and (  # (`from m import _` in another module: the 79th review)
                any(isinstance(a, _SCOPES) for a in self.names.ancestors(node))
                or self._importers("_") == []
            )
        )

    def _swaps(self, stmt: ast.Assign, imported: dict[str, str]) -> bool:
        """``stmt`` binds a project name to an apex name of ``imported``: ``X = FusedRMSNorm``
        or ``X = partial(FusedRMSNorm, eps=1e-6)`` (``functools.partial``, its other arguments
        pure)."""
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            return False
        value = stmt.value
        if isinstance(value, ast.Name):
            return value.id in imported
        return (
            isinstance(value, ast.Call)
            and bool(value.args)
            and isinstance(value.args[0], ast.Name)
            and value.args[0].id in imported
            and "functools.partial" in self.names.qualified(value.func)
            and all(_pure(a) for a in [*value.args[1:], *(k.value for k in value.keywords)])
            and all(k.arg is not None for k in value.keywords)
        )

    def _own_fallback(self, node: ast.Try) -> bool:
        """``try: import xentropy_cuda; from apex.contrib import xentropy; def cross_entropy(...):
        <apex's kernel> except ImportError: def cross_entropy(...): <torch>`` (fairseq's
        ``modules/cross_entropy.py``, copied in OFA and other forks; the 47th review): apex
        code the tool has no torch form of, defined again by the project's ``except`` for a
        machine without apex. That fallback may be the migration, but its results are not
        apex's kernel's (the 72nd review: fairseq's mean over ignored targets): named, no fix.
        False where the shape differs (the other rules then speak for the names)."""
        if len(node.handlers) != 1 or not _catches_import_error(node.handlers[0]):
            return False
        handler = node.handlers[0].body
        imports = [s for s in node.body if isinstance(s, ast.Import | ast.ImportFrom)]
        others = [s for s in node.body if s not in imports]
        names = []
        for stmt in imports:
            if isinstance(stmt, ast.ImportFrom):
                if stmt.level or not (stmt.module or "").startswith("apex."):
                    return False
                names += [f"{stmt.module}.{a.name}" for a in stmt.names]
            else:
                names += [a.name for a in stmt.names]
        if not imports or not all(
            n.startswith("apex.") or n.partition(".")[0] in table.COMPILED for n in names
        ):
            return False
        if any(n in TARGETS or n in table.SAME or n in table.TO_PYTHON_FLOAT for n in names):
            return False  # (a name with a torch form of its own: the rules for it decide)
        if not any(isinstance(s, ast.FunctionDef) for s in others) or not all(
            isinstance(s, ast.FunctionDef | ast.Assign | ast.Expr) for s in others
        ):
            return False
        apex = _bound_names(imports)
        if not _bound_names(others) <= _bound_names(handler) or self._used_outside(node, apex):
            return False
        fallbacks = {s.name: s for s in handler if isinstance(s, ast.FunctionDef)}
        if not all(
            _same_computation(s, fallbacks.get(s.name))
            for s in others
            if isinstance(s, ast.FunctionDef)
        ):
            return False  # (49a: a fallback without `reduction=`, one without label smoothing)
        if not any(isinstance(a, _SCOPES) for a in self.names.ancestors(node)) and any(
            self._importers(name) != [] for name in apex
        ):
            return False  # another module takes apex's name from this one (49a: `xentropy`)
        if any(
            isinstance(n, ast.Raise) or (isinstance(n, ast.Name) and n.id in apex)
            for stmt in handler
            for n in ast.walk(stmt)
        ):
            return False
        kept = list(handler)  # (the log lines that announced a missing apex go, as in _try)
        while len(kept) > 1 and _logs(kept[0]):
            kept.pop(0)
        while len(kept) > 1 and _logs(kept[-1]):
            kept.pop()
        if all(isinstance(s, ast.Pass) for s in kept):
            return False
        defined = ", ".join(f"`{n}`" for n in sorted(_bound_names(others)))
        target = next((TARGETS[n] for n in names if n in TARGETS), None)
        message = (
            f"`{names[-1]}` has no torch counterpart here; the `except` at line "
            f"{node.handlers[0].lineno} defines {defined} again without apex, with the same "
            "parameters and returning what the `try`'s own code returns for some inputs (a CPU "
            "tensor, say): keeping that fallback and dropping the `try` is the migration by "
            "hand, once its results are checked against those of the `try`'s code on the "
            "inputs apex's kernel took, which the tool does not compare (fairseq's "
            "`cross_entropy` averages over every target under apex, over those not ignored "
            "in its fallback)"
        )
        code = target.code if target else table.NO_NATIVE
        self.findings.append(Finding(code, message, imports[-1]))
        self._consumed.add(node)
        return True

    def _class_fallback(
        self,
        node: ast.Try,
        imported: dict[str, str],
        swaps: list[ast.Assign],
        first: ast.ImportFrom,
        code: str,
    ) -> Finding | None:
        """``try: from apex.normalization import FusedLayerNorm as BertLayerNorm`` with
        ``except ImportError: class BertLayerNorm(nn.Module): ...`` (the project's own class,
        as in BERT's forks): the fix keeps what ran with apex, its torch counterpart bound to the
        name (a stand-in class for RMSNorm, whose ``eps`` default differs), and deletes the
        project's class. None: not such a fallback (``_try`` says why it is no migration)."""
        handler = node.handlers[0]
        classes = {s.name: s for s in handler.body if isinstance(s, ast.ClassDef)}
        borrowed = self._borrowed(handler.body, set(imported))  # (the 72nd review's FlagAI)
        if swaps or set(classes) | set(borrowed) != set(imported) or set(classes) & set(borrowed):
            return None
        if not all(
            isinstance(s, ast.ClassDef | ast.Pass)
            or _logs(s)
            or any(s is b for b, _, _ in borrowed.values())
            for s in handler.body
        ):  # another statement of the fallback may be needed
            return None
        targets = {bound: TARGETS[full] for bound, full in imported.items() if full in TARGETS}
        if len(targets) != len(imported) or any(
            t.code != table.NORMALIZATION or t.new not in _SHARED for t in targets.values()
        ):
            return None
        bound = sorted(imported)[0]
        target, apex_name = targets[bound], imported[bound]
        if bound in classes:
            own, line, shown = classes[bound], classes[bound].lineno, f"`{bound}`"
        else:
            binding, own, module = borrowed[bound]
            line, shown = binding.lineno, f"`{bound}`, taken from the project's `{module}`"
        head = (
            f"`{apex_name}` is imported with a fallback, the project's own class {shown} "
            f"(line {line})"
        )
        module_level = not any(isinstance(a, _SCOPES) for a in self.names.ancestors(node))
        try:
            for name, each in targets.items():
                if each.min_torch and self.floor is not None and self.floor < each.min_torch:
                    needs, floor = (".".join(map(str, v)) for v in (each.min_torch, self.floor))
                    raise NoFix(
                        f"`{each.new}` needs torch >= {needs}; the project supports torch {floor}"
                    )
                self._fallback_uses(node, name, each)
            self._no_memory_efficient()
            torch_name, add_torch = self._torch(node)
            elsewhere = ""
            if module_level:
                users = users_on_disk(self.source.path, sorted(imported), imports=True)
                if users is None:
                    raise NoFix("other modules may use the name (the project is too large to look)")
                broadened = []  # (a type test of a name bound to torch's class itself)
                for path in sorted({f for f, _, _ in users}):
                    for name, each in targets.items():
                        stand_in = each.new == "torch.nn.RMSNorm"
                        accepted = each.params if stand_in else each.new_positional
                        if _uses_in(path, name, accepted) and not stand_in:
                            broadened.append(os.path.basename(path))
                if users:
                    shown = ", ".join(
                        f"{os.path.basename(f)}:{line}" for f, line, _ in users[:3]
                    ) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
                    elsewhere = (
                        f"; its uses in other modules ({shown}) are imports, calls with "
                        "arguments torch's class takes alike and type tests, read there"
                    )
                    if broadened:
                        elsewhere += (
                            f" (a type test in {', '.join(sorted(set(broadened)))} now matches "
                            f"every `{target.new}`, not only the ones this name builds)"
                        )
        except NoFix as reason:
            return Finding(code, (
                f"{head}: the fallback is not its migration; no automatic fix: {reason}. Replace "
                "the `try` by the torch counterpart with apex's defaults written out, by hand"
            ), first)  # fmt: skip
        indent = self.source.line_indent(node.lineno)
        start, end = self._statement_lines(node)
        text = []
        for name, full in imported.items():
            if targets[name].new == "torch.nn.RMSNorm":
                text.append(_rms_class(name, full, torch_name, indent))
            else:
                text.append(f"{indent}{name} = {torch_name}{targets[name].new[len('torch') :]}\n")
        binds = (
            f"defines `{bound}` as a subclass of `torch.nn.RMSNorm` with apex's parameters and "
            "`eps=1e-5` default"
            if target.new == "torch.nn.RMSNorm"
            else f"binds `{bound}` to `{target.new}`"
        )
        signature = next(
            (
                f"`__init__({ast.unparse(f.args)})`"
                for f in (own.body if own is not None else ())
                if isinstance(f, ast.FunctionDef) and f.name == "__init__"
            ),
            "its own constructor",
        )  # fmt: skip
        drops = "deletes the project's class" if bound in classes else "no longer takes it"
        message = (
            f"{head}: the fix {binds} (what ran where apex was installed) and {drops}. Where "
            f"apex was installed nothing changes beyond "
            f"`{apex_name.rpartition('.')[2]}` -> `{target.new}`: {target.accepts}. Where it "
            f"was not, the project's class (line {line}, {signature}: its own defaults "
            f"and numerics) ran and `{target.new}` runs now{elsewhere}"
        )
        held = _parameters(own) if own is not None else None
        expected = _PARAMETERS[target.new]
        if held is None:
            message += (
                "; the project's class makes its parameters in a way not read here: checkpoints "
                "saved without apex may not load"
            )
        elif set(held) != set(expected):
            message += (
                f"; its parameters ({', '.join(f'`{p}`' for p in held) or 'none'}) are not "
                f"torch's ({', '.join(f'`{p}`' for p in expected)}): checkpoints saved where "
                "apex was not installed no longer load by key"
            )
        if len(imported) > 1:
            message += f"; the same for {', '.join(f'`{n}`' for n in sorted(imported)[1:])}"
        if any(t.new == "torch.nn.RMSNorm" for t in targets.values()):
            before = self.source.text[:start]
            blank = len(before) - len(before.rstrip("\n")) - 1 if before.strip() else 2
            lines = 2 if module_level else 1
            text.insert(0, "\n" * max(0, lines - blank))
            text.append(self._gap(end, lines))
        edit = Edit(start, end, "".join(text))
        fix = Fix(
            "unsafe",
            edits=(edit,),
            add_imports=frozenset({"torch"} if add_torch else ()),
            remove_imports=self._log_imports([s for s in handler.body if _logs(s)]),
            min_torch=max((t.min_torch for t in targets.values()), default=()),
        )
        return Finding(code, message, first, fix)

    def _dead_value(self, use: ast.Name, node: ast.AST) -> bool:
        """``use`` sits in a value bound to a name nothing reads (TinyBERT's ``NORM =
        {'layer_norm': BertLayerNorm}``, the 72nd review): nothing can call it. A registry that
        is read keeps the refusal (the 73rd review: `NORM['layer_norm'](6,
        memory_efficient=True)` raised TypeError on torch's class)."""
        for above in self.names.ancestors(use):
            if isinstance(above, ast.Dict | ast.List | ast.Tuple | ast.Set):
                continue
            return (
                isinstance(above, ast.Assign)
                and len(above.targets) == 1
                and isinstance(above.targets[0], ast.Name)
                and self._unread(above.targets[0].id, above)
            )
        return False

    def _unread(self, name: str, node: ast.AST) -> bool:
        """Nothing reads ``name`` outside ``node``, in any way the tool can see: no read by
        name, no string of it, no ``globals()``/``eval``/``vars()``/``__dict__`` in the file,
        and (at module level) no other module of the project that imports it or reads this
        module's attributes with ``getattr`` (the 73rd review's `globals()["AdamW"]`, `eval`,
        `getattr(optim, "Adam" + "W")`: a wrong rewrite each)."""
        for use in ast.walk(self.tree):
            if isinstance(use, ast.Name) and use.id == name and not self._inside(use, node):
                return False
            if isinstance(use, ast.Constant) and use.value == name:
                return False
            if isinstance(use, ast.Name) and use.id in _DYNAMIC:
                return False
            if isinstance(use, ast.Attribute) and use.attr == "__dict__":
                return False
        if not self.source.path or any(isinstance(a, _SCOPES) for a in self.names.ancestors(node)):
            return True  # (no file: no other module to read it)
        if self._importers(name) != []:
            return False
        stem = os.path.splitext(os.path.basename(self.source.path))[0].encode()
        files = _project_files(self.source.path)
        for other in files or ():
            if os.path.abspath(other) == os.path.abspath(self.source.path):
                continue
            try:
                with open(other, "rb") as handle:
                    data = handle.read()
            except OSError:
                return False
            if b"getattr(" in data and re.search(rb"\b%s\b" % re.escape(stem), data):
                return False
        return files is not None

    def _log_imports(self, dropped: list[ast.stmt]) -> tuple[ImportEdit, ...]:
        """The module imports the dropped log lines read (``import warnings`` for
        ``warnings.warn``): removed where nothing else reads them (switti, the 72nd review)."""
        roots = {
            n.func.value.id
            for s in dropped
            for n in ast.walk(s)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Name)
        }
        return tuple(
            ImportEdit(a.name, None, a.asname)
            for stmt in self.tree.body
            if isinstance(stmt, ast.Import)
            for a in stmt.names
            if (a.asname or a.name) in roots and "." not in a.name
        )

    def _borrowed(
        self, handler: list[ast.stmt], names: set[str]
    ) -> dict[str, tuple[ast.stmt, ast.ClassDef | None, str]]:
        """The names of ``names`` the ``except`` binds to a class of a project module (``from
        .layer_norm import LayerNorm``; ``FusedLayerNorm = LayerNorm`` where ``LayerNorm`` is
        imported from one): name -> (the binding statement, the class where it is read on disk,
        the module as spelled)."""
        out: dict[str, tuple[ast.stmt, ast.ClassDef | None, str]] = {}
        for stmt in handler:
            found: list[tuple[str, str]] = []  # (the name bound, the qualified class)
            if isinstance(stmt, ast.ImportFrom) and stmt.level:
                base = "." * stmt.level + (stmt.module or "")
                found = [
                    (a.asname or a.name, f"{base}.{a.name}" if stmt.module else base + a.name)
                    for a in stmt.names
                ]
            elif (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and isinstance(stmt.value, ast.Name)
            ):
                qualified = sorted(self.names.qualified(stmt.value))
                if len(qualified) == 1 and qualified[0].startswith("."):
                    found = [(stmt.targets[0].id, qualified[0])]
            for name, qualified in found:
                if name not in names:
                    continue
                defined = module_definition(self.source.path, qualified)
                own = defined[1] if defined and isinstance(defined[1], ast.ClassDef) else None
                out[name] = (stmt, own, qualified.rpartition(".")[0])
        return out

    def _fallback_uses(self, node: ast.stmt, name: str, target: Target) -> None:
        """Raise ``NoFix`` unless every use of ``name`` outside ``node`` (the ``try``, or the
        import) works alike with
        torch's counterpart as with apex's class or the project's (the rule for replacing a
        project's class): a call whose arguments torch takes with apex's meaning (no splat),
        a type test or annotation, or a subclass whose body reads of ``self`` only what it sets
        itself or what apex's and torch's classes share (``weight``, ``bias``, ``eps``, ...)
        and of ``super()`` only ``__init__`` (called so) and ``forward``; a value passed on
        where the torch name may stand for apex's as a value (LayerNorm, in a registry: the
        72nd review's TinyBERT). Anything else (such a value of another target, an attribute
        of the class) is refused: its uses are not visible."""
        stand_in = target.new == "torch.nn.RMSNorm"  # takes apex's parameters
        accepted = target.params if stand_in else target.new_positional
        for use in ast.walk(self.tree):
            if not (isinstance(use, ast.Name) and use.id == name) or self._inside(use, node):
                continue
            parent = self.names.parent(use)
            if not isinstance(use.ctx, ast.Load):
                raise NoFix(f"`{name}` is bound again at line {use.lineno}")
            if isinstance(parent, ast.Call) and parent.func is use:
                _accepts(parent, accepted, f"the call at line {use.lineno}")
            elif isinstance(parent, ast.ClassDef) and any(use is b for b in parent.bases):
                self._subclass_reads(parent, accepted, _SHARED[target.new])
            elif not (self._typed(use) or self._annotation(use) or self._dead_value(use, node)):
                raise NoFix(
                    f"`{name}` is used as a value at line {use.lineno}: the calls made with it "
                    "are not visible here"
                )

    def _subclass_reads(
        self, cls: ast.ClassDef, accepted: tuple[str, ...], shared: frozenset[str]
    ) -> None:
        """Raise ``NoFix`` where the subclass ``cls`` reads what torch's class may lack."""
        own = {s.name for s in cls.body if isinstance(s, ast.FunctionDef | ast.ClassDef)}
        own |= {
            n.attr
            for n in ast.walk(cls)
            if isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
        }
        for n in ast.walk(cls):
            if not isinstance(n, ast.Attribute):
                continue
            if isinstance(n.value, ast.Call) and dotted(n.value.func) == "super":
                call = self.names.parent(n)
                if n.attr == "__init__" and isinstance(call, ast.Call) and call.func is n:
                    _accepts(call, accepted, f"`super().__init__` at line {n.lineno}")
                elif n.attr != "forward":
                    raise NoFix(f"the subclass `{cls.name}` reads `super().{n.attr}`")
            elif (
                isinstance(n.value, ast.Name)
                and n.value.id == "self"
                and isinstance(n.ctx, ast.Load)
                and n.attr not in own | shared
            ):
                raise NoFix(
                    f"the subclass `{cls.name}` reads `self.{n.attr}` (line {n.lineno}), which "
                    "torch's class may lack"
                )

    def _fallback_differs(self, node: ast.Try, apex_of: dict[str, str]) -> tuple[str | None, str]:
        """Why the fallback that binds the names of ``apex_of`` (name -> the apex name it
        stands for) is not their migration (None: each name is bound to its apex name's
        torch counterpart itself, whose defaults are apex's): a project
        class or function (its parameters, defaults and numerics are its own, not checked),
        another torch object (``FusedAdam = torch.optim.Adam``: L2 decay where apex's is
        decoupled), or the counterpart with a default that differs. A torch fallback that
        differs only where no call of it here goes is the migration after all (FlagPerf's
        GLM passes every argument whose default differs); the second item says so."""
        exact = ""
        for stmt in node.handlers[0].body:
            for name in sorted(apex_of):  # (each name against its own apex name's counterpart)
                apex_name = apex_of[name]
                target = TARGETS.get(apex_name)
                value = None
                if isinstance(stmt, ast.ImportFrom):  # (relative: a module of the project)
                    base = "." * stmt.level + (stmt.module or "")
                    value = next((
                        f"{base}.{a.name}" if stmt.module else f"{base}{a.name}"
                        for a in stmt.names if (a.asname or a.name) == name
                    ), None)  # fmt: skip
                elif isinstance(stmt, ast.Import):
                    value = next((a.name for a in stmt.names if a.asname == name), None)
                elif isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in stmt.targets
                ):
                    value = next(iter(sorted(self.names.qualified(stmt.value))), None)
                    value = value or ast.unparse(stmt.value)
                elif isinstance(stmt, ast.ClassDef | ast.FunctionDef) and stmt.name == name:
                    return (
                        f"it defines `{name}` itself (line {stmt.lineno}), whose parameters, "
                        "defaults and numerics are the project's, not torch's counterpart"
                    ), ""
                if value is None:
                    continue
                counterpart = target.new if target is not None else table.SAME.get(apex_name)
                if value.startswith("."):
                    how = (
                        f"it binds `{name}` to `{value.rpartition('.')[2]}` of the project's "
                        f"`{value.rpartition('.')[0]}`"
                        if isinstance(stmt, ast.Assign)  # (EVA-CLIP, the 72nd review)
                        else f"it imports `{name}` from the project's `{value.rpartition('.')[0]}`"
                    )
                    return (
                        f"{how} (line {stmt.lineno}), whose parameters, defaults and numerics "
                        "are the project's, not torch's counterpart"
                    ), ""
                if value == counterpart and not (target is not None and target.write):
                    continue
                if target is not None and (why := self._exact_at_calls(node, name, target, value)):
                    exact = why
                    continue
                if value != counterpart:
                    return f"it binds `{name}` to `{value}` (apex's maps to `{counterpart}`)", ""
                if target.as_type and self._only_type_tests(node, name):
                    # (the 77th review: FusedAdam objects built elsewhere may become Adam)
                    return f"only type tests read `{name}`; {target.as_type}", ""
                written = ", ".join(f"`{k}={v}`" for k, v in target.write)
                return f"`{value}`'s defaults differ from apex's ({written} in apex)", ""
        return None, exact

    def _exact_at_calls(self, node: ast.Try, name: str, target: Target, value: str) -> str:
        """Why every use of ``name`` is a call that builds under the torch fallback ``value``
        what apex built ("": not shown). Each call passes only the leading positional arguments
        both share and keywords torch takes with apex's meaning, and either gives every
        argument whose default differs (``target.write``) or, for ``torch.optim.Adam`` in place
        of FusedAdam, no weight decay (both then apply the same update)."""
        if value != target.new and (target.new, value) != ("torch.optim.AdamW", "torch.optim.Adam"):
            return ""
        if not any(isinstance(a, _SCOPES) for a in self.names.ancestors(node)):
            users = self._importers(name)
            if users is None or users:
                return ""
        shared = 0
        while shared < len(target.new_positional) and (
            target.params[shared] == target.new_positional[shared]
        ):
            shared += 1
        takes = table.TORCH_TAKES.get(value, frozenset(target.new_positional))
        calls = typed = 0
        amend: list[tuple[ast.Call, list[tuple[str, str]]]] = []  # apex's defaults to write
        for use in ast.walk(self.tree):
            if not (isinstance(use, ast.Name) and use.id == name) or self._inside(use, node):
                continue
            if not all(self._inside(b.node, node) for b in self.names.bindings(use)):
                return ""  # bound elsewhere too
            if not target.as_type and (self._typed(use) or self._annotation(use)):
                # constructs nothing: no default applies (the 76th review); a type test of a
                # class whose objects become one of two torch classes is not exact, calls or no
                typed += 1
                continue
            call = self.names.parent(use)
            if not (isinstance(call, ast.Call) and call.func is use) or len(call.args) > shared:
                return ""
            if any(isinstance(a, ast.Starred) for a in call.args):
                return ""
            given = {k.arg: k.value for k in call.keywords}
            if any(
                k is None or k not in takes or k in target.rename or k in target.refuse
                for k in given
            ):
                return ""
            given.update(zip(target.params, call.args, strict=False))
            missing = [(k, v) for k, v in target.write if k not in given]
            if value == target.new and missing:
                amend.append((call, missing))
            decay = given.get("weight_decay")
            if value != target.new and decay is not None and not _literal_in(decay, (0,)):
                return ""
            calls += 1
        if not calls and self._unread(name, node):
            # (Lumina-mGPT: `FusedAdam as AdamW` that nothing reads, the 72nd review)
            return (
                f"nothing reads `{name}` outside the `try` (nor imports it from this module), "
                "so no default of it ever applies"
            )
        if not calls and typed:
            return (
                f"only type tests read `{name}` outside the `try`, and a type test constructs "
                "nothing, so no default of it ever applies"
            )
        if not calls:
            return ""
        if value != target.new:
            return "every call of it here passes no weight decay, where Adam and AdamW agree"
        listed = ", ".join(f"`{k}`" for k, _ in target.write)
        if not amend:
            return f"every call of it here passes {listed}, whose default differs"
        try:
            self._written[id(node)] = [e for c, m in amend for e in self._written_out(c, m)]
        except NoFix:
            return ""
        shown = ", ".join(
            f"`{k}={v}` at line {c.lineno}" for c, missing in amend for k, v in missing
        )
        return (
            f"apex's default is written where a call leaves {listed} out ({shown}): where apex "
            "was not installed, those calls got torch's default, unless their parameter groups "
            "set one"
        )

    def _only_type_tests(self, node: ast.Try, name: str) -> bool:
        """Something reads ``name`` outside ``node``, and only type tests or annotations."""
        uses = [
            use
            for use in ast.walk(self.tree)
            if isinstance(use, ast.Name) and use.id == name and not self._inside(use, node)
        ]
        return bool(uses) and all(self._typed(u) or self._annotation(u) for u in uses)

    def _written_out(self, call: ast.Call, missing: list[tuple[str, str]]) -> list[Edit]:
        """``call`` with ``missing`` (apex's defaults) added as keywords after its last
        argument, in the call's own layout (``NoFix``: its arguments cannot be read)."""
        plan = _Plan(CallText.read(self.source, call))
        for key, value in missing:
            plan.before(None, f"{key}={value}")
        return plan.edits()

    def _statement_lines(self, node: ast.stmt) -> tuple[int, int]:
        """From the start of ``node``'s first line to the start of the line after it."""
        start = self.source.line_start(node.lineno)
        try:
            end = self.source.line_start(node.end_lineno + 1)
        except IndexError:
            end = len(self.source.text)
        return start, end

    def _dedented(self, body: list[ast.stmt], where: ast.stmt) -> str:
        """``body``'s lines, moved to ``where``'s indentation (ending with a newline)."""
        indent = self.source.line_indent(where.lineno)
        first = body[0]
        if first.lineno == self._handler_line(first):  # `except ImportError: X = Y`
            return "".join(indent + self.source.segment(s) + "\n" for s in body)
        own = self.source.line_indent(first.lineno)
        out = []
        for line in range(first.lineno, body[-1].end_lineno + 1):
            text = self.source.line(line)
            out.append(indent + text[len(own) :] if text.startswith(own) else text)
        return "\n".join(out) + "\n"

    def _handler_line(self, stmt: ast.stmt) -> int:
        parent = self.names.parent(stmt)
        return parent.lineno if parent is not None else 0

    def _block_of(self, node: ast.stmt) -> list[ast.stmt]:
        parent = self.names.parent(node)
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and any(s is node for s in block):
                return block
        return [node]

    def _bound_by_consumed(self, node: ast.AST) -> bool:
        """Bound by a ``try`` whose own fix migrates it (its fallback or the swap's deletion)."""
        if not self._consumed:
            return False
        while isinstance(node, ast.Attribute):
            node = node.value
        if not isinstance(node, ast.Name):
            return False
        return any(
            self._inside(b.node, c) for b in self.names.bindings(node) for c in self._consumed
        )

    def _inside(self, node: ast.AST | None, container: ast.AST) -> bool:
        return node is not None and any(a is container for a in self.names.ancestors(node))

    def _used_outside(self, container: ast.AST, bound: set[str]) -> bool:
        for node in ast.walk(self.tree):
            if (
                isinstance(node, ast.Name)
                and node.id in bound
                and not self._inside(node, container)
            ):
                return True
        return False


def _built_from(value: ast.expr, imported: dict[str, str]) -> bool:
    """``value`` is a call of an imported apex class, or a chain of calls and attributes on one
    (``LayerNorm(8).cuda()``, ``LayerNorm(8).to("cuda")(x)``)."""
    while isinstance(value, ast.Call | ast.Attribute):
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            return value.func.id in imported
        value = value.func if isinstance(value, ast.Call) else value.value
    return False
