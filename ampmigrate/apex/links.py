"""apex O1 across modules: ``amp.initialize`` in one file, the amp calls in module-level functions
of another: the training function that scales the loss (maskrcnn-benchmark: ``tools/train_net.py``
initializes and calls ``do_train`` from ``engine/trainer.py``), or checkpoint helpers that save
and restore ``amp.state_dict()`` for a script that scales the loss itself.

Neither file can be rewritten alone: those functions need a ``scaler`` parameter, and changing a
signature whose callers are not updated breaks the program. So when a run holds them, this
pre-pass (stdlib ``ast``, in the main process, before the workers start) links them: each
initializing file passes ``scaler=scaler`` at its calls, the functions take the parameter. A
link is made only where every use of the functions in the run is one of those calls; the engine
then checks that every file was rewritten (or every one only offered) and otherwise re-runs them
with the link ``broken``, so each refuses with the reason.
"""

from __future__ import annotations

import ast
import collections
import functools
import itertools
import os
import re
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

from ampmigrate.engine.names import Names
from ampmigrate.scalerflow import _module_paths, _stem

APEX = "apex.amp."


@dataclass(frozen=True)
class Delegated:
    """What a caller needs of a helper that scales and leaves the step to it: the helper's
    loss and optimizer parameters (name, position; -1 keyword only), whether every path
    through it backpropagates, and the terms of its tests that read a parameter (the text,
    the parameter, its position): the callers show each on where their GradScaler is."""

    loss: tuple[str, int]
    optimizer: tuple[str, int]
    surely: bool
    switch: tuple[tuple[str, str, int], ...]
    defaults: tuple[tuple[str, str], ...]  # those parameters' defaults, as written


@dataclass(frozen=True)
class Link:
    """A training function and every file of the run that initializes amp and calls it: a
    family of scripts may share one ``train``. All are rewritten together, or none."""

    callers: tuple[str, ...]  # absolute paths of the files that call ``amp.initialize``
    callee: str  # absolute path of the file whose functions make the other amp calls
    functions: tuple[str, ...] = ()  # those functions, each taking a ``scaler`` parameter
    trains: str | None = None  # the one of them that scales the loss (None: checkpoint helpers)
    model: str = ""  # the parameter of ``trains`` that receives the initialized model
    optimizer: str = ""  # ... and the optimizer
    # per caller: its calls of ``functions`` after ``initialize``, and how it spells them
    # (``utils.save``); empty for a hook or a kept handle, which pass nothing
    calls: tuple[int, ...] = ()
    spellings: tuple[tuple[str, ...], ...] = ()
    broken: str | None = None  # why the files are not rewritten together
    broken_by: str | None = None  # the absolute path of the file that refused, if one did
    # a runner hook (mmcv style): the class of the callee whose methods scale the loss on a
    # runner's optimizer, driven by a runner the callers hand the initialized model to; the
    # hook keeps its own GradScaler, the callers only cast (None: functions take a scaler)
    hook: str | None = None
    # apex's module kept on an object (`args.amp = amp`): the attribute; every file of the link
    # keeps it and the functions call through it (each file plans its own store, the link
    # only makes them all rewritten, or none)
    kept: str | None = None
    # a hook link's amp state, saved and restored by a runner class (mmcv style) that reaches
    # the hook's GradScaler through its hooks: the files of the runner class and of the
    # checkpoint functions its methods call, each function taking a ``scaler`` (``helpers``),
    # called as ``helper_spellings`` there
    state: tuple[str, ...] = ()
    # apex's state kept as module state by the callee, whose module-level function (the one
    # in ``functions``) initializes and returns the models at these places of its tuple; the
    # callers import that function, scale the loss with what it returns and read the
    # GradScaler as ``<module>.scaler`` (the module as ``spellings`` gives it, per caller)
    shared: tuple[int, ...] = ()
    switch: tuple[tuple[str, int], ...] = ()  # the function's parameters its `if`s test, and
    # where each is given (-1: by keyword only): initialize runs only where they hold
    runner: str | None = None
    helpers: tuple[str, ...] = ()
    helper_spellings: tuple[str, ...] = ()
    # several callees: one link per callee (its functions, training function, parameters),
    # each with the same callers; this link's ``calls`` and ``spellings`` are their sums
    parts: tuple[Link, ...] = ()
    # a class family (nnU-Net's trainers): the callers' class of this name initializes amp in
    # its method ``functions[0]``, the callee's classes derived from it scale with apex; the
    # GradScaler is the object's, ``self.scaler``, and ``models`` are the initialized models
    # as the object holds them (``self.network``)
    family: str | None = None
    models: tuple[str, ...] = ()
    # a helper that scales a loss it is given and leaves the step to its callers (57a's
    # `loss_backward(loss, optimizer)` in a utilities module): each caller's call is its
    # scaled backward, the caller steps and casts
    delegated: Delegated | None = None
    backs: tuple[tuple[str, ...], ...] = ()  # per caller: how it spells that helper

    @property
    def named(self) -> str:
        if self.family is not None:
            return f"the classes derived from `{self.family}`"
        if self.hook is not None:
            return f"the hook class `{self.hook}`"
        return _listed([f"`{f}`" for f in self.functions])

    @property
    def files(self) -> tuple[str, ...]:
        callees = [p.callee for p in self.parts] or [self.callee]
        return tuple(dict.fromkeys((*self.callers, *callees, *self.state)))

    def role(self, path: str) -> str | None:
        path = os.path.abspath(path)
        if path in self.state:
            return "state"
        if path in self.callers:
            return "caller"
        return "callee" if path in self.files else None

    def seen_from(self, path: str) -> Link:
        """The link as the file ``path`` plans with it: a caller sees itself and the callee
        (its ``calls`` and ``spellings`` are its own), the callee sees every caller."""
        path = os.path.abspath(path)
        part = next((p for p in self.parts if p.callee == path), None)
        if part is not None:  # (a part sees the whole's state: broken by any file of it)
            return replace(part, broken=self.broken, broken_by=self.broken_by)
        if path not in self.callers or self.kept is not None:
            return self
        i = self.callers.index(path)
        return replace(
            self,
            callers=(path,),
            calls=self.calls[i : i + 1],
            spellings=self.spellings[i : i + 1],
            backs=self.backs[i : i + 1],
        )

    def other(self, role: str, path: str | None = None) -> str:
        """The other side, as messages show it (relative to the folder holding them all); for
        a kept handle, every file but ``path``."""
        if self.kept is not None or (self.state and path):
            mine = os.path.abspath(path) if path else None
            return _listed([self.shown(f) for f in self.files if f != mine] or ["."])
        if role == "caller":
            return _listed([self.shown(c) for c in self.files if c not in self.callers])
        return _listed([self.shown(c) for c in self.callers])

    def shown(self, path: str) -> str:
        return shown_among(self.files, path)


def shown_among(files: tuple[str, ...], path: str) -> str:
    """``path`` as messages show it among ``files``: relative to the folder holding them all."""
    return os.path.relpath(os.path.abspath(path), os.path.commonpath(files))


def _listed(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``: how messages list files and functions."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _apex_roots(names: Names) -> dict[str, ast.Import | ast.ImportFrom]:
    """The names an ``apex`` import binds (the root of a dotted one), each with its first
    import statement."""
    roots: dict[str, ast.Import | ast.ImportFrom] = {}
    for binding in names.imports():
        stmt, alias = binding.node, binding.alias
        module = alias.name if isinstance(stmt, ast.Import) else stmt.module or ""
        if module == "apex" or module.startswith("apex."):
            roots.setdefault(binding.name.partition(".")[0], stmt)
    return roots


def apex_calls(names: Names) -> list[ast.Call]:
    """The calls whose callee resolves to ``apex.amp.*``; only calls rooted at a name an
    ``apex`` import binds are resolved."""
    return [node for node in _apex_uses(names) if isinstance(node, ast.Call)]


def stored_calls(tree: ast.Module, names: Names) -> list[ast.Call]:
    """The apex calls made through apex's module kept on an object in this file (``self.amp =
    amp``), where one of them is ``initialize`` (RetinaNet: ``self.amp.initialize(...)``): the
    planner takes them as apex's own. Empty: not so."""
    stored = _stored_handles(names, _apex_roots(names), plain=True)
    through = [
        n for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and ast.unparse(n.func.value) in stored and n.func.attr in _MEMBERS
    ]  # fmt: skip
    blocks = {  # where each is kept: the planner follows a store in the block of `initialize`
        id(holder)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Name)
        and any(ast.unparse(t) in stored for t in n.targets)
        and (holder := names.parent(n)) is not None
    }  # fmt: skip
    initializes = [
        c for c in through
        if c.func.attr == "initialize" and id(names.parent(_statement_of(c, names))) in blocks
    ]  # fmt: skip
    scaled = any(c.func.attr != "initialize" for c in through)  # (else apex only casts)
    return through if initializes and scaled else []


def _statement_of(node: ast.AST, names: Names) -> ast.AST:
    while not isinstance(node, ast.stmt):
        node = names.parent(node)
    return node


def apex_references(names: Names) -> list[ast.Attribute]:
    """The members of ``apex.amp`` read but not called here: a bare decorator
    (``@amp.float_function``) or an alias (``float_function = amp.float_function``), whose
    calls elsewhere are apex's."""
    return [node for node in _apex_uses(names) if isinstance(node, ast.Attribute)]


def _apex_uses(names: Names) -> list[ast.Call | ast.Attribute]:
    """Each ``apex.amp.X`` rooted at a name an ``apex`` import binds: the call when it is
    called, else the attribute itself."""
    roots = _apex_roots(names)
    uses: list[ast.Call | ast.Attribute] = []
    for root in sorted(roots):  # from each use of the name up its attribute chain: no walk
        for node in names.spelled(root):
            if not isinstance(node, ast.Name) or node.id != root:
                continue
            chain, parent = node, names.parent(node)
            while isinstance(parent, ast.Attribute) and parent.value is chain:
                chain, parent = parent, names.parent(parent)
            qualified = [q for q in names.qualified(chain) if q.startswith(APEX)]
            if not qualified:
                continue
            if isinstance(parent, ast.Call) and parent.func is chain:
                uses.append(parent)
            elif isinstance(chain, ast.Attribute):
                uses.append(chain)
    return uses


_AMP = APEX.rstrip(".")  # the module itself
_MEMBERS = {"scale_loss", "master_params", "state_dict", "load_state_dict", "initialize"}


def _published(tree: ast.Module, name: str) -> int | None:
    """The line of ``globals()["name"] = ...`` (or ``globals().update(name=...)``) in ``tree``:
    a module global bound by a store into the module's dict (None: none)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Subscript)
                    and _globals_call(target.value)
                    and isinstance(target.slice, ast.Constant)
                    and target.slice.value == name
                ):
                    return node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "update"
            and _globals_call(node.func.value)
            and any(k.arg in (name, None) for k in node.keywords)
        ):
            return node.lineno
    return None


def _globals_call(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "globals"
        and not node.args
    )


def _handed_in(holder: ast.Name, names: Names) -> str | None:
    """How ``holder`` got its value when a caller hands it in: a parameter, or a name bound
    from a parameter's contents (``amp, opt = handles.values()``); None otherwise."""
    bindings = names.bindings(holder)
    if len(bindings) != 1:
        return None
    node, where = bindings[0].node, names.scope(holder)
    name = getattr(where, "name", None)
    if isinstance(node, ast.arg):
        return f"a parameter of `{name}`"
    statement = names.parent(node)
    while statement is not None and not isinstance(statement, ast.stmt):
        statement = names.parent(statement)
    params = {a.arg for a in ast.walk(where.args) if isinstance(a, ast.arg)} if name else set()
    if isinstance(statement, ast.Assign) and any(
        isinstance(n, ast.Name) and n.id in params for n in ast.walk(statement.value)
    ):
        return f"bound at line {statement.lineno} from `{ast.unparse(statement.value)}`"
    return None


