"""TensorFlow/Keras mixed precision: moved names (data) and the Keras 3 optimizer changes (code).

Moved names are rewritten where they are spelled: ``tf.keras.mixed_precision.experimental.X``
keeps its ``tf.`` and loses ``.experimental``; a name bound by importing the old module or the old
symbol itself gets a from-import of the new place instead, and the old import goes once unused.

Loss-scale arguments and the Keras 3 LossScaleOptimizer differ by target (``target-keras``):
what a fix writes for Keras 2 (tf-keras) raises on Keras 3 and the other way round (reference:
tf-keras-mixed-precision.md, rows 7 and 21).
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from libcst.metadata import ScopeProvider

from ampmigrate.catalog import KERAS_ROOTS, PathRename, Rule
from ampmigrate.findings import Finding, Fix, ImportEdit
from ampmigrate.renames import (
    NoFix,
    _dotted,
    _join,
    _kw,
    _root_name,
    import_edits,
    is_name,
    qualified_names,
)

LOSS_SCALE_OPTIMIZERS = frozenset(
    f"{root}.{path}"
    for root in KERAS_ROOTS
    for path in (
        "mixed_precision.LossScaleOptimizer",
        "optimizers.LossScaleOptimizer",
        "mixed_precision.experimental.LossScaleOptimizer",
        "mixed_precision.loss_scale_optimizer.LossScaleOptimizer",
    )
)
_DYNAMIC = frozenset({"DynamicLossScale"})
_FIXED = frozenset({"FixedLossScale"})
_LOSS_SCALE_MODULES = (
    "tensorflow.train.experimental.",
    "tensorflow.mixed_precision.experimental.",
    "tensorflow.compat.v1.train.experimental.",
    "tensorflow.compat.v1.mixed_precision.",
    "tensorflow.compat.v1.mixed_precision.experimental.",
)
GRADIENT_PROCESSING = frozenset(
    f"tensorflow.{name}"
    for name in (
        "clip_by_global_norm", "clip_by_norm", "clip_by_value", "linalg.global_norm",
        "math.reduce_euclidean_norm", "norm", "linalg.norm",
    )
)  # fmt: skip
# Keyword arguments the Keras 3 wrapper refuses: "set it on the inner_optimizer".
_INNER_ONLY = ("clipnorm", "global_clipnorm", "clipvalue", "weight_decay", "use_ema")


def _shown(name: str) -> str:
    """Names as users write them: ``tf.keras...`` rather than ``tensorflow.keras...``."""
    return "tf." + name.removeprefix("tensorflow.") if name.startswith("tensorflow.") else name


def _qualified(visitor: cst.CSTVisitor, node: cst.CSTNode) -> set[str]:
    return qualified_names(visitor.get_metadata(ScopeProvider, node, None), node)


def _literal(node: cst.BaseExpression) -> object:
    """The value of a string or number literal (with a sign), else a sentinel."""
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    if isinstance(node, cst.Integer | cst.Float):
        return node.evaluated_value
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _literal(node.expression)
        return -inner if isinstance(inner, int | float) else _literal
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
        base, exp = _literal(node.left), _literal(node.right)
        if isinstance(base, int) and isinstance(exp, int) and 0 <= exp < 64:
            return base**exp
    return _literal  # not a literal


def _arg(args: Sequence[cst.Arg], position: int, name: str) -> cst.Arg | None:
    positional = [a for a in args if not a.keyword and not a.star]
    for a in args:
        if a.keyword and a.keyword.value == name:
            return a
    return positional[position] if position < len(positional) else None


def _without(args: Sequence[cst.Arg], drop: cst.Arg) -> list[cst.Arg]:
    kept = [a for a in args if a is not drop]
    return _join(args, kept, set())


class PathVisitor(cst.CSTVisitor):
    """Every reference to a moved TF/Keras name, with its fix (``[[paths]]`` in the rules)."""

    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(self, paths: Sequence[PathRename], target_keras: int) -> None:
        super().__init__()
        self.table = {p.old: p for p in paths if p.kind != "module"}
        self.modules = {p.old: p for p in paths if p.kind == "module"}
        self.last_names = {p.old.rsplit(".", 1)[-1] for p in self.table.values()}
        self.target_keras = target_keras
        self.findings: list[Finding] = []
        self._in_import = 0
        self._done: set[int] = set()

    def visit_Import(self, node: cst.Import) -> None:
        self._in_import += 1
        if len(node.names) != 1:
            return
        alias = node.names[0]
        moved = self.modules.get(_dotted(alias.name) or "")
        if moved is not None:
            new = alias.with_changes(name=cst.parse_expression(moved.new))
            self._module_finding(moved, node, node.with_changes(names=[new]))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._in_import += 1
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        for alias in node.names:  # `import X as Y`: references are spelled Y
            if alias.asname and f"{_dotted(node.module)}.{alias.evaluated_name}" in self.table:
                self.last_names.add(alias.evaluated_alias)
        renamed = self._symbol_import(node)
        if renamed is not None:
            path = self.table[f"{_dotted(node.module)}.{node.names[0].evaluated_name}"]
            old, new = path.old.rpartition(".")[0], path.new.rpartition(".")[0]
            message = f"`{old}` was removed: import from `{new}`"
            self.findings.append(
                Finding(path.code, message, node, Fix("safe", node, lambda _u: renamed))
            )
            return
        for alias in node.names:
            moved = self.modules.get(f"{_dotted(node.module)}.{alias.evaluated_name}")
            if moved is None:
                continue
            parent, _, name = moved.new.rpartition(".")
            bound = alias.evaluated_alias or alias.evaluated_name
            asname = None if bound == name else cst.AsName(name=cst.Name(bound))
            replacement = None
            if len(node.names) == 1:
                new_alias = cst.ImportAlias(name=cst.Name(name), asname=asname)
                replacement = node.with_changes(
                    module=cst.parse_expression(parent), names=[new_alias]
                )
            self._module_finding(moved, node, replacement)

    def _symbol_import(self, node: cst.ImportFrom) -> cst.ImportFrom | None:
        """``from old import a, b as c`` -> ``from new import a2, b2 as c`` when every name moved
        to the same module by a plain rename; else None."""
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return None
        module = _dotted(node.module)
        paths = [self.table.get(f"{module}.{alias.evaluated_name}") for alias in node.names]
        if any(p is None or p.kind != "rename" for p in paths):
            return None
        parents = {p.new.rpartition(".")[0] for p in paths}
        if len(parents) != 1:
            return None
        aliases = [
            alias.with_changes(name=cst.Name(path.new.rpartition(".")[2]))
            for alias, path in zip(node.names, paths, strict=True)
        ]
        return node.with_changes(module=cst.parse_expression(parents.pop()), names=aliases)

    def _module_finding(self, moved: PathRename, node: cst.CSTNode, replacement) -> None:
        message = f"module `{moved.old}` was removed: import `{moved.new}` instead"
        fix = None
        if replacement is None:
            message += " (no automatic fix: the import names other things too)"
        else:
            fix = Fix("safe", node, lambda _u: replacement)
        self.findings.append(Finding(moved.code, message, node, fix))

    def leave_Import(self, original_node: cst.Import) -> None:
        self._in_import -= 1

    leave_ImportFrom = leave_Import

    def _match(self, node: cst.BaseExpression) -> PathRename | None:
        last = node.attr.value if isinstance(node, cst.Attribute) else getattr(node, "value", "")
        if self._in_import or last not in self.last_names:
            return None
        found = [self.table[q] for q in sorted(_qualified(self, node)) if q in self.table]
        return found[0] if found else None

    def visit_Call(self, node: cst.Call) -> None:
        path = self._match(node.func)
        if path is None:
            return
        self._done.add(id(node.func))
        self._report(path, node, node.func, call=node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self._reference(node)
        return True

    def visit_Name(self, node: cst.Name) -> None:
        self._reference(node)

    def _reference(self, node: cst.BaseExpression) -> None:
        if id(node) in self._done:
            return
        path = self._match(node)
        if path is not None:
            self._done.add(id(node))
            self._report(path, node, node)

    # -- findings and fixes --------------------------------------------------------------
    def _report(
        self, path: PathRename, target: cst.CSTNode, ref: cst.BaseExpression, call=None
    ) -> None:
        message = f"`{_shown(path.old)}` " + (path.guidance or f"moved: use `{_shown(path.new)}`")
        fix = None
        if path.kind != "manual":
            try:
                fix = self._fix(path, target, ref, call)
            except NoFix as reason:
                message += f" (no automatic fix: {reason})"
        self.findings.append(Finding(path.code, message, target, fix))

    def _fix(self, path: PathRename, target, ref, call: cst.Call | None) -> Fix:
        if path.kind == "attribute":  # get_layer_policy(layer) -> layer.dtype_policy
            if call is None:
                raise NoFix("it is not called")
            positional = [a for a in call.args if not a.keyword and not a.star]
            if len(call.args) != 1 or len(positional) != 1:
                raise NoFix("it takes exactly one layer")
            layer = positional[0].value
            if not isinstance(layer, cst.Name | cst.Attribute | cst.Call | cst.Subscript):
                raise NoFix("the layer is not a simple expression")
            attribute = cst.Attribute(value=layer, attr=cst.Name(path.new))
            root = _root_name(ref)
            removals = self._import_edits(root) if root is not None else ()
            return Fix("safe", call, lambda _updated: attribute, remove_imports=removals)
        spelled, imports, removals = self._spelling(path.new, ref)
        safety = "safe"
        if call is not None and path.args:
            build_call, safety = self._call_builder(path, call)
        else:

            def build_call(updated):
                return updated

        def build(updated: cst.CSTNode) -> cst.CSTNode:
            if isinstance(updated, cst.Call):
                return build_call(updated.with_changes(func=spelled))
            return spelled

        return Fix(safety, target, build, add_imports=imports, remove_imports=removals)

    def _spelling(
        self, new: str, ref: cst.BaseExpression
    ) -> tuple[cst.BaseExpression, frozenset[str], tuple[ImportEdit, ...]]:
        """How to write ``new`` here: through the same root name, or via a fresh from-import."""
        root = _root_name(ref)
        text = _dotted(ref)
        if root is None or text is None:
            raise NoFix("the reference is not a dotted name")
        for bound in sorted(_qualified(self, root)):
            direct = isinstance(ref, cst.Attribute) and ref.value is root
            if bound in self.modules and direct and self._import_rewritten(root):
                bound = self.modules[bound].new  # its import is rewritten alongside
            if new.startswith(bound + "."):
                return cst.parse_expression(root.value + new[len(bound) :]), frozenset(), ()
        module, _, name = new.rpartition(".")
        statement = self._binding_import(root)
        if isinstance(ref, cst.Name) and statement and self._symbol_import(statement):
            # its import is rewritten by its own finding; an `as` alias stays the bound name
            [alias] = [
                a for a in statement.names if (a.evaluated_alias or a.evaluated_name) == root.value
            ]
            return cst.Name(root.value if alias.asname else name), frozenset(), ()
        if isinstance(ref, cst.Attribute):
            # `mp.set_policy` with `mp` the old module: import the new module's parent instead
            module, _, name = module.rpartition(".")
            written = name + new[len(module) + len(name) + 1 :]
        else:
            written = name
        scope = self.get_metadata(ScopeProvider, ref, None)
        if scope is not None and name in scope and name != root.value:
            raise NoFix(f"`{name}` is already bound here")
        return (
            cst.parse_expression(written),
            frozenset({f"{module}:{name}"}),
            self._import_edits(root),
        )

    def _binding_import(self, root: cst.Name) -> cst.ImportFrom | None:
        scope = self.get_metadata(ScopeProvider, root, None)
        if scope is None or root.value not in scope:
            return None
        statements = {id(a.node): a.node for a in scope[root.value]}
        if len(statements) != 1:
            return None
        statement = next(iter(statements.values()))
        return statement if isinstance(statement, cst.ImportFrom) else None

    def _import_rewritten(self, root: cst.Name) -> bool:
        """``root`` is bound only by one-name imports, which the module finding rewrites."""
        scope = self.get_metadata(ScopeProvider, root, None)
        if scope is None or root.value not in scope:
            return False
        statements = [a.node for a in scope[root.value]]
        return all(
            isinstance(s, cst.Import | cst.ImportFrom)
            and not isinstance(s.names, cst.ImportStar)
            and len(s.names) == 1
            for s in statements
        )

    def _import_edits(self, root: cst.Name) -> tuple[ImportEdit, ...]:
        return import_edits(self.get_metadata(ScopeProvider, root, None), root)

    def _call_builder(self, path: PathRename, call: cst.Call):
        """The argument rewrite for calls whose signature changed with the move."""
        if any(a.star for a in call.args):
            raise NoFix("a `*`/`**` splat hides the arguments")
        if path.args == "policy":
            loss_scale = _arg(call.args, 1, "loss_scale")
            if loss_scale is None:
                return (lambda updated: updated), "safe"
            if _literal(loss_scale.value) not in ("dynamic", "auto"):
                raise NoFix(
                    "a Policy no longer carries a loss scale: pass it to "
                    "`LossScaleOptimizer(opt, initial_scale=...)`; `loss_scale=None` is "
                    "`model.compile(..., auto_scale_loss=False)` on Keras 3"
                )
            return (lambda updated: updated.with_changes(args=_without(updated.args, _arg(
                updated.args, 1, "loss_scale")))), "safe"  # fmt: skip
        return self._loss_scale_optimizer(call)

    def _loss_scale_optimizer(self, call: cst.Call):
        """experimental LossScaleOptimizer(opt, loss_scale) -> the stable class's arguments."""
        loss_scale = _arg(call.args, 1, "loss_scale")
        if loss_scale is None:
            return (lambda updated: updated), "safe"
        value = loss_scale.value
        literal = _literal(value)
        extra: list[tuple[str, cst.BaseExpression]]
        if literal == "dynamic":
            extra = []
        elif isinstance(literal, int | float) and not isinstance(literal, bool):
            return self._fixed_scale(call, value)
        elif isinstance(value, cst.Call) and self._loss_scale_class(value) in _FIXED:
            scale = _arg(value.args, 0, "loss_scale_value")
            if scale is None or len(value.args) != 1:
                raise NoFix("FixedLossScale takes exactly one value")
            return self._fixed_scale(call, scale.value)
        elif isinstance(value, cst.Call) and self._loss_scale_class(value) in _DYNAMIC:
            extra = self._dynamic(value)
        else:
            raise NoFix("the loss scale is not a literal: map it to `initial_scale=` by hand")

        def build(updated: cst.Call) -> cst.Call:
            return updated.with_changes(args=_replace_loss_scale(updated.args, extra))

        return build, "safe"

    def _loss_scale_class(self, call: cst.Call) -> str:
        for name in _qualified(self, call.func):
            if name.startswith(_LOSS_SCALE_MODULES):
                return name.rsplit(".", 1)[-1]
        return ""

    @staticmethod
    def _dynamic(value: cst.Call) -> list[tuple[str, cst.BaseExpression]]:
        names = ("initial_loss_scale", "increment_period", "multiplier")
        if len(value.args) > len(names) or any(a.star for a in value.args):
            raise NoFix("DynamicLossScale's arguments cannot be read")
        extra = []
        for i, new in enumerate(("initial_scale", "dynamic_growth_steps", "")):
            arg = _arg(value.args, i, names[i])
            if arg is None:
                continue
            if not new:
                if _literal(arg.value) not in (2, 2.0):
                    raise NoFix("only multiplier=2 exists in the stable LossScaleOptimizer")
                continue
            extra.append((new, arg.value))
        known = {a.keyword.value for a in value.args if a.keyword}
        if known - set(names):
            raise NoFix("DynamicLossScale got unknown arguments")
        return extra

    def _fixed_scale(self, call: cst.Call, value: cst.BaseExpression):
        """A fixed scale: `dynamic=False, initial_scale=N` on Keras 2; on Keras 3 there is no
        wrapper for it, the inner optimizer takes `loss_scale_factor=N`."""
        if self.target_keras == 2:

            def build(updated: cst.Call) -> cst.Call:
                extra = [("dynamic", cst.Name("False")), ("initial_scale", value)]
                return updated.with_changes(args=_replace_loss_scale(updated.args, extra))

            return build, "safe"
        inner = _arg(call.args, 0, "optimizer")
        if inner is None or not isinstance(inner.value, cst.Call) or len(call.args) != 2:
            raise NoFix(
                "Keras 3 has no fixed-scale LossScaleOptimizer: set `loss_scale_factor=N` on the "
                "optimizer and drop the wrapper"
            )
        return _move_to_inner([("loss_scale_factor", value)]), "unsafe"


