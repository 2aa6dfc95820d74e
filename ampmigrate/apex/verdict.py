"""AMP303 on ``ast`` for the files the apex planner can only refuse, so ``check`` never loads libcst
for them.

A file that uses ``apex.amp`` but has no ``amp.initialize`` and is not one side of an apex pair
(:mod:`ampmigrate.apex.links`) is never rewritten: the planner (:mod:`ampmigrate.apex`) lists its
blockers and proposes no fix (timm's ``ApexScaler``, a checkpoint helper). Here the same blockers
are found on the engine's ``ast`` and ``Names``, in the planner's order and with its texts (the
text builders below are the ones the planner uses): unsupported members, apex imports the
rewrite could not drop, a ``try`` around the import that does more than guard it, ``amp`` used
as a value or asserted missing, and each use of the scaler without ``initialize``.

Where ``ast`` and libcst could see the file differently (a call whose callee is itself a call
or a subscript, a name libcst has and ``ast`` has not, such as a parameter or keyword spelled like
the ``amp`` import, an import sharing its line, a parenthesized value, a one-line ``except:``
body), :func:`verdict` returns None and the planner decides: a slow answer beats a wrong one.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Sequence

from ampmigrate.apex.api.table import no_native
from ampmigrate.engine.names import Names
from ampmigrate.engine.source import Source

APEX = "apex.amp"
SUPPORTED = {"initialize", "scale_loss", "master_params", "state_dict", "load_state_dict"}
HINTS = {
    "half_function": "see AMP301: `torch.amp.custom_fwd(device_type=..., cast_inputs=...)` "
    "for an autograd Function's forward, otherwise cast inside the function",
    "float_function": "see AMP301: `torch.amp.custom_fwd(device_type=..., "
    "cast_inputs=torch.float32)` for an autograd Function's forward, otherwise run the "
    'function under `torch.amp.autocast("cuda", enabled=False)` on float32 inputs',
    "disable_casts": 'use `torch.amp.autocast("cuda", enabled=False)` by hand',
}
# apex modules an O1 rewrite leaves alone: distributed wrappers, fused optimizers and layers
# work on the fp32 parameters and gradients native AMP keeps (GradScaler unscales before step)
NOT_PRECISION = frozenset({"parallel", "optimizers", "normalization"})
# what importing apex raises: ImportError, or an error of apex's own init on a torch it does
# not support (AttributeError: torch._six, RuntimeError, OSError of a compiled extension)
IMPORT_ERRORS = frozenset({
    "ImportError", "ModuleNotFoundError", "AttributeError", "RuntimeError", "OSError",
    "Exception", "BaseException",
})  # fmt: skip


# what `from apex.fp16_utils import *` binds: its package's public names, submodules included
FP16_UTILS = frozenset({
    "BN_convert_float", "network_to_half", "half_model", "prep_param_lists",
    "model_grads_to_master_grads", "master_params_to_model_params", "tofp16",
    "to_python_float", "clip_grad_norm", "convert_module", "convert_network", "FP16Model",
    "FP16_Optimizer", "LossScaler", "DynamicLossScaler", "fp16util", "fp16_optimizer",
    "loss_scaler",
})  # fmt: skip


def not_precision(name: str) -> bool:
    """``apex.optimizers``, ``apex.parallel.distributed``: apex, but not mixed precision."""
    parts = name.split(".")
    return parts[0] == "apex" and len(parts) > 1 and parts[1] in NOT_PRECISION


def not_o1(level: str) -> str:
    """Why a literal opt level other than O0/O1 blocks."""
    return (
        f"opt_level {level}: only O1 (autocast + GradScaler) exists in torch.amp; O2/O3 cast "
        "the model, which native AMP does not do (switch to O1 first if that is acceptable)"
    )


def beyond_amp(names: list[str]) -> list[str]:
    """The modules of an ``import`` that block the rewrite: apex's, neither amp nor one the
    rest of apex's rules speak for (``apex.fp16_utils``; not ``os``, ``apex.optimizers``)."""
    return [n for n in names if n.startswith("apex.") and n != "apex.amp" and not not_precision(n)]


def besides_amp(names: list[str]) -> str:
    """Why those modules block: the rewrite would leave the file needing apex for them."""
    return f"`import {', '.join(beyond_amp(names))}` needs apex: replace it first"


GUARD_DOES_MORE = "the `try` around the apex import does more than guard it"
ASSERTS_MISSING = "an assertion that apex is missing: remove it by hand"


