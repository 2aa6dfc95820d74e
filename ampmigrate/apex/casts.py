"""apex's cast decorators in a model's layers (maskrcnn-benchmark: ``nms =
amp.float_function(_C.nms)``, ``@amp.float_function`` on ``ROIAlign.forward``), migrated with the
files that initialize amp.

Once amp was initialized (O1), such a function received its float16 CUDA tensor arguments as
float32; before, or without apex, it was a plain call. ``torch.amp.custom_fwd(device_type="cuda",
cast_inputs=torch.float32)`` casts where autocast is on, which in the migrated program is where
apex's casting was on. So a layer module can move only with the files that initialize amp and
reach it through their imports: rewritten alone, its kernels would receive float16 under apex;
left alone, they would receive float16 under autocast. The pre-pass joins each such module with
every initializing file of the run that reaches it (on ``ast``); all of them are rewritten, or
none (:func:`ampmigrate.apex.check.settle_pairs`). ``with amp.disable_casts():`` (semantic-
segmentation's RMI loss, whose Cholesky does not take float16) is such a use too: apex's casting
switched off in a region is ``torch.amp.autocast("cuda", enabled=False)``.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from ampmigrate.apex.linkbase import _listed, shown_among
from ampmigrate.apex.ondisk import _import_statements, _isfile, _read, _tree, project_folder
from ampmigrate.apex.siblings import _Graph, _walk, apex_siblings
from ampmigrate.apex.strays import APEX, _apex_uses, _parsed
from ampmigrate.catalog import Rule
from ampmigrate.engine.names import Names
from ampmigrate.engine.source import Source
from ampmigrate.findings import Edit, Finding, Fix, ImportEdit
from ampmigrate.scalerflow import _module_paths

# `half_function` is not here: apex cast float64 arguments to float16, custom_fwd leaves them
DTYPES = {"float_function": "torch.float32"}


@dataclass(frozen=True)
class Casts:
    """Layer modules whose cast decorators become ``torch.amp.custom_fwd`` and the files of the
    run that initialize amp and import them (directly or through other modules): one
    component."""

    initializing: tuple[str, ...]
    layers: tuple[str, ...]
    broken: str | None = None  # why the files are not rewritten together
    broken_by: str | None = None

    @property
    def files(self) -> tuple[str, ...]:
        return (*self.initializing, *self.layers)

    def shown(self, path: str) -> str:
        return shown_among(self.files, path)

    def others(self, path: str) -> str:
        mine = os.path.abspath(path)
        return _listed([f"`{self.shown(f)}`" for f in self.files if f != mine])


def key(path: str) -> tuple[str, str]:
    """Where a file's component is kept among the links of the run."""
    return ("casts", os.path.abspath(path))


_CUSTOM_FWD = (
    "where autocast is on, floating CUDA tensor arguments become float32 as under apex, but "
    "float64 ones stay float64 (apex cast them to float32 too) and those inside dicts and other "
    "iterables are cast as well (apex cast only in lists and tuples); the function runs with "
    "autocast off, where apex kept casting inside it: torch ops there on autocast's float16 "
    "list run in float32; custom_fwd also sets `_dtype` and `_fwd_used_autocast` on its first "
    "argument"
)
_PLAIN = (
    "`{}` is a plain function: a call whose first argument cannot take attributes (a "
    "number, a string, by keyword) raises under custom_fwd; the calls in this run pass an "
    "object first"
)
_CUSTOM_BWD = (
    "`backward` runs with its forward's autocast state (custom_bwd), where apex cast its "
    "float16 CUDA tensor arguments to float32 and kept casting inside it: its gradients "
    "arrive as the dtype of forward's outputs, and torch ops there on autocast's float16 list "
    "run as forward ran them"
)
_DISABLED = (
    "where amp was never initialized, apex's `disable_casts` raised AttributeError; the region "
    "now runs"
)


def _native(member: str) -> str:
    return f'device_type="cuda", cast_inputs={DTYPES[member]}'