def _with_keywords(
    layout: Sequence[cst.Arg],
    kept: Sequence[cst.Arg],
    extra: Sequence[tuple[str, cst.BaseExpression]],
) -> list[cst.Arg]:
    """``kept`` plus ``extra`` as keyword arguments, with the commas of ``layout``."""
    fresh = set(range(len(kept), len(kept) + len(extra)))
    return _join(layout, [*kept, *(_kw(name, value) for name, value in extra)], fresh)


def _replace_loss_scale(
    args: Sequence[cst.Arg], extra: list[tuple[str, cst.BaseExpression]]
) -> list[cst.Arg]:
    """The call's arguments without ``loss_scale``, plus ``extra``, in the call's layout."""
    dropped = _arg(args, 1, "loss_scale")
    new = _with_keywords(args, [a for a in args if a is not dropped], extra)
    if new and dropped is args[-1]:  # keep what stood before the closing parenthesis
        new[-1] = new[-1].with_changes(whitespace_after_arg=dropped.whitespace_after_arg)
    return new


def _move_to_inner(extra: list[tuple[str, cst.BaseExpression]]):
    """Drop the wrapper call: its inner optimizer call gets ``extra`` keyword arguments."""

    def build(updated: cst.Call) -> cst.BaseExpression:
        inner = cst.ensure_type(
            _arg(updated.args, 0, "inner_optimizer") or updated.args[0], cst.Arg
        )
        optimizer = cst.ensure_type(inner.value, cst.Call)
        return optimizer.with_changes(args=_with_keywords(optimizer.args, optimizer.args, extra))

    return build


