"""Plan the rewrites of the apex names outside ``apex.amp`` (AMP311-AMP315), on ``ast``.

Every reference is resolved through the file's imports (``Names``), never matched as text; its
context decides what it becomes:

- a call of a class or function with a torch counterpart: the callee becomes the torch name and
  each argument is mapped, dropped (a literal equal to apex's default, an option with no torch
  meaning) or refused with the reason (``table.Target``); apex defaults that torch does not
  share are written out;
- a type position (``isinstance``, ``except``, annotations): the torch class where one class
  has the meaning, else no fix;
- a subclass: a finding, no fix (its constructor and overrides rely on apex);
- another value (``BertLayerNorm = FusedLayerNorm``): the torch class where its defaults are
  apex's, else no fix (the calls are not visible);
- a ``try:`` that imports apex with a fallback binding the same names: the fallback stays, the
  ``try`` goes; one that swaps the project's own class for apex's: the swap goes;
- a name with no native counterpart: a finding naming what projects use instead.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ampmigrate.apex.api import table
from ampmigrate.apex.api.calls import Calls
from ampmigrate.apex.api.common import (
    _bound_names,
    _catches_import_error,
    _executed,
    _handler_flags,
)
from ampmigrate.apex.api.fallbacks import Fallbacks
from ampmigrate.apex.api.table import TARGETS, Target
from ampmigrate.apex.api.targets import Targets
from ampmigrate.apex.api.unused import unused_import
from ampmigrate.apex.strays import function_around
from ampmigrate.apex.users import built_extensions, users_on_disk
from ampmigrate.catalog import Rule
from ampmigrate.engine.names import Names, dotted
from ampmigrate.engine.source import Source
from ampmigrate.findings import Edit, Finding, Fix
from ampmigrate.renames import NoFix

if TYPE_CHECKING:
    from ampmigrate.engine import Settings

_APEX_PATH = re.compile(r"apex(?:\.[A-Za-z_]\w*)+")
_SKIP = frozenset({"apex.optimizers.FP16_Optimizer", "apex.contrib.optimizers.FP16_Optimizer"})


def check(
    tree: ast.Module, source: Source, names: Names, rules: Sequence[Rule], settings: Settings
) -> list[Finding]:
    """The findings of the selected AMP31x rules."""
    codes = {r.code for r in rules}
    planner = _Planner(tree, source, names, settings.target_torch)
    planner.run()
    return [f for f in planner.findings if f.code in codes]


def _by_name(head: str, target: Target, what: str) -> str:
    """The finding for an apex name with a torch counterpart that no fix can reach (``what``:
    how it is named): the counterpart, and apex's defaults to pass where a call gives none."""
    defaults = ", ".join(f"`{k}={v}`" for k, v in target.write)
    return (
        f"{head}: its torch counterpart is `{target.new}` ({target.accepts}), but no fix edits "
        f"{what}: write `{target.new}` there by hand"
        + (f", passing {defaults} where a call gives none (apex's defaults)" if defaults else "")
    )


def _instead(head: str, text: str, no_fix: str = "") -> str:
    """AMP315's message: a text that names the alternative follows "use instead" (it is no
    "no counterpart" claim); one that says there is none stands after the head."""
    return f"{head}{no_fix}; use instead: {text}" if text.startswith("`") else f"{head}: {text}"


def _constant_flag(statement: ast.stmt) -> bool:
    """``has_apex = True``: a name bound to a constant, which cannot raise."""
    return (
        isinstance(statement, ast.Assign)
        and all(isinstance(t, ast.Name) for t in statement.targets)
        and isinstance(statement.value, ast.Constant)
    )


