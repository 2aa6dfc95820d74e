"""The oldest torch a project says it supports, read from its own requirement declarations.

A fix that needs a newer torch than the project's floor would break its users on the older
versions it promises to support, so such a fix is graded unsafe. The floor comes from the
nearest project above the checked files: ``[project] dependencies`` and optional dependencies
in pyproject.toml, ``install_requires`` / ``extras_require`` in setup.cfg or setup.py (literal
lists only, or a module-level requirement table such as Hugging Face's ``_deps`` that they are
built from; setup.py is parsed, never run), Poetry's ``[tool.poetry.dependencies]``,
``requirements*.txt``, the files of a ``requirements/`` folder, and a conda
``environment.yml`` (``pytorch=1.0.1``, and its ``pip:`` list). Where several declare torch, the
lowest lower bound wins (the project runs on all of them).
"""

from __future__ import annotations

import ast
import functools
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ampmigrate.config import search_start

MARKERS = ("pyproject.toml", "setup.cfg", "setup.py")


@dataclass(frozen=True)
class Floor:
    version: tuple[int, ...]
    source: str  # where it was declared: "requirements.txt: torch>=2.1"

    def __str__(self) -> str:
        return f"{'.'.join(map(str, self.version))} (from {self.source})"


# ``name op version, op version ...`` with plain release versions, nothing else (no extras,
# markers, URL, wildcard, pre-release, ``===``): what most declarations are, read without
# importing packaging (~14 ms of a run's start-up); anything else goes through packaging.
_SPEC = r"(>=|<=|==|!=|~=|>|<)[ \t]*(\d+(?:\.\d+)*)"
_PLAIN = re.compile(
    rf"[ \t]*([A-Za-z0-9][A-Za-z0-9._-]*)[ \t]*((?:{_SPEC}(?:[ \t]*,[ \t]*{_SPEC})*)?)[ \t]*"
)
_PLAIN_SPEC = re.compile(_SPEC)
# `pytorch` is PyPI's placeholder that tells to install torch: a requirement on it declares the
# torch its author meant (WMSeg's `pytorch == 1.1.0`, the 81st review), as conda's name does
_TORCH_NAMES = ("torch", "pytorch")


def _plain_bound(requirement: str) -> tuple[tuple[int, ...] | None] | None:
    """``(bound,)`` for a plain requirement (as packaging would read it), None when it is not
    plain enough to be sure."""
    match = _PLAIN.fullmatch(requirement)
    if match is None:
        return None
    name, specs = match.group(1, 2)
    bounds = []
    for operator, version in _PLAIN_SPEC.findall(specs):
        if operator == "~=" and "." not in version:
            return None  # invalid for packaging: let it say so
        if operator in (">=", ">", "~=", "=="):
            bounds.append(_release(version))
    if name.lower() not in _TORCH_NAMES:
        return (None,)
    return (max(bounds) if bounds else None,)


def _release(version: str) -> tuple[int, ...]:
    """(major, minor) of a dotted release (a part too long for ``int`` counts as 0: the 79th
    review's 4,300-digit version aborted the run)."""
    parts = [int(p) if len(p) < 100 else 0 for p in version.split(".")]
    return tuple((*parts, 0)[:2])


def lower_bound(requirement: str) -> tuple[int, ...] | None:
    """The lowest torch release (major, minor) a requirement string admits, if it is torch's
    and has a lower bound (``>=``, ``>``, ``~=``, ``==``)."""
    if "torch" not in requirement.lower():
        return None  # not torch's: skip packaging's import (~30 ms of every run's start-up)
    plain = _plain_bound(requirement)
    return plain[0] if plain is not None else packaging_bound(requirement)


def packaging_bound(requirement: str) -> tuple[int, ...] | None:
    """``lower_bound`` by packaging's reading: any requirement syntax (the reference for the
    fast path above)."""
    found = _requirement_bound(requirement, _TORCH_NAMES)
    return (found[1] or None) if found is not None else None


