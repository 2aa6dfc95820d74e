"""The correctness rules (AMP203-AMP209): silent on correct code, and what they flag really
misbehaves when run (CPU GradScaler and autocast behave as on CUDA for these checks)."""

from __future__ import annotations

import pytest

from ampmigrate.catalog import all_rules
from ampmigrate.families import family
from ampmigrate.scalerflow import FLOW_CHECKS

from conftest import FIXTURES, check_source, fix_source

CORRECTNESS = [code for code, rule in all_rules().items() if rule.check in FLOW_CHECKS]


def codes(source: str) -> list[str]:
    return [d.code for d in check_source(source)]


def test_every_flow_check_has_its_rule():
    """The engine hands these rules to scalerflow: each names a check it has, and each check
    has a rule."""
    routed = [code for code, rule in all_rules().items() if family(rule).name == "scalerflow"]
    assert routed == CORRECTNESS
    assert sorted(all_rules()[code].check for code in CORRECTNESS) == sorted(FLOW_CHECKS)


def test_canonical_pytorch_examples_are_clean():
    source = (FIXTURES / "correct" / "amp_examples.py").read_text()
    assert codes(source) == []


def test_a_wrong_migration_fixture_is_caught():
    """The verify fixture that drops `scaler.update()` is also a lint finding."""
    source = (FIXTURES / "loops" / "_wrong_dropped_update.py").read_text()
    assert "AMP205" in codes(source)
    fixed = (FIXTURES / "loops" / "bf16_cpu_scaler.py").read_text()
    assert "AMP205" not in codes(fixed)


def test_findings_survive_a_rename_fix_of_the_same_file():
    """Old-API code gets the rename and keeps the correctness finding."""
    source = """\
import torch

scaler = torch.cuda.amp.GradScaler()
for x in data:
    with torch.cuda.amp.autocast():
        loss = model(x)
    scaler.scale(loss).backward()
    optimizer.step()
"""
    out, remaining, fixed = fix_source(source)
    assert {d.code for d in fixed} == {"AMP101", "AMP102"}
    assert [d.code for d in remaining] == ["AMP206"]
    assert "torch.amp.GradScaler" in out


def test_if_else_branches_are_told_apart():
    both_paths = """\
from torch.nn.utils import clip_grad_norm_


def step(loss):
    if amp:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    elif other:
        loss.backward()
        clip_grad_norm_(params, 1.0)
        optimizer.step()
    else:
        loss.backward()
        optimizer.step()
"""
    assert codes(both_paths) == []
    straight = """\
from torch.nn.utils import clip_grad_norm_


def step(loss):
    scaler.scale(loss).backward()
    clip_grad_norm_(params, 1.0)
    optimizer.step()
"""
    assert codes(straight) == ["AMP203", "AMP206"]


def test_helpers_are_not_guessed_at():
    """A step in one function and the update in its caller: not judged (no finding)."""
    source = """\
def backward(scaler, loss):
    scaler.scale(loss).backward()


def clip(model):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
"""
    assert codes(source) == []


# -- what the flagged code does when it runs -------------------------------------------
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SETUP = """\
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
x = torch.randn(8, 4)
"""


def run(source: str) -> dict:
    namespace: dict = {}
    exec(compile(source, "<example>", "exec"), namespace)
    return namespace


def test_amp203_clip_sees_scaled_norm_until_the_fix():
    source = (
        SETUP
        + """\
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = model(x).pow(2).mean()
scaler.scale(loss).backward()
norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e9)
scaler.step(optimizer)
scaler.update()
"""
    )
    assert "AMP203" in codes(source)
    unscaled = source.replace("scaler.scale(loss)", "loss").replace("scaler.step(optimizer)", "")
    reference = run(unscaled.replace("scaler.update()", ""))["norm"].item()
    assert run(source)["norm"].item() == pytest.approx(1024 * reference, rel=1e-3)
    fixed, remaining, _ = fix_source(source, unsafe=True)
    assert "scaler.unscale_(optimizer)\nnorm = " in fixed
    assert "AMP203" not in [d.code for d in remaining]
    assert run(fixed)["norm"].item() == pytest.approx(reference, rel=1e-3)