def layer_edits(
    tree: ast.Module, names: Names, source: Source
) -> tuple[Fix, list[str], list[str]] | None:
    """The fix that gives each apex use of a layer module its native form (``torch.amp.
    custom_fwd``, or an autocast region switched off for ``with amp.disable_casts():``), what
    it does line by line, and the behaviour changes it accepts; None where a use is anything
    else (another member, an alias, a value), or apex is imported otherwise than by a plain
    module-level import."""
    uses = _apex_uses(names)
    if not uses:
        return None
    edits: list[Edit] = []
    said: list[str] = []
    changes: list[str] = []
    for node in uses:
        member = _member(names, node)
        start, end = source.span(node)
        parent = names.parent(node)
        if member == "disable_casts":  # apex's handle switched off: autocast switched off
            if not (
                isinstance(node, ast.Call)
                and not node.args
                and not node.keywords
                and isinstance(parent, ast.withitem)
                and parent.context_expr is node
                and parent.optional_vars is None
            ):
                return None
            text = 'torch.amp.autocast("cuda", enabled=False)'
            changes.append(_DISABLED)
        elif member not in DTYPES:
            return None
        elif isinstance(node, ast.Call):
            if len(node.args) != 1 or node.keywords or isinstance(node.args[0], ast.Starred):
                return None
            wrapped = source.segment(node.args[0])
            text = f"torch.amp.custom_fwd({wrapped}, {_native(member)})"
            changes.append(_CUSTOM_FWD)
        else:
            if not (
                isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef)
                and node in parent.decorator_list
            ):
                return None  # an alias or a value: its calls are elsewhere
            if parent.name == "backward" and isinstance(names.parent(parent), ast.ClassDef):
                # an autograd Function's backward: custom_fwd's casts belong to forward
                text = 'torch.amp.custom_bwd(device_type="cuda")'
                changes.append(_CUSTOM_BWD)
            else:
                text = f"torch.amp.custom_fwd({_native(member)})"
                changes.append(_CUSTOM_FWD)
                if not isinstance(names.parent(parent), ast.ClassDef):
                    changes.append(_PLAIN.format(parent.name))
        edits.append(Edit(start, end, text))
        said.append(f"`{source.segment(node)}` at line {node.lineno} -> `{text}`")
    removed: list[ImportEdit] = []
    for binding in names.imports():
        stmt, alias = binding.node, binding.alias
        module = alias.name if isinstance(stmt, ast.Import) else stmt.module or ""
        if not (module == "apex" or module.startswith("apex.")):
            continue
        if stmt not in tree.body or (isinstance(stmt, ast.ImportFrom) and stmt.level):
            return None  # guarded, in a function, or relative: not this plain form
        if isinstance(stmt, ast.ImportFrom):
            if (stmt.module, alias.name) != ("apex", "amp"):
                return None
            removed.append(ImportEdit("apex", "amp", alias.asname))
        else:
            if alias.name != "apex":
                return None
            removed.append(ImportEdit("apex", None, alias.asname))
        bound = alias.asname or alias.name.partition(".")[0]
        reads = [n for n in names.spelled(bound) if isinstance(n, ast.Name)]
        if len(reads) != len([u for u in uses if _root(u) == bound]):
            return None  # the module is read otherwise too
    # torch.amp.custom_fwd/custom_bwd (device_type=) are new in torch 2.4: a project that
    # declares an older torch gets no fix (the 25th review's MEGA under `--target-torch 2.3`)
    custom = any(c in (_CUSTOM_FWD, _CUSTOM_BWD) for c in changes)
    fix = Fix("unsafe", edits=tuple(edits), add_imports=frozenset({"torch"}),
              remove_imports=tuple(removed), min_torch=(2, 4) if custom else ())  # fmt: skip
    return fix, said, list(dict.fromkeys(changes))


def _member(names: Names, node: ast.AST) -> str:
    """The apex amp member a use names (``float_function``)."""
    node = node.func if isinstance(node, ast.Call) else node
    found = [q[len(APEX) :] for q in names.qualified(node) if q.startswith(APEX)]
    return found[0] if found else ""


