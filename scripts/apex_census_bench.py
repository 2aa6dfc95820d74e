"""Leaving apex entirely: which census repositories are apex-free after one ``fix --unsafe-fixes``.

    python scripts/apex_census_bench.py CENSUS_DIR [--split dev|heldout|all] [--json FILE]
                                        [--manifest FILE] [--markdown] [--apex-opt-level O1]

CENSUS_DIR holds one folder per repository of scripts/apex-census.json (``<owner>+<name>/``,
the ``.py`` files of its scanned subtrees; the manifest names the commit; sources are never
committed). The run copies each repository to a scratch directory, runs the installed ampmigrate
(``python -m ampmigrate fix --unsafe-fixes --select AMP3``: the apex.amp rules and the AMP31x
family; with ``--apex-opt-level O1``, passed to ``fix`` and ``check``, as if each repository
declared it) on the copy, and reports per repository:

- ``expected``: "native" when every apex name its files use (the manifest's ast census) has a
  torch counterpart in AMP301-AMP314 (apex.amp, the optimizers, norms and parallel names with a
  fix), else "blocked" with the names that have none (AMP315's, fp16_utils' FP16_Optimizer ...);
- ``apex_free``: no file of the census still imports apex or one of its compiled extensions;
- ``remaining``: per file, the apex names still imported, and the first finding ``check`` gives
  for each (why it stays);
- ``compiles``: every file ``fix`` changed still compiles;
- ``requirement``: the AMP316 findings after the fix (an ``apex`` requirement no file needs any
  more). The census extraction keeps ``.py`` files only, so of the dependency files only a
  ``setup.py`` in a scanned subtree can be read; requirements files and ``pyproject.toml`` are
  not in it.

Exit status 1 when a changed file does not compile.
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "scripts" / "apex-census.json"
sys.path.insert(0, str(ROOT))

from ampmigrate.apex.api import table  # noqa: E402  (the script runs from a checkout)

# apex.amp's O1 names AMP303 rewrites; the rest of apex.amp (O2 master weights ...) and
# fp16_utils' structural names have no fix.
AMP_FIXED = {
    "apex.amp", "apex.amp.initialize", "apex.amp.scale_loss", "apex.amp.master_params",
    "apex.amp.state_dict", "apex.amp.load_state_dict", "apex",
}  # fmt: skip


def has_fix(name: str) -> bool:
    """Whether the census name ``name`` has a rewrite in AMP301-AMP314 (as a name: a call may
    still be refused for its arguments)."""
    modules = {"apex.optimizers", "apex.normalization", "apex.parallel", "apex.fp16_utils"}
    return (
        name in AMP_FIXED
        or name in modules
        or name in table.SAME
        or name in table.TO_PYTHON_FLOAT
        or name in table.TARGETS
    )


def _family(code: str) -> str:
    if code.startswith("AMP30"):
        return "apex.amp"
    return "apex API" if code.startswith("AMP31") else "none"


def apex_imports(source: bytes) -> list[str]:
    """The apex modules and names a file still imports (compiled extensions included)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ["<does not parse>"]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.partition(".")[0]
                if root == "apex" or root in table.COMPILED:
                    found.append(alias.name)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            root = node.module.partition(".")[0]
            if root == "apex" or root in table.COMPILED:
                found += [f"{node.module}.{a.name}" for a in node.names]
    return found


