"""Ecosystem check: run ampmigrate over real packages' source and check its invariants.

    python scripts/ecosystem.py [--set packages|projects|repositories|training|all]
                                [--mirrors DIR] [--packages accelerate,timm] [--baseline FILE]
                                [--update-baseline] [--sample N] [--bench] [--cache DIR]
    python scripts/ecosystem.py --set training --bench-only --tree --repeat 3

For each pinned package it downloads the distribution (``pip download --no-deps``) once into the
cache (never committed), unpacks its Python files, copies them to a scratch tree and runs
``check`` and ``fix --unsafe-fixes`` there. Invariants, counted per package:

- crashes: internal errors (an error line naming a file, or a traceback): must be 0;
- not compiling: changed files that no longer compile: must be 0;
- not idempotent: a second ``fix`` that still changes or fixes something: must be 0;
- touched clean files: files without findings whose bytes changed: must be 0;
- touched outside: files of the pristine unpacked copy (outside the scratch tree) that changed;
- encoding/EOL lost: changed files whose BOM, coding cookie or line-ending style changed.

Findings per rule are compared with the committed baseline (scripts/ecosystem-baseline.json),
like Ruff's ecosystem check, so a rule change shows its real effect. ``--sample N`` prints N
random findings per rule with context for a precision review; ``--bench`` (``--bench-only``: only
that) prints, per package in one run, files/s and peak memory of ``check`` (all rules), a plain
text scan and ``ruff check --select TID251`` banning the same modules (scripts/benchmark.py
measures them), and check's share of Ruff's files/s (the target is >= 50 %); the interpreter's
start-up (``python -c pass``), a parse floor (start-up, reading every file and parsing with
``ast`` those check's prefilter passes, nothing else) and a cli floor (the same with ``click``
imported) are timed too and printed as shares of Ruff's files/s: where the parse floor is below
50 %, a Python checker that parses those files cannot meet the target on that package; where the
cli floor is, no click command can. Every Python contender runs on ampmigrate installed as a
user has it (``benchmark.installed_python``). ``--tree`` benches the packages together as one
tree (issue 20: ``check`` within 1.5x Ruff's time on ~10k files), adding ``check --ignore AMP3``
and ``check --select AMP1`` and printing every run and each contender's time over Ruff's.
Exit status 1 if an invariant is broken.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from benchmark import TEXT_SCAN, installed_python, timed

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "torch": "torch==2.13.0",
    "transformers": "transformers==5.24.0",
    "transformers-4.30": "transformers==4.30.2",
    "diffusers": "diffusers==0.42.1",
    "accelerate": "accelerate==1.15.0",
    "timm": "timm==1.0.31",
    "timm-0.9": "timm==0.9.2",
    "pytorch-lightning": "pytorch-lightning==2.6.6",
    "deepspeed": "deepspeed==0.19.8",
    "keras": "keras==3.15.1",
    "tf-keras": "tf-keras==2.21.0",
    "tensorflow-cpu": "tensorflow-cpu==2.21.0",
}
# Projects that train with mixed precision (apex, torch.cuda.amp, Keras loss scaling) in the
# versions real users still run: the code the rules were not written on (issue 22). PyPI releases
# are immutable, so a version pins the source as a commit would; --set projects checks them.
PROJECTS = {
    "composer": "composer==0.17.2",
    "mmengine": "mmengine==0.10.3",
    "open-clip": "open_clip_torch==2.24.0",
    "speechbrain": "speechbrain==0.5.16",
    "ultralytics-8.1": "ultralytics==8.1.0",
    "imagen-pytorch": "imagen-pytorch==1.26.3",
    "transformers-4.20": "transformers==4.20.0",
    "pytorch-ignite": "pytorch-ignite==0.4.13",
    "monai": "monai==1.3.0",
    "fairseq": "fairseq==0.12.2",
    "fastai": "fastai==2.7.14",
    "tf-models": "tf-models-official==2.15.0",
    "yolov5": "yolov5==7.0.13",
    "basicsr": "basicsr==1.4.2",
    "nemo": "nemo_toolkit==1.22.0",
}
# Training code that is no package on PyPI, pinned by commit: GitHub's source archive of that
# commit (or `git archive` of a local bare clone: --mirrors DIR holding owner+name/repo); never
# committed. --set repositories checks them (fairseq, yolov5 and ignite are in PROJECTS).
REPOSITORIES = {
    "catalyst": ("catalyst-team/catalyst", "e99f90655d0efcf22559a46e928f0f98c9807ebf"),
    "sentence-transformers": (
        "UKPLab/sentence-transformers", "85ec64559f4414aa536eca4bf53538291e0a333f",
    ),
    "simpletransformers": (
        "ThilinaRajapakse/simpletransformers", "03a3789f2c65119949f7cd98b524e78c6cc87d27",
    ),
    "swin-transformer": ("microsoft/Swin-Transformer", "f82860bfb5225915aca09c3227159ee9e1df874d"),
    "classy-vision": ("facebookresearch/ClassyVision", "08a82e88fcfa143933832994ace2424c03dd43b8"),
    "gpt-neox": ("EleutherAI/gpt-neox", "ea7aefd8f8e183256992d9fede4d7c71a46d67a5"),
    "torchscale": ("microsoft/torchscale", "4d1e0e82e5adf86dd424f1463192635b73fc8efc"),
    "metaseq": ("facebookresearch/metaseq", "f7ffa5fd61cf90f498a36d365c13dd7f1a912ff7"),
    "simmim": ("microsoft/SimMIM", "d3e29bcac950b83edc34ca33fe4404f38309052c"),
    "mlcommons-training": ("mlcommons/training", "aa344c7fb900e82ed19fb94aebfed50c63ab2204"),
    "nvidia-dle": ("NVIDIA/DeepLearningExamples", "729963dd47e7c8bd462ad10bfac7a7b0b604e6dd"),
    "yolox": ("Megvii-BaseDetection/YOLOX", "6ddff4824372906469a7fae2dc3206c7aa4bbaee"),
    "mmf": ("facebookresearch/mmf", "b0ffc7fba39f210f833c127362146aec01a2f259"),
}  # fmt: skip
SETS = {
    "packages": PACKAGES,
    "projects": PROJECTS,
    "repositories": REPOSITORIES,
    # the training code the tool is for, 10,203 files: issue 20's 10k-file tree (--tree)
    "training": {**PROJECTS, **REPOSITORIES},
    "all": {**PACKAGES, **PROJECTS, **REPOSITORIES},
}
BASELINE = ROOT / "scripts" / "ecosystem-baseline.json"
MIRRORS: Path | None = None  # --mirrors


COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)


def ampmigrate(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ampmigrate", *args], cwd=cwd, capture_output=True, text=True
    )


def fetch_repository(name: str, cache: Path) -> Path:
    """The Python files of one pinned project at its commit (fetched and unpacked once)."""
    repo, commit = REPOSITORIES[name]
    source = cache / "src" / name
    if source.is_dir():
        return source
    archive = cache / "downloads" / f"{repo.replace('/', '+')}-{commit}.tar.gz"
    archive.parent.mkdir(parents=True, exist_ok=True)
    mirror = MIRRORS / repo.replace("/", "+") / "repo" if MIRRORS else None
    if not archive.exists():
        partial = archive.with_suffix(".partial")
        if mirror is not None and mirror.is_dir():
            git = ["git", f"--git-dir={mirror}"]
            listed = subprocess.run(
                [*git, "ls-tree", "-r", "-z", "--name-only", commit],
                capture_output=True,
                check=True,
            ).stdout.decode("utf-8", "surrogateescape")
            wanted = [n for n in listed.split("\0") if n.endswith((".py", ".ipynb"))]
            with open(partial, "wb") as out:  # only these: a mirror may lack its big blobs
                subprocess.run(
                    [*git, "archive", "--format=tar.gz", commit, "--", *wanted],
                    stdout=out,
                    check=True,
                )
        else:
            import urllib.request

            url = f"https://codeload.github.com/{repo}/tar.gz/{commit}"
            with urllib.request.urlopen(url) as response, open(partial, "wb") as out:
                shutil.copyfileobj(response, out)
        partial.rename(archive)
    tmp = source.with_suffix(".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(archive) as t:
        members = [m for m in t.getmembers() if m.name.endswith((".py", ".ipynb")) and m.isfile()]
        t.extractall(tmp, members=members, filter="data")
    tmp.rename(source)
    return source


def fetch(name: str, cache: Path) -> Path:
    """The unpacked Python tree of one package (downloaded and unpacked once)."""
    if name in REPOSITORIES:
        return fetch_repository(name, cache)
    spec = SETS["all"][name]
    source = cache / "src" / name
    if source.is_dir():
        return source
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    dist, _, version = spec.partition("==")
    stem = dist.replace("-", "_").lower()
    found = [p for p in downloads.iterdir() if p.name.lower().startswith(f"{stem}-{version}")]
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "-d",
                str(downloads),
                spec,
            ],
            check=True,
        )
        found = [p for p in downloads.iterdir() if p.name.lower().startswith(f"{stem}-{version}")]
    archive = found[0]
    tmp = source.with_suffix(".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z:
            for member in z.namelist():
                if member.endswith(".py") and ".." not in member:
                    z.extract(member, tmp)
    else:
        with tarfile.open(archive) as t:
            members = [m for m in t.getmembers() if m.name.endswith(".py") and m.isfile()]
            t.extractall(tmp, members=members, filter="data")
    tmp.rename(source)
    return source


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): digest(p) for p in sorted(_sources(root))}


def _sources(root: Path) -> list[Path]:
    """The files ampmigrate reads: Python modules and notebooks."""
    return [p for p in [*root.rglob("*.py"), *root.rglob("*.ipynb")] if p.is_file()]


def style(data: bytes) -> tuple:
    cookie = COOKIE.search(b"\n".join(data.splitlines()[:2]))
    return (
        data.startswith(b"\xef\xbb\xbf"),
        cookie.group(1) if cookie else None,
        data.count(b"\r\n") > 0,
        data.replace(b"\r\n", b"").count(b"\n") > 0,
    )


def check_package(name: str, cache: Path, scratch: Path) -> dict:
    pristine = fetch(name, cache)
    before_pristine = tree_digest(pristine)
    work = scratch / name
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(pristine, work)
    original = {p: p.read_bytes() for p in _sources(work)}

    checked = ampmigrate("check", "--output-format", "json", "--max-file-size", "0", ".", cwd=work)
    findings = json.loads(checked.stdout or "[]")
    crashes = [ln for ln in checked.stderr.splitlines() if "internal error" in ln]
    crashes += ["traceback in check"] if "Traceback" in checked.stderr else []
    errors = [ln for ln in checked.stderr.splitlines() if ": error: " in ln]
    with_findings = {work / f["filename"] for f in findings}

    fixed = ampmigrate("fix", "--unsafe-fixes", "--max-file-size", "0", ".", cwd=work)
    crashes += [ln for ln in fixed.stderr.splitlines() if "internal error" in ln]
    crashes += ["traceback in fix"] if "Traceback" in fixed.stderr else []
    changed = [p for p, data in original.items() if p.read_bytes() != data]
    not_compiling = []
    for path in changed:
        if path.suffix != ".py":
            continue  # a notebook: the fix re-parsed its cells before writing
        try:
            compile(path.read_bytes(), str(path), "exec")
        except SyntaxError as exc:
            not_compiling.append(f"{path.relative_to(work)}: {exc}")
    again = ampmigrate("fix", "--unsafe-fixes", "--max-file-size", "0", ".", cwd=work)
    idempotent = "Fixed 0 findings in 0 files" in again.stderr
    return {
        "files": len(original),
        "findings": collections.Counter(f["code"] for f in findings),
        "fixable": sum(1 for f in findings if f["fix"]),
        "errors": len(errors),
        "changed": len(changed),
        "crashes": crashes,
        "not_compiling": not_compiling,
        "not_idempotent": [] if idempotent else [again.stderr.strip().splitlines()[-1]],
        "touched_clean": [str(p) for p in changed if p not in with_findings],
        "touched_outside": [] if tree_digest(pristine) == before_pristine else [str(pristine)],
        "style_lost": [str(p) for p in changed if style(original[p]) != style(p.read_bytes())],
        "items": [f"{f['filename']}:{f['location']['row']}:{f['code']}" for f in findings],
        "sample_source": findings,
        "texts": {
            f["filename"]: original[work / f["filename"]].decode("utf-8", "replace")
            for f in findings
        },
    }


INVARIANTS = (
    "crashes", "not_compiling", "not_idempotent", "touched_clean", "touched_outside", "style_lost",
)  # fmt: skip


def sample(results: dict, count: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    by_rule = collections.defaultdict(list)
    for name, result in results.items():
        for finding in result["sample_source"]:
            by_rule[finding["code"]].append((name, result["texts"], finding))
    for code in sorted(by_rule):
        picks = rng.sample(by_rule[code], min(count, len(by_rule[code])))
        print(f"\n=== {code}: {len(by_rule[code])} findings, {len(picks)} shown ===")
        for name, texts, finding in picks:
            row = finding["location"]["row"]
            lines = texts[finding["filename"]].splitlines()
            print(f"--- {name}/{finding['filename']}:{row}  {finding['message']}")
            for number in range(max(1, row - 2), min(len(lines), row + 2) + 1):
                print(f"{'>' if number == row else ' '} {number:5} {lines[number - 1]}")


# What check's own design cannot go below: start-up, reading every file, and CPython's parse of
# the files its prefilter lets through (those that spell every part of a deprecated name, where
# only a parse can tell a real use from a version-gated one), with no name resolved and no rule
# run. Where even this is below 50 % of Ruff's files/s, a checker that parses those files cannot
# meet the target in Python.
PARSE_FLOOR = """
import ast, os, sys
with open(sys.argv[1], encoding="utf-8") as listed:
    wanted = set(listed.read().split("\\0"))