class _Planner(Targets, Calls, Fallbacks):
    def __init__(
        self, tree: ast.Module, source: Source, names: Names, floor: tuple[int, ...] | None
    ) -> None:
        self.tree = tree
        self.floor = floor  # the oldest torch the project supports (None: not known)
        self.source = source
        self.names = names
        self.findings: list[Finding] = []
        self._consumed: set[ast.AST] = set()
        self._users: dict[str, list[tuple[str, int, str]] | None] = {}  # by name: users_on_disk
        self._written: dict[int, list[Edit]] = {}  # by `try`: apex's defaults written at calls

    # ---- the walk ----------------------------------------------------------------------------

    def run(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Try):
                self._try(node)
            elif isinstance(node, ast.Call):
                self._dynamic_import(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                self._named_by_string(node)
        self._unused_imports()
        roots = self._apex_bound() - set(self._dead_imports)
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Name | ast.Attribute) or isinstance(node.ctx, ast.Store):
                continue
            parent = self.names.parent(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                continue  # only the longest chain is a reference
            root = node
            while isinstance(root, ast.Attribute):
                root = root.value
            if not isinstance(root, ast.Name) or root.id not in roots:
                continue  # resolving is the cost: only names an apex import binds
            if self._consumed and any(a in self._consumed for a in self.names.ancestors(node)):
                continue
            self._reference(node, parent)
        going = {  # the imports some fix of this file removes
            (e.module, e.obj, e.asname)
            for f in self.findings
            if f.fix is not None
            for e in f.fix.remove_imports
        }
        self.findings = [self._flag_stated(f, going) for f in self.findings]

    def _flag_stated(self, found: Finding, going: set) -> Finding:
        """A fix that drops an import of a ``try`` of apex imports only, whose ``except``
        sets a flag the file tests (``has_apex = False``): once its last import goes, the
        engine drops the ``try`` with that ``except``, and the flag keeps the value it had
        where apex was installed. Stated (BiSeNet: the fallback DDP and the float32 path
        for a run without apex went unsaid); not where an import of it has no fix (``going``:
        those some fix removes), so the ``try`` never empties (unmasked_teacher's FusedLAMB)."""
        fix = found.fix
        if fix is not None and self._table_reads:
            head = found.message.partition(":")[0]
            return replace(found, fix=None, message=(
                f"{head}: no automatic fix: line {self._table_reads[0]} reads `sys.modules` "
                "for apex, which is there only because an import put it there, and this "
                "file's fixes drop its apex imports: the answer may change (a guard that "
                "raises where apex is missing would raise on every run); test for what the "
                "code needs instead, by hand, first"
            ))  # fmt: skip
        if fix is None or not fix.remove_imports:
            return found
        removed = {(e.module, e.obj, e.asname) for e in fix.remove_imports}
        said = next(
            (text for keys, text in self._flag_guards if keys & removed and keys <= going), None
        )
        if said is not None and self._apex_strings:
            # physicsnemo (the 48th review): `"apex.optimizers.FusedAdam" if have_apex else
            # "torch.optim.Adam"`, loaded by `importlib`: the flag, True for good once the `try`
            # goes, then loads apex by name where it is missing (ModuleNotFoundError)
            line, text = self._apex_strings[0]
            head = found.message.partition(":")[0]
            return replace(found, fix=None, message=(
                f"{head}: no automatic fix: dropping it empties the `try` whose `except` set a "
                "flag for a run without apex, and every test of the flag would take the path "
                f"that ran where apex was installed, while line {line} names `{text}` in a "
                "string (apex loaded by name at run time, which that path may do): replace "
                "that string by the torch name, by hand, first"
            ))  # fmt: skip
        return found if said is None else replace(found, message=found.message + said)

    @functools.cached_property
    def _table_reads(self) -> list[int]:
        """The lines that read ``sys.modules`` for apex (``"apex" in sys.modules``,
        ``sys.modules.get("apex.optimizers")``) or in a form that may (an alias, a computed
        name): the 81st review's guard raised on every run once the fixes dropped the file's
        only apex import. A lookup by another literal name, or ``__name__``, is not one."""
        lines = []
        spelled = {"modules"} | {  # (`from sys import modules as loaded`: the 83rd review)
            a.asname
            for n in ast.walk(self.tree)
            if isinstance(n, ast.ImportFrom) and n.module == "sys"
            for a in n.names
            if a.name == "modules" and a.asname
        }
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and _table_by_name(node):
                lines.append(node.lineno)  # (`getattr(sys, "modules")`, `vars(sys)`)
                continue
            if not (
                (isinstance(node, ast.Attribute) and node.attr == "modules")
                or (isinstance(node, ast.Name) and node.id in spelled)
            ) or not any(q.endswith("sys.modules") for q in self.names.qualified(node)):
                continue
            parent = self.names.parent(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                call = self.names.parent(parent)
                key = call.args[0] if isinstance(call, ast.Call) and call.args else None
                if parent.attr == "keys" and isinstance(call, ast.Call) and not call.args:
                    compare = self.names.parent(call)  # (`"numpy" in sys.modules.keys()`)
                    key = compare.left if isinstance(compare, ast.Compare) else None
            elif isinstance(parent, ast.Subscript) and parent.value is node:
                key = parent.slice
            elif isinstance(parent, ast.Compare) and node in parent.comparators:
                key = parent.left
            else:
                key = None
            if isinstance(key, ast.Name) and key.id == "__name__":
                continue
            if (
                isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and not re.match(r"apex(\.|$)", key.value)
            ):
                continue
            lines.append(node.lineno)
        return sorted(lines)

    @functools.cached_property
    def _apex_strings(self) -> list[tuple[int, str]]:
        """The string literals that spell an apex module or name (``"apex.optimizers"``)."""
        return [
            (n.lineno, n.value)
            for n in ast.walk(self.tree)
            if isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and re.fullmatch(r"apex(\.[A-Za-z_]\w*)*", n.value)
        ]

    @functools.cached_property
    def _flag_guards(self) -> list[tuple[set[tuple[str, str | None, str | None]], str]]:
        """Each ``try`` of apex imports only whose ``except`` sets a flag read elsewhere: the
        imports it holds (as ``ImportEdit`` fields) and what dropping it does, said once for
        the file (``_flag_stated``)."""
        out = []
        for guard in ast.walk(self.tree):
            if not (
                isinstance(guard, ast.Try)
                and guard.handlers
                and all(_catches_import_error(h) for h in guard.handlers)
                and all(
                    isinstance(s, ast.Import | ast.ImportFrom) or _constant_flag(s)
                    for s in guard.body
                )
                and all(
                    (s.module or "").partition(".")[0] == "apex"
                    if isinstance(s, ast.ImportFrom)
                    else all(a.name.partition(".")[0] == "apex" for a in s.names)
                    for s in guard.body
                    if not _constant_flag(s)
                )
                and not all(_constant_flag(s) for s in guard.body)
            ):
                continue
            imports = [s for s in guard.body if not _constant_flag(s)]
            flags = sorted(_handler_flags(guard) - _bound_names(imports))
            inside = {id(n) for n in ast.walk(guard)}
            lines = sorted({
                n.lineno for n in ast.walk(self.tree)
                if isinstance(n, ast.Name) and n.id in flags and isinstance(n.ctx, ast.Load)
                and id(n) not in inside
            })  # fmt: skip
            if not lines:
                continue
            keys = {
                (s.module, a.name, a.asname) if isinstance(s, ast.ImportFrom)
                else (a.name, None, a.asname)
                for s in imports
                for a in s.names
            }  # fmt: skip
            listed = ", ".join(f"`{f}`" for f in flags)
            shown = ", ".join(map(str, lines[:6])) + (", ..." if len(lines) > 6 else "")
            fate = "no longer runs" if len(imports) < len(guard.body) else "goes with it"
            out.append((keys, (
                f"; behaviour change once the `try` at line {guard.lineno} loses its last "
                f"apex import: its `except`, which set {listed} where apex was not installed, "
                f"{fate}, and every test of it (line{'s' if len(lines) > 1 else ''} "
                f"{shown}) takes the path that ran where apex was installed (a run without "
                "apex took the other one)"
            )))  # fmt: skip
        return out

    def _dynamic_import(self, call: ast.Call) -> None:
        """``importlib.import_module("fused_adam_cuda")`` (jukebox): apex's extension loaded by
        name, which no import statement shows."""
        if not (
            call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
            and {"importlib.import_module", "builtins.__import__"} & self.names.qualified(call.func)
        ):
            return
        name = call.args[0].value
        if name.partition(".")[0] in self._built:
            return
        lookup = self.names.parent(call)  # `getattr(import_module("apex.optimizers"), "X")`
        member = None
        if (
            isinstance(lookup, ast.Call)
            and isinstance(lookup.func, ast.Name)
            and lookup.func.id == "getattr"
            and len(lookup.args) >= 2
            and lookup.args[0] is call
            and isinstance(lookup.args[1], ast.Constant)
            and isinstance(lookup.args[1].value, str)
        ):
            member = lookup.args[1].value
        elif isinstance(lookup, ast.Attribute) and lookup.value is call:
            # `import_module("apex.normalization").FusedLayerNorm` (49a), and down a chain:
            # `import_module("apex").optimizers.FusedAdam`, `__import__("apex.optimizers")
            # .optimizers.FusedAdam` (`__import__` without `fromlist` gives the package, 50a)
            chain, above = [], lookup
            while isinstance(above, ast.Attribute) and not above.attr.startswith("__"):
                chain.append(above.attr)
                above = self.names.parent(above)
            if "builtins.__import__" in self.names.qualified(call.func) and not any(
                k.arg == "fromlist" for k in call.keywords
            ) and len(call.args) < 4:  # fmt: skip
                name = name.partition(".")[0]
            dotted_names = [f"{name}." + ".".join(chain[: i + 1]) for i in range(len(chain))]
            known = [d for d in dotted_names if d in TARGETS or table.no_native(d) is not None]
            member = known[-1][len(name) + 1 :] if known else (chain[0] if chain else None)
        if member is not None:
            full = f"{name}.{member}"
            target = TARGETS.get(full)
            if target is not None:  # (physicsnemo's diffusion_fwi, the 48th review)
                head = f"`{full}` is loaded by name at run time"
                message = _by_name(head, target, "a lookup by name")
                self.findings.append(Finding(target.code, message, lookup, None))
                return
            name = full if table.no_native(full) is not None else name
        text = table.no_native(name)
        if text is None or name.startswith(table.ELSEWHERE):
            return
        message = _instead(f"`{name}` is loaded by name at run time", text)
        self.findings.append(Finding(table.NO_NATIVE, message, call, None))

    def _named_by_string(self, node: ast.Constant) -> None:
        """``"apex.optimizers.FusedAdam"`` as a whole string: a config's ``_target_`` that
        Hydra instantiates, ``pydoc.locate(...)``, a dotted name split and imported at run
        time (flash-attention's configs, the 67th review): apex runs there though no import
        shows it. A finding, no fix (a name in a string is the project's to edit)."""
        name = node.value
        if (
            not _APEX_PATH.fullmatch(name)
            or name.startswith(table.ELSEWHERE)
            or (name.count(".") < 2 and name not in TARGETS)  # (a package: a key, a message)
        ):
            return
        parent = self.names.parent(node)
        if isinstance(parent, ast.Expr):  # (a docstring, a bare string)
            return
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is node and (
            {"importlib.import_module", "builtins.__import__"} & self.names.qualified(parent.func)
        ):  # fmt: skip
            return  # (`_dynamic_import`'s)
        head = (
            f"the string `\"{name}\"` names apex's `{name.rpartition('.')[2]}` (a config's "
            "`_target_`, `pydoc.locate`, a name imported at run time)"
        )
        target = TARGETS.get(name)
        if target is not None:
            message = _by_name(head, target, "a name in a string")
            self.findings.append(Finding(target.code, message, node, None))
            return
        text = table.no_native(name)
        if text is not None:
            self.findings.append(Finding(table.NO_NATIVE, _instead(head, text), node, None))

    def _runs_only_with_apex(self, node: ast.AST, name: str) -> tuple[int, int] | None:
        """(the import's line, a line of the ``try`` that is not torch's constructors) where
        ``node`` sits in the body of a ``try`` that catches ImportError, after the apex import
        that binds it there: the 81st review's ``_ = LayerNorm(8).cuda()`` became torch's
        ``.cuda()``, run on machines without apex (or without CUDA: AssertionError at import).
        A body left with torch's constructors alone dissolves (``engine.imports``)."""
        if name not in TARGETS and name not in table.SAME and name not in table.TO_PYTHON_FLOAT:
            return None
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return None
        for guard in self.names.ancestors(node):  # (through a `def` in the `try`: the 83rd
            if isinstance(guard, ast.Module):  # review's 6)
                return None
            ran = [*guard.body, *guard.orelse] if isinstance(guard, ast.Try) else []
            if not (  # (its `else:` also runs only where the import did: the 83rd review's 5)
                isinstance(guard, ast.Try)
                and any(_catches_import_error(h) for h in guard.handlers)
                and any(self._inside(node, s) for s in ran)
            ):
                continue
            imports = [
                b.node.lineno
                for b in self.names.bindings(root)
                if isinstance(b.node, ast.Import | ast.ImportFrom)
                and any(b.node is s for s in guard.body)
                and b.node.lineno < node.lineno
            ]
            if not imports:
                continue
            apex = {root.id}
            for stmt in ran:
                if isinstance(stmt, ast.Import | ast.ImportFrom):
                    continue
                for n in _executed(stmt):  # (only the apex name's own calls, which become
                    if isinstance(n, ast.Call) and not (  # torch's constructors: a torch call
                        (isinstance(n.func, ast.Name) and n.func.id in apex)  # on "cuda" may
                        or (dotted(n.func) or ".").split(".")[0] in apex  # raise: the 83rd
                    ):  # review's 4)
                        return imports[0], stmt.lineno
                    if isinstance(n, ast.Import | ast.ImportFrom):
                        return imports[0], stmt.lineno
        return None

    @functools.cached_property
    def _dead_imports(self) -> dict[str, int]:
        """Names a module-level apex import binds (alone, or in a ``try`` of its own) that the
        next module-level statement binds again (``BertLayerNorm = torch.nn.LayerNorm`` after
        a guarded apex import), with nothing that could read them in between, nothing that
        binds them later and no ``global`` of them: every read sees the new value, so the
        import is dead. Name -> the line that binds it again."""
        body = self.tree.body
        out: dict[str, int] = {}
        for index, stmt in enumerate(body[:-1]):
            imports = [stmt] if isinstance(stmt, ast.ImportFrom) else []
            if isinstance(stmt, ast.Try) and not stmt.orelse and not stmt.finalbody:
                imports = [s for s in stmt.body if isinstance(s, ast.ImportFrom)]
                if len(imports) != len(stmt.body):
                    continue
            nxt = body[index + 1]
            name = _rebinding(nxt)
            if name is None:
                continue
            for imported in imports:
                root = (imported.module or "").partition(".")[0]
                if imported.level or root != "apex":
                    continue
                if not any((a.asname or a.name) == name for a in imported.names):
                    continue
                if name in {n.id for n in _evaluated(nxt) if isinstance(n, ast.Name)}:
                    continue  # (`X = X or fallback` reads the import)
                # no other binding of the name anywhere (a handler's included), no `global` of
                # it, and no import of it but this `try`'s
                rebinds = any(
                    (isinstance(n, ast.Name) and n.id == name
                     and not isinstance(n.ctx, ast.Load)
                     and not (isinstance(nxt, ast.Assign) and n is nxt.targets[0]))
                    or (isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                        and n.name == name and n is not nxt)
                    or (isinstance(n, ast.Global | ast.Nonlocal) and name in n.names)
                    or (isinstance(n, ast.alias) and (n.asname or n.name) == name
                        and not any(n in i.names for i in imports))
                    for n in ast.walk(self.tree)
                )  # fmt: skip
                if not rebinds:
                    out[name] = nxt.lineno
        return out

    def _apex_bound(self) -> set[str]:
        """The names the file's imports of apex (and its compiled extensions) bind."""
        out = set()
        for binding in self.names.imports():
            stmt, alias = binding.node, binding.alias
            if alias is None:
                continue
            module = alias.name if isinstance(stmt, ast.Import) else stmt.module or ""
            if isinstance(stmt, ast.ImportFrom) and stmt.level:
                continue
            root = module.partition(".")[0]
            if root == "apex" or (root in table.COMPILED and root not in self._built):
                out.add(binding.name)
        return out

    @functools.cached_property
    def _built(self) -> frozenset[str]:
        """The compiled extensions the project builds itself (not apex's, whatever the name)."""
        return built_extensions(self.source.path) if self.source.path else frozenset()

    def _apex_names(self, node: ast.AST) -> tuple[list[str], bool]:
        """The apex names ``node`` may be, and whether something else may bind it too."""
        qualified = self.names.qualified(node)
        apex = sorted(
            q
            for q in qualified
            if q.startswith("apex.")
            or (q.partition(".")[0] in table.COMPILED and q.partition(".")[0] not in self._built)
        )
        return apex, len(apex) < len(qualified)

    def _reference(self, node: ast.Name | ast.Attribute, parent: ast.AST | None) -> None:
        found, conditional = self._apex_names(node)
        if not found or self._bound_by_consumed(node):
            return
        if conditional and isinstance(node, ast.Name) and self._reads_other_import(node):
            return
        name = found[0]
        star = self._star_rebinds(node)
        if star is not None:  # (50a: `from mylib import *` defines its own FusedLayerNorm)
            code = TARGETS[name].code if name in TARGETS else table.NO_NATIVE
            self.findings.append(Finding(code, (
                f"`{name}`: no automatic fix: `{star[1]}` at line {star[0]} comes after apex's "
                "import, and its module may bind the name too (it defines it, star-imports "
                "another module, binds names by `globals()`/`setattr`, or cannot be read): a "
                "read here may be that module's"
            ), node, None))  # fmt: skip
            return
        guarded = self._runs_only_with_apex(node, name)
        if guarded is not None:
            code = TARGETS[name].code if name in TARGETS else table.SAME_OBJECT
            where = parent if isinstance(parent, ast.Call) and parent.func is node else node
            imported, runs = guarded
            self.findings.append(Finding(code, (
                f"`{name}`: no automatic fix: this use follows apex's import (line {imported}) "
                "in a `try` that catches ImportError, so it ran only where apex imported, and "
                f"the `try` also runs line {runs}: rewritten (and the import dropped once "
                f"unused), line {runs} would run where apex is missing too, where the "
                "`except`'s code ran before; rewrite the `try` by hand"
            ), where, None))  # fmt: skip
            return
        rival = self._rival(node) if conditional else None
        if rival is not None and (name in table.TO_PYTHON_FLOAT or name in TARGETS):
            code = table.SAME_OBJECT if name in table.TO_PYTHON_FLOAT else TARGETS[name].code
            where = parent if isinstance(parent, ast.Call) and parent.func is node else node
            message = (
                f"`{name}`: no automatic fix: the name is also bound at line {rival[0]} "
                f"(`{rival[1]}`), which is no fallback of apex's import: the binding a use "
                "reaches depends on which of them ran last, and that one may not be apex's"
            )
            self.findings.append(Finding(code, message, where, None))
            return
        if name in table.TO_PYTHON_FLOAT:
            self._to_python_float(node, parent, name, conditional)
            return
        same = next((k for k in table.SAME if name == k or name.startswith(k + ".")), None)
        if same is not None:
            new = table.SAME[same] + name[len(same) :]
            safety = "unsafe" if conditional else "safe"
            fix = self._rename_fix(node, new, safety)
            message = f"`{same}` is `{table.SAME[same]}` under another name"
            self.findings.append(Finding(table.SAME_OBJECT, message, node, fix))
            return
        if name.startswith(table.ELSEWHERE) or name in _SKIP:
            return
        if ".__dict__" in f"{name}.":  # `optimizers.__dict__[name]`, `.__dict__.get(...)`
            name = name.partition(".__dict__")[0]  # (49a, 50a): the module read as a value
        target = TARGETS.get(name)
        members = {  # `apex.optimizers` read as a module value (`getattr(optimizers, name)`)
            k.rpartition(".")[2]: t
            for k, t in TARGETS.items()
            if k.rpartition(".")[0] == name and k.rpartition(".")[2][:1].isupper()
        }
        if target is None and members:  # (physicsnemo's unified_recipe, the 48th review)
            mapped = ", ".join(f"`{k}` -> `{t.new}`" for k, t in sorted(members.items()))
            message = (
                f"`{name}` is read as a module value (line {node.lineno}): which of its names "
                "runs is chosen there at run time, so no fix can pick one; its torch "
                f"counterparts: {mapped} (each with apex's defaults its rule writes out); the "
                "others keep apex (AMP315)"
            )
            self.findings.append(Finding(next(iter(members.values())).code, message, node, None))
            return
        if target is None:
            text = table.no_native(name)
            if text is not None:
                where = parent if isinstance(parent, ast.Call) and parent.func is node else node
                message = _instead(f"`{name}`", text, " has no automatic fix")
                self.findings.append(Finding(table.NO_NATIVE, message, where, None))
            return
        self._target(node, parent, name, target, conditional)

    def _reads_other_import(self, node: ast.Name) -> bool:
        """``node`` sits in the ``except`` of the ``try`` that holds every apex binding of its
        name, after a statement of its own block that imports the name from elsewhere
        (InternEvo's ``except ImportError: from .norm import RMSNormTorch as RMSNorm; return
        RMSNorm``, the 76th review: named apex's class)."""
        apex = [
            b.node
            for b in self.names.bindings(node)
            if any(q.startswith("apex") for q in b.qualified(b.name))
        ]
        handler = next(
            (a for a in self.names.ancestors(node) if isinstance(a, ast.ExceptHandler)), None
        )
        guard = self.names.parent(handler) if handler is not None else None
        if not (
            isinstance(guard, ast.Try)
            and apex
            and all(any(a is s or a in ast.walk(s) for s in guard.body) for a in apex)
        ):
            return False  # (elsewhere the rival is reported: YOLOv1's star import)
        statement = self.names.bound_before(node)
        if isinstance(statement, ast.ImportFrom):
            return bool(statement.level) or (statement.module or "").partition(".")[0] != "apex"
        if isinstance(statement, ast.Import):
            return not any(
                (a.asname or a.name.partition(".")[0]) == node.id
                and a.name.partition(".")[0] == "apex"
                for a in statement.names
            )
        return isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)

    def _initialized_with(self, call: ast.Call) -> int | None:
        """The line of an ``amp.initialize`` that may receive the model ``call`` wraps: the
        call itself as its argument, or the name it is bound to given to one that does not run
        before it in the same function. apex's ``check_models`` rejects torch's wrappers
        there."""
        statement = self.names.parent(call)
        wrapped = (
            {dotted(t) for t in statement.targets} - {None}
            if isinstance(statement, ast.Assign) and statement.value is call
            else set()
        )
        home = function_around(self.names, self.tree, call)
        for node in ast.walk(self.tree):
            if not (
                isinstance(node, ast.Call)
                and self.names.may_be_in(node.func, "apex")
                and "apex.amp.initialize" in self.names.qualified(node.func)
            ):
                continue
            given = [*node.args, *(k.value for k in node.keywords)]
            given += [e for g in given if isinstance(g, ast.List | ast.Tuple) for e in g.elts]
            if any(g is call for g in given):
                return node.lineno
            if not any(dotted(g) in wrapped for g in given):
                continue
            around = function_around(self.names, self.tree, node)
            if around is home and node.lineno < call.lineno:
                continue  # `model, opt = amp.initialize(model, opt)` and then the wrapper
            if self._constructed_before(around, node, home):
                continue
            if self._called_after(home, around, node):
                continue
            return node.lineno
        return None

    def _called_after(self, helper: ast.AST, around: ast.AST, initialize: ast.Call) -> bool:
        """``helper`` is a module-level function (its wrapped model a local of its own) that
        is called only in ``around``, after ``initialize`` and in no loop that holds both
        (BiSeNet's ``set_model_dist(net)`` after ``amp.initialize``): the model it wraps was
        given to ``initialize`` before, never after."""
        if not (
            isinstance(helper, ast.FunctionDef)
            and helper in self.tree.body
            and isinstance(around, ast.FunctionDef | ast.AsyncFunctionDef)
            and not any(
                isinstance(a, ast.For | ast.While) for a in self._between(initialize, around)
            )
        ):
            return False
        uses = [n for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id == helper.name]
        calls = [
            n for n in uses
            if isinstance(self.names.parent(n), ast.Call) and self.names.parent(n).func is n
        ]  # fmt: skip
        return (
            bool(calls)
            and len(calls) == len(uses)
            and all(
                function_around(self.names, self.tree, c) is around
                and c.lineno > initialize.end_lineno
                for c in calls
            )
        )

    def _between(self, node: ast.AST, outer: ast.AST) -> list[ast.AST]:
        """``node``'s ancestors inside ``outer``."""
        found = []
        for ancestor in self.names.ancestors(node):
            if ancestor is outer:
                break
            found.append(ancestor)
        return found

    def _constructed_before(self, init: ast.AST, initialize: ast.Call, later: ast.AST) -> bool:
        """``init`` is a class's ``__init__`` and ``later`` another method of it that
        ``__init__`` does not reach through ``self`` calls before ``initialize``: on any
        instance that ran before (EfficientSegmentation initializes in ``__init__``, wraps in
        ``do_train``)."""
        if not (
            isinstance(init, ast.FunctionDef)
            and init.name == "__init__"
            and isinstance(later, ast.FunctionDef | ast.AsyncFunctionDef)
            and later is not init
        ):
            return False
        owner = self.names.parent(init)
        if not isinstance(owner, ast.ClassDef) or self.names.parent(later) is not owner:
            return False
        methods = {
            m.name: m for m in owner.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        reached, todo = {"__init__"}, [init]
        while todo:
            method = todo.pop()
            todo_is_init = method is init and not any(
                isinstance(a, ast.For | ast.While) for a in self._between(initialize, init)
            )
            for n in ast.walk(method):
                if (
                    isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name)
                    and n.value.id == "self"
                    and n.attr in methods
                    and n.attr not in reached
                    and not (todo_is_init and n.lineno > initialize.end_lineno)
                ):
                    reached.add(n.attr)
                    todo.append(methods[n.attr])
        return later.name not in reached

    def _report(self, target: Target, node: ast.AST, message: str, fix: Fix | None) -> None:
        self.findings.append(Finding(target.code, message, node, fix))

    def _unused_imports(self) -> None:
        """An import of an apex name that nothing reads (what is left once its uses are
        migrated, or never used: an unused `multi_tensor_applier`); see ``unused_import``."""
        for binding in self.names.imports():
            stmt, alias = binding.node, binding.alias
            if isinstance(stmt, ast.Import) and alias is not None and alias.asname:
                full = alias.name  # `import apex.optimizers as apex_optim`
            elif not isinstance(stmt, ast.ImportFrom) or alias is None or stmt.level:
                continue
            else:
                full = f"{stmt.module}.{alias.name}"
            target = TARGETS.get(full)
            code = table.MODULES.get(full) or (target.code if target else table.SAME_OBJECT)
            known = target or full in table.SAME or full in table.TO_PYTHON_FLOAT
            if not known and full not in table.MODULES and table.no_native(full) is not None:
                known, code = True, table.NO_NATIVE  # unused, it only ties the file to apex
            if not known and full not in table.MODULES:
                continue
            if self._consumed and any(self._inside(stmt, c) for c in self._consumed):
                continue
            found = unused_import(
                self.names, stmt, alias, full, code, self.source.path, self.source,
                self._dead_imports.get(binding.name),
            )  # fmt: skip
            if found is not None and found.fix is None and target is not None:
                found = self._reexport(found, stmt, binding.name, target)
            if found is not None:
                self.findings.append(found)

    def _reexport(self, found: Finding, stmt: ast.AST, name: str, target: Target) -> Finding:
        """A module that only re-exports FusedLayerNorm to the others (FlagPerf's one-line
        `layers/layernorm.py`): its import binds the name to torch's class instead."""
        users = self._importers(name)
        if not users:
            return found
        try:
            fix, bound = self._rebind(stmt, name, target)
        except NoFix:
            return found
        message = (
            f"`{name}` is not read in this file, but other modules take it from this one "
            f"({self._shown(users)}): the import binds the name to torch's class (`{bound}`), "
            f"so their uses get it: {target.accepts}; their uses are not read here (a "
            "`memory_efficient=` argument raises in torch, a type test matches every torch "
            "LayerNorm)"
        )
        return Finding(found.code, message, found.node, fix)

    def _importers(self, name: str) -> list[tuple[str, int, str]] | None:
        """The other modules that use ``name`` from this one, imports included (cached)."""
        if name not in self._users:
            self._users[name] = users_on_disk(self.source.path, [name], imports=True)
        return self._users[name]

    def _shown(self, users: list[tuple[str, int, str]]) -> str:
        folder = os.path.dirname(os.path.abspath(self.source.path))
        shown = ", ".join(f"{os.path.relpath(f, folder)}:{line}" for f, line, _ in users[:3])
        return shown + (f" and {len(users) - 3} more" if len(users) > 3 else "")


def _rebinding(stmt: ast.stmt) -> str | None:
    """The one name ``stmt`` binds where running it calls nothing (no code of the file's may
    read the name before it is bound): ``X = torch.nn.LayerNorm``, or a ``class X(nn.Module)``
    whose bases, decorators and statements besides its methods call nothing (WebQA's
    ``BertLayerNorm`` after the guarded apex import, the 81st review)."""
    if isinstance(stmt, ast.Assign):
        target = stmt.targets[0] if len(stmt.targets) == 1 else None
        name = target.id if isinstance(target, ast.Name) else None
    elif isinstance(stmt, ast.ClassDef):
        name = stmt.name
    else:
        return None
    if name is None or any(isinstance(n, ast.Call | ast.NamedExpr) for n in _evaluated(stmt)):
        return None
    return name


def _evaluated(stmt: ast.Assign | ast.ClassDef) -> list[ast.AST]:
    """The nodes ``stmt`` runs when it runs (a class's methods' bodies run later)."""
    if isinstance(stmt, ast.Assign):
        return list(ast.walk(stmt.value))
    parts = [*stmt.bases, *stmt.keywords, *stmt.decorator_list]
    for inner in stmt.body:
        if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = inner.args
            parts += [*inner.decorator_list, *arguments.defaults, *arguments.kw_defaults]
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
            parts += [a.annotation for a in every]  # (`*shape: FusedLayerNorm`: the 83rd review)
            parts.append(inner.returns)
        else:
            parts.append(inner)
    return [n for part in parts if part is not None for n in ast.walk(part)]


def _table_by_name(call: ast.Call) -> bool:
    """``getattr(sys, "modules")`` or ``vars(sys)``: the module table under another spelling."""
    func = call.func.id if isinstance(call.func, ast.Name) else None
    first = call.args[0] if call.args else None
    return (
        func in ("getattr", "vars")
        and isinstance(first, ast.Name)
        and first.id == "sys"
        and (
            func == "vars"
            or (
                len(call.args) > 1
                and isinstance(call.args[1], ast.Constant)
                and call.args[1].value == "modules"
            )
        )
    )