def fixed_levels(source: bytes) -> set[str]:
    """The opt levels the file's ``*.initialize(...)`` calls give as string literals: O2 and O3
    (the model cast to float16, fp32 master weights) have no torch.amp counterpart, so a
    repository that runs one cannot leave apex exactly, whatever names it imports."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {
        k.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr == "initialize"
        for k in node.keywords
        if k.arg == "opt_level" and isinstance(k.value, ast.Constant)
        and isinstance(k.value.value, str)
    }  # fmt: skip


def run_repo(entry: dict, census: Path, scratch: Path, extra: tuple[str, ...] = ()) -> dict:
    name = entry["repo"].replace("/", "+")
    source = census / name
    copy = scratch / name
    shutil.copytree(source, copy)
    files = sorted(entry["files"])
    names = sorted({n for used in entry["files"].values() for n in used})
    blocking = [n for n in names if not has_fix(n)]
    before = {f: (copy / f).read_bytes() for f in files if (copy / f).is_file()}
    levels = sorted({lv for data in before.values() for lv in fixed_levels(data)} & {"O2", "O3"})
    command = [sys.executable, "-m", "ampmigrate", "fix", "--unsafe-fixes", "--select", "AMP3"]
    fixed = subprocess.run([*command, *extra, "."], cwd=copy, capture_output=True, text=True)
    check = subprocess.run(
        [sys.executable, "-m", "ampmigrate", "check", "--select", "AMP3", *extra, "."],
        cwd=copy,
        capture_output=True,
        text=True,
    )
    findings: dict[str, list[str]] = {}
    requirement = []
    for line in check.stdout.splitlines():
        path, _, rest = line.partition(":")
        if " AMP316 " in rest:
            requirement.append(line)
        elif rest and path.endswith(".py"):
            findings.setdefault(Path(path).as_posix().removeprefix("./"), []).append(rest)
    remaining, broken, changed = {}, [], 0
    codes: dict[str, list[str]] = {}
    for f, old in before.items():
        new = (copy / f).read_bytes()
        if new != old:
            changed += 1
            try:
                compile(new, f, "exec")
            except SyntaxError as exc:
                broken.append(f"{f}: {exc}")
        left = apex_imports(new)
        if left:
            why = findings.get(f, [])
            remaining[f] = {"imports": left, "findings": why[:3]}
            codes[f] = sorted({w.split()[1] for w in why if len(w.split()) > 1})
    return {
        "repo": entry["repo"],
        "split": entry.get("split", ""),
        "files": len(files),
        "expected": "native" if not blocking else "blocked",
        "blocking": blocking,
        "literal_o2_o3": levels,
        "apex_free": not remaining,
        # which rules' findings keep it on apex: "apex.amp" (AMP301-AMP303 refused),
        # "apex API" (AMP311-AMP315), "none" (an import no rule reports, e.g. a bare probe)
        "left_by": sorted({_family(code) for f in remaining for code in codes.get(f) or ["none"]}),
        "changed": changed,
        "does_not_compile": broken,
        "requirement": requirement,
        "remaining": remaining,
        "fix_exit": fixed.returncode,
    }


def summary(rows: list[dict]) -> dict:
    native = [r for r in rows if r["expected"] == "native"]
    return {
        "repositories": len(rows),
        "apex_free": sum(r["apex_free"] for r in rows),
        "expected_native": len(native),
        "native_apex_free": sum(r["apex_free"] for r in native),
        "native_left_by_apex_amp_only": sum(r["left_by"] == ["apex.amp"] for r in native),
        "native_left_with_apex_api_findings": sum("apex API" in r["left_by"] for r in native),
        "blocked": len(rows) - len(native),
        # by name and by level: without the repositories whose initialize names O2 or O3
        "expected_native_at_o1": sum(not r["literal_o2_o3"] for r in native),
        "native_at_o1_apex_free": sum(r["apex_free"] for r in native if not r["literal_o2_o3"]),
        "changed_files": sum(r["changed"] for r in rows),
        "changed_files_not_compiling": sum(len(r["does_not_compile"]) for r in rows),
        "apex_requirement_reported": sum(bool(r["requirement"]) for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("census", type=Path)
    parser.add_argument("--split", choices=["dev", "heldout", "all"], default="dev")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument(
        "--apex-opt-level", choices=["O1"], help="pass --apex-opt-level to fix and check"
    )
    args = parser.parse_args(argv)
    extra = ("--apex-opt-level", args.apex_opt_level) if args.apex_opt_level else ()
    entries = json.loads(args.manifest.read_text())["entries"]
    if args.split != "all":
        entries = [e for e in entries if e.get("split") == args.split]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for entry in entries:
            if not (args.census / entry["repo"].replace("/", "+")).is_dir():
                print(f"{entry['repo']}: not in {args.census}", file=sys.stderr)
                continue
            rows.append(run_repo(entry, args.census, Path(scratch), extra))
    result = {
        "split": args.split,
        "apex_opt_level": args.apex_opt_level,
        "summary": summary(rows),
        "repositories": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    if args.markdown:
        print("| repository | expected | apex-free | changed | what remains |")
        print("|---|---|---|---:|---|")
        for r in rows:
            left = Counter(n for v in r["remaining"].values() for n in v["imports"])
            shown = ", ".join(f"{n} ({c})" for n, c in left.most_common(4))
            free = "yes" if r["apex_free"] else "no"
            print(f"| {r['repo']} | {r['expected']} | {free} | {r['changed']} | {shown} |")
    print(json.dumps(result["summary"]))
    return 1 if result["summary"]["changed_files_not_compiling"] else 0


if __name__ == "__main__":
    sys.exit(main())
