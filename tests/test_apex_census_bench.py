"""scripts/apex_census_bench.py on a census of two made-up repositories (no third-party code)."""

from __future__ import annotations

import importlib.util
import json
import sys

from conftest import OPEN_LEVEL, ROOT

_spec = importlib.util.spec_from_file_location(
    "apex_census_bench", ROOT / "scripts" / "apex_census_bench.py"
)
bench = importlib.util.module_from_spec(_spec)
sys.modules["apex_census_bench"] = bench
_spec.loader.exec_module(bench)

NATIVE = """\
import apex
from apex.normalization import FusedLayerNorm

norm = FusedLayerNorm(8)
opt = apex.optimizers.FusedAdam(params, lr=1e-3)
"""
BLOCKED = """\
from apex.optimizers import FusedLAMB

opt = FusedLAMB(params, lr=1e-3)
"""


def test_one_repository_ends_apex_free_and_the_other_says_why_not(tmp_path):
    census = tmp_path / "census"
    for name, text in (("a+native", NATIVE), ("b+blocked", BLOCKED)):
        (census / name).mkdir(parents=True)
        (census / name / "train.py").write_text(text)
    manifest = tmp_path / "census.json"
    entries = [
        {"repo": "a/native", "split": "dev",
         "files": {"train.py": ["apex.normalization.FusedLayerNorm", "apex.optimizers.FusedAdam"]}},
        {"repo": "b/blocked", "split": "dev", "files": {"train.py": ["apex.optimizers.FusedLAMB"]}},
    ]  # fmt: skip
    manifest.write_text(json.dumps({"entries": entries}))
    out = tmp_path / "result.json"
    status = bench.main([str(census), "--manifest", str(manifest), "--json", str(out)])
    result = json.loads(out.read_text())
    assert status == 0
    native, blocked = result["repositories"]
    assert native["expected"] == "native" and native["apex_free"] and native["changed"] == 1
    assert blocked["expected"] == "blocked" and blocked["blocking"] == ["apex.optimizers.FusedLAMB"]
    assert not blocked["apex_free"] and blocked["left_by"] == ["apex API"]
    assert result["summary"]["native_apex_free"] == 1
    assert (census / "a+native" / "train.py").read_text() == NATIVE  # the census is untouched


def test_apex_opt_level_is_passed_to_fix_and_check(tmp_path):
    """An opt level from a flag without `choices` keeps the repository on apex, unless the run
    declares --apex-opt-level O1, as a repository's [tool.ampmigrate] would."""
    census = tmp_path / "census"
    (census / "c+open").mkdir(parents=True)
    (census / "c+open" / "train.py").write_text(OPEN_LEVEL)
    manifest = tmp_path / "census.json"
    entry = {"repo": "c/open", "split": "dev", "files": {"train.py": ["apex.amp.initialize"]}}
    manifest.write_text(json.dumps({"entries": [entry]}))
    results = []
    for extra in ([], ["--apex-opt-level", "O1"]):
        out = tmp_path / "result.json"
        assert (
            bench.main([str(census), "--manifest", str(manifest), "--json", str(out), *extra]) == 0
        )
        results.append(json.loads(out.read_text()))
    (plain,), (declared,) = (r["repositories"] for r in results)
    assert [r["apex_opt_level"] for r in results] == [None, "O1"]
    assert not plain["apex_free"] and plain["left_by"] == ["apex.amp"]
    assert any("is not provably O1" in f for f in plain["remaining"]["train.py"]["findings"])
    assert declared["apex_free"] and declared["changed"] == 1


def test_a_repository_that_names_o2_is_native_by_name_but_not_by_level(tmp_path):
    """UNITER and HERO import only `apex.amp` (a name with a torch counterpart) but initialize
    at a literal O2, which torch.amp cannot express: counted apart, with the level."""
    census = tmp_path / "census"
    (census / "d+o2").mkdir(parents=True)
    source = OPEN_LEVEL.replace("opt_level=args.fp16_opt_level", 'opt_level="O2"')
    assert '"O2"' in source
    (census / "d+o2" / "train.py").write_text(source)
    manifest = tmp_path / "census.json"
    entry = {"repo": "d/o2", "split": "dev", "files": {"train.py": ["apex.amp.initialize"]}}
    manifest.write_text(json.dumps({"entries": [entry]}))
    out = tmp_path / "result.json"
    assert bench.main([str(census), "--manifest", str(manifest), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    [row] = result["repositories"]
    assert row["expected"] == "native" and row["literal_o2_o3"] == ["O2"]
    assert not row["apex_free"]
    summary = result["summary"]
    assert summary["expected_native"] == 1 and summary["expected_native_at_o1"] == 0
    assert summary["native_at_o1_apex_free"] == 0
