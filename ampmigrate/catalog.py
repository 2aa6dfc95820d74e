"""Load the rule catalog (``rules/*.toml``) into typed records.

Most rules are data: torch symbol tables are executed by :mod:`ampmigrate.renames` (argument
mapping for renames, guidance for ``manual`` symbols such as apex), moved TF/Keras names by
:mod:`ampmigrate.keras`. Rules whose logic is code name a check (:mod:`ampmigrate.checks`,
:mod:`ampmigrate.scalerflow`).
"""

from __future__ import annotations

import binascii
import functools
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Safety = Literal["safe", "unsafe"]
CACHE_VERSION = 2  # bump when what the records mean changes outside this module


@dataclass(frozen=True)
class Symbol:
    """One deprecated name and how to call its replacement."""

    code: str
    old: str
    new: str
    kind: Literal["class", "function", "decorator", "manual"]
    device: str
    guidance: str = ""  # "manual" symbols: what to do instead; they never get a fix
    when_missing: str = ""  # a current API, flagged only when called without this parameter
    params: tuple[str, ...] = ()
    signature: tuple[str, ...] = ()  # the replacement's parameters, for placing written keywords
    keyword_only: tuple[str, ...] = ()
    required: int = 0
    positional: Literal["keep", "keywords"] = "keep"
    prepend: tuple[str, ...] = ()
    keywords: tuple[tuple[str, str], ...] = ()
    defaults: tuple[tuple[str, str], ...] = ()
    min_torch: tuple[int, ...] = (2, 4)  # the oldest torch the replacement exists in
    # (oldest torch, replacement) written where the target torch is below ``min_torch`` and the
    # older release has an exact replacement of its own (``torch.autocast`` before 1.12)
    older: tuple[tuple[tuple[int, ...], str], ...] = ()
    note: str = ""  # said in the message: why the replacement is the older one


# `{keras}` in a path name stands for every module path Keras is imported under.
KERAS_ROOTS = ("tensorflow.keras", "keras", "tensorflow.compat.v2.keras", "tf_keras")


@dataclass(frozen=True)
class PathRename:
    """A TensorFlow/Keras name that moved: rewritten where it is spelled (data, like Symbol)."""

    code: str
    old: str
    new: str
    kind: Literal["rename", "attribute", "manual", "module"]
    guidance: str = ""
    args: str = ""  # "policy" / "loss_scale_optimizer": the call's arguments change too


@dataclass(frozen=True)
class Example:
    before: str
    after: str | None = None
    unsafe: bool = False
    target_keras: int = 3  # the setting the example is fixed under
    file: str = ""  # the file name it is the content of (a dependency file); "": Python


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    summary: str
    why: str
    use_instead: str
    fix_safety: str
    valid: tuple[str, ...]
    invalid: tuple[Example, ...]
    symbols: tuple[Symbol, ...] = ()
    paths: tuple[PathRename, ...] = ()
    triggers: tuple[str, ...] = ()  # names whose spelling the prefilter looks for
    check: str = ""  # a code check (checks.CHECKS or scalerflow.FLOW_CHECKS), not a table
    valid_files: tuple[str, ...] = ()  # per VALID example, as ``Example.file`` ("": Python)
    # modules whose imports, read by nothing, the rule reports (they only tie a file to them)
    unused_imports: tuple[str, ...] = ()

    @property
    def fix_kinds(self) -> str:
        """What `ampmigrate rules` shows: which grades of fix the examples demonstrate."""
        kinds = set()
        for ex in self.invalid:
            kinds.add("none" if ex.after is None else "unsafe" if ex.unsafe else "safe")
        order = ["safe", "unsafe", "none"]
        return "/".join(k for k in order if k in kinds)


def version_tuple(text: str) -> tuple[int, ...]:
    """'2.4' -> (2, 4): major and minor, the precision torch's AMP API changes at."""
    return tuple(int(part) for part in str(text).split(".")[:2])


def _symbols(code: str, entries: list[dict]) -> tuple[Symbol, ...]:
    out = []
    for entry in entries:
        for old in entry["old"]:
            out.append(
                Symbol(
                    code=code,
                    old=old,
                    new=entry.get("new", ""),
                    kind=entry["kind"],
                    device=entry.get("device", ""),
                    guidance=entry.get("guidance", ""),
                    when_missing=entry.get("when_missing", ""),
                    params=tuple(entry.get("params", ())),
                    signature=tuple(entry.get("signature", ())),
                    keyword_only=tuple(entry.get("keyword_only", ())),
                    required=entry.get("required", 0),
                    positional=entry.get("positional", "keep"),
                    prepend=tuple(entry.get("prepend", ())),
                    keywords=tuple(entry.get("keywords", {}).items()),
                    defaults=tuple(entry.get("defaults", {}).items()),
                    min_torch=version_tuple(entry.get("min_torch", "2.4")),
                    older=tuple(
                        (version_tuple(o["min_torch"]), o["new"]) for o in entry.get("older", ())
                    ),
                )
            )
    return tuple(out)