class _CheapNames(cst.CSTVisitor):
    """Resolving a qualified name is slow; only calls whose last name (through an import alias)
    is one a check cares about are resolved."""

    WANTED: frozenset[str] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self._aliases: dict[str, str] = {}

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                if alias.asname is not None:
                    self._aliases[alias.evaluated_alias] = alias.evaluated_name

    def wanted(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Attribute):
            return node.attr.value in self.WANTED
        if isinstance(node, cst.Name):
            return self._aliases.get(node.value, node.value) in self.WANTED
        return False


_LSO_NAMES = frozenset({"LossScaleOptimizer"})
_PROCESSING_NAMES = frozenset(name.rsplit(".", 1)[-1] for name in GRADIENT_PROCESSING)


class Keras3Optimizer(_CheapNames):
    """The Keras 3 LossScaleOptimizer: renamed methods and attributes, rejected arguments.

    Only on target-keras 3, and only for receivers built from a LossScaleOptimizer in this file
    (by their source text, ``self.optimizer`` included): the method names are too generic to
    rename on anything else.
    """

    METADATA_DEPENDENCIES = (ScopeProvider,)
    WANTED = _LSO_NAMES | _PROCESSING_NAMES

    def __init__(self, rule: Rule, target_keras: int = 3) -> None:
        super().__init__()
        self.rule = rule
        self.active = target_keras == 3
        self.findings: list[Finding] = []
        self._module: cst.Module | None = None
        self._receivers: set[str] = set()
        # (node, member name, receiver, enclosing function)
        self._pending: list[tuple[cst.CSTNode, str, cst.CSTNode, cst.CSTNode | None]] = []
        self._functions: list[cst.FunctionDef] = []
        self._processing: set[int] = set()  # functions that clip or reduce gradients

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._functions.pop()

    def _function(self) -> cst.FunctionDef | None:
        return self._functions[-1] if self._functions else None

    def visit_Module(self, node: cst.Module) -> None:
        self._module = node

    def _code(self, node: cst.CSTNode) -> str:
        assert self._module is not None
        return self._module.code_for_node(node)

    def _is_lso(self, node: cst.BaseExpression) -> bool:
        return self.wanted(node) and bool(_qualified(self, node) & LOSS_SCALE_OPTIMIZERS)

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and self._is_lso(node.value.func):
            self._receivers.update(self._code(t.target) for t in node.targets)

    def visit_Call(self, node: cst.Call) -> None:
        if not self.active:
            return
        if self._is_lso(node.func):
            self._constructor(node)
        elif isinstance(node.func, cst.Attribute):
            self._pending.append((node, node.func.attr.value, node.func.value, self._function()))
        if self.wanted(node.func) and _qualified(self, node.func) & GRADIENT_PROCESSING:
            self._processing.add(id(self._function()))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if self.active and node.attr.value in ("loss_scale", "dynamic_counter", "dynamic"):
            self._pending.append((node, node.attr.value, node.value, self._function()))

    def leave_Module(self, original_node: cst.Module) -> None:
        if not self.active:
            return
        calls = {id(n.func) for n, *_ in self._pending if isinstance(n, cst.Call)}
        for node, name, receiver, function in self._pending:
            if self._code(receiver) not in self._receivers:
                continue
            if isinstance(node, cst.Attribute) and id(node) in calls:
                continue  # the method call itself is judged
            self._member(node, name, id(function) in self._processing)

    def _member(self, node: cst.CSTNode, name: str, processed: bool) -> None:
        code = self.rule.code
        if isinstance(node, cst.Call) and name == "get_scaled_loss":
            fix = Fix(
                "safe",
                node.func,
                lambda u: u.with_changes(attr=cst.Name("scale_loss")),
            )
            message = "Keras 3's LossScaleOptimizer has no `get_scaled_loss`: use `scale_loss`"
            self.findings.append(Finding(code, message, node, fix))
        elif isinstance(node, cst.Call) and name == "get_unscaled_gradients":
            message = (
                "Keras 3's LossScaleOptimizer has no `get_unscaled_gradients`: "
                "`apply_gradients` unscales (and skips non-finite steps) itself"
            )
            fix = None
            if processed:
                message += (
                    "; not removed automatically: this function clips or reduces the gradients, "
                    "which in Keras 3 would then see them still scaled (see AMP407)"
                )
            elif len(node.args) == 1 and not node.args[0].keyword and not node.args[0].star:
                grads = node.args[0].value
                fix = Fix("safe", node, lambda _u, grads=grads: grads)
            self.findings.append(Finding(code, message, node, fix))
        elif isinstance(node, cst.Call) and name == "loss_scale":  # the TF <= 2.3 method
            fix = Fix("safe", node, lambda u: cst.ensure_type(u.func, cst.Attribute).with_changes(
                attr=cst.Name("dynamic_scale")))  # fmt: skip
            message = "`loss_scale()` is gone (a tensor since TF 2.4); Keras 3: `dynamic_scale`"
            self.findings.append(Finding(code, message, node, fix))
        elif isinstance(node, cst.Attribute) and name in ("loss_scale", "dynamic_counter"):
            new = {"loss_scale": "dynamic_scale", "dynamic_counter": "step_counter"}[name]
            fix = Fix("safe", node, lambda u, new=new: u.with_changes(attr=cst.Name(new)))
            message = f"Keras 3's LossScaleOptimizer renamed `{name}` to `{new}`"
            self.findings.append(Finding(code, message, node, fix))
        elif isinstance(node, cst.Attribute) and name == "dynamic":
            message = (
                "Keras 3's LossScaleOptimizer has no `dynamic` (it is always dynamic; a fixed "
                "scale is `loss_scale_factor` on the optimizer)"
            )
            self.findings.append(Finding(code, message, node, None))

    def _constructor(self, node: cst.Call) -> None:
        """LossScaleOptimizer(opt, dynamic=..., initial_scale=..., clipnorm=...) on Keras 3."""
        keywords = {a.keyword.value: a for a in node.args if a.keyword}
        dynamic = keywords.get("dynamic")
        inner_only = [keywords[k] for k in _INNER_ONLY if k in keywords]
        if dynamic is None and not inner_only:
            return
        inner = _arg(node.args, 0, "inner_optimizer")
        inline = inner is not None and isinstance(inner.value, cst.Call)
        code = self.rule.code
        if dynamic is not None and is_name(dynamic.value, "True"):
            fix = Fix("safe", node, lambda u: u.with_changes(
                args=_without(u.args, _find(u.args, "dynamic"))))  # fmt: skip
            message = "`dynamic=True` is the only mode in Keras 3: drop it"
            self.findings.append(Finding(code, message, node, fix))
            return
        moved: list[tuple[str, cst.BaseExpression]] = []
        what = []
        if dynamic is not None and not is_name(dynamic.value, "False"):
            message = (
                "`dynamic=` is not accepted by Keras 3 (always dynamic; a fixed scale is "
                "`loss_scale_factor=N` on the inner optimizer)"
            )
            self.findings.append(Finding(code, message, node, None))
            return
        if dynamic is not None:  # dynamic=False
            scale = keywords.get("initial_scale")
            what.append("`dynamic=False` raises ValueError in Keras 3")
            if scale is None:
                self.findings.append(Finding(code, what[0], node, None))
                return
            moved.append(("loss_scale_factor", scale.value))
        for arg in inner_only:
            what.append(f"`{arg.keyword.value}=` is rejected by the Keras 3 wrapper")
            moved.append((arg.keyword.value, arg.value))
        message = "; ".join(what) + ": set it on the inner optimizer"
        fix = None
        if inline and dynamic is not None and len(node.args) == 1 + len(moved) + 1:
            fix = Fix("unsafe", node, _move_to_inner(moved))
        elif inline and dynamic is None:
            fix = Fix("safe", node, _move_kwargs([n for n, _ in moved]))
        self.findings.append(Finding(code, message, node, fix))


