"""The engine knows rule families only through the registry (ampmigrate.families): importing any
engine module on its own loads no family, so no family can import the engine back in a circle."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from ampmigrate.families import FAMILIES, PROJECT_PASSES

ENGINE = Path(__file__).resolve().parent.parent / "ampmigrate" / "engine"
# what every stage may use: the rule catalog, the registry, findings, suppressions, notebooks
SHARED = {"catalog", "families", "findings", "noqa", "notebook"}
REGISTERED = {f.module for f in FAMILIES} | {p.module for p in PROJECT_PASSES}


def _loaded_by(module: str) -> set[str]:
    code = f"import sys, {module}; print(*(m for m in sys.modules if m.startswith('ampmigrate')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("path", sorted(ENGINE.glob("*.py")), ids=lambda p: p.stem)
def test_an_engine_module_alone_imports_no_rule_family(path: Path) -> None:
    module = "ampmigrate.engine" + ("" if path.stem == "__init__" else f".{path.stem}")
    loaded = _loaded_by(module)
    assert not loaded & REGISTERED
    outside = {m for m in loaded if not m.startswith("ampmigrate.engine") and m != "ampmigrate"}
    shared = {f"ampmigrate.{name}" for name in SHARED}
    assert outside <= shared, outside - shared


def test_the_registry_names_modules_that_exist_and_load_no_family_itself() -> None:
    assert not _loaded_by("ampmigrate.families") & REGISTERED
    for module in REGISTERED:
        assert importlib.util.find_spec(module) is not None, module
    for project_pass in PROJECT_PASSES:
        assert callable(project_pass.function(project_pass.prepare))
        if project_pass.settle:
            assert callable(project_pass.function(project_pass.settle))


def test_the_apex_planners_stages_define_each_method_once():
    """The planner is one class mixed from its stages (`ampmigrate/apex/*.py`): a method one
    stage defines under a name another already uses silently replaces it for every caller (a
    `_tested` helper added to handles once shadowed step's, with another signature)."""
    import collections
    import inspect

    import ampmigrate.apex.planner as planner

    owners = collections.defaultdict(list)
    stages = [s for s in planner._Planner.__mro__ if s.__module__.startswith("ampmigrate.")]
    assert len(stages) > 10
    for stage in stages:
        for name, value in vars(stage).items():
            if inspect.isfunction(value):
                owners[name].append(stage.__name__)
    assert {n: s for n, s in owners.items() if len(s) > 1} == {}


def test_no_two_stages_of_the_apex_planner_define_one_method():
    """The planner is one class mixed from its stages: a method name two stages define is
    silently the first one's for both (a `_bound` of the scale bounds once shadowed the
    version gates' `_bound` and the planner raised TypeError on every file that reached it)."""
    from ampmigrate.apex.planner import _Planner

    owners: dict[str, list[str]] = {}
    for stage in _Planner.__mro__[1:]:
        for name, value in vars(stage).items():
            if callable(value) and not name.startswith("__"):
                owners.setdefault(name, []).append(stage.__name__)
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}