def stray_calls(
    tree: ast.Module, names: Names, path: str | None = None
) -> list[tuple[ast.AST, str]]:
    """apex amp calls that do not resolve to apex, so no other check sees them, each with what
    it is: ``amp.scale_loss`` where the apex import binds ``amp`` only inside another function
    (NameError as written), ``self.amp.scale_loss`` through an attribute that holds apex's
    module, set in another file, or ``amp.scale_loss`` through what a function that returns
    apex's module gave (``amp = get_amp(fp16)``, that function here or imported from a module
    on disk next to ``path``); and such a function's own ``return amp``."""
    found: list[tuple[ast.AST, str]] = []
    roots = _apex_roots(names)  # (an import binding always has its alias)
    stored = _stored_handles(names, roots)
    # `amp = apex.amp` (after `import apex`), `mod = amp`: a name bound to apex's module by
    # an assignment, which no import resolution reaches (the 46th review: no finding at all)
    aliases = {
        n.targets[0].id: (n.lineno, ast.unparse(n.value))
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name) and n.targets[0].id not in roots
        and any(q == APEX.rstrip(".") for q in names.qualified(n.value))
    } if roots else {}  # fmt: skip
    for node in ast.walk(tree):
        if isinstance(node, ast.Return) and roots:
            if _hands_out(node, names):
                function = next(
                    (a.name for a in names.ancestors(node) if isinstance(a, ast.FunctionDef)),
                    "module-level code",
                )
                found.append((node, (
                    f"line {node.lineno}: `{function}` returns apex's amp module: the code "
                    "that calls it uses apex amp through the value it returns, which the "
                    f"rewrite does not follow; hand a GradScaler from `{function}` instead "
                    "and migrate its callers with it, by hand"
                )))  # fmt: skip
            continue
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MEMBERS
        ):
            continue
        holder = node.func.value
        shown = ast.unparse(node.func)
        function = next(
            (a.name for a in names.ancestors(node) if isinstance(a, ast.FunctionDef)), None
        )
        inside = f"`{function}`" if function else "module-level code"
        if isinstance(holder, ast.Name) and holder.id in aliases:
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through `{holder.id}`, bound to "
                f"`{aliases[holder.id][1]}` at line {aliases[holder.id][0]}, which the rewrite "
                f"does not follow: write `from apex import amp` (or migrate it by hand) first"
            )))  # fmt: skip
            continue
        if (
            isinstance(holder, ast.Name)
            and holder.id in roots
            and not names.bindings(holder)
            and (published := _published(tree, holder.id)) is not None
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` reads `{holder.id}`, which the apex import at "
                f"line {roots[holder.id].lineno} binds inside another function and line "
                f"{published} makes a module global through `globals()`, which the rewrite "
                "does not follow: bind it with a module-level import or `global` first, or "
                "migrate by hand"
            )))  # fmt: skip
        elif isinstance(holder, ast.Name) and holder.id in roots and not names.bindings(holder):
            found.append((node, (
                f"line {node.lineno}: `{shown}` reads `{holder.id}`, which the apex import at "
                f"line {roots[holder.id].lineno} binds only inside another function, not in "
                f"{inside}: that call raises NameError, so the original's mixed-precision path "
                f"cannot run as written; import `{holder.id}` at module level (or fix the "
                "original) before migrating"
            )))  # fmt: skip
        elif isinstance(holder, ast.Name) and (given := _given_by(holder, names, path)):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through `{holder.id}`, which "
                f"holds what {given} returns: apex's amp module, which the rewrite does not "
                "follow through a function's return; hand a GradScaler there instead and "
                "migrate both, by hand"
            )))  # fmt: skip
        elif (
            isinstance(holder, ast.Name)
            and path
            and (exporter := _reexported(holder, names, tree, path))
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through `{holder.id}`, which "
                f"this file takes from {exporter} (it imports apex's amp there): the rewrite "
                "does not follow apex's amp through another module; import it from apex in "
                f"this file (`from apex import amp`) and run again, or migrate it by hand"
            )))  # fmt: skip
        elif (
            isinstance(holder, ast.Name)
            and holder.id == "amp"
            and node.func.attr in ("scale_loss", "master_params", "initialize")
            and not roots
            and not names.bindings(holder)
            and not _star_binds(tree, path, "amp")
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` reads `amp`, which nothing in this file binds "
                "(no apex import, no star import that gives it): that call raises NameError, "
                "so the "
                "original's mixed-precision path cannot run as written; fix the original "
                "(import apex's amp, or take the GradScaler that replaces it) before migrating"
            )))  # fmt: skip
        elif isinstance(holder, ast.Name) and (loaded := _imported_by_name(holder, names)):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through `{holder.id}`, which "
                f"`importlib.import_module({loaded!r})` gives: the rewrite follows only import "
                f"statements; write `from apex import amp` (or migrate it by hand) first"
            )))  # fmt: skip
        elif (
            isinstance(holder, ast.Attribute)
            and holder.attr == "amp"
            and isinstance(holder.value, ast.Name)
            and (loaded := _imported_by_name(holder.value, names)) == "apex"
        ):  # (Young: `apex = importlib.import_module("apex")` in the function)
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through `{holder.value.id}`, "
                f"which `importlib.import_module({loaded!r})` gives: the rewrite follows only "
                "import statements; write `import apex` or `from apex import amp` (or migrate "
                "it by hand) first"
            )))  # fmt: skip
        elif isinstance(holder, ast.Attribute) and (given := _loaded_by_helper(holder, names)):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through "
                f"`{ast.unparse(holder)}`, whose `{given[0]}` is what `{given[1]}(...)` (line "
                f"{given[2]}) returns: `importlib.import_module({given[3]!r})`; the rewrite "
                "follows only import statements; write `import apex` or `from apex import amp` "
                "(or migrate it by hand) first"
            )))  # fmt: skip
        elif isinstance(holder, ast.Attribute) and (loaded := _imported_into(holder, tree, names)):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through "
                f"`{ast.unparse(holder)}`, which `importlib.import_module({loaded[0]!r})` gives "
                f"at line {loaded[1]}: the rewrite follows only import statements; write "
                "`from apex import amp` (or migrate it by hand) first"
            )))  # fmt: skip
        elif isinstance(holder, ast.Attribute) and ast.unparse(holder) in stored:
            called = {
                c.func.attr
                for c in ast.walk(tree)
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                and ast.unparse(c.func.value) in (ast.unparse(holder), "amp")
            }  # fmt: skip
            remedy = (
                "keep a GradScaler there instead "
                f"(`{ast.unparse(holder.value)}.scaler`) and migrate its uses, by hand"
                if called - {"initialize"}
                else "nothing in this file scales a loss through it (only `initialize` is "
                "called), so apex only casts here (O1's autocast, no loss scaling): delete "
                "the `initialize` and run the forwards under "
                '`torch.amp.autocast("cuda", dtype=torch.float16)`, with no GradScaler, by '
                "hand (if another file scales through it, migrate the two together)"
            )
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp through "
                f"`{ast.unparse(holder)}`, which holds apex's module (stored at line "
                f"{stored[ast.unparse(holder)]}); the rewrite does not follow apex's calls "
                f"through a stored module here: {remedy}"
            )))  # fmt: skip
        elif (
            not roots
            and node.func.attr in ("scale_loss", "master_params", "initialize")
            and isinstance(holder, ast.Attribute)
            and holder.attr == "amp"
            and isinstance(holder.value, ast.Name)
            and not names.bindings(holder.value)
            and not _star_imports(tree)
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` reads `{holder.value.id}`, which nothing in "
                "this file binds (no import of it, no star import): that call raises "
                "NameError, so the original's "
                "mixed-precision path cannot run as written; fix the original before migrating"
            )))  # fmt: skip
        elif (
            not roots
            and node.func.attr in ("scale_loss", "master_params")
            and isinstance(holder, ast.Attribute)
            and (holder.attr in ("amp", "apex") or "amp_handle" in holder.attr)
        ):  # (SR-Stereo's subclasses: `self.amp_handle = amp.init(half)` in the base's module;
            # rtm3d's solver: `self.apex`, apex's amp module handed to its constructor)
            what = (
                "apex's module" if holder.attr in ("amp", "apex")
                else "apex amp (its module, or the handle the pre-2019 `amp.init()` returns)"
            )  # fmt: skip
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp's `{node.func.attr}` through "
                f"`{ast.unparse(holder)}`, which can hold {what} only where another "
                "file keeps it there (apex is not imported here); migrate this file with the "
                "one that keeps it (a GradScaler kept there instead, "
                f"`{ast.unparse(holder.value)}.scaler`), by hand"
            )))  # fmt: skip
        elif (
            isinstance(holder, ast.Name)
            and holder.id not in roots  # (a file that imports other apex names: Hongik's)
            and node.func.attr in ("scale_loss", "master_params")
            and "amp" in holder.id.lower()
            and (given := _handed_in(holder, names))
        ):
            found.append((node, (
                f"line {node.lineno}: `{shown}` calls apex amp's `{node.func.attr}` through "
                f"`{holder.id}`, {given}: it holds apex's module only where a caller hands it "
                f"in ({'no import here binds it' if roots else 'apex is not imported here'}), "
                "which the rewrite does not follow; migrate this code with the caller that "
                "hands it (a GradScaler handed in instead: `scaler.scale(loss).backward()`, "
                "`scaler.step(optimizer)` + `scaler.update()`), by hand"
            )))  # fmt: skip
    private = {
        name: stmt
        for name, stmt in roots.items()
        if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").startswith("apex.amp.")
    }  # `from apex.amp._amp_state import _amp_state`: apex's internals, read as attributes
    for name, stmt in sorted(private.items()):
        use = next(
            (n for n in names.spelled(name) if isinstance(n, ast.Name) and n.id == name), None
        )
        if use is not None and not found:
            found.append((use, (
                f"line {use.lineno}: `{name}` (from `{stmt.module}`, imported at line "
                f"{stmt.lineno}) is apex amp's internal state, with no torch.amp counterpart "
                "(a GradScaler's `get_scale()`/`state_dict()` hold its loss scale): migrate "
                "this use by hand"
            )))  # fmt: skip
    return sorted(found, key=lambda f: (f[0].lineno, f[0].col_offset))  # (walked breadth-first)


def _bound_calls(holder: ast.Name, names: Names) -> Iterator[ast.Call]:
    """The calls whose results bind ``holder`` (``holder = f(...)``)."""
    for binding in names.bindings(holder):
        target = binding.node
        assign = names.parent(target) if isinstance(target, ast.Name) else None
        if isinstance(assign, ast.Assign) and isinstance(assign.value, ast.Call):
            yield assign.value


def _imported_by_name(holder: ast.Name, names: Names) -> str | None:
    """The apex module that ``holder`` is bound to by ``importlib.import_module("apex...")``
    (None: not so bound)."""
    for call in _bound_calls(holder, names):
        if (
            "importlib.import_module" in names.qualified(call.func)
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
            and call.args[0].value.split(".")[0] == "apex"
        ):
            return call.args[0].value
    return None


def _loaded_by_helper(holder: ast.Attribute, names: Names) -> tuple[str, str, int, str] | None:
    """``apex.amp`` whose ``apex`` is bound by ``apex = get_apex()``, a function of this file
    that returns ``importlib.import_module("apex...")``, or a name bound to it (Young's adapter
    module): (the name,
    the function, its line, the module loaded); None: not so."""
    root = holder
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return None
    for call in _bound_calls(root, names):
        if not isinstance(call.func, ast.Name):
            continue
        for helper in names.bindings(call.func):
            function = helper.node
            if not isinstance(function, ast.FunctionDef):
                continue
            for node in ast.walk(function):
                value = node.value if isinstance(node, ast.Return) else None
                if isinstance(value, ast.Name):  # `apex = import_module("apex")`, returned
                    value = next(_bound_calls(value, names), None)
                if (
                    isinstance(value, ast.Call)
                    and "importlib.import_module" in names.qualified(value.func)
                    and value.args
                    and isinstance(value.args[0], ast.Constant)
                    and isinstance(value.args[0].value, str)
                    and value.args[0].value.split(".")[0] == "apex"
                ):
                    return root.id, function.name, function.lineno, value.args[0].value
    return None


def _imported_into(holder: ast.Attribute, tree: ast.Module, names: Names) -> tuple[str, int] | None:
    """The apex module that ``importlib.import_module("apex...")`` stores in the attribute
    ``holder`` spells (``self.amp = importlib.import_module("apex.amp")``), and the line."""
    spelled = ast.unparse(holder)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and ast.unparse(node.targets[0]) == spelled
            and isinstance(call := node.value, ast.Call)
            and "importlib.import_module" in names.qualified(call.func)
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
            and call.args[0].value.split(".")[0] == "apex"
        ):
            return call.args[0].value, node.lineno
    return None


def _reexported(holder: ast.Name, names: Names, tree: ast.Module, path: str) -> str | None:
    """Where ``holder`` comes from when it is apex's amp taken from a project module on disk
    (``from pkg.utils import amp``, ``from .utils import *`` where utils imports it from
    apex): that module's path, relative to ``path``'s folder (None: not so)."""
    bindings = names.bindings(holder)
    imports = [
        (b.node, b.alias.name) for b in bindings
        if isinstance(b.node, ast.ImportFrom) and b.alias is not None
    ]  # fmt: skip
    if bindings and len(imports) != len(bindings):
        return None
    if not bindings:
        imports = [
            (n, holder.id) for n in tree.body
            if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
        ]  # fmt: skip
    for node, name in imports:
        if node.module and node.module.partition(".")[0] == "apex" and not node.level:
            continue
        found = _apex_binding(path, node, name)
        if found is not None:
            return os.path.relpath(found, os.path.dirname(os.path.abspath(path)))
    return None


def _from_module(path: str, node: ast.ImportFrom) -> tuple[str, ast.Module] | None:
    """The file on disk that ``from m import ...`` (or ``from . import ...``) in ``path``
    reads, and its tree (None: not on disk, or it does not parse)."""
    target = (
        _module_file(path, node.level, node.module) if node.module
        else _package_init(path, node.level)
    )  # fmt: skip
    if target is None:
        return None
    try:
        return target, ast.parse(_read(target))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _apex_binding(path: str, node: ast.ImportFrom, name: str, depth: int = 0) -> str | None:
    """The module file that binds ``name`` to apex's amp for ``from m import name`` (or
    ``from m import *``) in ``path``, following such imports through modules on disk."""
    found = _from_module(path, node) if depth <= 8 else None
    if found is None:
        return None
    target, tree = found
    for statement in _module_level(tree.body):
        if isinstance(statement, ast.Import):
            if any(a.name == "apex.amp" and a.asname == name for a in statement.names):
                return target
        elif isinstance(statement, ast.ImportFrom):
            apex = (statement.module or "").partition(".")[0] == "apex" and not statement.level
            for alias in statement.names:
                if alias.name == "*" and not apex:
                    found = _apex_binding(target, statement, name, depth + 1)
                elif (alias.asname or alias.name) != name:
                    continue
                elif apex:
                    found = target if f"{statement.module}.{alias.name}" == "apex.amp" else None
                else:
                    found = _apex_binding(target, statement, alias.name, depth + 1)
                if found is not None:
                    return found
    return None


def _star_binds(tree: ast.Module, path: str | None, name: str) -> bool:
    """A star import of ``tree`` may bind ``name``: its module is not on disk next to
    ``path``, or its text spells the name (THETA's ``from deepxml.modules import *``, whose
    module never mentions ``amp``, binds no ``amp``)."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)):
            continue
        found = next(
            (p for p in _module_paths(path, node.level, node.module or "") if os.path.isfile(p)),
            None,
        ) if path and node.module else None  # fmt: skip
        text = _read(found) if found is not None else b""
        if found is None or b"import *" in text or re.search(rb"\b%s\b" % name.encode(), text):
            return True
    return False


def _star_imports(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
        for n in ast.walk(tree)
    )


def _stored_handles(
    names: Names, roots: dict[str, ast.stmt], plain: bool = False
) -> dict[str, int]:
    """Where apex's module is stored on an object (``self.amp = amp``; unless ``plain``, also
    ``amp if fp16 else None``, ``fp16 and amp``, ``apex.amp``, a place of a tuple): the target
    as written, and the line of its first store."""
    stored: dict[str, int] = {}
    for root in roots:
        for node in names.spelled(root):
            if not isinstance(node, ast.Name):
                continue
            value, assign = node, names.parent(node)
            position = None
            if not plain:
                if isinstance(assign, ast.Attribute) and assign.attr == "amp":  # `apex.amp`
                    value, assign = assign, names.parent(assign)
                while (
                    isinstance(assign, ast.IfExp) and value in (assign.body, assign.orelse)
                ) or isinstance(assign, ast.BoolOp):
                    value, assign = assign, names.parent(assign)
                if isinstance(assign, ast.Tuple | ast.List) and isinstance(
                    names.parent(assign), ast.Assign
                ):
                    position = assign.elts.index(value)
                    value, assign = assign, names.parent(assign)
            if isinstance(assign, ast.AnnAssign) and assign.value is value:
                targets = [assign.target]  # (`self.amp: object = amp`)
            elif isinstance(assign, ast.Assign) and assign.value is value:
                targets = assign.targets
            else:
                continue
            for target in targets:
                if position is not None:
                    elements = target.elts if isinstance(target, ast.Tuple | ast.List) else []
                    target = elements[position] if len(elements) == len(value.elts) else None
                if isinstance(target, ast.Attribute):
                    stored.setdefault(ast.unparse(target), assign.lineno)
    return stored


def _given_by(holder: ast.Name, names: Names, path: str | None) -> str | None:
    """``holder`` is bound by ``holder = helper(...)`` where ``helper`` returns apex's amp
    module (defined in this file, or imported from a module on disk): how to name it (None:
    not so)."""
    for call in _bound_calls(holder, names):
        if not isinstance(call.func, ast.Name):
            continue
        for helper in names.bindings(call.func):
            if isinstance(helper.node, ast.FunctionDef) and _returns_apex(helper.node, names):
                return f"`{call.func.id}(...)` (line {helper.node.lineno})"
            imported = helper.node
            if not (isinstance(imported, ast.ImportFrom) and helper.alias and path):
                continue
            found = _module_file(path, imported.level, imported.module or "")
            other = _parsed(found, _read(found)) if found is not None else None
            defs = _defs(other.tree, helper.alias.name) if other is not None else []
            if defs and _returns_apex(defs[0], other.names):
                shown = os.path.relpath(found, os.path.dirname(os.path.abspath(path)))
                return f"`{call.func.id}(...)` ({shown}:{defs[0].lineno})"
    return None


def _hands_out(node: ast.Return, names: Names) -> bool:
    """``return amp``: the value returned is apex's amp module itself."""
    return node.value is not None and _AMP in names.qualified(node.value)


def _returns_apex(function: ast.FunctionDef, names: Names) -> bool:
    return any(isinstance(n, ast.Return) and _hands_out(n, names) for n in ast.walk(function))


def _module_file(path: str, dots: int, module: str) -> str | None:
    """The file on disk that ``from <dots><module> import ...`` in ``path`` loads."""
    return next((p for p in _module_paths(path, dots, module) if os.path.isfile(p)), None)


def module_function(path: str, qualified: str) -> ast.FunctionDef | None:
    """The function that ``qualified`` names as the file at ``path`` imports it
    (``pkg.module.name``, ``module.Class.method``, with leading dots for a relative import),
    where that module is a file on disk; None elsewhere."""
    found = module_definition(path, qualified)
    return found[1] if found is not None and isinstance(found[1], ast.FunctionDef) else None


def module_definition(
    path: str, qualified: str
) -> tuple[str, ast.FunctionDef | ast.ClassDef] | None:
    """The file and the function or class that ``qualified`` names (see
    :func:`module_function`)."""
    dots = len(qualified) - len(qualified.lstrip("."))
    parts = qualified[dots:].split(".")
    for i in range(len(parts) - 1, 0, -1):
        found = _module_file(path, dots, ".".join(parts[:i]))
        if found is None:
            continue
        tree = module_tree(found)
        body: list[ast.stmt] = tree.body if tree is not None else []
        node: ast.AST | None = None
        for part in parts[i:]:
            node = next(
                (s for s in body
                 if isinstance(s, ast.FunctionDef | ast.ClassDef) and s.name == part),
                None,
            )  # fmt: skip
            if node is None:
                return None
            body = node.body
        return (found, node) if isinstance(node, ast.FunctionDef | ast.ClassDef) else None
    return None


@functools.lru_cache(maxsize=64)
def _tree_of(path: str, mtime: int, size: int) -> ast.Module | None:
    """The module at ``path`` parsed, once per version of the file."""
    try:
        with open(path, "rb") as handle:
            return ast.parse(handle.read(), path)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def module_tree(path: str) -> ast.Module | None:
    """The module at ``path`` parsed, once per version of it (None: gone or unparsable)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return _tree_of(path, stat.st_mtime_ns, stat.st_size)


def _defs(tree: ast.Module, name: str) -> list[ast.FunctionDef]:
    """The module-level functions of ``tree`` named ``name``."""
    return [d for d in tree.body if isinstance(d, ast.FunctionDef) and d.name == name]


@dataclass
class _File:
    path: str
    tree: ast.Module
    names: Names
    members: dict[str, list[ast.Call]]


def _parsed(path: str, data: bytes) -> _File | None:
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names = Names(tree)
    members: dict[str, list[ast.Call]] = {}
    for call in apex_calls(names):
        for name in names.qualified(call.func):
            if name.startswith(APEX):
                members.setdefault(name[len(APEX) :], []).append(call)
    return _File(os.path.abspath(path), tree, names, members)


def _function(file: _File, node: ast.AST) -> ast.AST:
    return function_around(file.names, file.tree, node)


def function_around(names: Names, tree: ast.Module, node: ast.AST) -> ast.AST:
    """The innermost function around ``node`` (``tree``, the module, at module level)."""
    for ancestor in names.ancestors(node):
        if isinstance(ancestor, ast.FunctionDef | ast.AsyncFunctionDef):
            return ancestor
    return tree


_LINKED = {"scale_loss", "master_params", "state_dict", "load_state_dict"}


def _linked_functions(file: _File) -> tuple[list[ast.FunctionDef], ast.FunctionDef | None]:
    """The module-level functions holding every apex call of a file without ``initialize``, and
    the one that scales the loss (every ``master_params`` with it), if any: the rewrite adds a
    parameter to each, whose every caller the pre-pass checks. ([], None): not such a file."""
    if "initialize" in file.members or set(file.members) - _LINKED:
        return [], None
    homes = {_function(file, c) for calls in file.members.values() for c in calls}
    if not all(isinstance(h, ast.FunctionDef) and h in file.tree.body for h in homes):
        return [], None
    scaling = {_function(file, c) for c in file.members.get("scale_loss", [])}
    reading = {_function(file, c) for c in file.members.get("master_params", [])}
    if len(scaling) > 1 or not reading <= scaling:
        return [], None
    trains = scaling.pop() if scaling else None
    return sorted(homes, key=lambda f: f.lineno), trains


def delegated(file: _File, trains: ast.FunctionDef | None) -> Delegated | None:
    """``trains`` only backpropagates a loss it is given, scaled for an optimizer it is given,
    and leaves the step to its caller: its calls are scaled backwards (``Link.delegated``).
    Strict, since the caller plans around a body it cannot see: no call in it but apex's
    ``scale_loss`` and ``.backward()``, the optimizer never rebound or stepped, no
    ``master_params`` in the file, and the loss and optimizer plain parameters."""
    if trains is None or "master_params" in file.members:
        return None
    params = [a.arg for a in (*trains.args.posonlyargs, *trains.args.args)]
    where = {p: i for i, p in enumerate(params)} | {a.arg: -1 for a in trains.args.kwonlyargs}
    scaled = file.members.get("scale_loss", [])
    given = {
        (ast.unparse(a), ast.unparse(o))
        for c in scaled
        if (a := _argument_of(c, "loss", 0)) is not None
        and (o := _argument_of(c, "optimizers", 1)) is not None
    }
    if len(given) != 1:
        return None
    loss, optimizer = given.pop()
    if loss not in where or optimizer not in where:
        return None
    for node in ast.walk(trains):
        if isinstance(node, ast.Call):
            if node in scaled or (
                isinstance(node.func, ast.Attribute) and node.func.attr == "backward"
            ):
                continue
            return None
        if (
            isinstance(node, ast.Name)
            and node.id == optimizer
            and not isinstance(node.ctx, ast.Load)
        ):
            return None
        nested = isinstance(
            node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef
        )
        if (nested and node is not trains) or isinstance(
            node, ast.Yield | ast.YieldFrom | ast.Global | ast.Nonlocal
        ):
            return None
    switch = []
    for node in ast.walk(trains):
        for term in _leaves(node.test) if isinstance(node, ast.If | ast.IfExp) else ():
            root = term
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in where:
                switch.append((ast.unparse(term), root.id, where[root.id]))
    named = [*trains.args.posonlyargs, *trains.args.args]
    defaults = dict(zip([a.arg for a in named[len(named) - len(trains.args.defaults) :]],
                        trains.args.defaults, strict=True))  # fmt: skip
    defaults |= {a.arg: d for a, d in zip(trains.args.kwonlyargs, trains.args.kw_defaults,
                                          strict=True) if d is not None}  # fmt: skip
    return Delegated(
        (loss, where[loss]),
        (optimizer, where[optimizer]),
        _backs_always(trains.body),
        tuple(dict.fromkeys(switch)),
        tuple((p, ast.unparse(defaults[p])) for _, p, _ in switch if p in defaults),
    )


def _leaves(test: ast.expr) -> Iterator[ast.expr]:
    """The operands of a test's ``and`` and ``or`` (not those under a ``not``: where a caller
    gave them the switch, the helper would scale nothing; the 62nd review's d05)."""
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from _leaves(value)
    elif not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
        yield test


def _argument_of(call: ast.Call, keyword: str, index: int) -> ast.expr | None:
    if any(isinstance(a, ast.Starred) for a in call.args):
        return None
    keywords = {k.arg: k.value for k in call.keywords}
    return keywords.get(keyword, call.args[index] if len(call.args) > index else None)


def _backs_always(body: list[ast.stmt]) -> bool:
    """A statement of ``body`` backpropagates on every path through it, none leaving before
    (a ``raise`` leaves for the caller's step too)."""
    for statement in body:
        if _backs(statement):
            return True
        if any(isinstance(n, ast.Return | ast.Break | ast.Continue) for n in ast.walk(statement)):
            return False
    return False


def _backs(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Expr):
        call = statement.value
        return (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "backward"
        )
    if isinstance(statement, ast.With):
        return _backs_always(statement.body)
    if isinstance(statement, ast.If):
        return _backs_always(statement.body) and _backs_always(statement.orelse)
    return isinstance(statement, ast.Raise)


def _one_class(file: _File, members: set[str]) -> ast.ClassDef | None:
    """The module-level class whose methods hold every apex call of the file, all of them
    calls of ``members``."""
    if not file.members or set(file.members) - members:
        return None
    classes = set()
    for call in (c for calls in file.members.values() for c in calls):
        method = _function(file, call)
        holder = next(iter(file.names.ancestors(method)), None) if method is not file.tree else None
        if not isinstance(holder, ast.ClassDef) or holder not in file.tree.body:
            return None
        classes.add(holder)
    return classes.pop() if len(classes) == 1 else None


def _hook_class(file: _File) -> str | None:
    """The class of a runner hook: every apex call of the file (``scale_loss``, and
    ``master_params`` beside it) is in methods of one module-level class, which defines
    ``__init__`` (where its GradScaler is made); the file never initializes amp."""
    cls = _one_class(file, {"scale_loss", "master_params"})
    if cls is None or not any(
        isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in cls.body
    ):
        return None
    return cls.name


_STATE = {"state_dict", "load_state_dict"}


def _runner_class(file: _File) -> str | None:
    """A runner class (mmcv style: it derives from a library's ``...Runner``, whose ``hooks``
    are the hooks registered on it) whose methods save or restore amp state, and make no
    other apex call."""
    cls = _one_class(file, _STATE)
    if cls is None or not any(
        ast.unparse(base).rpartition(".")[2].endswith("Runner") for base in cls.bases
    ):
        return None
    return cls.name


def _state_helpers(file: _File) -> tuple[str, ...]:
    """The module-level functions of a checkpoint module holding every apex call of the
    file, all of them saving or restoring amp state (empty: not such a file)."""
    if set(file.members) - _STATE:
        return ()
    return tuple(f.name for f in _linked_functions(file)[0])


# apex's cast registry, which the script's own plan rewrites (Lydorn's frame-field `train.py`:
# `amp.register_float_function(torch, "sigmoid")` before `initialize`, the 53rd review)
_REGISTERS = frozenset({"register_float_function", "register_half_function"})


def _hook_links(
    callers: list[_File],
    files: list[_File],
    taken: set[str],
    everything: Callable[[], Iterable[tuple[str, bytes]]],
) -> dict[str, Link]:
    """A script that initializes amp and scales nothing, whose imports (followed on disk) reach
    apex amp only in one runner hook of the run: the hook is driven by a runner (a library)
    the script hands the model and optimizer to, so no call of the run links them; apex's
    process-wide state does. The hook gets a GradScaler of its own, the script an autocast
    region from ``initialize`` on."""
    hooks = {f.path: name for f in files if f.path not in taken and (name := _hook_class(f))}
    if not hooks:
        return {}
    free = [f for f in files if f.path not in taken]
    runners = {f.path: name for f in free if (name := _runner_class(f))}
    helpers = {f.path: n for f in free if f.path not in runners and (n := _state_helpers(f))}
    found: dict[tuple[str, frozenset[str]], list[str]] = {}
    graph = _Graph()
    for caller in callers:
        if caller.path in taken or set(caller.members) - _REGISTERS != {"initialize"}:
            continue
        siblings = {s.path for s in apex_siblings(caller.path, graph)}
        if not siblings & hooks.keys():  # wired by a registry, through the entry point
            siblings = _through_entry(caller.path, hooks, everything, graph) or siblings
        hooked = siblings & hooks.keys()
        state = frozenset(siblings - hooked)
        if len(hooked) == 1 and state <= runners.keys() | helpers.keys():
            found.setdefault((hooked.pop(), state), []).append(caller.path)
    out: dict[str, Link] = {}
    by_path = {f.path: f for f in files}
    for (path, state), paths in found.items():
        item = Link(callers=tuple(paths), callee=path, hook=hooks[path])
        if state:
            item = _runner_state(item, state, by_path, runners, helpers, everything)
            if item is None:
                continue
        out.update((f, item) for f in item.files)
    return out


def _through_entry(
    path: str,
    hooks: dict[str, str],
    everything: Callable[[], Iterable[tuple[str, bytes]]],
    graph: _Graph,
) -> set[str] | None:
    """mmcv's registries: the script that initializes imports no hook; the entry point of the
    run that imports it (``from mmdet_custom.apis.train import train_detector``) also imports
    the modules that register the hook and the runner (``import mmcv_custom.runner.optimizer``),
    which the config then names. The apex modules that entry point reaches, where every entry
    point that imports ``path`` and reaches a hook reaches the same ones; None: no such entry."""
    # the project: the folder holding the top packages of the script and its nearest hook,
    # each importable from there (a folder of several projects, `owner+name/...`, is none)
    nearest = max(hooks, key=lambda h: len(os.path.commonpath([path, h])))
    root = os.path.commonpath([path, nearest])
    while os.path.isfile(os.path.join(root, "__init__.py")):
        root = os.path.dirname(root)
    tops = [os.path.relpath(p, root).split(os.sep)[0].removesuffix(".py") for p in (path, nearest)]
    if not all(t.isidentifier() for t in tops):
        return None
    stem = _stem(path).encode()  # a package's names are imported by the package's name
    stems = {os.path.splitext(os.path.basename(h))[0].encode() for h in hooks}
    found: set[str] | None = None
    for other, data in everything():
        other = os.path.abspath(other)
        if not other.startswith(root + os.sep) or other == path:
            continue
        if stem not in data or not any(s in data for s in stems):
            continue
        reached = [target for target, _, _ in _walk(other, graph)]
        if path not in reached:
            continue
        siblings = {t for t in reached if graph.member(t) is not None}
        if not siblings & hooks.keys():
            continue
        if found is not None and siblings != found:
            return None
        found = siblings
    return found


def _runner_state(
    item: Link,
    state: frozenset[str],
    by_path: dict[str, _File],
    runners: dict[str, str],
    helpers: dict[str, tuple[str, ...]],
    everything: Callable[[], Iterable[tuple[str, bytes]]],
) -> Link | None:
    """A hook link whose amp state one runner class keeps (its methods save and restore it,
    themselves or through checkpoint functions of other modules that only its methods call);
    None: the state is kept some other way (the script then refuses, naming those modules).
    Broken where a checkpoint function is used elsewhere in the run."""
    [runner, *more] = sorted(state & runners.keys()) or [None]
    if runner is None or more:
        return None
    cls = next(c for c in by_path[runner].tree.body
               if isinstance(c, ast.ClassDef) and c.name == runners[runner])  # fmt: skip
    owners = sorted(state - {runner})
    names = tuple(n for p in owners for n in helpers[p])
    if len(set(names)) != len(names):
        return None
    item = replace(item, state=(runner, *owners), runner=runners[runner], helpers=names)
    spellings: set[str] = set()
    functions = [(by_path[owner], name) for owner in owners for name in helpers[owner]]
    for path, file, uses in _run_uses(everything, by_path, functions):
        for use, name in uses.items():
            call = file.names.parent(use)
            if (
                path == runner
                and isinstance(call, ast.Call)
                and call.func is use
                and _function(file, use) in cls.body
            ):
                spellings.add(ast.unparse(use))
                continue
            return replace(
                item,
                broken=f"`{name}` is also used at {item.shown(path)}:{use.lineno}, which is "
                f"not a method of the runner `{item.runner}` that passes it the GradScaler",
            )
    return replace(item, helper_spellings=tuple(sorted(spellings)))


def _run_uses(
    everything: Callable[[], Iterable[tuple[str, bytes]]],
    by_path: dict[str, _File],
    functions: list[tuple[_File, str]],
) -> Iterator[tuple[str, _File, dict[ast.expr, str]]]:
    """Each file of the run whose text names one of ``functions`` (a file and one of its
    functions), parsed, with its uses of them (each use: the function's name)."""
    words = [name.encode() for _, name in functions]
    for path, data in everything():
        path = os.path.abspath(path)
        if not any(word in data for word in words):
            continue
        file = by_path.get(path) or _parsed(path, data)
        if file is not None:
            uses = {u: name for callee, name in functions for u in _uses(file, callee, name)}
            yield path, file, uses


def kept_handle(file: _File) -> tuple[str, str] | None:
    """``args.amp = amp`` in a file that initializes amp once: (the object's name, the
    attribute); None where there is no such store, or more than one."""
    if len(file.members.get("initialize", [])) != 1:
        return None
    found = set()
    for node in ast.walk(file.tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Attribute)
            and isinstance(node.targets[0].value, ast.Name)
            and isinstance(node.value, ast.Name | ast.Attribute)
            and any(q.rstrip(".") == APEX.rstrip(".") for q in file.names.qualified(node.value))
        ):
            found.add((node.targets[0].value.id, node.targets[0].attr))
    return found.pop() if len(found) == 1 else None


def carriers(file: _File, attribute: str) -> list[str]:
    """The module-level functions of ``file`` that call apex through ``<name>.<attribute>``."""
    names = []
    for function in file.tree.body:
        if isinstance(function, ast.FunctionDef) and any(
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and isinstance(n.func.value, ast.Attribute)
            and n.func.value.attr == attribute
            and isinstance(n.func.value.value, ast.Name)
            for n in ast.walk(function)
        ):
            names.append(function.name)
    return names


_SCAN_LIMIT = 5000  # files looked at for the users of a function (a project, not a disk)


def calls_keep_default(
    path: str, function: str, position: int, name: str, default: str | None
) -> list[str] | None:
    """Where the module-level ``function`` of ``path`` is called, in its file and in the files
    of its project on disk (``file:line``), where every use of it is a call that leaves the
    parameter ``name`` (at ``position``) to its default ``default`` (a string; None for
    ``None``) or passes that very literal: no other keyword or positional argument for it, no
    ``*args``/``**kwargs``. None: a use that may pass another value (or is not a call), no
    call at all, or too many files to look at."""
    tree = _tree(path, _read(path))  # (it imports apex: `import` is in it)
    if tree is None:
        return None
    own = [
        n for n in ast.walk(tree)
        if isinstance(n, ast.Name) and n.id == function and isinstance(n.ctx, ast.Load)
    ]  # fmt: skip
    elsewhere = users_on_disk(path, [function])
    if elsewhere is None:
        return None
    sites = [(tree, path, n) for n in own]
    for other, line, _ in elsewhere:
        other_tree = _tree(other, _read(other))
        uses = [
            n for n in ast.walk(other_tree) if getattr(n, "lineno", None) == line
            and isinstance(n, ast.Name | ast.Attribute)
            and (n.id if isinstance(n, ast.Name) else n.attr) == function
        ] if other_tree is not None else []  # fmt: skip
        if not uses:
            return None
        sites += [(other_tree, other, n) for n in uses[:1]]
    folder = os.path.dirname(os.path.abspath(path))
    found = []
    for site_tree, where, use in sites:
        call = next(
            (c for c in ast.walk(site_tree) if isinstance(c, ast.Call) and c.func is use), None
        )
        if call is None or any(isinstance(a, ast.Starred) for a in call.args):
            return None
        given = [k.value for k in call.keywords if k.arg == name]
        given += call.args[position : position + 1]
        if any(k.arg is None for k in call.keywords) or any(
            not (isinstance(g, ast.Constant) and g.value == default) for g in given
        ):
            return None
        found.append(f"{os.path.relpath(where, folder)}:{call.lineno}")
    return found or None


def user_texts(path: str, names: list[str]) -> Iterator[tuple[str, int, str]]:
    """``users_on_disk`` of ``names``, each file with its text (a file it cannot read is
    left out): (file, line, text)."""
    for file, line, _ in users_on_disk(path, names) or []:
        try:
            with open(file, encoding="utf-8", errors="replace") as handle:
                yield file, line, handle.read()
        except OSError:
            continue


def level_elsewhere(path: str, name: str) -> tuple[str, int, str] | None:
    """A file of ``path``'s program that sets the opt level spelled ``name`` (``opt_level``,
    ``fp16_opt_level``...) to O2 or O3: in a module it imports or one that imports it, a
    keyword or an assignment (``Trainer(opt_level="O2")``) or a flag's default
    (``add_argument("--apex_opt_level", default="O2")`` in an args module); in a shell script,
    a line that runs this file with ``--opt_level O2``: (file, line, text). The setting
    apex-opt-level declares every run O1 or O0; the program says otherwise. Another script's
    own flag, or a checkout beside the project, says nothing about this file."""
    word = re.escape(name)
    dashed = word.replace("_", "[-_]")
    patterns = [
        re.compile(rf"\b{word}\s*[:=]\s*['\"]O[23]['\"]"),
        re.compile(rf"['\"]--{dashed}['\"][^)]*\bdefault\s*=\s*['\"]O[23]"),
    ]
    command = re.compile(rf"--{dashed}[ =]['\"]?O[23]\b")
    path = os.path.abspath(path)
    graph = _Graph()
    related = {target for target, _, _ in _walk(path, graph)}
    folder = project_folder(path)  # (not above it: a checkout beside it is another program)
    files = []
    for where, folders, names in os.walk(folder):
        folders[:] = sorted(d for d in folders if not d.startswith(".") and d != "__pycache__")
        files += [os.path.join(where, f) for f in sorted(names) if f.endswith((".py", ".sh"))]
        if len(files) > _SCAN_LIMIT:
            return None
    texts = {f: _read(f).decode("utf-8", "replace") for f in map(os.path.abspath, files)}
    importers = {
        f for f, text in texts.items()
        if f.endswith(".py") and os.path.basename(path)[:-3] in text
        and path in graph.targets_of(f)
    }  # fmt: skip
    runs = {os.path.basename(f) for f in (path, *importers)}  # what a shell line may run
    for other, text in texts.items():
        if other == path or ("O2" not in text and "O3" not in text):
            continue
        script = other.endswith(".sh")
        if not script and other not in related and other not in importers:
            continue  # neither imported by this file nor importing it
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("#") or ".initialize(" in line:
                continue  # (another call's own level)
            if script:
                found = any(r in line for r in runs) and command.search(line)
            else:
                found = any(p.search(line) for p in patterns)
            if found:
                return other, number, line.partition(" #")[0].strip()
    return None


def project_folder(path: str) -> str:
    """The folder holding ``path``'s top package (for a script in no package, its own
    folder): where the rest of its program is looked for."""
    folder = os.path.dirname(os.path.abspath(path))
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder = os.path.dirname(folder)
    return folder


def _project_files(
    path: str, every_folder: bool = False, through_top: bool = False
) -> list[str] | None:
    """The ``.py`` files of ``path``'s project on disk (see ``users_on_disk``), in walking
    order; for a file in no package, the files beside its folder too (they import it as a
    namespace package: `from utils.common import ...`) and, unless ``every_folder``, only the
    packages below. ``through_top``: for a file in no package, also the files elsewhere under
    the repository's top (a folder up to two levels above with a README, a setup.py, ...) that
    put a folder on ``sys.path`` or import the top folder of its path, through which they may
    import it (57a's
    `examples/run_ner.py` and `utils/adversarial.py`; 58a's two levels down). None: more than
    ``_SCAN_LIMIT`` files."""
    packaged = os.path.isfile(os.path.join(os.path.dirname(os.path.abspath(path)), "__init__.py"))
    folder = project_folder(path)
    walked = os.walk(folder)
    parent = os.path.dirname(folder)
    if not packaged:
        beside = sorted(n for n in os.listdir(parent) if os.path.isfile(os.path.join(parent, n)))
        walked = itertools.chain([(parent, [], beside)], walked)
    found = _walked_files(walked, packaged or every_folder)
    top = next((t for t in _above(folder) if _top(t)), None) if not _top(folder) else None
    if found is None or packaged or not through_top or top is None:
        return found
    known = set(found)
    more = _walked_files(os.walk(top), True)
    if more is None:
        return None
    dotted = os.path.relpath(os.path.splitext(path)[0], top).replace(os.sep, ".")
    first = dotted.partition(".")[0].encode()
    found += [
        f
        for f in more
        if f not in known
        and any(
            w in _read(f)
            for w in (b"sys.path", b"addsitedir", b"from " + first, b"import " + first)
        )
    ]  # fmt: skip (60a's R3: run as `python -m`, or with PYTHONPATH, beside no `sys.path`)
    return found


def _walked_files(walked: Iterable, every_folder: bool) -> list[str] | None:
    """The ``.py`` files of an ``os.walk`` (into packages only, unless ``every_folder``)."""
    found: list[str] = []
    for where, folders, names in walked:
        folders[:] = sorted(
            d for d in folders
            if not d.startswith(".") and d != "__pycache__"
            and (every_folder or os.path.isfile(os.path.join(where, d, "__init__.py")))
        )  # fmt: skip
        for name in sorted(names):
            if name.endswith(".py"):
                found.append(os.path.abspath(os.path.join(where, name)))
                if len(found) > _SCAN_LIMIT:
                    return None
    return found


def _above(folder: str, levels: int = 2) -> Iterator[str]:
    """The folders above ``folder``, nearest first, ``levels`` of them at most."""
    for _ in range(levels):
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        yield (folder := parent)


def _top(folder: str) -> bool:
    """``folder`` looks like where a repository starts (its files say so)."""
    markers = (".git", ".gitignore", "setup.py", "pyproject.toml", "setup.cfg", "README.md",
               "README.rst", "README", "requirements.txt", "LICENSE")  # fmt: skip
    return any(os.path.exists(os.path.join(folder, m)) for m in markers)


def initializes_anywhere(path: str) -> bool:
    """Some file of ``path``'s project on disk may initialize apex amp (``initialize(`` or the
    old ``init(`` in a file that names apex); True where too many files to look at."""
    files = _project_files(path, every_folder=True, through_top=True)
    return files is None or any(
        b"apex" in data and (b".initialize(" in data or b".init(" in data)
        for data in map(_read, files)
    )


def users_on_disk(
    path: str, functions: list[str], imports: bool = False
) -> list[tuple[str, int, str]] | None:
    """The other files of ``path``'s project on disk that use one of its ``functions``: (file,
    line, function); with ``imports``, a ``from`` import of one counts too (a name whose
    import may go). The project: below the folder holding its top package; for a script in
    no package, its folder's files and the packages in it. None: too many files to look at."""
    path = os.path.abspath(path)
    callee = _parsed(path, _read(path))
    if callee is None or not functions:
        return []
    words = [f.encode() for f in functions]
    stem = _stem(path).encode()  # a package's names are imported by the package's name
    # ... and a module's, through its package's `__init__` (`from lib.training import Trainer`
    # for lib/training/trainer.py: the 53rd review's elektronn3 subclasses)
    folder = os.path.dirname(path)
    package = (
        os.path.basename(folder).encode()
        if os.path.isfile(os.path.join(folder, "__init__.py"))
        else None
    )
    found: list[tuple[str, int, str]] = []
    files = _project_files(path, through_top=True)
    if files is None:
        return None
    for other in files:
        if other == path:
            continue
        data = _read(other)
        if not any(w in data for w in words) or (
            stem not in data
            and b"import *" not in data  # (a package may re-export it)
            and (package is None or package not in data)
            and b"from . import" not in data
        ):
            continue
        file = _parsed(other, data)
        if file is None:
            continue
        for function in functions:
            found += [(other, u.lineno, function) for u in _uses(file, callee, function)]
            if imports:
                found += [(other, n, function) for n in _imports_of(file, callee, function)]
    return found


def _imports_of(file: _File, callee: _File, function: str) -> list[int]:
    """The lines of ``from <callee's module> import function`` in ``file``: a package's
    ``__init__`` that re-exports it reads it nowhere else, and fails to import without it."""
    return [
        stmt.lineno
        for stmt in ast.walk(file.tree)
        if isinstance(stmt, ast.ImportFrom)
        and any(a.name == function for a in stmt.names)
        and any(
            os.path.abspath(m) == callee.path
            for m in _module_paths(file.path, stmt.level, stmt.module or "")
        )
    ]


def _kept_links(files: list[_File], taken: set[str]) -> dict[str, Link]:
    """Files that keep apex's module on an object and share functions that call through it
    (fine-tuning scripts that each set ``args.amp`` and call one ``train_model``): one
    component, rewritten together; broken where a user of those functions does not keep it."""
    kept = {f.path: (f, k) for f in files if f.path not in taken and (k := kept_handle(f))}
    groups: dict[str, set[str]] = {}
    broken: dict[str, str] = {}
    functions: dict[str, list[str]] = {}
    for path, (file, (_, attribute)) in kept.items():
        names = carriers(file, attribute)
        users = users_on_disk(path, names) if names else []
        if not users:  # none, or too many files to look at (the planner then says so)
            continue
        functions[path] = names
        group = {path}
        for user, line, name in users:
            if user not in kept or kept[user][1][1] != attribute:
                shown = os.path.relpath(user, os.path.dirname(path))
                why = f"`{name}` is also used at {shown}:{line}, which does not keep apex's module"
                broken.setdefault(path, f"{why} as `.{attribute}` in this run")
            else:
                group.add(user)
        for member in list(group):
            group |= groups.get(member, set())
        for member in group:
            groups[member] = group
    out: dict[str, Link] = {}
    for group in {id(g): g for g in groups.values()}.values():
        owners = sorted(p for p in group if p in functions)
        item = Link(
            callers=tuple(sorted(group)),
            callee=owners[0],
            functions=tuple(dict.fromkeys(n for p in owners for n in functions[p])),
            broken=next((broken[p] for p in owners if p in broken), None),
            kept=kept[owners[0]][1][1],
        )
        out.update((f, item) for f in item.files)
    return out


def _argument(call: ast.Call, which: str) -> ast.expr | None:
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    index = 0 if which == "models" else 1
    return keywords.get(which, positional[index] if len(positional) > index else None)


def _spellings(file: _File, init: ast.Call) -> dict[str, set[str]]:
    """How the initializing function spells the model and the optimizer afterwards."""
    out = {"models": set(), "optimizers": set()}
    for which in out:
        value = _argument(init, which)
        if value is not None:
            out[which].add(ast.unparse(value))
    assign = file.names.parent(init)
    if isinstance(assign, ast.Assign) and len(assign.targets) == 1:
        target = assign.targets[0]
        if isinstance(target, ast.Tuple | ast.List) and len(target.elts) == 2:
            out["models"].add(ast.unparse(target.elts[0]))
            out["optimizers"].add(ast.unparse(target.elts[1]))
    return out


def _parameters(function: ast.FunctionDef, call: ast.Call, spelled: set[str]) -> set[str]:
    """The parameters of ``function`` that ``call`` gives an expression spelled ``spelled``."""
    plain = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    found = set()
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if i < len(plain) and ast.unparse(arg) in spelled:
            found.add(plain[i])
    found |= {k.arg for k in call.keywords if k.arg and ast.unparse(k.value) in spelled}
    return found


def _resolves(caller: _File, qualified: str, callee: _File, function: str) -> bool:
    """``qualified`` (as ``caller`` imports it) is ``callee``'s ``function``: imported from its
    module, or from a module that re-exports it (a package's ``__init__.py`` holding
    ``from .checkpoint import save_checkpoint``)."""
    module, _, name = qualified.rpartition(".")
    if name != function or not module:
        return False
    dots = len(module) - len(module.lstrip("."))
    paths = list(_module_paths(caller.path, dots, module.lstrip(".")))
    return callee.path in paths or any(_reexports(p, callee.path, function) for p in paths)


def _reexports(path: str, callee: str, function: str) -> bool:
    """The module at ``path`` binds ``function`` by importing it from the file ``callee``
    (by name or with ``*``)."""
    tree = module_tree(path)
    for node in _import_statements(tree.body) if tree is not None else ():
        if not isinstance(node, ast.ImportFrom) or not any(
            a.name == "*" or (a.name == function and a.asname in (None, function))
            for a in node.names
        ):
            continue
        paths = _module_paths(path, node.level, node.module or "")
        if callee in {os.path.abspath(p) for p in paths}:
            return True
    return False


def _uses(file: _File, callee: _File, function: str) -> Iterator[ast.expr]:
    """Every Name or attribute in ``file`` that refers to ``callee``'s ``function`` (also
    through ``from m import function as other``), and the name string of a ``getattr`` in
    another file that may fetch it."""
    spellings = {function} | {
        b.name for b in file.names.imports() if b.alias is not None and b.alias.name == function
    }
    nodes = [n for spelling in sorted(spellings) for n in file.names.spelled(spelling)]
    # `from <the callee's module> import *`: its bare names that nothing else binds
    starred = file is not callee and any(
        isinstance(stmt, ast.ImportFrom)
        and any(a.name == "*" for a in stmt.names)
        and any(os.path.abspath(m) == callee.path or _reexports(m, callee.path, function)
                for m in _module_paths(file.path, stmt.level, stmt.module or ""))
        for stmt in _import_statements(file.tree.body)
    )  # fmt: skip
    for node in nodes:
        if (
            starred
            and isinstance(node, ast.Name)
            and node.id == function
            and not [b for b in file.names.bindings(node) if not b.builtin]
        ):
            yield node
            continue
        if file is callee:
            if isinstance(node, ast.Name) and any(
                b.scope is file.names.module_scope for b in file.names.bindings(node)
            ):
                yield node
            continue
        if any(_resolves(file, q, callee, function) for q in file.names.qualified(node)):
            yield node
    if file is not callee:  # `run = getattr(pkg, "train")`: a use no rewrite can update
        for node in file.names.spelled("getattr"):
            call = file.names.parent(node)
            if (
                isinstance(call, ast.Call)
                and call.func is node
                and len(call.args) >= 2
                and isinstance(name := call.args[1], ast.Constant)
                and name.value == function
            ):
                yield name


def link(
    apex_files: Iterable[tuple[str, bytes]], everything: Callable[[], Iterable[tuple[str, bytes]]]
) -> dict[str, Link]:
    """Pairs of an initializing file and a training-function file among ``apex_files`` (the
    files of the run that mention apex), checked against every file of the run
    (``everything()``, read only when a pair is found); by absolute path, both sides of a pair
    under the same ``Link``."""
    files = [f for f in (_parsed(p, d) for p, d in apex_files) if f is not None and f.members]
    callees = {f.path: (f, *found) for f in files if (found := _linked_functions(f))[0]}
    delegating = {path: delegated(f, trains) for path, (f, _, trains) in callees.items()}
    carriers = {path: _carriers(f, functions) for path, (f, functions, _) in callees.items()}
    # one `initialize` with an optimizer (others only cast models: a teacher's, for inference)
    trained = {f.path: [c for c in f.members.get("initialize", []) if _argument(c, "optimizers")]
               for f in files}  # fmt: skip
    callers = [f for f in files if f.members.get("initialize") and len(trained[f.path]) == 1]
    found_by: dict[str, list[tuple[str, str, str, int, tuple[str, ...]]]] = {}  # by callee
    backs: dict[tuple[str, str], tuple[str, ...]] = {}  # (caller, callee): its helper's spelling
    reaches: dict[str, tuple[str, ...]] = {}  # by caller: the callees it passes the scaler to
    called: dict[str, set[str]] = {}  # by callee: the functions of it that callers call
    for caller in callers:
        init = trained[caller.path][0]
        home = _function(caller, init)
        spelled = _spellings(caller, init)
        found: dict[str, list[tuple[ast.Call, ast.FunctionDef]]] = {}
        at: dict[int, dict[str, set[str]]] = {}  # by call: how its function spells the models
        scanned = (home, *_reached(caller, home, init))
        views = _relayed(home, scanned, spelled)
        seen: set[int] = set()  # (a module home's walk holds its functions' nodes too)
        for node in (n for f in scanned for n in ast.walk(f)):
            if not isinstance(node, ast.Call) or id(node) in seen:
                continue
            seen.add(id(node))
            around = _function(caller, node)
            if around not in scanned or (  # (a nested def may run at any time)
                around is home and (node.lineno, node.col_offset) <= (init.lineno, init.col_offset)
            ):
                continue
            qualified = caller.names.qualified(node.func)
            for path, (callee, functions, _) in callees.items():
                for function in (*functions, *carriers[path].values()):
                    if any(_resolves(caller, q, callee, function.name) for q in qualified):
                        found.setdefault(path, []).append((node, function))
                        at[id(node)] = views.get(id(around), spelled)
        trainers = [p for p in found if callees[p][2] is not None]
        # a caller that scales its own loss only hands the scaler to checkpoint helpers
        if not found or ("scale_loss" in caller.members) == bool(trainers):
            continue
        entries = [
            _entry(caller.path, callees[p][2], calls, at, carriers[p], bool(delegating[p]))
            for p, calls in found.items()
        ]
        if None in entries:
            continue
        for path, entry in zip(found, entries, strict=True):
            found_by.setdefault(path, []).append(entry)
            helper = callees[path][2]
            backs[caller.path, path] = tuple(
                sorted({ast.unparse(c.func) for c, f in found[path] if f is helper})
            )
            called.setdefault(path, set()).update(f.name for _, f in found[path])
        reaches[caller.path] = tuple(sorted(found))
    by_path = {f.path: f for f in files}
    out: dict[str, Link] = {}
    for group in _groups(reaches):
        parts = []
        for path in group:
            found = found_by[path]
            if len({(model, opt) for _, model, opt, _, _ in found}) != 1:
                break  # the callers pass the model in different parameters: each refuses
            _, model, opt, _, _ = found[0]
            _, functions, trains = callees[path]
            item = Link(
                callers=tuple(c for c, *_ in found),
                callee=path,
                functions=tuple(f.name for f in functions)
                + _carried_from(called[path], carriers[path]),
                trains=trains.name if trains is not None else None,
                model=model,
                optimizer=opt,
                calls=tuple(n for *_, n, _ in found),
                spellings=tuple(s for *_, s in found),
                delegated=delegating[path] if not model else None,
                backs=tuple(backs[c, path] for c, *_ in found),
            )
            if item.delegated and len(group) > 1:
                break  # (one helper that scales, beside other training modules: by hand)
            parts.append(_checked(item, by_path, everything))
        else:
            item = parts[0] if len(parts) == 1 else _joined(parts)
            out.update((f, item) for f in item.files)
    out.update(_hook_links(callers, files, set(out), everything))
    out.update(_kept_links(files, set(out)))
    out.update(_shared_links(files, set(out), everything))
    out.update(_family_links(files, set(out)))
    return out


def _family_links(files: list[_File], taken: set[str]) -> dict[str, Link]:
    """A class whose method initializes amp, and its subclasses in other modules of the run
    that scale with apex (nnU-Net: the base trainer initializes, each variant overrides
    ``run_iteration``): apex's state was the process's; the GradScaler becomes the object's,
    ``self.scaler``, made where ``initialize`` was and read by every class of the family. One
    component, rewritten together; a subclass module outside the run (or one that initializes
    amp itself) makes no link, and the base refuses naming it (``handles._subclasses``)."""
    by_path = {f.path: f for f in files}
    out: dict[str, Link] = {}
    for owner in files:
        inits = owner.members.get("initialize", [])
        if owner.path in taken or len(inits) != 1:
            continue
        home = _function(owner, inits[0])
        cls = next(
            (c for c in owner.tree.body if isinstance(c, ast.ClassDef) and home in c.body), None
        )
        if cls is None or not home.args.args or home.args.args[0].arg != "self":
            continue
        models = tuple(sorted(m for m in _spellings(owner, inits[0])["models"]
                              if re.fullmatch(r"self\.\w+", m)))  # fmt: skip
        paths = [f for f, *_ in apex_subclasses(owner.path, cls.name)]
        if not paths or any(
            p not in by_path or p in taken or "initialize" in by_path[p].members for p in paths
        ):
            continue
        parts = [
            Link(
                callers=(owner.path,),
                callee=p,
                functions=(home.name,),
                family=cls.name,
                models=models,
            )
            for p in paths
        ]
        item = parts[0] if len(parts) == 1 else replace(parts[0], parts=tuple(parts))
        out.update((f, item) for f in item.files)
    return out


def _reached(caller: _File, home: ast.AST, init: ast.Call) -> list[ast.FunctionDef]:
    """The module-level functions of the caller's file that its initializing function calls
    by name after ``initialize``, and those they call in turn (spai's ``train`` ->
    ``train_model`` -> ``save_checkpoint``): a linked call there needs the GradScaler too, and
    the planner threads it through them where they lead to a scaled backward."""
    if home is caller.tree:  # a script's module-level code (its `__main__` block)
        roots = [s for s in home.body if not isinstance(s, _DEFINITIONS)]
    elif isinstance(home, ast.FunctionDef) and home in caller.tree.body:
        roots = [home]
    else:
        return []
    defs = {
        f.name: f
        for f in caller.tree.body
        if isinstance(f, ast.FunctionDef) and len(_defs(caller.tree, f.name)) == 1
    }
    reached: list[ast.FunctionDef] = []
    pending = [
        n
        for root in roots
        for n in ast.walk(root)
        if isinstance(n, ast.Call) and (n.lineno, n.col_offset) > (init.lineno, init.col_offset)
    ]
    while pending:
        call = pending.pop()
        function = defs.get(call.func.id) if isinstance(call.func, ast.Name) else None
        if function is None or function is home or function in reached:
            continue
        reached.append(function)
        pending += [n for n in ast.walk(function) if isinstance(n, ast.Call)]
    return reached


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _relayed(
    home: ast.AST, scanned: tuple[ast.AST, ...], spelled: dict[str, set[str]]
) -> dict[int, dict[str, set[str]]]:
    """How each function of the caller's file that the initializing one reaches spells the
    initialized models and optimizers: ``home`` as ``initialize`` binds them, a reached
    function by its parameters that receive them unchanged from a call in a function already
    known (``main`` -> ``train_and_evaluate(student_model, ...)``, whose ``model`` it is;
    IsotonicDataAugmentation). By id; a function reached with none of them is absent."""
    views: dict[int, dict[str, set[str]]] = {id(home): spelled}
    defs = {f.name: f for f in scanned if isinstance(f, ast.FunctionDef)}
    grew = True
    while grew:
        grew = False
        for outer in [f for f in scanned if id(f) in views]:
            for call in ast.walk(outer):
                inner = (
                    defs.get(call.func.id)
                    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    else None
                )
                if inner is None or id(inner) in views:
                    continue
                view = {k: _parameters(inner, call, v) for k, v in views[id(outer)].items()}
                if view["models"] and view["optimizers"]:
                    views[id(inner)] = view
                    grew = True
    return views


def reaching(calls: dict[str, set[str]], names: set[str]) -> set[str]:
    """``names`` and the functions that call one of them, directly or through each other:
    ``calls`` gives each function's callees by name (``fit`` -> ``train_epoch``)."""
    reached, grew = set(names), True
    while grew:
        grew = False
        for name, called in calls.items():
            if name not in reached and called & reached:
                reached.add(name)
                grew = True
    return reached


def _carriers(file: _File, functions: list[ast.FunctionDef]) -> dict[str, ast.FunctionDef]:
    """The module-level functions of a linked file that hold no apex call but call its linked
    functions by name, directly or through each other (loc2vec's ``fit`` -> ``train_epoch``):
    where a caller calls one, it takes the ``scaler`` too and hands it on."""
    defs = {
        f.name: f
        for f in file.tree.body
        if isinstance(f, ast.FunctionDef) and len(_defs(file.tree, f.name)) == 1
    }
    linked = {f.name for f in functions}
    calls = {name: {c.func.id for c in _own_calls(file, f)} for name, f in defs.items()}
    return {n: defs[n] for n in defs if n in reaching(calls, linked) - linked}


def _own_calls(file: _File, function: ast.FunctionDef) -> Iterator[ast.Call]:
    """The calls of a bare name made in ``function``'s own body (not in a nested function)."""
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and _function(file, node) is function
        ):
            yield node