def _find(args: Sequence[cst.Arg], name: str) -> cst.Arg:
    return next(a for a in args if a.keyword and a.keyword.value == name)


def _move_kwargs(names: list[str]):
    """Keep the wrapper; move ``names`` from its arguments into the inner optimizer call."""

    def build(updated: cst.Call) -> cst.Call:
        moving = [_find(updated.args, n) for n in names]
        inner_arg = updated.args[0]
        optimizer = cst.ensure_type(inner_arg.value, cst.Call)
        extra = [(a.keyword.value, a.value) for a in moving]
        optimizer = optimizer.with_changes(
            args=_with_keywords(optimizer.args, optimizer.args, extra)
        )
        kept = [inner_arg.with_changes(value=optimizer)] + [
            a for a in updated.args[1:] if a not in moving
        ]
        return updated.with_changes(args=_join(updated.args, kept, set()))

    return build


class AutoMixedPrecisionVariable(cst.CSTVisitor):
    """The NVIDIA-container-only ``TF_ENABLE_AUTO_MIXED_PRECISION`` switch, in any string."""

    def __init__(self, rule: Rule, target_keras: int = 3) -> None:
        super().__init__()
        self.rule = rule
        self.findings: list[Finding] = []

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = node.evaluated_value
        if isinstance(value, str) and "TF_ENABLE_AUTO_MIXED_PRECISION" in value:
            message = (
                "`TF_ENABLE_AUTO_MIXED_PRECISION` is read only by NVIDIA's TensorFlow 1 builds: "
                "upstream TensorFlow ignores it, so this enables nothing; use "
                "`tf.keras.mixed_precision.set_global_policy('mixed_float16')`"
            )
            self.findings.append(Finding(self.rule.code, message, node, None))