# what the rewrite writes in a layer module that the initializing files reach (casts.py)
LAYER_ONLY = frozenset({"float_function", "disable_casts"})
_REGISTRATIONS = frozenset({
    "register_half_function", "register_float_function", "register_promote_function",
})  # fmt: skip


def no_rewrite(member: str, initializing: bool = False) -> str:
    """Why ``amp.<member>`` blocks. In a file that initializes amp, a member the layer-module
    rewrite takes is said to be rewritten there only (a reviewer read "has no O1 rewrite" as
    "never rewritten", while the same decorator in an imported layer module is)."""
    hint = HINTS.get(member, "see AMP301's guidance")
    if initializing and member in LAYER_ONLY:
        return (
            f"`amp.{member}` in the file that initializes amp is not rewritten: its torch.amp "
            "form is written only in a layer module that the initializing files import; move "
            f"it there or migrate it by hand ({hint})"
        )
    if member in _REGISTRATIONS and not initializing:  # (the 71st review's false reason)
        return (
            f"`amp.{member}` adds to apex's registry, which apex reads only when "
            "`amp.initialize` runs, and this file does not initialize amp: where nothing in "
            "the program does, the call does nothing: delete it with its apex import (and "
            "the guard around them); where another module does, torch.amp has no registry: "
            "cast the op's inputs there (AMP301's guidance); by hand"
        )
    if member.startswith("lists."):  # (AMP301 has no finding on these)
        hint = (
            "it edits apex's cast lists; autocast's are fixed: an op runs in the precision "
            "autocast gives it (softmax always in float32), so apex's choice needs an "
            "explicit cast around that op in the model, by hand"
        )
    return f"`amp.{member}` has no O1 rewrite ({hint})"


def initialized_through_parameter(tree: ast.Module) -> str | None:
    """``f(model, amp)`` whose body calls ``amp.initialize(...)`` on its parameter: the file
    does initialize apex, through what it is passed (said instead of "not in this file"). A
    method's own ``self.initialize()`` is not that, nor is a call given no model (apex's
    first parameter has no default)."""
    for node in ast.walk(tree):
        if not isinstance(node, _FUNCTIONS):
            continue
        positional = [*node.args.posonlyargs, *node.args.args]
        params = {a.arg for a in (*positional, *node.args.kwonlyargs)}
        params -= {positional[0].arg} & {"self", "cls"} if positional else set()
        for call in ast.walk(node):
            func = call.func if isinstance(call, ast.Call) else None
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "initialize"
                and isinstance(func.value, ast.Name)
                and func.value.id in params
                and (call.args or any(k.arg == "models" for k in call.keywords))
            ):
                return (
                    f"`{node.name}` calls `{func.value.id}.initialize` (line {call.lineno}) on "
                    f"its parameter `{func.value.id}`"
                )
    return None


def never_called(where: str, member: str, name: str) -> str:
    """The blocker for apex amp code in a function no file of the project calls (a fork's
    leftover ``do_train``): dead code, not a helper waiting for a GradScaler."""
    return (
        f"{where} uses `amp.{member}`, and no file of the project calls `{name}` (nor "
        "initializes amp here): unless code outside the project calls it after "
        "`amp.initialize`, no run reaches it (one that did would have raised that amp is not "
        "initialized); delete it, or give it a plain backward, by hand"
    )


def never_initialized_here(blocker: str, path: str | None) -> str:
    """``blocker`` (apex amp code in a file without ``initialize``), said of a project where
    no file initializes amp (UnitedANT, the 45th review: a bare `except: pass` around it):
    unless code outside the project does (a library's users: ignite), apex raised there."""
    from ampmigrate.apex.users import initializer_imported, initializes_anywhere  # (links
    # reads these verdicts)

    if not path or not os.path.isfile(path):
        return blocker
    if initializes_anywhere(path):
        partner = initializer_imported(path)
        if partner is None:
            return blocker
        return (  # (the 82nd review's F3: the partner went unnamed)
            f"{blocker}; the `amp.initialize` it relies on is in {partner}, which this file "
            "imports: give `fix` both in one run (the rewrite pairs such files where it can, "
            "their findings say why not) or migrate them together by hand"
        )
    return (
        "no file of the project initializes apex amp: unless code outside it does before "
        "this runs (a library's users), apex raised here (its amp state never set up) and "
        "this path never ran as written (a swallowed exception around it did nothing), so "
        "delete it or give it a plain backward; where outside code does: " + blocker
    )


