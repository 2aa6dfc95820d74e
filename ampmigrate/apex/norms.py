"""Whether a helper returns a norm of the gradients it is given (Swin's ``get_grad_norm``): a
value that scales with them, so its read of the scaled gradients divided by the scale is its
read of the unscaled ones that apex gave it.

A small degree analysis on ``ast``: each value gets its degree in the gradient scale ``s``
(a gradient has 1, a constant 0; ``x ** n`` multiplies it by ``n``), written ``c * n**e`` where
``n`` is the helper's norm-type parameter, so ``(sum |g|**n) ** (1/n)`` comes out at 1. Any
statement or call it does not know makes the answer no.
"""

from __future__ import annotations

import ast
from fractions import Fraction

# a degree: (c, e) for c * n**e; _ZERO for the literal 0 (any degree); _PARAMS for the
# iterable of parameters; _PARAM for one parameter of it
_ZERO = "zero"
_PARAMS = "params"
_PARAM = "param"
_NONE: tuple[Fraction, int] = (Fraction(0), 0)
_ONE: tuple[Fraction, int] = (Fraction(1), 0)
# methods that return a copy or a reduction of the same tensor
_METHODS = frozenset({"item", "detach", "cpu", "clone", "float", "abs", "max", "sum", "norm",
                      "double", "to"})  # fmt: skip
# of those, the ones that take arguments (the norm type, a dimension, a device)
_REDUCING = frozenset({"norm", "max", "sum", "to"})


class _Unknown(Exception):
    """A statement or expression the analysis does not know."""


def gradient_norm(function: ast.FunctionDef, arguments: int) -> bool:
    """``function``, called with ``arguments`` positional arguments (the parameters first),
    returns a value of degree 1 in its parameters' gradients on every path (or 0, the empty
    case)."""
    args = function.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or not args.args:
        return False
    names = [a.arg for a in args.args]
    if arguments < 1 or arguments > len(names):
        return False
    defaults = dict(zip(reversed(names), reversed(args.defaults), strict=False))
    if any(not _positive(d) for n, d in defaults.items() if names.index(n) >= arguments):
        return False
    if arguments < len(names) - len(args.defaults):
        return False
    env: dict[str, object] = {names[0]: _PARAMS, **dict.fromkeys(names[1:], _NONE)}
    analysis = _Degrees(names[1] if len(names) > 1 else None)
    try:
        analysis.block(function.body, env)
    except _Unknown:
        return False
    return bool(analysis.returns) and all(r in (_ONE, _ZERO) for r in analysis.returns)