class ScaledGradients(_CheapNames):
    """Gradients of a scaled loss clipped or reduced before they are unscaled (per function)."""

    METADATA_DEPENDENCIES = (ScopeProvider,)
    WANTED = _PROCESSING_NAMES

    def __init__(self, rule: Rule, target_keras: int = 3) -> None:
        super().__init__()
        self.rule = rule
        self.keras = target_keras
        self.findings: list[Finding] = []
        self._state: list[str] = [""]  # per function: "", "scaled" or "unscaled"

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._state.append("")

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._state.pop()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        name = func.attr.value if isinstance(func, cst.Attribute) else ""
        if name in ("get_scaled_loss", "scale_loss"):
            self._state[-1] = "scaled"
        elif name == "get_unscaled_gradients":
            self._state[-1] = "unscaled"
        elif (
            self._state[-1] == "scaled"
            and self.wanted(func)
            and _qualified(self, func) & GRADIENT_PROCESSING
        ):
            where = (
                "move the clipping onto the inner optimizer (`global_clipnorm=` / `clipnorm=` / "
                "`clipvalue=`), which sees unscaled gradients, or divide by `opt.dynamic_scale` "
                "first"
                if self.keras == 3
                else "do it after `opt.get_unscaled_gradients(grads)`"
            )
            message = (
                "gradients of a scaled loss are clipped or reduced while still multiplied by the "
                "loss scale (measured on Keras 3: training stalls); " + where
            )
            self.findings.append(Finding(self.rule.code, message, node, None))


