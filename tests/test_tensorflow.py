"""TensorFlow/Keras rules on whole files: exact migrations for both Keras targets, and the
migrated fixtures train on tensorflow-cpu 2.21 exactly like hand-written modern equivalents
(Keras 3 by default, tf-keras with TF_USE_LEGACY_KERAS=1 for target-keras 2)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import FIXTURES, fix_source

# (one worker runs the whole file: its module-scoped fixture runs once)
pytestmark = pytest.mark.xdist_group("tensorflow")

TF = FIXTURES / "tf"
RUNNABLE = ["custom_loop", "fixed_scale", "fit"]
FILES = [*(f"experimental_{n}" for n in RUNNABLE), "import_forms", "symbol_imports"]
PAIRS = [(name, keras) for name in FILES for keras in (3, 2)]


@pytest.mark.parametrize(("name", "keras"), PAIRS, ids=[f"{n}-keras{k}" for n, k in PAIRS])
def test_migration_is_exact_and_idempotent(name, keras):
    before = (TF / f"{name}.py").read_text()
    expected = (TF / f"{name}.keras{keras}.py").read_text()
    out, remaining, fixed = fix_source(before, unsafe=True, target_keras=keras)
    assert out == expected
    assert fixed
    compile(out, name, "exec")
    again, remaining2, fixed2 = fix_source(out, unsafe=True, target_keras=keras)
    assert again == out and not fixed2
    assert [d.code for d in remaining2] == [d.code for d in remaining]
    if name.startswith("experimental_"):
        assert not remaining, [d.message for d in remaining]


def test_targets_differ_only_where_keras_differs():
    """Keras 2 keeps get_scaled_loss/get_unscaled_gradients and the fixed-scale wrapper."""
    k3 = (TF / "experimental_fixed_scale.keras3.py").read_text()
    k2 = (TF / "experimental_fixed_scale.keras2.py").read_text()
    assert "loss_scale_factor=128" in k3 and "get_unscaled_gradients" not in k3
    assert "dynamic=False, initial_scale=128" in k2 and "get_unscaled_gradients" in k2


def test_clipping_scaled_gradients_is_not_silently_broken():
    """Removing get_unscaled_gradients before a clip would stall training (measured on Keras 3):
    the fix leaves it and the finding says why; a clip of scaled gradients is flagged."""
    source = (TF / "experimental_custom_loop.py").read_text().replace(
        "    opt.apply_gradients(", "    grads, _ = tf.clip_by_global_norm(grads, 1.0)\n"
        "    opt.apply_gradients(",
    )  # fmt: skip
    out, remaining, _ = fix_source(source, unsafe=True)
    assert "opt.get_unscaled_gradients(scaled_grads)" in out
    assert [d.code for d in remaining] == ["AMP406"]
    assert "clips or reduces the gradients" in remaining[0].message
    dropped = out.replace("opt.get_unscaled_gradients(scaled_grads)", "scaled_grads")
    _, remaining, _ = fix_source(dropped, unsafe=True)
    assert [d.code for d in remaining] == ["AMP407"]


# -- running the fixtures on TensorFlow ----------------------------------------------------
HAS_TF = importlib.util.find_spec("tensorflow") is not None
HAS_TF_KERAS = importlib.util.find_spec("tf_keras") is not None
tensorflow = pytest.mark.skipif(not HAS_TF, reason="tensorflow is not installed")


def _run(script: Path, keras: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    if keras == 2:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return subprocess.run(
        [sys.executable, script.name], cwd=script.parent, env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _modern(name: str, keras: int) -> str:
    """The hand-written equivalent: one per Keras version where they differ."""
    per_version = f"modern_{name}_keras{keras}.py"
    return per_version if (TF / per_version).exists() else f"modern_{name}.py"


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, int], subprocess.CompletedProcess]:
    jobs = {(f"experimental_{n}.py", 3): None for n in RUNNABLE}
    for name in RUNNABLE:
        for keras in (3, 2) if HAS_TF_KERAS else (3,):
            jobs[(f"experimental_{name}.keras{keras}.py", keras)] = None
            jobs[(_modern(name, keras), keras)] = None
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = pool.map(lambda key: (key, _run(TF / key[0], key[1])), list(jobs))
        return dict(done)


@tensorflow
@pytest.mark.tensorflow
@pytest.mark.parametrize("name", RUNNABLE)
def test_original_no_longer_runs(runs, name):
    result = runs[(f"experimental_{name}.py", 3)]
    assert result.returncode != 0
    assert "ImportError" in result.stderr or "AttributeError" in result.stderr


@tensorflow
@pytest.mark.tensorflow
@pytest.mark.parametrize("keras", [3, pytest.param(2, marks=pytest.mark.skipif(
    not HAS_TF_KERAS, reason="tf-keras is not installed"))])  # fmt: skip
@pytest.mark.parametrize("name", RUNNABLE)
def test_migrated_trains_like_the_modern_equivalent(runs, name, keras):
    migrated = runs[(f"experimental_{name}.keras{keras}.py", keras)]
    modern = runs[(_modern(name, keras), keras)]
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    assert modern.returncode == 0, modern.stderr[-2000:]
    assert "loss" in migrated.stdout and "policy mixed_float16" in migrated.stdout
    assert migrated.stdout == modern.stdout


# -- fixes as text edits: what they keep of the code around them ---------------------------
def test_fixes_keep_the_layout_of_the_call():
    """Arguments dropped or added keep the call's line breaks and its comments."""
    source = (
        "import tensorflow as tf\n\n"
        "opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(\n"
        "    tf.keras.optimizers.SGD(0.1),\n"
        "    loss_scale=tf.mixed_precision.experimental.DynamicLossScale(2**10, 500),\n"
        ")\n"
        "mixed = tf.keras.mixed_precision.LossScaleOptimizer(\n"
        "    tf.keras.optimizers.Adam(1e-3),\n"
        "    clipnorm=1.0,  # rejected by Keras 3\n"
        "    dynamic=True,\n"
        ")\n"
    )
    out, remaining, _ = fix_source(source, unsafe=True)
    assert out == (
        "import tensorflow as tf\n\n"
        "opt = tf.keras.mixed_precision.LossScaleOptimizer(\n"
        "    tf.keras.optimizers.SGD(0.1),\n"
        "    initial_scale=2**10,\n"
        "    dynamic_growth_steps=500,\n"
        ")\n"
        "mixed = tf.keras.mixed_precision.LossScaleOptimizer(\n"
        "    tf.keras.optimizers.Adam(1e-3, clipnorm=1.0),\n"
        ")\n"
    )
    assert not remaining


