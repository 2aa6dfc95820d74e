"""The path of many files: read -> prefilter -> (in parallel) migrate -> results in order.

libcst is imported only when some file passes the prefilter, so a clean tree is checked at the
speed of reading it (what a pre-commit hook on unrelated files sees).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

from ampmigrate import sourcefile
from ampmigrate.catalog import Rule, Safety
from ampmigrate.findings import Diagnostic, Fix
from ampmigrate.prefilter import Prefilter

CRASHED = "internal error: the parser crashed on this file (please report it)"


@dataclass(frozen=True)
class Settings:
    rules: tuple[Rule, ...]
    fix: bool = False
    unsafe_fixes: bool = False
    target_torch: tuple[int, ...] | None = None
    target_keras: int = 3  # Keras 3 is what TensorFlow ships since 2.16
    max_file_size: int = 2_000_000  # bytes; 0: no limit (libcst needs ~25 s per MB)

    def safety(self, fix: Fix | None) -> Safety | None:
        """A fix's grade here: one that needs a newer torch than ``target_torch`` is unsafe."""
        if fix is None:
            return None
        return "unsafe" if self.too_new(fix) else fix.safety

    def too_new(self, fix: Fix) -> bool:
        return self.target_torch is not None and self.target_torch < fix.min_torch

    def applies(self, fix: Fix | None) -> bool:
        return fix is not None and (self.safety(fix) == "safe" or self.unsafe_fixes)


@dataclass
class FileResult:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    fixed: list[Diagnostic] = field(default_factory=list)
    original: bytes | None = None
    new_source: bytes | None = None
    error: str | None = None
    parsed: bool = False

    @property
    def changed(self) -> bool:
        return self.new_source is not None and self.new_source != self.original


def _process_batch(batch: list[tuple[str, bytes, frozenset[str]]], settings: Settings):
    from ampmigrate.migrate import process_batch

    return process_batch(batch, settings)


def _isolated(item: tuple[str, bytes, frozenset[str]], settings: Settings) -> FileResult:
    """One file in a process of its own, after a worker died (a native crash in the parser):
    the file that kills it gets an error, the others their results."""
    try:
        with ProcessPoolExecutor(max_workers=1) as pool:
            return pool.submit(_process_batch, [item], settings).result()[0]
    except BrokenProcessPool:
        return FileResult(path=item[0], original=item[1], error=CRASHED)


def run(
    paths: Sequence[Path],
    settings: Settings,
    jobs: int | None = None,
    ignored_codes: Callable[[Path], frozenset[str]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[FileResult]:
    """Process files, in parallel where it pays; results come back in the order of ``paths``.

    ``ignored_codes`` gives the rules switched off for one file (per-file-ignores);
    ``progress(done, total)`` hears about the parsed files as batches finish.
    """
    prefilter = Prefilter(t for r in settings.rules for t in r.triggers)
    results: dict[str, FileResult] = {}
    candidates: list[tuple[str, bytes, frozenset[str]]] = []
    for path in paths:
        name = str(path)
        try:
            source = sourcefile.read(path)
        except OSError as exc:
            results[name] = FileResult(path=name, error=exc.strerror or str(exc))
            continue
        if prefilter.may_match(source):
            ignored = ignored_codes(path) if ignored_codes else frozenset()
            candidates.append((name, source, ignored))
        else:
            results[name] = FileResult(path=name, original=source)
    jobs = jobs or os.cpu_count() or 1
    if jobs > 1 and len(candidates) > 1:
        size = max(1, len(candidates) // (jobs * 4))
        batches = [candidates[i : i + size] for i in range(0, len(candidates), size)]
        with ProcessPoolExecutor(max_workers=min(jobs, len(batches))) as pool:
            futures = {pool.submit(_process_batch, b, settings): b for b in batches}
            for future in as_completed(futures):
                try:
                    batch = future.result()
                except BrokenProcessPool:
                    batch = [_isolated(item, settings) for item in futures[future]]
                results.update((r.path, r) for r in batch)
                if progress:
                    progress(len(batch), len(candidates))
    elif candidates:
        results.update((r.path, r) for r in _process_batch(candidates, settings))
        if progress:
            progress(len(candidates), len(candidates))
    return [results[str(p)] for p in paths]
