"""apex's availability asked of the interpreter rather than of a name the import guard binds
(``"apex" in sys.modules``, ``find_spec("apex")``, ``"amp" in globals()``): folded to
"installed" where the rewrite removes the import, refused where the fold cannot hold.
"""

from __future__ import annotations

import functools

import libcst as cst

from ampmigrate.apex.common import _code, none_comparison
from ampmigrate.apex.verdict import APEX


class InterpreterProbes:
    """The interpreter-probe stage of ``_Planner`` (mixed into it, after ``Guards``)."""

    def _interpreter_probes(self) -> None:
        """apex's availability asked of the interpreter, not of a name the guard binds
        (joeynmt: `if "apex" not in sys.modules: raise ImportError(...) from no_apex`;
        ``importlib.util.find_spec("apex")``, ``sys.modules.get("apex")``, ``"amp" in
        globals()``; the 71st review): nothing imports apex once the rewrite is done, so the
        test would say "missing" on every run (joeynmt's raise then ran on every fp16 run). It
        folds to "installed", as a flag the guard sets does; where the file also imports apex
        beyond amp, what the test guards may be that, which stays: refused."""
        lazy = self._lazy_amp_import()
        for node in self.nodes:
            probe = self._asks_interpreter(node)
            if probe is None:
                self._unfolded_probe(node)
                continue
            expr, value = probe
            if lazy is not None:  # (the 73rd review: asked before the file's own import ran)
                self.problem(
                    node,
                    f"`{_code(self.module, expr)}` asks the interpreter whether apex is there, "
                    f"and the file imports apex only inside a function (line {lazy}): before "
                    "that runs the answer was no, so the test cannot be folded to one value; "
                    "rewrite it by hand",
                )
                continue
            if self._apex_beyond_amp():
                self.problem(
                    node,
                    f"`{_code(self.module, expr)}` asks the interpreter whether apex is there, "
                    "and this file imports apex beyond amp, which stays: what the test guards "
                    "may be either; once the rewrite removes the amp import, nothing imports "
                    "apex for it to see: test for what the code needs, by hand",
                )
                continue
            self._fold(expr, value)

    def _lazy_amp_import(self) -> int | None:
        """The line of the file's amp import where none is at module level (None: one is)."""
        lines = []
        for node in self.nodes:
            if isinstance(node, cst.Import | cst.ImportFrom) and self._amp_only_import(node):
                if not any(isinstance(a, cst.FunctionDef) for a in self.ancestors(node)):
                    return None
                lines.append(self.line(node))
        return min(lines) if lines else None

    def _unfolded_probe(self, node: cst.CSTNode) -> None:
        """Blocks what still asks for apex once the amp import goes, in a form the fold does not
        take: a module of apex's (``find_spec("apex.contrib")``, which raises without apex), or
        the exception the ``except`` around the import bound (``raise ... from no_apex``, after
        a lookup kept in a variable, say); the 73rd review: each crashed every fp16 run."""
        if self._opaque_table_read(node) and not self._gone(node, kept=True):
            self.problem(
                node,
                f"`{_code(self.module, self._table_use(node))}` reads `sys.modules` in a form the "
                "rewrite cannot follow (only a literal module name, or `__name__`, can be told "
                "not to ask for apex): once the rewrite removes the apex import, apex is no "
                "longer in it, and what this reads may change; rewrite it by hand",
            )
            return
        asked = self._asked_module(node)
        if (
            (asked in ("apex", APEX) and "sys.modules.get" in self.qualified(node.func))
            or self._module_entry(node)
        ) and not self._gone(node, kept=True):
            # (a kept `find_spec("apex")` answers whether apex is installed, which the rewrite
            # does not change; this answers whether something imported it, which it does)
            after = "raises KeyError" if isinstance(node, cst.Subscript) else "is None"
            self.problem(
                node,
                f"`{_code(self.module, node)}` is apex's module only because this file imports "
                f"it: once the rewrite removes the import it {after}, so what it is kept for "
                "changes; rewrite it by hand",
            )
            return
        if isinstance(asked, str) and asked.startswith("apex.") and asked != APEX:
            # (a stored `find_spec("apex")` may be the switch the rewrite keeps, with its note:
            # the 39th review's bert_document_classification)
            if not self._gone(node):
                self.problem(
                    node,
                    f"`{_code(self.module, node)}` asks the interpreter for a module of "
                    "apex's: once the amp import goes nothing imports apex, so it says missing "
                    "(or raises) on every run; rewrite it by hand",
                )
            return
        if isinstance(node, cst.Name) and node.value in self._handler_names:
            handler = self._handler_names[node.value]
            if not self.within(node, handler) and not self._gone(node):
                self.problem(
                    node,
                    f"`{node.value}` is the exception the `except` at line {self.line(handler)} "
                    "bound, around the apex import the rewrite removes with it: nothing binds "
                    "it any more (a `raise ... from` it raises NameError); rewrite it by hand",
                )

    @functools.cached_property
    def _handler_names(self) -> dict[str, cst.ExceptHandler]:
        """The names ``except ImportError as <name>`` binds around the amp imports."""
        found = {}
        for node in self.nodes:
            if not (
                isinstance(node, cst.Try)
                and any(
                    isinstance(s, cst.SimpleStatementLine)
                    and any(self._amp_only_import(b) for b in s.body)
                    for s in node.body.body
                )
            ):
                continue
            for handler in node.handlers:
                if handler.name is not None and isinstance(handler.name.name, cst.Name):
                    found[handler.name.name.value] = handler
        return found

    def _gone(self, node: cst.CSTNode, kept: bool = False) -> bool:
        """``node`` goes with the rewrite: in a statement it removes, or a branch it folds away;
        ``kept``: the body of a dropped ``try`` stays in its place (the 77th review: `HAS =
        sys.modules.get("apex")` in the guard was kept), only its handlers go."""
        return self.dead(node) or any(
            a in self.removed
            or (
                id(a) in self.dropped
                and not (kept and isinstance(a, cst.Try) and self.within(node, a.body))
            )
            or (a in self.folded_first and self.within(node, a.body))
            for a in self.ancestors(node)
        )

    def _opaque_table_read(self, node: cst.CSTNode) -> bool:
        """``node`` is ``sys.modules`` used in any form but a lookup by a literal name or
        ``__name__`` (``x in sys.modules``, ``.get``, ``[x]``, ``"x" in sys.modules.keys()``):
        an alias, ``dict.get(sys.modules, ...)``, ``"ap" + "ex"``, ``.__getitem__`` may all ask
        for apex (the 79th review), and the rewrite cannot tell whether they do."""
        if isinstance(node, cst.Call) and _table_by_name(node):
            return True  # (`getattr(sys, "modules")`, `vars(sys)`: the 83rd review)
        if not (
            (
                (isinstance(node, cst.Name) and node.value in self._table_names)
                or (isinstance(node, cst.Attribute) and node.attr.value == "modules")
            )
            and any(q.endswith("sys.modules") for q in self.qualified(node))
        ):
            return False
        parent = self.parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            call = self.parent(parent)
            if not (isinstance(call, cst.Call) and call.func is parent):
                return True
            if parent.attr.value == "keys" and not call.args:
                return not self._literal_in(self.parent(call), call)
            return not (
                parent.attr.value in ("get", "pop", "setdefault")
                and call.args
                and self._named_key(call.args[0].value)
                and (parent.attr.value == "get" or not self._apex_key(call.args[0].value))
            )
        if isinstance(parent, cst.Subscript) and parent.value is node:
            return not (
                len(parent.slice) == 1
                and isinstance(parent.slice[0].slice, cst.Index)
                and self._named_key(parent.slice[0].slice.value)
            )
        return not self._literal_in(parent, node)

    def _table_use(self, node: cst.CSTNode) -> cst.CSTNode:
        """What to quote of a read of ``sys.modules``: the expression or statement it is in."""
        for a in self.ancestors(node):
            if isinstance(a, cst.Call | cst.Subscript | cst.Comparison | cst.BaseSmallStatement):
                return a
        return node

    def _literal_in(self, target: cst.CSTNode | None, node: cst.CSTNode) -> bool:
        """``node`` is the right of ``"name" in node`` (or ``not in``), ``target`` its parent."""
        comparison = self.parent(target) if isinstance(target, cst.ComparisonTarget) else None
        return (
            isinstance(comparison, cst.Comparison)
            and len(comparison.comparisons) == 1
            and isinstance(target.operator, cst.In | cst.NotIn)
            and target.comparator is node
            and self._named_key(comparison.left)
        )

    @functools.cached_property
    def _table_names(self) -> set[str]:
        """``modules`` and what ``from sys import modules as loaded`` binds (the 83rd review)."""
        return {"modules"} | {
            a.asname.name.value
            for n in self.nodes
            if isinstance(n, cst.ImportFrom)
            and n.module is not None
            and _code(self.module, n.module) == "sys"
            and not isinstance(n.names, cst.ImportStar)
            for a in n.names
            if a.name.value == "modules" and a.asname is not None
            and isinstance(a.asname.name, cst.Name)
        }  # fmt: skip

    @staticmethod
    def _named_key(node: cst.CSTNode) -> bool:
        """A module name the reader can see: a plain literal string, ``__name__``, or
        ``__name__ + ".helpers"`` (a submodule of this one: the 83rd review)."""
        if (
            isinstance(node, cst.BinaryOperation)
            and isinstance(node.operator, cst.Add)
            and isinstance(node.left, cst.Name)
            and node.left.value == "__name__"
            and isinstance(node.right, cst.SimpleString)
        ):
            return True
        return (isinstance(node, cst.SimpleString) and "b" not in node.prefix.lower()) or (
            isinstance(node, cst.Name) and node.value == "__name__"
        )

    @staticmethod
    def _apex_key(node: cst.CSTNode) -> bool:
        return isinstance(node, cst.SimpleString) and (
            node.evaluated_value == "apex" or str(node.evaluated_value).startswith("apex.")
        )

    def _module_entry(self, node: cst.CSTNode) -> bool:
        """``sys.modules["apex"]``: a KeyError once nothing imports apex (the 77th review: the
        `"apex" in sys.modules` around it folded to true)."""
        return (
            isinstance(node, cst.Subscript)
            and "sys.modules" in self.qualified(node.value)
            and len(node.slice) == 1
            and isinstance(node.slice[0].slice, cst.Index)
            and isinstance(node.slice[0].slice.value, cst.SimpleString)
            and node.slice[0].slice.value.evaluated_value in ("apex", APEX)
        )

    def _asked_module(self, node: cst.CSTNode) -> str | bytes | None:
        """The module ``node`` asks the interpreter for by its name: a lookup
        (``find_spec("apex")``, ``sys.modules.get("apex")``) or ``"apex" in sys.modules``."""
        if (
            isinstance(node, cst.Call)
            and len(node.args) in (1, 2)  # (`sys.modules.get("apex", None)`: 77th, 79th reviews)
            and isinstance(node.args[0].value, cst.SimpleString)
            and self.qualified(node.func) & _LOOKUPS
        ):
            return node.args[0].value.evaluated_value
        if (
            isinstance(node, cst.Comparison)
            and isinstance(node.left, cst.SimpleString)
            and any(
                isinstance(c.operator, cst.In | cst.NotIn)
                and (
                    "sys.modules" in self.qualified(c.comparator)
                    or (  # `"apex" in sys.modules.keys()` (the 79th review)
                        isinstance(c.comparator, cst.Call)
                        and not c.comparator.args
                        and "sys.modules.keys" in self.qualified(c.comparator.func)
                    )
                )
                for c in node.comparisons
            )
        ):
            return node.left.evaluated_value
        return None

    def _asks_interpreter(self, node: cst.CSTNode) -> tuple[cst.CSTNode, bool] | None:
        """(the test, its value with apex installed) where ``node`` is such a test."""
        asked = self._asked_module(node) in ("apex", APEX)
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            target = node.comparisons[0]
            right = target.comparator
            if not (
                isinstance(target.operator, cst.In | cst.NotIn)
                and isinstance(node.left, cst.SimpleString)
            ):
                return None
            listed = (
                isinstance(right, cst.Call)
                and isinstance(right.func, cst.Name)
                and right.func.value in ("globals", "locals", "dir")
                and not right.args
                and f"builtins.{right.func.value}" in self.qualified(right.func)
            )
            if asked or (listed and node.left.evaluated_value in self.bound):
                return node, isinstance(target.operator, cst.In)
            return None
        if not (isinstance(node, cst.Call) and asked):
            return None
        on = none_comparison(self.parent(node), node)
        if on is not None:
            return self.parent(node), on
        if isinstance(self.parent(node), cst.If | cst.UnaryOperation | cst.BooleanOperation):
            return node, True
        return None

    def _apex_beyond_amp(self) -> bool:
        """The file imports something of apex besides amp (``from apex.parallel import
        ...``, ``import apex`` read as ``apex.optimizers``)."""
        for node in self.nodes:
            if isinstance(node, cst.ImportFrom) and node.module is not None and not node.relative:
                module = _code(self.module, node.module)
                names = [] if isinstance(node.names, cst.ImportStar) else node.names
                if module.startswith("apex.") and module != APEX:
                    return True
                if module == "apex" and any(a.evaluated_name != "amp" for a in names):
                    return True
            if isinstance(node, cst.Import) and any(
                _code(self.module, a.name).startswith("apex.")
                and _code(self.module, a.name) != APEX
                for a in node.names
            ):
                return True
        return bool(self._apex_members() - {"amp"})


# what asks the interpreter for a module by its name
_LOOKUPS = frozenset({
    "sys.modules.get", "importlib.util.find_spec", "importlib.find_loader", "pkgutil.find_loader",
})  # fmt: skip


def _table_by_name(call: cst.Call) -> bool:
    """``getattr(sys, "modules")`` or ``vars(sys)``: the module table under another spelling."""
    func = call.func.value if isinstance(call.func, cst.Name) else None
    args = call.args
    first = args[0].value if args else None
    return (
        func in ("getattr", "vars")
        and isinstance(first, cst.Name)
        and first.value == "sys"
        and (
            func == "vars"
            or (
                len(args) > 1
                and isinstance(args[1].value, cst.SimpleString)
                and args[1].value.evaluated_value == "modules"
            )
        )
    )
