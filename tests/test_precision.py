"""Precision on real projects (issue 22): no rewrite that breaks a program, in the shapes found.

Each case is a small project of its own in the shape the ecosystem run found, checked through
the real engine, and where torch can run it on CPU, the migrated code is run too.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import torch

from ampmigrate.catalog import all_rules
from ampmigrate.engine import Settings
from ampmigrate.engine.migrate import migrate_source

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


HANDED = """\
import warnings
from contextlib import suppress

import torch


def train_one_epoch(model, x, amp_autocast=suppress):
    with amp_autocast():
        return model(x)


def main(use_amp):
    amp_autocast = suppress
    if use_amp:
        amp_autocast = torch.cuda.amp.autocast
    model = torch.nn.Linear(4, 4)
    return train_one_epoch(model, torch.randn(2, 4), amp_autocast=amp_autocast)
"""


def test_eleventh_review_a_class_value_handed_to_a_function_that_only_calls_it_is_a_partial():
    """timm's training scripts: `amp_autocast = torch.cuda.amp.autocast` handed to
    `train_one_epoch(..., amp_autocast=amp_autocast)`, which only calls it. "Used as a value
    that is not only called" was false; it becomes a partial, and the migrated region runs
    (on CPU, with torch's FutureWarnings as errors)."""
    out, remaining, fixed = fix_source(HANDED, unsafe=True)
    assert not remaining and [d.fix for d in fixed] == ["unsafe"]
    assert 'amp_autocast = functools.partial(torch.amp.autocast, "cuda"' in out
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        exec(compile(out.replace('"cuda"', '"cpu"'), "migrated", "exec"), namespace)
        assert namespace["main"](True).dtype == torch.float16
        assert namespace["main"](False).dtype == torch.float32
    for other in (
        "    print(amp_autocast is suppress)\n",  # compared in the callee
        "    amp_autocast = suppress\n",  # rebound there
    ):
        source = HANDED.replace("    with amp_autocast():\n", other + "    with amp_autocast():\n")
        out, remaining, fixed = fix_source(source, unsafe=True)
        assert not fixed and "not only called" in remaining[0].message, other


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


# ---- false positives fixed at their mechanism --------------------------------------------------


def _codes(source: str) -> list[tuple[str, int]]:
    return [(d.code, d.line) for d in check_source(textwrap.dedent(source))]


ENGINE = """\
import torch


class Engine:
    def __init__(self, model, optimizer):
        self.scaler = torch.amp.GradScaler("cuda")
        self.model, self.optimizer = model, optimizer

    def _optimizer_step(self):
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)

    def _step(self):
        self._optimizer_step()

    def train(self, loader):
        for x in loader:
            self.scaler.scale(self.model(x).sum()).backward()
            self._step()
            self.scaler.update()
"""


def test_step_whose_update_runs_in_a_caller_is_not_flagged():
    """AMP205 follows the calls of the stepping method up the call graph (two levels here)."""
    assert "AMP205" not in [c for c, _ in _codes(ENGINE)]
    # The same shape with the caller's update gone, or in the other arm of an if, is flagged.
    gone = ENGINE.replace("            self.scaler.update()\n", "")
    assert ("AMP205", 12) in _codes(gone)
    other_arm = ENGINE.replace(
        "            self._step()\n            self.scaler.update()\n",
        "            if log:\n                self._step()\n            else:\n"
        "                self.scaler.update()\n",
    )
    assert ("AMP205", 12) in _codes(other_arm)


def test_the_missing_update_message_is_what_torch_does(tmp_path):
    """The message's claim, checked: an enabled scaler's second step() of one optimizer without
    update() raises exactly this RuntimeError."""
    [finding] = [d for d in check_source(ENGINE.replace("            self.scaler.update()\n", ""))]
    assert "step() has already been called since the last update()" in finding.message
    script = tmp_path / "s.py"
    script.write_text(
        "import torch\nm = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        's = torch.amp.GradScaler("cpu")\n'
        "for _ in range(2):\n"
        "    s.scale(m(torch.ones(1, 2)).sum()).backward()\n"
        "    s.step(opt)\n"
    )
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert "RuntimeError: step() has already been called since the last update()" in ran.stderr


LAZY = """\
import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self._scaler = None

    @property
    def scaler(self):
        if self._scaler is None:
            self._scaler = torch.amp.GradScaler("cuda")
        return self._scaler

    def load(self, path):
        ckpt = torch.load(path)
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scaler.load_state_dict(ckpt["grad_scaler"])
"""


def test_a_scaler_behind_a_property_is_restored_through_it():
    assert _codes(LAZY) == []
    forgotten = LAZY.replace('        self.scaler.load_state_dict(ckpt["grad_scaler"])\n', "")
    assert ("AMP208", 17) in _codes(forgotten)


def test_a_weights_export_is_no_checkpoint_and_a_dict_misses_its_key_once():
    source = """\
        import torch

        scaler = torch.amp.GradScaler("cuda")
        for x in loader:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
        torch.save(model.state_dict(), "weights.pt")
        ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save(ckpt, "last.pt")
        torch.save(ckpt, "best.pt")
        torch.save(optimizer.state_dict(), "optimizer.pt")
        """
    assert _codes(source) == [("AMP208", 10), ("AMP208", 12)]


def test_a_policy_and_the_graph_rewrite_in_exclusive_branches():
    source = """\
        import tensorflow as tf

        if args.graph_rewrite:
            opt = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(opt)
        elif args.keras:
            tf.keras.mixed_precision.set_global_policy("mixed_float16")
        """
    assert "AMP408" not in [c for c, _ in _codes(source)]
    both = source.replace("elif args.keras:", "if args.keras:")
    assert ("AMP408", 4) in _codes(both)


def test_names_exclusive_arms():
    import ast

    from ampmigrate.engine.names import Names

    tree = ast.parse(
        "if a:\n    x()\n    y()\nelse:\n    z()\n"
        "try:\n    p()\nexcept E:\n    q()\nexcept F:\n    r()\nelse:\n    s()\n"
        "v = t() if c else u()\n"
    )
    names = Names(tree)
    calls = {n.func.id: n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    yes = [("x", "z"), ("q", "r"), ("q", "s"), ("t", "u")]
    no = [("x", "y"), ("p", "q"), ("x", "q")]
    assert all(names.exclusive(calls[a], calls[b]) for a, b in yes)
    assert not any(names.exclusive(calls[a], calls[b]) for a, b in no)


def test_a_project_module_named_optimizers_is_not_apex():
    source = """\
        import torch
        from apex import amp
        from mypkg.optimizers import build_optimizer


        def train(model, loader):
            optimizer = build_optimizer(model)
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
        """
    out, remaining, fixed = fix_source(textwrap.dedent(source), unsafe=True)
    said = " ".join(d.message for d in [*remaining, *fixed])
    assert [d.code for d in fixed] == ["AMP303"]
    assert "stays a dependency" not in said and "from mypkg.optimizers" in out
    apex_own = textwrap.dedent(source).replace("mypkg.optimizers", "apex.optimizers")
    _, remaining, fixed = fix_source(apex_own, unsafe=True)
    assert "apex stays a dependency" in " ".join(d.message for d in [*remaining, *fixed])


# ---- misses -------------------------------------------------------------------------------------


def test_the_newer_side_of_a_torch_version_branch_is_migrated():
    source = textwrap.dedent(
        """\
        import torch
        from packaging.version import Version

        if Version(torch.__version__) < Version("2.4"):
            dtype = torch.get_autocast_gpu_dtype()
        else:
            dtype = torch.get_autocast_gpu_dtype()
        if is_torch_version(">=", "2.3"):
            scaler = torch.cuda.amp.GradScaler()
        else:
            scaler = torch.cuda.amp.GradScaler()
        """
    )
    rules = tuple(all_rules().values())
    settings = Settings(rules=rules, fix=True, target_torch=(2, 0))
    new, remaining, fixed = migrate_source(source.encode(), settings)
    out = new.decode()
    # the newer side is fixed, and safely: the branch guarantees the torch its fix needs
    assert [(d.code, d.line) for d in fixed] == [("AMP104", 7), ("AMP102", 9)]
    assert 'else:\n    dtype = torch.get_autocast_dtype("cuda")\n' in out
    assert 'scaler = torch.amp.GradScaler("cuda")\nelse:' in out
    # the older side runs only below 2.4, where nothing is deprecated: left alone, unflagged
    assert '< Version("2.4"):\n    dtype = torch.get_autocast_gpu_dtype()' in out
    assert "else:\n    scaler = torch.cuda.amp.GradScaler()" in out
    assert remaining == []


def test_a_scaler_imported_per_device_and_used_as_a_value():
    source = textwrap.dedent(
        """\
        import torch

        if torch.cuda.is_available():
            from torch.cuda.amp import GradScaler
        else:
            from torch.cpu.amp import GradScaler

        scaler_cls = GradScaler
        scaler = GradScaler()
        """
    )
    out, remaining, fixed = fix_source(source, unsafe=True)
    assert out == source and not fixed
    assert [d.line for d in remaining] == [8, 9]
    assert "no automatic fix" in remaining[0].message
    assert "bound to the classes of different devices by a branch" in remaining[1].message


def test_star_imports_of_known_modules_are_resolved():
    """`from apex.fp16_utils import *` binds FP16_Optimizer for every rule (the apex rules
    report it); `from torch.cuda.amp import *` binds autocast, and the star import stays."""
    source = textwrap.dedent(
        """\
        from apex.fp16_utils import *
        from torch.cuda.amp import *

        optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
        with autocast():
            pass
        """
    )
    found = check_source(source)
    assert any("apex.fp16_utils.FP16_Optimizer" in d.message and d.line == 4 for d in found)
    out, _, fixed = fix_source(source)
    assert [d.code for d in fixed] == ["AMP101"]
    assert "from torch.cuda.amp import *\n" in out and "torch.amp.autocast(" in out


KERAS2_LOOP = """\
import numpy as np
import tensorflow as tf
from tensorflow.keras.mixed_precision import LossScaleOptimizer

model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
model.build((None, 2))
optimizer = make_optimizer()


def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
        if isinstance(optimizer, LossScaleOptimizer):
            scaled_loss = optimizer.get_scaled_loss(loss)
        else:
            scaled_loss = loss
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    if isinstance(optimizer, LossScaleOptimizer):
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


x, y = np.ones((4, 2), "float32"), np.zeros((4, 1), "float32")
print([round(float(train_step(x, y)), 4) for _ in range(3)])
"""


def test_keras2_scaling_under_an_isinstance_guard_runs_on_keras_3(tmp_path):
    out, remaining, fixed = fix_source(KERAS2_LOOP)
    assert [d.code for d in fixed] == ["AMP406", "AMP406"] and not remaining
    assert "optimizer.scale_loss(loss)" in out and "get_unscaled_gradients" not in out
    assert "grads = grads" not in out
    assert "if isinstance(optimizer, LossScaleOptimizer):\n        grads" not in out
    assert fix_source(out)[2] == []
    script = tmp_path / "k3.py"
    script.write_text(
        out.replace(
            "optimizer = make_optimizer()",
            "optimizer = LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))",
        )
    )
    env = {**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    losses = eval(ran.stdout.strip().splitlines()[-1])
    assert losses[0] > losses[-1]  # it trains
    assert fix_source(KERAS2_LOOP, target_keras=2)[2] == []  # Keras 2 keeps its API


def _notebook(cells: list[str]) -> bytes:
    import json

    data = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "id": str(i), "metadata": {},
             "outputs": [], "source": text.splitlines(keepends=True)}
            for i, text in enumerate(cells)
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }  # fmt: skip
    return (json.dumps(data, indent=1) + "\n").encode()


def test_an_automagic_line_does_not_hide_a_notebooks_findings(tmp_path, cli):
    cells = [
        "ls data/\ncd work\npip install -q tqdm\n!nvidia-smi\n%load_ext autoreload\nimport torch\n",
        "ls = [1, 2]\nfor step in range(2):\n    with torch.cuda.amp.autocast():\n        pass\n",
    ]
    path = tmp_path / "nb.ipynb"
    path.write_bytes(_notebook(cells))
    checked = cli("check", "--output-format", "concise", str(path))
    assert checked.returncode == 1, checked.stderr
    assert "nb.ipynb:cell 2:3:10: AMP101" in checked.stdout
    assert cli("fix", str(path)).returncode == 0
    import json

    after = json.loads(path.read_text())["cells"]
    assert "".join(after[0]["source"]) == cells[0]
    assert after[1]["source"][:2] == ["ls = [1, 2]\n", "for step in range(2):\n"]
    assert after[1]["source"][2] == '    with torch.amp.autocast("cuda", dtype=torch.float16):\n'


def test_notebook_pieces_of_a_changed_cell_are_kept_where_unchanged(tmp_path, cli):
    """A cell whose source list is split otherwise than by lines keeps those pieces outside the
    changed line; a CRLF cell that did not change is not rewritten at all."""
    import json

    data = json.loads(_notebook(["import torch\n", "x = 1\n"]))
    data["cells"][0]["source"] = [
        "import torch\nimport os\n",
        "with torch.cuda.amp.autocast():\n",
        "    pass\n# a b\n",
    ]
    data["cells"][1]["source"] = ["x = 1\r\n", "y = 2\r\n"]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(data, indent=1) + "\n")
    assert cli("fix", str(path)).returncode == 0
    cells = json.loads(path.read_text())["cells"]
    assert cells[0]["source"] == [
        "import torch\nimport os\n",
        'with torch.amp.autocast("cuda", dtype=torch.float16):\n',
        "    pass\n# a b\n",
    ]
    assert cells[1]["source"] == ["x = 1\r\n", "y = 2\r\n"]


