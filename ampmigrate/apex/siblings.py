"""The import graph of one file's project: the modules it may run that call apex amp
(``apex_siblings``: their casts act once this file initializes amp), the names a module takes
from another through its imports, and whether a module's apex use is dormant (defined, never
reached)."""

from __future__ import annotations

import ast
import os
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field

from ampmigrate.apex.ondisk import (
    _DEFS,
    _import_statements,
    _imported,
    _isfile,
    _module_level,
    _package_init,
    _read,
    _tree,
)
from ampmigrate.apex.strays import (
    _MEMBERS,
    APEX,
    _from_module,
    _parsed,
    apex_references,
    stray_calls,
)
from ampmigrate.scalerflow import _module_paths


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
    by_name: dict[str, bool] = field(default_factory=dict)  # the text may load modules by name

    def tree(self, path: str) -> ast.Module | None:
        """Each module parsed once a walk: the dormancy test asks every module of the
        program about every other (a scene-graph project's script: 1,209 parses of ~150
        files, 1 s)."""
        if path not in self.trees:
            data = _read(path)
            self.trees[path] = _tree(path, data)
            self.by_name[path] = b"import_" in data
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
            statements = [*_import_statements(tree.body)] if tree is not None else []
            loads = self.by_name.get(path)  # (read with the tree: not read again; a tree
            if loads is None:  # set from outside, the rewritten file's, has no text here)
                loads = b"import_" in _read(path)
            if tree is not None and loads:  # (`importlib.import_module`)
                statements += loaded_by_name(tree)
            found = self.edges[path] = [
                (target, node.lineno) for node in statements for target in self.targets(path, node)
            ]
        return found

    def member(self, path: str) -> tuple[str, int] | None:
        if path not in self.members:
            self.members[path] = _apex_member(path)
        return self.members[path]


def loaded_by_name(tree: ast.Module) -> list[ast.Import]:
    """``importlib.import_module("model")`` and ``__import__("model")`` with a literal name,
    as the imports they are (the 82nd review's c05, c08: a layer module reached that way was
    left on apex while the script that initializes was rewritten)."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and len(node.args) == 1
            and not node.keywords
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and not node.args[0].value.startswith(".")
        ):
            found.append(
                ast.Import(names=[ast.alias(node.args[0].value)], lineno=node.lineno, col_offset=0)
            )
    return found


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
