"""The apex O1 rewrites of tests/test_apex.py, run: each migrated fixture trains on CPU exactly
like its original against an O0 stand-in for apex, and in float16 where "cuda" becomes "cpu".
A file of its own: these runs were most of test_apex.py's time when pytest-xdist kept a file
on one worker (``--dist loadfile``; now ``loadgroup`` spreads every file's tests)."""

from __future__ import annotations

import shutil

import pytest
from test_apex import APEX, CASES, REWRITTEN, _runs

from conftest import fix_source


@pytest.mark.torch
@pytest.mark.parametrize("name", REWRITTEN)
def test_migrated_runs_like_the_original_and_really_in_float16(name, stub, tmp_path):
    """Without a GPU, CUDA autocast and GradScaler switch themselves off: the migrated file
    prints exactly what the original prints against apex with O0 semantics, with mixed
    precision off and on. With "cuda" replaced by "cpu", autocast and GradScaler really run
    (float16 on CPU): a region that misses the forward shows as a float32 forward, an unscale_
    that runs twice per update() raises."""
    pytest.importorskip("torch")
    specs = []
    for args in CASES[name]:
        specs += [(APEX / f"{name}.py", args, stub, False)]
        specs += [(APEX / f"{name}.fixed.py", args, None, False)]
    cpu = tmp_path / f"{name}_cpu.py"
    cpu.write_text((APEX / f"{name}.fixed.py").read_text().replace('"cuda"', '"cpu"'))
    specs.append((cpu, CASES[name][-1], None, True))
    results = _runs(specs, tmp_path)
    for i, args in enumerate(CASES[name]):
        (code, original, error), (migrated_code, migrated, migrated_error) = results[
            2 * i : 2 * i + 2
        ]
        assert code == 0, error
        assert "loss" in original
        assert migrated_code == 0, migrated_error
        assert migrated == original, f"args {args}"
    code, out, error = results[-1]
    assert code == 0, error
    assert "forward dtypes: ['torch.float16']" in out, out


@pytest.mark.torch
def test_a_static_loss_scale_given_to_the_migration_stops_it(stub, tmp_path):
    """`loss_scale=args.loss_scale`: the original trains with `--loss-scale 128` (apex's static
    scale); the migration, whose GradScaler cannot keep one, stops where it is made and names
    the value, instead of training with a dynamic scale."""
    script = APEX / "loss_scale_flag.py"
    flags = ["--amp", "--loss-scale", "128"]
    specs = [(script, flags, stub, False), (APEX / "loss_scale_flag.fixed.py", flags, None, False)]
    (code, out, _), (migrated_code, _, error) = _runs(specs, tmp_path)
    assert code == 0 and "batch 5 loss" in out
    assert migrated_code == 1
    assert "ValueError: static loss scale '128': GradScaler is always dynamic" in error


TIMM_SCRIPT = """\
import sys

import torch
from apex import amp
from timm.utils import *


def train_epoch(model, batches, optimizer, saver, use_amp=False):
    for i, (x, y) in enumerate(batches):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        optimizer.zero_grad()
        if use_amp:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
        saver.save_recovery(model, optimizer, use_amp=use_amp, batch_idx=i)
        print(f"batch {i} loss {loss.item():.6f}")


torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
saver = CheckpointSaver()
use_amp = False
if "--amp" in sys.argv:
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    use_amp = True
batches = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(3)]
train_epoch(model, batches, optimizer, saver, use_amp=use_amp)
saver.save_checkpoint(model, optimizer, use_amp=use_amp)
"""

# timm 0.1's saver, as far as apex goes: `use_amp=True` saves `amp.state_dict()`
TIMM_UTILS = """\
try:
    from apex import amp
except ImportError:
    amp = None


class CheckpointSaver:
    def save_checkpoint(self, model, optimizer, use_amp=False):
        self._save(use_amp)

    def save_recovery(self, model, optimizer, use_amp=False, batch_idx=0):
        self._save(use_amp)

    def _save(self, use_amp):
        state = {"amp": amp.state_dict()} if use_amp and "state_dict" in amp.__dict__ else {}
        print("saved", sorted(state))
"""