def _root(node: ast.AST) -> str:
    node = node.func if isinstance(node, ast.Call) else node
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def components(files: Iterable[tuple[str, bytes]]) -> dict[tuple[str, str], Casts]:
    """The components of the run: each layer module that only casts, joined with every file
    of the run that initializes amp and reaches it."""
    files = list(files)
    candidates = {os.path.abspath(p): s for p, s in files if casting(s)}
    graph = _Graph()
    initializing = [
        os.path.abspath(p)
        for p, s in files
        if (b".initialize(" in s or b"amp.init(" in s)
        and not (never_casts(s) and not _initializer_below(os.path.abspath(p), graph))
    ] if candidates else []  # fmt: skip
    if not initializing or not candidates:
        return {}
    convertible: dict[str, bool] = {}
    edges: dict[str, set[str]] = {}
    for start in initializing:
        for sibling in apex_siblings(start, graph):
            if sibling.path not in candidates or sibling.path in initializing:
                continue
            if sibling.path not in convertible:
                convertible[sibling.path] = _convertible(sibling.path, candidates[sibling.path])
            if convertible[sibling.path]:
                edges.setdefault(start, set()).add(sibling.path)
                edges.setdefault(sibling.path, set()).add(start)
    reached = {p for group in edges.values() for p in group}
    orphans = [
        p for p in sorted(candidates)
        if p not in reached and p not in initializing
        and convertible.setdefault(p, _convertible(p, candidates[p]))
    ]  # fmt: skip
    for start in initializing if orphans else ():
        if loads_by_name(start, graph) is not None:
            root = os.path.join(project_folder(start), "")  # (what its program can load)
            for orphan in orphans:  # it may run those of its project: moved together, or
                if orphan.startswith(root):  # neither (a run over several projects joined
                    edges.setdefault(start, set()).add(orphan)  # one's casts with another's
                    edges.setdefault(orphan, set()).add(start)  # loader)
    out: dict[tuple[str, str], Casts] = {}
    seen: set[str] = set()
    for start in edges:
        if start in seen:
            continue
        group, queue = {start}, [start]
        while queue:
            for other in edges[queue.pop()]:
                if other not in group:
                    group.add(other)
                    queue.append(other)
        seen |= group
        item = Casts(
            initializing=tuple(sorted(f for f in group if f in initializing)),
            layers=tuple(sorted(f for f in group if f not in initializing)),
        )
        unfit = _unfit_call(item, candidates, files, graph)
        if unfit is not None:
            item = replace(item, broken=unfit)
        out.update((key(f), item) for f in item.files)
    return out


