"""Files per second of ``ampmigrate check`` on a tree, next to a plain text scan (the floor).

    python scripts/benchmark.py PATH [--jobs N] [--repeat R]
    python scripts/benchmark.py --synthetic 10000 [--jobs N]

The floor reads every file ``check`` would see and searches it for the deprecated namespaces
(a substring scan); it resolves nothing and fixes nothing, so no real checker can beat it.
``check`` runs as a subprocess, start-up included, exactly as CI or pre-commit would run it.
``--synthetic N`` builds a throwaway tree of N files shaped like a training code base (2 % of
them use the deprecated API).
Not a test: timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ampmigrate.engine.discover import discover


def floor_hit(data: bytes) -> bool:
    """The plain text scan: substring search for the deprecated namespaces (memchr-fast)."""
    return b".amp" in data or b"_autocast_" in data


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


def floor(files: list[Path]) -> tuple[float, int]:
    start = time.perf_counter()
    hits = sum(1 for f in files if floor_hit(f.read_bytes()))
    return time.perf_counter() - start, hits


def check(root: Path, jobs: int | None) -> tuple[float, str]:
    command = [sys.executable, "-m", "ampmigrate", "check", "--statistics", str(root)]
    if jobs:
        command += ["--jobs", str(jobs)]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode == 2:
        print(result.stderr, file=sys.stderr)
    return elapsed, result.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path)
    parser.add_argument("--synthetic", type=int, metavar="N")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.synthetic:
            root = Path(tmp) / "synthetic"
            synthesize(root, args.synthetic)
        elif args.path:
            root = args.path
        else:
            parser.error("give a PATH or --synthetic N")
        files = discover([root])
        floor_times, check_times = [], []
        for _ in range(args.repeat):
            seconds, hits = floor(files)
            floor_times.append(seconds)
            seconds, stats = check(root, args.jobs)
            check_times.append(seconds)
        f, c = statistics.median(floor_times), statistics.median(check_times)
        print(f"tree: {root} ({len(files)} files, {hits} contain a deprecated module path)")
        print(f"text-scan floor   : {f:8.3f} s  {len(files) / f:10.0f} files/s")
        print(f"ampmigrate check  : {c:8.3f} s  {len(files) / c:10.0f} files/s  (incl. start-up)")
        print("findings per rule :", stats.replace("\n", "; ") or "none")


if __name__ == "__main__":
    main()