def unreached(tree: ast.Module, name: str, path: str | None) -> bool:
    """The module-level function ``name`` of the file ``path`` (parsed: ``tree``) is read
    nowhere in it, nor used by any file of its project on disk (see ``never_called``)."""
    from ampmigrate.apex.users import looked_up_by_name, users_on_disk  # (links reads the
    # planner's verdicts)

    if not path or not os.path.isfile(path):
        return False
    if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(tree)):
        return False
    # (a dynamic lookup may call it: `getattr(pkg, name)`, the 68th review's g1/g5/g6, where
    # "delete it" was harmful advice)
    return users_on_disk(path, [name]) == [] and looked_up_by_name(path) is None


def fp16_optimizer_built(tree: ast.AST) -> bool:
    """The file wraps an optimizer in apex.fp16_utils' ``FP16_Optimizer`` (whose
    ``param_groups`` are its fp32 master copies: what ``amp.master_params`` walks there)."""
    return any(
        isinstance(n, ast.Call)
        and (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None))
        == "FP16_Optimizer"
        for n in ast.walk(tree)
    )


def library_trainer(bases: Iterable[set[str]]) -> str | None:
    """The transformers trainer class a class derives from (its bases' qualified names), if
    any: that Trainer calls ``amp.initialize`` itself when it runs with apex."""
    for qualified in bases:
        for name in sorted(qualified):
            if name.startswith("transformers.") and name.endswith("Trainer"):
                return name
    return None


def without_initialize(
    where: str,
    member: str,
    method: bool = False,
    through: str | None = None,
    fp16_optimizer: bool = False,
    library: str | None = None,
    closure_of: str | None = None,
) -> str:
    """A use of apex in a file without ``initialize``: the GradScaler must be passed in (to a
    method, through its object: ``self.scaler``, set where the object gets its optimizer).
    ``through``: the file initializes only through a parameter (``initialized_through_
    parameter``), which the rewrite does not follow. ``library``: the method belongs to a
    subclass of transformers' Trainer, which initializes amp itself."""
    if library is not None and method:
        return (
            f"{where} uses `amp.{member}` in a subclass of `{library}`, and `amp.initialize` "
            "is not in this file: transformers' Trainer calls it itself when it runs with apex "
            "(`self.use_apex`), so no GradScaler made here can replace it; train with "
            "transformers' native AMP instead (`--fp16` without the apex backend, scaled by "
            "the Trainer's own backward) and delete the apex branch, by hand"
        )
    if fp16_optimizer and member == "master_params":
        return (
            f"{where} uses `amp.master_params` on the optimizer this file wraps in apex's "
            "`FP16_Optimizer` (it walks that wrapper's fp32 master copies; no `amp.initialize` "
            "and no O1 is involved): this is FP16_Optimizer code, which AMP302 migrates (drop "
            "`.half()` and the wrapper, then a GradScaler with `scaler.unscale_` before the "
            "clip), by hand"
        )
    if through is not None:
        return (
            f"{where} uses `amp.{member}`, and `amp.initialize` is called in this file only "
            f"through a parameter ({through}), which the rewrite does not follow: make the "
            "GradScaler where that function initializes, pass it to where the loss is scaled "
            "and migrate the two by hand"
        )
    if method:
        give = (
            f"keep the GradScaler on {where}'s object (`self.scaler`, set where the object "
            "gets its optimizer) or give it a `scaler` parameter"
        )
        name = "self.scaler"
    elif closure_of is not None:  # (ignite's `_update(engine, batch)`: its signature is fixed)
        give = (
            f"give `{closure_of}`, which defines {where}, a `scaler` parameter that {where} "
            "reads as a free variable"
        )
        name = "scaler"
    else:
        give, name = f"give {where} a `scaler` parameter", "scaler"
    if member in ("state_dict", "load_state_dict"):
        return (
            f"{where} uses `amp.{member}` but `amp.initialize` is not in this file: "
            f"{give}, use `{name}.{member}(...)` under the "
            'checkpoint key "scaler" (never feed the old "amp" entry to '
            "GradScaler; old checkpoints: `ampmigrate convert-checkpoint`), and pass "
            "the GradScaler at its call sites"
        )
    if member == "master_params":
        return (
            f"{where} uses `amp.master_params` but `amp.initialize` is not in this file: "
            f"{give} (`{name}.unscale_(optimizer)` before the clip, which then takes the "
            "optimizer's parameters; the step that follows, `"
            f"{name}.step(optimizer)` + `{name}.update()`) and pass it the GradScaler that "
            "replaces `amp.initialize`"
        )
    return (
        f"{where} uses `amp.{member}` but `amp.initialize` is not in this file: "
        f"{give} (`{name}.scale(loss).backward()`, "
        f"`{name}.step(optimizer)` + `{name}.update()`, the forward under "
        '`torch.amp.autocast("cuda", dtype=torch.float16)`) and pass it the '
        "GradScaler that replaces `amp.initialize`"
    )


