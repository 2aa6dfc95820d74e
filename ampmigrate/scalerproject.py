"""AMP208's project pass: the helper modules of the run a checkpoint save or load may lead into.

The scaler-flow family names them here (from the import lines), for every worker; a worker
summarizes one when a call first leads into it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ampmigrate.engine.settings import Settings

Item = tuple[str, bytes, frozenset[str]]


def checkpoint_helpers(settings: Settings, candidates: list[Item], paths: Sequence[Path]) -> Any:
    """The sibling modules of the files that use a scaler (None when no file does)."""
    scalers = [(n, s) for n, s, _ in candidates if b"GradScaler" in s or b".scale(" in s]
    if not scalers:
        return None
    from ampmigrate.scalerflow import sibling_modules

    return sibling_modules(scalers, [str(p) for p in paths])