def _requirement_bound(requirement: str, names: tuple[str, ...]) -> tuple[str, tuple] | None:
    """(name, lowest release (major, minor) it admits, or ()) when ``requirement`` is one of
    ``names``: packaging's reading of any requirement syntax."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Requirement(requirement)
    except InvalidRequirement:
        return None
    name = parsed.name.lower().replace("_", "-")
    if name not in names:
        return None
    bounds = []
    for spec in parsed.specifier:
        if spec.operator in (">=", ">", "~=", "==", "==="):
            try:
                bounds.append(tuple((*Version(spec.version.removesuffix(".*")).release, 0)[:2]))
            except (InvalidVersion, ValueError):
                continue
    return name, max(bounds) if bounds else ()


def _declared(directory: Path) -> Iterable[tuple[str, str]]:
    """(file name, requirement string) for every requirement the project declares."""
    if (directory / "pyproject.toml").is_file():
        project = _table(_pyproject(directory).get("project"))
        yield from (("pyproject.toml", r) for r in _strings(project.get("dependencies")))
        for extra in _table(project.get("optional-dependencies")).values():
            yield from (("pyproject.toml", r) for r in _strings(extra))
    setup_cfg = directory / "setup.cfg"
    if setup_cfg.is_file():
        import configparser  # only where a setup.cfg is

        parser = configparser.ConfigParser()
        try:
            parser.read(setup_cfg, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            parser = configparser.ConfigParser()
        values = [parser.get("options", "install_requires", fallback="")]
        if parser.has_section("options.extras_require"):
            values += [v for _, v in parser.items("options.extras_require")]
        for value in values:
            yield from (("setup.cfg", line.strip()) for line in value.splitlines() if line.strip())
    setup_py = directory / "setup.py"
    if setup_py.is_file():
        yield from (("setup.py", r) for r in _setup_py_requirements(setup_py))
    for requirements in _requirement_files(directory):
        for line in _lines(requirements):
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith(("#", "-")):
                yield requirements.relative_to(directory).as_posix(), line


_POETRY_SPEC = re.compile(r"(\^|~=|~|>=|<=|==|!=|>|<|=)?\s*v?(\d+(?:\.\d+)*)")
_CONDA_TORCH = (
    re.compile(  # `- pytorch=1.0.1`, `- "pytorch>=1.0"`, `- pytorch 1.0.*`, `pytorch-cpu`
        r"""^\s*-\s*["']?(?:[\w.-]+::)?(?:py)?torch(?:-cpu|-gpu)?"""
        r"""\s*(=|==|>=|>|~=|\s)\s*(\d+(?:\.\d+)*)[^\s#]*\s*(?:#.*)?$"""
    )
)


def poetry_bound(constraint: str) -> tuple[int, ...] | None:
    """The lowest release a Poetry constraint admits (``^1.0``, ``~1.2``, ``>=1.0,<2``,
    ``1.0.1``, ``^1.4 || ^2.0``); None where some alternative has no lower bound (``*``)."""
    lowest = []
    for alternative in constraint.split("||"):
        bounds = [
            _release(version)
            for operator, version in _POETRY_SPEC.findall(alternative)
            if operator not in ("<", "<=", "!=")
        ]
        if not bounds:
            return None
        lowest.append(max(bounds))
    return min(lowest) if lowest else None


def _poetry_torch(pyproject: dict) -> Iterable[tuple[tuple[int, ...], str]]:
    """(bound, source) for torch in Poetry's dependency tables (main, ``dev-dependencies``,
    groups; a string, a table with a ``version``, or a list of such tables for several
    markers)."""
    tool = pyproject.get("tool")
    poetry = tool.get("poetry") if isinstance(tool, dict) else None
    if not isinstance(poetry, dict):
        return  # (`poetry = "legacy"`: no table, the 77th review's crash)
    tables = [poetry.get("dependencies"), poetry.get("dev-dependencies")]  # (the project runs
    tables += [_table(g).get("dependencies") for g in _table(poetry.get("group")).values()]
    for table in tables:  # its tests and tools on these too: the lowest counts)
        if isinstance(table, dict):
            yield from _poetry_table(table)


def _poetry_table(table: dict) -> Iterable[tuple[tuple[int, ...], str]]:
    for name, value in table.items():
        if name.lower() not in _TORCH_NAMES:  # (`pytorch`, the 83rd review)
            continue
        for item in value if isinstance(value, list) else [value]:
            spec = item.get("version") if isinstance(item, dict) else item
            if isinstance(spec, str) and (bound := poetry_bound(spec)) is not None:
                yield bound, f'pyproject.toml: {name} = "{spec}"'


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _conda_files(directory: Path) -> list[Path]:
    return [
        f for f in (directory / "environment.yml", directory / "environment.yaml") if f.is_file()
    ]


def _conda_torch(directory: Path) -> Iterable[tuple[tuple[int, ...], str]]:
    """(bound, source) for ``pytorch=1.0.1`` in a conda environment file (``=`` takes the
    versions that start with it: its lower bound is the version itself), read by line, as
    nothing of YAML beyond a list item is needed; its ``pip:`` list is requirement strings."""
    for path in _conda_files(directory):
        for line in _lines(path):
            match = _CONDA_TORCH.match(line)
            if match:
                version = match.group(2)
                yield (
                    _release(version),
                    (f"{path.name}: {line.strip().removeprefix('-').strip()}"),
                )
            elif line.strip().startswith("- ") and "torch" in line:
                requirement = line.strip()[2:].split(" #", 1)[0].strip()
                if (bound := lower_bound(requirement)) is not None:
                    yield bound, f"{path.name}: {requirement}"