_POLICY_SETTERS = frozenset(
    f"{root}.{name}"
    for root in KERAS_ROOTS
    for name in (
        "mixed_precision.set_global_policy", "mixed_precision.experimental.set_policy",
        "mixed_precision.Policy", "mixed_precision.experimental.Policy",
        "mixed_precision.set_dtype_policy", "mixed_precision.DTypePolicy",
        "config.set_dtype_policy", "DTypePolicy",
    )
)  # fmt: skip
_TPU_OR_CPU = frozenset(
    {
        "tensorflow.distribute.TPUStrategy", "tensorflow.distribute.experimental.TPUStrategy",
        "tensorflow.distribute.cluster_resolver.TPUClusterResolver",
    }
)  # fmt: skip


class _Policies(_CheapNames):
    """What a TF program sets up: mixed policies, the graph rewrite, custom loops, devices."""

    METADATA_DEPENDENCIES = (ScopeProvider,)
    WANTED = frozenset(
        name.rsplit(".", 1)[-1] for name in _POLICY_SETTERS | _TPU_OR_CPU | LOSS_SCALE_OPTIMIZERS
    ) | {"enable_mixed_precision_graph_rewrite", "GradientTape", "device"}

    def __init__(self, rule: Rule, target_keras: int = 3) -> None:
        super().__init__()
        self.rule = rule
        self.findings: list[Finding] = []
        self.policies: list[tuple[cst.Call, cst.SimpleString, str]] = []
        self.graph_rewrites: list[cst.Call] = []
        self.custom_loop = False
        self.loss_scaling = False
        self.tpu_or_cpu: list[str] = []

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in (
            "scale_loss", "get_scaled_loss",
        ):  # fmt: skip
            self.loss_scaling = True
        if not self.wanted(node.func):
            return
        names = _qualified(self, node.func)
        if names & _POLICY_SETTERS and node.args:
            value = node.args[0].value
            literal = _literal(value)
            if isinstance(literal, str) and literal.startswith("mixed_"):
                self.policies.append((node, cst.ensure_type(value, cst.SimpleString), literal))
        if any(n.endswith(".enable_mixed_precision_graph_rewrite") for n in names):
            self.graph_rewrites.append(node)
        if "tensorflow.GradientTape" in names:
            self.custom_loop = True
        if names & LOSS_SCALE_OPTIMIZERS:
            self.loss_scaling = True
        if names & _TPU_OR_CPU:
            self.tpu_or_cpu.append("a TPU strategy")
        if "tensorflow.device" in names and node.args:
            device = _literal(node.args[0].value)
            if isinstance(device, str) and "cpu" in device.lower():
                self.tpu_or_cpu.append(f"`tf.device({device!r})`")

    def float16_policies(self) -> list[tuple[cst.Call, cst.SimpleString, str]]:
        return [p for p in self.policies if p[2] == "mixed_float16"]