def _carried_from(called: set[str], carriers: dict[str, ast.FunctionDef]) -> tuple[str, ...]:
    """The carriers a link's callers reach: those they call, and the carriers those call."""
    names = [n for n in carriers if n in called]
    for name in names:
        names += [
            n.func.id
            for n in ast.walk(carriers[name])
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in carriers
            and n.func.id not in names
        ]
    return tuple(sorted(set(names), key=lambda n: carriers[n].lineno))


def _received(
    function: ast.FunctionDef,
    call: ast.Call,
    spelled: set[str],
    trains: ast.FunctionDef,
    carriers: dict[str, ast.FunctionDef],
    seen: tuple[ast.FunctionDef, ...] = (),
) -> set[str]:
    """The parameters of ``trains`` that receive what ``call`` gives ``function`` spelled
    ``spelled``: directly, or handed on unchanged by the carriers between them."""
    params = _parameters(function, call, spelled)
    if function is trains:
        return params
    if not params or function in seen:
        return set()
    found: set[str] = set()
    for inner in ast.walk(function):
        if not isinstance(inner, ast.Call) or not isinstance(inner.func, ast.Name):
            continue
        target = trains if inner.func.id == trains.name else carriers.get(inner.func.id)
        if target is not None:
            found |= _received(target, inner, params, trains, carriers, (*seen, function))
    return found