@functools.lru_cache(maxsize=8)
def _pyproject(directory: Path) -> dict:
    """The project's pyproject.toml, parsed ({} where there is none or it does not parse)."""
    try:
        return tomllib.loads((directory / "pyproject.toml").read_text("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _requirement_files(directory: Path) -> list[Path]:
    """``requirements*.txt``/``.in`` and every ``.txt``/``.in`` of a ``requirements/`` folder
    (InternLM pins torch in ``requirements/torch.txt``), as ``discover`` reads them."""
    found = [*directory.glob("requirements*.txt"), *directory.glob("requirements*.in")]
    folder = directory / "requirements"
    if folder.is_dir():
        found += [*folder.rglob("*.txt"), *folder.rglob("*.in")]
    return sorted(  # (not a Jupyter copy under `.ipynb_checkpoints`, 50a; `build/` is a name)
        f for f in found
        if f.is_file() and ".ipynb_checkpoints" not in f.relative_to(directory).parts[:-1]
    )  # fmt: skip


def module_values(tree: ast.Module) -> dict[str, ast.expr]:
    """What each module-level ``name = ...`` of a setup.py assigns (its last assignment):
    requirement lists are often built there and passed by name."""
    return {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _table(value: object) -> dict:
    """``value`` where it is a TOML table, else {} (a malformed file is no crash: the 77th and
    79th reviews' `poetry = "legacy"`, `group = ["dev"]`)."""
    return value if isinstance(value, dict) else {}


def _strings(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _setup_py_requirements(path: Path) -> list[str]:
    """String literals of ``install_requires=[...]`` / ``extras_require={...: [...]}``, and of
    a module-level list assigned to a name they use."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return []
    lists = module_values(tree)
    out: list[str] = []
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and type(n.ctx) is ast.Load}
    for name, value in lists.items():
        # a requirement table the setup() arguments are built from through code (Hugging Face:
        # `_deps = ["torch>=1.0", ...]`, `deps = {...}`, `deps_list("torch")`)
        if name in loaded and isinstance(value, ast.List | ast.Tuple) and _is_table(name):
            out += [
                e.value
                for e in value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
    for node in ast.walk(tree):
        if not isinstance(node, ast.keyword) or node.arg not in (
            "install_requires",
            "extras_require",
        ):
            continue
        value = (
            lists.get(node.value.id, node.value) if isinstance(node.value, ast.Name) else node.value
        )
        values = value.values if isinstance(value, ast.Dict) else [value]
        for item in values:
            if isinstance(item, ast.Name):
                item = lists.get(item.id, item)
            if isinstance(item, ast.List | ast.Tuple):
                out += [
                    e.value
                    for e in item.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                ]
    return out


def _is_table(name: str) -> bool:
    """A module-level name that holds requirement strings by its name (``_deps``,
    ``REQUIRED``, ``install_requires``, ``requirements``)."""
    lowered = name.lower()
    return any(word in lowered for word in ("deps", "require", "dependencies"))


def project_dir(paths: Sequence[Path]) -> Path | None:
    """The nearest directory above the paths (or cwd) that is a project: it has a
    pyproject.toml, setup.cfg, setup.py, requirements*.txt or a conda environment file (else,
    a requirements/ folder)."""
    directory = search_start(paths)
    candidates = [directory, *directory.parents]
    for candidate in candidates:
        if (
            any((candidate / m).is_file() for m in MARKERS)
            or any(candidate.glob("requirements*.txt"))
            or _conda_files(candidate)  # (the 77th review: below a `tools/requirements/`)
        ):
            return candidate
    # a `requirements/` folder alone marks a project only where nothing above does (49a: a
    # `tools/requirements/` hid the root's pyproject.toml and its torch floor)
    return next((c for c in candidates if _requirement_files(c)), None)


def find(paths: Sequence[Path]) -> Floor | None:
    """The torch floor of the project the paths belong to, or None if it declares none."""
    directory = project_dir(paths)
    if directory is None:
        return None
    found = [
        (bound, f"{name}: {r}") for name, r in _declared(directory) if (bound := lower_bound(r))
    ]
    found += [*_conda_torch(directory), *_poetry_torch(_pyproject(directory))]
    if not found:
        return None
    version, source = min(found)
    return Floor(version, source)


# TensorFlow bundles Keras 3 from 2.16 on; before, Keras 2
_KERAS3_TF = (2, 16)
_TF_NAMES = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos")


def keras_target(paths: Sequence[Path]) -> tuple[int, str] | None:
    """The Keras the project's oldest supported TensorFlow ships (2 below TF 2.16), or the one
    it declares itself (``keras``, ``tf-keras``): a Keras-3-only fix would break a project that
    still supports Keras 2. None: it declares neither."""
    directory = project_dir(paths)
    if directory is None:
        return None
    found: list[tuple[int, str]] = []
    for file, requirement in _declared(directory):
        lowered = requirement.lower()
        if "keras" not in lowered and "tensorflow" not in lowered:
            continue  # packaging is imported only for these
        bound = _requirement_bound(requirement, (*_TF_NAMES, "keras", "tf-keras"))
        if bound is None:
            continue
        name, version = bound
        if name == "tf-keras":
            found.append((2, f"{file}: {requirement}"))
        elif name == "keras" and version:
            found.append((3 if version >= (3, 0) else 2, f"{file}: {requirement}"))
        elif name in _TF_NAMES and version:
            found.append((3 if version >= _KERAS3_TF else 2, f"{file}: {requirement}"))
    return min(found) if found else None
