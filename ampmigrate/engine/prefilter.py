"""Cheap text test that decides whether a file is worth parsing.

A reference to ``torch.cuda.amp.autocast`` has to spell every segment of that name somewhere in
the file, whatever the import form (``import torch as th`` + ``th.cuda.amp.autocast``,
``from torch.cuda import amp``, ``from torch.cuda.amp import autocast as ac``). So a file can only
hold a finding if it contains every segment of a trigger name as a word. One regex pass finds the
most selective segment of each trigger; only then are the other segments looked for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

# Segments too common to look for first: the first pass looks for a trigger's most selective
# segment (the longest of the others), then checks the rest only in the files it finds.
_COMMON = frozenset(
    b"torch tensorflow keras tf_keras amp cuda cpu compat v1 v2 train experimental "
    b"mixed_precision optimizers init initialize state_dict load_state_dict step save device "
    b"half float16 Policy".split()
)


def _first(segments: list[bytes]) -> bytes:
    rare = [s for s in segments if s not in _COMMON] or segments
    return max(rare, key=len)


def _trie(words: list[bytes]) -> bytes:
    """One alternation with shared prefixes factored out: ``re`` tries the branches of an
    alternation one by one at every position, so 70 flat words scan at ~30 MB/s; as a trie
    only the branch for the next character is tried."""
    tree: dict = {}
    for word in words:
        node = tree
        for byte in word:
            node = node.setdefault(byte, {})
        node[b""] = {}

    def emit(node: dict) -> bytes:
        ends = b"" in node
        branches = [re.escape(bytes([k])) + emit(v) for k, v in sorted(
            (k, v) for k, v in node.items() if k != b"")]  # fmt: skip
        if not branches:
            return b""
        body = branches[0] if len(branches) == 1 else b"(?:" + b"|".join(branches) + b")"
        return b"(?:" + body + b")?" if ends else body

    return emit(tree)


def _word(segment: bytes) -> re.Pattern[bytes]:
    return re.compile(rb"\b" + re.escape(segment) + rb"\b")


def _backward_under_autocast(data: bytes) -> bool:
    """A ``.backward(`` on a line inside a ``with ...autocast...:`` block (or a function under an
    ``@...autocast...`` decorator), judged by indentation: a line scan, not a parse."""
    if b"autocast" not in data or b"backward(" not in data:
        return False
    lines = data.splitlines()
    for i, line in enumerate(lines):
        head = line.lstrip()
        if b"autocast" not in line or not head.startswith((b"with ", b"async with ", b"@")):
            continue
        indent = len(line) - len(head)
        decorator = head.startswith(b"@")
        for following in lines[i + 1 :]:
            body = following.lstrip()
            if not body or body.startswith(b"#"):
                continue
            if len(following) - len(body) <= indent and not (
                decorator and body.startswith((b"def ", b"async def ", b"@"))
            ):
                break
            if b"backward(" in following:
                return True
    return False


# Named shapes (``@name`` triggers) for what neither words nor a regex express cheaply.
SHAPES = {"backward-under-autocast": _backward_under_autocast}


class Prefilter:
    """``triggers``: dotted names (every segment must occur as a word), ``/regex/`` for a shape
    that words cannot pin down (``scaler.scale(loss).backward()``: both words are common), or
    ``@name`` for a function in ``SHAPES``."""

    def __init__(self, triggers: Iterable[str]) -> None:
        self._rest: dict[bytes, list[tuple[re.Pattern[bytes], ...]]] = {}
        self._shapes: list[Callable[[bytes], object]] = []
        for name in triggers:  # read once: callers pass generators
            if name.startswith("@"):
                self._shapes.append(SHAPES[name[1:]])
                continue
            if name.startswith("/") and name.endswith("/"):
                self._shapes.append(re.compile(name[1:-1].encode()).search)
                continue
            segments = name.encode().split(b".")
            first = _first(segments)
            head = [seg for seg in segments if seg != first]
            self._rest.setdefault(first, []).append(tuple(_word(seg) for seg in head))
        self._regex = (
            re.compile(rb"\b(?:" + _trie(list(self._rest)) + rb")\b") if self._rest else None
        )

    def may_match(self, data: bytes) -> bool:
        if any(shape(data) for shape in self._shapes):
            return True
        if self._regex is None:
            return False
        for last in {m.group() for m in self._regex.finditer(data)}:
            if any(all(w.search(data) for w in head) for head in self._rest[last]):
                return True
        return False
