"""Before/after fixture pairs for every import form and context (fixtures/migrate)."""

from __future__ import annotations

import pytest

from conftest import FIXTURES, fix_source

PAIRS = sorted(p for p in (FIXTURES / "migrate").glob("*.py") if not p.name.endswith(".fixed.py"))


def test_there_are_fixture_pairs():
    assert len(PAIRS) >= 15
    for before in PAIRS:
        assert before.with_suffix(".fixed.py").exists(), before


@pytest.mark.parametrize("before", PAIRS, ids=[p.stem for p in PAIRS])
def test_fix_produces_expected_bytes(before):
    expected = before.with_suffix(".fixed.py").read_bytes()
    out, remaining, fixed = fix_source(before.read_bytes(), unsafe=True)
    assert out == expected
    assert fixed, "nothing was fixed"
    assert all(d.fix is None for d in remaining), "a fixable finding was left behind"


@pytest.mark.parametrize("before", PAIRS, ids=[p.stem for p in PAIRS])
def test_fix_is_idempotent(before):
    fixed_source = before.with_suffix(".fixed.py").read_bytes()
    out, remaining, fixed = fix_source(fixed_source, unsafe=True)
    assert out == fixed_source
    assert fixed == []
    assert all(d.fix is None for d in remaining)


@pytest.mark.parametrize("before", PAIRS, ids=[p.stem for p in PAIRS])
def test_fixed_output_compiles(before):
    compile(before.with_suffix(".fixed.py").read_bytes(), str(before), "exec")
