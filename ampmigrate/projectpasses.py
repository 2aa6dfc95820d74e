"""The prepare steps of project passes whose family needs only one function over the run.

Each is ``(settings, candidates, paths) -> data`` (None when the run holds nothing to find), as
the registry (:mod:`ampmigrate.families`) calls it; the family reads the data from
``settings.project``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ampmigrate.engine.settings import Settings

Item = tuple[str, bytes, frozenset[str]]
# An old class where renames.class_values records it, by its bytes (a necessary condition: a
# dict key `cls:`, a subscript `[cls]`, an argument `f(cls,`, an operand `is cls` / `cls ==`).
_IDENTITY_SPELLING = re.compile(
    rb"(?:GradScaler|autocast)[ \t]*(?:[:\],)\"']|[=!]=)|(?:\bis(?:[ \t]+not)?|[=!]=)[ \t]*"
    rb"[\w.]*(?:GradScaler|autocast)\b"
)  # a key, an operand, an argument, or a name in a string (a patch target)


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
    named = [(n, s) for n, s, _ in candidates if b"GradScaler" in s or b"autocast" in s]
    if len(named) < 2:
        return None  # one file sees its own uses
    # only the files that spell a class where it can be a key, an operand or an argument
    items = [(n, s) for n, s in named if _IDENTITY_SPELLING.search(s)]
    if not items:
        return None
    from ampmigrate.renames import class_values

    return class_values(items, settings)
