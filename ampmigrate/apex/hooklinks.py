"""A runner's hook that scales (mmcv style) and the script that initializes: no call links
the two files, apex's process-wide state does; and the runner's checkpoint helpers that
save its state."""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable
from dataclasses import replace

from ampmigrate.apex.linkbase import Link, _run_uses
from ampmigrate.apex.scalelinks import _linked_functions
from ampmigrate.apex.siblings import _Graph, _walk, apex_siblings
from ampmigrate.apex.strays import _File, _function
from ampmigrate.scalerflow import _stem


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
    """The class of a runner hook, or of a trainer the script builds with the initialized
    model and optimizer (fast-reid's ``AMPTrainer``, the 66th review): every apex call of the
    file (``scale_loss``, and ``master_params`` beside it) is in methods of one module-level
    class, which makes its GradScaler in ``__init__`` (its own, or one the rewrite adds where
    it has none and no decorator); the file never initializes amp."""
    cls = _one_class(file, {"scale_loss", "master_params"})
    if cls is None or (
        cls.decorator_list
        and not any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in cls.body)
    ):
        return None
    return cls.name


def _has_init(file: _File, name: str) -> bool:
    cls = next(s for s in file.tree.body if isinstance(s, ast.ClassDef) and s.name == name)
    return any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in cls.body)


def _family(file: _File, name: str) -> set[str]:
    """``name`` and the classes of ``file`` derived from it, directly or through each other
    (a ``LoggingAMPTrainer(AMPTrainer)`` beside it, the 70th review's p23)."""
    found = {name}
    grown = True
    while grown:
        grown = False
        for node in file.tree.body:
            if (
                isinstance(node, ast.ClassDef)
                and node.name not in found
                and any(ast.unparse(b).rpartition(".")[2] in found for b in node.bases)
            ):
                found.add(node.name)
                grown = True
    return found


def _builds(file: _File, names: set[str]) -> bool:
    """``file`` builds an object of one of the classes ``names`` with what ``amp.initialize``
    returned (``AMPTrainer(model, data, optimizer)``, ``(AMPTrainer if fp16 else
    SimpleTrainer)(...)``, a name bound to either) and derives no class from them: a class
    without ``__init__`` is linked as a trainer the script builds only so (a base class that
    the initializing class derives from is a family, the 37th review's DeepFakeDetection;
    timm's `ApexScaler()` is a helper of the apex branch that native AMP replaces)."""
    initialized = set()
    for call in file.members.get("initialize", []):
        assign = file.names.parent(call)
        if isinstance(assign, ast.Assign):
            initialized |= {
                ast.unparse(n) for t in assign.targets for n in ast.walk(t)
                if isinstance(n, ast.Name | ast.Attribute)
            }  # fmt: skip

    def named(node: ast.expr, aliases: frozenset[str] = frozenset()) -> bool:
        if isinstance(node, ast.IfExp):
            return named(node.body, aliases) or named(node.orelse, aliases)
        return (isinstance(node, ast.Name) and node.id in names | aliases) or (
            isinstance(node, ast.Attribute) and node.attr in names
        )

    # a name bound to the class, or to a choice of it (`cls = AMPTrainer if fp16 else
    # SimpleTrainer`, then `cls(model, ...)`: the 70th review's p26)
    aliases = frozenset(
        n.targets[0].id for n in ast.walk(file.tree)
        if isinstance(n, ast.Assign) and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Name) and named(n.value)
    )  # fmt: skip

    def given(call: ast.Call) -> bool:
        values = [*call.args, *(k.value for k in call.keywords)]
        return any(
            isinstance(n, ast.Name | ast.Attribute) and ast.unparse(n) in initialized
            for v in values
            for n in ast.walk(v)
        )

    for node in ast.walk(file.tree):
        if isinstance(node, ast.ClassDef) and any(named(b) for b in node.bases):
            return False  # (the caller's own class derives from it: a family)
    return any(
        isinstance(n, ast.Call) and named(n.func, aliases) and given(n) for n in ast.walk(file.tree)
    )


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
    built = {
        f.path: _family(f, hooks[f.path])
        for f in files
        if f.path in hooks and not _has_init(f, hooks[f.path])
    }
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
        hooked = {h for h in siblings & hooks.keys() if h not in built or _builds(caller, built[h])}
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
