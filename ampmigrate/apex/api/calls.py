"""A call of an apex class or function: each argument mapped to torch's, written out where
the defaults differ, or refused with the reason; star imports and rival bindings of the name."""

from __future__ import annotations

import ast
import functools
import os
import re

from ampmigrate.apex.api import table
from ampmigrate.apex.api.common import (
    _bound_names,
    _catches_import_error,
    _executed,
    _FallbackCall,
    _literal_in,
)
from ampmigrate.apex.api.splat import Keys, groups_carry, splat_keys
from ampmigrate.apex.api.table import Target
from ampmigrate.apex.users import type_tests_on_disk
from ampmigrate.engine.names import Names
from ampmigrate.findings import Edit, Finding, Fix, ImportEdit
from ampmigrate.renames import CallText, NoFix, _pure

_TYPE_CHECKS = frozenset({"builtins.isinstance", "builtins.issubclass"})
_APEX_DDP_ONLY = frozenset({"disable_allreduce", "enable_allreduce", "allreduce_params"})
_OLD_ADAM = frozenset({"max_grad_norm", "eps_inside_sqrt", "amp_scale_adjustment"})
_OLD_WRAPPER = frozenset(
    {"apex.optimizers.FP16_Optimizer", "apex.optimizers.fp16_optimizer.FP16_Optimizer"}
)


def _carried(
    splats: list[Keys], values: dict[str, ast.expr], target: Target, new: str, fallback: bool
) -> frozenset[str]:
    """The keys the call's ``**`` splats always carry; ``NoFix`` (or ``_FallbackCall``) where
    one may carry a key the fix would have to drop, rename or decide a default for: a fix
    cannot edit inside the dict."""
    certain: set[str] = set()
    written = dict(target.write)
    for keys in splats:
        for key in sorted(keys.possible):
            splat = f"`**{keys.name}` may carry `{key}`"
            if key not in target.params:
                if fallback:
                    raise _FallbackCall
                if key in _OLD_ADAM and target.new.startswith("torch.optim.Adam"):
                    raise NoFix(f"{splat}, an argument of the pre-2019 FusedAdam (apex.contrib's)")
                if key in table.TORCH_TAKES.get(new, {key}):
                    raise NoFix(f"{splat}, which apex's signature lacks and `{new}` takes")
                continue  # apex and torch raise alike where it does
            if key in values:
                raise NoFix(f"{splat}, which the call also passes: it already fails there")
            if {key} & {*target.drop, *target.drop_any, *target.rename, *target.refuse}:
                raise NoFix(
                    f"{splat}, which the fix must drop, rename or judge by its value for "
                    f"`{new}`, and it cannot edit inside the dict"
                )
            if key in written and key not in keys.certain and new != "torch.optim.Adam":
                raise NoFix(
                    f"{splat} or not: where it does not, apex's default `{key}="
                    f"{written[key]}` differs from `{new}`'s, and writing it out would clash "
                    "where it does"
                )
        certain |= keys.certain
    return frozenset(certain)


def _joined(pieces: list[str], origin: list[int], read: CallText, text: str) -> str:
    """The rewritten arguments in the call's layout; where it puts them on lines of their own,
    the comments after a kept argument stay after it (``lr=1e-4,  # note``), as written (the
    last argument's are in the text after it, which the rewrite keeps as it is)."""
    out = []
    for at, piece in enumerate(pieces):
        out.append(piece)
        if at == len(pieces) - 1:
            break
        index = origin[at] if at < len(origin) else -1
        gap = (
            text[read.args[index].end : read.args[index + 1].start]
            if 0 <= index < len(read.args) - 1
            else ""
        )
        if "#" in gap and "\n" in read.separator:
            out.append(gap if gap.lstrip().startswith(",") else "," + gap)
        else:
            out.append(read.separator)
    return "".join(out)