@pytest.mark.torch
def test_timms_checkpoint_saver_is_told_apex_is_off(stub, tmp_path):
    """timm 0.1's `CheckpointSaver` given `use_amp=True` saves `amp.state_dict()`, which
    raises without apex: the migration gives it False (stated), and trains like the original
    with and without `--amp` otherwise."""
    (tmp_path / "timm").mkdir()
    (tmp_path / "timm" / "__init__.py").write_text("")
    (tmp_path / "timm" / "utils.py").write_text(TIMM_UTILS)
    new, remaining, fixed = fix_source(TIMM_SCRIPT, unsafe=True)
    [finding] = [d for d in fixed if d.code == "AMP303"]
    assert "timm's `CheckpointSaver` (the library, timm 0.1) is given `use_amp=False`" in (
        finding.message
    )
    assert "saver.save_checkpoint(model, optimizer, use_amp=False)" in new
    assert "use_amp=False, batch_idx=i)" in new
    original, migrated = tmp_path / "original.py", tmp_path / "migrated.py"
    original.write_text(TIMM_SCRIPT)
    migrated.write_text(new)
    shutil.copytree(stub / "apex", tmp_path / "stubbed" / "apex")
    (tmp_path / "stubbed" / "timm").symlink_to(tmp_path / "timm")
    specs = [(original, flags, tmp_path / "stubbed", False) for flags in ([], ["--amp"])] + [
        (migrated, flags, tmp_path, False) for flags in ([], ["--amp"])
    ]
    results = _runs(specs, tmp_path)
    for code, _, error in results:
        assert code == 0, error
    assert "saved ['amp']" in results[1][1]
    assert results[0][1] == results[2][1]
    assert results[3][1] == results[1][1].replace("saved ['amp']", "saved []")
    # a saver that is not timm's keeps the refusal: its switch may do anything
    own = TIMM_SCRIPT.replace("from timm.utils import *", "from detlib.utils import *")
    _, remaining, _ = fix_source(own, unsafe=True)
    [finding] = [d for d in remaining if d.code == "AMP303"]
    assert "is given `use_amp`" in finding.message


O0_SCRIPT = """\
import sys

import torch
from apex import amp

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
distributed = "--distributed" in sys.argv
if distributed:
    model, optimizer = amp.initialize(model, optimizer, opt_level="O0")
for i in range(4):
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    if distributed:
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
    else:
        loss.backward()
    optimizer.step()
    print(f"batch {i} loss {loss.item():.6f}")
"""


@pytest.mark.torch
def test_a_literal_o0_becomes_a_disabled_scaler_that_trains_alike(stub, tmp_path):
    """`opt_level="O0"` is apex switched off (float32, a scale of 1.0 that never skips): a
    GradScaler made with `enabled=False`, its regions off, trains exactly like the original,
    also with "cuda" -> "cpu" (where an enabled one would run float16)."""
    new, _, fixed = fix_source(O0_SCRIPT, unsafe=True)
    [finding] = [d for d in fixed if d.code == "AMP303"]
    assert "opt_level O0 is apex switched off" in finding.message
    assert 'GradScaler("cuda", enabled=False)' in new and "from apex" not in new
    original, migrated, cpu = (tmp_path / f"{n}.py" for n in ("original", "migrated", "cpu"))
    original.write_text(O0_SCRIPT)
    migrated.write_text(new)
    cpu.write_text(new.replace('"cuda"', '"cpu"'))
    flags = ["--distributed"]
    specs = [(original, flags, stub, False), (migrated, flags, None, False)]
    specs.append((cpu, flags, None, True))
    results = _runs(specs, tmp_path)
    for code, _, error in results:
        assert code == 0, error
    assert results[0][1] == results[1][1]
    assert "forward dtypes: ['torch.float32']" in results[2][1]
    assert results[2][1].startswith(results[0][1])


@pytest.mark.torch
def test_a_clip_in_a_method_after_a_scaling_helper_sees_unscaled_gradients(stub, tmp_path):
    """The scaled backward in `loss_backpass`, the clip in `clip_gradients`, both called by
    the method that steps (the twenty-sixth review: no `unscale_` was placed, so the clip ran
    on gradients 1024 times too large). With the GradScaler really on (CPU, scale 1024; autocast
    off so that only the scale differs from the O0 stand-in), the migration trains exactly like
    the original; without its `unscale_` it does not."""
    migrated = (APEX / "clip_in_method_after_helper.fixed.py").read_text()
    on_cpu = migrated.replace('GradScaler("cuda"', 'GradScaler("cpu", init_scale=1024.0').replace(
        "enabled=self.scaler.is_enabled()", "enabled=False"
    )
    assert on_cpu.count('"cpu"') == 1 and "enabled=False" in on_cpu
    scaled = tmp_path / "scaled.py"
    scaled.write_text(on_cpu)
    unclipped = tmp_path / "without_unscale.py"
    unclipped.write_text(on_cpu.replace("        self.scaler.unscale_(self.optimizer)\n", ""))
    specs = [
        (APEX / "clip_in_method_after_helper.py", ["--amp"], stub, False),
        (scaled, ["--amp"], None, False),
        (unclipped, ["--amp"], None, False),
    ]
    (code, original, error), (code2, out, error2), (code3, wrong, error3) = _runs(specs, tmp_path)
    assert code == code2 == code3 == 0, error + error2 + error3
    assert "batch 5 loss" in original
    assert out == original
    assert wrong != original