def _entry(
    caller: str,
    trains: ast.FunctionDef | None,
    calls: list[tuple[ast.Call, ast.FunctionDef]],
    spelled: dict[int, dict[str, set[str]]],
    carriers: dict[str, ast.FunctionDef],
    delegating: bool = False,
) -> tuple[str, str, str, int, tuple[str, ...]] | None:
    """What one caller gives one callee's functions: the parameters of its training function
    that receive the model and the optimizer (through the carriers it calls), how many calls,
    how each function is spelled (None: not one parameter each, or one function spelled two
    ways). ``spelled``: by call, how the caller's function around it spells them. A helper
    that scales and leaves the step to its callers (``delegating``) receives no model."""
    training = [(c, f) for c, f in calls if f is trains or f.name in carriers]
    models, optimizers = set(), set()
    if trains is not None:
        for c, f in training:
            models |= _received(f, c, spelled[id(c)]["models"], trains, carriers)
            optimizers |= _received(f, c, spelled[id(c)]["optimizers"], trains, carriers)
    if trains is not None and (len(models) != (0 if delegating else 1) or len(optimizers) != 1):
        return None
    spellings: dict[str, set[str]] = {}
    for call, function in calls:
        spellings.setdefault(function.name, set()).add(ast.unparse(call.func))
    if any(len(s) != 1 for s in spellings.values()):
        return None
    return (
        caller,
        models.pop() if models else "",
        optimizers.pop() if optimizers else "",
        len(calls),
        tuple(sorted(s.pop() for s in spellings.values())),
    )


