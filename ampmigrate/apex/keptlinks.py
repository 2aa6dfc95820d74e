"""apex's module kept on an object (`args.amp = amp`) by several scripts that call one
shared training function through it: one component, rewritten together."""

from __future__ import annotations

import ast
import os

from ampmigrate.apex.linkbase import Link
from ampmigrate.apex.strays import APEX, _File
from ampmigrate.apex.users import users_on_disk


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