# ---- smaller ------------------------------------------------------------------------------------


def test_a_symlinked_file_is_checked_once(tmp_path, cli):
    import os

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(
        "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
    )
    os.symlink(tmp_path / "pkg" / "train.py", tmp_path / "alias.py")
    from ampmigrate.engine.discover import discover

    assert [p.name for p in discover([tmp_path])] == ["train.py"]
    checked = cli("check", str(tmp_path))
    assert checked.stdout.count("AMP102") == 1, checked.stdout
    # a link to a file that is not otherwise checked (in a skipped folder) is still checked
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "gen.py").write_text("x = 1\n")
    os.symlink(tmp_path / "build" / "gen.py", tmp_path / "gen.py")
    assert sorted(p.name for p in discover([tmp_path])) == ["gen.py", "train.py"]


GUARDED = """\
import os

import torch

# Mixed precision needs torch >= 1.6
try:
    # the CUDA scaler
    from torch.cuda.amp import GradScaler
except ImportError:
    raise RuntimeError("torch too old")

# apex is optional
try:
    import apex  # noqa: F401
    # autocast too
    from torch.cuda.amp import autocast
except ImportError:
    apex = None

scaler = GradScaler()
with autocast():
    pass
print(os, apex)
"""


def test_a_removed_import_in_a_try_keeps_its_comments_and_leaves_no_empty_try():
    out, remaining, fixed = fix_source(GUARDED)
    assert len(fixed) == 2 and not remaining
    assert "try:\n    pass" not in out and "pass\nexcept" not in out
    assert out.startswith(
        "import os\n\nimport torch\n\n# Mixed precision needs torch >= 1.6\n# the CUDA scaler\n\n"
        "# apex is optional\ntry:\n    import apex  # noqa: F401\n    # autocast too\n"
        "except ImportError:\n    apex = None\n"
    )
    compile(out, "guarded.py", "exec")
    assert fix_source(out)[2] == []


