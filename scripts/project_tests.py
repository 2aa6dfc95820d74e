"""Run real projects' own AMP tests on CPU before and after ``ampmigrate fix`` (issue 22).

    python scripts/project_tests.py [--projects a,b] [--mirrors DIR] [--cache DIR]
                                    [--work DIR] [--venvs DIR]

The ecosystem check (scripts/ecosystem.py) proves that every rewrite compiles and is
idempotent; only a project's own tests show that it still does what it did. For each pinned
project this script

1. makes a throwaway venv of its own (``--venvs``, outside the repository) with the CPU torch
   2.13.0 (or the TensorFlow the release requires), the project at its pinned release and what
   its tests import;
2. copies the project's package sources and its tests that touch AMP into a scratch tree
   (``--work``): releases from the ecosystem cache (``ecosystem.fetch``), tests from the
   release itself where it ships them, else from the repository at the release's commit
   (``git archive`` of a bare clone under ``--mirrors``, else GitHub's source archive); nothing
   of it is committed;
3. runs those tests there (``PYTHONPATH`` first, so the copy shadows the installed release; the
   script checks that it does), then ``ampmigrate fix --unsafe-fixes`` (``--safe``: plain
   ``fix``) over the package and the
   tests, as a user would, and runs the same tests again; both also with
   ``-W error::FutureWarning``, torch's category for its AMP deprecations.

A test that passed before and fails after is a wrong rewrite, a test that pins the old API, or
a fix written for a newer API than the project runs: the table lists it, and the exit status
is 1. Not run in CI: it installs projects and their dependencies from the registry and takes
minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from ecosystem import SETS, fetch

ROOT = Path(__file__).resolve().parent.parent
TORCH = "torch==2.13.0"  # the CPU build, from a local file


@dataclasses.dataclass(frozen=True)
class Project:
    """One project: where its code and tests come from and what runs them."""

    module: str  # the package the tests import; must resolve into the scratch tree
    install: tuple[str, ...]  # pip requirements: the release (with its dependencies), test deps
    package: str | tuple[str, str]  # an ecosystem.py name, or (owner/name, commit)
    package_paths: tuple[str, ...]  # what of it to copy and fix
    tests: tuple[str, str] | None  # (owner/name, commit) the tests come from; None: the package
    test_paths: tuple[str, ...]  # what of it to copy (test files and their helpers)
    test_files: tuple[str, ...]  # the tests that touch AMP, run before and after
    no_deps: tuple[str, ...] = ()  # installed without dependencies (the needed ones are above)
    fix_options: tuple[str, ...] = ()  # for ``ampmigrate fix`` besides --unsafe-fixes


IGNITE_TESTS = ("pytorch/ignite", "50051eab5070b86811b184a5a943cb0fb8cea969")  # tag v0.4.13
TF_MODELS = Project(
    module="official",
    # tf-models-official 2.15 pins tensorflow~=2.15.0 (Keras 2) and pulls ~40 packages; these
    # are the ones the tests below import, and the protobuf 4 stack TF 2.15 needs
    install=(
        "tensorflow-cpu==2.15.1",
        "tensorflow-datasets==4.9.4",
        "gin-config",
        "pyyaml",
        "portpicker",
        "protobuf<5",
        "tensorflow-metadata==1.15.0",
        "googleapis-common-protos<1.64",
        "pytest",
    ),
    no_deps=("tf-models-official==2.15.0",),
    package="tf-models",
    package_paths=("official",),
    tests=None,  # the wheel ships its *_test.py files
    test_paths=(),
    test_files=(
        "official/modeling/grad_utils_test.py",
        "official/legacy/bert/model_training_utils_test.py",
        "official/core/base_trainer_test.py",
    ),
)
PROJECTS = {
    "pytorch-ignite": Project(
        module="ignite",
        install=(TORCH, "pytorch-ignite==0.4.13", "pytest"),
        package="pytorch-ignite",
        package_paths=("ignite",),
        tests=IGNITE_TESTS,
        test_paths=(
            "setup.cfg",
            "tests/__init__.py",
            "tests/ignite/__init__.py",
            "tests/ignite/conftest.py",
            "tests/ignite/engine",
        ),
        test_files=("tests/ignite/engine/test_create_supervised.py",),
    ),
    "tf-models": TF_MODELS,  # fixed as a user gets it by default: --target-keras 3
    "tf-models-keras2": dataclasses.replace(TF_MODELS, fix_options=("--target-keras", "2")),
}
# Pinned projects whose AMP tests exist but cannot run on this CPU-only machine, and why.
NOT_RUNNABLE = {
    "classy-vision": "test/tasks_classification_task_test.py imports torchvision: PyPI's "
    "torchvision 0.28.0 links libtorch_cuda.so, which the CPU torch 2.13.0 lacks",
    "imagen-pytorch": "imagen_pytorch/test/test_trainer.py: the same torchvision",
    "mmf": "tests/trainers/test_fp16.py: mmf pins torch==1.11.0 and numpy<=1.21.4 (no Python 3.11)",
    "fairseq": "tests/test_amp_optimizer.py: fairseq 0.12.2 does not import on Python 3.11 "
    "(dataclass fields with mutable defaults)",
    "timm": "its tests do not touch AMP",
}


def run(*args: str | Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)


def nice(*args: str | Path) -> list[str]:
    """A command at lower priority: the machine is shared."""
    return ["nice", "-n", "10", *(str(a) for a in args)]


def venv(project: Project, venvs: Path) -> Path:
    """The project's own interpreter, made once (a stamp names what was installed)."""
    package = project.package if isinstance(project.package, str) else project.package[0]
    home = venvs / f"pt-{package.rpartition('/')[2]}"
    python = home / "bin" / "python"
    wanted = "\n".join((*project.install, *project.no_deps))
    stamp = home / "project-tests.stamp"
    if stamp.exists() and stamp.read_text() == wanted:
        return python
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    if TORCH in project.install:  # the CPU build first, so that nothing pulls CUDA's
        subprocess.run(nice(*pip, TORCH), check=True)
    subprocess.run(nice(*pip, *project.install), check=True)
    if project.no_deps:
        subprocess.run(nice(*pip, "--no-deps", *project.no_deps), check=True)
    stamp.write_text(wanted)
    return python