def _paths(code: str, entries: list[dict]) -> tuple[PathRename, ...]:
    out = []
    for entry in entries:
        for old in entry["old"]:
            roots = KERAS_ROOTS if "{keras}" in old else ("",)
            for root in roots:
                out.append(
                    PathRename(
                        code=code,
                        old=old.replace("{keras}", root),
                        new=entry.get("new", "").replace("{keras}", root),
                        kind=entry.get("kind", "rename"),
                        guidance=entry.get("guidance", ""),
                        args=entry.get("args", ""),
                    )
                )
    return tuple(out)


def _load(text: str) -> Rule:
    import tomllib  # only when the cached catalog is missing or stale

    data = tomllib.loads(text)
    code = data["code"]
    examples = data.get("examples", {})
    symbols = _symbols(code, data.get("symbols", []))
    paths = _paths(code, data.get("paths", []))
    paths += _paths(code, [{**m, "kind": "module"} for m in data.get("modules", [])])
    return Rule(
        code=code,
        name=data["name"],
        summary=data["summary"],
        why=data["why"].strip(),
        use_instead=data["use_instead"].strip(),
        fix_safety=data["fix_safety"].strip(),
        valid=tuple(ex["code"].lstrip("\n") for ex in examples.get("valid", [])),
        invalid=tuple(
            Example(
                before=ex["before"].lstrip("\n"),
                after=ex["after"].lstrip("\n") if "after" in ex else None,
                unsafe=ex.get("unsafe", False),
                target_keras=ex.get("target-keras", 3),
                file=ex.get("file", ""),
            )
            for ex in examples.get("invalid", [])
        ),
        symbols=symbols,
        paths=paths,
        triggers=tuple(data.get("triggers", ()))
        + tuple(s.old for s in symbols)
        + tuple(p.old for p in paths if p.kind != "module"),
        check=data.get("check", ""),
        valid_files=tuple(ex.get("file", "") for ex in examples.get("valid", [])),
        unused_imports=tuple(data.get("unused_imports", ())),
    )


@functools.cache
def all_rules() -> dict[str, Rule]:
    """Every rule in the catalog, keyed and ordered by code.

    Parsing the 27 TOML files is a third of a small run's start-up, so the parsed catalog is
    kept as a pickle in the rules' ``__pycache__`` (like a ``.pyc``), keyed by each file's path,
    size and mtime (this module's too); any trouble with it (read-only install, stale or broken
    file) just parses."""
    folder = _rules_folder()
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".toml")), key=lambda f: f.name)
    cache = _cache_path(folder, files)
    if cache is not None:
        try:
            with open(cache, "rb") as handle:
                return pickle.load(handle)
        except Exception:  # a missing, stale or unreadable cache only costs a parse
            pass
    rules = [_load(f.read_text(encoding="utf-8")) for f in files]
    catalog = {r.code: r for r in sorted(rules, key=lambda r: r.code)}
    if cache is not None:
        _store(cache, catalog)
    return catalog


def _rules_folder() -> object:
    """The folder of the rule files: the package's own folder where it is one (no
    ``importlib.resources``, ~6 ms of start-up), else whatever importlib.resources finds."""
    import ampmigrate.rules

    where = getattr(ampmigrate.rules, "__file__", None)
    if where and os.path.isfile(where):
        return Path(where).parent
    from importlib import resources

    return resources.files("ampmigrate.rules")


def _cache_path(folder: object, files: list) -> str | None:
    """Where the parsed catalog of exactly these rule files is cached (None: not a real folder)."""
    if not isinstance(folder, os.PathLike):
        return None
    try:  # this module too: a change to the records or to _load makes a new key
        stats = [
            (os.fspath(f), *((st := os.stat(f)).st_size, st.st_mtime_ns))
            for f in [*files, __file__]
        ]
    except OSError:
        return None
    text = repr((CACHE_VERSION, stats)).encode()
    # two checksums, 48 bits: a file name, not a defence; hashlib's import costs 2.6 ms a run
    key = f"{binascii.crc32(text):08x}{binascii.crc_hqx(text, 0):04x}"
    return os.path.join(folder, "__pycache__", f"catalog-{key}.pickle")


def _store(cache: str, catalog: dict[str, Rule]) -> None:
    """Write the cache atomically; silently not at all where the folder is not writable."""
    try:
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        temporary = f"{cache}.{os.getpid()}.tmp"
        with open(temporary, "wb") as handle:
            pickle.dump(catalog, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, cache)
    except OSError:
        pass


def select_rules(select: list[str] | None, ignore: list[str] | None) -> list[Rule]:
    """Ruff-style selection: codes or code prefixes; ``ALL`` selects everything."""
    rules = all_rules()
    unknown = [
        c
        for c in (select or []) + (ignore or [])
        if c != "ALL" and not any(code.startswith(c) for code in rules)
    ]
    if unknown:
        raise ValueError(f"unknown rule selector: {', '.join(unknown)}")

    def matches(code: str, selectors: list[str]) -> bool:
        return any(s == "ALL" or code.startswith(s) for s in selectors)

    chosen = [r for c, r in rules.items() if matches(c, select or ["ALL"])]
    return [r for r in chosen if not matches(r.code, ignore or [])]
