"""Shared pieces of the apex O1 planner: the plan, what ``initialize`` tells it, and small libcst
helpers.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

from ampmigrate.replace import Build

_KNOWN_KWARGS = {
    "models", "optimizers", "verbosity", "opt_level", "loss_scale", "enabled", "num_losses",
}  # fmt: skip
_HELPER = re.compile(r"checkpoint|^(save|load|resume)", re.IGNORECASE)
Loop = cst.For | cst.While


@dataclass
class Plan:
    anchor: cst.CSTNode | None = None  # where the finding is reported: the initialize call
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    edits: dict[cst.CSTNode, Build] = field(default_factory=dict)
    summary: str | None = None  # what the rewrite does, where it is not the O1 mapping
    # the oldest torch with every API the rewrite writes: torch.amp.GradScaler("cuda", ...);
    # None where it writes none (the project's own native path stays)
    min_torch: tuple[int, int] | None = (2, 3)


@dataclass
class _Setup:
    """What ``initialize`` tells the rest of the plan."""

    statement: cst.SimpleStatementLine
    home: cst.CSTNode  # the function (or module) holding it
    models: set[str]  # spellings of the initialized models (`model`, `self.model`)
    condition: str | None  # apex was enabled under this expression (None: always)
    by_scaler: bool = False  # autocast asks the scaler (`enabled=scaler.is_enabled()`)


def literal_bool(node: cst.BaseExpression) -> bool | None:
    """``True`` / ``False`` as written; None for anything else."""
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def flag_assignment(small: cst.BaseSmallStatement) -> tuple[str, bool] | None:
    """``name = True`` / ``name = False``: (name, value)."""
    if (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, cst.Name)
        and (value := literal_bool(small.value)) is not None
    ):
        return small.targets[0].target.value, value
    return None


def _code(module: cst.Module, node: cst.CSTNode) -> str:
    return module.code_for_node(node)


def _statements(block: cst.CSTNode) -> list[cst.BaseStatement] | None:
    return list(block.body) if isinstance(block, cst.Module | cst.IndentedBlock) else None


def _appended(
    items: Sequence[cst.Arg | cst.Param],
    new: cst.Arg | cst.Param,
    before: cst.BaseComma | None = None,
) -> list:
    """``items`` with ``new`` last; a trailing comma stays trailing, and a line break before
    the closing parenthesis stays there (the layout is kept). ``before``: the comma of what
    precedes ``items`` (a ``/`` or ``*``), the layout of an inner element where ``items`` has
    only one."""
    items = list(items)
    after = "whitespace_after_arg" if isinstance(new, cst.Arg) else "whitespace_after_param"
    tail = getattr(items[-1], after, None) if items else None
    if isinstance(tail, cst.ParenthesizedWhitespace) and not isinstance(items[-1].comma, cst.Comma):
        items[-1] = items[-1].with_changes(
            **{after: cst.SimpleWhitespace("")},
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
        )
        return [*items, new.with_changes(**{after: tail})]
    if items and isinstance(items[-1].comma, cst.Comma):
        own = items[-1].comma
        new = new.with_changes(comma=uncommented(own))
        previous = items[-2].comma if len(items) > 1 else before
        items[-1] = items[-1].with_changes(comma=inner_comma(own, previous))
    return [*items, new]


def uncommented(comma: cst.Comma) -> cst.Comma:
    """``comma`` without the comment that ends its line (the last element's, which stays with
    that element when a new one is appended after it)."""
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace) and after.first_line.comment is not None:
        return comma.with_changes(
            whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace())
        )
    return comma


def inner_comma(own: cst.Comma, inner: cst.BaseComma | None) -> cst.Comma:
    """The last element's comma ``own`` laid out as an inner element's (``inner``: one of them,
    None: there is none): its line keeps its own comment, the next line is indented as an
    element's rather than as the closing parenthesis (Faster-ILOD's one parameter per line,
    each with a comment: the comments shifted by one)."""
    own_after = own.whitespace_after
    inner_after = inner.whitespace_after if isinstance(inner, cst.Comma) else None
    if isinstance(own_after, cst.ParenthesizedWhitespace) and isinstance(
        inner_after, cst.ParenthesizedWhitespace
    ):
        return own.with_changes(
            whitespace_after=inner_after.with_changes(first_line=own_after.first_line)
        )
    if isinstance(inner, cst.Comma):
        return uncommented(inner)
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _correctness(code: str) -> list:
    """The AMP2xx diagnostics of ``code`` (the engine's own analysis, imported here: the
    engine imports this module lazily)."""
    from ampmigrate.catalog import all_rules
    from ampmigrate.engine.analyze import Analysis
    from ampmigrate.engine.settings import Settings

    settings = Settings(rules=tuple(r for c, r in all_rules().items() if c.startswith("AMP2")))
    try:
        return [d for _, d in Analysis(code.encode("utf-8"), settings).diagnostics(settings)]
    except (SyntaxError, ValueError, UnicodeError, LookupError, RecursionError):
        return []


def _imports_something(statement: cst.BaseStatement) -> bool:
    """An import statement (which may raise ImportError)."""
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Import | cst.ImportFrom) for small in statement.body
    )


# apex's `initialize(models, optimizers=None, enabled=True, opt_level="O1", ...)` in its order
INITIALIZE_PARAMETERS = (
    "models", "optimizers", "enabled", "opt_level", "cast_model_type", "patch_torch_functions",
    "keep_batchnorm_fp32", "master_weights", "loss_scale", "cast_model_outputs", "num_losses",
    "verbosity", "min_loss_scale", "max_loss_scale",
)  # fmt: skip


def initialize_arguments(init: cst.Call) -> tuple[dict[str, cst.BaseExpression], str | None]:
    """``amp.initialize``'s arguments by parameter name, and the note on a literal passed
    where apex reads ``enabled`` (``initialize(model, opt, "O1")``: the third positional
    argument is ``enabled``, so a truthy literal there leaves amp on at the default O1 and is
    dropped). Starred arguments are left out (the callers refuse them)."""
    args = {a.keyword.value: a.value for a in init.args if a.keyword}
    positional = [a.value for a in init.args if not a.keyword and not a.star]
    for name, value in zip(INITIALIZE_PARAMETERS, positional, strict=False):
        args.setdefault(name, value)
    enabled = args.get("enabled")
    if not isinstance(enabled, cst.SimpleString | cst.Integer | cst.Float):
        return args, None
    literal = enabled.evaluated_value if isinstance(enabled, cst.SimpleString) else enabled.value
    if isinstance(enabled, cst.Integer | cst.Float):
        literal = float(literal.replace("_", ""))
    if not literal:
        args["enabled"] = cst.Name("False")
        return args, None
    del args["enabled"]
    return args, (
        f"`amp.initialize`'s third argument `{enabled.value}` is its `enabled`, not "
        "`opt_level`: apex ran at its default O1, as the rewrite does"
    )


def without_optimizer(args: dict[str, cst.BaseExpression]) -> bool:
    """``initialize_arguments``' result gives no optimizer (absent, ``None``, or ``[]``, with
    which apex returns ``[]`` beside the model): inference."""
    optimizer = args.get("optimizers")
    return (
        optimizer is None
        or (isinstance(optimizer, cst.Name) and optimizer.value == "None")
        or (isinstance(optimizer, cst.List | cst.Tuple) and not optimizer.elements)
    )


def _argument(call: cst.Call, keyword: str, index: int) -> cst.BaseExpression | None:
    """The argument of ``call`` passed as ``keyword=`` or at position ``index``."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a.value for a in call.args if not a.keyword and not a.star]
    return positional[index] if len(positional) > index else None