def git_paths(repo: str, commit: str, paths: tuple[str, ...], dest: Path, mirrors: Path | None):
    """Copy ``paths`` of ``repo`` at ``commit`` into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    mirror = mirrors / repo.replace("/", "+") / "repo" if mirrors else None
    if mirror is not None and mirror.is_dir():
        archive = subprocess.run(
            ["git", f"--git-dir={mirror}", "archive", "--format=tar", commit, "--", *paths],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "x", "-C", str(dest)], input=archive, check=True)
        return
    url = f"https://codeload.github.com/{repo}/tar.gz/{commit}"
    with urllib.request.urlopen(url) as response, tarfile.open(fileobj=response, mode="r|gz") as t:
        for member in t:
            inner = member.name.partition("/")[2]
            if member.isfile() and any(inner == p or inner.startswith(p + "/") for p in paths):
                member.name = inner
                t.extract(member, dest, filter="data")


def declared(name: str, cache: Path) -> list[str]:
    """The unconditional ``Requires-Dist`` of a package's downloaded wheel."""
    dist, _, version = SETS["all"][name].partition("==")
    stem = f"{dist.replace('-', '_').lower()}-{version}"
    for wheel in (cache / "downloads").glob("*.whl"):
        if wheel.name.lower().startswith(stem):
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    if member.endswith(".dist-info/METADATA"):
                        lines = archive.read(member).decode("utf-8").splitlines()
                        return [
                            line.removeprefix("Requires-Dist:").strip()
                            for line in lines
                            if line.startswith("Requires-Dist:") and "extra ==" not in line
                        ]
    return []


def scratch(name: str, project: Project, args: argparse.Namespace) -> Path:
    """A fresh tree with the package sources and the tests."""
    tree = args.work / name / "tree"
    shutil.rmtree(tree.parent, ignore_errors=True)
    tree.mkdir(parents=True)
    if isinstance(project.package, str):
        source = fetch(project.package, args.cache)
        for path in project.package_paths:
            shutil.copytree(source / path, tree / path)
        # what the release declares (its repository's setup.py), as a checkout would have it:
        # ampmigrate reads the torch and TensorFlow floors from there
        required = declared(project.package, args.cache)
        if required:
            (tree / "requirements.txt").write_text("".join(f"{r}\n" for r in required))
    else:
        git_paths(*project.package, project.package_paths, tree, args.mirrors)
    if project.tests is not None:
        git_paths(*project.tests, project.test_paths, tree, args.mirrors)
    return tree


