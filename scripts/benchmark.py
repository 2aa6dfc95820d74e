"""Files per second of ``ampmigrate check`` on a tree, next to a plain text scan (the floor).

    python scripts/benchmark.py PATH [--jobs N] [--repeat R] [--fix]
    python scripts/benchmark.py --synthetic 10000 [--jobs N] [--fix]
    python scripts/benchmark.py --file PATH [PATH ...] [--repeat R]  # each alone, as pre-commit

The floor reads every file ``check`` would see and searches it for the deprecated namespaces
(a substring scan); it resolves nothing and fixes nothing, so no real checker can beat it.
``check`` runs as a subprocess, start-up included, exactly as CI or pre-commit would run it
(installed as a user's ``pip install`` leaves it, never from the development install: see
``installed_python``).
``--synthetic N`` builds a throwaway tree of N files shaped like a training code base (2 % of
them use the deprecated API); ``--fix`` also times ``fix`` on a fresh copy of the tree each time.
Every command runs as a subprocess; its peak memory is the largest resident set of the process
(``wait4``'s ``ru_maxrss``; ``check``'s worker processes are children it waits for).
Not a test: timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ampmigrate.engine.discover import discover


def installed_python(scratch: Path) -> str:
    """An interpreter that runs ampmigrate as a user's ``pip install`` leaves it: a plain copy of
    the package with its bytecode compiled, in a venv of its own whose other dependencies
    (click, libcst) come from this environment. A development install (``pip install -e``) puts
    an import hook into every interpreter's start-up (the editable finder and setuptools'
    distutils shim: ~12 ms here, more than Ruff's whole run on a small tree), and a source
    checkout under ``PYTHONDONTWRITEBYTECODE`` compiles every module on every run (~35 ms);
    no installed copy pays either. Every Python contender (the floors too) runs on it."""
    import compileall
    import sysconfig
    import venv

    site, env = scratch / "site", scratch / "venv"
    root = Path(__file__).resolve().parent.parent
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(root)],
        check=True,
    )  # fmt: skip
    compileall.compile_dir(site / "ampmigrate", quiet=1)
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    dependencies = sysconfig.get_paths()["purelib"]  # this environment's click, libcst...
    Path(purelib, "ampmigrate-bench.pth").write_text(f"{site}\n{dependencies}\n")
    return str(python)


# The text scan, a program of its own that imports nothing: walk the tree, read every file and
# search it for the deprecated namespaces (memchr-fast substring tests). It resolves nothing and
# fixes nothing, so no real checker can beat it.
TEXT_SCAN = """
import os, sys
hits = 0
for folder, _, names in os.walk(sys.argv[1]):
    for name in names:
        if name.endswith(".py"):
            with open(os.path.join(folder, name), "rb") as file:
                data = file.read()
            hits += b".amp" in data or b"_autocast_" in data
print(hits)
"""


PLAIN = '''"""Module {i}: data loading and a model block, no AMP here."""

import torch
import torch.nn as nn


class Block{i}(nn.Module):
    def __init__(self, width: int = {w}) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        if torch.cuda.is_available():
            x = x.cuda()
        return self.norm(torch.relu(self.proj(x))) + x


def load_{i}(path):
    rows = []
    with open(path) as f:
        for line in f:
            rows.append([float(v) for v in line.split(",")])
    return torch.tensor(rows)
'''

AMP = '''"""Module {i}: a training step on the deprecated API."""

import torch
from torch.cuda.amp import GradScaler, autocast

scaler = GradScaler()


def step_{i}(model, opt, x, y):
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss
'''


def synthesize(root: Path, count: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    for i in range(count):
        package = root / f"pkg{i // 100:03d}"
        package.mkdir(parents=True, exist_ok=True)
        template = AMP if rng.random() < 0.02 else PLAIN
        (package / f"mod{i:05d}.py").write_text(template.format(i=i, w=rng.choice([64, 128])))


def timed(command: list[str], cwd: Path | None = None) -> tuple[float, float, str, float]:
    """(seconds, peak resident MB, stdout, CPU seconds) of one subprocess (and the children it
    waited for), start-up included. On a loaded machine the CPU time is the steadier figure."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if process.returncode == 2:
            print(err.read().decode(errors="replace"), file=sys.stderr)
        cpu = usage.ru_utime + usage.ru_stime
        return elapsed, usage.ru_maxrss / 1024, out.read().decode(errors="replace"), cpu


def check(
    python: str, root: Path, jobs: int | None, action: str = "check"
) -> tuple[float, float, str, float]:
    # -P: the working directory (a source checkout?) is not on the path, as for a user
    command = [python, "-P", "-m", "ampmigrate", action, "--statistics", str(root)]
    if action == "check":
        command.append("--max-file-size=0")
    if jobs:
        command += ["--jobs", str(jobs)]
    return timed(command)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path)
    parser.add_argument("--synthetic", type=int, metavar="N")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--fix", action="store_true", help="also time `fix` on a copy")
    parser.add_argument(
        "--file", type=Path, nargs="+", help="files, each alone, as a pre-commit hook runs it"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        python = installed_python(Path(tmp))
        if args.file:
            timings = []
            for path in args.file:
                runs = [check(python, path, None) for _ in range(args.repeat)]
                seconds = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[3] for r in runs)
                size = path.stat().st_size / 1e3
                timings.append((seconds, cpu, size, path))
                print(
                    f"pre-commit, one file ({path}, {size:.0f} KB): check {seconds:.3f} s, "
                    f"cpu {cpu:.3f} s (median of {args.repeat}, start-up included), "
                    f"peak {max(r[1] for r in runs):.0f} MB"
                )
                print("findings per rule :", runs[-1][2].strip().replace("\n", "; ") or "none")
            if len(timings) > 1:
                print(f"\nslowest first ({len(timings)} files, wall s, cpu s, KB):")
                for seconds, cpu, size, path in sorted(timings, reverse=True):
                    print(f"{seconds:7.3f} {cpu:7.3f} {size:7.0f}  {path}")
            return
        if args.synthetic:
            root = Path(tmp) / "synthetic"
            synthesize(root, args.synthetic)
        elif args.path:
            root = args.path
        else:
            parser.error("give a PATH, --synthetic N or --file PATH")
        files = discover([root])
        scans, checks, fixes = [], [], []
        for _ in range(args.repeat):
            scans.append(timed([python, "-c", TEXT_SCAN, str(root)]))
            checks.append(check(python, root, args.jobs))
            if args.fix:
                copy = Path(tmp) / "copy"
                shutil.rmtree(copy, ignore_errors=True)
                shutil.copytree(root, copy)
                fixes.append(check(python, copy, args.jobs, "fix"))
        n = len(files)
        print(f"tree: {root} ({n} files, {scans[-1][2].strip()} contain a deprecated module path)")
        for name, runs in (
            ("text scan", scans),
            ("ampmigrate check", checks),
            ("ampmigrate fix", fixes),
        ):
            if runs:
                t = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[3] for r in runs)
                peak = max(r[1] for r in runs)
                print(
                    f"{name:<17}: {t:8.3f} s  {n / t:10.0f} files/s  cpu {cpu:7.3f} s"
                    f"  peak {peak:5.0f} MB"
                )
        if fixes:
            ratio = statistics.median(r[0] for r in fixes) / statistics.median(r[0] for r in checks)
            print(f"fix / check      : {ratio:.2f}x")
        print("findings per rule :", checks[-1][2].strip().replace("\n", "; ") or "none")


if __name__ == "__main__":
    main()