def is_path(node: cst.CSTNode | None) -> bool:
    """A name, or attributes and literal-key subscripts of one (``self.opt["G"]``): an
    expression that denotes the same object wherever it is spelled the same, so the rewrite
    can follow a model or optimizer by its spelling (a computed key can name another)."""
    while isinstance(node, cst.Attribute | cst.Subscript):
        if isinstance(node, cst.Subscript):
            if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
                return False
            key = node.slice[0].slice.value
            if not isinstance(key, cst.SimpleString | cst.Integer):
                return False
        node = node.value
    return isinstance(node, cst.Name)


def _optimizers(node: cst.BaseExpression | None) -> list[cst.BaseExpression]:
    """The optimizers ``initialize`` is given: a name, or a list/tuple of names (apex kept one
    loss scale for all of them, updated after each ``scale_loss``, as ``scaler.update()``
    after each ``scaler.step`` does)."""
    if is_path(node):
        return [node]
    if isinstance(node, cst.List | cst.Tuple) and node.elements:
        values = [e.value for e in node.elements]
        if all(is_path(v) for v in values):
            return values
    return []


def _targets(node: cst.BaseExpression) -> set[str]:
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, cst.Tuple | cst.List):
        return {n for e in node.elements for n in _targets(e.value)}
    return set()


def _bare(code: str) -> str:
    """``code`` without its layout (spaces, line breaks), to compare spellings."""
    return "".join(code.split())