class _Degrees:
    def __init__(self, symbol: str | None) -> None:
        self.symbol = symbol  # the norm-type parameter: `x ** n` and `x ** (1 / n)`
        self.returns: list[object] = []

    def block(self, body: list[ast.stmt], env: dict[str, object]) -> None:
        for statement in body:
            self.statement(statement, env)

    def statement(self, node: ast.stmt, env: dict[str, object]) -> None:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return  # a docstring
        if isinstance(node, ast.Return):
            if node.value is None:
                raise _Unknown
            self.returns.append(self.value(node.value, env))
            return
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if not isinstance(target, ast.Name):
                raise _Unknown
            value = self.value(node.value, env)
            if target.id == self.symbol and value != _NONE:
                raise _Unknown
            env[target.id] = value
            return
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            if not isinstance(node.target, ast.Name) or node.target.id not in env:
                raise _Unknown
            env[node.target.id] = _join(env[node.target.id], self.value(node.value, env))
            return
        if isinstance(node, ast.If):
            if self.value(node.test, env) not in (_NONE, _PARAMS, _ZERO):
                raise _Unknown  # a test on a gradient value: no longer a plain norm
            branches = []
            for body in (node.body, node.orelse):
                inner = dict(env)
                self.block(body, inner)
                branches.append(inner)
            for name in set(branches[0]) | set(branches[1]):
                if name not in branches[0] or name not in branches[1]:
                    raise _Unknown
                env[name] = _join(branches[0][name], branches[1][name])
            return
        if isinstance(node, ast.For) and not node.orelse and isinstance(node.target, ast.Name):
            if self.value(node.iter, env) != _PARAMS:
                raise _Unknown
            inner = {**env, node.target.id: _PARAM}
            self.block(node.body, inner)  # the body's sums join what was there before
            for name, value in inner.items():
                if name != node.target.id:
                    env[name] = _join(env[name], value) if name in env else value
            return
        raise _Unknown

    def value(self, node: ast.expr, env: dict[str, object]) -> object:
        if isinstance(node, ast.Constant):
            if node.value == 0 and type(node.value) in (int, float):
                return _ZERO
            return _NONE
        if isinstance(node, ast.Name):
            if node.id not in env:
                if node.id in ("torch", "math"):
                    return _NONE
                raise _Unknown  # a global: it may read anything
            return env[node.id]
        if isinstance(node, ast.Attribute):
            base = self.value(node.value, env)
            if base == _PARAM and node.attr in ("grad", "requires_grad"):
                return _ONE if node.attr == "grad" else _NONE
            if node.attr == "data" and base not in (_PARAMS, _PARAM):
                return base
            if base == _NONE and isinstance(node.value, ast.Name) and node.value.id == "torch":
                return _NONE  # torch.Tensor
            raise _Unknown
        if isinstance(node, ast.List | ast.Tuple) and len(node.elts) == 1:
            inner = self.value(node.elts[0], env)
            return _PARAMS if inner == _PARAMS else _unknown()
        if isinstance(node, ast.Compare):
            values = [self.value(v, env) for v in (node.left, *node.comparators)]
            if all(v in (_NONE, _PARAMS, _ZERO) for v in values):
                return _NONE
            if all(isinstance(o, ast.Is | ast.IsNot) for o in node.ops):
                return _NONE  # `p.grad is not None`
            raise _Unknown
        if isinstance(node, ast.BinOp):
            return self.binary(node, env)
        if isinstance(node, ast.ListComp | ast.GeneratorExp):
            return self.comprehension(node, env)
        if isinstance(node, ast.Call):
            return self.call(node, env)
        raise _Unknown

    def binary(self, node: ast.BinOp, env: dict[str, object]) -> object:
        left = self.value(node.left, env)
        if isinstance(node.op, ast.Pow):
            if left == _ZERO:
                return _ZERO
            if not isinstance(left, tuple):
                raise _Unknown
            c, e = left
            right = node.right
            if isinstance(right, ast.Constant) and type(right.value) in (int, float):
                return (c * Fraction(right.value), e)
            if isinstance(right, ast.Name) and right.id == self.symbol:
                return (c, e + 1)
            if (
                isinstance(right, ast.BinOp)
                and isinstance(right.op, ast.Div)
                and isinstance(right.left, ast.Constant)
                and right.left.value == 1
                and isinstance(right.right, ast.Name)
                and right.right.id == self.symbol
            ):
                return (c, e - 1)
            raise _Unknown
        right = self.value(node.right, env)
        if isinstance(node.op, ast.Add | ast.Sub):
            return _join(left, right)
        if isinstance(node.op, ast.Div) and right in (_NONE,) and isinstance(left, tuple):
            return left  # a constant factor keeps the degree
        raise _Unknown

    def comprehension(self, node: ast.ListComp | ast.GeneratorExp, env: dict) -> object:
        if len(node.generators) != 1:
            raise _Unknown
        loop = node.generators[0]
        if not isinstance(loop.target, ast.Name) or loop.is_async:
            raise _Unknown
        over = self.value(loop.iter, env)
        if over != _PARAMS:
            raise _Unknown
        inner = {**env, loop.target.id: _PARAM}
        if any(self.value(test, inner) != _NONE for test in loop.ifs):
            raise _Unknown
        element = self.value(node.elt, inner)
        return _PARAMS if element == _PARAM else element  # a filtered list or its values

    def call(self, node: ast.Call, env: dict[str, object]) -> object:
        func = node.func
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            raise _Unknown
        name = func.id if isinstance(func, ast.Name) else None
        if name in ("list", "tuple", "filter"):
            return self.parameters(node, env)
        extra = [self.value(a, env) for a in node.args[1:]] + [
            self.value(k.value, env) for k in node.keywords
        ]
        if any(v not in (_NONE, _ZERO) for v in extra):
            raise _Unknown  # only the first argument may carry gradients
        first = self.value(node.args[0], env) if node.args else _NONE
        if isinstance(func, ast.Attribute) and func.attr == "norm":
            self.order(node, 1 if _is_module(func.value) else 0)
        if name in ("isinstance", "len", "int"):
            if first in (_NONE, _ZERO, _PARAMS):
                return _NONE
            raise _Unknown
        if name in ("float", "abs", "max", "sum") and len(node.args) == 1:
            return _tensor(first)
        if not isinstance(func, ast.Attribute):
            raise _Unknown
        if _is_module(func.value):
            if func.attr in ("norm", "stack", "abs", "max", "sum") and node.args:
                return _tensor(first)  # torch.norm(g, n), torch.stack([...])
            if func.attr in ("tensor", "zeros", "zeros_like") and first in (_NONE, _ZERO):
                return _ZERO if func.attr != "tensor" or first == _ZERO else _NONE
            if func.attr == "sqrt" and len(node.args) == 1:
                if isinstance(first, tuple):
                    return (first[0] / 2, first[1])
                return _tensor(first)
            raise _Unknown
        if func.attr in _METHODS and (not node.args or func.attr in _REDUCING):
            return _tensor(self.value(func.value, env))
        raise _Unknown

    def order(self, node: ast.Call, index: int) -> None:
        """A norm's order is its positive literal or the norm-type parameter (whose value the
        caller checks): ``norm(0)`` counts the nonzero entries, which no scale changes."""
        given = [*node.args[index : index + 1], *(k.value for k in node.keywords if k.arg == "p")]
        for order in given:
            if isinstance(order, ast.Name) and order.id == self.symbol:
                continue
            if not _positive(order):
                raise _Unknown

    def parameters(self, node: ast.Call, env: dict[str, object]) -> object:
        """``list(params)``, ``filter(lambda p: p.grad is not None, params)``: the same
        parameters (a filter that tests only whether a gradient exists)."""
        if node.keywords:
            raise _Unknown
        if isinstance(node.func, ast.Name) and node.func.id == "filter":
            if len(node.args) != 2 or not isinstance(node.args[0], ast.Lambda):
                raise _Unknown
            test = node.args[0]
            if len(test.args.args) != 1:
                raise _Unknown
            inner = {**env, test.args.args[0].arg: _PARAM}
            if self.value(test.body, inner) != _NONE:
                raise _Unknown
        elif len(node.args) != 1:
            raise _Unknown
        if self.value(node.args[-1], env) != _PARAMS:
            raise _Unknown
        return _PARAMS


def _is_module(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("torch", "math")


def _positive(node: ast.expr) -> bool:
    """A literal finite number above 0 (a norm order or a norm type)."""
    return (
        isinstance(node, ast.Constant)
        and type(node.value) in (int, float)
        and 0 < node.value < float("inf")
    )


def _tensor(value: object) -> object:
    """A reduction or copy of ``value``: its degree (not of the parameters themselves)."""
    if value in (_PARAMS, _PARAM):
        raise _Unknown
    return value


def _unknown() -> object:
    raise _Unknown


def _join(a: object, b: object) -> object:
    """The degree of ``a + b`` (or of a name that holds either): equal, or one is the 0."""
    if a == _ZERO:
        return b
    if b == _ZERO or a == b:
        return a
    raise _Unknown
