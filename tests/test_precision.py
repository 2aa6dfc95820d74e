"""Precision on real projects (issue 22): no rewrite that breaks a program, in the shapes found.

Each case is a small project of its own in the shape the ecosystem run found, checked through
the real engine, and where torch can run it on CPU, the migrated code is run too.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import check_source, fix_source

REGISTRY = """\
import torch

SAVERS = {torch.cuda.amp.grad_scaler.GradScaler: lambda s: s.state_dict()}


def saver(obj):
    for cls in type(obj).__mro__:
        if cls in SAVERS:
            return SAVERS[cls]
    raise RuntimeError("Don't know how to save")
"""

TRAIN = """\
import warnings

import torch

from hooks import saver

warnings.simplefilter("error", FutureWarning)
scaler = torch.cuda.amp.GradScaler(enabled=False)
print("saved", saver(scaler)(scaler))
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "hooks.py").write_text(REGISTRY)
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def test_a_constructor_beside_a_registry_keyed_on_the_old_class_is_unsafe(tmp_path, cli):
    """The migrated scaler is no longer found in a registry keyed on the old class: the
    constructor's fix is unsafe and says where the class is used as a value."""
    project = _project(tmp_path)
    checked = cli("check", "--output-format", "concise", str(project))
    lines = [line for line in checked.stdout.splitlines() if "train.py:8" in line]
    assert len(lines) == 1
    assert "hooks.py:3" in lines[0] and "used as a value" in lines[0]
    assert "[*]" not in lines[0]  # not a safe fix any more
    plain = cli("fix", str(project))
    assert plain.returncode == 1
    assert (project / "train.py").read_text() == TRAIN  # nothing applied without --unsafe-fixes
    assert (project / "hooks.py").read_text() == REGISTRY
    # With the unsafe fixes both sides move together, and the program still runs.
    cli("fix", "--unsafe-fixes", str(project))
    assert "torch.amp.GradScaler: lambda" in (project / "hooks.py").read_text()
    ran = subprocess.run(
        [sys.executable, "train.py"], cwd=project, capture_output=True, text=True, check=False
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("saved")


def test_the_original_registry_program_breaks_when_only_the_constructor_moves(tmp_path):
    """Why the grade matters: the constructor alone migrated raises in the registry lookup."""
    project = _project(tmp_path)
    train = TRAIN.replace("torch.cuda.amp.GradScaler(", 'torch.amp.GradScaler("cuda", ')
    (project / "train.py").write_text(train)
    ran = subprocess.run(
        [sys.executable, "train.py"], cwd=project, capture_output=True, text=True, check=False
    )
    assert "Don't know how to save" in ran.stderr


def test_assert_is_instance_keeps_a_class(tmp_path):
    source = textwrap.dedent(
        """\
        import unittest
        import warnings

        import torch
        from torch.cuda.amp import GradScaler

        warnings.simplefilter("error", FutureWarning)


        class T(unittest.TestCase):
            def test_it(self):
                scaler = torch.cuda.amp.GradScaler(enabled=False)
                self.assertIsInstance(scaler, GradScaler, "a scaler")
                self.assertNotIsInstance(1, GradScaler)


        unittest.main(argv=["t"], exit=False)
        """
    )
    out, remaining, fixed = fix_source(source)
    assert "partial" not in out
    assert "self.assertIsInstance(scaler, torch.amp.GradScaler, " in out
    assert "self.assertNotIsInstance(1, torch.amp.GradScaler)" in out
    assert not remaining and len(fixed) == 3
    script = tmp_path / "t.py"
    script.write_text(out)
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert ran.returncode == 0 and "OK" in ran.stderr, ran.stderr
    assert fix_source(out)[2] == []  # idempotent


def test_identity_uses_become_the_new_class_never_a_partial():
    source = textwrap.dedent(
        """\
        import torch

        HOOKS = {torch.cuda.amp.GradScaler: save}
        hook = HOOKS[torch.cuda.amp.GradScaler]
        same = type(s) is torch.cuda.amp.GradScaler
        """
    )
    out, _remaining, fixed = fix_source(source, unsafe=True)
    assert "partial" not in out
    assert out.count("torch.amp.GradScaler") == 3 and "cuda.amp" not in out
    assert all(d.fix == "unsafe" for d in fixed) and len(fixed) == 3
    safe = check_source(source)
    assert all("used as" in d.message and d.fix == "unsafe" for d in safe)


def test_a_class_value_becomes_a_partial_only_where_it_is_only_called():
    called = textwrap.dedent(
        """\
        import functools
        import torch

        ctx = torch.cuda.amp.autocast if use_amp else contextlib.nullcontext
        with ctx():
            pass
        """
    )
    out, _, fixed = fix_source(called, unsafe=True)
    assert "functools.partial(torch.amp.autocast" in out and fixed[0].fix == "unsafe"
    for shape in (
        "register(torch.cuda.amp.GradScaler, save)\n",
        "Scaler = torch.cuda.amp.GradScaler\nassert isinstance(s, Scaler)\n",
        "Scaler = torch.cuda.amp.GradScaler\n",  # read nowhere here: maybe imported elsewhere
    ):
        source = "import torch\n\n" + shape
        out, remaining, fixed = fix_source(source, unsafe=True)
        assert out == source and not fixed
        assert "no automatic fix: the class is used as a value" in remaining[0].message


def test_a_policy_loss_scale_is_never_written_onto_the_stable_policy():
    source = textwrap.dedent(
        """\
        import tensorflow as tf

        opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
            opt, tf.keras.mixed_precision.experimental.global_policy().loss_scale
        )
        policy = tf.keras.mixed_precision.experimental.global_policy()
        print(policy.loss_scale)
        """
    )
    for keras in (2, 3):
        out, remaining, fixed = fix_source(source, unsafe=True, target_keras=keras)
        assert out == source and not fixed
        assert sum("`.loss_scale` of its result" in d.message for d in remaining) == 2


RESOLVE = """
import importlib
from ampmigrate.catalog import all_rules

missing = []
for r in all_rules().values():
    for p in r.paths:
        if p.kind not in ("rename", "module"):
            continue
        parts = p.new.split(".")
        obj = importlib.import_module(parts[0])
        for i, part in enumerate(parts[1:], 1):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                try:
                    obj = importlib.import_module(".".join(parts[: i + 1]))
                except ImportError:
                    missing.append(p.new)
                    break
print("MISSING", sorted(set(missing)))
"""


def test_every_keras_rename_target_exists_on_keras_3_and_tf_keras():
    """What an AMP40x fix writes resolves on the installed TensorFlow with Keras 3 and with
    tf-keras (TF_USE_LEGACY_KERAS=1): a rename target that does not exist is no fix."""
    import os

    for legacy in ("0", "1"):
        env = {**os.environ, "TF_USE_LEGACY_KERAS": legacy, "TF_CPP_MIN_LOG_LEVEL": "3"}
        ran = subprocess.run(
            [sys.executable, "-c", RESOLVE], capture_output=True, text=True, env=env, check=False
        )
        assert "MISSING []" in ran.stdout, (legacy, ran.stdout, ran.stderr[-2000:])


# ---- torch floors per symbol (docs/torch-floors.md) -------------------------------------------

FLOORS = {  # replacement -> first release, as the docs table shows it from the wheels
    "torch.autocast": (1, 10),
    "torch.amp.autocast": (1, 12),
    "torch.amp.GradScaler": (2, 3),
    "torch.amp.custom_fwd": (2, 4),
    "torch.amp.custom_bwd": (2, 4),
    "torch.get_autocast_dtype": (2, 4),
    "torch.set_autocast_dtype": (2, 4),
    "torch.is_autocast_enabled": (2, 4),
    "torch.set_autocast_enabled": (2, 4),
}


def test_each_symbols_floor_is_the_documented_release():
    from ampmigrate.catalog import all_rules

    from conftest import ROOT

    table = (ROOT / "docs" / "torch-floors.md").read_text()
    for rule in all_rules().values():
        for sym in rule.symbols:
            if sym.kind == "manual":
                continue
            assert sym.min_torch == FLOORS[sym.new], sym.old
            for since, new in sym.older:
                assert since == FLOORS[new], sym.old
    for name, (major, minor) in FLOORS.items():
        row = next(line for line in table.splitlines() if f"`{name}" in line and "|" in line)
        assert f"| {major}.{minor} |" in row, name


def _fixed_on(tmp_path: Path, cli, declared: str) -> tuple[str, str]:
    project = tmp_path / declared.replace(">=", "").replace(".", "_")
    (project / "pkg").mkdir(parents=True)
    (project / "requirements.txt").write_text(f"numpy\n{declared}\n")
    source = (
        "import torch\n\n"
        "with torch.cuda.amp.autocast():\n    pass\n"
        "scaler = torch.cuda.amp.GradScaler()\n"
    )
    (project / "pkg" / "m.py").write_text(source)
    checked = cli("check", "--output-format", "concise", str(project)).stdout
    cli("fix", str(project))
    return (project / "pkg" / "m.py").read_text(), checked


def test_plain_fix_writes_what_the_declared_torch_has(tmp_path, cli):
    old, said = _fixed_on(tmp_path, cli, "torch>=1.10")
    assert 'with torch.autocast("cuda", dtype=torch.float16):' in old
    assert "written as `torch.autocast`: the project's torch floor 1.10" in said
    assert "torch.cuda.amp.GradScaler()" in old  # torch.amp.GradScaler needs 2.3
    assert "the fix needs torch >= 2.3; target-torch is 1.10" in said
    mid, said = _fixed_on(tmp_path, cli, "torch>=1.12")
    assert 'with torch.amp.autocast("cuda", dtype=torch.float16):' in mid
    assert "written as" not in said
    assert "torch.cuda.amp.GradScaler()" in mid
    new, _ = _fixed_on(tmp_path, cli, "torch>=2.3")
    assert 'torch.amp.GradScaler("cuda")' in new
    older, said = _fixed_on(tmp_path, cli, "torch>=1.9")
    assert "torch.cuda.amp.autocast()" in older  # nothing exact exists on 1.9
    assert "the fix needs torch >= 1.12; target-torch is 1.9" in said


def test_the_torch_autocast_fallback_runs_and_is_the_same_class(tmp_path):
    """What the 1.10-1.11 fallback writes runs on today's torch without a deprecation warning
    and is the class the newer replacement names."""
    import torch

    assert torch.autocast is torch.amp.autocast
    script = tmp_path / "run.py"
    script.write_text(
        "import warnings\nimport torch\n"
        'warnings.simplefilter("error", FutureWarning)\n'
        'with torch.autocast("cpu", dtype=torch.bfloat16):\n'
        "    y = torch.ones(2, 2) @ torch.ones(2, 2)\n"
        "print(y.dtype)\n"
    )
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert ran.stdout.strip() == "torch.bfloat16", ran.stderr


def test_a_torch_floor_from_a_setup_py_deps_table(tmp_path):
    from ampmigrate.floor import find

    (tmp_path / "setup.py").write_text(
        textwrap.dedent(
            """\
            import re
            from setuptools import setup

            _deps = ["numpy>=1.17", "torch>=1.10,!=1.12.0", "accelerate>=0.20"]
            pattern = r"^(([^!=<>~ ]+)(?:[!=<>~ ].*)?$)"
            deps = {b: a for a, b in (re.findall(pattern, x)[0] for x in _deps)}


            def deps_list(*pkgs):
                return [deps[pkg] for pkg in pkgs]


            extras = {"torch": deps_list("torch", "accelerate")}
            setup(name="x", install_requires=deps_list("numpy"), extras_require=extras)
            """
        )
    )
    floor = find([tmp_path])
    assert floor is not None and floor.version == (1, 10)
    assert "torch>=1.10" in floor.source