def test_amp204_second_unscale_raises():
    source = (
        SETUP
        + """\
for micro in x.split(4):
    scaler.scale(model(micro).sum()).backward()
    scaler.unscale_(optimizer)
scaler.step(optimizer)
scaler.update()
"""
    )
    assert "AMP204" in codes(source)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        run(source)


ACCUMULATE = """\
for i, micro in enumerate(x.split(2)):
    scaler.scale(model(micro).sum()).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if (i + 1) % 2 == 0:
        scaler.step(optimizer)
        scaler.update()
"""


def test_amp204_unscale_on_every_micro_batch_raises_until_it_moves_under_the_step():
    """Gradient accumulation: `update()` only every second micro-batch, `unscale_` on each."""
    source = SETUP + ACCUMULATE
    assert "AMP204" in codes(source)
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        run(source)
    moved = (
        SETUP
        + """\
for i, micro in enumerate(x.split(2)):
    scaler.scale(model(micro).sum()).backward()
    if (i + 1) % 2 == 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
"""
    )
    assert codes(moved) == []
    assert run(moved)["scaler"].get_scale() == 1024.0


def test_amp203_gives_no_fix_that_amp204_would_flag():
    """A clip on every micro-batch of an accumulation loop: inserting `unscale_` before it would
    raise on the second micro-batch, so AMP203 says where to move it instead of fixing."""
    source = SETUP + ACCUMULATE.replace("    scaler.unscale_(optimizer)\n", "")
    found = [d for d in check_source(source) if d.code == "AMP203"]
    assert len(found) == 1 and found[0].fix is None
    assert "no fix: an unscale_ here would run on every iteration" in found[0].message
    assert fix_source(source, unsafe=True)[0] == source
    run(source)  # as it stands it runs (clipping scaled gradients): the inserted line would not
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        run(SETUP + ACCUMULATE)


def test_amp203_gives_no_fix_for_a_clip_shared_by_arms_only_one_of_which_scaled():
    """SwinBERT: `if method == "fairscale": scaler.scale(loss).backward()` beside other arms,
    one clip after them all. An `unscale_` inserted before the clip ran on every arm; on the
    others nothing was scaled and GradScaler raises, so the default path died at its first
    step. The finding stays (the fairscale arm clips scaled gradients); the fix does not."""
    source = """\
import torch


def train(method, model, optimizer, batch, scaler):
    loss = model(batch).sum()
    if method == "fairscale":
        scaler.scale(loss).backward()
    else:
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if method == "fairscale":
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
"""
    [found] = [d for d in check_source(source) if d.code == "AMP203"]
    assert found.fix is None
    assert 'runs only in `if method == "fairscale":`, the clip on every path' in found.message
    assert fix_source(source, unsafe=True)[0] == source
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    exec(compile(source, "swin", "exec"), namespace)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    namespace["train"]("apex", model, optimizer, torch.randn(3, 2), scaler)  # runs as it is
    with pytest.raises(AssertionError, match="_scale is None"):
        scaler.unscale_(optimizer)  # what the inserted line did on that arm


APEX_ACCUMULATION = """\
import torch
from apex import amp


def train(model, optimizer, data, accumulate):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for i, (x, y) in enumerate(data):
        loss = torch.nn.functional.mse_loss(model(x), y) / accumulate
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
        if (i + 1) % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


def test_amp204_judges_the_apex_rewrite_of_accumulation_by_what_it_does():
    """apex clipped on every micro-batch and stepped every second one: whatever the O1 rewrite
    makes of it, AMP204 flags the result exactly when it raises on CPU (float16 autocast and a
    CPU GradScaler behave as on CUDA here)."""
    fixed, _, done = fix_source(APEX_ACCUMULATION, unsafe=True)
    if "AMP303" not in {d.code for d in done}:
        pytest.skip("the apex rewrite refuses this shape")
    driver = """
torch.manual_seed(0)
net = torch.nn.Linear(4, 1)
data = [(torch.randn(2, 4), torch.randn(2, 1)) for _ in range(4)]
train(net, torch.optim.SGD(net.parameters(), lr=0.1), data, 2)
"""
    try:
        run(fixed.replace('"cuda"', '"cpu"') + driver)
    except RuntimeError as exc:
        assert "unscale_() has already been called" in str(exc)
        raised = True
    else:
        raised = False
    assert ("AMP204" in codes(fixed)) == raised


def test_amp205_step_without_update_raises_on_the_next_step():
    source = (
        SETUP
        + """\
