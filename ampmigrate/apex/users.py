"""Who else uses a file's functions: the other files of its project on disk that call (or
import, or fetch by ``getattr``) them, where the level comes from, whether any file initializes
amp: a signature the rewrite changes must have every caller in the run, or stay."""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator

from ampmigrate.apex.ondisk import (
    _SCAN_LIMIT,
    _import_statements,
    _project_files,
    _read,
    _tree,
    module_tree,
    project_folder,
)
from ampmigrate.apex.siblings import _apex_import_line, _Graph, _walk
from ampmigrate.apex.strays import _File, _parsed, stray_calls
from ampmigrate.scalerflow import _module_paths, _stem


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


def initializes_anywhere(path: str) -> bool:
    """Some file of ``path``'s project on disk may initialize apex amp (``initialize(`` or the
    old ``init(`` in a file that names apex, or ``amp.initialize(`` on a module handed in:
    the 73rd review's p1a, told "no file initializes"); True where too many files to look
    at."""
    files = _project_files(path, every_folder=True, through_top=True)
    if files is None:
        return True
    # (and the modules it imports, wherever they are: the 82nd review's `scripts/train.py`
    # imports `lib.setup_mod`, a folder beside its own, after a `sys.path` insert)
    files = [*files, *sorted(_Graph().targets_of(os.path.abspath(path)) - set(files))]
    return any(
        (b"apex" in data and (b".initialize(" in data or b".init(" in data))
        or b"amp.initialize(" in data
        for data in map(_read, files)
    )


def initializer_imported(path: str) -> str | None:
    """The module (relative to ``path``'s folder) that ``path`` imports, directly or through
    one more module, and that calls ``amp.initialize``; None: none does."""
    graph = _Graph()
    here = os.path.abspath(path)
    near = sorted(graph.targets_of(here))
    for target in [*near, *sorted({t for n in near for t in graph.targets_of(n)} - set(near))]:
        data = _read(target)
        if target == here or b"apex" not in data or b"initialize(" not in data:
            continue
        parsed = _parsed(target, data)
        if parsed is not None and "initialize" in parsed.members:
            return os.path.relpath(target, os.path.dirname(here))
    return None


def key_readers_on_disk(path: str, keys: set[str]) -> list[tuple[str, int, str]] | None:
    """(file, line, key) where another file of ``path``'s project that names no apex reads or
    tests one of the checkpoint ``keys`` (``ckpt["amp"]``, ``.get("amp")``, ``"amp" in ckpt``):
    a reader the rewrite does not rename (the 82nd review's `resume.py`). None: too many
    files to look at."""
    path = os.path.abspath(path)
    files = _project_files(path, every_folder=True, through_top=True)
    if files is None:
        return None
    found = []
    quoted = [q for k in keys for q in (f'"{k}"'.encode(), f"'{k}'".encode())]
    for other in files:
        data = _read(other) if other != path else b""
        if b"apex" in data or b"load" not in data or not any(q in data for q in quoted):
            continue
        tree = _tree(other, data)
        loaded = _loaded_names(tree) if tree is not None else set()
        for node in ast.walk(tree) if tree is not None else ():
            key, container = None, None
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key, container = node.slice.value, node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "pop", "setdefault")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                key, container = node.args[0].value, node.func.value
            elif (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Constant)
                and len(node.ops) == 1
                and isinstance(node.ops[0], ast.In | ast.NotIn)
            ):
                key, container = node.left.value, node.comparators[0]
            if isinstance(key, str) and key in keys and _a_load(container, loaded):
                found.append((other, node.lineno, key))
    return sorted(found)


def _loaded_names(tree: ast.Module) -> set[str]:
    """The names the module binds to what a ``load`` call returns (``ckpt = torch.load(p)``):
    checkpoints, not configurations (a `cfg["amp"]` flag is no checkpoint key)."""
    return {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and _a_load(n.value, set())
        for t in n.targets
        if isinstance(t, ast.Name)
    }


