"""Compare AMP303's ``ast`` verdict (ampmigrate/apex/verdict.py) with the libcst planner's finding.

    python scripts/apex_verdict.py PATH... [--verbose] [--drop-initialize]

For every ``.py`` file under PATH whose apex calls the engine sees: the verdict on ``ast`` (a
file without ``amp.initialize``) and the planner's finding, run directly on libcst, must have
the same message and the same position. Prints the counts (judged on ast and equal, left to the
planner with and without ``initialize``, unparsable) and every mismatch; exits 1 on a mismatch.
``--drop-initialize`` first renames every ``amp.initialize(`` call (to ``amp_initialize(``), so
the files that initialize (most of a corpus) become files the verdict judges too. The tests run
the same comparison on the fixtures, the rule examples and in-test sources.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

Result = tuple[str, tuple[int, int, int, int]]  # (message, (line, col, end line, end col))


def planned(text: str) -> Result | None:
    """The planner's AMP303 finding on ``text`` (no apex pair), with libcst's position."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider, ScopeProvider

    from ampmigrate.apex.facts import Walk
    from ampmigrate.apex.planner import ApexO1
    from ampmigrate.catalog import all_rules
    from ampmigrate.cstnames import scopes

    module = cst.parse_module(text)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    visitor = ApexO1(all_rules()["AMP303"])
    metadata = {ParentNodeProvider: Walk(module), ScopeProvider: scopes(module)}  # as the engine
    visitor.metadata = {p: metadata[p] for p in visitor.get_inherited_dependencies()}
    module.visit(visitor)
    if not visitor.findings:
        return None
    (finding,) = visitor.findings
    where = wrapper.resolve(PositionProvider)[finding.node]
    span = (where.start.line, where.start.column + 1, where.end.line, where.end.column + 1)
    return finding.message, span


def judged(text: str) -> Result | str | None:
    """The ``ast`` verdict on ``text``; "no calls" where the engine sees no apex call (and never
    runs AMP303), "planner" where the verdict leaves the file to libcst."""
    from ampmigrate.apex.strays import apex_calls
    from ampmigrate.apex.verdict import verdict
    from ampmigrate.engine.names import Names
    from ampmigrate.engine.source import Source

    names = Names(ast.parse(text))
    calls = apex_calls(names)
    if not calls:
        return "no calls"
    source = Source(text)
    found = verdict(names, source, calls)
    if found is None:
        return "planner"
    message, anchor = found
    return message, source.position(anchor)


def _initializes(text: str) -> bool:
    from ampmigrate.apex.strays import apex_calls
    from ampmigrate.engine.names import Names

    names = Names(ast.parse(text))
    return any("apex.amp.initialize" in names.qualified(c.func) for c in apex_calls(names))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--verbose", action="store_true", help="name the files left to libcst")
    parser.add_argument("--drop-initialize", action="store_true", help="rename amp.initialize")
    args = parser.parse_args(argv)
    files = [f for p in args.paths for f in ([p] if p.is_file() else sorted(p.rglob("*.py")))]
    counts = {"equal": 0, "planner (initialize)": 0, "planner (unsure)": 0, "unparsable": 0}
    mismatches = 0
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
            if args.drop_initialize:
                text = re.sub(r"\bamp\.initialize\(", "amp_initialize(", text)
            result = judged(text)
        except (SyntaxError, ValueError, UnicodeDecodeError):
            counts["unparsable"] += 1
            continue
        if result == "no calls":
            continue
        if result == "planner":
            has_init = _initializes(text)
            counts["planner (initialize)" if has_init else "planner (unsure)"] += 1
            if args.verbose or not has_init:
                print(f"planner: {path}")
            continue
        expected = planned(text)
        if result == expected:
            counts["equal"] += 1
            if args.verbose:
                print(f"equal: {path}")
            continue
        mismatches += 1
        print(f"MISMATCH {path}\n  ast:    {result}\n  libcst: {expected}")
    print(", ".join(f"{k}: {v}" for k, v in counts.items()) + f", mismatches: {mismatches}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
