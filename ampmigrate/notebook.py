"""Jupyter notebooks: code cells in, code cells out, everything else untouched.

The code cells are joined into one module (names imported in cell 1 resolve in cell 5, as in
the kernel), with each cell opened by a marker statement. IPython lines (``%magic``, ``!shell``
and the lines a trailing backslash continues it onto, ``x = !cmd``, ``?help``, ``name??``) are
swapped line for line for placeholder names that parse, and swapped back afterwards; a cell
whose first line is a ``%%cell magic`` that does not run Python (``%%bash``) is left out.
After the fix the module is cut at the markers and each cell's ``source`` is replaced only if
its text changed; outputs, metadata and the JSON layout (nbformat's: one-space indent,
unescaped unicode, trailing newline) are kept.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

_MARKER = "__ampmigrate_cell__({})"
_MARKER_LINE = re.compile(r"^__ampmigrate_cell__\((\d+)\)$")
# a line of the joined module cited in a message (`line 9`, `lines 5, 9`); not another file's
# (`its line 12`) nor one of the rewrite's text
_CITED = re.compile(r"(?<!its )\blines? (\d+(?:(?:, |-)\d+)*)\b(?! of the rewrite)")
_MAGIC = "__ampmigrate_magic_{}__"
_MAGIC_LINE = re.compile(r"^(\s*)__ampmigrate_magic_(\d+)__$")
# `%magic`, `!shell`, `?help`, `name?`/`name??`, and assignments from them (`files = !ls`).
_IPYTHON = re.compile(r"^\s*(?:[%!]|\?|\w[\w.]*\?\??\s*$|[\w.]+\s*=\s*[%!])")
# IPython's automagics and default system aliases: `ls dir/`, `cd x`, `pip install y` run as
# `%ls dir/` ... when the line is not Python by itself (`ls = 3` and `cd(x)` stay Python).
_AUTOMAGIC = re.compile(
    r"^\s*(?:ls|cd|pwd|pip|conda|mamba|mkdir|rmdir|rm|cp|mv|cat|env|load_ext|reload_ext|"
    r"matplotlib|run|time|timeit|who|whos|history|reset|alias|config|autoreload|store|clear|"
    r"less|more|man|ll|lf|lk|lx|ldir|bookmark|dhist|pushd|popd|dirs|sx|sc|xdel|tensorboard)"
    r"(?:\s|$)"
)
# Cell magics whose body is Python run in the kernel; any other (%%bash, %%html) is not Python.
_PYTHON_CELL_MAGICS = re.compile(r"^%%(?:time|timeit|capture|prun|debug)\b")


class NotebookError(ValueError):
    pass


@dataclass
class Notebook:
    data: dict
    indent: int | None
    trailing_newline: bool
    sources: dict[int, str]  # cell index -> joined source, code cells that take part
    magics: list[str]

    @classmethod
    def parse(cls, raw: bytes) -> Notebook:
        import json  # here: most runs see no notebook (1.3 ms of start-up)

        try:
            text = raw.decode("utf-8")
            data = json.loads(text)
            cells = data["cells"]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
            raise NotebookError(f"not a Jupyter notebook: {exc}") from exc
        indent_match = re.search(r"^\{\n( *)\"", text)
        indent = len(indent_match.group(1)) if indent_match else None
        sources = {}
        for index, cell in enumerate(cells):
            if cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            if source.lstrip().startswith("%%") and not _PYTHON_CELL_MAGICS.match(source.lstrip()):
                continue
            sources[index] = source
        return cls(data, indent, text.endswith("\n"), sources, [])

    def module(self) -> str:
        """The code cells as one module; a marker statement opens each."""
        parts = []
        for index, source in self.sources.items():
            lines = []
            ipython = _needs_masking(source)
            continued = None  # the indent of an IPython line that ends with a backslash
            for line in source.splitlines():
                if continued is not None or (ipython and _is_ipython(line)):
                    # a continuation line is shell text: it takes the indent of its first line
                    indent = continued if continued is not None else _indent(line)
                    lines.append(indent + _MAGIC.format(len(self.magics)))
                    self.magics.append(line)
                    continued = indent if line.endswith("\\") else None
                else:
                    lines.append(line)
            parts.append(_MARKER.format(index) + "\n" + "".join(f"{ln}\n" for ln in lines))
        return "".join(parts)

    def locate(self, module_line: int, module: str) -> tuple[int, int]:
        """(1-based cell position in the notebook, 1-based line in that cell)."""
        cell, start = None, 0
        for number, line in enumerate(module.splitlines(), start=1):
            if number > module_line:
                break
            match = _MARKER_LINE.match(line)
            if match:
                cell, start = int(match.group(1)), number
        if cell is None:  # above the first marker: added to the first code cell
            return next(iter(self.sources)) + 1, module_line
        return cell + 1, module_line - start

    def cell_lines(self, message: str, module: str) -> str:
        """``message`` with the lines of ``module`` it cites (``line 64``, ``lines 5, 9``,
        ``lines 3-7``) given as cells and their lines, as the finding's own place is: a line
        of the joined source exists nowhere in the notebook (the 69th review). A line of
        another file (``its line 12``, ``path:12``) or of the rewrite stays as it is."""

        def cell(number: str) -> str:
            at, line = self.locate(int(number), module)
            return f"cell {at} line {line}"

        def replace(match: re.Match) -> str:
            parts = re.split(r"(, |-)", match.group(1))
            return "".join(cell(p) if i % 2 == 0 else p for i, p in enumerate(parts))

        return _CITED.sub(replace, message)

    def rebuild(self, module: str) -> bytes:
        """The notebook with each cell's source taken from the fixed ``module``."""
        cells: dict[int, list[str]] = {}
        current: list[str] = []
        head = current
        for line in module.splitlines():
            match = _MARKER_LINE.match(line)
            if match:
                current = cells.setdefault(int(match.group(1)), [])
                continue
            magic = _MAGIC_LINE.match(line)
            current.append(self.magics[int(magic.group(2))] if magic else line)
        if head:  # lines above the first marker (an added import) open the first cell
            first = next(iter(self.sources))
            cells[first] = head + cells.get(first, [])
        for index, lines in cells.items():
            original = self.sources[index]
            text = "\n".join(lines)
            if original.endswith("\n") or not original:
                text += "\n" if lines else ""
            if "\r\n" in original:  # the module was read with universal newlines
                text = text.replace("\n", "\r\n")
            if text != original:
                self._set_source(index, text)
        import json

        dumped = json.dumps(self.data, indent=self.indent, ensure_ascii=False)
        return (dumped + ("\n" if self.trailing_newline else "")).encode("utf-8")

    def _set_source(self, index: int, text: str) -> None:
        """The cell's new text; a list source keeps its own pieces wherever they are unchanged
        (the ones before and after the changed lines), so the JSON diff shows only those."""
        cell = self.data["cells"][index]
        old = cell.get("source")
        if not isinstance(old, list):
            cell["source"] = text
            return
        head: list[str] = []
        rest = text
        for piece in old:
            if not rest.startswith(piece):
                break
            head.append(piece)
            rest = rest[len(piece) :]
        tail: list[str] = []
        for piece in reversed(old[len(head) :]):
            if not piece or not rest.endswith(piece):
                break
            tail.insert(0, piece)
            rest = rest[: -len(piece)]
        cell["source"] = head + rest.splitlines(keepends=True) + tail


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _is_ipython(line: str) -> bool:
    """IPython syntax: a magic, a shell escape, help, or an automagic that is not Python."""
    if _IPYTHON.match(line):
        return True
    if not _AUTOMAGIC.match(line):
        return False
    try:
        ast.parse(line.strip())
    except SyntaxError:
        return True
    return False


def _needs_masking(source: str) -> bool:
    """Only a cell that is not valid Python has IPython lines: ``"%d" \\n % x`` is Python."""
    if not any(_is_ipython(line) for line in source.splitlines()):
        return False
    try:
        ast.parse(source)
    except SyntaxError:
        return True
    return False


def cell_sources(raw: bytes) -> dict[int, str]:
    """Code cell position (1-based) -> source, for diffs."""
    notebook = Notebook.parse(raw)
    return {index + 1: source for index, source in notebook.sources.items()}