# names of apex.fp16_utils that AMP314 replaces by torch's own (`to_python_float(t)` -> `t.item()`)
TORCH_ALIASES = frozenset({"to_python_float", "clip_grad_norm"})


def needs_apex(module: str, listed: str, unused: bool = False, read: Sequence[str] = ()) -> str:
    """``read``: the names of the import that the file reads (where known)."""
    if read and module.startswith("apex.fp16_utils") and set(read) <= TORCH_ALIASES:
        names = ", ".join(f"`{n}`" for n in sorted(set(read)))
        return (
            f"`from {module} import {listed}` needs apex; what this file reads of it ({names}) "
            "is torch's own under another name (AMP314): where `fix` replaces each use, it "
            "drops this import and makes this rewrite in the same run"
        )
    if unused:
        names = [n.strip() for n in listed.split(",")]
        deleted = all(no_native(f"{module}.{n}") for n in names)  # AMP315 deletes it unused
        return (
            f"`from {module} import {listed}` needs apex, and nothing in this file reads it: "
            + ("delete it (the AMP315 finding on it does, with `fix`)" if deleted else "delete it")
        )
    return f"`from {module} import {listed}` needs apex: replace it first"


def used_as_value(code: str, callee: str | None = None, why: str | None = None) -> str:
    if callee is not None:
        because = f" ({why})" if why else ""
        return (
            f"`{code}` is passed to `{callee}(...)`, which the rewrite cannot follow{because}: "
            "what it does with apex's module (save or restore its state, scale a loss) must "
            "change with it; pass the GradScaler there and migrate that code by hand"
        )
    return f"`{code}` is used as a value: replace it by hand"


def _rebound(names: Names, node: ast.AST) -> bool:
    """``amp`` read after its own block bound it to something else (CLVC's ``amp = 32768 *
    0.8 / peak`` in the loop that then reads it): not apex's module there."""
    while isinstance(node, ast.Attribute):
        node = node.value
    if not isinstance(node, ast.Name):
        return False
    statement = names.bound_before(node)
    return statement is not None and not isinstance(statement, ast.Import | ast.ImportFrom)


def _line_of(problem: str) -> int:
    found = re.match(r"line (\d+):", problem)
    return int(found.group(1)) if found else 0


def refusal(problems: Iterable[str]) -> str:
    """AMP303's message for a file that cannot be rewritten: every blocker once, in order."""
    blockers = sorted(dict.fromkeys(problems), key=_line_of)  # stable: same order every run
    return (
        f"apex O1 cannot be rewritten automatically here ({len(blockers)} blocker"
        f"{'s' if len(blockers) > 1 else ''}): " + "; ".join(blockers)
    )


def verdict(names: Names, source: Source, calls: Sequence[ast.Call]) -> tuple[str, ast.Call] | None:
    """(message, anchor call) of the planner's refusal for a file without ``amp.initialize``
    whose apex calls (``apex.strays.apex_calls``) are ``calls``; None: the planner decides (the
    file has ``initialize``, or ``ast`` cannot be sure to see it as libcst does). The caller
    checks that the file is not one side of an apex pair."""
    try:
        return _Judge(names, source).run(calls)
    except _Unsure:
        return None


class _Unsure(Exception):
    """``ast`` may not see this file as libcst does: leave it to the planner."""


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPOUND = (
    ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, *_FUNCTIONS, ast.ClassDef,
    ast.Try, ast.TryStar, ast.Match,
)  # fmt: skip  # libcst's compound statements; the others are a ``SimpleStatementLine``
_LOOSE_DOT = re.compile(r"[\s\\]\.|\.[\s\\]")  # libcst keeps `apex . amp` as written


def _order(node: ast.AST) -> tuple[int, int, int, int]:
    """libcst's visiting order: by start, a node before the nodes inside it."""
    return (node.lineno, node.col_offset, -node.end_lineno, -node.end_col_offset)