def never_casts(data: bytes) -> bool:
    """Every ``initialize`` of the file is at a literal O2 or O3: apex's cast decorators act
    only once O1 patched torch's functions (its decorator handle; O2/O3 leave it unset), so in
    that program they were plain calls, as ``custom_fwd`` is without autocast: the file does
    not bind the layers it reaches (the 57th review: an O2 script held a detectron2 fork's O1
    trainer and its `float_function` layers on apex). False wherever another call or name may
    initialize at O1 (`init`, an alias, `initialize` not called at O2/O3)."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    amp: set[str] = set()  # the names apex's amp module is read through
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("apex"):
            if any(a.name in ("initialize", "init", "*") for a in node.names):
                return False  # (an initializer under another name: 58a's `init_amp`)
            amp |= {a.asname or a.name for a in node.names if a.name == "amp"}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "apex.amp" and a.asname:
                    amp.add(a.asname)
                elif a.name.partition(".")[0] == "apex" and not a.asname:
                    amp.add("apex.amp")
    found = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in amp | {"initialize", "init"}:
            if node.id not in amp or not _only_tested(node, parents):
                return False  # (the module handed on, or a name that may initialize)
        elif isinstance(node, ast.Attribute) and node.attr in ("initialize", "init"):
            if ast.unparse(node.value) not in amp:
                continue  # (`dllogger.init(...)`, `torch.nn.init`: not apex's)
            call = parents.get(id(node))  # (`amp.init()`, `AMP.init()`: maybe O1)
            if not (
                node.attr == "initialize"
                and isinstance(call, ast.Call) and call.func is node and _literal_o2(call)
            ):  # fmt: skip
                return False
            found = True
    return found


def _only_tested(node: ast.Name, parents: dict) -> bool:
    """A read of apex's amp that cannot initialize: an attribute of it (its calls are read
    apart), the guard `amp = None`, `amp is None`, `if amp:` (60a's R2: the optional-apex
    import), `getattr(amp, "__version__")`."""
    above = parents.get(id(node))
    if isinstance(node.ctx, ast.Store) or isinstance(above, ast.Attribute | ast.Compare):
        return True
    if isinstance(above, ast.If | ast.While | ast.IfExp | ast.Assert) and above.test is node:
        return True
    if isinstance(above, ast.BoolOp | ast.UnaryOp):
        return True
    return (
        isinstance(above, ast.Call) and isinstance(above.func, ast.Name)
        and above.func.id in ("getattr", "hasattr") and len(above.args) >= 2
        and above.args[0] is node and isinstance(above.args[1], ast.Constant)
        and above.args[1].value not in ("initialize", "init")
    )  # fmt: skip


def _initializer_below(path: str, graph: _Graph) -> bool:
    """A module ``path`` imports (directly or through others) may initialize amp at O1: an O2
    script that calls such a helper (59a's `setup_o1` in `amp_utils.py`) holds its layers."""
    for target, _, _ in _walk(path, graph):
        data = _read(target)
        if (
            b"apex" in data
            and (b".initialize(" in data or b"amp.init(" in data)
            and not (never_casts(data))
        ):  # (a module with no apex: `meter.initialize()` is no initializer, 60a's R1)
            return True
    return False


def _literal_o2(call: ast.Call) -> bool:
    keywords = {k.arg: k.value for k in call.keywords}
    level = keywords.get("opt_level")
    return (
        "patch_torch_functions" not in keywords
        and None not in keywords  # (no `**kwargs`)
        and isinstance(level, ast.Constant)
        and level.value in ("O2", "O3")
    )


def _plain_casts(file) -> list[tuple[str, int]]:
    """(name, line) of the functions of a layer module that an apex cast member wraps outside
    a class body, decorated or called (``kern = amp.float_function(_kernel)``, the 82nd
    review's c16; a loss, not an autograd Function's ``forward`` nor a module's method): their
    first argument is the caller's, on which ``custom_fwd`` sets attributes."""
    found = []
    for use in _apex_uses(file.names):
        parent = file.names.parent(use)
        if (
            isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef)
            and use in parent.decorator_list
            and not isinstance(file.names.parent(parent), ast.ClassDef)
        ):
            found.append((parent.name, parent.lineno))
        if (  # (a use that is called is the call itself)
            isinstance(use, ast.Call)
            and isinstance(parent, ast.Assign)
            and parent.value is use
            and not isinstance(file.names.parent(parent), ast.ClassDef)
        ):
            found += [(t.id, parent.lineno) for t in parent.targets if isinstance(t, ast.Name)]
    return found


def _unfit_call(
    item: Casts, candidates: dict[str, bytes], files: list[tuple[str, bytes]], graph: _Graph
) -> str | None:
    """Why ``custom_fwd`` cannot take the place of apex's cast on a plain function of the
    component's layers (None: it can): a call of it in the run that passes no positional
    argument, or a constant first (``margin_loss(0.2, feat)``, ``pair_loss(feat=f)``), where
    ``custom_fwd`` raises (it sets ``_dtype`` on ``args[0]``) and apex called it."""
    trees: dict[str, ast.Module | None] = {}  # each file of the run parsed once, if at all

    def tree(path: str, data: bytes) -> ast.Module | None:
        if path not in trees:
            try:
                trees[path] = ast.parse(data)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                trees[path] = None
        return trees[path]

    run = {os.path.abspath(p) for p, _ in files}  # (and the modules the walks read, where
    read = [(p, _read(p)) for p in graph.edges if p not in run]  # the calls are: c16's model)
    for layer in item.layers:
        file = _parsed(layer, candidates[layer])
        for name, defined in _plain_casts(file) if file is not None else ():
            for path, data in [*files, *read]:
                if name.encode() not in data:
                    continue
                here = os.path.abspath(path)
                near = graph.targets_of(here)  # (and through a package that re-exports it)
                if here != layer and not (
                    layer in near or any(layer in graph.targets_of(t) for t in near)
                ):
                    continue  # (another project's `nms` in the same run: the benchmark's odtk)
                caller = tree(path, data)
                for node in ast.walk(caller) if caller is not None else ():
                    func = node.func if isinstance(node, ast.Call) else None
                    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                    if called != name:
                        continue
                    first = next((a for a in node.args), None)
                    if (
                        first is None
                        or isinstance(first, _NO_ATTRIBUTES)
                        or (
                            isinstance(first, ast.UnaryOp)
                            and isinstance(first.operand, ast.Constant)
                        )
                    ):
                        constant = isinstance(first, ast.Constant | ast.UnaryOp)
                        how = "no positional argument" if first is None else (
                            f"{'the constant ' if constant else ''}`{ast.unparse(first)}` first"
                        )  # fmt: skip
                        return (
                            f"`{name}` ({item.shown(layer)}:{defined}) is a plain "
                            f"function, and {item.shown(os.path.abspath(path))}:{node.lineno} "
                            f"calls it with {how}: its torch.amp form, `torch.amp.custom_fwd`, "
                            "sets attributes on the first positional argument and raises there "
                            "(apex did not); run its body under "
                            '`torch.amp.autocast("cuda", enabled=False)` on `.float()` inputs, '
                            "by hand"
                        )
    return None