def test_import_functools_joins_the_standard_library_imports():
    source = textwrap.dedent(
        """\
        import os
        import sys

        import torch

        from mypkg import thing

        Scaler = torch.cuda.amp.GradScaler
        scaler = Scaler()
        """
    )
    out, _, fixed = fix_source(source, unsafe=True)
    assert fixed and out.startswith("import functools\nimport os\nimport sys\n\nimport torch\n")
    only_third_party = "import torch\n\nScaler = torch.cuda.amp.GradScaler\nscaler = Scaler()\n"
    out, _, _ = fix_source(only_third_party, unsafe=True)
    assert out.startswith("import functools\n\nimport torch\n\nScaler = functools.partial(")


def test_version_branch_tests_that_guarantee_nothing_are_not_trusted():
    source = textwrap.dedent(
        """\
        import torch

        if TORCH_VERSION >= (2, 4):
            d = torch.get_autocast_gpu_dtype()
        if torch_ge_2_4 or force:
            d = torch.get_autocast_gpu_dtype()
        """
    )
    rules = tuple(all_rules().values())
    settings = Settings(rules=rules, fix=True, target_torch=(2, 0))
    _new, remaining, fixed = migrate_source(source.encode(), settings)
    assert [d.line for d in fixed] == [4]  # (2, 4) guarantees the replacement's torch
    assert [(d.line, d.fix) for d in remaining] == [(6, "unsafe")]  # `or force` does not


