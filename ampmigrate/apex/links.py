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
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from ampmigrate.apex.ondisk import _defs, _import_statements, _module_file, _read
from ampmigrate.apex.siblings import _Graph, _walk, apex_siblings
from ampmigrate.apex.strays import APEX, _File, _function, _parsed
from ampmigrate.apex.users import _resolves, _uses, apex_subclasses, users_on_disk
from ampmigrate.scalerflow import _module_paths, _stem


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
_REGISTERS = frozenset(
    {"register_float_function", "register_half_function", "register_promote_function"}
)


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
