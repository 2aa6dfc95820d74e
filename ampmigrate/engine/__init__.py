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
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from ampmigrate.engine.prefilter import Prefilter
from ampmigrate.engine.settings import FileResult, Settings
from ampmigrate.engine.write import read

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


def _with_checkpoint_helpers(
    settings: Settings, candidates: list[Item], paths: Sequence[Path]
) -> Settings:
    """AMP208 follows a checkpoint save/load into helper modules of the same tree: the
    scaler-flow family names them here (from the import lines), for every worker; a worker
    summarizes one when a call first leads into it."""
    from ampmigrate.scalerflow import sibling_modules

    scalers = [(n, s) for n, s, _ in candidates if b"GradScaler" in s or b".scale(" in s]
    if not scalers:
        return settings
    helpers = sibling_modules(scalers, [str(p) for p in paths])
    return replace(settings, checkpoint_helpers=helpers)


def _with_class_values(settings: Settings, candidates: list[Item]) -> Settings:
    """AMP101/AMP102: where the run uses an old AMP class as a value (renames.class_values)."""
    items = [(n, s) for n, s, _ in candidates if b"GradScaler" in s or b"autocast" in s]
    if len(items) < 2:
        return settings  # one file sees its own uses
    from ampmigrate.renames import class_values

    return replace(settings, class_values=class_values(items, settings))


def _with_apex_links(settings: Settings, candidates: list[Item], paths: Sequence[Path]) -> Settings:
    """AMP303 across two modules: pair the file that calls ``amp.initialize`` with the one
    whose training function scales the loss (apexlinks), checked against every file read."""
    apex = [(n, s) for n, s, _ in candidates if b"apex" in s and b"amp" in s]
    initializing = {n for n, s in apex if b".initialize(" in s}
    scaling = {n for n, s in apex if b".scale_loss(" in s}
    if not initializing or not scaling or len(initializing | scaling) < 2:
        return settings  # no pair is possible: nothing to parse
    apex = [(n, s) for n, s in apex if n in initializing | scaling]
    from ampmigrate import apexlinks  # here: most runs never get this far

    known = {n: s for n, s, _ in candidates}

    def everything() -> Iterator[tuple[str, bytes]]:
        """Every file of the run (the ones the prefilter dropped read again: rare, see above)."""
        for path in map(str, paths):
            if path in known:
                yield path, known[path]
                continue
            try:
                yield path, read(Path(path))
            except OSError:
                continue

    links = apexlinks.link(apex, everything)
    return replace(settings, apex_links=links) if links else settings


def _pair_state(result: FileResult) -> str:
    """Where a file's AMP303 stands: "applied", "offered" (fixable, not applied) or "no"."""
    if any(d.code == "AMP303" for d in result.fixed):
        return "applied"
    if any(d.code == "AMP303" and d.fix is not None for d in result.diagnostics):
        return "offered"
    return "no"


def _settle_pairs(
    settings: Settings, candidates: list[Item], results: dict[str, FileResult]
) -> None:
    """Both files of a pair rewritten (or both only offered), or neither: where the two sides
    disagree (one refused, suppressed or ignored), both are run again with the pair broken, so
    each refuses and says why."""
    items = {os.path.abspath(item[0]): item for item in candidates}
    broken: dict[str, object] = {}
    for link in {id(v): v for v in settings.apex_links.values()}.values():
        if link.broken or link.caller not in items or link.callee not in items:
            continue
        state = {
            name: _pair_state(results[name])
            for name in (items[link.caller][0], items[link.callee][0])
        }
        if len(set(state.values())) == 1 and "no" not in state.values():
            continue
        # the side that is not rewritten (the first, should they differ otherwise)
        refused = next((n for n, s in state.items() if s == "no"), next(iter(state)))
        reason = f"{link.shown(refused)} is not rewritten in this run (see its AMP303 finding)"
        by = link.role(refused)
        broken[link.caller] = broken[link.callee] = replace(link, broken=reason, broken_by=by)
    if not broken:
        return
    again = replace(settings, apex_links={**settings.apex_links, **broken})
    redo = [items[path] for path in broken]
    results.update((r.path, r) for r in _process_batch(redo, again))


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
        if len(paths) > 1 and candidates and any(r.code == "AMP208" for r in settings.rules):
            settings = _with_checkpoint_helpers(settings, candidates, paths)
        if len(paths) > 1 and any(r.symbols for r in settings.rules):
            settings = _with_class_values(settings, candidates)
        if len(paths) > 1 and any(r.code == "AMP303" for r in settings.rules):
            settings = _with_apex_links(settings, candidates, paths)
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
        if settings.apex_links:
            _settle_pairs(settings, candidates, results)
    return [results[str(p)] for p in paths]


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