for folder, _, names in os.walk("."):
    for name in names:
        if name.endswith(".py"):
            path = os.path.join(folder, name)
            with open(path, "rb") as file:
                data = file.read()
            if path in wanted:
                try:
                    ast.parse(data)
                except (SyntaxError, ValueError):
                    pass
"""


def _prefiltered(tree: Path, files: list[Path]) -> str:
    """The files check's prefilter passes (``./``-relative, NUL-separated)."""
    from ampmigrate.catalog import all_rules
    from ampmigrate.engine.prefilter import Prefilter

    prefilter = Prefilter(t for r in all_rules().values() for t in r.triggers)
    passed = [f for f in files if prefilter.may_match(f.read_bytes())]
    return "\0".join(os.path.join(".", f.relative_to(tree)) for f in passed)


def _contenders(
    python: str, ruff: str | None, listing: Path, selections: bool = False
) -> dict[str, list[str]]:
    check = [python, "-P", "-m", "ampmigrate", "check", "--max-file-size", "0"]
    contenders = {
        # the floor of any Python tool: the interpreter's start-up (with site, as `check` runs)
        "python start-up": [python, "-c", "pass"],
        "text scan": [python, "-c", TEXT_SCAN, "."],
        "parse floor": [python, "-c", PARSE_FLOOR, str(listing)],
        # the same with the command-line library check is built on loaded: no click CLI is faster
        "cli floor": [python, "-c", "import click\n" + PARSE_FLOOR, str(listing)],
        "check": [*check, "."],
    }
    if selections:  # issue 20: the rules without the apex family, and the renames alone
        contenders["check --ignore AMP3"] = [*check, "--ignore", "AMP3", "."]
        contenders["check --select AMP1"] = [*check, "--select", "AMP1", "."]
    if ruff:
        banned = [
            f'lint.flake8-tidy-imports.banned-api."{m}".msg = "deprecated"'
            for m in ("torch.cuda.amp", "torch.cpu.amp", "apex.amp")
        ]
        args = [ruff, "check", "--isolated", "--no-cache", "--select", "TID251", "--exit-zero"]
        for option in banned:
            args += ["--config", option]
        contenders["ruff TID251"] = [*args, "."]
    return contenders


