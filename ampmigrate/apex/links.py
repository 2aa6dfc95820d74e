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
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from ampmigrate.apex.hooklinks import _hook_links
from ampmigrate.apex.keptlinks import _kept_links
from ampmigrate.apex.linkbase import Link, _argument, _checked, _parameters, _spellings
from ampmigrate.apex.ondisk import _defs
from ampmigrate.apex.scalelinks import _linked_functions, delegated
from ampmigrate.apex.statelinks import _shared_links
from ampmigrate.apex.strays import _File, _function, _parsed
from ampmigrate.apex.users import _resolves, apex_subclasses


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