class GraphRewriteWithPolicy(_Policies):
    def leave_Module(self, original_node: cst.Module) -> None:
        if not self.policies:
            return
        message = (
            "the graph rewrite and a mixed Keras policy in one program: tf-keras raises "
            "ValueError, Keras 3 silently enables both (casts applied twice); keep the policy"
        )
        for call in self.graph_rewrites:
            self.findings.append(Finding(self.rule.code, message, call, None))


class Float16WithoutLossScaling(_Policies):
    def leave_Module(self, original_node: cst.Module) -> None:
        if not self.custom_loop or self.loss_scaling:
            return
        message = (
            "'mixed_float16' with a custom GradientTape loop and no loss scaling: small float16 "
            "gradients underflow to zero (only `Model.fit` scales automatically); wrap the "
            "optimizer in `LossScaleOptimizer` and use `scale_loss`, or use 'mixed_bfloat16'"
        )
        for call, _, _ in self.float16_policies():
            self.findings.append(Finding(self.rule.code, message, call, None))


class Float16OnCpuOrTpu(_Policies):
    def leave_Module(self, original_node: cst.Module) -> None:
        if not self.tpu_or_cpu or any(name == "mixed_bfloat16" for *_, name in self.policies):
            return  # the program already picks bfloat16 where it runs on a TPU/CPU
        message = (
            f"'mixed_float16' where the program targets {self.tpu_or_cpu[0]}: float16 is a GPU "
            "format (TPUs and most CPUs run it slowly or emulate it); use 'mixed_bfloat16'"
        )
        for call, string, _ in self.float16_policies():
            quote = string.quote
            bf16 = string.with_changes(value=f"{string.prefix}{quote}mixed_bfloat16{quote}")
            fix = Fix("unsafe", string, lambda _u, bf16=bf16: bf16)
            self.findings.append(Finding(self.rule.code, message, call, fix))


