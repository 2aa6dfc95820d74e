"""``[tool.ampmigrate]`` in pyproject.toml, found by walking up from the paths being checked.

Keys (Ruff's names and meaning): ``select``, ``ignore``, ``exclude``, ``extend-exclude``,
``per-file-ignores``, ``target-torch``, ``target-keras``, ``output-format``; and ``apex-opt-level``
("O1": every run of the project uses apex O1 or O0 where the code leaves the level to a flag, a
parameter or a config, so the apex rewrite may take such a level as O1). Command-line options
override them.
Patterns are globs relative to the directory of the pyproject.toml: without a ``/`` they match any
path component (``legacy_*``), with one they match the relative path (``scripts/*.py``).
"""

from __future__ import annotations

import fnmatch
import os
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ampmigrate.catalog import version_tuple
from ampmigrate.report import FORMATS

KEYS = frozenset(
    {
        "select", "ignore", "exclude", "extend-exclude", "per-file-ignores", "target-torch",
        "target-keras", "output-format", "apex-opt-level",
    }
)  # fmt: skip


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Config:
    root: Path
    source: Path | None = None
    select: tuple[str, ...] | None = None
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] | None = None  # None: the built-in list of skipped directories
    extend_exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())
    target_torch: tuple[int, ...] | None = None
    target_keras: int | None = None  # None: from the declared TensorFlow, else 3
    output_format: str = "text"
    apex_opt_level: str | None = None  # "O1" (parse_opt_level); None: not declared

    def _relative(self, path: Path) -> PurePosixPath | None:
        try:
            return PurePosixPath(Path(os.path.abspath(path)).relative_to(self.root).as_posix())
        except ValueError:
            return None

    def excluded(self, path: Path) -> bool:
        patterns = (self.exclude or ()) + self.extend_exclude
        if not patterns:  # the common case: no path arithmetic per file
            return False
        relative = self._relative(path)
        return relative is not None and any(_matches(relative, p) for p in patterns)

    def ignored_codes(self, path: Path) -> frozenset[str]:
        if not self.per_file_ignores:
            return frozenset()
        relative = self._relative(path)
        if relative is None:
            return frozenset()
        return frozenset(
            code
            for pattern, codes in self.per_file_ignores
            if _matches(relative, pattern)
            for code in codes
        )


def _matches(relative: PurePosixPath, pattern: str) -> bool:
    pattern = pattern.rstrip("/")
    if "/" not in pattern:
        return any(fnmatch.fnmatchcase(part, pattern) for part in relative.parts)
    text = relative.as_posix()
    return fnmatch.fnmatchcase(text, pattern) or text.startswith(pattern + "/")


def parse_version(text: str) -> tuple[int, ...]:
    try:
        return version_tuple(text)
    except ValueError as exc:
        raise ConfigError(f"target-torch must look like '2.4', not {text!r}") from exc


def parse_opt_level(value: object, where: str = "apex-opt-level") -> str:
    """The declared apex opt level: only "O1" means something (O0 is apex switched off, which
    the rewrite already keeps; O2/O3 cast the model, which torch.amp cannot express)."""
    if value != "O1":
        raise ConfigError(f'{where} must be "O1", not {value!r}')
    return "O1"


def _strings(value: object, key: str, where: Path) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: [tool.ampmigrate] {key} must be a list of strings")
    return tuple(value)


def load(path: Path) -> Config:
    """The [tool.ampmigrate] table of one pyproject.toml (an empty Config if there is none)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    table = data.get("tool", {}).get("ampmigrate")
    if table is None:
        return Config(root=path.parent.resolve())
    unknown = sorted(set(table) - KEYS)
    if unknown:
        known = ", ".join(sorted(KEYS))
        raise ConfigError(
            f"{path}: unknown key(s) in [tool.ampmigrate]: {', '.join(unknown)} (known: {known})"
        )
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise ConfigError(f"{path}: [tool.ampmigrate] per-file-ignores must be a table")
    output_format = table.get("output-format", "text")
    if output_format not in FORMATS:
        raise ConfigError(f"{path}: output-format must be one of {', '.join(FORMATS)}")
    target_keras = table.get("target-keras")
    if target_keras is not None and (target_keras not in (2, 3) or isinstance(target_keras, bool)):
        raise ConfigError(f"{path}: target-keras must be 2 or 3, not {target_keras!r}")
    return Config(
        root=path.parent.resolve(),
        source=path,
        select=_strings(table["select"], "select", path) if "select" in table else None,
        ignore=_strings(table.get("ignore", []), "ignore", path),
        exclude=_strings(table["exclude"], "exclude", path) if "exclude" in table else None,
        extend_exclude=_strings(table.get("extend-exclude", []), "extend-exclude", path),
        per_file_ignores=tuple(
            (pattern, _strings(codes, f"per-file-ignores.{pattern}", path))
            for pattern, codes in per_file.items()
        ),
        target_torch=parse_version(table["target-torch"]) if "target-torch" in table else None,
        target_keras=target_keras,
        output_format=output_format,
        apex_opt_level=(
            parse_opt_level(table["apex-opt-level"], f"{path}: apex-opt-level")
            if "apex-opt-level" in table
            else None
        ),
    )


def search_start(paths: Sequence[Path]) -> Path:
    """The directory project files are looked for from: the paths' common folder (or cwd)."""
    starts: Iterable[Path] = [Path(os.path.abspath(p)) for p in paths] or [Path.cwd()]
    common = Path(os.path.commonpath([str(p) for p in starts]))
    return common if common.is_dir() else common.parent


def find(paths: Sequence[Path]) -> Path | None:
    """The nearest pyproject.toml with a [tool.ampmigrate] table above the paths (or cwd)."""
    directory = search_start(paths)
    for candidate in [directory, *directory.parents]:
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            try:
                if "ampmigrate" in tomllib.loads(pyproject.read_text("utf-8")).get("tool", {}):
                    return pyproject
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"{pyproject}: cannot read: {exc}") from exc
    return None


def resolve(paths: Sequence[Path], explicit: Path | None) -> Config:
    source = explicit or find(paths)
    return load(source) if source else Config(root=Path.cwd().resolve())