@pytest.mark.parametrize(
    ("keras", "expected"),
    [
        (3, "opt = tf.keras.optimizers.SGD(0.1, loss_scale_factor=128)\n"),
        (2, "opt = tf.keras.mixed_precision.LossScaleOptimizer(\n"
            "    optimizer=tf.keras.optimizers.SGD(0.1),\n    dynamic=False,\n"
            "    initial_scale=128,\n)\n"),
    ],
)  # fmt: skip
def test_fixed_scale_with_the_optimizer_passed_by_keyword(keras, expected):
    """The libcst engine crashed here on Keras 3 (it took the first argument for the optimizer)."""
    source = (
        "import tensorflow as tf\n\n"
        "opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(\n"
        "    loss_scale=128,\n    optimizer=tf.keras.optimizers.SGD(0.1),\n)\n"
    )
    out, remaining, fixed = fix_source(source, unsafe=True, target_keras=keras)
    assert out == "import tensorflow as tf\n\n" + expected
    assert [d.code for d in fixed] == ["AMP401"] and not remaining


def test_replaced_expressions_take_their_parentheses_along():
    """A replaced call or name takes the parentheses that were its own along, a renamed
    attribute keeps them (as libcst wrote it); a receiver in parentheses is not the receiver a
    LossScaleOptimizer was assigned to."""
    source = (
        "import tensorflow as tf\n\n"
        "opt = tf.keras.mixed_precision.LossScaleOptimizer(inner)\n"
        "print((opt).loss_scale, (tf.keras.mixed_precision.experimental.get_layer_policy)((l)))\n"
        "print(opt.get_unscaled_gradients((grads)), (opt.loss_scale)())\n"
    )
    out, _, _ = fix_source(source, unsafe=True)
    assert out.splitlines()[3:] == [
        "print((opt).loss_scale, (l).dtype_policy)",
        "print((grads), (opt.dynamic_scale))",
    ]
