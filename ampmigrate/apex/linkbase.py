"""A link between files of one run (the pre-pass pairs them: rewritten together or not at all):
what it holds, how each side sees it, and the check that every use of its functions in the run
is one the rewrite updates."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from ampmigrate.apex.ondisk import _imported, _tree
from ampmigrate.apex.siblings import loaded_by_name
from ampmigrate.apex.strays import _File, _function, _parsed
from ampmigrate.apex.users import _uses


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
            return f"the class `{self.hook}` that scales the loss"
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
    for path, data in everything():  # (the 82nd review's a09: `importlib.import_module(
        if b"import_module" not in data and b"__import__" not in data:  # "msetup").setup(...)`)
            continue
        tree = by_path[path].tree if path in by_path else _tree(path, data)
        for node in loaded_by_name(tree) if tree is not None else ():
            if item.callee in _imported(os.path.abspath(path), node):
                return replace(item, broken=(
                    f"{item.shown(os.path.abspath(path))}:{node.lineno} loads "
                    f"{item.shown(item.callee)} by name (`{node.names[0].name}`), where the "
                    f"rewrite cannot follow its uses of {item.named}"
                ))  # fmt: skip
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