def _a_load(node: ast.AST | None, loaded: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in loaded
    return isinstance(node, ast.Call) and (
        getattr(node.func, "attr", None) or getattr(node.func, "id", "")
    ).endswith("load")


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


# what builds a compiled extension: `torch.utils.cpp_extension.load(name=...)`, its
# `load_inline`, a `CUDAExtension`/`CppExtension` of a setup script
_BUILDERS = frozenset({"load", "load_inline", "CUDAExtension", "CppExtension"})


def built_extensions(path: str) -> frozenset[str]:
    """The compiled extensions the project of ``path`` builds itself, by name (Megatron's
    ``fused_kernels`` builds ``scaled_masked_softmax_cuda``, a name apex's setup uses too), and
    its own modules of such a name (``syncbn.py``): the project's code, not apex's. A copy of
    apex in the tree is not the project."""
    folder = project_folder(path)
    if folder not in _BUILT:
        _BUILT[folder] = _built(path)
    return _BUILT[folder]


_BUILT: dict[str, frozenset[str]] = {}


def _built(path: str) -> frozenset[str]:
    from ampmigrate.engine.discover import _is_apex_copy

    names: set[str] = set()
    for other in _project_files(path, every_folder=True) or ():
        stem = os.path.splitext(os.path.basename(other))[0]
        names.add(os.path.basename(os.path.dirname(other)) if stem == "__init__" else stem)
        data = _read(other)
        if b"cpp_extension" not in data and b"Extension(" not in data:
            continue
        if any(_is_apex_copy(f) for f in _folders_of(other)):
            continue
        tree = _tree(other, data)
        for node in ast.walk(tree) if tree is not None else ():
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called not in _BUILDERS:
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            if called.startswith("load") and not {"sources", "cpp_sources"} & set(keywords):
                continue  # (`torch.load(...)`, `json.load(...)`: not a build)
            named = keywords.get("name", node.args[0] if node.args else None)
            if isinstance(named, ast.Constant) and isinstance(named.value, str):
                names.add(named.value.rpartition(".")[2])
    return frozenset(names)


def _folders_of(path: str) -> Iterator[str]:
    folder = os.path.dirname(path)
    while True:
        yield folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return
        folder = parent


def type_tests_on_disk(path: str, qualified: str) -> tuple[str, int] | None:
    """The first other module of ``path``'s project on disk that tests an object's type
    against the apex class ``qualified`` (``isinstance(optimizer, FusedAdam)``, imported there
    on its own): (its path, the line). Such a test stays on apex's class where no torch class
    has its meaning, and an object this file builds with torch's would fail it. A project too
    large to scan counts as one (line 0)."""
    files = _project_files(path, every_folder=True)
    if files is None:
        return path, 0
    package, _, cls = qualified.rpartition(".")
    area = ".".join(package.split(".")[:2])  # (`apex.optimizers.fused_adam.FusedAdam` too)
    word = cls.encode()
    for other in files:
        if other == os.path.abspath(path):
            continue
        data = _read(other)
        if word not in data or (b"isinstance" not in data and b"issubclass" not in data):
            continue
        tree = _tree(other, data)
        if tree is None:
            continue
        line = _type_test(tree, area, cls)
        if line is not None:
            return other, line
    return None


def _type_test(tree: ast.Module, area: str, cls: str) -> int | None:
    bound: dict[str, str] = {}  # a local name -> the apex path it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.partition(".")[0] == "apex":
                bound.update((a.asname or a.name, f"{node.module}.{a.name}") for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.partition(".")[0] == "apex":
                    bound[a.asname or "apex"] = a.name if a.asname else "apex"

    def dotted(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Name):
            return bound.get(expr.id)
        if isinstance(expr, ast.Attribute):
            base = dotted(expr.value)
            return None if base is None else f"{base}.{expr.attr}"
        return None

    for node in ast.walk(tree):
        tested: list[ast.expr] = []
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("isinstance", "issubclass")
            and len(node.args) == 2
        ):
            second = node.args[1]
            tested = list(second.elts) if isinstance(second, ast.Tuple) else [second]
        elif (  # `type(opt) is FusedAdam` (either side, `==` too)
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Is | ast.IsNot | ast.Eq | ast.NotEq)
        ):
            tested = [node.left, node.comparators[0]]
        for one in tested:
            name = dotted(one)
            if name and name.rpartition(".")[2] == cls and name.startswith(area + "."):
                return node.lineno
    return None


_LOOKUPS = (b"getattr(", b"vars(", b"__dict__", b"import_module(")


def looked_up_by_name(path: str) -> str | None:
    """Another file of ``path``'s project that imports it (by its module's or its package's
    name) and looks names up at run time (``getattr(pkg, name)``, ``vars(pkg)[...]``,
    ``__dict__``, ``import_module``): it may call any function of ``path`` no text names.
    None where none does (or the project is too large to look: the caller decides)."""
    files = _project_files(path, through_top=True) or ()
    stem = _stem(path).encode()
    package = os.path.basename(os.path.dirname(os.path.abspath(path))).encode()
    for other in files:
        if other == os.path.abspath(path):
            continue
        data = _read(other)
        if (stem in data or package in data) and any(w in data for w in _LOOKUPS):
            return other
    return None
