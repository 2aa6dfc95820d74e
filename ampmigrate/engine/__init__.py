"""The engine: many files through discover -> prefilter -> analyze -> [apply] -> results.

Stages, one module each: ``discover`` (paths -> files), ``prefilter`` (bytes -> worth parsing?),
``analyze`` (``ast`` -> findings and fix plans), ``apply`` (fix plans -> new text; libcst only to
manage imports and for the apex planner), ``write`` (atomic writes), ``migrate`` (one file through
analyze and apply until no fix applies). This module runs many files, in parallel where it pays:
a big tree is read and prefiltered by the workers (a slice each), the files that pass are
analysed in batches, biggest first. The analysis stage is imported only when some file passes
the prefilter, so a clean tree is checked at the speed of reading it (what a pre-commit hook on
unrelated files sees).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from ampmigrate.engine.discover import is_dependency_file
from ampmigrate.engine.prefilter import Prefilter
from ampmigrate.engine.settings import ADOPTED, FileResult, Settings
from ampmigrate.engine.write import read
from ampmigrate.families import PROJECT_PASSES, ProjectPass

__all__ = ["CRASHED", "FileResult", "Settings", "run"]

CRASHED = "internal error: the parser crashed on this file (please report it)"
PARALLEL_MIN_BYTES = 200_000  # less than this is analysed faster than a pool starts
PARALLEL_MIN_FILES = 500  # fewer are read and prefiltered faster than a pool starts (measured)
GC_THRESHOLD = 100_000  # allocations between young-generation collections (default 700)
Item = tuple[str, bytes, frozenset[str]]


def _process_batch(batch: list[Item], settings: Settings) -> list[FileResult]:
    from ampmigrate.engine.migrate import process_batch

    return process_batch(batch, settings)


def _isolated(item: Item, settings: Settings) -> FileResult:
    """One file in a process of its own, after a worker died (a native crash in the parser):
    the file that kills it gets an error, the others their results."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    try:
        with ProcessPoolExecutor(max_workers=1) as pool:
            return pool.submit(_process_batch, [item], settings).result()[0]
    except BrokenProcessPool:
        return FileResult(path=item[0], original=item[1], error=CRASHED)


