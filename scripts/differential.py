"""Differential snapshot: what an engine finds and fixes, to compare two engines.

    python scripts/differential.py snapshot [--ecosystem]   # write tests/differential/*.json.gz
    python scripts/differential.py compare  [--ecosystem]   # compare the installed engine with it

The snapshot was taken from the libcst engine (commit 376752c) before the move to ``ast``; the
installed engine is compared with it (``tests/test_differential.py`` runs the fixture and rule
example part, the ecosystem part is this script's ``compare --ecosystem`` over the packages
``scripts/ecosystem.py`` caches). A record per input: every remaining diagnostic of ``check``
(code, line, column, end, message, fix grade, cell), the error if any, and the sha256 and diff of
``fix`` and ``fix --unsafe-fixes`` output. Rule examples are stored with their text, so the new
engine is run on exactly the inputs the old one saw. Intended differences are listed, with a
reason each, in ``tests/differential/allowed.toml``.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import hashlib
import json
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "differential"
SNAPSHOT = DATA / "snapshot.json.gz"
ECOSYSTEM = DATA / "ecosystem.json.gz"
ALLOWED = DATA / "allowed.toml"
CACHE = ROOT / ".cache" / "ecosystem" / "src"
PACKAGES = (
    "timm-0.9", "deepspeed", "transformers-4.30", "accelerate", "timm", "pytorch-lightning",
    "diffusers", "keras", "tf-keras", "tensorflow-cpu", "transformers", "torch",
)  # fmt: skip


def _engine():
    """(Settings, run, migrate_source) of whichever engine is installed (old or new layout)."""
    from ampmigrate.engine import Settings, run

    try:
        from ampmigrate.engine.migrate import migrate_source
    except ImportError:  # the engine before the move into ampmigrate/engine/ (the snapshot's)
        from ampmigrate.migrate import migrate_source
    return Settings, run, migrate_source


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _diff(before: bytes, after: bytes | None) -> str | None:
    if after is None or after == before:
        return None
    old = before.decode("utf-8", "replace").splitlines(keepends=True)
    new = after.decode("utf-8", "replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, n=1))


def _diagnostics(result) -> list[list]:
    return [
        [d.code, d.line, d.col, d.end_line, d.end_col, d.message, d.fix, d.cell]
        for d in result.diagnostics
    ]


def _record(source: bytes, results: dict[str, object]) -> dict:
    """One input's record from its FileResults under the three settings."""
    check = results["check"]
    record: dict = {"sha": _sha(source), "check": _diagnostics(check)}
    if check.error:
        record["error"] = check.error
    for mode in ("fix", "unsafe"):
        new = results[mode].new_source
        changed = new is not None and new != source
        record[mode] = _sha(new) if changed else None
        record[mode + "_diff"] = _diff(source, new) if changed else None
    return record


def _settings(fix: bool, unsafe: bool, target_keras: int = 3, max_file_size: int = 2_000_000):
    from ampmigrate.catalog import all_rules

    Settings, _, _ = _engine()
    return Settings(
        rules=tuple(all_rules().values()),
        fix=fix,
        unsafe_fixes=unsafe,
        target_keras=target_keras,
        max_file_size=max_file_size,
    )


MODES = {"check": (False, False), "fix": (True, False), "unsafe": (True, True)}


def fixture_inputs(root: Path = ROOT) -> list[Path]:
    return sorted(
        p for p in (root / "fixtures").rglob("*") if p.suffix in (".py", ".ipynb") and p.is_file()
    )


def collect_fixtures(root: Path = ROOT, jobs: int = 1) -> dict[str, dict]:
    _, run, _ = _engine()
    paths = fixture_inputs(root)
    by_mode = {mode: run(paths, _settings(*flags), jobs=jobs) for mode, flags in MODES.items()}
    out = {}
    for i, path in enumerate(paths):
        key = str(path.relative_to(root))
        out[key] = _record(path.read_bytes(), {m: r[i] for m, r in by_mode.items()})
    return out


def example_inputs() -> Iterator[tuple[str, str, int]]:
    """(key, text, target_keras) of every rule example in the installed rules."""
    from ampmigrate.catalog import all_rules

    for code, rule in all_rules().items():
        files = rule.valid_files or ("",) * len(rule.valid)
        for i, (text, file) in enumerate(zip(rule.valid, files, strict=True)):
            if not file:  # a dependency file's example is no Python file
                yield f"{code}/valid{i}", text, 3
        for i, example in enumerate(rule.invalid):
            if not example.file:
                yield f"{code}/invalid{i}", example.before, example.target_keras


def collect_examples(inputs: Iterable[tuple[str, str, int]]) -> dict[str, dict]:
    """Each example run as a file would be (``process`` without a prefilter)."""
    from ampmigrate.engine import FileResult

    _, _, migrate_source = _engine()
    out = {}
    for key, text, keras in inputs:
        source = text.encode()
        results = {}
        for mode, flags in MODES.items():
            result = FileResult(path="", original=source)
            try:
                new, remaining, _ = migrate_source(source, _settings(*flags, keras))
                result.new_source, result.diagnostics = new, remaining
            except Exception as exc:  # recorded: an engine that raises differs from one that not
                result.error = f"{type(exc).__name__}: {exc}"
            results[mode] = result
        record = _record(source, results)
        record.update(text=text, target_keras=keras)
        out[key] = record
    return out