# a first argument that takes no attributes (custom_fwd sets `_dtype` on it): a constant, a
# display (apex cast inside lists and tuples: the 82nd review's c17), a splat of unknown ones
_NO_ATTRIBUTES = (
    ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp,
    ast.DictComp, ast.GeneratorExp, ast.JoinedStr, ast.Lambda, ast.Starred,
)  # fmt: skip


def _loads_by_name(path: str) -> bool:
    """``path`` imports a module whose name it computes (``importlib.import_module(args.arch)``,
    ``__import__(name)``): no import edge shows which, so any layer module of the run may be
    among the code it runs."""
    data = _read(path)
    if b"import_module" not in data and b"__import__" not in data:
        return False
    tree = _tree(path, data)
    return tree is not None and any(
        isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))
        )
        and node.args
        and not isinstance(node.args[0], ast.Constant)
        for node in ast.walk(tree)
    )


def loads_by_name(path: str, graph: _Graph | None = None) -> str | None:
    """The module, ``path`` or one it imports (directly or through others), that imports
    modules by a computed name; None: none does."""
    start = os.path.abspath(path)
    walked = (t for t, _, _ in _walk(start, graph if graph is not None else _Graph()))
    return next((p for p in (start, *walked) if _loads_by_name(p)), None)


CAST_MEMBERS = ("float_function", "half_function", "promote_function", "disable_casts")
_SCAN_LIMIT = 3000  # .py files read under a loader's folder


def cast_modules_under(folder: str) -> list[str]:
    """The modules under ``folder`` (its whole tree, skipping hidden and virtual-environment
    folders, up to ``_SCAN_LIMIT`` files) that use one of apex's cast members: what code that
    imports modules by a computed name may run, where no import edge shows it."""
    found: list[str] = []
    seen = 0
    for directory, subdirs, names in os.walk(folder):
        subdirs[:] = sorted(
            d for d in subdirs if not d.startswith(".") and d not in ("venv", "__pycache__")
        )
        for name in sorted(n for n in names if n.endswith(".py")):
            seen += 1
            if seen > _SCAN_LIMIT:
                return found
            path = os.path.join(directory, name)
            if _casts_in(path):
                found.append(os.path.abspath(path))
    return found


def _casts_in(path: str) -> bool:
    """The module uses one of apex's cast members."""
    data = _read(path)
    if not (casting(data) and b"apex" in data):
        return False
    file = _parsed(path, data)
    return file is not None and any(
        _member(file.names, use) in CAST_MEMBERS for use in _apex_uses(file.names)
    )


# Packages that are never part of a run (installed, or a checkout on the path) whose layers
# cast through apex in their published sources: maskrcnn-benchmark's `layers` (`nms =
# amp.float_function(_C.nms)`, `@amp.float_function` on ROIAlign's and ROIPool's forward) and
# the forks that kept those layers under their own package name. Read when the package itself
# is not found outside site-packages (there its files are read instead).
KNOWN_CASTING = {
    name: "its `layers` (`nms`, `ROIAlign`, `ROIPool`) cast through `amp.float_function` in "
    "maskrcnn-benchmark's published sources (the package is not found outside "
    "site-packages here, so its own files were not read)"
    for name in ("maskrcnn_benchmark", "mega_core", "wetectron")
}
_outside: dict[str, str | None] = {}  # a package's casts, read once a process