def _apex_scales(steps: int, overflows: set[int], floor: float, ceiling: float) -> list[float]:
    """apex's LossScaler.update_scale, written from its documented rule (shared/reference,
    apex-amp-api.md §4): halve on overflow, but not below the floor; double after 2000
    updates without one, but not above the ceiling; the initial 2**16 capped too."""
    scale, unskipped, out = min(ceiling, 2.0**16), 0, []
    for step in range(steps):
        if step in overflows:
            scale, unskipped = max(floor, scale / 2), 0
        else:
            unskipped += 1
        if unskipped == 2000:
            scale, unskipped = min(ceiling, scale * 2), 0
        out.append(scale)
    return out


@pytest.mark.torch
@pytest.mark.parametrize(
    ("steps", "overflows"),
    [(40, set(range(20))), (4100, set()), (2030, {5, 2010, 2011})],
    ids=["floor", "ceiling", "both"],
)
def test_the_kept_bounds_give_apex_s_scale_at_every_step(tmp_path, steps, overflows):
    """The migrated `loss_scale_bounds` fixture on CPU in float16, its scale printed after
    each step: the same sequence as apex's LossScaler with `min_loss_scale=0.25`,
    `max_loss_scale=2**17` (20 overflows in a row end at the floor, 0.25, where apex stops
    halving; 4000 clean steps would grow past the ceiling)."""
    pytest.importorskip("torch")
    migrated = (APEX / "loss_scale_bounds.fixed.py").read_text().replace('"cuda"', '"cpu"')
    printed = '        print(f"loss {loss.item():.6f}")\n'
    assert printed in migrated
    script = tmp_path / "bounds.py"
    script.write_text(migrated.replace(printed, '        print("scale", scaler.get_scale())\n'))
    args = ["--fp16", "--steps", str(steps), "--overflow", *map(str, sorted(overflows))]
    [(code, out, error)] = _runs([(script, args, None, False)], tmp_path)
    assert code == 0, error
    scales = [float(line.split()[1]) for line in out.splitlines() if line.startswith("scale")]
    assert scales == _apex_scales(steps, overflows, 0.25, 2.0**17)


@pytest.mark.torch
def test_a_ceiling_below_apex_s_initial_scale_is_where_the_scaler_starts(tmp_path):
    """mlcommons' RNN-T caps apex's scale at 512: apex began at min(2**16, ceiling), so the
    migration makes the GradScaler with `init_scale` at the ceiling (it was refused). Run on
    CPU in float16, the scale after each step is apex's rule's, through overflows and a
    growth that the ceiling stops."""
    pytest.importorskip("torch")
    source = (
        (APEX / "loss_scale_bounds.py")
        .read_text()
        .replace("max_loss_scale=2**17", "max_loss_scale=4096.0")
    )
    new, _, fixed = fix_source(source, unsafe=True)
    [finding] = [d for d in fixed if d.code == "AMP303"]
    assert "it is the GradScaler's `init_scale=4096.0`" in finding.message
    migrated = new.replace('"cuda"', '"cpu"')
    printed = '        print(f"loss {loss.item():.6f}")\n'
    script = tmp_path / "capped.py"
    script.write_text(migrated.replace(printed, '        print("scale", scaler.get_scale())\n'))
    steps, overflows = 2030, {5, 6}
    args = ["--fp16", "--steps", str(steps), "--overflow", *map(str, sorted(overflows))]
    [(code, out, error)] = _runs([(script, args, None, False)], tmp_path)
    assert code == 0, error
    scales = [float(line.split()[1]) for line in out.splitlines() if line.startswith("scale")]
    assert scales[0] == 4096.0 and max(scales) == 4096.0
    assert scales == _apex_scales(steps, overflows, 0.25, 4096.0)