_LEGACY_OPTIMIZERS = tuple(f"{root}.optimizers.legacy." for root in KERAS_ROOTS)


class LegacyOptimizer(cst.CSTVisitor):
    """``tf.keras.optimizers.legacy.*`` under Keras 3, where the module does not exist."""

    METADATA_DEPENDENCIES = (ScopeProvider,)

    def __init__(self, rule: Rule, target_keras: int = 3) -> None:
        super().__init__()
        self.rule = rule
        self.active = target_keras == 3
        self.findings: list[Finding] = []
        self._in_import = 0
        self._imported: set[str] = set()  # names bound by `from ...legacy import X`

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._in_import += 1
        module = _dotted(node.module) if node.module else ""
        if (
            module
            and module.endswith("optimizers.legacy")
            and not isinstance(node.names, cst.ImportStar)
        ):
            self._imported |= {a.evaluated_alias or a.evaluated_name for a in node.names}

    def leave_ImportFrom(self, original_node: cst.ImportFrom) -> None:
        self._in_import -= 1

    def visit_Import(self, node: cst.Import) -> None:
        self._in_import += 1

    leave_Import = leave_ImportFrom

    # Only names that can be a legacy optimizer are resolved (resolving every name is slow).
    def visit_Attribute(self, node: cst.Attribute) -> None:
        text = _dotted(node) or ""
        if ".legacy." in text or text.split(".", 1)[0] in self._imported:
            self._check(node)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self._imported:
            self._check(node)

    def _check(self, node: cst.BaseExpression) -> None:
        if not self.active or self._in_import:
            return
        names = [n for n in _qualified(self, node) if n.startswith(_LEGACY_OPTIMIZERS)]
        if names and "." not in names[0].split("optimizers.legacy.", 1)[1]:
            message = (
                f"`{_shown(names[0])}` does not exist in Keras 3 (ImportError on TF >= 2.16; "
                "tf_upgrade_v2 writes it): use the non-legacy optimizer, or tf-keras with "
                "TF_USE_LEGACY_KERAS=1 and target-keras = 2"
            )
            self.findings.append(Finding(self.rule.code, message, node, None))


KERAS_CHECKS = {
    "keras3-legacy-optimizer": LegacyOptimizer,
    "keras3-loss-scale-optimizer": Keras3Optimizer,
    "auto-mixed-precision-variable": AutoMixedPrecisionVariable,
    "scaled-gradients-processed": ScaledGradients,
    "graph-rewrite-with-policy": GraphRewriteWithPolicy,
    "float16-without-loss-scaling": Float16WithoutLossScaling,
    "float16-on-cpu-or-tpu": Float16OnCpuOrTpu,
}