def test_shapes_found_by_the_repositories_run():
    """yolov5 rounds its anchors with `model.half().float()` (the parameters stay float32);
    NVIDIA's LAMB example checks `optimizer.load_state_dict(optimizer.state_dict())` (a round
    trip, no checkpoint)."""
    source = """\
        import torch

        scaler = torch.amp.GradScaler("cuda")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model.half().float()
        optimizer.load_state_dict(optimizer.state_dict())
        for x in loader:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
        """
    assert _codes(source) == []
    cast = source.replace("model.half().float()", "model.half()")
    restored = source.replace("optimizer.state_dict())", 'torch.load("ckpt.pt")["optimizer"])')
    assert ("AMP209", 5) in _codes(cast)
    assert ("AMP208", 6) in _codes(restored)


def test_an_unscale_alone_under_a_flag_goes_with_its_if():
    """NVIDIA's UNet: `if params.use_amp: gradients = optimizer.get_unscaled_gradients(...)`;
    a test with a side effect keeps its if, with `pass`."""
    source = textwrap.dedent(
        """\
        import tensorflow as tf

        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())


        def step(params, tape, loss, model):
            gradients = tape.gradient(loss, model.trainable_variables)
            if params.use_amp:
                gradients = optimizer.get_unscaled_gradients(gradients)
            if check(params):
                gradients = optimizer.get_unscaled_gradients(gradients)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        """
    )
    out, remaining, fixed = fix_source(source)
    assert len(fixed) == 2 and not remaining
    assert "use_amp" not in out and "    if check(params):\n        pass\n" in out
    assert fix_source(out)[2] == []