def outside_casts(path: str, graph: _Graph) -> Iterator[tuple[str, str, int, str]]:
    """(importing module, package, line, where it casts) for each package that ``path`` or a
    module it imports (on disk) imports from outside the run and whose layers cast through apex
    (``@amp.float_function``): once amp was initialized their CUDA kernels got float32
    arguments, which only their own ``custom_fwd`` keeps under torch's autocast."""
    start = os.path.abspath(path)
    seen: set[str] = set()
    for module in (start, *(t for t, _, _ in _walk(start, graph))):
        tree = graph.tree(module)
        for node in _import_statements(tree.body) if tree is not None else ():
            if isinstance(node, ast.ImportFrom):
                tops = [node.module.split(".")[0]] if node.module and not node.level else []
            else:
                tops = [alias.name.split(".")[0] for alias in node.names]
            for top in tops:
                if top in seen or top in sys.stdlib_module_names or top in ("apex", "torch"):
                    continue
                seen.add(top)
                if any(_isfile(p, graph.exists) for p in _module_paths(module, 0, top)):
                    continue  # (on disk beside the project: the walk reads it)
                where = _package_casts(top)
                if where is not None:
                    yield module, top, node.lineno, where


def _package_casts(top: str) -> str | None:
    if top not in _outside:
        _outside[top] = _read_package(top)
    return _outside[top]


def _read_package(top: str) -> str | None:
    """Where the package ``top`` casts through apex: its own files where it is found outside
    site-packages (a development install, the usual one for a package that builds CUDA
    kernels), else what its published sources are known to do (``KNOWN_CASTING``)."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError, AttributeError):
        spec = None
    roots: list[str] = []
    if spec is not None and spec.submodule_search_locations:
        roots = list(spec.submodule_search_locations)
    elif spec is not None and spec.origin and spec.origin.endswith(".py"):
        roots = [spec.origin]  # a module of one file
    roots = [r for r in roots if not _installed(r)]
    if not roots:
        return KNOWN_CASTING.get(top)
    root = roots[0]
    files = cast_modules_under(root) if os.path.isdir(root) else [root] * _casts_in(root)
    if not files:
        return None
    shown = os.path.relpath(files[0], os.path.dirname(root))
    return f"its `{shown}` casts through apex (`amp.float_function` and the like)"


def _installed(path: str) -> bool:
    """Inside a site-packages folder (a wheel's copy, not a development checkout)."""
    return bool({"site-packages", "dist-packages"} & set(os.path.normpath(path).split(os.sep)))


def casting(data: bytes) -> bool:
    """The bytes of a file that may hold apex casts (a necessary condition)."""
    return b"_function" in data or b"disable_casts" in data


def _convertible(path: str, data: bytes) -> bool:
    file = _parsed(path, data)
    if file is None:
        return False
    try:
        source = Source.from_bytes(data, path)
    except (UnicodeDecodeError, LookupError, ValueError):
        return False
    return layer_edits(file.tree, file.names, source) is not None


def layer_findings(
    tree: ast.Module, source: Source, names: Names, rules: list[Rule], casts: Casts
) -> list[Finding]:
    """AMP303 for a layer module of a component: the fix, or why the component is refused."""
    from ampmigrate.apex.verdict import refusal

    uses = _apex_uses(names)
    if not uses:
        return []  # (rewritten: a second pass)
    planned = layer_edits(tree, names, source)
    anchor = uses[0]
    if casts.broken or planned is None:
        why = (
            f"its apex casts can only become their torch.amp forms together with "
            f"{casts.others(source.path)}, the files that initialize amp and reach it: "
            f"{casts.broken}"
            if casts.broken
            else "its apex casts are not all of the forms that have a rewrite"
        )
        message = refusal([f"line {anchor.lineno}: {why}"])
        return [Finding(rule.code, message, anchor) for rule in rules]
    fix, said, changes = planned
    message = (
        f"apex O1 can be rewritten to torch.amp with {casts.others(source.path)} (migrated "
        "together): " + "; ".join(said) + "; behaviour change: " + "; ".join(changes)
    )
    return [Finding(rule.code, message, anchor, fix) for rule in rules]