def _groups(reaches: dict[str, tuple[str, ...]]) -> list[tuple[str, ...]]:
    """The callees that one GradScaler must reach together: those of callers that share one
    (a script that calls the epoch function, another that calls it and the checkpoint helper)."""
    groups: list[set[str]] = []
    for callees in reaches.values():
        joined = set(callees)
        for group in [g for g in groups if not g.isdisjoint(joined)]:
            joined |= group
            groups.remove(group)
        groups.append(joined)
    return [tuple(sorted(g)) for g in groups]


def _joined(parts: list[Link]) -> Link:
    """One link of several callees (an epoch function in one module, a checkpoint helper in
    another), each a part with its own callers: per caller, its calls of them all; all
    rewritten together, or none (the first broken part breaks the whole)."""
    callers = tuple(dict.fromkeys(c for p in parts for c in p.callers))
    calls, spellings = [], []
    for caller in callers:
        mine = [(p, p.callers.index(caller)) for p in parts if caller in p.callers]
        calls.append(sum(p.calls[i] for p, i in mine))
        spellings.append(tuple(sorted(s for p, i in mine for s in p.spellings[i])))
    broken = next((p for p in parts if p.broken), None)
    return replace(
        parts[0],
        callers=callers,
        functions=tuple(f for p in parts for f in p.functions),
        trains=next((p.trains for p in parts if p.trains), None),
        calls=tuple(calls),
        spellings=tuple(spellings),
        broken=broken.broken if broken else None,
        parts=tuple(parts),
    )