IGNITE_ENGINE = """\
import torch


def evaluate(model, x):
    from torch.cuda.amp import autocast

    with autocast(enabled=True):
        return model(x)
"""

PATCHING_TEST = """\
from unittest import mock

import torch

from engine import evaluate


def test_evaluate_uses_autocast():
    with mock.patch("torch.cuda.amp.autocast") as autocast_mock:
        evaluate(torch.nn.Identity(), torch.ones(2))
    assert autocast_mock.called
"""


def test_a_constructor_whose_old_name_a_test_patches_is_unsafe_and_names_the_patch(tmp_path, cli):
    """pytorch-ignite 0.4.13: its test patches "torch.cuda.amp.autocast" by name; after the
    library's autocast is migrated the patch intercepts nothing and the test fails."""
    (tmp_path / "engine.py").write_text(IGNITE_ENGINE)
    (tmp_path / "test_engine.py").write_text(PATCHING_TEST)
    checked = cli("check", "--output-format", "concise", str(tmp_path))
    [line] = [x for x in checked.stdout.splitlines() if "engine.py:7" in x and "AMP101" in x]
    assert "test_engine.py:9 (by name, in a string)" in line and "[*]" not in line
    assert "a patch of the old name (`mock.patch`) no longer intercepts the call" in line
    cli("fix", str(tmp_path))
    assert (tmp_path / "engine.py").read_text() == IGNITE_ENGINE  # the safe run leaves it
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_engine.py"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