def batches(items: list[Item], jobs: int) -> list[list[Item]]:
    """Largest files first, each alone while it is big; the small ones gathered in batches of
    about 1/(8 jobs) of the bytes, so no worker is left with a big file at the end while the
    others idle, and the many small files do not each pay a round trip."""
    items = sorted(items, key=lambda item: -len(item[1]))
    target = max(1, sum(len(item[1]) for item in items) // (jobs * 8))
    out: list[list[Item]] = []
    size = target
    for item in items:
        if size >= target:
            out.append([])
            size = 0
        out[-1].append(item)
        size += len(item[1])
    return out


def _passes(settings: Settings, paths: Sequence[Path], candidates: list[Item]) -> list[ProjectPass]:
    """The registered project passes this run needs: most only in a run of several files; one
    that reads dependency files only when one passed the prefilter (otherwise its module is not
    even imported: a run without one pays nothing for it)."""
    codes = {rule.code for rule in settings.rules}
    several = len(paths) > 1
    dependencies = any(is_dependency_file(name) for name, _, _ in candidates)
    return [
        p
        for p in PROJECT_PASSES
        if p.codes & codes and (dependencies if p.dependency_files else several)
    ]


def run(
    paths: Sequence[Path],
    settings: Settings,
    jobs: int | None = None,
    ignored_codes: Callable[[Path], frozenset[str]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[FileResult]:
    """Process files, in parallel where it pays; results come back in the order of ``paths``.

    ``ignored_codes`` gives the rules switched off for one file (per-file-ignores);
    ``progress(done, total)`` hears how many of the files that passed the prefilter are done.
    """
    # Syntax trees are millions of small objects that hold no reference cycles: the collector's
    # default pace (a young collection per 700 allocations, each old object re-walked at every
    # full one) costs 15-25 % of a run; a far larger first threshold keeps it bounded.
    threshold = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, *threshold[1:])
    try:
        return _run(paths, settings, jobs, ignored_codes, progress)
    finally:
        gc.set_threshold(*threshold)


def _run(
    paths: Sequence[Path],
    settings: Settings,
    jobs: int | None,
    ignored_codes: Callable[[Path], frozenset[str]] | None,
    progress: Callable[[int, int], None] | None,
) -> list[FileResult]:
    jobs = jobs or os.cpu_count() or 1
    triggers = tuple(t for r in settings.rules for t in r.triggers)
    by_name = {str(p): p for p in paths}
    with ExitStack() as stack:
        pool: Any = None

        def start_pool(workers: int) -> Any:
            # imported here: a run that parses little (a pre-commit hook) does not pay for it
            from concurrent.futures import ProcessPoolExecutor

            return stack.enter_context(ProcessPoolExecutor(max_workers=workers))

        if jobs > 1 and len(paths) >= PARALLEL_MIN_FILES:
            _scanner(triggers)  # built before the workers fork: they inherit it
            pool = start_pool(jobs)
            scanned = _scan_in(pool, list(by_name), triggers, jobs)
            if scanned is None:  # a worker died: read it all here
                pool, scanned = None, _scan(list(by_name), triggers)
        else:
            scanned = _scan(list(by_name), triggers)
        results: dict[str, FileResult] = {}
        candidates: list[Item] = []
        for name, source, error in scanned:
            if error is not None:
                results[name] = FileResult(path=name, error=error)
            elif source is None:
                results[name] = FileResult(path=name)
            else:
                ignored = ignored_codes(by_name[name]) if ignored_codes else frozenset()
                candidates.append((name, source, ignored))
        passes = _passes(settings, paths, candidates)
        found = {p.name: p.function(p.prepare)(settings, candidates, paths) for p in passes}
        found = {name: value for name, value in found.items() if value}
        adopted = _adopt(passes, found, by_name, results, candidates, ignored_codes)
        if adopted:
            found[ADOPTED] = adopted
        if found:
            settings = replace(settings, project={**settings.project, **found})
        total = len(candidates)
        done = 0
        if progress and total:
            progress(0, total)
        if jobs > 1 and total > 1 and sum(len(c[1]) for c in candidates) >= PARALLEL_MIN_BYTES:
            from concurrent.futures import as_completed
            from concurrent.futures.process import BrokenProcessPool

            work = batches(candidates, jobs)
            if pool is None:
                from ampmigrate.engine import analyze, migrate  # noqa: F401 (the workers inherit)

                analyze.preload(settings.rules)
                pool = start_pool(min(jobs, len(work)))
            futures = {pool.submit(_process_batch, b, settings): b for b in work}
            for future in as_completed(futures):
                try:
                    batch = future.result()
                except BrokenProcessPool:
                    batch = [_isolated(item, settings) for item in futures[future]]
                results.update((r.path, r) for r in batch)
                done += len(batch)
                if progress:
                    progress(done, total)
        else:
            for item in candidates:
                results.update((r.path, r) for r in _process_batch([item], settings))
                done += 1
                if progress:
                    progress(done, total)
        for p in passes:
            if p.settle and p.name in settings.project:
                p.function(p.settle)(settings, candidates, results, _process_batch)
    return [results[str(p)] for p in paths]


def _adopt(
    passes: list[ProjectPass],
    found: dict[str, Any],
    by_name: dict[str, Path],
    results: dict[str, FileResult],
    candidates: list[Item],
    ignored_codes: Callable[[Path], frozenset[str]] | None,
) -> dict[str, frozenset[str]]:
    """The files of the run the prefilter dropped that a project pass has analysed for some of
    its rules (added to ``candidates``): by absolute path, the codes."""
    wanted: dict[str, frozenset[str]] = {}
    for p in passes:
        if p.adopt and p.name in found:
            for path, codes in p.function(p.adopt)(found[p.name]).items():
                wanted[path] = wanted.get(path, frozenset()) | codes
    if not wanted:
        return {}
    adopted = {}
    for name, _, _ in candidates:  # (passed the prefilter for other rules)
        codes = wanted.get(os.path.abspath(name))
        if codes is not None:
            adopted[os.path.abspath(name)] = codes
    for name, result in list(results.items()):
        codes = wanted.get(os.path.abspath(name))
        if codes is None or result.error is not None:
            continue
        try:
            data = read(by_name[name])
        except OSError:
            continue
        ignored = ignored_codes(by_name[name]) if ignored_codes else frozenset()
        del results[name]
        candidates.append((name, data, ignored))
        adopted[os.path.abspath(name)] = codes
    return adopted


Scanned = tuple[str, bytes | None, str | None]  # (path, the bytes if worth parsing, error)
_SCANNER: dict[tuple[str, ...], Prefilter] = {}


def _scanner(triggers: tuple[str, ...]) -> Prefilter:
    """The tree-wide prefilter of these triggers, made once per process."""
    found = _SCANNER.get(triggers)
    if found is None:
        _SCANNER.clear()
        found = _SCANNER[triggers] = Prefilter(triggers)
    return found


def _scan(names: list[str], triggers: tuple[str, ...]) -> list[Scanned]:
    """Read each file and keep the bytes of those worth parsing (the others' are dropped here:
    a tree's bytes are not held, nor sent between processes, for files nobody parses)."""
    prefilter = _scanner(triggers)
    out: list[Scanned] = []
    for name in names:
        try:
            source = read(Path(name))
        except OSError as exc:
            out.append((name, None, exc.strerror or str(exc)))
            continue
        out.append((name, source if prefilter.may_match(source) else None, None))
    return out


def _scan_in(pool: Any, names: list[str], triggers: tuple[str, ...], jobs: int) -> Any:
    """:func:`_scan` of a big tree in the workers, a slice each (in order), or None when one
    died. Reading and the literal tests are most of a run on a tree that holds little AMP code."""
    from concurrent.futures.process import BrokenProcessPool

    size = -(-len(names) // (jobs * 4))
    futures = [
        pool.submit(_scan, names[i : i + size], triggers) for i in range(0, len(names), size)
    ]
    try:
        return [item for future in futures for item in future.result()]
    except BrokenProcessPool:
        return None