def bench(name: str, cache: Path, python: str, repeat: int = 5, tree: Path | None = None) -> dict:
    """files/s and peak memory of ``check`` (all rules), the floors and Ruff's TID251 ban of
    the same modules, each a subprocess, start-up included, median of ``repeat`` runs taken in
    turns (every contender once per round, so a change of load is shared). ``tree``: time that
    tree instead of the package ``name`` (``--tree``), with the selections of issue 20 too and
    each contender's time as a multiple of Ruff's."""
    combined = tree is not None
    tree = tree or fetch(name, cache)
    files = [p for p in tree.rglob("*.py") if p.is_file()]
    for p in files:  # warm the page cache so no contender pays for the disk
        p.read_bytes()
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    n = len(files)
    figures = {}
    with tempfile.TemporaryDirectory() as scratch:
        listing = Path(scratch) / "prefiltered"
        listing.write_text(_prefiltered(tree, files), encoding="utf-8")
        contenders = _contenders(python, ruff, listing, selections=combined)
        rounds = [{k: timed(c, cwd=tree) for k, c in contenders.items()} for _ in range(repeat)]
        for label in contenders:
            runs = [turn[label] for turn in rounds]
            seconds = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[3] for r in runs)
            figures[label] = (n / seconds, max(r[1] for r in runs), cpu)
            if combined:
                print(
                    f"{label:<20} wall "
                    + " ".join(f"{r[0]:6.3f}" for r in runs)
                    + " s | cpu "
                    + " ".join(f"{r[3]:6.2f}" for r in runs)
                    + f" s | peak {max(r[1] for r in runs):4.0f} MB",
                    flush=True,
                )
    line = f"{name:<18} {n:>5} files"
    for label, (rate, peak, cpu) in figures.items():
        line += f" | {label} {rate:6.0f}/s {peak:3.0f} MB cpu {cpu:5.2f} s"
    if "ruff TID251" in figures:
        check, ruff = figures["check"], figures["ruff TID251"]
        line += f" | check/ruff {check[0] / ruff[0]:4.0%} (cpu {ruff[2] / check[2]:4.0%})"
        # the best shares a Python program could reach: the bare interpreter, check's own floor
        # (read every file, parse the ones its prefilter passes, nothing else), and that floor
        # with click imported
        startup, floor = figures["python start-up"][0], figures["parse floor"][0]
        cli = figures["cli floor"][0]
        line += (
            f" | floors/ruff: start-up {startup / ruff[0]:4.0%}, parse {floor / ruff[0]:4.0%}"
            f", cli {cli / ruff[0]:4.0%}"
        )
    print(line, flush=True)
    if combined and "ruff TID251" in figures:
        ruff = figures["ruff TID251"]
        print(
            "time / ruff TID251 (median wall; cpu): "
            + ", ".join(
                f"{label} {ruff[0] / rate:.2f}x; {cpu / ruff[2]:.2f}x"
                for label, (rate, _, cpu) in figures.items()
            ),
            flush=True,
        )
    return figures


