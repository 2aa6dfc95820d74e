"""What a call between a scaled backward and its step runs: the function it reaches (of this
file, a closure of the training function, a local alias, a lambda, ``functools.partial``, a
method through ``self``, a function of a module on disk), and whether that code runs a plain
backward or steps an optimizer (the 62nd review's q18/d08, the 65th review's W1 and W2).
Apex had unscaled the gradients when ``scale_loss`` exited, so such a call is a gradient read:
``scaler.unscale_`` goes before it.
"""

from __future__ import annotations

import ast
import functools

import libcst as cst

from ampmigrate.apex.common import _code
from ampmigrate.apex.hidden import (
    HiddenBackward,
    optimizer_named,
    plain_backward,
    top_level,
    touches_gradients,
)
from ampmigrate.apex.ondisk import module_definition, module_tree

_Callee = tuple[ast.FunctionDef | ast.Lambda, ast.Module | None, str | None]


class Callees:
    def _runs_plain_backward(self, call: cst.Call) -> HiddenBackward | None:
        """The plain backward that the code ``call`` reaches runs (see :mod:`hidden`)."""
        found = self._callee(call)
        return None if found is None else plain_backward(*found)

    def _touches_gradients(self, statement: cst.CSTNode, opt: str, models: set[str]) -> bool:
        """``statement`` steps another optimizer (``aux_opt.step()``: it may share the
        parameters), calls code that runs a plain backward or a step, or hands the model to
        code the rewrite does not follow (a regularizer's ``reg_fn(model)``): each sees the
        gradients apex had unscaled."""
        scaled = {o for _, o in self.scaled}  # (stepped through the scaler in turn)
        for node in self._subtree(statement):
            if not isinstance(node, cst.Call) or any(
                isinstance(a, cst.Lambda) for a in self.ancestors(node)
            ):
                continue
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "step":
                receiver = _code(self.module, func.value)
                if receiver not in scaled and optimizer_named(receiver):
                    return True
                continue
            if isinstance(func, cst.Attribute) and func.attr.value in ("backward", "scale"):
                continue
            found = self._callee(node)
            if found is not None:
                if touches_gradients(*found) is not None:
                    return True
                continue
            if any(q.startswith(("torch.", "builtins.")) for q in self.qualified(func)):
                continue
            if any(_code(self.module, a.value) in models for a in node.args):
                return True
        return False

    def _callee(self, call: cst.Call) -> _Callee | None:
        """The function ``call`` runs, on ``ast`` with the module it is in and that module's
        path (None: this file): a module-level function of this file by its name; a function
        defined in the calling function, or a local bound once to a function, a lambda or
        ``functools.partial`` of one; a method through the first parameter (or an attribute
        the class binds to one of its methods, ``self.reg = self.add_reg``); a function of a
        module on disk by its qualified name. None where it is none of these."""
        func = call.func
        tree = self.syntax
        caller = self.function(call)
        if isinstance(func, cst.Call):  # `functools.partial(f, k=1)(model)`
            partial = any(q == "functools.partial" for q in self.qualified(func.func))
            inner = func.args[0].value if func.args else None
            if not (partial and isinstance(inner, cst.Name)):
                return None
            func = inner
        if isinstance(func, cst.Name):
            local = self._local_binding(caller, func.value, tree)
            if local is not None:
                return local
            module_level = top_level(tree, func.value)
            if module_level is not None:
                return module_level, tree, None
        cls = self.parent(self.parent(caller)) if isinstance(caller, cst.FunctionDef) else None
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and isinstance(cls, cst.ClassDef)
            and caller.params.params
            and func.value.value == caller.params.params[0].name.value
        ):
            return self._method(cls.name.value, func.attr.value, tree)
        qualified = self.qualified(func)
        if self.path is None or len(qualified) != 1:
            return None
        located = module_definition(self.path, next(iter(qualified)))
        if located is None or not isinstance(located[1], ast.FunctionDef):
            return None
        return located[1], module_tree(located[0]), located[0]

    def _method(
        self, owner: str, name: str, tree: ast.Module, seen: frozenset[str] = frozenset()
    ) -> _Callee | None:
        """``self.name(...)`` of the class ``owner``: its method, or the one an attribute of
        that name is bound to (``self.reg = self.add_reg``); ``seen``: the names followed (a
        self-assignment, ``self.model = self.model``, the 74th review's recursion)."""
        if name in seen:
            return None
        classes = [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == owner]
        if len(classes) != 1:
            return None
        body = classes[0].body
        methods = [m for m in body if isinstance(m, ast.FunctionDef) and m.name == name]
        if len(methods) == 1:
            return methods[0], tree, None
        bound = {  # `self.reg = self.add_reg` in a method of the class
            n.value.attr
            for n in ast.walk(classes[0])
            if isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Attribute)
            and n.targets[0].attr == name
            and isinstance(n.value, ast.Attribute)
            and isinstance(n.value.value, ast.Name)
            and n.value.value.id == "self"
        }
        if len(bound) == 1:
            return self._method(owner, bound.pop(), tree, seen | {name})
        return None

    def _local_binding(self, caller: cst.CSTNode, name: str, tree: ast.Module) -> _Callee | None:
        """``name`` as the function ``caller`` defines or binds it once (see :meth:`_callee`)."""
        if not isinstance(caller, cst.FunctionDef):
            return None
        line = self.line(caller)
        owner = next(
            (
                f
                for f in self._ast_functions.get(caller.name.value, ())
                if min([f.lineno, *(d.lineno for d in f.decorator_list)])
                <= line
                <= (f.end_lineno or f.lineno)
            ),
            None,
        )
        if owner is None:
            return None
        found = self._bound_in(owner).get(name, [])
        if len(found) != 1:
            return None
        value = found[0]
        if isinstance(value, ast.FunctionDef | ast.Lambda):
            return value, tree, None
        if (
            isinstance(value, ast.Call)
            and value.args
            and ast.unparse(value.func) in ("partial", "functools.partial")
        ):
            value = value.args[0]
        if isinstance(value, ast.Name):
            module_level = top_level(tree, value.id)
            if module_level is not None:
                return module_level, tree, None
        return None

    @functools.cached_property
    def _ast_functions(self) -> dict[str, list[ast.FunctionDef]]:
        """The functions of the file's ``ast``, by name (once per file)."""
        found: dict[str, list[ast.FunctionDef]] = {}
        for node in ast.walk(self.syntax):
            if isinstance(node, ast.FunctionDef):
                found.setdefault(node.name, []).append(node)
        return found

    @functools.cached_property
    def _bound_by_function(self) -> dict[int, dict[str, list[ast.AST]]]:
        return {}

    def _bound_in(self, owner: ast.FunctionDef) -> dict[str, list[ast.AST]]:
        """What ``owner`` binds by name, anywhere inside it: a nested def (the def itself) or
        an assignment (its value), once per function."""
        cache = self._bound_by_function
        if id(owner) not in cache:
            found: dict[str, list[ast.AST]] = {}
            for n in ast.walk(owner):
                if n is not owner and isinstance(n, ast.FunctionDef):
                    found.setdefault(n.name, []).append(n)
                elif isinstance(n, ast.Assign):
                    for t in n.targets:
                        if isinstance(t, ast.Name):
                            found.setdefault(t.id, []).append(n.value)
            cache[id(owner)] = found
        return cache[id(owner)]