def read_names(expression: cst.BaseExpression) -> set[str]:
    """The names ``expression`` reads: ``args`` of ``args.amp``, not the attribute ``amp``."""
    attrs: set[int] = set()
    names: list[cst.Name] = []

    class Collect(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            attrs.add(id(node.attr))

        def visit_Name(self, node: cst.Name) -> None:
            names.append(node)

    expression.visit(Collect())
    return {n.value for n in names if id(n) not in attrs}


def defined_method(cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
    """The method ``name`` that the body of ``cls`` itself defines (the first), if any."""
    return next(
        (s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == name),
        None,
    )


def calls_up(module: cst.Module, call: cst.Call, method: str, cls: cst.ClassDef) -> bool:
    """``call`` runs the base class's ``method`` from a method of ``cls``: ``super().method``,
    the two-argument ``super(Cls, self).method`` (the 42nd review: segmentationPytorch's
    subclasses were said not to call it) or ``Base.method(self, ...)`` of a base it names."""
    func = _code(module, call.func).replace(" ", "")
    bases = {_code(module, b.value).replace(" ", "") for b in cls.bases}
    if func == f"super().{method}":
        return True
    head, dot, attr = func.rpartition(".")
    if not dot or attr != method:
        return False
    if head.startswith("super(") and head.endswith(")"):
        first = head[len("super(") : -1].partition(",")[0]
        return first in (cls.name.value, "type(self)", "self.__class__")
    return head in bases and bool(call.args)


def _is_call_of(node: cst.CSTNode, attr: str) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == attr
    )


_NO_SPACE = cst.AssignEqual(
    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
)


def parameter_places(function: cst.FunctionDef, method: bool) -> dict[str, tuple[int, cst.Param]]:
    """Each parameter of ``function`` by name: (its position as a call gives it, -1 keyword
    only; a method's first parameter, given by the instance, has none), and the parameter."""
    params = function.params
    listed = [*params.posonly_params, *params.params][1 if method else 0 :]
    return {p.name.value: (i, p) for i, p in enumerate(listed)} | {
        p.name.value: (-1, p) for p in params.kwonly_params
    }


def none_comparison(node: cst.CSTNode, name: cst.CSTNode) -> bool | None:
    """``node`` is ``<name> is not None`` (True) or ``<name> is None`` (False); None: neither."""
    if not (isinstance(node, cst.Comparison) and node.left is name and len(node.comparisons) == 1):
        return None
    target = node.comparisons[0]
    if (
        isinstance(target.operator, cst.Is | cst.IsNot)
        and isinstance(target.comparator, cst.Name)
        and target.comparator.value == "None"
    ):
        return isinstance(target.operator, cst.IsNot)
    return None


def is_docstring(statement: cst.CSTNode) -> bool:
    """``statement`` opens with a string (a docstring where it comes first in a body)."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


def given_at(call: cst.Call, name: str, at: int) -> cst.BaseExpression | None:
    """What ``call`` gives the parameter ``name`` at position ``at`` (-1: keyword only)."""
    for index, arg in enumerate(call.args):
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
        if arg.keyword is None and index == at:
            return arg.value
    return None


def lone_call(statement: cst.CSTNode, call: cst.Call) -> bool:
    """``statement`` is ``call`` alone on its line (its value unused)."""
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and statement.body[0].value is call
    )


# decorators that call the function with the arguments they are given, all of them
_PASSING_DECORATORS = {
    "staticmethod", "classmethod", "torch.no_grad", "torch.enable_grad", "torch.inference_mode",
}  # fmt: skip


def wrapping_decorator(module: cst.Module, function: cst.FunctionDef) -> str | None:
    """The first decorator of ``function`` whose wrapper calls it in its place (a parameter
    added to the function reaches it only if that wrapper passes it on): None where none."""
    for decorator in function.decorators:
        code = _code(module, decorator.decorator)
        if code.partition("(")[0] in _PASSING_DECORATORS:
            continue
        defined = [
            s for s in module.body if isinstance(s, cst.FunctionDef) and s.name.value == code
        ]
        if len(defined) == 1 and _hands_everything_on(ast.parse(_code(module, defined[0])).body[0]):
            continue
        return code
    return None


def _hands_everything_on(decorator: ast.FunctionDef) -> bool:
    """``decorator`` returns a wrapper that takes ``*args, **kwargs`` and calls the function
    it wraps with exactly those (a timer, a logger, `master_only`): whatever a caller gives,
    the function gets."""
    taken, body = decorator.args, decorator.body
    wrappers = [s for s in body if isinstance(s, ast.FunctionDef)]
    if taken.posonlyargs or len(taken.args) != 1 or taken.vararg or taken.kwarg or taken.kwonlyargs:
        return False
    if len(wrappers) != 1 or not isinstance(body[-1], ast.Return):
        return False
    wrapper, returned = wrappers[0], body[-1].value
    given = wrapper.args
    if not (isinstance(returned, ast.Name) and returned.id == wrapper.name):
        return False
    if given.posonlyargs or given.args or given.kwonlyargs or not (given.vararg and given.kwarg):
        return False
    wrapped, star, stars = taken.args[0].arg, given.vararg.arg, given.kwarg.arg
    passing = [
        n
        for n in ast.walk(wrapper)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == wrapped
        and ast.dump(ast.Call(n.func, n.args, n.keywords))
        == ast.dump(
            ast.Call(
                n.func,
                [ast.Starred(ast.Name(star, ast.Load()), ast.Load())],
                [ast.keyword(None, ast.Name(stars, ast.Load()))],
            )
        )
    ]
    allowed = {id(n.func) for n in passing} | {
        id(a) for n in passing for a in (n.args[0].value, n.keywords[0].value)
    }
    allowed |= {  # `@functools.wraps(fn)` on the wrapper
        id(a) for d in wrapper.decorator_list if isinstance(d, ast.Call) for a in d.args
    }
    used = [
        n for n in ast.walk(decorator) if isinstance(n, ast.Name) and n.id in (wrapped, star, stars)
    ]
    return bool(passing) and all(id(n) in allowed for n in used)