_REGISTERS = {"register_half_function", "register_float_function", "register_promote_function"}


def _returned_models(file: _File, init: ast.Call, home: ast.FunctionDef) -> tuple[int, ...]:
    """The places of the initialized models in the tuple every ``return`` of ``home`` gives
    (none: a return that is not such a tuple)."""
    models = _spellings(file, init)["models"]
    returns = [n for n in ast.walk(home) if isinstance(n, ast.Return)
               and _function(file, n) is home]  # fmt: skip
    places = set()
    for node in returns:
        if not isinstance(node.value, ast.Tuple):
            return ()
        places |= {i for i, e in enumerate(node.value.elts) if ast.unparse(e) in models}
    return tuple(sorted(places)) if returns else ()


def _switch(file: _File, init: ast.Call, home: ast.FunctionDef) -> tuple[tuple[str, int], ...]:
    """The parameters of ``home`` that are ``and`` terms of the tests of the ``if``s around
    ``init`` in it (``if fp16:``), with their positions."""
    listed = [a.arg for a in (*home.args.posonlyargs, *home.args.args)]
    named = listed + [a.arg for a in home.args.kwonlyargs]
    found = []
    for ancestor in file.names.ancestors(init):
        if ancestor is home:
            break
        if isinstance(ancestor, ast.If) and any(n is init for s in ancestor.body
                                                 for n in ast.walk(s)):  # fmt: skip
            test = ancestor.test
            terms = (
                test.values
                if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)
                else [test]
            )
            found += [
                (t.id, listed.index(t.id) if t.id in listed else -1)
                for t in terms if isinstance(t, ast.Name) and t.id in named
            ]  # fmt: skip
    return tuple(found)


def _importing(file: _File, owner: _File, function: str) -> str | None:
    """The absolute module ``file`` imports ``function`` of ``owner`` from, by name
    (``from pkg.setup import make``: ``pkg.setup``), where that module is ``owner``'s."""
    for node in _import_statements(file.tree.body):
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and any(a.name == function and a.asname in (None, function) for a in node.names)
            and owner.path in {os.path.abspath(p) for p in _module_paths(file.path, 0, node.module)}
        ):
            return node.module
    return None


def _shared_links(
    files: list[_File], taken: set[str], everything: Callable[[], Iterable[tuple[str, bytes]]]
) -> dict[str, Link]:
    """A module-level function that initializes amp and returns the models (DPR's
    ``setup_for_distributed_mode``), and the files that import it and scale the loss with
    what it returns: apex's state was the process's, so the GradScaler becomes the function's
    module state, which they read there. One component, rewritten together; broken where a
    file of the run uses the function otherwise."""
    by_path = {f.path: f for f in files}
    out: dict[str, Link] = {}
    for owner in files:
        inits = owner.members.get("initialize", [])
        if (
            owner.path in taken
            or len(inits) != 1
            or set(owner.members) - {"initialize", *_REGISTERS}
        ):
            continue
        home = _function(owner, inits[0])
        if not (isinstance(home, ast.FunctionDef) and home in owner.tree.body):
            continue
        places = _returned_models(owner, inits[0], home)
        readers = {  # each file that imports the function and scales: from which module
            f.path: (f, module)
            for f in files
            if f is not owner and f.path not in taken and "scale_loss" in f.members
            and "initialize" not in f.members
            and (module := _importing(f, owner, home.name)) is not None
        }  # fmt: skip
        if not places or not readers:
            continue
        item = Link(
            callers=tuple(readers),
            callee=owner.path,
            functions=(home.name,),
            calls=tuple(
                sum(
                    isinstance(p := f.names.parent(u), ast.Call) and p.func is u
                    for u in _uses(f, owner, home.name)
                )
                for f, _ in readers.values()
            ),
            spellings=tuple((module,) for _, module in readers.values()),
            shared=places,
            switch=_switch(owner, inits[0], home),
        )
        missing = (
            "where the rewrite does not follow it (a file that scales no loss with apex: the "
            "forwards of what it returns ran under apex's casts there, and no autocast would "
            "replace them)"
        )
        item = _checked(item, by_path, everything, missing)
        out.update((f, item) for f in item.files)
    return out


def _checked(
    item: Link,
    by_path: dict[str, _File],
    everything: Callable[[], Iterable[tuple[str, bytes]]],
    missing: str = "which would not pass the GradScaler",
) -> Link:
    """``item``, or ``item`` broken where its functions are used beyond the calls it updates
    (``missing``: what such a use lacks)."""
    callee = by_path[item.callee]
    functions = [(callee, f) for f in item.functions]
    for path, file, uses in _run_uses(everything, by_path, functions):
        if path == item.callee and not item.shared:
            # a call inside another of the functions passes the `scaler` that one receives
            # (pytorch-auto-drive: `train_schedule` saves through `save_checkpoint`)
            uses = {u: n for u, n in uses.items() if not _between_linked(file, u, item)}
        if path in item.callers:
            calls = [u for u in uses if isinstance(p := file.names.parent(u), ast.Call)
                     and p.func is u]  # fmt: skip
            extra = [u for u in uses if u not in calls]
            if len(calls) == item.calls[item.callers.index(path)] and not extra:
                continue
            where = extra[0] if extra else calls[0] if calls else None
        elif uses:
            where = next(iter(uses))
        else:
            continue
        reason = (
            f"`{uses[where]}` is also used at {item.shown(path)}:{where.lineno}, {missing}"
            if where is not None
            else f"the calls of {item.named} in {item.shown(path)} are not all found"
        )
        return replace(item, broken=reason)
    return item


def _between_linked(file: _File, use: ast.Name | ast.Attribute, item: Link) -> bool:
    """``use`` is a plain call (a bare name) made in the body of a module-level function of
    the link, not in a closure or class of it: the rewrite passes that function's new
    ``scaler`` there (``Handles._linked_setup``)."""
    call = file.names.parent(use)
    function = _function(file, use)
    return (
        isinstance(use, ast.Name)
        and isinstance(call, ast.Call)
        and call.func is use
        and isinstance(function, ast.FunctionDef)
        and function in file.tree.body
        and function.name in item.functions
    )


@dataclass(frozen=True)
class Sibling:
    """A module the initializing file reaches through its imports that still calls apex amp."""

    path: str
    member: str  # the first apex amp call there (``state_dict``, ``scale_loss``...)
    line: int
    importer: str  # the file that imports it
    import_line: int


_SIBLING_LIMIT = 300  # modules followed from one file: a project's own import graph


@dataclass
class _Graph:
    """The import edges and apex members of the modules one walk read, kept for the next walk
    (the pre-pass follows the imports of every initializing file of a run, which share most
    of their modules)."""

    edges: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    members: dict[str, tuple[str, int] | None] = field(default_factory=dict)
    exists: dict[str, bool] = field(default_factory=dict)
    trees: dict[str, ast.Module | None] = field(default_factory=dict)
    taken: dict[tuple[str, str], set[str] | None] = field(default_factory=dict)
    resolved: dict[ast.AST, list[str]] = field(default_factory=dict)

    def tree(self, path: str) -> ast.Module | None:
        """Each module parsed once a walk: the dormancy test asks every module of the
        program about every other (a scene-graph project's script: 1,209 parses of ~150
        files, 1 s)."""
        if path not in self.trees:
            self.trees[path] = _tree(path, _read(path))
        return self.trees[path]

    def targets_of(self, path: str) -> set[str]:
        """Every module file the imports of ``path`` may load."""
        return {target for target, _ in self.imports(path)}

    def targets(self, path: str, node: ast.Import | ast.ImportFrom) -> list[str]:
        """``_imported`` of one import statement of a tree kept in ``trees``, once."""
        if node not in self.resolved:
            self.resolved[node] = list(_imported(path, node, self.exists))
        return self.resolved[node]

    def imports(self, path: str) -> list[tuple[str, int]]:
        """(module file, line of the import) for each import of ``path`` found on disk."""
        found = self.edges.get(path)
        if found is None:
            tree = self.tree(path)
            found = self.edges[path] = [
                (target, node.lineno)
                for node in (_import_statements(tree.body) if tree is not None else ())
                for target in self.targets(path, node)
            ]
        return found

    def member(self, path: str) -> tuple[str, int] | None:
        if path not in self.members:
            self.members[path] = _apex_member(path)
        return self.members[path]


def apex_siblings(path: str, graph: _Graph | None = None) -> list[Sibling]:
    """The modules ``path`` imports, directly or through other modules on disk, that call
    apex amp but do not ``initialize`` it (a checkpoint module saving ``amp.state_dict()``, a
    training loop scaling the loss): they share this file's amp state, so they are migrated
    with it or it is not migrated. Read from disk, so ``fix`` on one file sees them too."""
    graph = graph if graph is not None else _Graph()
    found: list[Sibling] = []
    walked = [os.path.abspath(path)]
    for target, line, importer in _walk(walked[0], graph):
        walked.append(target)
        sibling = graph.member(target)
        if sibling is not None:
            found.append(Sibling(target, *sibling, importer, line))
    return [s for s in found if not _dormant(s.path, walked, graph)]


