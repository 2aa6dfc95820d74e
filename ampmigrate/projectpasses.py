"""The prepare steps of project passes whose family needs only one function over the run.

Each is ``(settings, candidates, paths) -> data`` (None when the run holds nothing to find), as
the registry (:mod:`ampmigrate.families`) calls it; the family reads the data from
``settings.project``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ampmigrate.engine.settings import Settings

Item = tuple[str, bytes, frozenset[str]]


def checkpoint_helpers(settings: Settings, candidates: list[Item], paths: Sequence[Path]) -> Any:
    """AMP208: the sibling modules a checkpoint save or load of a scaler may lead into; a worker
    summarizes one when a call first leads into it."""
    scalers = [(n, s) for n, s, _ in candidates if b"GradScaler" in s or b".scale(" in s]
    if not scalers:
        return None
    from ampmigrate.scalerflow import sibling_modules

    return sibling_modules(scalers, [str(p) for p in paths])


def class_values(settings: Settings, candidates: list[Item], paths: Sequence[Path]) -> Any:
    """AMP101/AMP102: where the run uses an old AMP class as a value (a constructor migrated
    beside such a use is unsafe)."""
    items = [(n, s) for n, s, _ in candidates if b"GradScaler" in s or b"autocast" in s]
    if len(items) < 2:
        return None  # one file sees its own uses
    from ampmigrate.renames import class_values

    return class_values(items, settings)