def _targets(node: ast.AST) -> set[str]:
    """The planner's ``_targets``: a name, or the names of a (nested) tuple or list."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Tuple | ast.List):
        elements = [e.value if isinstance(e, ast.Starred) else e for e in node.elts]
        return {n for e in elements for n in _targets(e)}
    return set()


def _assigned(statements: Iterable[ast.stmt]) -> set[str]:
    """The names the planner's ``_Facts`` sees assigned in ``statements`` (assignment targets,
    loop targets, ``as`` names; not defs, parameters or walruses)."""
    out: set[str] = set()
    for statement in statements:
        for node in ast.walk(statement):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    out |= _targets(target)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
                out |= _targets(node.target)
            elif isinstance(node, ast.alias) and node.asname:
                out.add(node.asname)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                out |= _targets(node.optional_vars)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                out.add(node.name)
    return out


class _Judge:
    def __init__(self, names: Names, source: Source) -> None:
        self.names = names
        self.source = source
        self.text = source.text
        self.problems: list[str] = []

    def problem(self, node: ast.AST, text: str) -> None:
        self.problems.append(f"line {node.lineno}: {text}")

    def run(self, engine_calls: Sequence[ast.Call]) -> tuple[str, ast.Call] | None:
        roots = self._roots()
        found = self._calls(roots)
        if {id(c) for c, _ in found} != {id(c) for c in engine_calls} or not found:
            raise _Unsure  # the planner would look at other calls than the engine found
        # `@amp.float_function`, `f = amp.float_function`: blockers as the planner's calls are
        referenced = []
        for node in self._chains(roots):
            parent = self.names.parent(node)
            if isinstance(node, ast.Attribute) and (
                (isinstance(parent, ast.Assign) and parent.value is node)
                or node in getattr(parent, "decorator_list", ())
            ):
                members = [q[len(APEX) + 1 :] for q in self.names.qualified(node)
                           if q.startswith(APEX + ".")]  # fmt: skip
                referenced += [(node, m) for m in members[:1]]
        if any(member == "initialize" for _, member in found):
            return None
        if all(member not in SUPPORTED for _, member in found) and any(
            member == "init" for _, member in found
        ):
            return None  # `amp.init(...)` alone: the planner's (HandleInit)
        if "__version__" in self.text and any(
            isinstance(node, ast.If)
            and "__version__" in ast.unparse(node.test)
            and any(
                isinstance(n, ast.Import | ast.ImportFrom)
                and any(
                    (n.module or a.name if isinstance(n, ast.ImportFrom) else a.name).partition(
                        "."
                    )[0]
                    == "apex"
                    for a in n.names
                )
                for n in ast.walk(node)
            )
            for node in ast.walk(self.names.tree)
        ):
            raise _Unsure  # apex behind a torch-version gate: the planner may drop that path
        imports = self._scan()
        calls: dict[str, list[ast.Call]] = {}
        others = []
        for call, member in found:
            if member in SUPPORTED:
                calls.setdefault(member, []).append(call)
            else:
                others.append((call, member))
        others = sorted(others + referenced, key=lambda pair: _order(pair[0]))
        anchor = others[0][0] if others else next(iter(calls.values()))[0]
        for call, member in others:
            self.problem(call, no_rewrite(member))
        dropped = self._imports(imports)
        funcs = {id(c.func) for group in calls.values() for c in group}
        self._values(roots, funcs, dropped)
        through = initialized_through_parameter(self.names.tree)
        wrapped = fp16_optimizer_built(self.names.tree)
        for member, group in calls.items():
            for call in group:
                function = next(
                    (a for a in self.names.ancestors(call) if isinstance(a, _FUNCTIONS)), None
                )
                where = f"`{function.name}`" if function is not None else "module-level code"
                method = (
                    function is not None
                    and isinstance(self.names.parent(function), ast.ClassDef)
                    and [a.arg for a in function.args.args[:1]] == ["self"]
                )
                tree, path = self.names.tree, self.source.path
                if function in tree.body and unreached(tree, function.name, path):
                    self.problem(call, never_called(where, member, function.name))
                    continue
                owner = self.names.parent(function) if method else None
                library = (
                    library_trainer(self.names.qualified(b) for b in owner.bases)
                    if isinstance(owner, ast.ClassDef)
                    else None
                )
                outer = next(
                    (a for a in self.names.ancestors(function) if isinstance(a, _FUNCTIONS)),
                    None,
                ) if function is not None else None  # fmt: skip
                closure_of = outer.name if outer is not None and not method else None
                self.problem(
                    call,
                    never_initialized_here(
                        without_initialize(
                            where, member, method, through, wrapped, library, closure_of
                        ),
                        path,
                    ),
                )
        return refusal(self.problems), anchor

    # -- what the planner looks at ---------------------------------------------------------
    def _roots(self) -> set[str]:
        """The names through which a dotted name can resolve to ``apex.amp...``: those an apex
        import binds, and ``apex`` itself (a module-level ``apex`` resolves to ``apex``)."""
        roots = {"apex"}
        for binding in self.names.imports():
            stmt, alias = binding.node, binding.alias
            module = alias.name if isinstance(stmt, ast.Import) else stmt.module or ""
            if module == "apex" or module.startswith("apex."):
                roots.add(binding.name.partition(".")[0])
        return roots

    def _chains(self, roots: set[str]) -> list[ast.AST]:
        """Every Name spelled as a root and every attribute, call and subscript whose full
        name (libcst's ``get_full_name_for_node``) starts at one: nothing else can resolve to
        ``apex.amp...``."""
        out = []
        for root in roots:
            for node in self.names.spelled(root):
                if not isinstance(node, ast.Name) or node.id != root:
                    continue
                out.append(node)
                current, parent = node, self.names.parent(node)
                while (
                    isinstance(parent, ast.Attribute | ast.Subscript) and parent.value is current
                ) or (isinstance(parent, ast.Call) and parent.func is current):
                    out.append(parent)
                    current, parent = parent, self.names.parent(parent)
        return out

    def _calls(self, roots: set[str]) -> list[tuple[ast.Call, str]]:
        """The planner's apex calls with their member, in its order (source order)."""
        found = []
        for node in self._chains(roots):
            if not isinstance(node, ast.Call):
                continue
            qualified = self.names.qualified(node.func)
            members = [q[len(APEX) + 1 :] for q in qualified if q.startswith(APEX + ".")]
            if len(members) > 1:
                raise _Unsure  # the planner takes them in a set's order
            if members:
                found.append((node, members[0]))
        return sorted(found, key=lambda pair: _order(pair[0]))

    def _scan(self) -> list[ast.Import | ast.ImportFrom]:
        """The imports in source order; unsure where libcst has a Name that ``ast`` has not
        (a def, parameter, keyword, ``global``, match capture) spelled as a name an import
        binds to ``apex.amp`` (libcst may resolve it to that import)."""
        amp = {b.name for b in self.names.imports() if APEX in b.qualified(b.name)}
        imports = []
        for node in self.names.nodes():
            kind = type(node)
            if kind is ast.Import or kind is ast.ImportFrom:
                imports.append(node)
                continue
            if kind in _FUNCTIONS or kind is ast.ClassDef:
                spelled = [node.name]
            elif kind is ast.arg or kind is ast.keyword:
                spelled = [node.arg]
            elif kind is ast.Global or kind is ast.Nonlocal:
                spelled = node.names
            elif kind is ast.MatchAs or kind is ast.MatchStar:
                spelled = [node.name]
            elif kind is ast.MatchMapping:
                spelled = [node.rest]
            elif kind is ast.MatchClass:
                spelled = node.kwd_attrs
            else:
                continue
            if any(s in amp for s in spelled):
                raise _Unsure
        return sorted(imports, key=_order)

    # -- the planner's steps -----------------------------------------------------------------
    def _imports(self, imports: list[ast.Import | ast.ImportFrom]) -> set[int]:
        """The planner's ``_imports``: its problems, and the guarding ``try``s it drops."""
        lines: list[ast.stmt] = []
        for node in imports:
            if isinstance(node, ast.ImportFrom):
                module = node.module
                if module is None:
                    continue
                star = [a.name for a in node.names] == ["*"]
                listed = [] if star else [a.name for a in node.names]
                if module.startswith("apex"):
                    self._plain(node)
                stays = module.partition(".")[2].partition(".")[0] in NOT_PRECISION or (
                    module == "apex" and set(listed) <= {"amp", *NOT_PRECISION}
                )  # only a note: `from apex.parallel import ...`, `from apex import optimizers`
                if (module == "apex" and listed == ["amp"]) or module.startswith("apex.amp"):
                    lines.append(node)
                elif not stays and (module == "apex" or module.startswith("apex.")):
                    bound = {a.asname or a.name for a in node.names}
                    read = sorted(  # (the names of it this file reads)
                        name
                        for name in (FP16_UTILS if star else bound)
                        if any(
                            isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                            for n in self.names.spelled(name)
                        )
                    )
                    unused = not read and (not star or module == "apex.fp16_utils")
                    if (
                        unused
                        and not star
                        and (module.startswith("apex.fp16_utils") or self._unexported(node))
                    ):
                        lines.append(node)  # goes with amp's import (the planner's note)
                        continue
                    self.problem(node, needs_apex(module, ", ".join(listed) or "*", unused, read))
            else:
                spelled = [a.name for a in node.names]
                if any(n == "apex" or n.startswith("apex.") for n in spelled):
                    self._plain(node)
                    if all(n in ("apex", "apex.amp") for n in spelled):
                        lines.append(node)
                    elif beyond_amp(spelled):
                        # (`import apex.optimizers` stays, as its from-import does)
                        self.problem(node, besides_amp(spelled))
        guarded: dict[int, tuple[ast.Try, list[ast.stmt]]] = {}
        for line in lines:
            parent = self.names.parent(line)
            if isinstance(parent, ast.Try) and any(s is line for s in parent.body):
                guarded.setdefault(id(parent), (parent, []))[1].append(line)
        dropped = set()
        for try_node, guarded_imports in guarded.values():
            if self._guard_only(try_node, guarded_imports):
                dropped.add(id(try_node))
            else:
                self.problem(try_node, GUARD_DOES_MORE)
        return dropped

    def _unexported(self, node: ast.ImportFrom) -> bool:
        """The planner's ``_unexported``: alone on its line, and in a function or in a module
        no other can take it from (not a package's ``__init__``, no ``__all__``)."""
        parent = self.names.parent(node)
        body = next(
            (v for _, v in ast.iter_fields(parent) if isinstance(v, list) and node in v), []
        )
        if any(
            s is not node and s.lineno <= node.end_lineno and node.lineno <= s.end_lineno
            for s in body
        ):
            return False
        while parent is not None and not isinstance(parent, _FUNCTIONS):
            parent = self.names.parent(parent)
        if parent is not None:
            return True
        init = os.path.basename(self.source.path) == "__init__.py"
        return not init and "__all__" not in self.text

    def _plain(self, node: ast.Import | ast.ImportFrom) -> None:
        """Unsure unless the import is a line of its own with its dotted names written plainly
        (then libcst's statement and module text are ``ast``'s)."""
        start, end = self.source.span(node)
        line_start = self.source.line_start(node.lineno)
        newline = self.text.find("\n", end)
        after = self.text[end : newline if newline >= 0 else len(self.text)].strip()
        if self.text[line_start:start].strip() or (after and not after.startswith("#")):
            raise _Unsure
        if _LOOSE_DOT.search(self.text[start:end]):
            raise _Unsure

    def _suite(self, header_end: int, first: ast.stmt) -> bool:
        """Whether the body starting with ``first`` is on its header's line (libcst's
        ``SimpleStatementSuite``, whose statements are not lines)."""
        gap = self.text[header_end : self.source.span(first)[0]]
        colon = gap.find(":")
        if colon < 0 or "\\" in gap[colon:]:
            raise _Unsure
        return "\n" not in gap[colon:] and "\r" not in gap[colon:]

    def _guard_only(self, node: ast.Try, imports: list[ast.stmt]) -> bool:
        """The planner's ``_guard_only``: only the import and flags in the ``try``, handlers
        for import errors (or bare) that bind nothing the ``try`` does not."""
        if node.finalbody:
            return False
        body = [s for s in node.body if not any(s is i for i in imports)]
        if node.orelse:
            last = self.source.span(node.handlers[-1] if node.handlers else node.body[-1])[1]
            gap = self.text[last : self.source.span(node.orelse[0])[0]]
            found = re.search(r"^[ \t\f]*else[ \t\f]*:", gap, re.MULTILINE)
            if found is None:
                raise _Unsure
            if self._suite(last + found.start(), node.orelse[0]):
                return False
            body += node.orelse
        if any(isinstance(s, _COMPOUND) for s in body):
            return False
        parent = self.names.parent(node)
        before: list[ast.stmt] = []
        for _, value in ast.iter_fields(parent):
            if isinstance(value, list) and any(s is node for s in value):
                before = value[: next(i for i, s in enumerate(value) if s is node)]
        bound = _assigned([*before, *body, *imports]) | {"amp", "apex"}  # (`apex_amp = None`)
        for handler in node.handlers:
            start = self.source.span(handler)[0]
            kinds = handler.type
            if kinds is None:
                header_end = start + len("except")
            else:
                header_end = self.source.span(kinds)[1]
                if self.text[start + len("except") : self.source.span(kinds)[0]].strip():
                    raise _Unsure  # `except (ImportError):`: libcst keeps the parentheses
                if isinstance(kinds, ast.Tuple) and (
                    self.source.segment(kinds).count("(") != 1
                    or self.source.segment(kinds).count(")") != 1
                ):
                    raise _Unsure
            elements = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds] if kinds else []
            if any(
                self.source.segment(e).rsplit(".", 1)[-1] not in IMPORT_ERRORS for e in elements
            ):
                return False
            if self._suite(header_end, handler.body[0]):
                return False
            if any(isinstance(s, _COMPOUND) and not isinstance(s, ast.If) for s in handler.body):
                return False  # (an `if` that only logs the missing apex binds nothing either)
            raises = isinstance(handler.body[-1], ast.Raise)  # (its bindings are never read)
            if not raises and _assigned(handler.body) - bound:
                return False
        return True

    def _values(self, roots: set[str], funcs: set[int], dropped: set[int]) -> None:
        """The planner's ``_values``: ``amp`` used other than by a supported call blocks unless
        it is an availability check (which the rewrite folds away)."""
        seen = set()
        for node in sorted(self._chains(roots), key=_order):
            if not isinstance(node, ast.Name | ast.Attribute) or id(node) in funcs:
                continue
            if id(node) in seen or isinstance(self.names.parent(node), ast.Attribute):
                continue
            seen.add(id(node))
            if any(id(a) in dropped for a in self.names.ancestors(node)):
                continue
            if APEX in self.names.qualified(node) and not _rebound(self.names, node):
                self._guard(node)

    def _guard(self, node: ast.Name | ast.Attribute) -> None:
        parent = self.names.parent(node)
        expr: ast.AST = node
        value = True  # `amp` itself is truthy now
        if isinstance(parent, ast.Compare) and parent.left is node:
            right = parent.comparators[0]
            if (
                len(parent.ops) == 1
                and isinstance(parent.ops[0], ast.Is | ast.IsNot)
                and isinstance(right, ast.Constant)
                and right.value is None
            ):
                expr, value = parent, isinstance(parent.ops[0], ast.IsNot)
            else:
                parent = None
        elif (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id == "hasattr"
            and len(parent.args) == 2
            and parent.args[0] is node
            and isinstance(parent.args[1], ast.Constant)
            and parent.args[1].value in SUPPORTED
        ):
            return  # a probe for a member the rewrite provides: true now, folded
        elif not isinstance(parent, ast.If | ast.Assert | ast.BoolOp | ast.UnaryOp):
            parent = None
        if parent is None:
            call = self.names.parent(node)
            call = self.names.parent(call) if isinstance(call, ast.keyword) else call
            callee = (
                ast.get_source_segment(self.text, call.func)
                if isinstance(call, ast.Call) and call.func is not node
                else None
            )
            self.problem(node, used_as_value(self._own_text(node), callee))
            return
        while True:
            parent = self.names.parent(expr)
            if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
                expr, value = parent, not value
            elif isinstance(parent, ast.BoolOp):
                if value == isinstance(parent.op, ast.And):
                    return  # `x and True` is `x`: folded
                expr = parent
            else:
                break
        if isinstance(parent, ast.Assert) and not (parent.test is expr and value):
            self.problem(parent, ASSERTS_MISSING)

    def _own_text(self, node: ast.AST) -> str:
        """``node``'s text as libcst has it; unsure where parentheses may be its own (libcst
        keeps them on the node) or inside an f-string (positions ``ast`` may not keep)."""
        if any(isinstance(a, ast.JoinedStr) for a in self.names.ancestors(node)):
            raise _Unsure
        start, end = self.source.span(node)
        text = self.text
        i = start - 1
        while i >= 0 and text[i] in " \t\f\r\n":
            i -= 1
        if i < 0:
            return text[start:end]
        line = text[text.rfind("\n", 0, i) + 1 : i + 1]
        if text[i] == "\\" or ("\n" in text[i:start] and "#" in line):
            raise _Unsure  # the character before may be in a comment, or a line continues
        if text[i] == "(":
            parent = self.names.parent(node)
            opening = isinstance(parent, ast.Call) and parent.args and parent.args[0] is node
            if not opening or self.text[self.source.span(parent.func)[1] : i].strip():
                raise _Unsure
        return self.text[start:end]
