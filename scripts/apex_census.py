"""Which apex names each file of a public project uses: the census behind issue 21's numbers.

    python scripts/apex_census.py GIT_ROOT [--manifest FILE] [--write]

For each entry of scripts/apex-census.json (repository, commit, subtrees), read every ``.py``
file under the subtrees at the commit from the local git directory (``GIT_ROOT/<owner>+<name>``,
as for ``apex_benchmark.py --build-from``) and list, per file, the apex names it uses (imports,
``apex.x.y`` attribute chains, ``amp.<name>`` on an apex amp handle, the compiled ``amp_C`` and
``fused_*_cuda`` modules). Without ``--write`` the names are compared with the manifest (exit 1 on
a difference); with it the manifest's ``files`` are rewritten. Only names and paths are kept:
no third-party code is committed.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "scripts" / "apex-census.json"
COMPILED = ("amp_C", "apex_C", "fused_layer_norm_cuda", "fused_adam_cuda", "syncbn", "fmhalib")
SKIPPED = ("tests/", "test/", "third_party/", "transformers/")  # test suites, vendored copies


def _chain(node: ast.expr) -> tuple[str, list[str]] | None:
    """`apex.parallel.X` as ("apex", ["parallel", "X"]); None unless it ends in a Name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return (node.id, parts[::-1]) if isinstance(node, ast.Name) else None


def apex_names(source: str) -> list[str]:
    """The apex names one module uses, fully qualified (`apex.amp.initialize`,
    `apex.optimizers.FusedAdam`, `amp_C`), sorted."""
    tree = ast.parse(source)
    found: set[str] = set()
    amp: set[str] = set()  # local names bound to apex.amp
    modules: dict[str, str] = {}  # local name -> apex module or object it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top == "apex":
                    found.add(alias.name)
                    if alias.name == "apex.amp" and alias.asname:
                        amp.add(alias.asname)
                    elif alias.asname:
                        modules[alias.asname] = alias.name
                    else:
                        modules["apex"] = "apex"
                elif top in COMPILED:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")[0]
            if top in COMPILED:
                found.add(node.module)
            if top != "apex":
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full)
                if full == "apex.amp":
                    amp.add(alias.asname or "amp")
                else:
                    modules[alias.asname or alias.name] = full
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain = _chain(node)
        if chain is None:
            continue
        base, parts = chain
        if base in amp:
            found.add(f"apex.amp.{parts[0]}")
        elif base in modules and modules[base] == "apex":
            if parts[0] == "amp":
                found.add("apex.amp" + (f".{parts[1]}" if len(parts) > 1 else ""))
            else:
                found.add("apex." + ".".join(parts[:2]))
        elif base in modules:
            found.add(f"{modules[base]}.{parts[0]}")
    return sorted(found)


def git_dir(git_root: Path, repo: str) -> Path:
    """The git directory `fetch` or a clone left for `repo` under `git_root`."""
    owner, name = repo.split("/")
    for candidate in (git_root / f"{owner}+{name}" / "repo", git_root / f"{owner}+{name}"):
        if (candidate / "HEAD").exists():
            return candidate
        if (candidate / ".git" / "HEAD").exists():
            return candidate / ".git"
    raise SystemExit(f"{repo}: no git directory under {git_root}")


def scan(git: Path, commit: str, roots: list[str]) -> dict[str, list[str]]:
    """Per `.py` file under `roots` at `commit` that uses apex: its apex names."""
    cmd = ["git", f"--git-dir={git}"]
    paths = [r for r in roots if r]
    listing = subprocess.run(
        [*cmd, "grep", "-l", "-E", r"apex|amp_C|_cuda", commit, "--", *(paths or ["."])],
        capture_output=True,
        text=True,
    ).stdout.split()
    found: dict[str, list[str]] = {}
    for hit in listing:
        path = hit.split(":", 1)[1]
        if not path.endswith(".py") or any(f"/{s}" in f"/{path}" for s in SKIPPED):
            continue
        blob = subprocess.run([*cmd, "show", f"{commit}:{path}"], capture_output=True).stdout
        try:
            names = apex_names(blob.decode("utf-8", "replace"))
        except SyntaxError:
            continue  # Python 2 files of old projects
        if names:
            found[path] = names
    return dict(sorted(found.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("git_root", type=Path)
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--write", action="store_true", help="rewrite the manifest's files")
    args = parser.parse_args(argv)
    manifest = json.loads(args.manifest.read_text())
    differences = 0
    for entry in manifest["entries"]:
        files = scan(git_dir(args.git_root, entry["repo"]), entry["commit"], entry["roots"])
        if args.write:
            entry["files"] = files
        elif files != entry["files"]:
            differences += 1
            print(f"{entry['repo']}: the manifest's names differ from the source", file=sys.stderr)
    if args.write:
        args.manifest.write_text(dumps(manifest))
    return 1 if differences else 0


def dumps(manifest: dict) -> str:
    """The manifest as JSON with one line per entry (diffs stay readable)."""
    head = {k: v for k, v in manifest.items() if k != "entries"}
    lines = ",\n".join("    " + json.dumps(e) for e in manifest["entries"])
    text = json.dumps(head, indent=2)[:-2]
    return f'{text},\n  "entries": [\n{lines}\n  ]\n}}\n'


if __name__ == "__main__":
    sys.exit(main())
