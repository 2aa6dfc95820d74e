"""``# noqa`` and ``# noqa: CODE[, CODE]`` suppression, as in Ruff and flake8."""

from __future__ import annotations

import re

_NOQA = re.compile(
    r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE
)


class Suppressions:
    def __init__(self, text: str) -> None:
        self._by_line: dict[int, frozenset[str] | None] = {}
        if "noqa" not in text.lower():
            return
        for number, line in enumerate(text.splitlines(), start=1):
            match = _NOQA.search(line)
            if match:
                codes = match.group("codes")
                self._by_line[number] = (
                    frozenset(c.upper() for c in re.split(r"[,\s]+", codes)) if codes else None
                )

    def suppresses(self, line: int, code: str) -> bool:
        if line not in self._by_line:
            return False
        codes = self._by_line[line]
        return codes is None or code in codes
