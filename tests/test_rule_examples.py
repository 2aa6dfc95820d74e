"""Every rule's own examples are its tests: VALID stays silent, INVALID is flagged and fixed."""

from __future__ import annotations

import pytest

from ampmigrate.catalog import all_rules
from ampmigrate.engine import Settings, run
from ampmigrate.engine.prefilter import Prefilter

from conftest import check_source, fix_source

RULES = all_rules()
VALID = [(code, i, src) for code, r in RULES.items() for i, src in enumerate(r.valid)]
FILES = {(code, i): f for code, r in RULES.items() for i, f in enumerate(r.valid_files) if f}
INVALID = [(code, i, ex) for code, r in RULES.items() for i, ex in enumerate(r.invalid)]


def test_every_rule_has_examples_of_both_kinds():
    for code, rule in RULES.items():
        assert rule.triggers, f"{code} has no trigger names: the prefilter would never run it"
        assert rule.valid, f"{code} has no VALID example"
        assert rule.invalid, f"{code} has no INVALID example"


@pytest.mark.parametrize(
    ("code", "index", "source"), VALID, ids=[f"{c}-valid{i}" for c, i, _ in VALID]
)
def test_valid_example_is_not_flagged(code, index, source, tmp_path):
    if (code, index) in FILES:
        found, _ = _as_file(tmp_path, FILES[code, index], source)
        assert [d for d in found if d.code == code] == []
        return
    assert [d for d in check_source(source) if d.code == code] == []


def _as_file(folder, name: str, text: str) -> tuple[list, list]:
    """A dependency-file example as the only file of a project: (what `check` reports, the
    results of `fix --unsafe-fixes`)."""
    path = folder / name
    path.write_text(text, encoding="utf-8")
    rules = tuple(RULES.values())
    checked = run([path], Settings(rules=rules), jobs=1)
    fixed = run([path], Settings(rules=rules, fix=True, unsafe_fixes=True), jobs=1)
    assert all(r.error is None for r in checked + fixed)
    return [d for r in checked for d in r.diagnostics], fixed


@pytest.mark.parametrize(
    ("code", "index", "example"), INVALID, ids=[f"{c}-invalid{i}" for c, i, _ in INVALID]
)
def test_invalid_example_is_flagged_and_fixed(code, index, example, tmp_path):
    if example.file:  # a dependency file: reported, never rewritten
        found, fixed = _as_file(tmp_path, example.file, example.before)
        flagged = [d for d in found if d.code == code]
        assert flagged and all(d.fix is None for d in flagged)
        assert example.after is None and not any(r.changed for r in fixed)
        assert [d.code for r in fixed for d in r.diagnostics if d.code == code]
        return
    keras = example.target_keras
    flagged = [d for d in check_source(example.before, keras) if d.code == code]
    assert flagged, "the example is not flagged"
    assert Prefilter(RULES[code].triggers).may_match(example.before.encode())

    safe_out, _, _ = fix_source(example.before, unsafe=False, target_keras=keras)
    out, remaining, _fixed = fix_source(example.before, unsafe=True, target_keras=keras)
    if example.after is None:
        assert out == example.before, "an example without `after` must get no fix"
        assert all(d.fix is None for d in flagged)
        return
    assert out == example.after
    if example.unsafe:
        assert any(d.fix == "unsafe" for d in flagged)
        assert safe_out != example.after, "an unsafe fix was applied without --unsafe-fixes"
    else:
        assert safe_out == example.after
    assert not [d for d in remaining if d.code == code]
    # idempotence: a second fix changes and reports nothing
    again, remaining2, fixed2 = fix_source(out, unsafe=True, target_keras=keras)
    assert again == out and not fixed2
    assert not [d for d in remaining2 if d.code == code]


def test_prefilter_takes_any_iterable_and_regex_triggers():
    triggers = ["torch.cuda.amp.autocast", "/\\.scale\\([^()]*\\)\\.backward\\(/"]
    for given in (triggers, iter(triggers), (t for t in triggers)):
        prefilter = Prefilter(given)
        assert prefilter.may_match(b"import torch\nwith torch.cuda.amp.autocast():\n    pass\n")
        assert prefilter.may_match(b"scaler.scale(loss).backward()\n")
        assert not prefilter.may_match(b"scale = 2\nloss.backward()\nautocast = torch\n")


def test_backward_under_autocast_shape_follows_indentation():
    prefilter = Prefilter(["@backward-under-autocast"])
    inside = b"with torch.autocast('cuda'):\n    loss = f(x)\n\n    loss.backward()\n"
    after = b"def step():\n    with torch.autocast('cuda'):\n        y = f(x)\n    y.backward()\n"
    decorated = b"@torch.autocast('cpu')\ndef step(x):\n    f(x).backward()\n"
    assert prefilter.may_match(inside) and prefilter.may_match(decorated)
    assert not prefilter.may_match(after)
