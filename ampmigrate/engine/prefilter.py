"""Cheap text test that decides whether a file is worth parsing.

A reference to ``torch.cuda.amp.autocast`` has to spell every segment of that name somewhere in
the file, whatever the import form (``import torch as th`` + ``th.cuda.amp.autocast``,
``from torch.cuda import amp``, ``from torch.cuda.amp import autocast as ac``). So a file can only
hold a finding if it contains every segment of a trigger name as a word.

Two steps, so a tree is filtered at the speed of reading it: a few rare literal *anchors*
(``bytes.__contains__``, a memchr-speed search) of which every trigger needs one (``autocast``,
``GradScaler``, ``LossScale``, ``apex``, the literal head of each regex trigger ...); only files
holding an anchor get the exact test, where one regex finds the most selective segment of each
trigger and then the other segments are looked for.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from re import _parser as sre_parse  # the literal head of a regex trigger

# Segments too common to look for first: the first pass looks for a trigger's most selective
# segment (the longest of the others), then checks the rest only in the files it finds.
_COMMON = frozenset(
    b"torch tensorflow keras tf_keras amp cuda cpu compat v1 v2 train experimental "
    b"mixed_precision optimizers init initialize state_dict load_state_dict step save device "
    b"half float16 Policy norm".split()
)


def _first(segments: list[bytes]) -> bytes:
    rare = [s for s in segments if s not in _COMMON] or segments
    return max(rare, key=len)


_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _has_word(data: bytes, word: bytes) -> bool:
    """``word`` occurs in ``data`` as a whole word (``\\bword\\b``): ``bytes.find`` and a look at
    the neighbours, as ``re`` cannot skip ahead to a literal behind ``\\b`` (~12 MB/s)."""
    start = data.find(word)
    while start >= 0:
        end = start + len(word)
        if (start == 0 or data[start - 1] not in _WORD_BYTES) and (
            end == len(data) or data[end] not in _WORD_BYTES
        ):
            return True
        start = data.find(word, start + 1)
    return False


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


# Named shapes (``@name`` triggers) for what neither words nor a regex express cheaply, with the
# literal each needs.
SHAPES = {"backward-under-autocast": _backward_under_autocast}
SHAPE_ANCHORS = {"backward-under-autocast": b"autocast"}


def _literal_head(pattern: str) -> bytes:
    """The literal text every match of ``pattern`` starts with ("" if none)."""
    head = []
    for op, value in sre_parse.parse(pattern):
        if op is not sre_parse.LITERAL:
            break
        head.append(value)
    return bytes(head) if all(v < 128 for v in head) else b""


# Short literals that stand for several triggers each and are still rare in ML code (share of
# the bytes of the ecosystem cache, 227 MB, in files holding them). Every anchor costs one scan
# of every file, and every trigger behind it one more scan of the files that hold it, so a
# common word (``scale``: 51 %, ``Scale``: 15 %) costs more than the anchors it replaces.
PREFERRED = (
    b"autocast",  # 5.8 %
    b"apex",  # 1.3 %
    b"_policy",  # 6.1 %: set_policy, global_policy, get_layer_policy
    b"mixed_",  # 10 %: mixed_precision, mixed_float16
    b"MIXED_PRECISION",  # 0.3 %
    b"_cuda",  # apex's compiled extensions (`fused_adam_cuda`, `xentropy_cuda`, ...), one scan
)


# Substrings several anchors share (``cale``: ``.scale(``, ``GradScaler``, ``LossScale``,
# ``scale_loss``, ``get_scaled_loss``, ``unscale_``): a file without one cannot hold those
# anchors, so they are looked for only in the files that have it: one scan instead of six in the
# 62-85 % of the files of transformers, torch and keras without ``cale``. The tree-wide test got
# 3-20 % faster on them (diffusers 3 %, transformers 8 %, keras 14 %, torch 15 %, tensorflow 20 %).
GATES = (b"cale", b"custom_")


def _joined(segments: Iterable[bytes]) -> bytes:
    """The segments as one string a literal can be looked for in at once: no segment holds the
    separator, so a hit never straddles two."""
    return b"\0".join(segments)


def _anchors(items: list[list[bytes]]) -> set[bytes]:
    """Few literals such that every item (a name's segments, or a regex/shape's literal) contains
    one: the ``PREFERRED`` ones that serve, then greedily the segment found in most items not yet
    covered (common words only where an item has nothing else); last, an anchor every item of
    which holds another one goes (``_policy``: every name with it also spells ``mixed_``)."""
    pairs = [(item, _joined(item)) for item in items]
    anchors = {a for a in PREFERRED if any(a in text for _, text in pairs)}
    left = [(item, text) for item, text in pairs if not any(a in text for a in anchors)]
    while left:
        every = {s for item, _ in left for s in item}
        candidates = {s for s in every if s not in _COMMON} or every
        best = max(sorted(candidates), key=lambda a: (sum(a in t for _, t in left), len(a)))
        anchors.add(best)
        left = [(item, text) for item, text in left if best not in text]
    anchors = {a for a in anchors if not any(b != a and b in a for b in anchors)}
    for anchor in sorted(anchors):  # each anchor costs a scan of every file: drop the spare ones
        others = anchors - {anchor}
        if all(any(b in text for b in others) for _, text in pairs if anchor in text):
            anchors = others
    return anchors


def _seen(data: bytes, word: bytes, seen: dict[bytes, bool]) -> bool:
    if word not in seen:
        seen[word] = _has_word(data, word)
    return seen[word]


# What one file's bytes were found to hold: (whole words, substrings, shapes by trigger).
Memo = tuple[dict[bytes, bool], dict[bytes, bool] | None, dict[str, bool]]


def new_memo() -> Memo:
    """A fresh :data:`Memo` for one file's bytes."""
    return {}, {}, {}