for micro in x.split(4):
    scaler.scale(model(micro).sum()).backward()
    scaler.step(optimizer)
"""
    )
    assert "AMP205" in codes(source)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        run(source)


def test_amp205_leaves_a_hook_method_of_a_base_from_another_module_alone():
    """`_amp_step` of a trainer subclass steps and its base class's loop, in another module,
    calls it and updates right after (DeepGNN's Horovod trainer, from an unseen review): this
    file cannot see that caller, so no finding claims a crash. With the base in this file, or
    a plain base (`object`, `nn.Module`), the finding stays."""
    source = (
        "import torch\nfrom trainer_fp16 import FP16Trainer\n\n\n"
        "class HvdTrainer(FP16Trainer):\n"
        "    def _amp_backward(self, loss):\n"
        "        self.grad_scaler.scale(loss).backward()\n\n"
        "    def _amp_step(self):\n"
        "        self.grad_scaler.step(self.optimizer)\n"
    )
    assert "AMP205" not in codes(source)
    local = source.replace("from trainer_fp16 import FP16Trainer\n", "").replace(
        "class HvdTrainer(FP16Trainer):",
        "class FP16Trainer:\n    pass\n\n\nclass HvdTrainer(FP16Trainer):",
    )
    assert "AMP205" in codes(local)
    plain = source.replace("(FP16Trainer)", "(torch.nn.Module)")
    assert "AMP205" in codes(plain)


def test_amp206_direct_step_applies_scaled_gradients():
    source = (
        SETUP
        + """\
before = model.weight.detach().clone()
scaler.scale(model(x).pow(2).mean()).backward()
optimizer.step()
change = (model.weight - before).norm()
"""
    )
    assert "AMP206" in codes(source)
    scaled = run(source)["change"].item()
    plain = run(source.replace("scaler.scale(model(x).pow(2).mean())", "model(x).pow(2).mean()"))
    assert scaled == pytest.approx(1024 * plain["change"].item(), rel=1e-3)


def test_amp207_scaler_changes_nothing_under_bfloat16():
    source = (
        SETUP
        + """\
losses = []
for _ in range(5):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    losses.append(loss.item())
"""
    )
    assert "AMP207" in codes(source)
    plain = source.replace("scaler.scale(loss)", "loss").replace("scaler.step(optimizer)", "")
    plain = plain.replace("scaler.update()", "optimizer.step()")
    assert run(source)["losses"] == run(plain)["losses"]


def test_amp208_resume_without_scaler_state_restarts_the_scale(tmp_path):
    path = tmp_path / "last.pt"
    source = (
        SETUP
        + f"""\
for _ in range(3):
    scaler.scale(model(x).sum() * float("inf")).backward()  # overflow: the scale backs off
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
torch.save({{"model": model.state_dict(), "optimizer": optimizer.state_dict()}}, {str(path)!r})
resumed = torch.amp.GradScaler("cpu", init_scale=1024.0)
"""
    )
    assert "AMP208" in codes(source)
    namespace = run(source)
    assert namespace["scaler"].get_scale() == 128.0
    assert namespace["resumed"].get_scale() == 1024.0


HELPER_TRAIN = """\
import torch


def save_checkpoint(model, optimizer, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)


def train(model, optimizer, x, path):
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for _ in range(3):
        scaler.scale(model(x).sum() * float("inf")).backward()  # overflow: the scale backs off
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    save_checkpoint(model, optimizer, path)
    return scaler


def resume(model, optimizer, path):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return torch.amp.GradScaler("cpu", init_scale=1024.0)
"""


def test_amp208_follows_a_checkpoint_helper_of_the_same_file(tmp_path):
    """`train()` owns the scaler and calls a module-level helper that saves model and optimizer
    state only: reported at the call, naming the helper; a resume really loses the scale."""
    found = [d for d in check_source(HELPER_TRAIN) if d.code == "AMP208"]
    assert [(d.line, d.col) for d in found] == [(15, 5)]
    assert "`save_checkpoint(...)`" in found[0].message and "line 5" in found[0].message
    namespace = run(HELPER_TRAIN)
    path = str(tmp_path / "last.pt")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = namespace["train"](model, optimizer, torch.randn(8, 4), path)
    assert scaler.get_scale() == 128.0
    assert namespace["resume"](model, optimizer, path).get_scale() == 1024.0
    passed = HELPER_TRAIN.replace("optimizer, path)", "optimizer, scaler, path)", 1).replace(
        '"optimizer": optimizer.state_dict()}',
        '"optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}',
    )
    passed = passed.replace(
        "save_checkpoint(model, optimizer, path)", "save_checkpoint(model, optimizer, scaler, path)"
    )
    assert "AMP208" not in codes(passed)


TRAINER = """\
import torch


def save_checkpoint(state, path):
    torch.save(state, path)


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)

    def save(self, path):
        ckpt_state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        save_checkpoint(ckpt_state, path)

    def resume(self, path):
        ckpt = torch.load(path)
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scaler.load_state_dict(ckpt["scaler"])
"""


def test_amp208_judges_save_and_load_together(tmp_path):
    """A detection-trainer shape: the class owns `self.scaler`, hands a `ckpt_state` dict to a
    utility that saves it, and restores `self.scaler` from it: both ends are reported, with the
    code's names, and the resume really fails on the missing key."""
    found = {d.line: d.message for d in check_source(TRAINER) if d.code == "AMP208"}
    assert sorted(found) == [15, 21]
    assert found[15].startswith("`ckpt_state` holds model/optimizer state")
    assert '`"scaler": self.scaler.state_dict()`' in found[15]
    assert found[21].startswith("`self.scaler.load_state_dict(...)` restores")
    trainer = run(TRAINER)["Trainer"]
    model = torch.nn.Linear(4, 1)
    first = trainer(model, torch.optim.SGD(model.parameters(), lr=0.1))
    first.save(str(tmp_path / "last.pt"))
    with pytest.raises(KeyError, match="scaler"):
        trainer(model, torch.optim.SGD(model.parameters(), lr=0.1)).resume(
            str(tmp_path / "last.pt")
        )
    fixed = TRAINER.replace(
        '"optimizer": self.optimizer.state_dict()}',
        '"optimizer": self.optimizer.state_dict(),\n'
        + 12 * " "
        + '"scaler": self.scaler.state_dict()}',
    )
    assert "AMP208" not in codes(fixed)