def _star_exports(tree: ast.Module, name: str) -> bool:
    """``from <tree's module> import *`` may bind ``name``: its module-level code binds it
    (a def, a class, an import, an assignment, a `for` or walrus target, also under `if`/`try`),
    star-imports another module (not followed: it may), or binds names by `globals()`,
    `setattr` or `sys.modules`; unless a literal ``__all__``, never changed, leaves it out."""
    if re.search(r"globals\(\)|setattr\(|sys\.modules", ast.unparse(tree)):
        return True  # (bound by name: it may be)
    binds, listed = False, []
    for stmt in _module_statements(tree.body):
        if (
            isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets)
            and isinstance(stmt.value, ast.List | ast.Tuple)
            and all(isinstance(e, ast.Constant) for e in stmt.value.elts)
        ):
            listed.append(stmt)
        targets = stmt if isinstance(stmt, ast.Assign) else getattr(stmt, "target", None)
        stored = targets is not None and any(  # (a tuple, a `for` target, an annotation, 52a)
            isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
            for n in ast.walk(targets)
        )
        starred = isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names)
        walrus = any(isinstance(n, ast.NamedExpr) and n.target.id == name for n in ast.walk(stmt))
        binds = binds or stored or starred or walrus or name in _bound_names([stmt])
    # `__all__ +=`, `.append(...)` or a comprehension change it (52a): then it does not decide
    mentions = sum(isinstance(n, ast.Name) and n.id == "__all__" for n in ast.walk(tree))
    if len(listed) == 1 and mentions == 1:
        return name in {e.value for e in listed[0].value.elts}
    return binds


