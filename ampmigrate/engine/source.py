"""One file's decoded text and the map from ``ast`` positions to it.

``ast`` reports columns as UTF-8 byte offsets within a line (whatever the file's encoding);
edits and diagnostics need character offsets into the decoded text. Everything that turns an
``ast`` position into a place in the text goes through here.
"""

from __future__ import annotations

import ast
import bisect
import codecs
import io
import re
import tokenize

_NEWLINE = re.compile(r"\r\n|\r|\n")  # what Python's tokenizer ends a line on (not \f, \v)


def detect_encoding(data: bytes) -> str:
    """The codec Python would decode ``data`` with: a BOM gives ``utf-8-sig`` (so decoding drops
    it and encoding puts it back), else the coding cookie, else UTF-8."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        return "utf-8"
    return codecs.lookup(encoding).name if encoding != "utf-8-sig" else encoding


class Source:
    """``text``: the decoded source (without a BOM); ``encoding`` turns edited text back into
    bytes with :meth:`encode`; ``path``: the file's path as given ("" for a source in memory)."""

    def __init__(self, text: str, encoding: str = "utf-8", path: str = "") -> None:
        self.text = text
        self.encoding = encoding
        self.path = path
        self._ascii = text.isascii()  # then a byte column is a character column
        starts = [0]
        starts += (m.end() for m in _NEWLINE.finditer(text))
        self._starts = starts

    @classmethod
    def from_bytes(cls, data: bytes, path: str = "") -> Source:
        """Decode as Python does; raises ``UnicodeDecodeError``/``LookupError`` where CPython
        would refuse the file (callers parse with ``ast`` first, which reports it better)."""
        encoding = detect_encoding(data)
        return cls(data.decode(encoding), encoding, path)

    def encode(self, text: str | None = None) -> bytes:
        return (self.text if text is None else text).encode(self.encoding)

    def line(self, line: int) -> str:
        """Line ``line`` (1-based) without its line ending."""
        start = self._starts[line - 1]
        end = self._starts[line] if line < len(self._starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def line_start(self, line: int) -> int:
        return self._starts[line - 1]

    def line_of(self, offset: int) -> int:
        """The 1-based line holding character ``offset`` of ``text`` (any line ending)."""
        return bisect.bisect_right(self._starts, offset)

    def offset(self, line: int, byte_col: int) -> int:
        """Character offset in ``text`` of ast's (1-based line, UTF-8 byte column)."""
        start = self._starts[line - 1]
        if byte_col == 0 or self._ascii:
            return start + byte_col
        text = self.line(line)
        if text.isascii():
            return start + byte_col
        return start + len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def char_col(self, line: int, byte_col: int) -> int:
        """0-based character column of ast's (1-based line, UTF-8 byte column)."""
        return self.offset(line, byte_col) - self._starts[line - 1]

    def span(self, node: ast.AST) -> tuple[int, int]:
        """Character offsets [start, end) of ``node`` (without enclosing parentheses, as ast)."""
        return (
            self.offset(node.lineno, node.col_offset),
            self.offset(node.end_lineno, node.end_col_offset),
        )

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def position(self, node: ast.AST) -> tuple[int, int, int, int]:
        """(line, column, end line, end column): 1-based lines and 1-based character columns,
        the end exclusive, as diagnostics report them."""
        return (
            node.lineno,
            self.char_col(node.lineno, node.col_offset) + 1,
            node.end_lineno,
            self.char_col(node.end_lineno, node.end_col_offset) + 1,
        )

    def line_indent(self, line: int) -> str:
        text = self.line(line)
        return text[: len(text) - len(text.lstrip(" \t\f"))]
