"""Render diagnostics for people (text) and for machines (json, github, sarif)."""

from __future__ import annotations

from collections.abc import Sequence

from ampmigrate import __version__
from ampmigrate.catalog import all_rules
from ampmigrate.findings import Diagnostic

FORMATS = ("text", "concise", "json", "github", "sarif")


def _location(d: Diagnostic) -> str:
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{d.path}:{cell}{d.line}:{d.col}"


def text(diagnostics: Sequence[Diagnostic], unsafe_fixes: bool = False) -> str:
    """One line per finding, with Ruff's ``[*]`` marker on the ones ``fix`` would repair with
    these options (``concise`` is the same: Ruff's name for its one-line format)."""
    marked = ("safe", "unsafe") if unsafe_fixes else ("safe",)
    return "".join(
        f"{_location(d)}: {d.code} {'[*] ' if d.fix in marked else ''}{d.message}\n"
        for d in diagnostics
    )


def as_json(diagnostics: Sequence[Diagnostic]) -> str:
    import json  # only for this format: it costs start-up time on every run

    items = [
        {
            "code": d.code,
            "message": d.message,
            "filename": d.path,
            "cell": d.cell,
            "location": {"row": d.line, "column": d.col},
            "end_location": {"row": d.end_line, "column": d.end_col},
            "fix": {"applicability": d.fix} if d.fix else None,
            # no public documentation site yet: `ampmigrate explain CODE` prints the rule's page
            "url": None,
        }
        for d in diagnostics
    ]
    return json.dumps(items, indent=2) + "\n"


def _escape_property(value: str) -> str:
    return (
        value.replace("%", "%25")
        .replace("\r", "%0D")
        .replace("\n", "%0A")
        .replace(":", "%3A")
        .replace(",", "%2C")
    )


def github(diagnostics: Sequence[Diagnostic]) -> str:
    """GitHub Actions workflow commands: annotations on the pull request's diff."""
    lines = []
    for d in diagnostics:
        message = f"{d.code} {d.message}".replace("%", "%25").replace("\n", "%0A")
        lines.append(
            f"::error title=ampmigrate ({d.code}),file={_escape_property(d.path)},"
            f"line={d.line},col={d.col},endLine={d.end_line},endColumn={d.end_col}::{message}\n"
        )
    return "".join(lines)


def sarif(diagnostics: Sequence[Diagnostic]) -> str:
    """SARIF 2.1.0, as GitHub code scanning ingests it."""
    import json

    rules = all_rules()
    codes = list(rules)
    driver_rules = [
        {
            "id": code,
            "name": rule.name,
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.why},
            "help": {"text": f"{rule.use_instead}\n\nFix safety: {rule.fix_safety}"},
            "defaultConfiguration": {"level": "error"},
        }
        for code, rule in rules.items()
    ]
    results = [
        {
            "ruleId": d.code,
            "ruleIndex": codes.index(d.code),
            "level": "error",
            "message": {"text": d.message},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": d.path.replace("\\", "/")},
                        "region": {
                            "startLine": d.line,
                            "startColumn": d.col,
                            "endLine": d.end_line,
                            "endColumn": d.end_col,
                        },
                    }
                }
            ],
        }
        for d in diagnostics
    ]
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "ampmigrate",
                        "version": __version__,
                        "rules": driver_rules,
                    }
                },
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


RENDERERS = {"text": text, "concise": text, "json": as_json, "github": github, "sarif": sarif}