class _Shape:
    """A regex or named shape, remembered by its trigger text in a :data:`Memo`."""

    def __init__(self, key: str, search: Callable[[bytes], object]) -> None:
        self.key = key
        self.search = search

    def test(self, data: bytes, shaped: dict[str, bool]) -> bool:
        hit = shaped.get(self.key)
        if hit is None:
            hit = shaped[self.key] = bool(self.search(data))
        return hit


class Prefilter:
    """``triggers``: dotted names (every segment must occur as a word), ``/regex/`` for a shape
    that words cannot pin down (``scaler.scale(loss).backward()``: both words are common), or
    ``@name`` for a function in ``SHAPES``."""

    def __init__(self, triggers: Iterable[str]) -> None:
        shapes: dict[str, tuple[bytes, _Shape]] = {}  # one per distinct shape
        names: list[list[bytes]] = []
        for name in triggers:  # read once: callers pass generators
            if name.startswith("@"):
                shapes[name] = (SHAPE_ANCHORS[name[1:]], _Shape(name, SHAPES[name[1:]]))
            elif name.startswith("/") and name.endswith("/"):
                pattern = name[1:-1]
                search = re.compile(pattern.encode()).search
                shapes[name] = (_literal_head(pattern), _Shape(name, search))
            else:
                names.append(name.encode().split(b"."))
        # a regex trigger without a literal head has no anchor: every file gets the exact test
        self._always = [shape for anchor, shape in shapes.values() if len(anchor) < 3]
        heads = [[a] for a, _ in shapes.values() if len(a) >= 3]
        self.anchors = tuple(sorted(_anchors(names + heads)))
        # each anchor behind the gate it shares with another anchor, if any
        shared = [g for g in GATES if sum(g in a for a in self.anchors) > 1]
        self._gates = {a: next((g for g in shared if g in a), None) for a in self.anchors}
        # per anchor: the shapes and the names (first segment, then the other words) it stands
        # for; each is listed under every anchor it contains
        self._shapes = {a: [s for b, s in shapes.values() if a in b] for a in self.anchors}
        self._names: dict[bytes, dict[tuple[bytes, ...], None]] = {}
        for segments in names:
            first = _first(segments)
            entry = (first, *(s for s in segments if s != first))
            text = _joined(segments)
            for anchor in self.anchors:
                if anchor in text:
                    self._names.setdefault(anchor, {})[entry] = None

    def may_match(self, data: bytes, memo: Memo | None = None) -> bool:
        """``memo`` (one per ``data``) keeps what was learnt about ``data`` for the next
        prefilter asked about it: the per-rule prefilters share anchors, words and shapes."""
        seen, found, shaped = memo if memo is not None else ({}, None, {})
        if any(shape.test(data, shaped) for shape in self._always):
            return True
        opened: dict[bytes, bool] = {} if found is None else found  # gates are substrings too
        for anchor in self.anchors:
            gate = self._gates[anchor]
            if gate is not None:
                hit = opened.get(gate)
                if hit is None:
                    hit = opened[gate] = gate in data
                if not hit:
                    continue
            if found is None:  # the tree-wide prefilter: each file is asked once
                hit = anchor in data
            else:
                hit = found.get(anchor)
                if hit is None:
                    hit = found[anchor] = anchor in data
            if not hit:
                continue
            if any(shape.test(data, shaped) for shape in self._shapes[anchor]):
                return True
            for words in self._names.get(anchor, ()):
                if all(_seen(data, word, seen) for word in words):
                    return True
        return False