def _dormant(path: str, walked: list[str], graph: _Graph) -> bool:
    """The apex amp code of the module ``path`` cannot run in this program: every use sits in
    a module-level function (or class) that no module of the program takes from it, directly
    or through the module's own functions (ignite's ``supervised_training_step_apex``, behind
    ``create_supervised_trainer(amp_mode="apex")``, for a script that imports ``Engine``).
    Such a library keeps its apex path, reported as its own finding; the script's amp state is
    not its. False wherever that is not certain: a module object or star import taken, apex
    code at module level, a decorated function, a lookup by a computed name."""
    taken: set[str] = set()
    for module in walked:
        names = _taken_from(module, path, graph)
        if names is None:
            return False
        taken |= {n for n in names if _used_by(module, n, walked, graph, {path})}
    tree = graph.tree(path)
    if tree is None:
        return False
    # an imported module's `if __name__ == "__main__":` block does not run (DILBERT's
    # `run_lm_finetuning.py`, whose own `main` scales, imported for its dataset class)
    body = [s for s in tree.body if not _main_block(s)]
    holders = {}
    for statement in body:
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        holders[statement.name] = statement
    bound = {  # what module-level apex amp imports bind: read anywhere in the module
        a.asname or a.name.partition(".")[0]
        for statement in _module_level(tree.body)
        if isinstance(statement, ast.Import | ast.ImportFrom) and _uses_apex(statement)
        for a in statement.names
        if isinstance(statement, ast.ImportFrom) or a.name.partition(".")[0] == "apex"
    }
    if any(_reads(s, bound) for s in _module_level(body) if s not in holders.values()):
        return False  # apex code that runs at import
    apex = [s for s in holders.values() if _uses_apex(s) or _reads(s, bound) or _stray(s)]
    if not apex or any(s.decorator_list or _at_import(s, bound) for s in apex):
        return False
    dynamic = any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _DYNAMIC
        for n in ast.walk(tree)
    )
    if dynamic:
        return False
    reached: set[str] = set()
    pending = [n for n in taken if n in holders]
    pending += [  # what module-level code (and decorators, defaults) refers to runs or escapes
        n.id
        for s in body
        for part in ([s] if s not in holders.values() else [*s.decorator_list, *_defaults(s)])
        for n in ast.walk(part)
        if isinstance(n, ast.Name) and n.id in holders
    ]
    while pending:
        name = pending.pop()
        if name in reached:
            continue
        reached.add(name)
        pending += [
            n.id for n in ast.walk(holders[name]) if isinstance(n, ast.Name) and n.id in holders
        ]
    return not any(s.name in reached for s in apex)


def _stray(statement: ast.stmt) -> bool:
    """An apex amp call on a name no import binds (``amp.scale_loss`` after the import was
    deleted, DILBERT): apex code all the same, where it would run."""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name) and n.func.value.id == "amp"
        and n.func.attr in _MEMBERS
        for n in ast.walk(statement)
    )  # fmt: skip


# what loads a module (a call of it gives one)
_LOADING = (
    r"import_module|__import__|reload|module_from_spec|exec_module|load_module|get|"
    r"resolve_name|run_path|run_module"
)
_MAIN_TEST = re.compile(r"""__name__ *== *(['"])__main__\1|(['"])__main__\2 *== *__name__""")


def main_test(text: str) -> bool:
    """``__name__ == "__main__"`` (either side), as spelled in the source."""
    return _MAIN_TEST.fullmatch(text) is not None


def _main_block(statement: ast.stmt) -> bool:
    """``if __name__ == "__main__":``, with no ``else``."""
    test = statement.test if isinstance(statement, ast.If) and not statement.orelse else None
    return test is not None and main_test(ast.unparse(test))


# lookups by a computed name: what a module takes may be reached through them
_DYNAMIC = frozenset({"getattr", "globals", "eval", "exec", "vars"})


def _used_by(module: str, name: str, walked: list[str], graph: _Graph, seen: set[str]) -> bool:
    """``module``, which imports ``name``, reads it, or hands it on to a module of the program
    that does (a package ``__init__`` that re-exports timm's ``ApexScaler``, which nothing
    takes from it, does not use it). True wherever that is not certain."""
    tree = graph.tree(module)
    if tree is None or module in seen:
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.Attribute) and node.attr == name:  # `import m as e`: `e.name`
            return True
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return True
    if _looks_up(tree, name):
        return True
    for other in walked:
        names = _taken_from(other, module, graph)
        if names is None:  # the module object: what it spells (or may compute) counts
            if _spells_or_computes(graph.tree(other), name):
                return True
        elif name in names and _used_by(other, name, walked, graph, seen | {module}):
            return True
    return False


def _spells_or_computes(tree: ast.Module | None, name: str) -> bool:
    """``tree`` (as the run reads it: the plan's rewrite of the file planned) names ``name``
    (a name, an attribute, a string), or may compute a name (``getattr``, ``vars``, ``eval``,
    ``exec``, ``globals``, ``__dict__``). True where it cannot be read."""
    if tree is None:
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in (name, *_DYNAMIC):
            return True
        if isinstance(node, ast.Attribute) and node.attr in (name, "__dict__"):
            return True
        if isinstance(node, ast.Constant) and node.value == name:
            return True
    return False


def _looks_up(tree: ast.Module, name: str) -> bool:
    """Whether ``tree`` may reach ``name`` by a lookup: ``getattr(m, "name")``, or one by a
    computed name (``getattr(m, key)``, ``globals()``, ``eval``...). A ``getattr`` of another
    literal name (timm's ``getattr(torch.cuda.amp, "autocast")`` probe) reaches only that."""
    found = _LOOKUPS.get(tree)
    if found is None:
        found = _LOOKUPS[tree] = _lookups(tree)
    return any(literal in (None, name) for literal in found)


# made once per tree, for every name asked about; weak, so a file's tree goes once it is done
_LOOKUPS: weakref.WeakKeyDictionary[ast.Module, tuple[str | None, ...]] = (
    weakref.WeakKeyDictionary()
)


def _lookups(tree: ast.Module) -> tuple[str | None, ...]:
    """The lookups ``tree`` makes that may reach a module's names, each as the literal name it
    reads (None: a computed one)."""
    literal = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            literal[id(node.func)] = node.args[1].value
    objects = set()  # `vars(args)`, `getattr(self, key)`: a lookup on an object, whose name no
    modules = {  # import binds, reaches no module's names (a module's: `vars(utils)`)
        a.asname or a.name.partition(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    # nor one a module is stored in (49a, 50a: `MOD = importlib.import_module(...)`, through
    # `import_module as im`, `sys.modules[...]`, a dict of them): what import machinery gives,
    # followed through assignments (not an object a module builds: 51a's `JSONDecoder()`)
    machinery = {
        a.asname or a.name.partition(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
        if (n.module if isinstance(n, ast.ImportFrom) else a.name) == "importlib"
        or a.name.partition(".")[0] == "importlib"
    }  # (`sys` itself is no module store: `sys.argv`; `sys.modules[...]` is, by its text)
    loaders = {  # `from importlib import import_module as im`, `load = importlib.import_module`
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "importlib"
        for a in n.names
    } | {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Attribute)
        and n.value.attr in ("import_module", "__import__", "reload")
        for t in n.targets
        if isinstance(t, ast.Name)
    }  # fmt: skip
    stores = [
        (n.value, [t.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                   if isinstance(t, ast.Name)])
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None
    ]  # fmt: skip

    def holds(value: ast.expr) -> bool:
        """``value`` may be a module, or import machinery, or hold one: anything that names
        import machinery or a name that holds one (52a: `module_from_spec`, `sys.modules.get`,
        a conditional, a list); but a class or method a module gives, called, builds an object
        (51a: `cfgmod.JSONDecoder()`, `load("json").JSONDecoder()`)."""
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and not re.fullmatch(_LOADING, value.func.attr)
        ):
            return False
        if re.search(rf"{_LOADING}|\bmodules\b|importlib|\b(globals|locals|vars)\(",
                     ast.unparse(value)):  # fmt: skip
            return True
        return any(isinstance(n, ast.Name) and n.id in machinery | loaders for n in ast.walk(value))

    while True:
        held = {t for value, targets in stores if holds(value) for t in targets} - machinery
        if not held:
            break
        machinery |= held
    modules |= machinery
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "vars")
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id not in modules
            and id(node.func) not in literal  # (`getattr(obj, "name")` still names it)
        ):
            objects.add(id(node.func))
    return tuple(
        literal.get(id(node))
        for node in ast.walk(tree)
        if isinstance(node, ast.Name)
        and node.id in _DYNAMIC | {"__getattr__"}
        and id(node) not in objects
    )


def _at_import(holder: ast.stmt, bound: set[str]) -> bool:
    """A class whose body reads apex's amp when the module is imported: a method's decorator
    (``@amp.float_function`` on a layer's ``forward``), a default, a class attribute."""
    if not isinstance(holder, ast.ClassDef):
        return False
    for statement in holder.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            parts = [*statement.decorator_list, *_defaults(statement)]
            if any(_reads(ast.Expr(p), bound) or _uses_apex(ast.Expr(p)) for p in parts):
                return True
        elif _reads(statement, bound) or _uses_apex(statement) or _at_import(statement, bound):
            return True
    return False


def _reads(statement: ast.stmt, names: set[str]) -> bool:
    return bool(names) and any(
        isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
        for n in ast.walk(statement)
    )


def _defaults(statement: ast.stmt) -> list[ast.expr]:
    if isinstance(statement, ast.ClassDef):
        return [*statement.bases, *(k.value for k in statement.keywords)]
    arguments = statement.args
    return [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]


def _uses_apex(statement: ast.stmt) -> bool:
    """Whether ``statement`` imports apex's amp (``from apex import amp``, ``apex.amp...``,
    ``import apex``): the other apex modules (a norm, an optimizer) hold no amp state."""
    return any(
        (isinstance(n, ast.ImportFrom) and not n.level and n.module is not None and (
            (n.module == "apex" and any(a.name in ("amp", "*") for a in n.names))
            or n.module == "apex.amp" or n.module.startswith("apex.amp.")
        ))
        or (isinstance(n, ast.Import) and any(
            a.name == "apex" or a.name.startswith("apex.amp") for a in n.names
        ))
        for n in ast.walk(statement)
    )  # fmt: skip


def _taken_from(module: str, path: str, graph: _Graph) -> set[str] | None:
    """The names the module file ``module`` takes from the module file ``path`` by its
    imports (empty: it does not import it, or only runs it as a package on the way to another
    module); None where it may use any of them (``import`` of it, a star import, the module
    object taken ``from`` its package)."""
    if module == path:
        return set()
    if (module, path) not in graph.taken:
        graph.taken[module, path] = _taken(module, path, graph)
    return graph.taken[module, path]


def _taken(module: str, path: str, graph: _Graph) -> set[str] | None:
    tree = graph.tree(module)
    taken: set[str] = set()
    for node in _import_statements(tree.body) if tree is not None else ():
        if path not in graph.targets(module, node):
            continue
        if isinstance(node, ast.Import):
            used = _attributes_taken(tree, module, node, path, graph)
            if used is None:
                return None
            taken |= used
            continue
        base = next(
            (os.path.abspath(p) for p in _module_paths(module, node.level, node.module or "")
             if _isfile(p, graph.exists)),
            None,
        ) if node.module else _package_init(module, node.level)  # fmt: skip
        if base != path:
            if any(
                os.path.abspath(p) == path
                for a in node.names
                for p in _module_paths(
                    module, node.level, f"{node.module}.{a.name}" if node.module else a.name
                )
            ):  # fmt: skip
                return None  # the module object itself
            continue  # a package run on the way to a submodule
        if any(a.name == "*" for a in node.names):
            loaded = _star_loads(tree, module)
            if loaded is None:
                return None
            taken |= loaded
            continue
        taken |= {a.name for a in node.names}
    return taken


def _star_loads(tree: ast.Module, module: str) -> set[str] | None:
    """What a star import can give ``module`` that it uses: the bare names it reads (a star
    import binds nothing else). None where that is not certain: a package's ``__init__``
    (it may hand the names on), a lookup by a computed name (not ``vars(args)``, an object's
    attributes, which dvit's timm script passes beside `from timm.utils import *`: the 57th
    review)."""
    if os.path.basename(module) == "__init__.py":
        return None
    literal = {  # `getattr(m, "name")` reaches that name only (timm's `torch.cuda.amp` probe)
        id(n.func): n.args[1].value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id == "getattr"
        and len(n.args) >= 2
        and isinstance(n.args[1], ast.Constant)
        and isinstance(n.args[1].value, str)
    }
    of_objects = {  # (`vars()` alone reads this module's names; a getattr by a computed name
        id(n.func)  # may read them from the module object, whatever holds it: 58a's V6)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "vars"
        and len(n.args) == 1 and isinstance(n.args[0], ast.Name) and not n.keywords
    }  # fmt: skip
    loaded = set(literal.values())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and node.id in _DYNAMIC | {"__getattr__"}
            and id(node) not in literal
            and id(node) not in of_objects
        ):
            return None
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            loaded.add(node.id)
    return loaded


def _attributes_taken(
    tree: ast.Module, module: str, node: ast.Import, path: str, graph: _Graph
) -> set[str] | None:
    """``import a.b`` (or ``import a.b as m``) where ``a.b`` is the module ``path``: the
    attributes ``module`` reads from it (``a.b.f``); None where the module object is used
    otherwise (passed, returned, stored)."""
    prefixes = set()
    for alias in node.names:
        parts = alias.name.split(".")
        for i in range(1, len(parts) + 1):
            dotted = ".".join(parts[:i])
            if any(
                os.path.abspath(p) == path and _isfile(p, graph.exists)
                for p in _module_paths(module, 0, dotted)
            ):
                if alias.asname and i == len(parts):
                    prefixes.add(alias.asname)
                elif not alias.asname:
                    prefixes.add(dotted)
                else:
                    return None  # `import a.b.c as m`: `a.b` is not reachable through `m`
    parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    taken: set[str] = set()
    for n in ast.walk(tree):
        if not isinstance(n, ast.Name | ast.Attribute) or ast.unparse(n) not in prefixes:
            continue
        parent = parents.get(id(n))
        if isinstance(parent, ast.Attribute) and parent.value is n:
            taken.add(parent.attr)
        elif not isinstance(parent, ast.alias):
            return None
    return taken