def test_amp208_follows_a_helper_into_a_sibling_module(tmp_path):
    """`from utils import save_checkpoint` next to the training script: judged when the tree is
    checked (the engine summarizes the imported siblings before it hands files to workers)."""
    from ampmigrate.engine import Settings
    from ampmigrate.engine import run as run_engine

    utils = "import torch\n\n\n" + HELPER_TRAIN.split("\n\n\n")[1] + "\n"
    train = (
        "import torch\nfrom utils import save_checkpoint\n\n\n" + HELPER_TRAIN.split("\n\n\n")[2]
    )
    (tmp_path / "utils.py").write_text(utils)
    (tmp_path / "train.py").write_text(train)
    settings = Settings(rules=tuple(all_rules().values()))
    tree = run_engine([tmp_path / "train.py", tmp_path / "utils.py"], settings, jobs=1)
    found = [d for result in tree for d in result.diagnostics]
    assert [(d.path, d.code, d.line) for d in found] == [(str(tmp_path / "train.py"), "AMP208", 12)]
    assert "`save_checkpoint(...)`" in found[0].message
    assert "`torch.save` at utils.py:5" in found[0].message
    alone = run_engine([tmp_path / "train.py"], settings, jobs=1)
    assert alone[0].diagnostics == []


def test_amp209_fp16_model_cannot_be_unscaled():
    source = (
        SETUP.replace("torch.nn.Linear(4, 1)", "torch.nn.Linear(4, 1).half()")
        + """\
scaler.scale(model(x.half()).float().sum()).backward()
scaler.step(optimizer)
scaler.update()
"""
    )
    assert "AMP209" in codes(source)
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        run(source)