def collect_ecosystem(packages: Iterable[str], jobs: int = 2) -> dict[str, dict]:
    """Per package: findings of ``check``, the sha of each file ``fix --unsafe-fixes`` changes."""
    _, run, _ = _engine()
    out = {}
    for name in packages:
        tree = CACHE / name
        if not tree.is_dir():
            print(f"{name}: not in {CACHE} (run scripts/ecosystem.py once)", file=sys.stderr)
            continue
        paths = sorted(p for p in tree.rglob("*.py") if p.is_file())
        check = run(paths, _settings(False, False, max_file_size=0), jobs=jobs)
        fixed = run(paths, _settings(True, True, max_file_size=0), jobs=jobs)
        package = {}
        for path, c, f in zip(paths, check, fixed, strict=True):
            record = {}
            if c.diagnostics:
                record["check"] = _diagnostics(c)
            if c.error:
                record["error"] = c.error
            if f.changed:
                record["unsafe"] = _sha(f.new_source)
            if record:
                package[str(path.relative_to(tree))] = record
        out[name] = package
        print(f"{name}: {len(paths)} files, {len(package)} with findings", file=sys.stderr)
    return out


def load(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def save(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=0, sort_keys=True, ensure_ascii=False)
    with gzip.GzipFile(path, "wb", mtime=0) as f:  # mtime 0: the same data, the same bytes
        f.write(text.encode())


def allowed() -> dict[str, str]:
    """{key or key#field: reason} of the intended differences."""
    if not ALLOWED.exists():
        return {}
    return {k: v["reason"] for k, v in tomllib.loads(ALLOWED.read_text()).items()}


FIELDS = ("check", "error", "fix", "unsafe")


def differing(old: dict[str, dict], new: dict[str, dict]) -> set[str]:
    """``input#field`` of every difference."""
    return {
        f"{key}#{field}"
        for key in old.keys() | {k for k, r in new.items() if "sha" not in r}
        for field in FIELDS
        if old.get(key, {}).get(field) != new.get(key, {}).get(field)
    }


def stale(old: dict[str, dict], new: dict[str, dict], allow: dict[str, str]) -> list[str]:
    """Allowed differences of inputs in ``old`` that are no longer differences (to be dropped
    from the list)."""
    found = differing(old, new)
    keys = {d.partition("#")[0] for d in found}
    return sorted(
        k for k in allow if k.partition("#")[0] in old and k not in found and k not in keys
    )


def compare(old: dict[str, dict], new: dict[str, dict], allow: dict[str, str]) -> list[str]:
    """Human-readable differences not in ``allow`` (keys ``input`` or ``input#field``).

    Fixtures added since the snapshot, or edited (another sha), have nothing to compare with;
    ecosystem files (no sha: the pinned packages do not change) are compared both ways."""
    problems = []
    for key in sorted(old.keys() | {k for k, r in new.items() if "sha" not in r}):
        a, b = old.get(key, {}), new.get(key, {})
        if "sha" in a and b.get("sha", a["sha"]) != a["sha"]:
            continue
        for field in FIELDS:
            if a.get(field) == b.get(field) or key in allow or f"{key}#{field}" in allow:
                continue
            if field == "check":
                lost = [d for d in a.get(field) or [] if d not in (b.get(field) or [])]
                gained = [d for d in b.get(field) or [] if d not in (a.get(field) or [])]
                problems.append(f"{key}: findings lost {lost} gained {gained}")
            elif field in ("fix", "unsafe") and "text" not in a and "sha" in a:
                problems.append(
                    f"{key}: `{field}` output differs\n--- old diff\n{a.get(field + '_diff')}"
                    f"\n--- new diff\n{b.get(field + '_diff')}"
                )
            else:
                problems.append(f"{key}: {field}: {a.get(field)!r} -> {b.get(field)!r}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("snapshot", "compare"))
    parser.add_argument("--ecosystem", action="store_true", help="the ecosystem packages only")
    parser.add_argument("--packages", default=",".join(PACKAGES))
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    packages = [p for p in args.packages.split(",") if p]
    if args.action == "snapshot":
        if args.ecosystem:
            save(ECOSYSTEM, collect_ecosystem(packages, args.jobs))
        else:
            save(SNAPSHOT, {**collect_fixtures(), **collect_examples(example_inputs())})
        return 0
    allow = allowed()
    if args.ecosystem:
        old = load(ECOSYSTEM)
        new = collect_ecosystem([p for p in packages if p in old], args.jobs)
        problems = []
        for name in new:
            mine = {k.removeprefix(f"{name}/"): v for k, v in allow.items() if k.startswith(name)}
            problems += [f"{name}/{p}" for p in compare(old[name], new[name], mine)]
            problems += [f"{name}/{k}: allowed, but no longer differs" for k in stale(
                old[name], new[name], mine)]  # fmt: skip
    else:
        old = load(SNAPSHOT)
        inputs = [(k, r["text"], r["target_keras"]) for k, r in old.items() if "text" in r]
        new = {**collect_fixtures(), **collect_examples(inputs)}
        problems = compare(old, new, allow)
    print("\n".join(problems) or "no differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