def pytest(python: Path, tree: Path, project: Project, label: str, *extra: str) -> dict:
    """Run the AMP tests in ``tree``; each test's outcome (pass, skip, fail, warns) by its id.

    One process per file, as the projects' own runners do (a file's global state, such as a
    Keras dtype policy, must not leak into the next); the arguments go in ``PYTEST_ADDOPTS``, as
    absl's flag parser (TF tests) reads ``sys.argv`` and rejects pytest's options.
    """
    env = {**os.environ, "PYTHONPATH": str(tree), "CUDA_VISIBLE_DEVICES": ""}
    where = run(python, "-c", f"import {project.module}; print({project.module}.__file__)",
                cwd=tree, env=env)  # fmt: skip
    if not where.stdout.startswith(str(tree)):
        raise SystemExit(f"{project.module} does not resolve into {tree}: {where.stdout}")
    outcomes = {}
    for number, test_file in enumerate(project.test_files):
        report = tree.parent / f"{label}-{number}.xml"
        options = ["-q", "-p", "no:cacheprovider", "--color=no", "--rootdir", str(tree)]
        options += [f"--junitxml={report}", *extra, test_file]
        env["PYTEST_ADDOPTS"] = " ".join(options)
        done = subprocess.run(
            nice(python, "-m", "pytest"), cwd=tree, env=env, capture_output=True, text=True
        )
        if not report.exists():
            raise SystemExit(f"pytest wrote no report in {tree}:\n{done.stdout}\n{done.stderr}")
        for case in ET.parse(report).iter("testcase"):
            test = f"{case.get('classname')}::{case.get('name')}"
            failed = [e for e in case if e.tag in ("failure", "error")]
            if case.find("skipped") is not None:
                outcomes[test] = "skip"
            elif failed:
                warned = "FutureWarning" in (failed[0].get("message") or "")
                outcomes[test] = "warns" if warned else "fail"
            else:
                outcomes[test] = "pass"
    return outcomes


def counts(outcomes: dict) -> str:
    """pass/skip/fail, and how many of the failures are a FutureWarning raised as an error."""
    kinds = (("pass",), ("skip",), ("fail", "warns"))
    text = "/".join(str(sum(v in k for v in outcomes.values())) for k in kinds)
    warned = sum(v == "warns" for v in outcomes.values())
    return f"{text} ({warned} by FutureWarning)" if warned else text


def check_project(name: str, args: argparse.Namespace) -> dict:
    project = PROJECTS[name]
    python = venv(project, args.venvs)
    tree = scratch(name, project, args)
    warnings = ("-W", "error::FutureWarning")
    before = pytest(python, tree, project, "before")
    before_w = pytest(python, tree, project, "before-w", *warnings)
    paths = [*project.package_paths, *project.test_files]
    original = {p: p.read_bytes() for p in tree.rglob("*.py")}
    unsafe = () if args.safe else ("--unsafe-fixes",)
    fix = ("fix", *unsafe, *project.fix_options, *paths)
    fixed = run(sys.executable, "-m", "ampmigrate", *fix, cwd=tree)
    (tree.parent / "fix.log").write_text(fixed.stdout + fixed.stderr)
    changed = sorted(str(p.relative_to(tree)) for p, d in original.items() if p.read_bytes() != d)
    after = pytest(python, tree, project, "after")
    after_w = pytest(python, tree, project, "after-w", *warnings)
    broken = sorted(t for t, v in before.items() if v == "pass" and after.get(t) != "pass")
    return {
        "project": name,
        "before": counts(before),
        "after": counts(after),
        "before_w": counts(before_w),
        "after_w": counts(after_w),
        "changed": changed,
        "new_failures": broken,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", help=f"comma-separated, of {', '.join(PROJECTS)}")
    parser.add_argument("--mirrors", type=Path, help="local bare clones (owner+name/repo)")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "ecosystem")
    parser.add_argument("--work", type=Path, default=Path("/tmp/project-tests"))
    parser.add_argument("--venvs", type=Path, default=Path("/tmp"))
    parser.add_argument("--safe", action="store_true", help="plain `fix`: safe fixes only")
    args = parser.parse_args()
    names = args.projects.split(",") if args.projects else list(PROJECTS)
    results = [check_project(name, args) for name in names]
    print("| project | tests before (pass/skip/fail) | after | before, FutureWarning as error "
          "| after, FutureWarning as error | files fixed | new failures |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in results:
        new = ", ".join(r["new_failures"]) or "none"
        print(f"| {r['project']} | {r['before']} | {r['after']} | {r['before_w']} "
              f"| {r['after_w']} | {len(r['changed'])} | {new} |")  # fmt: skip
    for r in results:
        print(f"{r['project']}: fixed {', '.join(r['changed']) or 'nothing'}")
    for name, why in NOT_RUNNABLE.items():
        print(f"not run: {name}: {why}")
    return 1 if any(r["new_failures"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
