"""AMP316: an ``apex`` requirement in a dependency file once no Python file of the project imports
apex.

Dependency files (``requirements*.txt``/``.in``, ``pyproject.toml``, ``setup.cfg``, ``setup.py``)
are read, never executed (``setup.py`` through ``ast``: literal lists only). Whether the
requirement is dead is a fact of the project, not of one file: after the run's fixes, every
Python file under the dependency file's project (its git work tree, else its folder) is looked
at, also those the run did not check (a pre-commit run names a few files only; an excluded file
still runs and still needs apex). The finding is reported only when none imports apex.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ampmigrate.catalog import Rule
from ampmigrate.engine.discover import discover, is_dependency_file
from ampmigrate.engine.settings import FileResult, Settings
from ampmigrate.findings import Diagnostic
from ampmigrate.floor import module_values
from ampmigrate.noqa import Suppressions

CODE = "AMP316"
Item = tuple[str, bytes, frozenset[str]]
NVIDIA_APEX = "github.com/nvidia/apex"


class RequirementsError(ValueError):
    """A dependency file that cannot be read; the message says where."""


@dataclass(frozen=True)
class Requirement:
    """An apex requirement: where it is (1-based line and character columns, end exclusive),
    its text, and what it installs: ``"pypi"`` (the name alone: PyPI's unrelated package),
    ``"nvidia"`` (NVIDIA's repository), ``"source"`` (another URL or a local path)."""

    line: int
    col: int
    end_col: int
    text: str
    origin: str


def check(tree: ast.Module, source: Any, names: Any, rules: list[Rule], settings: Settings) -> list:
    """Nothing per Python file: the requirement is judged over the run (:func:`settle`)."""
    return []


# --- what a requirement names ------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_EGG = re.compile(r"[#&]egg=([A-Za-z0-9._-]+)")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _url_origin(url: str, local: bool = False) -> str | None:
    """What the URL (or, ``local``, the folder) ``url`` installs, if it is apex: ``#egg=apex``,
    else a repository path segment (a folder's last one) named apex."""
    egg = _EGG.search(url)
    if egg:
        if _normal(egg.group(1)) != "apex":
            return None
    else:
        path = url.split("#")[0].split("?")[0].replace("\\", "/").rstrip("/")
        segments = path.split("://", 1)[-1].split("/")
        segments = segments[-1:] if local else segments[1:]  # a URL's host is no repository
        names = {_normal(s.partition("@")[0].removesuffix(".git")) for s in segments}
        if "apex" not in names:
            return None
    return "nvidia" if NVIDIA_APEX in url.lower() else "source"


def classify(text: str) -> str | None:
    """The origin of the requirement ``text`` (PEP 508, a URL or a path, as pip takes them) if
    it is apex, else None."""
    text = text.strip()
    if not text:
        return None
    if "://" in text.split("@")[0] or text.startswith(("git+", "hg+", "svn+", "bzr+")):
        return _url_origin(text)
    name = _NAME.match(text)
    if name and _normal(name.group()) == "apex":
        rest = text[name.end() :].lstrip()
        if rest.startswith("["):
            rest = rest.partition("]")[2].lstrip()
        if rest.startswith("@"):  # apex @ git+https://github.com/NVIDIA/apex
            return _url_origin(rest[1:].split(";")[0].strip()) or "source"
        if not rest or rest[0] in "<>=!~;,(":
            return "pypi"
        return None
    if text.startswith((".", "/", "~")) or "/" in text:  # a local folder: ./apex, ../apex/
        return _url_origin(text.split(";")[0].strip(), local=True)
    return None


# --- the dependency files ----------------------------------------------------------------------


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise RequirementsError(
            f"cannot decode line {line} as UTF-8 (byte 0x{data[exc.start]:02x}); dependency "
            "files are read as UTF-8"
        ) from exc


def _comment_start(line: str) -> int:
    """Where a ``#`` comment starts in a requirements line (pip: at the start or after space)."""
    match = re.search(r"(^|\s)#", line)
    return match.start() if match is not None else len(line)


def _requirements_txt(text: str) -> list[Requirement]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        body = line[: _comment_start(line)].rstrip()
        start = len(body) - len(body.lstrip())
        spec = body[start:]
        editable = re.match(r"(-e|--editable)(\s+|=)", spec)
        if editable:
            start += editable.end()
            spec = spec[editable.end() :]
        elif spec.startswith("-"):
            continue  # -r, -c, --index-url ...: not a requirement
        origin = classify(spec)
        if origin is not None:
            found.append(Requirement(number, start + 1, len(body) + 1, spec, origin))
    return found


def _located(text: str, value: str, after: int = 0) -> tuple[int, int, int]:
    """(line, column, end column) of the TOML/Python string literal ``value`` in ``text``
    (the first one from offset ``after``, quotes included), else of the line ``after`` is on."""
    for quote in ('"', "'"):
        at = text.find(f"{quote}{value}{quote}", after)
        if at >= 0:
            line = text.count("\n", 0, at) + 1
            col = at - (text.rfind("\n", 0, at) + 1) + 1
            return line, col, col + len(value) + 2
    line = text.count("\n", 0, after) + 1
    return line, 1, len(text.splitlines()[line - 1]) + 1 if text else 1


def _pyproject(text: str) -> list[Requirement]:
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RequirementsError(f"not valid TOML: {exc}") from exc
    found = []
    project = data.get("project") or {}
    lists = [project.get("dependencies") or []]
    lists += list((project.get("optional-dependencies") or {}).values())
    lists += list((data.get("dependency-groups") or {}).values())
    for entries in lists:
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, str) and (origin := classify(entry)):
                line, col, end = _located(text, entry)
                found.append(Requirement(line, col, end, entry, origin))
    poetry = (data.get("tool") or {}).get("poetry") or {}
    tables = [poetry.get("dependencies"), poetry.get("dev-dependencies")]
    tables += [(g or {}).get("dependencies") for g in (poetry.get("group") or {}).values()]
    header = re.search(r"^\s*\[tool\.poetry", text, re.MULTILINE)
    for table in tables:
        for name, spec in (table or {}).items() if isinstance(table, dict) else ():
            if _normal(name) != "apex":
                continue
            origin = "pypi"
            if isinstance(spec, dict) and (where := spec.get("git") or spec.get("url")):
                origin = "nvidia" if NVIDIA_APEX in str(where).lower() else "source"
            elif isinstance(spec, dict) and spec.get("path"):
                origin = "source"
            key = re.compile(rf"^[ \t]*[\"']?{re.escape(name)}[\"']?[ \t]*=.*$", re.MULTILINE)
            match = key.search(text, header.start() if header else 0)
            at = match.start() if match else 0
            line = text.count("\n", 0, at) + 1
            width = len(match.group().rstrip("\r")) if match else 0
            found.append(Requirement(line, 1, width + 1, name, origin))
    return found


_CFG_KEYS = {("options", "install_requires")}
_CFG_SECTIONS = {"options.extras_require"}


def _setup_cfg(text: str) -> list[Requirement]:
    """``[options] install_requires`` and ``[options.extras_require]``, line by line as
    configparser reads them (a value goes on over indented lines; ``#``/``;`` lines are
    comments)."""
    found = []
    section, wanted = "", False
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            continue
        if not line[0].isspace():
            header = re.match(r"\[([^\]]+)\]", stripped)
            if header:
                section, wanted = header.group(1).strip(), False
                continue
            option = re.match(r"([^=:]*)[=:](.*)", line)
            if option is None:
                wanted = False
                continue
            key, value = option.group(1).strip(), option.group(2)
            wanted = section in _CFG_SECTIONS or (section, key) in _CFG_KEYS
            start = option.start(2) + len(value) - len(value.lstrip())
            value = value.strip()
        else:
            start, value = len(line) - len(line.lstrip()), stripped
        if not wanted or not value:
            continue
        value = value[: _comment_start(value)].rstrip()
        origin = classify(value)
        if origin is not None:
            found.append(Requirement(number, start + 1, start + len(value) + 1, value, origin))
    return found


def _setup_py(data: bytes) -> list[Requirement]:
    """``setup(install_requires=[...], extras_require={...: [...]})`` with literal lists (or a
    module-level name bound to one), read with ``ast``."""
    from ampmigrate.engine.source import Source

    try:
        tree = ast.parse(data)
        source = Source.from_bytes(data)
    except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
        raise RequirementsError(f"setup.py does not parse: {exc}") from exc
    bound = module_values(tree)

    def literal(node: ast.AST | None) -> list[ast.AST]:
        if isinstance(node, ast.Name):
            node = bound.get(node.id)
        return list(node.elts) if isinstance(node, ast.List | ast.Tuple) else []

    values: list[ast.AST] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name != "setup":
            continue
        for keyword in node.keywords:
            if keyword.arg == "install_requires":
                values += literal(keyword.value)
            elif keyword.arg == "extras_require":
                extras = keyword.value
                if isinstance(extras, ast.Name):
                    extras = bound.get(extras.id)
                if isinstance(extras, ast.Dict):
                    values += [e for v in extras.values for e in literal(v)]
    found = []
    for value in values:
        text = value.value if isinstance(value, ast.Constant) else None
        if isinstance(text, str) and (origin := classify(text)):
            line, col, _, end = source.position(value)
            found.append(Requirement(line, col, end, text, origin))
    return found


def apex_requirements(path: str, data: bytes) -> list[Requirement]:
    """The apex requirements the dependency file ``path`` declares; raises
    :class:`RequirementsError` for a file that cannot be read as its format."""
    base = path.replace(os.sep, "/").rpartition("/")[2]
    if base == "setup.py":
        return _setup_py(data)
    text = _decode(data)
    if base == "pyproject.toml":
        return _pyproject(text)
    if base == "setup.cfg":
        return _setup_cfg(text)
    return _requirements_txt(text)


# --- does the project still import apex? -------------------------------------------------------


def project_root(path: Path) -> Path:
    """The folder whose Python files decide whether the requirement of ``path`` is needed: the
    git work tree it is in (docs/requirements.txt serves the package above it), else its folder
    (the folder above a ``requirements/`` folder)."""
    folder = path.resolve().parent
    for above in (folder, *folder.parents):
        if (above / ".git").exists():
            return above
    return folder.parent if folder.name == "requirements" else folder


def imports_apex(data: bytes, path: str, compiled: frozenset[str]) -> bool:
    """Whether a Python file or notebook imports apex or one of its compiled extensions (or
    cannot be read well enough to tell)."""
    if b"apex" not in data and not any(name.encode() in data for name in compiled):
        return False
    if path.endswith(".ipynb"):
        from ampmigrate.notebook import Notebook, NotebookError

        try:
            data = Notebook.parse(data).module().encode()
        except (NotebookError, ValueError):
            return True
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [node.module]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in _DYNAMIC
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            modules = [node.args[0].value]
        else:
            continue
        if any(m.partition(".")[0] in ("apex", *compiled) for m in modules):
            return True
    return False


_DYNAMIC = {"import_module", "__import__"}


@dataclass(frozen=True)
class Usage:
    """What the Python files under a project root say: how many were looked at, and which
    import apex."""

    root: Path
    files: int
    importing: tuple[str, ...]


def _usage(root: Path, results: dict[str, FileResult]) -> Usage:
    from ampmigrate.apex.api.table import COMPILED

    # the run's own bytes after its fixes (a --diff run writes nothing), else the disk's
    changed = {os.path.abspath(name): r.new_source for name, r in results.items() if r.changed}
    files = [p for p in discover([root]) if p.suffix in (".py", ".ipynb")]
    importing = []
    for file in files:
        data = changed.get(os.path.abspath(file))
        if data is None:
            try:
                data = file.read_bytes()
            except OSError:
                importing.append(str(file))  # unreadable: it may need apex
                continue
        if imports_apex(data, file.name, COMPILED):
            importing.append(str(file))
    return Usage(root, len(files), tuple(importing))


# --- the project pass --------------------------------------------------------------------------


def prepare(settings: Settings, candidates: list[Item], paths: Sequence[Path]) -> Any:
    """The dependency files of the run that may name apex (they spell it: the prefilter let them
    through), for :func:`settle`; None when there are none."""
    if not any(rule.code == CODE for rule in settings.rules):
        return None
    files = [
        (name, ignored)
        for name, _, ignored in candidates
        if CODE not in ignored and is_dependency_file(name)
    ]
    return files or None


def settle(
    settings: Settings,
    candidates: list[Item],
    results: dict[str, FileResult],
    rerun: Callable[..., list[FileResult]],
) -> None:
    """Read each dependency file's apex requirements and report them in its result when no
    Python file of its project imports apex after the run's fixes."""
    usages: dict[Path, Usage] = {}
    data = {name: source for name, source, _ in candidates}
    for name, _ in settings.project["apex_requirements"]:
        result = results[name]
        try:
            found = apex_requirements(name, data[name])
        except RequirementsError as exc:
            results[name] = replace(result, error=str(exc), diagnostics=[])
            continue
        if not found:
            continue
        root = project_root(Path(name))
        usage = usages.get(root)
        if usage is None:
            usage = usages[root] = _usage(root, results)
        if usage.importing:
            # a PyPI `apex` pin is wrong either way: it never installed NVIDIA apex, which the
            # importing files need (unmasked_teacher's `apex==0.9.10dev`, the 47th review)
            found = [r for r in found if r.origin == "pypi"]
            if not found:
                continue
        text = data[name].decode("utf-8", "replace")
        suppressions = Suppressions(text)
        added = [
            Diagnostic(
                path=name,
                line=r.line,
                col=r.col,
                end_line=r.line,
                end_col=r.end_col,
                code=CODE,
                message=message(r, usage),
            )
            for r in found
            if not suppressions.suppresses(r.line, CODE)
        ]
        if added:
            diagnostics = sorted(result.diagnostics + added, key=lambda d: d.sort_key)
            results[name] = replace(result, diagnostics=diagnostics)


def message(requirement: Requirement, usage: Usage) -> str:
    """The finding's text: what the requirement installs, and why it is not needed."""
    what = {
        "nvidia": "NVIDIA apex, built from its repository",
        "source": "apex built from source",
        "pypi": "the PyPI package `apex`, an unrelated 2013 Pyramid toolkit, not NVIDIA apex "
        "(NVIDIA documents only source builds)",
    }[requirement.origin]
    where = _shown(usage.root)
    files = f"{usage.files} Python file{'' if usage.files == 1 else 's'}"
    if usage.importing:
        count = len(usage.importing)
        shown = ", ".join(
            f"`{os.path.relpath(f, usage.root).replace(os.sep, '/')}`" for f in usage.importing[:3]
        )
        return (
            f"`{requirement.text}` installs {what}, while {count} Python "
            f"file{'' if count == 1 else 's'} under {where} still import{'s' if count == 1 else ''}"
            f" NVIDIA apex ({shown}{', ...' if count > 3 else ''}): this line never installed "
            "it; build NVIDIA apex from source where they run (its README), or remove the line "
            "once they no longer import apex"
        )
    return (
        f"`{requirement.text}` installs {what}; none of the {files} under {where} imports apex "
        "or its compiled extensions: remove the requirement"
        if usage.files
        else f"`{requirement.text}` installs {what}; no Python file under {where} imports "
        "apex: remove the requirement"
    )


def _shown(root: Path) -> str:
    try:
        relative = root.relative_to(Path.cwd())
    except ValueError:
        return f"`{root}`"
    return f"`{relative.as_posix() or '.'}`" if relative.parts else "`.`"