def _module_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Every statement that runs at module level, compound ones and those they hold (`except`
    and `case` bodies too), but none of a function's or a class's body."""
    out, pending = [], list(body)
    while pending:
        stmt = pending.pop(0)
        out.append(stmt)
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.stmt):
                pending.append(child)
            elif isinstance(child, ast.ExceptHandler | ast.match_case):
                pending += child.body
    return out


_LOOPS = (ast.For, ast.AsyncFor, ast.While)


class Calls:
    """The calls stage of the non-amp planner (mixed into ``plan._Planner``)."""

    # ---- calls -------------------------------------------------------------------------------

    def _call(
        self, call: ast.Call, callee: ast.expr, target: Target, fallback: bool = False
    ) -> tuple[str, Fix, list]:
        """The torch callee, the fix and its notes for a call of an apex name. ``fallback``:
        the name is also bound to the torch class itself, so a call with arguments only torch
        takes is a call of that fallback (raises ``_FallbackCall``)."""
        text = self.source.text
        read = CallText.read(self.source, call)
        args = read.args
        if any(a.star == "*" for a in args):
            raise NoFix("a `*args` splat cannot be mapped to apex's parameters")
        if only := self._apex_ddp_only(target):
            raise NoFix(only)
        if target.as_type and (tested := self._type_tested(callee)) is not None:
            where, line = tested
            if where == "line":
                at = f"at line {line}"
            elif line:
                at = f"at {os.path.relpath(where, os.path.dirname(self.source.path))}:{line}"
            else:
                at = "somewhere in the project (too large to look for it)"
            raise NoFix(
                f"a type test of apex's class {at} stays on it (no one torch class has its "
                "meaning): the object built here with torch's class would fail it; rewrite or "
                "remove that test first, by hand"
            )
        if target.new.startswith("torch.optim.Adam") and (line := self._old_fp16_wrapper):
            raise NoFix(
                f"this file uses `apex.optimizers.FP16_Optimizer` (line {line}), which lived "
                "there only before apex's 2019-10 restructuring: its FusedAdam is the pre-2019 "
                "one (now apex.contrib's), whose update rule differs and whose "
                "`step(grads=..., scale=...)` the wrapper calls (torch's `step` raises "
                "TypeError on those)"
            )
        splats = [splat_keys(self.names, call, a.node.value) for a in args if a.star == "**"]
        positional = [a for a in args if not a.keyword and not a.star]
        if len(positional) > len(target.params):
            raise NoFix(f"more positional arguments than apex's {len(target.params)}")
        values: dict[str, ast.expr] = {}
        for index, arg in enumerate(args):
            if arg.star:
                continue
            key = arg.keyword or target.params[index]
            if key not in target.params:
                if fallback:
                    raise _FallbackCall
                if key in _OLD_ADAM and target.new.startswith("torch.optim.Adam"):
                    raise NoFix(
                        f"`{key}` belongs to the pre-2019 FusedAdam (now apex.contrib's), whose "
                        "weight decay and bias correction differ"
                    )
                raise NoFix(f"`{key}` is not an argument of apex's signature")
            values[key] = arg.node.value if isinstance(arg.node, ast.keyword) else arg.node
        new = target.new
        if "adam_w_mode" in values and _literal_in(values["adam_w_mode"], table.FALSE):
            new = "torch.optim.Adam"  # apex's L2 mode is torch Adam's weight_decay
        carried = _carried(splats, values, target, new, fallback)
        missing = [
            p for p in target.params[: target.required] if p not in values and p not in carried
        ]
        carry = None
        if missing == ["lr"]:
            carry = groups_carry(self.names, call, values.get("params"), "lr")
        if missing == ["lr"] and carry is None:
            raise NoFix(
                "the call passes no `lr`: apex requires it unless every parameter group "
                "carries its own `lr`, which is not visible here"
            )
        if carry is False:
            raise NoFix(
                "a parameter group written here has no `lr` and the call passes none: apex "
                "raises ValueError, so the call already fails"
            )
        if missing and not carry:
            raise NoFix("the call lacks a required argument and already fails")
        pieces: list[str] = []
        origin: list[int] = []  # (per piece: the argument it comes from, -1: written out)
        dropped: list[str] = []
        predivided = False  # (`gradient_predivide_factor` at the world size, dropped)
        keep_positional = True
        for index, arg in enumerate(args):
            origin += [index - 1] * (len(pieces) - len(origin))  # (the previous argument's)
            if arg.star:
                keep_positional = False
                pieces.append(text[arg.start : arg.end])
                continue
            key = arg.keyword or target.params[index]
            value = values[key]
            if key in target.drop_any:
                if not _pure(value):
                    raise NoFix(f"dropping `{key}` would skip evaluating its value")
                dropped.append(key)
                keep_positional = keep_positional and bool(arg.keyword)
                continue
            if key == "gradient_predivide_factor" and self._world_size(value):
                # (apex divided by the factor before the all-reduce and multiplied by it over
                # the world size after: at the world size, torch's own pre-division; 64th
                # review; said since the 72nd)
                predivided = True
                keep_positional = keep_positional and bool(arg.keyword)
                continue
            if key in target.drop and _literal_in(value, target.drop[key]):
                keep_positional = keep_positional and bool(arg.keyword)
                continue
            torch_order = table.TORCH_POSITIONAL.get(new, target.new_positional)
            if (
                not arg.keyword
                and isinstance(value, ast.List | ast.Tuple)
                and index < len(torch_order)
                and torch_order[index] != key
                and key not in ("params", "betas")  # (apex's own order takes a sequence, 52a)
            ):  # (StudioGAN, 51b: `FusedAdam(params, lr, [beta1, beta2], eps=...)`)
                segment = self.source.segment(value)
                raise NoFix(
                    f"positional argument {index + 1} is apex's `{key}`, where `{new}` takes "
                    f"`{torch_order[index]}`: `{segment}` there left apex on its own "
                    f"`{torch_order[index]}` default, and torch's class would take this value "
                    "as them; pass it by keyword with the meaning you intend, by hand"
                )
            if key in target.refuse:
                reason = target.refuse[key]
                literal = isinstance(value, ast.Constant) or "is not a literal" in reason
                if key in target.drop and not literal:  # (the value may be the default)
                    segment = self.source.segment(value)
                    reason = f"`{key}` is given as `{segment}`, not as a literal, and {reason}"
                raise NoFix(reason)
            written = self.source.segment(value)
            if not arg.keyword and not (
                isinstance(value, ast.Constant | ast.Name | ast.Attribute | ast.Call)
            ):
                written = text[arg.start : arg.end]  # keep its parentheses
            at = len(pieces)
            if (
                not arg.keyword
                and keep_positional
                and at < len(target.new_positional)
                and target.new_positional[at] == key
            ):
                pieces.append(written)
            else:
                keep_positional = False
                pieces.append(f"{target.rename.get(key, key)}={written}")
        origin += [len(args) - 1] * (len(pieces) - len(origin))
        written_out = []
        for key, default in target.write:
            if key in carried:
                continue
            if key not in values and not (key == "weight_decay" and new == "torch.optim.Adam"):
                pieces.append(f"{key}={default}")
                written_out.append(f"`{key}={default}`")
        torch_takes = table.TORCH_TAKES.get(target.new)
        apex_only = torch_takes is not None and not set(values) <= torch_takes
        other, torch_too = self._other_classes(callee)
        if other is not None:  # (an argument only apex takes proves only that torch's class
            # would raise: DeepSpeed's CPU Adam or a project class takes it too, 51a)
            # 50a: `else: Opt = torch.optim.Adam`, `Opt = CPUAdam`, DeepSpeed's CPU Adam in
            # another arm: the call, written once, would build `new` for that binding too
            line, text = other
            raise NoFix(
                f"the name is also bound at line {line} (`{text}`), which this call may run: "
                f"written once it would build `{new}` there too; give each binding its own "
                "call (or keep one binding), by hand"
            )
        decay = values.get("weight_decay")
        undecayed = (  # Adam and AdamW agree without weight decay (apex's default, 0.0)
            torch_too == ["torch.optim.Adam"]
            and new == "torch.optim.AdamW"
            and (decay is None or _literal_in(decay, (0,)))
        )
        if torch_too and not apex_only and torch_too != [new] and not undecayed:
            # `else: from torch.optim import Adam as Opt` (the 49th review): that arm's calls
            # would build `torch.optim.AdamW` (decoupled decay where Adam's is L2)
            raise NoFix(
                f"the name is also bound to `{torch_too[0]}`, whose calls would build `{new}` "
                "after the fix, another class; keep one binding (or give each its own call), "
                "by hand"
            )
        if written_out and not apex_only and target.new in torch_too:
            # `if fused: from apex.optimizers import FusedAdam as Opt` / `else: from
            # torch.optim import AdamW as Opt` (the 47th review): that arm's calls ran with
            # torch's defaults, and the call written once takes apex's for both (a call with
            # an argument only apex takes, `delay_allreduce=True`, raised there: apex's alone)
            raise NoFix(
                f"the name is also bound to `{target.new}` itself, whose calls run with "
                f"torch's defaults: one call with apex's {', '.join(written_out)} written out "
                "would change that binding's runs, one without them apex's; pass the "
                "argument in the call (or keep one binding), by hand"
            )
        torch_name, add_torch = self._torch(call)
        callee_text = torch_name + new[len("torch") :]
        start, end = self.source.span(callee)
        lead = text[read.open : args[0].start] if args else ""
        trail = text[args[-1].end : read.close] if args else ""
        edits = (
            Edit(start, end, callee_text),
            Edit(read.open, read.close, lead + _joined(pieces, origin, read, text) + trail),
        )
        fix = Fix(
            "unsafe",
            edits=edits,
            add_imports=frozenset({"torch"} if add_torch else ()),
            remove_imports=self._import_edits(callee),
            min_torch=target.min_torch,
        )
        notes = []
        if written_out and target.new != "torch.nn.parallel.DistributedDataParallel":
            notes.append(f"{', '.join(written_out)} written out: apex's default, not torch's")
        if dropped:
            listed = ", ".join(f"`{d}`" for d in dropped)
            notes.append(f"dropped {listed} (no torch counterpart; speed or memory only)")
        if predivided:
            notes.append(
                "dropped `gradient_predivide_factor` (the world size: apex then divided the "
                "gradients by it before the all-reduce, as torch does)"
            )
        for keys in splats:
            listed = ", ".join(f"`{k}`" for k in sorted(keys.possible))
            notes.append(f"`**{keys.name}` carries only {listed}, as built in this function")
        return new, fix, notes

    def _type_tested(self, callee: ast.expr) -> tuple[str, int] | None:
        """Where the apex class ``callee`` names is type-tested, in this file (``line N``) or
        in another module of the project (the 67th review's Megatron-LLaMA: the optimizer
        ``get_megatron_optimizer`` builds is asserted to be a FusedAdam by
        ``DistributedOptimizer``); None: nowhere."""
        found, _ = self._apex_names(callee)
        if not found:
            return None
        name = found[0]
        if name not in self._type_tests:
            here = [
                node.lineno
                for node in ast.walk(self.tree)
                for one in _tested_classes(node, self.names)
                if name in self._apex_names(one)[0]
            ]
            self._type_tests[name] = (
                ("line", min(here))
                if here
                else type_tests_on_disk(self.source.path, name)
                if self.source.path
                else None
            )
        return self._type_tests[name]

    @functools.cached_property
    def _type_tests(self) -> dict[str, tuple[str, int] | None]:
        return {}

    @functools.cached_property
    def _old_fp16_wrapper(self) -> int | None:
        """The line of the first reference to ``apex.optimizers.FP16_Optimizer``: an apex from
        before 2019-10, whose optimizers are the old ones (jukebox's vendored apex tests)."""
        if "FP16_Optimizer" not in self.source.text:  # (every spelling of it names it)
            return None
        lines = [
            node.lineno
            for node in ast.walk(self.tree)
            if isinstance(node, ast.Name | ast.Attribute)
            and any(q in _OLD_WRAPPER for q in self.names.qualified(node))
        ]
        return min(lines, default=None)

    def _star_rebinds(self, node: ast.AST) -> tuple[int, str] | None:
        """A module-level ``from m import *`` after every apex import of ``node``'s root name,
        from a module of the project that defines that name (on disk, by its text). Its line
        and text."""
        from ampmigrate.scalerflow import _module_paths

        while isinstance(node, ast.Attribute):
            node = node.value
        if not isinstance(node, ast.Name) or self.source.path is None:
            return None
        imports = [b.node for b in self.names.bindings(node) if b.is_import]
        last = max((getattr(i, "lineno", 0) for i in imports), default=0)
        for stmt in _module_statements(self.tree.body):  # (in a `try` too, 51a)
            if not (
                isinstance(stmt, ast.ImportFrom)
                and stmt.lineno > last
                and [a.name for a in stmt.names] == ["*"]
                and not (stmt.module or "").startswith(("apex", "torch"))
            ):
                continue
            for path in _module_paths(self.source.path, stmt.level, stmt.module or ""):
                try:
                    with open(path, "rb") as file:
                        data = file.read()
                except OSError:
                    continue
                try:
                    tree = ast.parse(data)
                except (SyntaxError, ValueError):  # (newer syntax: it may bind it, 52a)
                    return stmt.lineno, self.source.segment(stmt)
                if _star_exports(tree, node.id):
                    return stmt.lineno, self.source.segment(stmt)
                break
        return None

    def _other_classes(self, callee: ast.expr) -> tuple[tuple[int, str] | None, list[str]]:
        """The other bindings of the call's name: the first that is neither apex's import, nor
        a torch class (imported or assigned: ``Opt = torch.optim.Adam``), nor ``None`` (a call
        of it raises), as its line and text (a project class, an alias, another package's:
        None where there is none); and the torch classes, which the rules below judge."""
        if not isinstance(callee, ast.Name):
            return None, sorted(q for q in self.names.qualified(callee) if q.startswith("torch."))
        other, torch_classes = None, set()
        # every binding of the scope but those in another arm of an `if`/`try` than the call
        # (a later one reaches it through a loop, 51a), and the enclosing scopes' it may see
        loops = {id(a) for a in self.names.ancestors(callee) if isinstance(a, _LOOPS)}
        bindings = [
            b for b in self.names.bindings(callee)
            if b.node is None or not self.names.exclusive(b.node, callee)
            or any(id(a) in loops for a in self.names.ancestors(b.node))  # (a loop joins the
            # arms: one pass binds, the next calls, 52a)
        ] or self.names.reaching(callee)  # fmt: skip
        for binding in bindings:
            if binding.builtin or binding.node is None:
                continue
            qualified = binding.qualified(binding.name)
            if any(q.startswith("apex.") or q.partition(".")[0] in table.COMPILED
                   for q in qualified):  # fmt: skip
                continue
            statement = self.names.parent(binding.node)
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                value = statement.value
                if isinstance(value, ast.Constant) and value.value in (None, False):
                    continue  # an availability flag: calling it raises
                qualified = self.names.qualified(value) if isinstance(
                    value, ast.Name | ast.Attribute) else set()  # fmt: skip
            elif not binding.is_import:
                qualified = set()
            if qualified and all(q.startswith("torch.") for q in qualified):
                torch_classes |= qualified
                continue
            if other is None:
                line = getattr(binding.node, "lineno", None) or getattr(statement, "lineno", 0)
                other = (line, self.source.line(line).strip() if line else binding.name)
        return other, sorted(torch_classes)

    def _to_python_float(
        self, node: ast.expr, parent: ast.AST | None, name: str, conditional: bool
    ) -> None:
        head = f"`{name}(t)` -> `t.item()`"
        if not (isinstance(parent, ast.Call) and parent.func is node):
            reason = "used as a value: `tensor.item()` is a method"
            self.findings.append(
                Finding(table.SAME_OBJECT, f"{head}: no automatic fix: {reason}", node, None)
            )
            return
        if len(parent.args) != 1 or parent.keywords or isinstance(parent.args[0], ast.Starred):
            reason = "it takes exactly one positional argument"
            self.findings.append(
                Finding(table.SAME_OBJECT, f"{head}: no automatic fix: {reason}", parent, None)
            )
            return
        arg = parent.args[0]
        written = self.source.segment(arg)
        simple = ast.Name | ast.Attribute | ast.Call | ast.Subscript
        if not isinstance(arg, simple):
            written = f"({written})"
        start, end = self.source.span(parent)
        fix = Fix(
            "unsafe",
            edits=(Edit(start, end, f"{written}.item()"),),
            remove_imports=self._import_edits(node),
        )
        message = (
            f"{head}: the argument is taken to be a tensor (apex's function also took a "
            "sequence and returned its first item)"
        )
        if conditional:
            message += "; the name is also bound by a fallback, which the fix bypasses"
        self.findings.append(Finding(table.SAME_OBJECT, message, parent, fix))

    # ---- helpers -----------------------------------------------------------------------------

    def _torch(self, node: ast.AST) -> tuple[str, bool]:
        """The name ``torch`` is bound to here, and whether ``import torch`` must be added."""
        qualified = self.names.qualified_text(node, "torch")
        if qualified == {"torch"}:
            return "torch", False
        if not qualified and not self.names.bindings(node, "torch"):
            return "torch", True
        raise NoFix("`torch` is bound to something else here")

    def _rename_fix(
        self, node: ast.expr, new: str, safety: str, min_torch: tuple[int, ...] = ()
    ) -> Fix:
        torch_name, add_torch = self._torch(node)
        start, end = self.source.span(node)
        return Fix(
            safety,  # type: ignore[arg-type]
            edits=(Edit(start, end, torch_name + new[len("torch") :]),),
            add_imports=frozenset({"torch"} if add_torch else ()),
            remove_imports=self._import_edits(node),
            min_torch=min_torch,
        )

    def _rival(self, node: ast.AST) -> tuple[int, str] | None:
        """A binding of ``node``'s root name that replaces apex's: an unguarded statement of the
        scope's own block after every apex import of the name (``from apex.fp16_utils import
        *`` then ``from util import to_python_float``; the 33rd review: the fix deleted the
        project's import and rewrote its calls). A fallback in an ``except``, an ``if`` arm or
        before the guarded import is no rival. Its line and first line of text."""
        while isinstance(node, ast.Attribute):
            node = node.value
        if not isinstance(node, ast.Name):
            return None

        def top(binding) -> ast.stmt | None:
            """The statement of the scope's own block that holds the binding."""
            at = binding.node  # (a def or a class is its own statement, not a scope here)
            child = at if isinstance(at, ast.stmt) else None
            for above in self.names.ancestors(at):
                if isinstance(above, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef):
                    return child if child in getattr(above, "body", ()) else None
                child = above if isinstance(above, ast.stmt) else child
            return None

        def apex(binding) -> bool:
            return any(q.startswith("apex.") or q.partition(".")[0] in table.COMPILED
                       for q in binding.qualified(binding.name))  # fmt: skip

        bindings = [b for b in self.names.bindings(node) if not b.builtin]
        last = max((t.lineno for b in bindings if apex(b) and (t := top(b))), default=None)
        for binding in bindings:
            stmt = top(binding)
            if (
                apex(binding)
                or last is None
                or stmt is None
                or stmt.lineno <= last
                or not (binding.node is stmt or self.names.parent(binding.node) is stmt)
            ):
                continue  # (nested in a compound statement: a guarded fallback)
            return stmt.lineno, self.source.segment(stmt).splitlines()[0].strip()
        return None

    def _import_edits(self, node: ast.AST) -> tuple[ImportEdit, ...]:
        """The imports of ``node``'s root name, to drop once unused (``import apex`` too); not
        one in a ``try`` that also runs other code only where it succeeds (the 83rd review's
        `torch.ones(1, device="cuda")` beside it, which would then run everywhere: the unused
        import keeps its own finding, which says so)."""
        edits = list(self.names.import_edits(node))
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name):
            kept = {
                (b.node.module or "", b.alias.name, b.alias.asname)
                for b in self.names.bindings(root)
                if isinstance(b.node, ast.ImportFrom) and b.alias is not None
                and self._guards_more(b.node, root.id)
            } | {
                (b.alias.name, None, b.alias.asname)
                for b in self.names.bindings(root)
                if isinstance(b.node, ast.Import) and b.alias is not None
                and self._guards_more(b.node, root.id)
            }  # fmt: skip
            edits = [e for e in edits if (e.module, e.obj, e.asname) not in kept]
        while isinstance(node, ast.Attribute):
            node = node.value
        if isinstance(node, ast.Name):
            for binding in self.names.bindings(node):
                alias = binding.alias
                if isinstance(binding.node, ast.Import) and alias and alias.asname is None:
                    edits.append(ImportEdit(alias.name, None, None))
        return tuple(edits)

    def _guards_more(self, stmt: ast.stmt, name: str) -> bool:
        """``stmt`` is an import in a ``try`` that catches ImportError and whose body (or
        ``else:``) also runs code besides imports, constants and calls of ``name``."""
        guard = self.names.parent(stmt)
        if not (
            isinstance(guard, ast.Try)
            and any(s is stmt for s in guard.body)
            and any(_catches_import_error(h) for h in guard.handlers)
        ):
            return False
        for other in [*guard.body, *guard.orelse]:
            if isinstance(other, ast.Import | ast.ImportFrom | ast.Pass):
                continue
            if isinstance(other, ast.Assign) and isinstance(other.value, ast.Constant):
                continue
            if any(
                isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id == name)
                for n in _executed(other)
            ):
                return True
        return False

    def _annotation(self, node: ast.AST) -> bool:
        """Inside an annotation, as its class or among its type arguments (``-> Tuple[DDP,
        Optimizer]``, ``x: Optional[DDP]``, ``DDP | None``)."""
        child = node
        for above in self.names.ancestors(node):
            if isinstance(above, ast.arg | ast.AnnAssign):
                return above.annotation is child
            if isinstance(above, ast.FunctionDef | ast.AsyncFunctionDef):
                return above.returns is child
            if not isinstance(above, ast.Subscript | ast.Tuple | ast.List | ast.BinOp):
                return False
            if isinstance(above, ast.BinOp) and not isinstance(above.op, ast.BitOr):
                return False
            child = above
        return False

    @functools.cached_property
    def _ddp_only_calls(self) -> list[str]:
        """The methods only apex's DDP has that this file calls (one walk, for every finding)."""
        return sorted({
            n.func.attr for n in ast.walk(self.tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in _APEX_DDP_ONLY
        })  # fmt: skip

    def _apex_ddp_only(self, target: Target) -> str:
        """Why apex's DistributedDataParallel cannot become torch's in this file ("": it can):
        the file calls a method only apex's has (fairseq-style trainers toggle
        `disable_allreduce()`/`enable_allreduce()` on it), which torch's raises on."""
        if target.new != "torch.nn.parallel.DistributedDataParallel" or not self._ddp_only_calls:
            return ""
        listed = ", ".join(f"`{m}()`" for m in self._ddp_only_calls)
        return (
            f"this file calls {listed}, which only apex's DistributedDataParallel has (torch's "
            "raises AttributeError): replace them by hand (`model.require_backward_grad_sync = "
            "False/True`, or `with model.no_sync():` around that step's forward and backward)"
        )

    def _typed(self, node: ast.AST, named: bool = True) -> bool:
        """A type test: ``isinstance``'s classes (a tuple too), ``except`` (annotations are
        ``_annotation``'s, asked first); ``named``: also a tuple bound to a name that only
        type tests read (cvpods' ``DDP_TYPES = (ApexDDP, DDP)``, the 72nd review: refused as
        a value whose calls are not visible, though nothing calls it)."""
        child = node
        for above in self.names.ancestors(node):
            # (a tuple joined to another is a tuple of classes too: catalyst's `wrappers =
            # wrappers + (apex_DDP,)`, the 76th review)
            if isinstance(above, ast.Tuple) or (
                isinstance(above, ast.BinOp) and isinstance(above.op, ast.Add)
            ):
                child = above
                continue
            if isinstance(above, ast.Assign) and named and child is not node:
                return above.value is child and self._only_typed(above)
            if isinstance(above, ast.AugAssign) and named and child is not node:
                return (
                    isinstance(above.op, ast.Add)
                    and isinstance(above.target, ast.Name)
                    and self._only_typed(above)
                )
            if isinstance(above, ast.Call):
                return (
                    len(above.args) == 2
                    and above.args[1] is child
                    and bool(self.names.qualified(above.func) & _TYPE_CHECKS)
                )
            if isinstance(above, ast.ExceptHandler):
                return above.type is child
            return False
        return False

    def _only_typed(self, assign: ast.Assign | ast.AugAssign) -> bool:
        """``assign`` binds one name that is read, and only by type tests (in this module, and
        no other module imports it), or to extend it (``x = x + (C,)``, ``x += (C,)``)."""
        targets = [assign.target] if isinstance(assign, ast.AugAssign) else assign.targets
        if len(targets) != 1 or not isinstance(targets[0], ast.Name):
            return False
        name = targets[0].id
        reads = [
            n
            for n in self.names.spelled(name)
            if isinstance(n, ast.Name)
            and n.id == name
            and isinstance(n.ctx, ast.Load)
            and not self._extends(n)
        ]
        if not reads or not all(self._typed(n, named=False) for n in reads):
            return False
        scoped = any(
            isinstance(a, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            for a in self.names.ancestors(assign)
        )
        return scoped or self._importers(name) == []

    def _extends(self, read: ast.Name) -> bool:
        """``read`` is the left operand of ``x = x + (...)`` binding its own name again."""
        parent = self.names.parent(read)
        holder = self.names.parent(parent)
        return (
            isinstance(parent, ast.BinOp)
            and isinstance(parent.op, ast.Add)
            and parent.left is read
            and isinstance(holder, ast.Assign)
            and holder.value is parent
            and len(holder.targets) == 1
            and isinstance(holder.targets[0], ast.Name)
            and holder.targets[0].id == read.id
        )


def _tested_classes(node: ast.AST, names: Names) -> list[ast.expr]:
    """The classes ``node`` tests an object against: ``isinstance``/``issubclass``'s (a tuple
    too), or the other side of ``type(x) is C`` / ``==`` / ``is not`` / ``!=`` (the 68th
    review's `type(opt) is aopt.FusedAdam`)."""
    if isinstance(node, ast.Call) and names.qualified(node.func) & _TYPE_CHECKS:
        if len(node.args) != 2:
            return []
        tested = node.args[1]
        return list(tested.elts) if isinstance(tested, ast.Tuple) else [tested]
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        if not isinstance(node.ops[0], ast.Is | ast.IsNot | ast.Eq | ast.NotEq):
            return []
        left, right = node.left, node.comparators[0]
        if _type_of(left):
            return [right]
        if _type_of(right):
            return [left]
    return []


def _type_of(node: ast.expr) -> bool:
    """``type(x)`` or ``x.__class__``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "type"
        and len(node.args) == 1
    ) or (isinstance(node, ast.Attribute) and node.attr == "__class__")
