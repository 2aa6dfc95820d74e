"""The markdown report of a one-off migration (``ampmigrate fix --report FILE.md``)."""

from __future__ import annotations

import collections
from collections.abc import Sequence

from ampmigrate.catalog import all_rules
from ampmigrate.engine import FileResult
from ampmigrate.findings import Diagnostic


def _where(d: Diagnostic) -> str:
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{d.path}:{cell}{d.line}:{d.col}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(results: Sequence[FileResult], applied: bool) -> str:
    rules = all_rules()
    changed = [r for r in results if r.changed]
    fixed = [d for r in changed for d in r.fixed]
    remaining = [d for r in results for d in r.diagnostics]
    hidden = [d for r in results for d in r.suppressed]
    errors = [r for r in results if r.error]
    unsafe = sum(d.fix == "unsafe" for d in remaining)
    verb = "fixed" if applied else "would be fixed (`--diff`: nothing written)"
    lines = [
        "# ampmigrate migration report",
        "",
        f"- Files checked: {len(results)} ({sum(r.parsed for r in results)} parsed)",
        f"- Files changed: {len(changed)}",
        f"- Findings {verb}: {len(fixed)}",
        f"- Findings remaining: {len(remaining)}"
        + (f" ({unsafe} with an unsafe fix: rerun with `--unsafe-fixes`)" if unsafe else ""),
        f"- Files with errors: {len(errors)}",
    ]
    if hidden:
        lines.insert(-1, f"- Findings suppressed by `# noqa`: {len(hidden)} (listed below)")
    if fixed:
        lines += ["", "## Fixed, by rule", "", "| Rule | Name | Fixed |", "|---|---|---|"]
        for code, count in sorted(collections.Counter(d.code for d in fixed).items()):
            lines.append(f"| `{code}` | {rules[code].name} | {count} |")
        lines += ["", "## Changed files", ""]
        for result in changed:
            counts = collections.Counter(d.code for d in result.fixed)
            detail = ", ".join(f"{c} x{n}" if n > 1 else c for c, n in sorted(counts.items()))
            lines.append(f"- `{result.path}`: {detail}")
    if remaining:
        lines += [
            "",
            "## What remains",
            "",
            "| Location | Rule | Fix | Message |",
            "|---|---|---|---|",
        ]
        for d in sorted(remaining, key=lambda d: d.sort_key):
            rule = f"`{d.code}`"
            lines.append(f"| `{_where(d)}` | {rule} | {d.fix or 'none'} | {_cell(d.message)} |")
    if hidden:  # (a bare suppression comment written for flake8 hides an apex import too)
        lines += [
            "",
            "## Suppressed by `# noqa` (`--ignore-noqa` reports them)",
            "",
            "| Location | Rule | Message |",
            "|---|---|---|",
        ]
        for d in sorted(hidden, key=lambda d: d.sort_key):
            lines.append(f"| `{_where(d)}` | `{d.code}` | {_cell(d.message)} |")
    if errors:
        lines += ["", "## Errors", ""]
        lines += [f"- `{r.path}`: {_cell(r.error)}" for r in errors]
    return "\n".join(lines) + "\n"