def combined_tree(names: list[str], cache: Path, root: Path) -> Path:
    """One tree holding every named package's unpacked files, each under its name (hard links
    where the file system allows): issue 20's 10k-file tree. ``root`` must lie outside any git
    checkout, or git's ignore rules would hide the files from the contenders."""
    for name in names:
        shutil.copytree(fetch(name, cache), root / name, copy_function=_link_or_copy)
    return root


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def run_benches(names: list[str], cache: Path, tree: bool = False, repeat: int = 5) -> None:
    """:func:`bench` each package with ampmigrate installed as a user has it (``tree``: all of
    them together as one tree)."""
    with tempfile.TemporaryDirectory() as scratch:
        python = installed_python(Path(scratch))
        if tree:
            root = combined_tree(names, cache, Path(scratch) / "tree")
            bench(f"{len(names)} packages", cache, python, repeat, tree=root)
            return
        for name in names:
            bench(name, cache, python, repeat)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=SETS, default="packages", help="the default packages")
    parser.add_argument("--packages", help="comma-separated names (default: those of --set)")
    parser.add_argument("--mirrors", type=Path, help="local bare clones (owner+name/repo)")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "ecosystem")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    parser.add_argument("--update-baseline", action="store_true")
    parser.add_argument("--sample", type=int, default=0)
    parser.add_argument("--bench", action="store_true")
    parser.add_argument("--bench-only", action="store_true", help="only time; check nothing")
    parser.add_argument(
        "--tree", action="store_true", help="bench the packages together, as one tree"
    )
    parser.add_argument("--repeat", type=int, default=5, help="bench runs per contender")
    args = parser.parse_args()
    global MIRRORS
    MIRRORS = args.mirrors
    known = SETS["all"]
    names = [n for n in (args.packages or ",".join(SETS[args.set])).split(",") if n]
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown package(s): {', '.join(unknown)}; known: {', '.join(known)}")
    if args.bench_only:
        run_benches(names, args.cache, args.tree, args.repeat)
        return 0
    scratch = args.cache / "scratch"
    results = {name: check_package(name, args.cache, scratch) for name in names}

    header = (
        f"{'package':<20} {'files':>6} {'findings':>8} {'fixable':>7} {'changed':>7} {'errors':>6}"
    )
    print(header + "".join(f" {i[:12]:>12}" for i in INVARIANTS))
    broken = False
    for name, r in results.items():
        row = f"{name:<20} {r['files']:>6} {sum(r['findings'].values()):>8} {r['fixable']:>7} "
        row += f"{r['changed']:>7} {r['errors']:>6}"
        for invariant in INVARIANTS:
            row += f" {len(r[invariant]):>12}"
            broken |= bool(r[invariant])
        print(row)
    for name, r in results.items():
        for invariant in INVARIANTS:
            for item in r[invariant][:5]:
                print(f"  {name}: {invariant}: {item}")
    print("\nfindings per rule:")
    for name, r in results.items():
        print(
            f"  {name}: "
            + (", ".join(f"{c} {n}" for c, n in sorted(r["findings"].items())) or "none")
        )

    baseline = json.loads(args.baseline.read_text()) if args.baseline.exists() else {}
    for name, r in results.items():
        if name not in baseline:
            continue
        old, new = set(baseline[name]), set(r["items"])
        if old != new:
            print(f"\n{name}: {len(new - old)} new, {len(old - new)} gone against the baseline")
            for item in sorted(new - old)[:20]:
                print(f"  + {item}")
            for item in sorted(old - new)[:20]:
                print(f"  - {item}")
    if args.update_baseline:
        baseline.update({name: sorted(r["items"]) for name, r in results.items()})
        args.baseline.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")
        print(f"\nbaseline written: {args.baseline}")
    if args.sample:
        sample(results, args.sample)
    if args.bench:
        print()
        run_benches(names, args.cache, args.tree, args.repeat)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