def star_may_bind(path: str, node: ast.ImportFrom, name: str, depth: int = 0) -> bool:
    """Whether ``from m import *`` in the file ``path`` may bind ``name``: True unless ``m`` is
    on disk and neither binds it at module level (or exports it in ``__all__``), nor has a
    submodule of that name, nor may bind it through star imports of its own."""
    found = _from_module(path, node) if depth <= 8 else None
    if found is None:
        return True
    target, tree = found
    folder = os.path.dirname(target)
    if target.endswith("__init__.py") and (
        os.path.isfile(os.path.join(folder, f"{name}.py"))
        or os.path.isfile(os.path.join(folder, name, "__init__.py"))
    ):
        return True
    body = tree.body
    bound: set[str] = set()
    exported: set[str] | None = None
    for statement in _module_level(body):
        if isinstance(statement, ast.ImportFrom) and any(a.name == "*" for a in statement.names):
            if star_may_bind(target, statement, name, depth + 1):
                return True
            continue
        for n in ast.walk(statement) if not isinstance(statement, _DEFS) else [statement]:
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                bound.add(n.id)
            elif isinstance(n, ast.alias):
                bound.add(n.asname or n.name.partition(".")[0])
            elif isinstance(n, _DEFS):
                bound.add(n.name)
        if isinstance(statement, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in statement.targets
        ):
            try:
                exported = set(ast.literal_eval(statement.value))
            except ValueError:
                return True
    if name not in bound:
        return False
    return exported is None or name in exported


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run at module level: ``body`` and the blocks of its ``if``, ``try``,
    ``with`` and loops, but not function or class bodies."""
    for statement in body:
        if isinstance(statement, ast.If | ast.Try | ast.With | ast.For | ast.While):
            blocks = [statement.body, getattr(statement, "orelse", [])]
            blocks.append(getattr(statement, "finalbody", []))
            blocks += [h.body for h in getattr(statement, "handlers", [])]
            yield from _module_level([s for block in blocks for s in block])
        else:
            yield statement


def _package_init(module: str, level: int) -> str | None:
    """The ``__init__.py`` that ``from . import x`` (``level`` dots) reads from ``module``."""
    folder = os.path.dirname(os.path.abspath(module))
    for _ in range(max(level - 1, 0)):
        folder = os.path.dirname(folder)
    init = os.path.join(folder, "__init__.py")
    return init if os.path.isfile(init) else None


def apex_imported_beyond(path: str) -> tuple[str, int] | None:
    """The first module ``path`` imports, directly or through other modules on disk, that
    itself imports apex (``from apex import amp``, ``import apex_C`` is not apex): (its path,
    the line of that import there). An availability probe here still guards it."""
    graph = _Graph()
    for target, _, _ in _walk(os.path.abspath(path), graph):
        line = _apex_import_line(graph.tree(target))
        if line is not None:
            return target, line
    return None


def apex_imported_by_users(path: str, names: list[str]) -> tuple[str, int, str] | None:
    """The first other module of ``path``'s project on disk that uses one of its ``names``
    (an availability probe's function or flag) and itself imports apex: (its path, the line
    of that import, the name it uses). Such a module tests the probe's outcome to guard its
    own apex import. A project too large to scan counts as one."""
    users = users_on_disk(path, names)
    if users is None:
        return path, 0, names[0]
    for other, _, name in users:
        line = _apex_import_line(_tree(other, _read(other)))
        if line is not None:
            return other, line, name
    return None


def _apex_import_line(tree: ast.Module | None) -> int | None:
    """The line of ``tree``'s first import of apex (``import apex_C`` is not apex)."""
    for node in ast.walk(tree) if tree is not None else ():
        spelled = (
            [a.name for a in node.names] if isinstance(node, ast.Import)
            else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
            else []
        )  # fmt: skip
        if any(n == "apex" or n.startswith("apex.") for n in spelled):
            return node.lineno
    return None


def _walk(start: str, graph: _Graph) -> Iterator[tuple[str, int, str]]:
    """The modules on disk ``start`` imports, directly or through others, breadth first:
    (module, line of the import, the module importing it), each once."""
    seen = {start}
    queue = [start]
    while queue and len(seen) < _SIBLING_LIMIT:
        current = queue.pop(0)
        for target, line in graph.imports(current):
            if target not in seen:
                seen.add(target)
                queue.append(target)
                yield target, line, current


def derived_on_disk(path: str, name: str) -> Iterator[tuple[str, _File, bytes, list[ast.ClassDef]]]:
    """The classes of other modules of ``path``'s project on disk that derive from its class
    ``name``, directly or through each other: (file, its parse, its bytes, those classes),
    one module at a time."""
    todo = [(os.path.abspath(path), name)]
    seen = set(todo)
    while todo and len(seen) < 64:
        where, base = todo.pop(0)
        lines: dict[str, set[int]] = {}  # each user read once, whatever its number of uses
        for other, line, _ in users_on_disk(where, [base]) or []:
            lines.setdefault(other, set()).add(line)
        for other, used in lines.items():
            data = _read(other)
            file = _parsed(other, data)
            if file is None:
                continue
            classes = [n for n in ast.walk(file.tree) if isinstance(n, ast.ClassDef)]
            derived = [
                c for c in classes
                if (other, c.name) not in seen and any(
                    b.lineno in used and base in (getattr(b, "id", None), getattr(b, "attr", None))
                    for b in c.bases
                )
            ]  # fmt: skip
            grown = True
            while grown:  # and the classes of that module derived from those
                names = {c.name for c in derived}
                more = [
                    c for c in classes
                    if c not in derived and (other, c.name) not in seen
                    and any(getattr(b, "id", getattr(b, "attr", None)) in names for b in c.bases)
                ]  # fmt: skip
                derived += more
                grown = bool(more)
            for node in derived:
                seen.add((other, node.name))
                todo.append((other, node.name))
            if derived:
                yield other, file, data, derived


def apex_subclasses(path: str, name: str) -> list[tuple[str, int, str, str, int]]:
    """The classes of other modules of ``path``'s project on disk that derive from its class
    ``name``, directly or through each other, in a module that calls apex amp (a trainer
    family: the base initializes, a subclass scales in its own training step): (file, line
    and name of the class, the first apex amp call the module makes, as spelled, its line)."""
    found: list[tuple[str, int, str, str, int]] = []
    for other, file, data, derived in derived_on_disk(path, name):
        calls = sorted(  # and, in a module that names apex, those through a handle
            [(c.lineno, f"amp.{member.strip('.')}") for member, group in file.members.items()
             for c in group]
            + [(n.lineno, ast.unparse(n.func if isinstance(n, ast.Call) else n))
               for n, _ in (stray_calls(file.tree, file.names, other) if b"apex" in data
                            else ())]
        )  # fmt: skip
        if calls and other not in {f for f, *_ in found}:
            first = derived[0]
            found.append((other, first.lineno, first.name, calls[0][1], calls[0][0]))
    return found


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def _tree(path: str, data: bytes) -> ast.Module | None:
    if b"import" not in data:
        return None
    try:
        return ast.parse(data, path)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _import_statements(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements of a module at any depth, in ``ast.walk``'s order (breadth
    first): only statements are visited, as imports are never inside expressions."""
    pending = collections.deque(body)
    while pending:
        node = pending.popleft()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], _BLOCKS):
                pending.extend(value)


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def _imported(path: str, node: ast.AST, exists: dict[str, bool] | None = None) -> Iterator[str]:
    """The files on disk an import statement of ``path`` may load (the first that exists per
    module named)."""
    if isinstance(node, ast.Import):
        modules = [(0, alias.name) for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        modules = [(node.level, f"{base}.{a.name}" if base else a.name) for a in node.names]
        modules.append((node.level, base))
    else:
        return
    for dots, module in modules:
        if not module:
            continue
        parts = module.split(".")
        for i in range(1, len(parts)):  # importing a.b.c runs a/__init__.py and a/b/__init__.py
            init = next(
                (p for p in _module_paths(path, dots, ".".join(parts[:i]))
                 if p.endswith("__init__.py") and _isfile(p, exists)),
                None,
            )  # fmt: skip
            if init is not None:
                yield os.path.abspath(init)
        target = next((p for p in _module_paths(path, dots, module) if _isfile(p, exists)), None)
        if target is not None:
            yield os.path.abspath(target)


def _isfile(path: str, cache: dict[str, bool] | None) -> bool:
    if cache is None:
        return os.path.isfile(path)
    if path not in cache:
        cache[path] = os.path.isfile(path)
    return cache[path]


def _apex_member(path: str) -> tuple[str, int] | None:
    """The first apex amp call of a module without ``amp.initialize`` (None: no such call, or
    the module initializes amp itself)."""
    data = _read(path)
    if b"apex" not in data:
        return None
    file = _parsed(path, data)
    if file is not None and not file.members:
        stray = stray_calls(file.tree, file.names, path)  # a use apex's import does not reach
        if any(isinstance(n, ast.Call) and n.func.attr == "initialize" for n, _ in stray):
            return None  # it initializes amp itself (through `self.amp`): its own amp state
        if stray:
            node = stray[0][0]
            member = (
                node.func.attr if isinstance(node, ast.Call)
                else node.id if isinstance(node, ast.Name)
                else "amp"  # `return amp`: the module itself
            )  # fmt: skip
            return member, node.lineno
    if file is None or "initialize" in file.members:
        return None
    uses = [(m, c) for m, calls in file.members.items() for c in calls]
    for node in apex_references(file.names):  # `@amp.float_function`: its casts are apex's
        uses += [(q[len(APEX) :], node) for q in file.names.qualified(node) if q.startswith(APEX)][
            :1
        ]
    if not uses:
        return None
    member, use = min(uses, key=lambda mc: mc[1].lineno)
    return member, use.lineno


def initializing_imports(path: str) -> list[tuple[str, str, int]]:
    """The modules ``path`` imports (directly or through others) that initialize apex amp
    themselves and call it otherwise too (a base class that scales in its own methods): not
    siblings, which share this file's state, but apex code all the same. (module, its first
    such member, the line of that call)."""
    found = []
    for target, _, _ in _walk(os.path.abspath(path), _Graph()):
        data = _read(target)
        file = _parsed(target, data) if b"apex" in data else None
        if file is None or "initialize" not in file.members:
            continue
        uses = [(m, c) for m, calls in file.members.items() if m != "initialize" for c in calls]
        if uses:
            member, call = min(uses, key=lambda mc: mc[1].lineno)
            found.append((target, member, call.lineno))
    return found


_STATE_ONLY = {"state_dict", "load_state_dict"}


def keeps_state_only(path: str | None, text: str, qualified: str, keyword: str) -> str | None:
    """Why the function ``qualified`` (as the calling file at ``path`` names it; its own
    source is ``text``) may do more with the value passed to it as ``keyword=`` than keep its
    state: a generic checkpoint helper (``restart_from_checkpoint(path, **kwargs)`` calling
    ``value.load_state_dict(checkpoint[key])`` for each keyword) treats apex's module and a
    GradScaler alike, as both take one state dict and give one back (None: it does only that)."""
    dots = len(qualified) - len(qualified.lstrip("."))
    module, _, name = qualified[dots:].rpartition(".")
    if not module and not dots:
        source = text
    elif path is None:
        return "it is defined in another module, which a file read alone cannot see"
    else:
        found = _module_file(path, dots, module)
        if found is None:
            return f"its module `{qualified.rpartition('.')[0]}` is not on disk here"
        source = _read(found).decode("utf-8", "replace")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "its module does not parse"
    defs = _defs(tree, name)
    if len(defs) != 1:
        return f"`{name}` is not one function of its module"
    function = defs[0]
    named = [a.arg for a in (*function.args.posonlyargs, *function.args.args,
                             *function.args.kwonlyargs)]  # fmt: skip
    if keyword in named or function.args.kwarg is None:
        return f"it takes `{keyword}` as a parameter of its own, not as one of its `**` keywords"
    return _state_only_uses(function, function.args.kwarg.arg)


def _state_only_uses(function: ast.FunctionDef, kwargs: str) -> str | None:
    """Why ``function`` may use a value of its ``**kwargs`` other than to save or restore its
    state (None: each value is only tested against None and asked ``state_dict()`` or
    ``load_state_dict(state)``)."""
    parents = {id(c): p for p in ast.walk(function) for c in ast.iter_child_nodes(p)}
    values: set[str] = set()
    for node in ast.walk(function):
        nested = ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
        if isinstance(node, nested) and node is not function:
            return f"it defines `{getattr(node, 'name', 'lambda')}` inside, not followed"
        if not (isinstance(node, ast.Name) and node.id == kwargs):
            continue
        attribute = parents.get(id(node))
        call = parents.get(id(attribute))
        member = attribute.attr if isinstance(attribute, ast.Attribute) else None
        loop = parents.get(id(call))
        if member in ("keys", "__len__") or (
            isinstance(attribute, ast.Compare) and node is not attribute.left
        ):
            continue  # which keys there are, or `key in kwargs`
        if (
            member in ("items", "values")
            and isinstance(call, ast.Call)
            and isinstance(loop, ast.For)
            and loop.iter is call
        ):
            target = loop.target
            if member == "items" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
                target = target.elts[1]
            if isinstance(target, ast.Name):
                values.add(target.id)
                continue
        return f"it uses `{kwargs}` at its line {node.lineno} other than to loop over its values"
    if not values:
        return f"it does not loop over the values of `{kwargs}`"
    for node in ast.walk(function):
        if not isinstance(node, ast.Name) or node.id not in values:
            continue
        parent = parents.get(id(node))
        if isinstance(node.ctx, ast.Store) and isinstance(parent, ast.Tuple | ast.For):
            continue  # the loop's own target
        if isinstance(parent, ast.Compare) and len(parent.ops) == 1:
            other = parent.comparators[0] if parent.left is node else parent.left
            if isinstance(parent.ops[0], ast.Is | ast.IsNot) and (
                isinstance(other, ast.Constant) and other.value is None
            ):
                continue
        call = parents.get(id(parent))
        if (
            isinstance(parent, ast.Attribute)
            and parent.attr in _STATE_ONLY
            and isinstance(call, ast.Call)
            and call.func is parent
            and not any(isinstance(a, ast.Starred) for a in call.args)
            and (
                (parent.attr == "state_dict" and not call.args and not call.keywords)
                or (parent.attr == "load_state_dict" and len(call.args) == 1)
            )
        ):
            continue  # a keyword of `load_state_dict` (`strict=False`) raises in both alike
        return (
            f"it uses a value of `{kwargs}` at its line {node.lineno} other than to save or "
            "restore its state"
        )
    return None
