"""Cheap text test that decides whether a file is worth parsing.

A reference to ``torch.cuda.amp.autocast`` has to spell every segment of that name somewhere in
the file, whatever the import form (``import torch as th`` + ``th.cuda.amp.autocast``,
``from torch.cuda import amp``, ``from torch.cuda.amp import autocast as ac``). So a file can only
hold a finding if it contains every segment of a trigger name as a word. One regex pass finds the
rare last segments; only then are the other segments looked for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def _word(segment: bytes) -> re.Pattern[bytes]:
    return re.compile(rb"\b" + re.escape(segment) + rb"\b")


class Prefilter:
    """``triggers``: dotted names (every segment must occur as a word), or ``/regex/`` for a
    shape that words cannot pin down (``scaler.scale(loss).backward()``: both words are common)."""

    def __init__(self, triggers: Iterable[str]) -> None:
        triggers = list(triggers)  # read twice below; callers pass generators
        self._rest: dict[bytes, list[tuple[re.Pattern[bytes], ...]]] = {}
        patterns = [t[1:-1].encode() for t in triggers if t.startswith("/") and t.endswith("/")]
        self._shapes = re.compile(b"|".join(patterns)) if patterns else None
        for name in triggers:
            if name.startswith("/"):
                continue
            *head, last = name.encode().split(b".")
            self._rest.setdefault(last, []).append(tuple(_word(seg) for seg in head))
        words = b"|".join(re.escape(w) for w in sorted(self._rest, key=len, reverse=True))
        self._regex = re.compile(rb"\b(?:" + words + rb")\b") if words else None

    def may_match(self, data: bytes) -> bool:
        if self._shapes is not None and self._shapes.search(data):
            return True
        if self._regex is None:
            return False
        for last in {m.group() for m in self._regex.finditer(data)}:
            if any(all(w.search(data) for w in head) for head in self._rest[last]):
                return True
        return False
