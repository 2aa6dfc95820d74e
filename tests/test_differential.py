"""No finding lost or gained: today's engine against the libcst engine's snapshot.

The snapshot (tests/differential/snapshot.json.gz, taken with scripts/differential.py from commit
376752c) holds every diagnostic of ``check`` and the output of ``fix`` and ``fix --unsafe-fixes``
for the fixtures and every rule example; the intended differences are listed with a reason in
tests/differential/allowed.toml. The ecosystem packages are compared by
``scripts/differential.py compare --ecosystem`` (they are downloaded, not committed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import differential

# (one worker runs the whole file: its module-scoped fixture runs once)
pytestmark = pytest.mark.xdist_group("differential")


@pytest.fixture(scope="module")
def runs() -> tuple[dict, dict]:
    old = differential.load(differential.SNAPSHOT)
    inputs = [(k, r["text"], r["target_keras"]) for k, r in old.items() if "text" in r]
    new = {**differential.collect_fixtures(), **differential.collect_examples(inputs)}
    return old, new


def test_snapshot_covers_fixtures_and_every_rule_example(runs):
    old, _ = runs
    examples = {k for k, r in old.items() if "text" in r}
    assert {k.partition("/")[0] for k in examples} >= {f"AMP{n}" for n in (101, 202, 303, 411)}
    assert sum(1 for k in old if k.startswith("fixtures/")) >= 80
    assert any(r["unsafe"] for r in old.values()), "the snapshot holds fix outputs"


def test_findings_and_fixes_match_the_snapshot(runs):
    old, new = runs
    problems = differential.compare(old, new, differential.allowed())
    assert not problems, "\n\n".join(problems)


def test_every_allowed_difference_still_differs(runs):
    old, new = runs
    assert differential.stale(old, new, differential.allowed()) == []
