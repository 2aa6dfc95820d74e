"""apex O1 across two modules (AMP303 with apex.links): ``amp.initialize`` in tools/train_net.py,
``amp.scale_loss`` in the training function of detection/engine/trainer.py. Rewritten only
together, in one run; each side alone, or with a caller the run cannot update, refuses."""

from __future__ import annotations

import ast
import shutil
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from test_apex import _runs

from ampmigrate.catalog import all_rules
from ampmigrate.engine import Settings, run

from conftest import FIXTURES, check_source

PROJECT = FIXTURES / "apex" / "two_modules"
FILES = ["tools/train_net.py", "detection/engine/trainer.py"]


def _settings(fix: bool = False) -> Settings:
    # the pair rewrite on its own: AMP311-AMP315 would also rewrite the fixture's apex DDP
    # wrapper (tests/test_apex_api.py has a project that leaves apex entirely)
    rules = tuple(r for code, r in all_rules().items() if not code.startswith("AMP31"))
    return Settings(rules=rules, fix=fix, unsafe_fixes=True)


def _tree(tmp_path: Path, side: str = "before") -> Path:
    root = tmp_path / side
    shutil.copytree(PROJECT / side, root)
    return root


def _files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.py"))


def _amp303(results) -> dict[str, object]:
    return {
        Path(r.path).name: next(d for d in [*r.fixed, *r.diagnostics] if d.code == "AMP303")
        for r in results
        if any(d.code == "AMP303" for d in [*r.fixed, *r.diagnostics])
    }


def test_both_modules_are_rewritten_together_exactly_and_once(tmp_path):
    root = _tree(tmp_path)
    results = run(_files(root), _settings(fix=True))
    for result in results:
        relative = Path(result.path).relative_to(root)
        new = result.new_source if result.changed else Path(result.path).read_bytes()
        assert new == (PROJECT / "after" / relative).read_bytes(), relative
    assert sorted(d.code for r in results for d in r.fixed if d.code == "AMP303") == ["AMP303"] * 2
    for result in results:
        if result.changed:
            Path(result.path).write_bytes(result.new_source)
    again = run(_files(root), _settings(fix=True))
    assert not [d for r in again for d in r.fixed] and not any(r.changed for r in again)
    assert not [d for r in again for d in r.diagnostics if d.code.startswith(("AMP2", "AMP3"))]


def test_check_offers_the_pair_and_names_the_other_side(tmp_path):
    found = _amp303(run(_files(_tree(tmp_path)), _settings()))
    assert found["trainer.py"].fix == found["train_net.py"].fix == "unsafe"
    assert "`do_train` gets a `scaler` parameter, passed by tools/train_net.py" in (
        found["trainer.py"].message
    )
    assert "passed to `do_train` (detection/engine/trainer.py)" in found["train_net.py"].message
    # apex's DDP wrapper is not mixed precision: it stays, and does not block the rewrite
    assert "`from apex.parallel import ...` is not this rewrite's: it is not mixed precision" in (
        found["train_net.py"].message
    )


def test_one_side_alone_refuses(tmp_path):
    root = _tree(tmp_path)
    [result] = run([root / FILES[1]], _settings(fix=True))
    assert not result.changed
    [finding] = [d for d in result.diagnostics if d.code == "AMP303"]
    assert finding.fix is None and "give `do_train` a `scaler` parameter" in finding.message


def test_a_suppressed_side_keeps_the_other_from_changing(tmp_path):
    """The caller's finding is suppressed (noqa): the trainer must not get a parameter that
    nobody passes."""
    root = _tree(tmp_path)
    caller = root / FILES[0]
    text = caller.read_text().replace("=amp_opt_level)", "=amp_opt_level)  # noqa: AMP303")
    caller.write_text(text)
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    found = _amp303(results)
    assert found["trainer.py"].fix is None
    assert "can only be rewritten together, and they are not: tools/train_net.py is not " in (
        found["trainer.py"].message
    )


def test_a_call_the_run_cannot_update_breaks_the_pair(tmp_path):
    root = _tree(tmp_path)
    (root / "tools" / "evaluate.py").write_text(
        "from detection.engine.trainer import do_train\n\n\ndef again(m, d, o):\n"
        "    do_train(m, d, o, 1)\n"
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["trainer.py"].message
    assert "`do_train` is also used at tools/evaluate.py:5, which would not pass the " in message


def test_training_function_regions_cover_every_forward():
    tree = ast.parse((PROJECT / "after" / FILES[1]).read_text())
    regions = [
        n for n in ast.walk(tree)
        if isinstance(n, ast.With) and "autocast" in ast.unparse(n.items[0].context_expr)
    ]  # fmt: skip
    inside = {id(n) for r in regions for n in ast.walk(r)}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    forwards = [c for c in calls if ast.unparse(c.func) == "model"]
    backwards = [c for c in calls if ast.unparse(c.func).endswith(".backward")]
    assert len(forwards) == 2 and all(id(c) in inside for c in forwards)
    assert backwards and not any(id(c) in inside for c in backwards)
    switches = [ast.unparse(r.items[0].context_expr) for r in regions]
    assert all("enabled=scaler.is_enabled()" in s for s in switches)


@pytest.mark.torch
def test_migrated_project_trains_like_the_original(tmp_path, stub):
    """O0 stand-in for apex against the migrated pair, fp32 and fp16 switch: same prints; with
    "cuda" replaced by "cpu" the fp16 run really computes the forward in float16 and the fp32
    run does not (the O0 branch of the opt-level switch)."""
    pytest.importorskip("torch")
    before, after = _tree(tmp_path, "before"), _tree(tmp_path, "after")
    shutil.copytree(stub / "apex", before / "apex")
    cpu = tmp_path / "cpu"
    shutil.copytree(after, cpu)
    for path in _files(cpu):  # the stub is not there: the migrated pair needs no apex
        path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    specs = []
    for dtype in ("float32", "float16"):
        specs.append((before / FILES[0], ["--dtype", dtype], before, False))
        specs.append((after / FILES[0], ["--dtype", dtype], after, False))
        specs.append((cpu / FILES[0], ["--dtype", dtype], cpu, True))
    results = _runs(specs, tmp_path)
    for code, _, error in results:
        assert code == 0, error
    for i in (0, 3):
        assert "iter 6 loss" in results[i][1]
        assert results[i][1] == results[i + 1][1]
    assert "forward dtypes: ['torch.float32']" in results[2][1]
    assert "forward dtypes: ['torch.float16']" in results[5][1]


def test_a_family_of_initializing_scripts_is_rewritten_with_their_training_function(tmp_path):
    """Two scripts that initialize amp and call one `do_train` (fine-tuning scripts sharing a
    trainer): the three files are one component, rewritten together; each script passes the
    GradScaler it creates, and the trainer takes it once."""
    root = _tree(tmp_path)
    shutil.copy(root / FILES[0], root / "tools" / "finetune_net.py")
    found = _amp303(run(_files(root), _settings()))
    assert "`do_train` gets a `scaler` parameter, passed by tools/finetune_net.py and " in (
        found["trainer.py"].message
    )
    results = run(_files(root), _settings(fix=True))
    after = {
        "train_net.py": PROJECT / "after" / FILES[0],
        "finetune_net.py": PROJECT / "after" / FILES[0],
        "trainer.py": PROJECT / "after" / FILES[1],
    }
    changed = {Path(r.path).name: r.new_source for r in results if r.changed}
    assert changed == {name: path.read_bytes() for name, path in after.items()}


def test_one_refused_script_of_a_family_keeps_every_file_from_changing(tmp_path):
    root = _tree(tmp_path)
    text = (root / FILES[0]).read_text()
    (root / "tools" / "finetune_net.py").write_text(
        text.replace("=amp_opt_level)", "=amp_opt_level)  # noqa: AMP303")
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    found = _amp303(results)
    assert all(found[name].fix is None for name in ("trainer.py", "train_net.py"))
    assert "tools/finetune_net.py is not rewritten in this run" in found["train_net.py"].message


def test_relative_import_of_the_module_pairs_too(tmp_path):
    """Inside a package: `from .engine import trainer` and `trainer.do_train(...)`."""
    package = tmp_path / "pkg"
    shutil.copytree(PROJECT / "before" / "detection", package)
    caller = (PROJECT / "before" / FILES[0]).read_text()
    caller = caller.replace(
        "from detection.engine.trainer import do_train", "from .engine import trainer"
    )
    (package / "train_net.py").write_text(caller.replace("    do_train(", "    trainer.do_train("))
    results = run(_files(package), _settings(fix=True))
    assert sorted(d.code for r in results for d in r.fixed) == ["AMP303", "AMP303"]
    [new] = [r.new_source.decode() for r in results if r.path.endswith("train_net.py")]
    assert "        scaler=scaler,\n    )" in new


def test_a_checkpoint_helper_of_the_training_module_takes_the_scaler_too(tmp_path):
    """Every apex use of the training module is in module-level functions: the checkpoint
    helper next to the training function takes the GradScaler as well, when no file of the run
    uses it otherwise; a use in another file, which would not pass it, keeps every file as it
    is and is named."""
    root = _tree(tmp_path)
    trainer = root / FILES[1]
    trainer.write_text(
        trainer.read_text()
        + "\n\ndef save(path):\n    torch.save({'amp': amp.state_dict()}, path)\n"
    )
    results = run(_files(root), _settings(fix=True))
    [new] = [r.new_source for r in results if r.changed and r.path.endswith("trainer.py")]
    assert b"def save(path, scaler):\n    torch.save({'scaler': scaler.state_dict()}, path)" in new
    assert len([r for r in results if r.changed]) == 2
    (root / "tools" / "export.py").write_text(
        "from detection.engine.trainer import save\n\nsave('last.pt')\n"
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    found = _amp303(results)
    assert all(d.fix is None for d in found.values())
    assert (
        "`save` is also used at tools/export.py:3, which would not" in found["trainer.py"].message
    )


def test_an_aliased_import_of_the_training_function_pairs(tmp_path):
    root = _tree(tmp_path)
    caller = root / FILES[0]
    text = caller.read_text().replace("import do_train", "import do_train as run_loop")
    caller.write_text(text.replace("    do_train(", "    run_loop("))
    results = run(_files(root), _settings(fix=True))
    assert sorted(d.code for r in results for d in r.fixed) == ["AMP303", "AMP303"]
    (root / "tools" / "again.py").write_text(
        "from detection.engine.trainer import do_train as loop\n\nloop(1, 2, 3)\n"
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    assert "is also used at tools/again.py:3" in _amp303(results)["trainer.py"].message


SIBLING = FIXTURES / "apex" / "sibling_state"


def test_a_sibling_module_using_amp_state_keeps_a_file_fixed_alone_refused(tmp_path):
    """train.py initializes and scales; utils.py, which it imports, saves `amp.state_dict()`.
    `fix` on train.py alone rewrites nothing and names utils.py; with the sibling's apex use
    gone, train.py is rewritten (the sibling was the only blocker)."""
    root = tmp_path / "project"
    shutil.copytree(SIBLING, root)
    [result] = run([root / "train.py"], _settings(fix=True))
    assert not result.changed
    [finding] = [d for d in result.diagnostics if d.code == "AMP303"]
    assert finding.fix is None
    assert (
        "utils.py (imported by train.py at line 11) calls `amp.state_dict` at its line 14 and "
        "does not initialize amp"
    ) in finding.message
    utils = root / "utils.py"
    utils.write_text(
        "import torch\n\n\ndef save_checkpoint(path, model, optimizer, use_amp):\n"
        '    torch.save({"model": model.state_dict()}, path)\n'
    )
    [result] = run([root / "train.py"], _settings(fix=True))
    assert [d.code for d in result.fixed] == ["AMP303"]
    assert b"from apex" not in result.new_source and b"amp.scale_loss" not in result.new_source


@pytest.mark.torch
def test_a_checkpoint_module_is_rewritten_with_the_script_it_serves(tmp_path, stub):
    """Both files in one run are one component: the checkpoint functions take the GradScaler,
    the script passes it, and both are rewritten (twice: nothing more). The migrated pair prints
    what the original prints against the O0 stand-in, and with "cuda" -> "cpu" it trains in
    float16 and its checkpoint holds the scaler's state under "scaler", which
    `load_checkpoint` restores."""
    pytest.importorskip("torch")
    root = tmp_path / "project"
    shutil.copytree(SIBLING, root)
    results = run(_files(root), _settings(fix=True))
    changed = {Path(r.path).name: r.new_source for r in results if r.changed}
    assert set(changed) == {"train.py", "utils.py"}
    assert b"scaler=scaler" in changed["train.py"]
    assert b'state["scaler"] = scaler.state_dict()' in changed["utils.py"]
    for name, data in changed.items():
        (root / name).write_bytes(data)
    again = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in again) and not [d for r in again for d in r.fixed]

    before = tmp_path / "before"
    shutil.copytree(SIBLING, before)
    shutil.copytree(stub / "apex", before / "apex")
    cpu = tmp_path / "cpu"
    shutil.copytree(root, cpu)
    for path in _files(cpu):
        path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    (cpu / "resume.py").write_text(
        "import torch, utils\n"
        "model = torch.nn.Linear(8, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        'scaler = torch.amp.GradScaler("cpu", init_scale=2.0)\n'
        'utils.load_checkpoint("last.pt", model, optimizer, True, scaler=scaler)\n'
        'print("restored scale", scaler.get_scale())\n'
    )
    original, migrated, fp16 = _runs(
        [(before / "train.py", ["--amp"], before, False),
         (root / "train.py", ["--amp"], root, False),
         (cpu / "train.py", ["--amp"], cpu, True)],
        tmp_path,
    )  # fmt: skip
    for code, _, error in (original, migrated, fp16):
        assert code == 0, error
    assert "step 3: loss" in original[1] and migrated[1] == original[1]
    assert "forward dtypes: ['torch.float16']" in fp16[1]
    saved = torch_load(tmp_path / "last.pt")
    assert set(saved) == {"model", "optimizer", "scaler"} and saved["scaler"]["scale"] > 2.0
    [(code, out, error)] = _runs([(cpu / "resume.py", [], cpu, False)], tmp_path)
    assert code == 0, error
    assert f"restored scale {saved['scaler']['scale']}" in out


def torch_load(path: Path) -> dict:
    import torch

    return torch.load(path, weights_only=True)


def test_initialize_whose_imports_never_call_apex_says_apex_only_casts(tmp_path):
    """scene_graph_benchmark: `amp.initialize` in the entry point, a trainer with its own native
    GradScaler: nothing scales under apex; the refusal says so instead of "scaled elsewhere"."""
    (tmp_path / "trainer.py").write_text(
        "import torch\n\n\ndef do_train(model, optimizer, loader):\n"
        '    scaler = torch.amp.GradScaler("cuda")\n'
        "    for x in loader:\n        scaler.scale(model(x).sum()).backward()\n"
        "        scaler.step(optimizer)\n        scaler.update()\n"
    )
    (tmp_path / "train_net.py").write_text(
        "from apex import amp\nfrom trainer import do_train\n\n\n"
        "def main(model, optimizer, loader):\n"
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "    do_train(model, optimizer, loader)\n"
    )
    [result] = run([tmp_path / "train_net.py"], _settings())
    [finding] = [d for d in result.diagnostics if d.code == "AMP303"]
    assert "none of the modules it imports that are on disk calls apex amp" in finding.message
    assert "apex only casts here" in finding.message


GET_AMP = (
    "def get_amp(fp16):\n    if fp16:\n        from apex import amp\n\n        return amp\n"
    "    return None\n"
)
USES_GET_AMP = (
    "import torch\n{head}\n\n"
    "def train(model, opt, batches, fp16):\n"
    "    amp = get_amp(fp16)\n"
    "    if amp:\n"
    '        model, opt = amp.initialize(model, opt, opt_level="O1")\n'
    "    for x, y in batches:\n"
    "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
    "        if amp:\n"
    "            with amp.scale_loss(loss, opt) as scaled_loss:\n"
    "                scaled_loss.backward()\n"
    "        else:\n"
    "            loss.backward()\n"
    "        opt.step()\n"
)


def test_apex_handed_out_by_a_function_is_reported_where_it_is_used(tmp_path):
    """`amp = get_amp(fp16)` then `amp.initialize(...)`, `amp.scale_loss(...)` (nlp-recipes):
    the calls never resolve to apex by name, so they had no finding at all; the helper that
    returns the module is reported too, and the calls through what it gave name it, in the
    same file or in another module on disk."""
    (tmp_path / "helpers.py").write_text(GET_AMP)
    (tmp_path / "user.py").write_text(USES_GET_AMP.format(head="from helpers import get_amp"))
    (tmp_path / "alone.py").write_text(USES_GET_AMP.format(head="\n\n" + GET_AMP))
    results = run(sorted(tmp_path.glob("*.py")), _settings())
    found = {Path(r.path).name: [d for d in r.diagnostics if d.code == "AMP303"] for r in results}
    assert "line 5: `get_amp` returns apex's amp module" in found["helpers.py"][0].message
    [user] = found["user.py"]
    assert user.fix is None
    assert (
        "line 7: `amp.initialize` calls apex amp through `amp`, which holds what "
        "`get_amp(...)` (helpers.py:1) returns" in user.message
    ), user.message
    assert "line 11: `amp.scale_loss` calls apex amp through `amp`" in user.message
    [alone] = found["alone.py"]
    assert "returns apex's amp module" in alone.message
    assert "which holds what `get_amp(...)` (line 4) returns" in alone.message, alone.message


KEEPS_GET_AMP = """\
import torch
from helpers import get_amp
from tuning import fine_tune


class Summarizer:
    def fit(self, model, opt, batches, fp16):
        self.amp = get_amp(fp16)
        if self.amp:
            model, opt = self.amp.initialize(model, opt, opt_level="O1")
        return [fine_tune(model, opt, x, y, amp=self.amp) for x, y in batches]

    def checkpoint(self):
        return {"amp": self.amp.state_dict() if self.amp else None}
"""
FINE_TUNE = """\
import torch


def fine_tune(model, opt, x, y, amp=None):
    loss = torch.nn.functional.mse_loss(model(x), y)
    with amp.scale_loss(loss, opt) as scaled_loss:
        scaled_loss.backward()
    opt.step()
    state = amp.state_dict()
    return loss.item(), state
"""


def test_apex_handed_out_by_a_function_and_kept_on_an_object_is_reported(tmp_path):
    """The 71st review's silent gap (nlp-recipes' summarizer): `self.amp = get_amp(fp16)`, then
    `self.amp.initialize(...)` and `self.amp.state_dict()` in a file without `scale_loss`:
    no finding at all (and, with `self.amp.scale_loss`, the false "only where another file
    keeps it there"). Also: `amp.state_dict()` through the parameter that scales was left off
    the helper's blockers."""
    (tmp_path / "helpers.py").write_text(GET_AMP)
    (tmp_path / "summarizer.py").write_text(KEEPS_GET_AMP)
    (tmp_path / "tuning.py").write_text(FINE_TUNE)
    results = run(sorted(tmp_path.glob("*.py")), _settings())
    found = {Path(r.path).name: [d for d in r.diagnostics if d.code == "AMP303"] for r in results}
    [kept] = found["summarizer.py"]
    assert kept.fix is None and kept.line == 10
    for line, call in ((10, "initialize"), (14, "state_dict")):
        assert (
            f"line {line}: `self.amp.{call}` calls apex amp through `self.amp`, which holds "
            "what `get_amp(...)` (helpers.py:1) returns (stored at line 8)"
        ) in kept.message
    [tuning] = found["tuning.py"]
    assert "line 6: `amp.scale_loss`" in tuning.message
    assert "line 9: `amp.state_dict` calls apex amp's `state_dict` through `amp`" in (
        tuning.message
    )


HOOKED = FIXTURES / "apex" / "runner_hook"
HOOK_FILES = ["selfsup/apis/train.py", "selfsup/hooks/optimizer_hook.py"]


def _rewritten_exactly(tmp_path: Path, fixture: Path, changed: list[str]) -> None:
    """`fix` on the whole project gives exactly the fixture's after/ tree, changing `changed`;
    a second run changes and reports nothing."""
    root = tmp_path / "project"
    shutil.copytree(fixture / "before", root)
    results = run(_files(root), _settings(fix=True))
    assert not [r.error for r in results if r.error]
    for result in results:
        relative = Path(result.path).relative_to(root)
        new = result.new_source if result.changed else Path(result.path).read_bytes()
        assert new == (fixture / "after" / relative).read_bytes(), relative
        if result.changed:
            Path(result.path).write_bytes(result.new_source)
    assert sorted(str(Path(r.path).relative_to(root)) for r in results if r.changed) == changed
    again = run(_files(root), _settings(fix=True))
    assert not [r.error for r in again if r.error]  # (a second pass that fails is no fix)
    assert not any(r.changed for r in again) and not [d for r in again for d in r.fixed]
    assert not [d for r in again for d in r.diagnostics if d.code.startswith(("AMP2", "AMP3"))]


def _runs_beside_original(tmp_path: Path, stub: Path, fixture: Path, runs: list) -> list:
    """Each (script, flags) of ``runs`` three times: the original against the O0 stand-in,
    the migration as written (CUDA AMP off without a GPU) and with "cuda" -> "cpu" (float16
    on CPU, forward dtypes recorded). All must exit 0, the first two print the same."""
    before = tmp_path / "before"
    shutil.copytree(fixture / "before", before)
    shutil.copytree(stub / "apex", before / "apex")
    after = tmp_path / "after"
    shutil.copytree(fixture / "after", after)
    cpu = tmp_path / "cpu"
    shutil.copytree(after, cpu)
    for path in _files(cpu):
        path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    specs = [
        (root / script, flags, root, record)
        for script, flags in runs
        for root, record in ((before, False), (after, False), (cpu, True))
    ]
    results = _runs(specs, tmp_path)
    for code, _, error in results:
        assert code == 0, error
    for i in range(0, len(results), 3):
        assert " loss " in results[i][1]
        assert results[i][1] == results[i + 1][1]
    return results


def test_a_runner_hook_and_the_script_that_initializes_are_rewritten_together(tmp_path):
    """mmcv style: the script initializes amp and hands model and optimizer to a runner (a
    library), whose hook scales `runner.outputs["loss"]`. No call links the two files; apex's
    process-wide state does. The hook makes its own GradScaler, switched like its scaled
    backward; the script casts from `initialize` on. Exactly the fixture, then nothing more."""
    _rewritten_exactly(tmp_path, HOOKED, HOOK_FILES)


def _each_alone_refuses(fixture: Path, files: list[str], root: Path) -> None:
    """`fix` on one file of a component changes nothing and offers no fix."""
    shutil.copytree(fixture / "before", root)
    for alone in files:
        [result] = run([root / alone], _settings(fix=True))
        assert not result.changed
        assert _amp303([result])[Path(alone).name].fix is None


def test_a_runner_hook_alone_or_its_script_alone_refuses(tmp_path):
    root = tmp_path / "project"
    _each_alone_refuses(HOOKED, HOOK_FILES, root)
    # the script in a run whose hook is suppressed: neither changes, and the script says why
    hook = root / HOOK_FILES[1]
    hook.write_text(hook.read_text().replace("as scaled_loss:", "as scaled_loss:  # noqa: AMP303"))
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["train.py"].message
    assert "the class `DistOptimizerHook` that scales the loss" in message
    assert "not rewritten in this run" in message


@pytest.mark.torch
def test_migrated_runner_hook_trains_like_the_original(tmp_path, stub):
    """The O0 stand-in for apex against the migrated pair: the same losses, with and without
    `--fp16`; with "cuda" -> "cpu" the runner's forward really runs in float16 under `--fp16`
    (and in float32 without), and the hook's GradScaler steps on the accumulation schedule."""
    runs = [(HOOK_FILES[0], []), (HOOK_FILES[0], ["--fp16"])]
    results = _runs_beside_original(tmp_path, stub, HOOKED, runs)
    assert "iter 7 loss" in results[0][1]
    assert "forward dtypes: ['torch.float32']" in results[2][1]
    assert "forward dtypes: ['torch.float16']" in results[5][1]
    assert results[5][1].count("iter ") == 8
    # the float16 run tracks the float32 one: the weights the forward uses move with each
    # step (a region that cached its float16 weights would repeat the first epoch's losses)
    _tracks(_losses(results[5][1]), _losses(results[3][1]))


def _losses(output: str) -> list[float]:
    return [float(line.rsplit(" ", 1)[1]) for line in output.splitlines() if " loss " in line]


def _tracks(half: list[float], full: list[float]) -> None:
    """The float16 losses of a run are the float32 ones to float16's precision, step by step."""
    assert len(half) == len(full) > 4
    assert max(abs(h - f) for h, f in zip(half, full, strict=True)) < 2e-3, (half, full)


BUILT = FIXTURES / "apex" / "built_trainer"
BUILT_FILES = ["engine/train_loop.py", "train_net.py"]


def test_a_trainer_the_script_builds_with_the_initialized_pair_is_rewritten_with_it(tmp_path):
    """fast-reid (the 66th review): the script initializes amp and builds `AMPTrainer` (or the
    plain trainer) with the model and optimizer; the trainer, which has no `__init__` of its
    own, scales with apex. Refused ("not through ... an object it builds"). The trainer gains
    an `__init__` that passes everything on and makes its GradScaler; the script casts from
    `initialize` on. Exactly the fixture, then nothing more; each file alone refuses."""
    _rewritten_exactly(tmp_path, BUILT, BUILT_FILES)
    _each_alone_refuses(BUILT, BUILT_FILES, tmp_path / "alone")


@pytest.mark.torch
def test_migrated_built_trainer_trains_like_the_original(tmp_path, stub):
    """With and without `--fp16`: the same losses as the O0 original; on CPU the forward runs
    in float16 under `--fp16` and tracks the float32 run."""
    runs = [(BUILT_FILES[1], []), (BUILT_FILES[1], ["--fp16"])]
    results = _runs_beside_original(tmp_path, stub, BUILT, runs)
    assert "forward dtypes: ['torch.float32']" in results[2][1]
    assert "forward dtypes: ['torch.float16']" in results[5][1]
    _tracks(_losses(results[5][1]), _losses(results[3][1]))


@pytest.mark.parametrize("shape", ["alias", "subclass"])
def test_a_built_trainer_through_a_name_or_a_subclass_is_linked(tmp_path, shape):
    """The 70th review's p26 and p23: the script binds the class to a name first (`cls =
    AMPTrainer if fp16 else SimpleTrainer`, then `cls(model, ...)`), or builds a subclass of
    the trainer that scales (`LoggingAMPTrainer(AMPTrainer)`, beside it): both files are
    rewritten together, the trainer that scales gains its `__init__`."""
    root = tmp_path / "project"
    shutil.copytree(BUILT / "before", root)
    script, loop = root / BUILT_FILES[1], root / BUILT_FILES[0]
    if shape == "alias":
        script.write_text(
            script.read_text().replace(
                "    trainer = (AMPTrainer if fp16 else SimpleTrainer)(",
                "    cls = AMPTrainer if fp16 else SimpleTrainer\n    trainer = cls(",
            )
        )
    else:
        loop.write_text(loop.read_text() + "\n\nclass LoggingAMPTrainer(AMPTrainer):\n    pass\n")
        script.write_text(script.read_text().replace("AMPTrainer", "LoggingAMPTrainer"))
    results = run(_files(root), _settings(fix=True))
    changed = {Path(r.path).name: r for r in results if r.changed}
    assert sorted(changed) == ["train_loop.py", "train_net.py"]
    assert "self.scaler = torch.amp.GradScaler(" in changed["train_loop.py"].new_source.decode()


def test_a_built_trainer_returned_by_the_function_that_initializes_refuses(tmp_path):
    """The 70th review's p27: `setup()` initializes and returns `AMPTrainer(model, ...)`; its
    caller trains. The region after `initialize` held no forward: every step ran in float32
    under an always-on GradScaler. Refused, saying so."""
    root = tmp_path / "project"
    shutil.copytree(BUILT / "before", root)
    script = root / BUILT_FILES[1]
    text = script.read_text()
    text = text.replace("    trainer = (AMPTrainer", "    return (AMPTrainer").replace(
        "    trainer.train(2)\n", ""
    )
    script.write_text(
        text.replace(
            "    main(parser.parse_args().fp16)", "    main(parser.parse_args().fp16).train(2)"
        )
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["train_net.py"].message
    assert "`main` returns `(AMPTrainer if fp16 else SimpleTrainer)(" in message
    assert "its caller may run the training with it after it returns" in message


def test_a_built_trainer_whose_script_initializes_in_a_constructor_refuses(tmp_path):
    """fast-reid's own shape: `initialize` in `DefaultTrainer.__init__`, the training in its
    `train()` method: an autocast region after `initialize` would hold no forward, and the
    trainer's would run in float32 under a GradScaler, silently. Refused, saying so."""
    root = tmp_path / "project"
    shutil.copytree(BUILT / "before", root)
    (root / BUILT_FILES[1]).write_text(
        "import torch\n"
        "from apex import amp\n\n"
        "from engine.train_loop import DEVICE, AMPTrainer, SimpleTrainer\n\n\n"
        "class Runner:\n"
        "    def __init__(self, fp16):\n"
        "        model = torch.nn.Linear(8, 1).to(DEVICE)\n"
        "        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)\n"
        "        if fp16:\n"
        '            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "        batches = [(torch.randn(4, 8), torch.randn(4, 1))]\n"
        "        self.trainer = (AMPTrainer if fp16 else SimpleTrainer)(\n"
        "            model, batches, optimizer\n"
        "        )\n"
        "\n"
        "    def train(self):\n"
        "        self.trainer.train(2)\n"
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["train_net.py"].message
    assert "`amp.initialize` runs in a constructor, `__init__`" in message


FAMILY = FIXTURES / "apex" / "class_family"
FAMILY_FILES = ["trainers/base.py", "trainers/variants/clipped.py"]


def test_a_class_family_across_modules_is_rewritten_together(tmp_path):
    """nnU-Net style: the base trainer initializes amp in a method, the variants of another
    module override the training step and scale (and clip `amp.master_params`) with apex.
    The GradScaler is the object's, made where `initialize` was; every class of the family
    reads it as `self.scaler`. Exactly the fixture, then nothing more."""
    _rewritten_exactly(tmp_path, FAMILY, FAMILY_FILES)


def test_a_file_of_a_class_family_alone_refuses(tmp_path):
    _each_alone_refuses(FAMILY, FAMILY_FILES, tmp_path / "project")


def test_a_family_override_that_skips_the_scalers_method_keeps_the_family(tmp_path):
    """A variant that overrides the base's initializing method without calling it would read
    a GradScaler never made: nothing changes, and the variant says why."""
    root = tmp_path / "project"
    shutil.copytree(FAMILY / "before", root)
    variant = root / FAMILY_FILES[1]
    variant.write_text(variant.read_text().replace("super().initialize()", "pass"))
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    found = _amp303(results)
    assert (
        "`SlowClippedTrainer.initialize` overrides the method that would make `self.scaler` "
        "without calling `super().initialize(...)`"
    ) in found["clipped.py"].message
    assert "variants/clipped.py is not rewritten in this run" in found["base.py"].message


@pytest.mark.torch
def test_migrated_class_family_trains_like_the_original(tmp_path, stub):
    """The O0 stand-in for apex against the migrated family, for the base trainer and both
    variants, with and without `--fp16`: the same output (losses and clipped norms); with
    "cuda" -> "cpu" the variants' forwards run in float16 under `--fp16` and track the
    float32 run."""
    runs = [
        ("run.py", [*flags, "--trainer", trainer])
        for trainer in ("base", "clipped", "slow")
        for flags in ([], ["--fp16"])
    ]
    results = _runs_beside_original(tmp_path, stub, FAMILY, runs)
    for i in range(0, len(results), 6):
        plain, half = results[i + 2][1], results[i + 5][1]
        assert "forward dtypes: ['torch.float32']" in plain
        assert "forward dtypes: ['torch.float16']" in half
        _tracks(_losses(half), _losses(plain))
    assert results[8][1].count("norm ") == 8  # (the clipped variant, float16 on CPU)


STATE = FIXTURES / "apex" / "runner_state"
STATE_FILES = [
    "custom/runner/checkpoint.py",
    "custom/runner/epoch_based_runner.py",
    "detect/apis/train.py",
    "detect/hooks/optimizer.py",
]


def test_a_runner_that_checkpoints_amp_state_joins_its_hook_and_script(tmp_path):
    """Swin style: a runner class (a subclass of the library's `EpochBasedRunner`) restores
    `amp.load_state_dict` in `resume` and saves through a checkpoint function of another
    module that writes `amp.state_dict()`; the hook scales, the script initializes inside two
    nested `if`s. All four move together: the runner finds the hook's GradScaler on its hooks
    and hands it to the checkpoint function. Exactly the fixture, then nothing more."""
    _rewritten_exactly(tmp_path, STATE, STATE_FILES)


def test_a_file_of_the_runner_component_alone_refuses(tmp_path):
    _each_alone_refuses(STATE, STATE_FILES, tmp_path / "project")


@pytest.mark.parametrize(
    ("imported", "called"),
    [
        ("from custom.runner.checkpoint import save_checkpoint", "save_checkpoint"),
        ("from custom.runner import save_checkpoint", "save_checkpoint"),  # the re-export
        ("from custom import runner", "runner.save_checkpoint"),
        ("from custom.runner import *", "save_checkpoint"),
    ],
)
def test_a_checkpoint_function_used_outside_the_runner_keeps_the_component(
    tmp_path, imported, called
):
    """A use the runner does not make would not pass the GradScaler (a required keyword):
    however it is imported, through the package that re-exports it too, nothing changes."""
    root = tmp_path / "project"
    shutil.copytree(STATE / "before", root)
    (root / "publish.py").write_text(
        f"{imported}\n\n\ndef publish(model):\n    {called}(model, 'final.pth')\n"
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["epoch_based_runner.py"].message
    assert "`save_checkpoint` is also used at publish.py:5" in message, message


def _registry_wired(root: Path) -> None:
    """The runner_state project as mmcv wires it: the script imports neither the hook nor the
    runner (the config names them); an entry point imports the script's module and the hook's,
    whose package `__init__` imports the runner and the checkpoint module."""
    hook = (root / "detect" / "hooks" / "optimizer.py").read_text()
    (root / "custom" / "runner" / "optimizer.py").write_text(hook)
    shutil.rmtree(root / "detect" / "hooks")
    train = root / "detect" / "apis" / "train.py"
    text = train.read_text()
    text = text.replace("from custom.runner import EpochBasedRunnerAmp\n", "")
    text = text.replace("from detect.hooks import DistOptimizerHook\n", "")
    text = text.replace("    runner = EpochBasedRunnerAmp(", '    runner = cfg["runner"](')
    text = text.replace("DistOptimizerHook(**options)", 'cfg["hook"](**options)')
    train.write_text(text)
    (root / "entry.py").write_text(
        "from detect.apis.train import train_detector\n"
        "import custom.runner.optimizer\n\n\n"
        "def main(cfg, work_dir):\n    train_detector(cfg, work_dir)\n"
    )


def test_a_component_wired_by_a_registry_is_found_through_its_entry_point(tmp_path):
    """The A-M half of the eighth review (Cream's EfficientViT, BEiT's segmentation): 12
    files refused with "no `amp.scale_loss` ... in the modules it imports". Through the entry
    point that imports both sides (and the package `__init__` that imports the runner), the
    four files are one component; without the entry point in the run, nothing changes."""
    root = tmp_path / "project"
    shutil.copytree(STATE / "before", root)
    _registry_wired(root)
    alone = [p for p in _files(root) if p.name != "entry.py"]
    assert not any(r.changed for r in run(alone, _settings(fix=True)))
    results = run(_files(root), _settings(fix=True))
    changed = sorted(str(Path(r.path).relative_to(root)) for r in results if r.changed)
    assert changed == [
        "custom/runner/checkpoint.py",
        "custom/runner/epoch_based_runner.py",
        "custom/runner/optimizer.py",
        "detect/apis/train.py",
    ]
    for result in results:
        if result.changed:
            ast.parse(result.new_source)
            assert b"import apex" not in result.new_source
            assert b"apex.amp" not in result.new_source


@pytest.mark.torch
def test_migrated_runner_component_trains_and_resumes_like_the_original(tmp_path, stub):
    """Two runs in one script, the second resumed from the first's epoch-1 checkpoint: the
    O0 stand-in's losses equal the migration's, with and without `--fp16`. With "cuda" ->
    "cpu" the forward runs in float16, its losses track the float32 ones, the resumed epoch
    repeats the first run's exactly, and the GradScaler state the hook holds goes through
    the runner's checkpoint and back into a new hook's GradScaler."""
    runs = [(STATE_FILES[2], []), (STATE_FILES[2], ["--fp16"])]
    results = _runs_beside_original(tmp_path, stub, STATE, runs)
    fp16 = results[5][1]
    assert "forward dtypes: ['torch.float16']" in fp16 and "load amp state dict" in fp16
    losses = _losses(fp16)
    assert losses[4:8] == losses[8:12]
    _tracks(losses, _losses(results[3][1]))
    probe = tmp_path / "cpu" / "probe.py"
    probe.write_text(PROBE)
    [(code, out, err)] = _runs([(probe, [], tmp_path / "cpu", False)], tmp_path)
    assert code == 0, err
    assert "restored 1024.0 7" in out, out


PROBE = """\
import tempfile
import warnings

import torch

warnings.simplefilter("error", FutureWarning)
from custom.runner import EpochBasedRunnerAmp
from detect.hooks import DistOptimizerHook

model = torch.nn.Linear(2, 1)
with tempfile.TemporaryDirectory() as work_dir:
    runners = []
    for _ in range(2):
        runner = EpochBasedRunnerAmp(model, None, torch.optim.SGD(model.parameters()), work_dir)
        runner.register_hook(DistOptimizerHook(use_fp16=True))
        runners.append(runner)
    state = {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
             "growth_interval": 2000, "_growth_tracker": 7}
    runners[0].hooks[0].scaler.load_state_dict(state)
    runners[0].save_checkpoint(work_dir)
    runners[1].resume(f"{work_dir}/epoch_0.pth")
    restored = runners[1].hooks[0].scaler.state_dict()
    print("restored", restored["scale"], restored["_growth_tracker"])
"""


KEPT = FIXTURES / "apex" / "kept_family"
KEPT_FILES = ["finetune/run_classifier.py", "finetune/run_regression.py"]


def test_scripts_that_keep_apex_on_args_and_share_a_training_function_move_together(tmp_path):
    """UER style: each script keeps apex's module as `args.amp`; `train_model`, which one of
    them defines and the others import (`import *` too), calls through it. Every script keeps
    a GradScaler there instead (`args.scaler`), all in one run; exactly the fixture, then
    nothing more. Alone, each refuses and says why."""
    root = tmp_path / "project"
    shutil.copytree(KEPT / "before", root)
    for alone in KEPT_FILES:
        [result] = run([root / alone], _settings(fix=True))
        assert not result.changed
    [one] = run([root / KEPT_FILES[0]], _settings())
    assert (
        "`train_model` is also used at run_regression.py:20"
        in _amp303([one])["run_classifier.py"].message
    )
    _rewritten_exactly(tmp_path / "whole", KEPT, KEPT_FILES)


def test_a_script_of_the_family_that_is_refused_keeps_every_one_from_changing(tmp_path):
    root = tmp_path / "project"
    shutil.copytree(KEPT / "before", root)
    other = root / KEPT_FILES[1]
    other.write_text(other.read_text().replace('opt_level="O1"', 'opt_level="O2"'))
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["run_classifier.py"].message
    assert "run_regression.py is not rewritten in this run" in message


@pytest.mark.torch
def test_migrated_family_trains_like_the_original(tmp_path, stub):
    """Both scripts, with and without `--fp16 --adversarial`: the O0 stand-in's prints equal
    the migrated ones; with "cuda" -> "cpu" the forward runs in float16 and the adversarial
    backwards, scaled too, step through the scaler."""
    runs = [(script, f) for script in KEPT_FILES for f in ([], ["--fp16", "--adversarial"])]
    results = _runs_beside_original(tmp_path, stub, KEPT, runs)
    for i in (2, 8):
        assert "forward dtypes: ['torch.float32']" in results[i][1]
    for i in (5, 11):
        assert "forward dtypes: ['torch.float16']" in results[i][1]


@pytest.mark.parametrize(
    ("path", "old", "new", "why"),
    [
        (HOOK_FILES[1], "    def before_run(self, runner):",
         "    def enable(self):\n        self.use_fp16 = True\n\n    def before_run(self, runner):",
         "`self.use_fp16` is not set in `__init__` alone"),
        (HOOK_FILES[1], "        if self.use_fp16:\n            with",
         "        if self.use_fp16 and runner.iter > 0:\n            with",
         "runs under `if self.use_fp16 and runner.iter > 0:`, not under a flag its `__init__`"),
        (HOOK_FILES[0], "    runner.run(batches, 2)",
         "    with torch.autocast('cpu', enabled=False):\n        runner.run(batches, 2)",
         "is used after `amp.initialize`: apex cast there whatever autocast said"),
        (HOOK_FILES[0], '    if "use_fp16" in cfg and cfg["use_fp16"]:\n        model,',
         '    if "use_fp16" in cfg and cfg["use_fp16"]:\n        cfg["use_fp16"] = False\n'
         "        model,",
         "is changed inside its `if`"),
        # a loss scale from the config (a static 16 in DenseMatchingBenchmark's configs): the
        # hook's GradScaler is dynamic, and no guard was placed on this path
        (HOOK_FILES[0], 'opt_level="O1")', 'opt_level="O1", loss_scale=cfg["loss_scale"])',
         '`loss_scale=cfg["loss_scale"]` is not provably "dynamic"'),
    ],
)  # fmt: skip
def test_a_runner_hook_component_refuses_where_a_half_cannot_be_exact(
    tmp_path, path, old, new, why
):
    """The hook's GradScaler is switched by a flag only `__init__` sets, under which every
    scaled backward runs; the script's autocast must be the only one after `initialize`, and
    its condition must keep apex's value. Otherwise both files refuse, one saying why."""
    root = tmp_path / "project"
    shutil.copytree(HOOKED / "before", root)
    target = root / path
    assert old in target.read_text()
    target.write_text(target.read_text().replace(old, new))
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    found = _amp303(results)
    assert why in found[Path(path).name].message, found[Path(path).name].message
    other = HOOK_FILES[0] if path == HOOK_FILES[1] else HOOK_FILES[1]
    assert "not rewritten in this run" in found[Path(other).name].message


def test_a_hook_that_always_scales_gets_a_scaler_that_is_always_on(tmp_path):
    root = tmp_path / "project"
    shutil.copytree(HOOKED / "before", root)
    hook = root / HOOK_FILES[1]
    source = hook.read_text()
    start = source.index("        if self.use_fp16:\n")
    end = source.index("        if self.every_n_iters")
    body = (
        '        with apex.amp.scale_loss(runner.outputs["loss"], runner.optimizer) as scaled:\n'
        "            scaled.backward()\n"
    )
    hook.write_text(source[:start] + body + source[end:])
    results = run(_files(root), _settings(fix=True))
    changed = {Path(r.path).name: r.new_source.decode() for r in results if r.changed}
    assert set(changed) == {"train.py", "optimizer_hook.py"}
    assert 'self.scaler = torch.amp.GradScaler("cuda")\n' in changed["optimizer_hook.py"]


LAYERS_ALIAS = """\
import torch
try:
    from apex import amp
    float_function = amp.float_function
except ImportError:
    def float_function(fn):
        return fn


class Pool(torch.nn.Module):
    @float_function
    def forward(self, x):
        return torch.nn.functional.adaptive_avg_pool2d(x, 2)
"""

TRAIN_WITH_LAYERS = """\
import torch
from apex import amp
from layers import Pool


def main():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), Pool())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level="O1")
    loss = model(torch.randn(2, 3, 8, 8)).sum()
    with amp.scale_loss(loss, opt) as scaled_loss:
        scaled_loss.backward()
    opt.step()
"""


@pytest.mark.parametrize(
    "layers",
    [
        LAYERS_ALIAS,
        LAYERS_ALIAS.replace("    @float_function\n", "    @amp.float_function\n"),
    ],
    ids=["alias", "decorator"],
)
def test_a_layer_module_that_registers_casts_blocks_its_training_file(layers, tmp_path):
    """`float_function = amp.float_function` (in the import's `try:`) and a bare
    `@amp.float_function` are apex's casts as surely as a call: the layer's inputs were float32
    under apex O1 and become float16 under autocast (kernels that take only float32 fail).
    Both files get a finding, and the training file is not rewritten alone."""
    (tmp_path / "layers.py").write_text(layers)
    (tmp_path / "train.py").write_text(TRAIN_WITH_LAYERS)
    results = run(_files(tmp_path), _settings(fix=True))
    assert not any(r.changed for r in results)
    found = {Path(r.path).name: r.diagnostics for r in results}
    assert [d.line for d in found["layers.py"] if d.code == "AMP301"] == (
        [4] if "@float_function" in layers else [4, 11]
    )
    [refusal] = [d for d in found["train.py"] if d.code == "AMP303"]
    assert refusal.fix is None
    assert "layers.py (imported by train.py at line 3) calls `amp.float_function`" in (
        refusal.message
    )


def test_an_alias_read_to_probe_for_the_attribute_is_left_alone():
    """`except AttributeError` around `f = amp.float_function` probes an apex release for the
    member (compatibility code, left alone as for every API); `except ImportError` only guards
    the package's import, and the alias is a use."""
    probe = LAYERS_ALIAS.replace("except ImportError:", "except (ImportError, AttributeError):")
    assert not [d for d in check_source(probe) if d.code == "AMP301" and d.line == 4]
    assert [d.line for d in check_source(LAYERS_ALIAS) if d.code == "AMP301"] == [4]


def test_a_cast_registration_in_the_training_file_is_its_own_blocker():
    """In the file that initializes, the decorator is named at its line (the rewrite would
    otherwise keep a read of `amp` after removing its import), and said to be rewritten only in
    a layer module: "has no O1 rewrite" was false, the same decorator in an imported module is
    (the 41st review)."""
    source = TRAIN_WITH_LAYERS.replace("from layers import Pool\n", "") + (
        LAYERS_ALIAS.split("\n\n\n")[1].replace("@float_function", "@amp.float_function")
    )
    [finding] = [d for d in check_source(source) if d.code == "AMP303"]
    assert finding.fix is None
    assert (
        "line 14: `amp.float_function` in the file that initializes amp is not rewritten: its "
        "torch.amp form is written only in a layer module that the initializing files import"
    ) in finding.message
    assert "has no O1 rewrite" not in finding.message


@pytest.mark.parametrize("helper_uses_amp", [False, True])
def test_a_checkpoint_helper_on_disk_without_amp_needs_no_hedge(helper_uses_amp, tmp_path):
    """`from utils import save_network`: a helper module on disk that names no amp at all keeps
    no amp state, so the note "if it saves or loads apex amp state, ..." is noise there (a
    `clamp` or a `sample` is no amp: the thirty-fifth review's GAN recipes); one that may (it
    takes an `amp` argument) keeps the note."""
    signature, body = "net, path", "torch.save({'net': net.state_dict().clamp(0, 1)}, path)"
    if helper_uses_amp:
        signature = "net, path, amp=None"
        body = "torch.save({'net': net.state_dict(), 'amp': amp.state_dict()}, path)"
    (tmp_path / "utils.py").write_text(
        f"import torch\n\n\ndef save_network({signature}):\n    {body}\n"
    )
    (tmp_path / "train.py").write_text(
        TRAIN_WITH_LAYERS.replace("from layers import Pool\n", "from utils import save_network\n")
        .replace("Pool()", "torch.nn.Flatten()")
        .replace("    opt.step()\n", "    opt.step()\n    save_network(model, 'net.pt')\n")
    )
    results = run([tmp_path / "train.py"], _settings(fix=True))
    [done] = [d for r in results for d in r.fixed if d.code == "AMP303"]
    hedge = "`utils.save_network` (called at line 14) is in another module: if it saves or loads"
    assert (hedge in done.message) is helper_uses_amp


def test_a_helper_in_a_folder_without_init_is_called_by_the_scripts_beside_it(tmp_path):
    """`utils/common.py` in a folder with no `__init__.py`, imported by `main.py` beside that
    folder as `from utils.common import save_checkpoint` (a namespace package: DST-CBC and
    XMC_HTC, the thirty-sixth review): the helper's finding said "no file of the project
    calls `save_checkpoint`" and advised deleting it; the script beside the folder is read."""
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "common.py").write_text(
        "import torch\nfrom apex import amp\n\n\ndef save_checkpoint(net, path):\n"
        "    torch.save({'net': net.state_dict(), 'amp': amp.state_dict()}, path)\n"
    )
    (tmp_path / "main.py").write_text(
        "import torch\nfrom apex import amp\nfrom utils.common import save_checkpoint\n\n\n"
        "def run(net, opt):\n    net, opt = amp.initialize(net, opt, opt_level='O1')\n"
        "    save_checkpoint(net, 'ckpt.pt')\n"
    )
    results = run([tmp_path / "utils" / "common.py"], _settings())
    [finding] = [d for r in results for d in r.diagnostics if d.code == "AMP303"]
    assert "no file of the project calls `save_checkpoint`" not in finding.message
    assert "`save_checkpoint` uses `amp.state_dict` but `amp.initialize` is not in this file" in (
        finding.message
    )


SCRIPT_WITH_HELPERS = {
    "utils/common.py": """\
import torch
from apex import amp


def save_checkpoint(net, optimizer, fp16, path):
    torch.save({"net": net.state_dict(), "optimizer": optimizer.state_dict(),
                "amp": amp.state_dict() if fp16 else None}, path)


def load_checkpoint(net, optimizer, fp16, path):
    checkpoint = torch.load(path, weights_only=True)
    net.load_state_dict(checkpoint["net"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    if fp16 and checkpoint["amp"] is not None:
        amp.load_state_dict(checkpoint["amp"])
""",
    "main.py": """\
import os
import sys

import torch
from apex import amp
from utils.common import load_checkpoint, save_checkpoint


def train(net, optimizer, fp16, path, epochs):
    for epoch in epochs:
        torch.manual_seed(epoch)
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        optimizer.zero_grad()
        loss = ((net(x).float() - y) ** 2).mean()
        if fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
        save_checkpoint(net, optimizer, fp16, path)


if __name__ == "__main__":
    fp16, path = "--fp16" in sys.argv, "ckpt.pt"
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    if fp16:
        net, optimizer = amp.initialize(net, optimizer, opt_level="O1")
    resume = "--resume" in sys.argv
    if resume:
        load_checkpoint(net, optimizer, fp16, path)
    train(net, optimizer, fp16, path, range(3, 6) if resume else range(3))
""",
}


def _fixed_beside_original(tmp_path: Path, files: dict[str, str], changed: list[str]) -> tuple:
    """``files`` written as a project, a copy kept as the original, the project fixed in
    place (changing exactly ``changed``, by name): (the fixed root, the original's)."""
    root = tmp_path / "project"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    original = tmp_path / "original"
    shutil.copytree(root, original)
    results = run(_files(root), _settings(fix=True))
    assert not [r.error for r in results if r.error]
    assert sorted(Path(r.path).name for r in results if r.changed) == changed
    for result in results:
        if result.new_source is not None:  # (None: a file the prefilter passed over)
            Path(result.path).write_bytes(result.new_source)
    return root, original


def test_a_scripts_main_block_links_the_helpers_its_functions_call(tmp_path, stub):
    """The script's `__main__` block initializes, `train()` (which it calls afterwards)
    saves through the helper module, the block itself restores (DST-CBC, the thirty-sixth
    review): the call in `train()` was "also used ..., which would not pass the GradScaler",
    though `train` reads the block's module-level GradScaler. Both files are rewritten; run
    and resumed, the migration prints what the original prints against the O0 stand-in."""
    root, original = _fixed_beside_original(tmp_path, SCRIPT_WITH_HELPERS, ["common.py", "main.py"])
    main = (root / "main.py").read_text()
    assert "save_checkpoint(net, optimizer, fp16, path, scaler=scaler)" in main
    assert "load_checkpoint(net, optimizer, fp16, path, scaler=scaler)" in main
    for flags in ([], ["--fp16"]):
        outputs = []
        for tree, path in ((original, stub), (root, None)):  # (each imports its own `utils`)
            specs = [(tree / "main.py", [*flags, *extra], path, False)
                     for extra in ([], ["--resume"])]  # fmt: skip
            runs = _runs(specs, tree)
            assert all(code == 0 for code, _, _ in runs), [e for _, _, e in runs]
            outputs.append([out for _, out, _ in runs])
        assert outputs[0] == outputs[1] and "epoch 5 loss" in outputs[1][1], flags


HELPER_INSIDE_TRAINING = {
    "utils.py": """\
import torch
from apex import amp


def save_checkpoint(net, optimizer, fp16, path="ckpt.pt"):
    torch.save({"net": net.state_dict(), "optimizer": optimizer.state_dict(),
                "amp": amp.state_dict() if fp16 else None}, path)


def load_checkpoint(net, optimizer, fp16, path="ckpt.pt"):
    checkpoint = torch.load(path, weights_only=True)
    net.load_state_dict(checkpoint["net"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    if fp16:
        amp.load_state_dict(checkpoint["amp"])


def train_schedule(net, optimizer, fp16, epochs):
    for epoch in epochs:
        torch.manual_seed(epoch)
        x, y = torch.randn(8, 4, device="cuda") / 4, torch.randn(8, 1, device="cuda") / 4
        optimizer.zero_grad()
        loss = ((net(x).float() - y) ** 2).mean()  # (small: no step skipped at 2**16)
        if fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
        save_checkpoint(net, optimizer, fp16)
""",
    "main.py": """\
import sys

import torch
from apex import amp
from utils import load_checkpoint, train_schedule

if __name__ == "__main__":
    fp16, resume = "--fp16" in sys.argv, "--resume" in sys.argv
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1).to("cuda")
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    if fp16:
        net, optimizer = amp.initialize(net, optimizer, opt_level="O1")
    if resume:
        load_checkpoint(net, optimizer, fp16)
    train_schedule(net, optimizer, fp16, range(3, 6) if resume else range(3))
""",
}


def test_a_helper_called_inside_the_linked_training_function_gets_its_scaler(tmp_path, stub):
    """The training function of the linked module saves through a checkpoint helper of the
    same module (pytorch-auto-drive, the thirty-seventh review): that call was "also used
    ..., which would not pass the GradScaler", though the training function receives it and
    hands it on. Both files are rewritten; run and resumed with "cuda" -> "cpu" (float16
    autocast and the GradScaler really run) beside the O0 original."""
    root, original = _fixed_beside_original(
        tmp_path, HELPER_INSIDE_TRAINING, ["main.py", "utils.py"]
    )
    utils = (root / "utils.py").read_text()
    assert "save_checkpoint(net, optimizer, fp16, scaler=scaler)" in utils
    assert '"scaler": scaler.state_dict() if fp16 else None' in utils
    cpu = tmp_path / "cpu"
    shutil.copytree(root, cpu)
    for path in _files(cpu):
        path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    for path in _files(original):
        path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    again = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in again) and not [d for r in again for d in r.fixed]
    for flags in ([], ["--fp16"]):
        outputs = []
        for tree, path in ((original, stub), (cpu, None)):
            specs = [(tree / "main.py", [*flags, *extra], path, False)
                     for extra in ([], ["--resume"])]  # fmt: skip
            runs = _runs(specs, tree)
            assert all(code == 0 for code, _, _ in runs), [e for _, _, e in runs]
            outputs.append([out for _, out, _ in runs])
        assert "epoch 5 loss" in outputs[1][1], flags
        if flags:  # float16 on CPU: the same schedule, losses within float16 rounding
            for ran, expected in zip(outputs[1], outputs[0], strict=True):
                got = [float(line.split()[-1]) for line in ran.splitlines()]
                want = [float(line.split()[-1]) for line in expected.splitlines()]
                assert got == pytest.approx(want, rel=2e-2, abs=2e-3)
        else:
            assert outputs[1] == outputs[0]


CARRIED = {
    "trainer.py": """\
import torch
import torch.nn.functional as F
from apex import amp


def fit(batches, model, optimizer, n_epochs, log):
    for epoch in range(n_epochs):
        train_loss = train_epoch(batches, model, optimizer)
        val_loss = test_epoch(batches, model)
        log(f"epoch {epoch} train {train_loss:.4f} val {val_loss:.4f}")


def train_epoch(batches, model, optimizer):
    model.train()
    total = 0.0
    for x, y in batches:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x).float(), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        total += loss.item()
    return total / len(batches)


def test_epoch(batches, model):
    model.eval()
    with torch.no_grad():
        losses = [F.mse_loss(model(x).float(), y).item() for x, y in batches]
    return sum(losses) / len(losses)
""",
    "main.py": """\
import torch
from apex import amp
from trainer import fit

if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    batches = [(torch.randn(8, 4, device="cuda") / 4, torch.randn(8, 1, device="cuda") / 4)
               for _ in range(3)]
    fit(batches, model, optimizer, 3, print)
""",
}

# the step in the function that hands the scaler on, the scaling one only backs up
CARRIER_STEPS = {
    "trainer.py": """\
import torch
import torch.nn.functional as F
from apex import amp


def run(batches, net, opt, log):
    fit(batches, net, opt, 3, log)


def fit(batches, model, optimizer, n_epochs, log):
    for epoch in range(n_epochs):
        total = 0.0
        for x, y in batches:
            optimizer.zero_grad()
            total += train_step(x, y, model, optimizer)
            optimizer.step()
        log(f"epoch {epoch} train {total:.4f}")


def train_step(x, y, model, optimizer):
    loss = F.mse_loss(model(x).float(), y)
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    return loss.item()
""",
    "main.py": CARRIED["main.py"]
    .replace("from trainer import fit", "from trainer import run as train")
    .replace(
        "fit(batches, model, optimizer, 3, print)",
        "train(batches, model, opt=optimizer, log=print)",
    ),
}


def _on_cpu_beside_original(tmp_path: Path, root: Path, original: Path, stub: Path) -> None:
    """The fixed project, "cuda" -> "cpu" (float16 autocast and the GradScaler really run),
    prints the O0 original's losses to float16 rounding; a second fix changes nothing."""
    again = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in again) and not [d for r in again for d in r.fixed]
    for tree in (root, original):
        for path in _files(tree):
            path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    runs = [
        *_runs([(original / "main.py", [], stub, False)], original),  # (each imports its own)
        *_runs([(root / "main.py", [], None, False)], root),
    ]
    assert all(code == 0 for code, _, _ in runs), [e for _, _, e in runs]
    (_, want, _), (_, got, _) = runs
    numbers = [
        [float(w) for w in out.split() if w[0].isdigit() and "." in w] for out in (want, got)
    ]
    assert len(numbers[1]) >= 3 and numbers[1] == pytest.approx(numbers[0], rel=2e-2, abs=2e-3)


def test_the_scaler_is_handed_through_functions_of_the_training_module(tmp_path, stub):
    """The script calls `fit`, which calls `train_epoch`, which scales (loc2vec, the
    forty-second review): refused before ("links two files only where this one calls the
    function that scales"), though the engineer's migration only threads `scaler` through
    `fit`. Both files are rewritten, `fit` hands its scaler on and its evaluation call gets a
    region (apex O1 cast that forward too); run on CPU beside the O0 original."""
    root, original = _fixed_beside_original(tmp_path, CARRIED, ["main.py", "trainer.py"])
    trainer, main = (root / "trainer.py").read_text(), (root / "main.py").read_text()
    assert "def fit(batches, model, optimizer, n_epochs, log, scaler):" in trainer
    assert "train_loss = train_epoch(batches, model, optimizer, scaler=scaler)" in trainer
    assert "def train_epoch(batches, model, optimizer, scaler):" in trainer
    lines = trainer.splitlines()
    at = next(i for i, line in enumerate(lines) if "val_loss = test_epoch(" in line)
    assert lines[at - 1].lstrip().startswith("with torch.amp.autocast(")
    assert "fit(batches, model, optimizer, 3, print, scaler=scaler)" in main
    assert "amp." not in trainer.replace("torch.amp.", "")
    _on_cpu_beside_original(tmp_path, root, original, stub)


def test_a_step_in_a_function_that_hands_the_scaler_on_becomes_the_scalers(tmp_path, stub):
    """Three hops, an aliased import, keywords: the script calls `run`, which calls `fit`,
    which steps the optimizer after `train_step` scaled the loss. The step of a function the
    scaler passes through is the scaled optimizer's step (a plain one would step gradients
    still multiplied by the scale)."""
    root, original = _fixed_beside_original(tmp_path, CARRIER_STEPS, ["main.py", "trainer.py"])
    trainer = (root / "trainer.py").read_text()
    assert "fit(batches, net, opt, 3, log, scaler=scaler)" in trainer
    assert "scaler.step(optimizer)\n            scaler.update()" in trainer
    assert "optimizer.step()" not in trainer
    assert (
        "train(batches, model, opt=optimizer, log=print, scaler=scaler)"
        in (root / "main.py").read_text()
    )
    _on_cpu_beside_original(tmp_path, root, original, stub)


@pytest.mark.parametrize(
    "other",
    [
        (
            "trainer.py",
            '\n\nif __name__ == "__main__":\n    fit([], torch.nn.Linear(4, 1), None, 1, print)\n',
        ),
        (
            "other.py",
            "from trainer import fit\n\n\ndef again(b, m, o):\n    fit(b, m, o, 1, print)\n",
        ),
    ],
)
def test_a_call_of_a_carrier_the_run_cannot_give_the_scaler_keeps_both_files(tmp_path, other):
    """A call of `fit` that would not pass the GradScaler (the training module's own main
    block, another module): every file stays, and the refusal names that call."""
    name, text = other
    files = dict(CARRIED)
    files[name] = files.get(name, "") + text
    root = tmp_path / "project"
    root.mkdir()
    for file, content in files.items():
        (root / file).write_text(content)
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    line = 34 if name == "trainer.py" else 5
    for finding in _amp303(results).values():
        assert f"`fit` is also used at {name}:{line}, which would not pass the GradScaler" in (
            finding.message
        )


def test_the_script_s_own_evaluation_after_the_linked_training_gets_a_region(tmp_path, stub):
    """The script calls `fit` (which hands the scaler on), then `test_epoch` itself (the 44th
    review, p70): that last forward ran in float32 with no note, where apex O1 cast it; it
    gets a region, as does a score before the training (the 45th review; the linked
    training call itself gets none)."""
    files = dict(CARRIED)
    files["main.py"] = (
        files["main.py"]
        .replace("from trainer import fit", "from trainer import fit, test_epoch")
        .replace("    fit(", '    print(f"first {test_epoch(batches, model):.4f}")\n    fit(')
        + '    print(f"final {test_epoch(batches, model):.4f}")\n'
    )
    root, original = _fixed_beside_original(tmp_path, files, ["main.py", "trainer.py"])
    main = (root / "main.py").read_text()
    assert main.count("torch.amp.autocast(") == 2  # (a score before the training, as after)
    assert (
        '    with torch.amp.autocast("cuda", dtype=torch.float16, cache_enabled=False):\n' in main
    )
    assert '        print(f"final {test_epoch(batches, model):.4f}")' in main
    _on_cpu_beside_original(tmp_path, root, original, stub)


def test_the_file_that_refuses_a_component_keeps_its_own_reason(tmp_path):
    """The training module of a linked pair refuses for a reason of its own (a gradient norm
    read right after the scaled backward: AMP203 in the rewrite); the pair was then run again
    broken, and its finding said only "trainer.py is not rewritten in this run (see its
    AMP303 finding)", about itself (the 44th review, p06). Its own reason stays."""
    files = dict(CARRIER_STEPS)
    files["trainer.py"] = files["trainer.py"].replace(
        "        scaled_loss.backward()\n",
        "        scaled_loss.backward()\n    print(model.weight.grad.norm().item())\n",
    )
    root = tmp_path / "project"
    root.mkdir()
    for file, content in files.items():
        (root / file).write_text(content)
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    found = _amp303(results)
    assert "the rewrite would get AMP203" in found["trainer.py"].message
    assert "is not rewritten in this run" not in found["trainer.py"].message
    assert "trainer.py is not rewritten in this run (see its AMP303 finding)" in (
        found["main.py"].message
    )


def test_the_helper_that_scales_called_twice_before_the_step_is_rewritten(tmp_path, stub):
    """`fit` calls `train_step` (which scales) twice, then steps (the 44th review, p63b):
    the second call was refused as "given `opt` between its scaled backward and the step",
    though it is the helper that scales, a scaled backward of its own. Rewritten, with the
    note that the scale now updates once per step; run on CPU beside the original."""
    files = dict(CARRIER_STEPS)
    files["trainer.py"] = files["trainer.py"].replace(
        "            total += train_step(x, y, model, optimizer)\n",
        "            total += train_step(x, y, model, optimizer)\n"
        "            total += train_step(x * 2, y, model, optimizer)\n",
    )
    root, original = _fixed_beside_original(tmp_path, files, ["main.py", "trainer.py"])
    trainer = (root / "trainer.py").read_text()
    assert "total += train_step(x * 2, y, model, optimizer, scaler=scaler)" in trainer
    results = run(_files(original), _settings())
    assert "gradient accumulation" in _amp303(results)["trainer.py"].message
    _on_cpu_beside_original(tmp_path, root, original, stub)


OWN_MAIN = """

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1).to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    fit([], model, optimizer, 1, print)
"""


@pytest.mark.parametrize("entry", ["module", "function"])
@pytest.mark.parametrize("called", ["fit", "train_epoch"])
def test_a_training_module_that_also_initializes_in_its_main_block_stays_with_its_script(
    tmp_path, entry, called
):
    """The training module initializes apex in its own main block too (the 44th review):
    the script, which initializes and calls `fit` (or `train_epoch`), was refused, but the
    module was rewritten alone, its functions reading a GradScaler that only its main block
    makes: the script then failed with NameError (or trained with a disabled scaler under
    apex's casts). Neither changes now, and the module's refusal names the script's call."""
    main = OWN_MAIN
    if entry == "function":
        main = main.replace('if __name__ == "__main__":', "def main():") + (
            '\n\nif __name__ == "__main__":\n    main()\n'
        )
    files = {"trainer.py": CARRIED["trainer.py"] + main, "main.py": CARRIED["main.py"]}
    if called == "train_epoch":
        files["main.py"] = (
            files["main.py"]
            .replace("import fit", "import train_epoch")
            .replace(
                "fit(batches, model, optimizer, 3, print)", "train_epoch(batches, model, optimizer)"
            )
        )
    root = tmp_path / "project"
    root.mkdir()
    for file, content in files.items():
        (root / file).write_text(content)
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["trainer.py"].message
    assert f"calls `{called}` (main.py:" in message or f"`{called}` would read" in message
    assert "main.py:12" in message


def test_a_derived_class_that_initializes_is_told_its_family_is_not_linked(tmp_path):
    """The derived class initializes, its base in another module scales and saves
    (DeepFakeDetectionChallenge, the thirty-seventh review): the refusal said the rewrite
    links files "where a hook or class family ties them", which reads as if this family were
    linked; only a family whose base class initializes is, and the message says so."""
    (tmp_path / "base.py").write_text(
        textwrap.dedent("""\
        from apex import amp


        class Base:
            def fit(self, batches):
                for x, y in batches:
                    loss = ((self.model(x) - y) ** 2).mean()
                    with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                        scaled_loss.backward()
                    self.optimizer.step()
        """)
    )
    (tmp_path / "sub.py").write_text(
        textwrap.dedent("""\
        import torch
        from apex import amp
        from base import Base


        class Sub(Base):
            def __init__(self):
                self.model = torch.nn.Linear(4, 1)
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
                self.model, self.optimizer = amp.initialize(self.model, self.optimizer)
        """)
    )
    results = run(_files(tmp_path), _settings())
    found = _amp303(results)
    assert "a class family whose base class initializes" in found["sub.py"].message
    assert "a base class it derives from" in found["sub.py"].message
    assert "(or a hook or class family ties them)" not in found["sub.py"].message


def test_registry_wired_components_of_several_projects_in_one_run_each_link(tmp_path):
    """A run over a folder of projects (`owner+name/...`, how the benchmarks lay them out):
    each project's entry point links its own script and hook; the entry points are looked
    for inside the project only (a folder of projects is not one)."""
    for name in ("one+project", "two+project"):
        root = tmp_path / name
        shutil.copytree(STATE / "before", root)
        _registry_wired(root)
    results = run(_files(tmp_path), _settings(fix=True))
    changed = sorted(str(Path(r.path).relative_to(tmp_path)) for r in results if r.changed)
    assert len(changed) == 8 and {c.split("/")[0] for c in changed} == {
        "one+project",
        "two+project",
    }


_LIBRARY = {
    "trainlib/__init__.py": "import trainlib.engine\n",
    "trainlib/engine/__init__.py": (
        "def _apex_step(model, optimizer, loss_fn):\n"
        "    from apex import amp as apex_amp\n\n"
        "    def update(x, y):\n"
        "        loss = loss_fn(model(x), y)\n"
        "        with apex_amp.scale_loss(loss, optimizer) as scaled_loss:\n"
        "            scaled_loss.backward()\n"
        "        optimizer.step()\n\n"
        "    return update\n\n\n"
        "def _plain_step(model, optimizer, loss_fn):\n"
        "    def update(x, y):\n"
        "        loss_fn(model(x), y).backward()\n"
        "        optimizer.step()\n\n"
        "    return update\n\n\n"
        "def make_trainer(model, optimizer, loss_fn, amp_mode=None):\n"
        '    if amp_mode == "apex":\n'
        "        return _apex_step(model, optimizer, loss_fn)\n"
        "    return _plain_step(model, optimizer, loss_fn)\n\n\n"
        "def make_evaluator(model):\n"
        "    return lambda x: model(x)\n"
    ),
}
_SCRIPT = (
    "import torch\n"
    "from apex import amp\n"
    "{imports}\n\n"
    "model = torch.nn.Linear(4, 2).cuda()\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    'model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
    "for x, y in [(torch.randn(8, 4).cuda(), torch.randint(0, 2, (8,)).cuda())]:\n"
    "    optimizer.zero_grad()\n"
    "    loss = torch.nn.functional.cross_entropy(model(x), y)\n"
    "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
    "        scaled_loss.backward()\n"
    "    optimizer.step()\n"
    "{uses}\n"
)


def _script_tied(root, files: dict, imports: str, uses: str, sibling: str, tied: bool):
    """``_SCRIPT`` beside ``files`` in ``root``: refused naming ``sibling`` (tied) or
    rewritten without it; the script's result."""
    for name, text in {**files, "train.py": _SCRIPT.format(imports=imports, uses=uses)}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    [result] = run([root / "train.py"], _settings(fix=True))
    [finding] = [d for d in [*result.fixed, *result.diagnostics] if d.code == "AMP303"]
    if tied:
        assert not result.changed and f"{sibling} (imported by " in finding.message
    else:
        assert result.changed and f"{sibling} (imported by " not in finding.message, finding.message
    return result


@pytest.mark.parametrize(
    ("imports", "uses", "tied"),
    [
        ("from trainlib.engine import make_evaluator", "evaluate = make_evaluator(model)", False),
        ("import trainlib.engine", "evaluate = trainlib.engine.make_evaluator(model)", False),
        ("from trainlib.engine import make_trainer", "step = make_trainer(model, optimizer, "
         "torch.nn.functional.cross_entropy)", True),
        ("import trainlib.engine as eng", "step = eng.make_trainer", True),
        ("import trainlib.engine as eng", "print(eng)", True),
        # a star import gives bare names: only a read of one that reaches apex ties it
        ("from trainlib.engine import *", "", False),
        ("from trainlib.engine import *", "step = make_trainer", True),
        ("from trainlib.engine import *", "step = getattr(model, 'make_trainer', None)", True),
    ],
)  # fmt: skip
def test_a_library_whose_apex_path_the_script_cannot_reach_does_not_tie_it(
    tmp_path, imports, uses, tied
):
    """ignite's engine module keeps `supervised_training_step_apex` (apex amp) behind
    `create_supervised_trainer(amp_mode="apex")`; a script that initializes and scales in its
    own loop and takes only `Engine`/an evaluator from that module was refused as 'relying on
    the amp state this file sets up'. apex code in functions that no name the program takes
    reaches cannot run: the script is rewritten alone. Where the names taken (or a module
    object, a star import's bare names the script reads, a computed lookup) may reach it,
    the tie stays."""
    root = tmp_path / "project"
    result = _script_tied(root, _LIBRARY, imports, uses, "trainlib/engine/__init__.py", tied)
    if not tied:
        assert b"apex" not in result.new_source and b"scaler.scale(loss)" in result.new_source
    # the library is its own case either way: its apex path is reported, not rewritten
    [library] = run([root / "trainlib/engine/__init__.py"], _settings(fix=True))
    assert not library.changed
    assert any(d.code == "AMP303" for d in library.diagnostics)


_VENDORED = {
    "pkg/__init__.py": "",
    "pkg/utils/__init__.py": "from .cuda import ApexScaler, NativeScaler\nfrom .misc import "
    'accuracy\n\n__all__ = ["ApexScaler", "NativeScaler", "accuracy"]\n',
    "pkg/utils/misc.py": "def accuracy(out):\n    return out.mean()\n",
    "pkg/utils/cuda.py": (
        "try:\n    from apex import amp\nexcept ImportError:\n    amp = None\n\n\n"
        "class ApexScaler:\n"
        "    def __call__(self, loss, optimizer):\n"
        "        with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
        "            scaled_loss.backward()\n"
        "        optimizer.step()\n\n\n"
        "class NativeScaler:\n    pass\n"
    ),
}


@pytest.mark.parametrize(
    ("imports", "uses", "tied"),
    [
        ("from pkg import utils", "print(utils.accuracy(loss))", False),
        ("from pkg.utils import accuracy", "print(accuracy(loss))", False),
        ("from pkg import utils", "print(utils.ApexScaler)", True),
        ("from pkg.utils import ApexScaler", "print(ApexScaler)", True),
        ("from pkg import utils", 'print(getattr(utils, "Apex" + "Scaler"))', True),
        # a star import beside timm's probe `getattr(torch.cuda.amp, "autocast")`, which
        # reaches that literal name only (the 42nd review: vendored-timm scripts refused)
        ("from pkg.utils import *", 'print(getattr(torch, "float16"), accuracy(loss))', False),
        ("from pkg.utils import *", "print(getattr(torch, name), accuracy(loss))", True),
        ("from pkg.utils import *", 'print(getattr(torch, "ApexScaler"))', True),
    ],
)  # fmt: skip
def test_a_class_a_package_only_re_exports_does_not_tie_the_script(tmp_path, imports, uses, tied):
    """SwinBERT vendors timm, whose `utils/__init__.py` re-exports `ApexScaler` (it scales
    with apex amp) beside helpers the script uses: the script was refused as 'relying on the
    amp state' of a class nothing takes. A name a package only re-exports is used only where a
    module takes it from the package (or may compute it)."""
    _script_tied(tmp_path / "project", _VENDORED, imports, uses, "pkg/utils/cuda.py", tied)


_TRAINER = (
    "{imports}\n\n\n"
    "def train(model, optimizer, x, fp16):\n"
    "    if fp16:\n"
    '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
    "    loss = model(x).sum()\n"
    "    if fp16:\n"
    "        with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
    "            scaled_loss.backward()\n"
    "    else:\n"
    "        loss.backward()\n"
    "    optimizer.step()\n"
)


@pytest.mark.parametrize(
    ("imports", "utils", "exporter"),
    [
        ("from pkg.utils import amp", "import torch\nfrom apex import amp\n", "utils.py"),
        ("from .utils import amp as mp\namp = mp", "from apex import amp\n", None),
        ("from .utils import *", "has_apex = True\nif has_apex:\n    from apex import amp\n",
         "utils.py"),
        ("from .utils import *", "amp = None\n", None),  # binds something else
    ],
)  # fmt: skip
def test_apex_amp_taken_from_another_module_is_reported_where_it_is_called(
    tmp_path, imports, utils, exporter
):
    """TextBrewer's distillers call `amp.initialize`/`amp.scale_loss` on the `amp` that
    `from .distiller_utils import *` gives (distiller_utils imports it from apex): they had no
    finding at all. Each call is now reported in its own file, naming the module it comes
    from and what to do; nothing is rewritten. (A star export that surely gives apex's module
    is rewritten: tests/test_apex_reexport.py.)"""
    root = tmp_path / "project"
    files = {
        "pkg/__init__.py": "",
        "pkg/utils.py": utils,
        "pkg/common.py": "from .utils import *\n",
        "pkg/trainer.py": _TRAINER.format(imports=imports),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    [result] = run([root / "pkg/trainer.py"], _settings(fix=True))
    assert not result.changed
    found = [d for d in result.diagnostics if d.code == "AMP303"]
    if exporter is None:
        assert not any("which this file takes from" in d.message for d in found)
        return
    [finding] = found
    assert (
        f"line 6: `amp.initialize` calls apex amp through `amp`, which this file takes from "
        f"{exporter} (it imports apex's amp there)"
    ) in finding.message
    assert "import it from apex in this file (`from apex import amp`)" in finding.message


@pytest.mark.parametrize(
    ("imports", "uses", "tied"),
    [
        ("from model.heads import ForITM", "head = ForITM()", False),
        ("from model.heads import ForAdversarial", "head = ForAdversarial()", True),
        ("from model.heads import ForAdversarial", "", False),  # imported, never used
    ],
)
def test_a_model_module_whose_apex_amp_only_an_unused_class_calls_does_not_tie(
    tmp_path, imports, uses, tied
):
    """UNITER's `model/vqa.py` imports apex's amp (and FusedLayerNorm) at module level; only
    `VillaForVisualQuestionAnswering.forward_adv` scales a loss through it. A script that
    imports two other classes was told it formed a component with that class ('the hook class
    ..., with the amp.initialize that feeds them'): a module-level apex import runs no amp
    code, and the classes it takes never reach the one that does."""
    root = tmp_path / "project"
    files = {
        "model/__init__.py": "",
        "model/heads.py": (
            "import torch\n"
            "from apex import amp\n"
            "from apex.normalization import FusedLayerNorm as LayerNorm\n\n\n"
            "class ForITM(torch.nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.norm = LayerNorm(4)\n\n\n"
            "class ForAdversarial(torch.nn.Module):\n"
            "    def forward_adv(self, loss, optim):\n"
            "        with amp.scale_loss(loss, optim) as scaled_loss:\n"
            "            scaled_loss.backward()\n"
        ),
        "train.py": _SCRIPT.format(imports=imports, uses=uses),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    settings = Settings(
        rules=tuple(r for c, r in all_rules().items() if c.startswith("AMP30")),
        fix=True,
        unsafe_fixes=True,
    )
    [result] = run([root / "train.py"], settings)
    [finding] = [d for d in [*result.fixed, *result.diagnostics] if d.code == "AMP303"]
    assert ("model/heads.py (imported by train.py" in finding.message) is tied, finding.message
    assert result.changed is not tied


def test_the_setting_does_not_cover_a_level_the_project_sets_to_o2_elsewhere(tmp_path):
    """With apex-opt-level = "O1" a level from a parameter or a flag was taken as O1 or O0
    even where another file of the project passes O2 (a chatbot's training entry:
    `SmallTalk(opt_level="O2")`), gives its flag the default O2, or a shell script runs it
    with O2: the declaration is contradicted there, and the refusal names the place."""
    (tmp_path / "model.py").write_text(
        textwrap.dedent("""\
            from apex import amp


            class Talk:
                def __init__(self, model, optimizer, opt_level=None):
                    self.model, self.optimizer = model, optimizer
                    if opt_level:
                        self.model, self.optimizer = amp.initialize(
                            model, optimizer, opt_level=opt_level
                        )

                def update(self, x):
                    loss = self.model(x).sum()
                    with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                        scaled_loss.backward()
                    self.optimizer.step()
        """)
    )
    caller = "import sys\n\nfrom model import Talk\n\nTalk(None, None, opt_level=sys.argv[1])\n"
    cases = {
        "caller": {"train.py": 'from model import Talk\n\nTalk(None, None, opt_level="O2")  # x\n'},
        "script": {"train.py": caller, "run.sh": "python train.py --opt_level O2\n"},
        "other program": {
            "tool.py": 'opt_level = "O3"\n',
            "run.sh": "python tool.py --opt_level O2\n",
        },
        "O1": {"train.py": caller, "run.sh": "python train.py --opt_level O1\n"},
    }
    found = {}
    for case, files in cases.items():
        for name, text in files.items():
            (tmp_path / name).write_text(text)
        [result] = run([tmp_path / "model.py"], replace(_settings(), apex_opt_level="O1"))
        [finding] = [d for d in result.diagnostics if d.code == "AMP303"]
        found[case] = finding.message
        for name in files:
            (tmp_path / name).unlink()
    assert 'elsewhere: `Talk(None, None, opt_level="O2")` (train.py:3)' in found["caller"]
    assert "elsewhere: `python train.py --opt_level O2` (run.sh:1)" in found["script"]
    assert "can be rewritten" in found["other program"]  # neither imports the other
    assert "can be rewritten" in found["O1"]  # nothing contradicts the setting


FLAGGED = FIXTURES / "apex" / "flag_modules"
FLAG_FILES = ["engine/epochs.py", "engine/saving.py", "train.py"]


def test_functions_of_two_modules_told_by_a_flag_are_rewritten_with_their_script(tmp_path):
    """timm's shape: `use_amp = True` beside `initialize`, handed to an epoch function of one
    module that scales when it holds and to a checkpoint helper of another that saves apex's
    state. Both get the one GradScaler, in the same run, so neither is code that would still
    call apex; the unscale before the clip goes under the same test as the scaler's step.
    Exactly the fixture, then nothing more; each file alone refuses."""
    _rewritten_exactly(tmp_path, FLAGGED, FLAG_FILES)
    _each_alone_refuses(FLAGGED, FLAG_FILES, tmp_path / "alone")


@pytest.mark.torch
def test_migrated_flagged_epoch_function_trains_like_the_original(tmp_path, stub):
    """The O0 stand-in against the migrated pair, with and without `--amp`; with "cuda" ->
    "cpu" the forward runs in float16 under `--amp` and the clip sees unscaled gradients (the
    losses track the float32 run's)."""
    runs = [(FLAG_FILES[2], []), (FLAG_FILES[2], ["--amp"])]
    results = _runs_beside_original(tmp_path, stub, FLAGGED, runs)
    assert "saved 3 entries" in results[3][1]  # apex's state, then the GradScaler's
    assert "forward dtypes: ['torch.float32']" in results[2][1]
    assert "forward dtypes: ['torch.float16']" in results[5][1]
    _tracks(_losses(results[5][1]), _losses(results[3][1]))


SHARED = FIXTURES / "apex" / "shared_state"
SHARED_FILES = ["retrieval/utils/model_setup.py", "train_encoder.py", "train_reader.py"]


def test_a_second_script_that_calls_only_the_epoch_function_joins_the_component(tmp_path):
    """A second script calls the epoch function but not the checkpoint helper: the three
    modules and both scripts are one component, each script passing the GradScaler to what
    it calls; a use of the helper that passes nothing keeps them all refused."""
    root = tmp_path / "project"
    shutil.copytree(FLAGGED / "before", root)
    second = (
        (root / "train.py")
        .read_text()
        .replace('        save_checkpoint(model, optimizer, "last.pt", use_amp=use_amp)\n', "")
    )
    (root / "finetune.py").write_text(second)
    results = run(_files(root), _settings(fix=True))
    assert {Path(r.path).name for r in results if r.changed} == {
        "epochs.py",
        "saving.py",
        "train.py",
        "finetune.py",
    }
    [tuned] = [r for r in results if r.path.endswith("finetune.py")]
    assert "use_amp=use_amp, scaler=scaler)" in tuned.new_source.decode()
    assert "save_checkpoint(" not in tuned.new_source.decode()
    (root / "export.py").write_text(
        "from engine.saving import save_checkpoint\n\nsave_checkpoint(None, None, 'x.pt')\n"
    )
    shutil.rmtree(root / "engine")
    shutil.copytree(FLAGGED / "before" / "engine", root / "engine")
    (root / "train.py").write_text((FLAGGED / "before" / "train.py").read_text())
    (root / "finetune.py").write_text(second)
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    messages = _amp303(results)
    assert "`save_checkpoint` is also used at export.py:3" in messages["train.py"].message


def test_a_setup_function_and_the_trainers_that_import_it_are_rewritten_together(tmp_path):
    """DPR's shape: `setup_for_training` initializes amp and returns the pair; two trainers
    import it and scale the loss with what it returns. apex's loss scale was the process's:
    the GradScaler becomes the setup module's state, made where `initialize` was, and the
    trainers read it as `retrieval.utils.model_setup.scaler`. Exactly the fixture, then
    nothing more; each file alone refuses."""
    _rewritten_exactly(tmp_path, SHARED, sorted(SHARED_FILES))
    _each_alone_refuses(SHARED, SHARED_FILES, tmp_path / "alone")


def test_a_user_of_the_setup_function_that_scales_nothing_keeps_the_component(tmp_path):
    """An evaluation script that calls the setup function and scales no loss ran its forwards
    under apex's casts; nothing there would replace them, so no file changes, and each says
    which use keeps them."""
    root = tmp_path / "project"
    shutil.copytree(SHARED / "before", root)
    (root / "evaluate.py").write_text(
        "import torch\n\nfrom retrieval.utils.model_setup import setup_for_training\n\n"
        "model, _ = setup_for_training(torch.nn.Linear(8, 1), None, 'cpu', fp16=True)\n"
        "print(model(torch.randn(2, 8)))\n"
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    messages = _amp303(results)
    assert set(messages) == {"model_setup.py", "train_encoder.py", "train_reader.py"}
    for finding in messages.values():
        assert "`setup_for_training` is also used at evaluate.py:5, where the rewrite does not" in (
            finding.message
        )


@pytest.mark.torch
def test_migrated_shared_setup_trains_like_the_original(tmp_path, stub):
    """The O0 stand-in for apex against the migrated trainers: the same losses with and
    without `--fp16` (and with accumulation); with "cuda" -> "cpu" the forwards run in float16
    under `--fp16` and in float32 without, through the setup module's GradScaler."""
    runs = [
        ("train_encoder.py", []),
        ("train_encoder.py", ["--fp16"]),
        ("train_encoder.py", ["--fp16", "--accumulation", "2"]),
        ("train_reader.py", ["--fp16"]),
    ]
    results = _runs_beside_original(tmp_path, stub, SHARED, runs)
    assert "forward dtypes: ['torch.float32']" in results[2][1]
    for at in (5, 8, 11):
        assert "forward dtypes: ['torch.float16']" in results[at][1], results[at]
    _tracks(_losses(results[5][1]), _losses(results[3][1]))


TRAINER_BASE = """\
import torch

try:
    from apex import amp
except ImportError:
    amp = None


class Trainer:
    def __init__(self, fp16):
        self.fp16 = fp16
        self.network = torch.nn.Linear(4, 1)
        self.optimizer = torch.optim.SGD(self.network.parameters(), lr=0.1)

    def maybe_init_amp(self):
        if self.fp16:
            net, opt = self.network, self.optimizer
            self.network, self.optimizer = amp.initialize(net, opt, opt_level="O1")

    def run_iteration(self, x):
        self.optimizer.zero_grad()
        loss = self.network(x).sum()
        if self.fp16:
            with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        self.optimizer.step()

    def run_training(self, batches):
        self.maybe_init_amp()
        for x in batches:
            self.run_iteration(x)
"""

TRAINER_MIDDLE = """\
from trainers.base import Trainer


class Middle(Trainer):
    pass
"""

TRAINER_VARIANT = """\
import torch
from apex import amp

from trainers.middle import Middle


class ClippedTrainer(Middle):
    def run_iteration(self, x):
        self.optimizer.zero_grad()
        loss = self.network(x).sum()
        with amp.scale_loss(loss, self.optimizer) as scaled_loss:
            scaled_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.network.parameters(), 12)
        self.optimizer.step()
"""


def test_a_base_trainer_is_not_rewritten_apart_from_a_subclass_that_scales(tmp_path):
    """nnU-Net's family (the twenty-fifth review): the base class initializes amp, a class
    derived from it in another module (here through a middle class) scales in its own
    `run_iteration`. That module imports the middle one, which imports the base: no import of
    the base reaches it, nor does the base's name appear in it. The base alone was rewritten,
    and the variant's `amp.scale_loss` then ran on apex never initialized. It is refused now,
    naming the variant; without the variant's apex use it is rewritten."""
    package = tmp_path / "trainers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text(TRAINER_BASE)
    (package / "middle.py").write_text(TRAINER_MIDDLE)
    (package / "variant.py").write_text(TRAINER_VARIANT)
    [finding] = [d for d in check_source(TRAINER_BASE) if d.code == "AMP303"]
    assert finding.fix == "unsafe"  # alone, with no module on disk that derives from it
    results = run([package / "base.py"], _settings(fix=True))
    assert not results[0].changed
    message = _amp303(results)["base.py"].message
    assert (
        "classes derived from `Trainer` in other modules that call apex amp (`ClippedTrainer` "
        "in variant.py (line 7; `amp.scale_loss` at its line 11))"
    ) in message
    handle = TRAINER_VARIANT.replace(  # apex's module kept on the object, called through it
        "        loss = self.network(x).sum()\n",
        "        loss = self.network(x).sum()\n        self.amp = amp\n",
    ).replace("with amp.scale_loss", "with self.amp.scale_loss")
    (package / "variant.py").write_text(handle)
    results = run([package / "base.py"], _settings(fix=True))
    assert not results[0].changed
    assert "`ClippedTrainer` in variant.py" in _amp303(results)["base.py"].message
    (package / "variant.py").write_text(TRAINER_VARIANT.replace("from apex import amp\n", ""))
    [result] = run([package / "base.py"], _settings(fix=True))
    assert result.changed


def test_an_initialize_at_module_level_is_said_to_be_there(tmp_path):
    """keep_it_simple initializes at module level (in an `if use_apex:`) and a criterion class
    in another module scales: the refusal said `initialize` "is not a statement of its
    function's body", of a file where it is in no function at all."""
    (tmp_path / "crit.py").write_text(
        textwrap.dedent("""\
        from apex import amp


        class Criterion:
            def __init__(self, optimizer):
                self.optimizer = optimizer

            def __call__(self, loss):
                with amp.scale_loss(loss, self.optimizer) as scaled:
                    scaled.backward()
                self.optimizer.step()
    """)
    )
    (tmp_path / "train.py").write_text(
        textwrap.dedent("""\
        import torch
        from apex import amp

        import crit

        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        use_apex = True
        if use_apex:
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        criterion = crit.Criterion(optimizer)
        for step in range(3):
            criterion(model(torch.randn(8, 4)).pow(2).mean())
    """)
    )
    found = _amp303(run(_files(tmp_path), _settings()))
    message = found["train.py"].message
    assert "`amp.initialize` runs at module level, not in a function" in message
    assert "its function's body" not in message


PRETRAIN = """\
import sys

import torch
import utils

try:
    from apex import amp
except ImportError:
    amp = None


def run_epochs(model, optimizer, use_amp):
    for step in range(3):
        x, y = torch.randn(4, 8), torch.randn(4, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        if use_amp:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.6f}")
    utils.save_checkpoint("pretrained.pt", model, optimizer, use_amp)


def main(use_amp):
    torch.manual_seed(1)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if use_amp:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    run_epochs(model, optimizer, use_amp)


if __name__ == "__main__":
    main(sys.argv[1:] == ["--amp"])
"""


def test_two_scripts_share_a_checkpoint_module_one_through_its_own_training_function(
    tmp_path, stub
):
    """spai: two scripts initialize and save through one checkpoint module; the second calls
    `save_checkpoint` from the training function its initializing function calls, not from
    that function itself. The call was not seen, so the module and the first script were
    refused ("also used at ..., which would not pass the GradScaler") and the second refused
    for the module: all three are one component now. Run: the migrated second script prints
    what the original prints against the O0 stand-in, and in float16 on CPU its checkpoint
    holds the scaler's state."""
    pytest.importorskip("torch")
    root = tmp_path / "project"
    shutil.copytree(SIBLING, root)
    (root / "pretrain.py").write_text(PRETRAIN)
    results = run(_files(root), _settings(fix=True))
    changed = {Path(r.path).name: r.new_source.decode() for r in results if r.changed}
    assert set(changed) == {"train.py", "utils.py", "pretrain.py"}, [
        d.message for r in results for d in r.diagnostics if d.code == "AMP303"
    ]
    assert "def run_epochs(model, optimizer, use_amp, scaler):" in changed["pretrain.py"]
    assert (
        'utils.save_checkpoint("pretrained.pt", model, optimizer, use_amp, scaler=scaler)'
        in changed["pretrain.py"]
    )
    for name, data in changed.items():
        (root / name).write_text(data)
    again = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in again) and not [d for r in again for d in r.fixed]
    before = tmp_path / "before"
    shutil.copytree(SIBLING, before)
    (before / "pretrain.py").write_text(PRETRAIN)
    shutil.copytree(stub / "apex", before / "apex")
    cpu = tmp_path / "cpu"
    shutil.copytree(root, cpu)
    for path in _files(cpu):
        path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    original, migrated, fp16 = _runs(
        [(before / "pretrain.py", ["--amp"], before, False),
         (root / "pretrain.py", ["--amp"], root, False),
         (cpu / "pretrain.py", ["--amp"], cpu, True)],
        tmp_path,
    )  # fmt: skip
    for code, _, error in (original, migrated, fp16):
        assert code == 0, error
    assert "step 2: loss" in original[1] and migrated[1] == original[1]
    saved = torch_load(tmp_path / "pretrained.pt")
    assert set(saved) == {"model", "optimizer", "scaler"} and saved["scaler"]["scale"] > 1.0


_TIMM_SCRIPT = """\
import torch
from helpers import ApexScaler, NativeScaler

try:
    from apex import amp
except ImportError:
    amp = None

PROBE = getattr(torch, "autocast", None)


def main(use_amp, model, optimizer, loader):
    loss_scaler = None
    if use_amp == "apex":
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        loss_scaler = ApexScaler()
    elif use_amp == "native":
        loss_scaler = NativeScaler()
    for x in loader:
        with torch.autocast("cuda", enabled=use_amp is not None):
            loss = model(x).sum()
        loss_scaler(loss, optimizer)
"""

_TIMM_HELPERS = """\
import torch

try:
    from apex import amp
except ImportError:
    amp = None


class ApexScaler:
    def __call__(self, loss, optimizer):
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()


class NativeScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer):
        self._scaler.scale(loss).backward()
        self._scaler.step(optimizer)
        self._scaler.update()
"""


def test_apex_beside_native_leaves_a_helper_only_its_apex_branch_used(tmp_path):
    """timm's shape with its `utils/cuda.py` copied into the project: the script's apex branch
    makes an `ApexScaler` whose `__call__` scales with apex; the native branch takes its place,
    so that class is no longer the script's (it keeps its own finding). Was refused: the
    helper module "relies on the amp state this file sets up". A literal `getattr` probe
    reaches no other name; one by a computed name may reach the helper, which keeps it."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "train.py").write_text(_TIMM_SCRIPT)
    (root / "helpers.py").write_text(_TIMM_HELPERS)
    results = run(_files(root), _settings(fix=True))
    changed = {Path(r.path).name: r for r in results if r.changed}
    assert sorted(changed) == ["train.py"]
    new = changed["train.py"].new_source.decode()
    assert 'if use_amp in ("apex", "native"):\n        loss_scaler = NativeScaler()\n' in new
    assert "amp.initialize" not in new and "ApexScaler()" not in new
    found = _amp303(results)
    assert (
        "helpers.py calls `amp.scale_loss` at its line 11 in code that only the apex branch "
        "reached: the rewrite no longer uses it, and it keeps its own finding"
    ) in found["train.py"].message
    assert found["helpers.py"].fix is None
    computed = _TIMM_SCRIPT.replace('getattr(torch, "autocast", None)', "getattr(torch, NAME)")
    (root / "train.py").write_text(computed)
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["train.py"].message
    assert "helpers.py (imported by train.py at line 2) calls `amp.scale_loss`" in message


@pytest.mark.parametrize(
    ("probe", "tied"),
    [
        ("vars(ARGS)", False),  # a lookup on an object reaches no module's names
        ('getattr(ARGS, "x" + "y", None)', False),
        ("vars(torch)", True),  # on a module: may reach what it took (conservative)
        ("vars()", True),
        ("getattr(torch, NAME, None)", True),
        # a module kept in a name (the 49th review): a lookup on it reaches the helper's names
        ('MOD = importlib.import_module("helpers")\nX = getattr(MOD, NAME, None)', True),
        ('MOD = sys.modules["helpers"]\nX = vars(MOD)', True),
        # through an alias of import_module, or a dict (the 50th review)
        ('None\nfrom importlib import import_module as im\nMOD = im("helpers")\nX = vars(MOD)',
         True),
        ('MODS = {"h": importlib.import_module("helpers")}\nMOD = MODS["h"]\nX = vars(MOD)', True),
        # what else loads or holds a module (the 52nd review)
        ('None\nMOD = sys.modules.get("helpers")\nX = vars(MOD)', True),
        ('None\nMOD = importlib.util.module_from_spec(SPEC)\nX = vars(MOD)', True),
        ('None\nMOD = importlib.import_module("helpers") if sys.argv else None\nX = vars(MOD)',
         True),
        # an object a module builds is no module (the 51st review)
        ('None\ncfgmod = importlib.import_module("json")\nconf = cfgmod.JSONDecoder()\n'
         "X = vars(conf)", False),
        # `sys.argv` is no module: a Namespace built from it is an object
        ("ARGS2 = type('A', (), {})() if sys.argv else None\nX = vars(ARGS2)", False),
    ],
)  # fmt: skip
def test_a_lookup_on_an_object_does_not_tie_the_helper(tmp_path, probe, tied):
    """metaformer's timm-style `train.py` (the 47th review) calls
    `resolve_data_config(vars(args), ...)`: `vars` was taken for a lookup that may reach the
    helper's `ApexScaler`, and the script was refused as relying on the helper's amp state.
    `vars`/`getattr` of an object no import binds reaches no module's names."""
    root = tmp_path / "project"
    root.mkdir()
    script = _TIMM_SCRIPT.replace(
        'PROBE = getattr(torch, "autocast", None)',
        f'ARGS = type("Args", (), {{}})()\nNAME = "autocast"\nPROBE = {probe}',
    )
    (root / "train.py").write_text(script)
    (root / "helpers.py").write_text(_TIMM_HELPERS)
    results = run(_files(root), _settings(fix=True))
    changed = sorted(Path(r.path).name for r in results if r.changed)
    assert changed == ([] if tied else ["train.py"])
    message = _amp303(results)["train.py"].message
    assert ("helpers.py (imported by train.py at line 2) calls" in message) == tied


_BONITO_TRAINING = """\
import torch

try:
    from apex import amp
except ImportError:
    pass


def load_state(model, optimizer, use_amp=False):
    if use_amp:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    return 0


def train(model, batches, optimizer, use_amp=False):
    for x in batches:
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        if use_amp:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
"""

_BONITO_TRAIN = """\
from training import load_state, train


def main(model, optimizer, batches, use_amp):
    load_state(model, optimizer, use_amp=use_amp)
    train(model, batches, optimizer, use_amp=use_amp)
"""

_BONITO_TUNE = """\
from apex import amp

from training import train


def objective(model, optimizer, batches):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    train(model, batches, optimizer, use_amp=True)
"""


def test_a_module_scaler_is_not_made_for_an_importer_that_initializes_apex_itself(tmp_path):
    """bonito, one edit away from its original (the 32nd review's wrong rewrite): `training.py`
    initializes in `load_state`, which its `train` does not run under, so its GradScaler
    becomes module state, made (enabled) by `load_state`; `cli/tune.py` initializes apex
    itself and calls `train` without `load_state`: rewritten alone, `training.py` would hand
    it a disabled GradScaler (float16 without loss scaling). Refused, naming the importer;
    without it, rewritten."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "training.py").write_text(_BONITO_TRAINING)
    (root / "train.py").write_text(_BONITO_TRAIN)
    results = run(_files(root), _settings(fix=False))
    assert _amp303(results)["training.py"].fix is not None
    (root / "tune.py").write_text(_BONITO_TUNE)
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["training.py"].message
    assert (
        "tune.py initializes apex amp itself and calls `train` (tune.py:8), which would read "
        "this file's GradScaler, made (enabled) only by `load_state`"
    ) in message, message


def test_a_parameter_and_argument_added_before_a_closing_parenthesis_of_its_own_line(tmp_path):
    """HRFormer (the 33rd review): where the closing parenthesis of a `def` or a call sits on
    its own line, the added `scaler` went after it at column 0 and the old last item kept a
    trailing space (`path, \\nscaler):`). The new item joins the last line of the others."""
    (tmp_path / "ckpt.py").write_text(
        textwrap.dedent("""\
        import torch
        from apex import amp


        def save(
            model, opt, path
        ):
            torch.save({"m": model.state_dict(), "amp": amp.state_dict()}, path)
    """)
    )
    (tmp_path / "train.py").write_text(
        textwrap.dedent("""\
        import torch
        from apex import amp
        from ckpt import save


        def main():
            model = torch.nn.Linear(2, 2).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model, opt = amp.initialize(model, opt, opt_level="O1")
            loss = model(torch.randn(4, 2, device="cuda")).sum()
            with amp.scale_loss(loss, opt) as scaled:
                scaled.backward()
            opt.step()
            save(
                model, opt, "x.pt"
            )
    """)
    )
    results = {Path(r.path).name: r for r in run(_files(tmp_path), _settings(fix=True))}
    assert all(r.changed for r in results.values())
    ckpt, train = (results[n].new_source.decode() for n in ("ckpt.py", "train.py"))
    assert "def save(\n    model, opt, path, scaler\n):\n" in ckpt, ckpt
    assert '    save(\n        model, opt, "x.pt", scaler=scaler\n    )\n' in train, train


def test_a_library_checkpoint_helper_gets_no_hedge(tmp_path):
    """Xpersona (the 33rd review): `from ignite.handlers import ModelCheckpoint` was told "is in
    another module: if it saves or loads apex amp state, give it a `scaler` parameter", advice
    about a library's class that no project change can follow; a project helper keeps it."""
    (tmp_path / "train.py").write_text(
        TRAIN_WITH_LAYERS.replace(
            "from layers import Pool\n", "from ignite.handlers import ModelCheckpoint\n"
        )
        .replace("Pool()", "torch.nn.Flatten()")
        .replace("    opt.step()\n", "    opt.step()\n    ModelCheckpoint('ckpt', 'net')\n")
    )
    results = run([tmp_path / "train.py"], _settings(fix=True))
    [done] = [d for r in results for d in r.fixed if d.code == "AMP303"]
    assert "ModelCheckpoint" not in done.message, done.message


def test_a_helper_package_named_like_a_torch_attribute_is_no_clash(tmp_path):
    """CuLE (the 34th review): the script reads the GradScaler as `utils.setup.scaler`, and
    `nn.utils.clip_grad_norm_` (an attribute named `utils`, which binds nothing) was called a
    use of the name `utils`: refused, and the component with it. A real binding still
    refuses."""
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("")
    (tmp_path / "utils" / "setup.py").write_text(
        textwrap.dedent("""\
        import torch
        from apex import amp


        def make(model, lr):
            opt = torch.optim.SGD(model.parameters(), lr=lr)
            model, opt = amp.initialize(model, opt, opt_level="O1")
            return model, opt
    """)
    )
    script = textwrap.dedent("""\
        import torch
        import torch.nn as nn
        from apex import amp
        from utils.setup import make


        def main(x):
            model, opt = make(nn.Linear(4, 2).cuda(), 0.1)
            loss = model(x).float().pow(2).mean()
            with amp.scale_loss(loss, opt) as scaled:
                scaled.backward()
            nn.utils.clip_grad_norm_(amp.master_params(opt), 1.0)
            opt.step()
    """)
    (tmp_path / "train.py").write_text(script)
    results = run(_files(tmp_path), _settings(fix=True))
    assert sorted(Path(r.path).name for r in results if r.changed) == ["setup.py", "train.py"]
    (tmp_path / "train.py").write_text(script + "\n\nutils = None\n")
    message = _amp303(run(_files(tmp_path), _settings())).get("train.py").message
    assert "but `utils` is in use here" in message


def test_a_closure_returned_by_a_factory_in_another_module_gets_true_advice(tmp_path):
    """LinearityIQA (the 34th review): ignite's trainer factory returns a closure `update(engine,
    batch)` that scales; the script initializes and calls the factory. The closure was told to
    take a `scaler` parameter (ignite fixes its signature), and the script to "migrate the two
    together", which the run already did: the factory takes the parameter the closure reads,
    and the script's message says why the two files of one run are not linked."""
    (tmp_path / "engine.py").write_text(
        textwrap.dedent("""\
        from apex import amp


        def make_trainer(model, optimizer, loss_fn):
            def update(engine, batch):
                loss = loss_fn(model(batch[0]), batch[1])
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
            return update
    """)
    )
    (tmp_path / "train.py").write_text(
        textwrap.dedent("""\
        import torch
        from apex import amp
        from engine import make_trainer


        def main(model, loss_fn):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            return make_trainer(model, optimizer, loss_fn)
    """)
    )
    found = _amp303(run(_files(tmp_path), _settings()))
    assert (
        "give `make_trainer`, which defines `update`, a `scaler` parameter that `update` reads "
        "as a free variable"
    ) in found["engine.py"].message
    assert "not through a closure that function returns" in found["train.py"].message


PLAIN_CAST = {
    "loss.py": """\
import torch
from apex import amp


@amp.float_function
def pair_loss(feat, labels):
    return ((feat - labels) ** 2).mean()
""",
    "train.py": """\
import torch
from apex import amp
from loss import pair_loss

torch.manual_seed(0)
model = torch.nn.Linear(4, 1).to("cuda")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
for step in range(3):
    x, y = torch.randn(8, 4, device="cuda"), torch.randn(8, 1, device="cuda")
    loss = pair_loss(model(x), y)
    optimizer.zero_grad()
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.3f} {loss.dtype}")
""",
}


def test_a_plain_function_cast_by_apex_keeps_custom_fwd_only_where_every_call_fits(tmp_path):
    """person-reid (the 38th review): `@amp.float_function` on a plain loss function became
    `torch.amp.custom_fwd`, which sets attributes on the first positional argument: called
    by keyword (IndexError) or with a number first (AttributeError) it raised where apex
    called it. Such a call in the run keeps both files on apex, saying why; with an object
    first the rewrite stands, its note says so, and it runs on CPU (float32 loss from a
    float16 forward)."""
    root = tmp_path / "project"
    root.mkdir()
    for name, text in PLAIN_CAST.items():
        (root / name).write_text(text)
    results = run(_files(root), _settings(fix=True))
    assert sorted(Path(r.path).name for r in results if r.changed) == ["loss.py", "train.py"]
    found = _amp303(results)
    assert "`pair_loss` is a plain function" in found["loss.py"].message
    for result in results:
        Path(result.path).write_bytes(result.new_source)
    for path in _files(root):
        path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    [(code, out, error)] = _runs([(root / "train.py", [], None, False)], root)
    assert code == 0, error
    assert out.count("torch.float32") == 3, out
    for call, how in (
        ("pair_loss(feat=model(x), labels=y)", "no positional argument"),
        ("pair_loss(0.5, y) + pair_loss(model(x), y)", "the constant `0.5` first"),
    ):
        bad = tmp_path / how.split()[1]
        bad.mkdir()
        for name, text in PLAIN_CAST.items():
            (bad / name).write_text(text.replace("pair_loss(model(x), y)", call))
        results = run(_files(bad), _settings(fix=True))
        assert not any(r.changed for r in results)
        found = _amp303(results)
        assert f"train.py:11 calls it with {how}" in found["loss.py"].message
        assert found["train.py"].fix is None


DERIVED_FORWARD = {
    "pkg/__init__.py": "",
    "pkg/base.py": """\
import torch


class Trainer:
    def __init__(self, model, optimizer, mixed_precision=False):
        self.model, self.optimizer = model, optimizer
        self.mixed_precision = mixed_precision
        if self.mixed_precision:
            from apex import amp
            self.model, self.optimizer = amp.initialize(self.model, self.optimizer, opt_level="O1")

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(x), y) + self.penalty(x)
        if self.mixed_precision:
            from apex import amp
            with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        self.optimizer.step()

    def penalty(self, x):
        return 0.0
""",
    "pkg/derived.py": """\
import torch
from .base import Trainer


class PlainStepTrainer(Trainer):
    def penalty(self, x):
        return self.model(x).abs().mean()

    def plain_step(self, x, y):
        self.optimizer.zero_grad()
        torch.nn.functional.mse_loss(self.model(x), y).backward()
        self.optimizer.step()
""",
}


def test_a_derived_class_in_another_module_running_the_model_is_noted(tmp_path):
    """elektronn3 (the 38th review): the base class initializes and scales; a class derived
    from it in another module runs `self.model` in a method of its own (`plain_step`), whose
    forward apex O1 cast and which runs in float32 now: the note names it. An override the
    base itself calls (`penalty`, inside its region) is not named."""
    for name, text in DERIVED_FORWARD.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    results = run(_files(tmp_path), _settings())
    message = _amp303(results)["base.py"].message
    assert (
        "the initialized model's forward in `PlainStepTrainer.plain_step` (derived.py:11), a "
        "method of a class derived from `Trainer` in another module"
    ) in message
    assert "penalty" not in message


def test_a_file_python_parses_and_libcst_does_not_is_refused_with_the_line(tmp_path):
    """s3prl's solvers (the 38th review): a line indented with spaces then a tab compiles,
    but libcst's parser rejects it; the run stopped with "internal error (ParserSyntaxError @
    1:1)" and the file's apex calls had no AMP303 at all. Now the refusal names the line and
    what to do, and the file is left as it is."""
    path = tmp_path / "solver.py"
    path.write_text(
        "from apex import amp\n\n\n"
        "def f(model, x, opt, use_amp):\n"
        "    if use_amp:\n"
        '        model, opt = amp.initialize(model, opt, opt_level="O1")\n'
        "    loss = model(x).sum()\n"
        "    if use_amp:\n"
        "        with amp.scale_loss(loss, opt) as s:\n"
        "    \t    s.backward()\n"
        "    else:\n"
        "        loss.backward()\n"
        "    opt.step()\n"
    )
    compile(path.read_text(), str(path), "exec")  # (Python takes it)
    [result] = run([path], _settings(fix=True))
    assert result.error is None and not result.changed
    message = _amp303([result])["solver.py"].message
    assert "line 10 is indented with both spaces and a tab" in message
    assert "`expand -i -t 8`" in message


def test_a_scale_through_an_old_api_handle_kept_in_another_module_is_reported(tmp_path):
    """SR-Stereo (the 38th review): the base class keeps `self.amp_handle = amp.init(half)`
    (apex's pre-2019 API); four derived modules scale through `self.amp_handle.scale_loss`
    and import nothing of apex. They had no finding at all: a user who followed the base's
    finding and removed apex left them calling an attribute that no longer exists."""
    (tmp_path / "base.py").write_text(
        "from apex import amp\n\n\nclass Base:\n    def __init__(self, half=False):\n"
        "        self.amp_handle = amp.init(half)\n"
    )
    (tmp_path / "derived.py").write_text(
        "from base import Base\n\n\nclass Derived(Base):\n    def train(self, loss, opt):\n"
        "        with self.amp_handle.scale_loss(loss, opt) as scaled:\n"
        "            scaled.backward()\n"
    )
    found = _amp303(run(_files(tmp_path), _settings()))
    assert "the handle the pre-2019 `amp.init()` returns" in found["derived.py"].message
    assert found["derived.py"].fix is None


BCE_ELSEWHERE = {
    "losses.py": """\
import torch


class Part(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bce = torch.nn.BCELoss(reduction="none")

    def forward(self, pred, target):
        return self.bce(pred, target).mean()


class FocalBCE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.part = Part()

    def forward(self, pred, target):
        return self.part(pred, target) * 2
""",
    "train.py": """\
import torch
from apex import amp
from losses import FocalBCE


def criterion(out, y, loss):
    return loss(out, y)


def train(model, optimizer, batches, center):
    for x, y in batches:
        out = torch.sigmoid(model(x))
        loss = criterion(out, y, center)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()


def main(batches):
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    center = FocalBCE().cuda()
    train(model, optimizer, batches, center)
""",
}


@pytest.mark.parametrize("called", ["handed", "direct"])
def test_binary_cross_entropy_in_another_module_keeps_the_region_off_it(tmp_path, called):
    """CSP (the 39th review): the region covered `criterion(outputs, ..., center, ...)`, and
    `center` is a loss class of another module whose part builds `nn.BCELoss`, which CUDA
    autocast refuses whatever the dtype: every training step on a GPU would raise (CPU
    autocast allows it, so no CPU run shows it). Refused, naming the class and line, whether
    the object is handed to a function the region calls or called there itself; with
    `BCEWithLogitsLoss` the rewrite stands."""
    files = dict(BCE_ELSEWHERE)
    if called == "direct":
        files["train.py"] = files["train.py"].replace("criterion(out, y, center)", "center(out, y)")
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = _amp303(run(_files(tmp_path), _settings()))
    message = found["train.py"].message
    assert found["train.py"].fix is None
    assert "`Part` (losses.py:7) calls binary cross entropy" in message, message
    (tmp_path / "losses.py").write_text(
        files["losses.py"].replace("torch.nn.BCELoss(", "torch.nn.BCEWithLogitsLoss(")
    )
    assert _amp303(run(_files(tmp_path), _settings()))["train.py"].fix is not None


def test_a_hook_flag_set_in_a_tuple_assignment_of_init_is_its_switch(tmp_path):
    """PointRCNN's trainer (the 39th review): `self.model, self.optimizer, self.use_amp =
    model, optimizer, use_amp` sets the flag in `__init__` as surely as three assignments;
    "`self.use_amp` is not set in `__init__` alone" was false. The component is rewritten as
    with separate assignments."""
    root = tmp_path / "project"
    shutil.copytree(HOOKED / "before", root)
    hook = root / HOOK_FILES[1]
    old = (
        "        self.grad_clip = grad_clip\n"
        "        self.update_interval = update_interval\n"
        "        self.use_fp16 = use_fp16\n"
    )
    assert old in hook.read_text()
    hook.write_text(
        hook.read_text().replace(
            old,
            "        self.grad_clip, self.update_interval, self.use_fp16 = (\n"
            "            grad_clip, update_interval, use_fp16\n"
            "        )\n",
        )
    )
    results = run(_files(root), _settings(fix=True))
    assert sorted(Path(r.path).name for r in results if r.changed) == [
        "optimizer_hook.py",
        "train.py",
    ]


def test_a_scale_through_apex_handed_to_a_constructor_is_reported_in_its_module(tmp_path):
    """rtm3d's solver (the 40th review): the caller hands apex's amp module to `Solver(...,
    apex=amp)`, kept as `self.apex`, through which the class initializes and scales; the
    solver's module imports nothing of apex and had no finding ("All checks passed")."""
    (tmp_path / "solver.py").write_text(
        "class Solver:\n    def __init__(self, model, opt, apex=None):\n"
        "        self.apex = apex\n"
        "        model, opt = self.apex.initialize(model, opt, opt_level='O1')\n"
        "        self.model, self.opt = model, opt\n\n"
        "    def step(self, loss):\n"
        "        with self.apex.scale_loss(loss, self.opt) as scaled:\n"
        "            scaled.backward()\n"
    )
    (tmp_path / "train.py").write_text(
        "from apex import amp\nfrom solver import Solver\n\nsolver = Solver(1, 2, apex=amp)\n"
    )
    found = _amp303(run(_files(tmp_path), _settings()))
    assert "calls apex amp's `scale_loss` through `self.apex`" in found["solver.py"].message
    assert "`amp` is passed to `Solver(...)`" in found["train.py"].message


def test_a_cast_helper_in_a_form_the_rewrite_does_not_take_says_so(tmp_path):
    """NVlabs/STEP (the 40th review): its layers alias `float_function = amp.float_function`
    in a `try:` whose `except ImportError:` defines a fallback; the training script's refusal
    said "`amp.float_function` has no O1 rewrite", which is false (the direct forms move with
    the script). It names the forms the rewrite takes."""
    (tmp_path / "layers.py").write_text(
        "import torch\n\ntry:\n    from apex import amp\n"
        "    float_function = amp.float_function\nexcept ImportError:\n"
        "    def float_function(f):\n        return f\n\n\nnms = float_function(torch.sigmoid)\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch\nfrom apex import amp\nimport layers\n\n\n"
        "def train(model, optimizer, x):\n"
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "    loss = layers.nms(model(x)).sum()\n"
        "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
        "        scaled_loss.backward()\n"
        "    optimizer.step()\n"
    )
    message = _amp303(run(_files(tmp_path), _settings()))["train.py"].message
    assert "has no O1 rewrite" not in message
    assert "its `amp.float_function` is not in a form the rewrite takes with this file" in message


def test_a_layer_cast_held_back_by_another_blocker_is_not_said_to_have_no_rewrite(tmp_path):
    """The 42nd review (DeepLearningExamples' Jasper, from the parent of its authors' own
    migration): a training script refused for another reason (a checkpoint object in another
    module) listed its feature module's `with amp.disable_casts():` as a blocker of its own,
    "has no O1 rewrite ... replace it first", though the run writes that form with the
    script. The true blocker alone is said; without it the three files are rewritten."""
    (tmp_path / "feats.py").write_text(
        "import torch\nfrom apex import amp\n\n\n"
        "def feat(x):\n    with amp.disable_casts():\n        return torch.fft.rfft(x).abs()\n"
    )
    (tmp_path / "helpers.py").write_text(
        "import torch\nfrom apex import amp\n\n\nclass Checkpointer:\n"
        "    def save(self, model):\n"
        '        torch.save({"model": model.state_dict(), "amp": amp.state_dict()}, "x.pt")\n'
    )
    train = (
        "import torch\nfrom apex import amp\nfrom feats import feat\n"
        "from helpers import Checkpointer\n\n\n"
        "def main(model, opt, data):\n"
        '    model, opt = amp.initialize(model, opt, opt_level="O1")\n'
        "    ck = Checkpointer()\n"
        "    for x in data:\n"
        "        loss = model(feat(x)).mean()\n"
        "        with amp.scale_loss(loss, opt) as scaled:\n"
        "            scaled.backward()\n"
        "        opt.step()\n"
        "    ck.save(model)\n"
    )
    (tmp_path / "train.py").write_text(train)
    results = run(_files(tmp_path), _settings(fix=True))
    message = _amp303(results)["train.py"].message
    assert "helpers.py (imported by train.py at line 4) calls `amp.state_dict`" in message
    assert "has no O1 rewrite" not in message and "disable_casts" not in message
    assert not any(r.changed for r in results)
    (tmp_path / "train.py").write_text(
        train.replace("from helpers import Checkpointer\n", "")
        .replace("    ck = Checkpointer()\n", "")
        .replace("    ck.save(model)\n", "")
    )
    (tmp_path / "helpers.py").unlink()
    results = run(_files(tmp_path), _settings(fix=True))
    assert all(r.changed and b"apex" not in r.new_source for r in results)


_FAMILY_BASE = (
    "import torch\nfrom apex import amp\n\n\nclass Base:\n"
    "    def __init__(self, args, net):\n"
    "        self.args = args\n        self.net = net.cuda()\n"
    "        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)\n"
    "        if args.amp:\n"
    '            self.net, self.opt = amp.initialize(self.net, self.opt, opt_level="O1")\n'
)
_FAMILY_DERIVED = (
    "from apex import amp\nfrom pkg.base import Base\n\n\nclass Model(Base):\n"
    "    def __init__(self, args, net):\n        {up}\n        self.tag = 'x'\n\n"
    "    def train(self, x):\n        for _ in range(3):\n            self.opt.zero_grad()\n"
    "            loss = self.net(x).float().pow(2).mean()\n"
    "            if self.args.amp:\n"
    "                with amp.scale_loss(loss, self.opt) as scaled_loss:\n"
    "                    scaled_loss.backward()\n"
    "            else:\n                loss.backward()\n            self.opt.step()\n"
)


@pytest.mark.parametrize(
    ("up", "rewritten"),
    [
        ("super().__init__(args, net)", True),
        ("super(Model, self).__init__(args, net)", True),
        ("Base.__init__(self, args, net)", True),
        ("self.args = args", False),  # no call up: its objects would read no GradScaler
    ],
)
def test_a_derived_class_calling_up_in_either_spelling_keeps_the_family(tmp_path, up, rewritten):
    """The 42nd review (segmentationPytorch): `super(SegmentationModel, self).__init__(...)` was
    read as no call of the base `__init__` that makes the GradScaler, and the family of three
    modules was refused with that false reason; the explicit `Base.__init__(self, ...)` too."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "base.py").write_text(_FAMILY_BASE)
    (tmp_path / "pkg" / "a.py").write_text(_FAMILY_DERIVED.format(up=up))
    results = run(_files(tmp_path), _settings(fix=True))
    message = _amp303(results)["a.py"].message
    if rewritten:
        changed = {
            Path(r.path).name for r in results if r.changed and b"from apex" not in r.new_source
        }
        assert changed == {"a.py", "base.py"}, [(r.path, r.diagnostics) for r in results]
        assert "without calling" not in message
    else:
        assert not any(r.changed for r in results)
        assert "`Model.__init__` overrides the method that would make" in message


def test_super_of_type_self_calls_the_base_init(tmp_path):
    """The 43rd review: `super(type(self), self).__init__(...)` was said not to call the base
    `__init__` that makes the GradScaler (it does, for a direct subclass)."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "base.py").write_text(_FAMILY_BASE)
    up = "super(type(self), self).__init__(args, net)"
    (tmp_path / "pkg" / "a.py").write_text(_FAMILY_DERIVED.format(up=up))
    results = run(_files(tmp_path), _settings(fix=True))
    assert "without calling" not in _amp303(results)["a.py"].message


def test_a_script_that_initializes_twice_is_told_so_beside_its_training_module(tmp_path):
    """HPA's `main.py` (the 45th review): a k-fold branch and a single-run branch, each
    initializing and calling the training module's `train`. The refusal said the link works
    "only where this one calls the one function of that file that scales", which it does;
    the true limit is the two `initialize` calls."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "trainer.py").write_text(CARRIED["trainer.py"])
    (root / "main.py").write_text(
        "import torch\nfrom apex import amp\nfrom trainer import fit\n\n\n"
        "def main(model, optimizer, batches, folds):\n"
        "    if folds:\n"
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "        fit(batches, model, optimizer, 3, print)\n"
        "    else:\n"
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "        fit(batches, model, optimizer, 1, print)\n"
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["main.py"].message
    assert (
        "this file calls `amp.initialize` with an optimizer 2 times, and the rewrite links"
        in message
    )
    assert "only where this one calls" not in message


TRAINER_CLASS_FILES = {
    "trainer.py": """\
import torch
from apex import amp


class Trainer:
    def __init__(self, model, optimizer, data, fp16):
        self.model, self.optimizer, self.data, self.fp16 = model, optimizer, data, fp16

    def train(self):
        for x, y in self.data:
            loss = torch.nn.functional.mse_loss(self.model(x).float(), y)
            if self.fp16:
                with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                    scaled_loss.backward()
            else:
                loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()

    def save(self, path):
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        torch.save(state, path)
""",
    "main.py": """\
import torch
from apex import amp
from trainer import Trainer


def main(model, optimizer, data, fp16):
    if fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    Trainer(model, optimizer, data, fp16).train()
""",
}


def test_a_trainer_class_whose_checkpoint_never_held_apexs_scale_is_rewritten(tmp_path):
    """SMART (the 45th review): a Trainer class in another file scales and checkpoints the
    model and optimizer, never apex's scale; it was refused as "the rewrite would get AMP208",
    a gap apex had too (its resume restarted the scale). Rewritten, the gap stated."""
    root, _ = _fixed_beside_original(tmp_path, TRAINER_CLASS_FILES, ["main.py", "trainer.py"])
    assert "self.scaler.scale(loss).backward()" in (root / "trainer.py").read_text()
    results = run(_files(tmp_path / "original"), _settings())
    assert "apex never checkpointed its loss scale here" in _amp303(results)["trainer.py"].message


def test_apex_code_in_a_project_that_never_initializes_is_said_to_be_dead(tmp_path):
    """UnitedANT (the 45th review): a model's `update` scales with apex under a bare
    `except: pass`, and no file of the project initializes amp: apex raised there, so the
    fp16 path never ran. The finding says so, before the advice for a library whose users
    initialize outside the project (ignite's `supervised_training_step_apex`)."""
    (tmp_path / "model.py").write_text(
        "from apex import amp\n\n\nclass Model:\n    def update(self, loss, opt):\n"
        "        try:\n            with amp.scale_loss(loss, opt) as scaled:\n"
        "                scaled.backward()\n        except Exception:\n            pass\n"
    )
    (tmp_path / "main.py").write_text("from model import Model\n\nModel().update(None, None)\n")
    results = run(_files(tmp_path), _settings())
    message = _amp303(results)["model.py"].message
    assert "no file of the project initializes apex amp: unless code outside it does" in message
    assert "where outside code does: `update` uses `amp.scale_loss`" in message  # (ignite)
    (tmp_path / "main.py").write_text(
        "from apex import amp\nfrom model import Model\n\nm, o = amp.initialize(m, o)\n"
    )
    message = _amp303(run(_files(tmp_path), _settings()))["model.py"].message
    assert "no file of the project initializes" not in message


RELAYED = {
    "trainer.py": CARRIED["trainer.py"],
    "main.py": """\
import torch
from apex import amp
from trainer import fit


def run_training(model, optimizer, batches):
    fit(batches, model, optimizer, 3, print)


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    batches = [(torch.randn(8, 4, device="cuda") / 4, torch.randn(8, 1, device="cuda") / 4)
               for _ in range(3)]
    run_training(model, optimizer, batches)


if __name__ == "__main__":
    main()
""",
}


def test_the_initializing_function_relays_the_scaler_through_its_own_functions(tmp_path, stub):
    """IsotonicDataAugmentation (the 45th review): `main` initializes and calls its own
    `train_and_evaluate`, which calls the training module's function. Refused ("add a
    `scaler` argument there"), though the script's side is the same threading the training
    module's side does: the function of the script takes the scaler and passes it on."""
    root, original = _fixed_beside_original(tmp_path, RELAYED, ["main.py", "trainer.py"])
    main = (root / "main.py").read_text()
    assert "def run_training(model, optimizer, batches, scaler):" in main
    assert "    fit(batches, model, optimizer, 3, print, scaler=scaler)" in main
    assert "    run_training(model, optimizer, batches, scaler=scaler)" in main
    _on_cpu_beside_original(tmp_path, root, original, stub)


def test_a_relay_that_names_the_model_otherwise_keeps_the_link(tmp_path, stub):
    """The relay receives the model under a name of its own (IsotonicDataAugmentation's
    `train_and_evaluate(student_model, ...)`, whose parameter is `model`): the link read the
    relay's call with the initializing function's names and found no model there. Both files
    are rewritten and run beside the O0 original."""
    files = dict(RELAYED)
    files["main.py"] = (
        files["main.py"]
        .replace(
            "def run_training(model, optimizer, batches):\n    fit(batches, model, optimizer,",
            "def run_training(net, opt, batches):\n    fit(batches, net, opt,",
        )
        .replace("model", "student")
    )
    assert "def run_training(net, opt, batches):" in files["main.py"]
    root, original = _fixed_beside_original(tmp_path, files, ["main.py", "trainer.py"])
    main = (root / "main.py").read_text()
    assert "def run_training(net, opt, batches, scaler):" in main
    assert "    fit(batches, net, opt, 3, print, scaler=scaler)" in main
    _on_cpu_beside_original(tmp_path, root, original, stub)


def test_a_teachers_inference_initialize_beside_the_students_keeps_the_link(tmp_path, stub):
    """Knowledge distillation (IsotonicDataAugmentation's `kd_main.py`, the 45th review): the
    script initializes the teacher for inference and the student with its optimizer, then
    calls the training module. The link took only a script that calls `initialize` once;
    the teacher's call (no optimizer) only turned on O1's casts, which the student's does
    too: both files are rewritten and run."""
    files = dict(CARRIED)
    files["main.py"] = files["main.py"].replace(
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n',
        '    teacher = torch.nn.Linear(4, 1).to("cuda")\n'
        '    teacher = amp.initialize(teacher, opt_level="O1")\n'
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n',
    )
    root, original = _fixed_beside_original(tmp_path, files, ["main.py", "trainer.py"])
    assert (
        "fit(batches, model, optimizer, 3, print, scaler=scaler)" in (root / "main.py").read_text()
    )
    _on_cpu_beside_original(tmp_path, root, original, stub)


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        (  # a subclass choosing apex
            "apex_trainer.py",
            "from trainer import Trainer\n\n\nclass ApexTrainer(Trainer):\n"
            "    def __init__(self, *args):\n        super().__init__(*args)\n"
            "        self.use_apex = self.args.fp16\n",
            "apex_trainer.py sets `.use_apex` at its line 7",
        ),
        (  # a callback saving apex's state where apex is chosen
            "callbacks.py",
            "from apex import amp\n\n\ndef save(trainer, state):\n"
            "    if trainer.use_apex:\n        state['amp'] = amp.state_dict()\n",
            "callbacks.py reads `.use_apex` at its line 5",
        ),
    ],
)
def test_apex_chosen_through_flags_and_used_by_another_file_refuses_naming_it(
    tmp_path, name, text, said
):
    """The Trainer whose `__init__` chooses apex or native through `self.use_apex` is folded
    only where no other file of the project turns that flag on or reads it (the 46th
    review's probes: a callback's apex branch left dead and the project still needing apex):
    the other file is named, and nothing is written. A store of False there is no use."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(FIXTURES / "apex" / "backend_flags.py", root / "trainer.py")
    (root / name).write_text(text)
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["trainer.py"].message
    assert "(1 blocker)" in message and said in message
    (root / name).write_text("def reset(trainer):\n    trainer.use_apex = False\n")
    results = run(_files(root), _settings(fix=True))
    assert [Path(r.path).name for r in results if r.changed] == ["trainer.py"]


def test_a_subclass_of_an_installed_trainer_is_told_its_base_chooses_apex(tmp_path):
    """`class CLTrainer(transformers.Trainer)` copies the base's `train()` with its `if
    self.use_apex: amp.initialize(...)`; the base, installed, sets `use_apex` and scales the
    loss under it. "apex only casts here: delete `amp.initialize`" was false advice: the
    base class is named, and the way out is its native backend."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "trainers.py").write_text(
        textwrap.dedent("""\
            from apex import amp
            from transformers import Trainer


            class CLTrainer(Trainer):
                def train(self):
                    model = self.model
                    if self.use_apex:
                        model, self.optimizer = amp.initialize(model, self.optimizer)
                    for inputs in self.get_train_dataloader():
                        self.training_step(model, inputs)
                        self.optimizer.step()
            """)
    )
    results = run(_files(root), _settings(fix=True))
    message = _amp303(results)["trainers.py"].message
    assert "`CLTrainer` subclasses `transformers.Trainer`, which is not in the run" in message
    assert "`self.use_apex`, the test around `amp.initialize`, is never set" in message
    assert 'fp16_backend="amp"' in message and "apex only casts here" not in message
    (root / "transformers.py").write_text("class Trainer:\n    use_apex = False\n")
    results = run(_files(root), _settings(fix=True))
    assert "is not in the run" not in _amp303(results)["trainers.py"].message
    # `self.training` is nn.Module's mode, no backend a base class chooses (the 46th review)
    (root / "transformers.py").unlink()
    (root / "trainers.py").write_text(
        (root / "trainers.py").read_text().replace("self.use_apex", "self.training")
    )
    results = run(_files(root), _settings(fix=True))
    assert "is not in the run" not in _amp303(results)["trainers.py"].message


def test_a_parameter_added_to_a_laid_out_signature_keeps_its_layout_and_comments(tmp_path):
    """One parameter per line, each with a comment (Faster-ILOD's `do_train`, the 46th
    review): the comments shifted one parameter down when `scaler` was added. A last
    parameter with a default and the closing parenthesis on a line of its own gave
    `val_sets_dict=None, \\n*, scaler):` (OSHOT)."""
    body = (
        "    for x, y in data_loader:\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "        with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
        "            scaled_loss.backward()\n"
        "        optimizer.step()\n"
    )
    head = "import torch\nfrom apex import amp\n\n\n"
    signatures = {
        "ta.py": "def do_train(\n    model,  # the model\n    optimizer,  # the optimizer\n"
        "    data_loader,  # the data\n    arguments,  # extra parameters\n):\n",
        "tb.py": "def do_meta(model, optimizer, data_loader,\n            val_sets_dict=None\n):\n",
        "tc.py": "def do_kw(\n    model,  # the model\n    optimizer,  # the optimizer\n"
        "    data_loader=None,  # the data\n):\n",
    }
    files = {name: head + signature + body for name, signature in signatures.items()}
    files["train.py"] = (
        "import torch\nfrom apex import amp\nfrom ta import do_train\nfrom tb import do_meta\n"
        "from tc import do_kw\n\n\ndef main():\n    model = torch.nn.Linear(4, 1)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "    do_train(model, optimizer, [], {})\n    do_meta(model, optimizer, [])\n"
        "    do_kw(model, optimizer, [])\n"
    )
    root, _ = _fixed_beside_original(tmp_path, files, ["ta.py", "tb.py", "tc.py", "train.py"])
    assert (
        "    data_loader,  # the data\n    arguments,  # extra parameters\n    scaler,\n):\n"
        in (root / "ta.py").read_text()
    )
    assert "            val_sets_dict=None, *, scaler\n):\n" in (root / "tb.py").read_text()
    assert (
        "    data_loader=None,  # the data\n    *,\n    scaler,\n):\n"
        in (root / "tc.py").read_text()
    )


@pytest.mark.parametrize("imported", ["# (fp16 through NVIDIA apex)\n", "from apex import amp\n"])
def test_a_script_imported_for_a_class_does_not_join_its_apex_to_the_importer(tmp_path, imported):
    """DILBERT (the 46th review): `run_ae.py` takes a dataset class from a module that takes
    it from `run_lm_finetuning.py`, another script, whose `main` (behind its `if __name__ ==
    "__main__":` block, which does not run on import) calls the `train` that scales, with its
    apex import deleted or not. "relies on the amp state this file sets up ... migrate the two
    together" was false: only `run_ae.py` changes."""
    lm = (
        "import torch\n" + imported + "\n\nclass TextDataset:\n    pass\n\n\n"
        "def train(model, optimizer, loss):\n"
        "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
        "        scaled_loss.backward()\n    optimizer.step()\n\n\n"
        "def main():\n    train(None, None, None)\n\n\n"
        'if __name__ == "__main__":\n    main()\n'
    )
    files = {
        "lm.py": lm,
        "helper.py": "from lm import TextDataset\n",
        "run.py": (
            "import torch\nfrom apex import amp\nfrom helper import TextDataset\n\n\n"
            "def main():\n    model = torch.nn.Linear(4, 1)\n"
            "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
            "    loss = model(torch.randn(2, 4)).sum()\n"
            "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
            "        scaled_loss.backward()\n    optimizer.step()\n"
        ),
    }
    _fixed_beside_original(tmp_path, files, ["run.py"])


@pytest.mark.parametrize(
    ("signature", "expected"),
    [
        ("    model,\n    optimizer,\n    *data,\n", "    *data,\n    scaler,\n):\n"),
        ("    model,\n    optimizer,\n    data,\n    **kwargs,\n",
         "    data,\n    *,\n    scaler,\n    **kwargs,\n):\n"),
        ("    model,\n    optimizer,\n    data,\n    *,\n    verbose=False,\n",
         "    *,\n    verbose=False,\n    scaler,\n):\n"),
        ("    model,\n    optimizer,\n    /,\n    data,\n", "    /,\n    data,\n    scaler,\n):\n"),
    ],
)  # fmt: skip
def test_a_parameter_added_after_star_slash_or_keywords_keeps_one_per_line(
    tmp_path, signature, expected
):
    """The 46th review's layout probes: after `*data,`, before `**kwargs,`, after keyword-only
    parameters, after `/,`: `scaler` went to column 0 or several parameters onto one line."""
    files = {
        "trainer.py": "import torch\nfrom apex import amp\n\n\ndef train(\n" + signature + "):\n"
        "    for x, y in data:\n        loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "        with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
        "            scaled_loss.backward()\n        optimizer.step()\n",
        "main.py": "import torch\nfrom apex import amp\nfrom trainer import train\n\n\n"
        "def main():\n    model = torch.nn.Linear(4, 1)\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "    train(model, optimizer, [])\n",
    }
    root, _ = _fixed_beside_original(tmp_path, files, ["main.py", "trainer.py"])
    assert expected in (root / "trainer.py").read_text()


def test_a_module_kept_on_self_and_called_through_by_another_file_refuses_naming_it(tmp_path):
    """The trainer keeps apex's module as `self.amp` and initializes through it; an engine in
    another file scales through `t.amp` on the trainer it receives (the 46th review's second
    round): the trainer was rewritten and the engine refused, and the run raised
    AttributeError. The other file is named and nothing is written."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "trainer.py").write_text(
        "import torch\nfrom apex import amp\nfrom engine import train_step\n\n\n"
        "class Trainer:\n    def __init__(self, model, opt):\n"
        "        self.model, self.opt = model, opt\n\n"
        "    def setup(self):\n        self.amp = amp\n"
        "        self.model, self.opt = self.amp.initialize(\n"
        '            self.model, self.opt, opt_level="O1"\n        )\n\n'
        "    def save(self):\n        return {'amp': self.amp.state_dict()}\n\n"
        "    def fit(self, data):\n        for x, y in data:\n            train_step(self, x, y)\n"
    )
    (root / "engine.py").write_text(
        "import torch\n\n\ndef train_step(t, x, y):\n"
        "    loss = torch.nn.functional.mse_loss(t.model(x), y)\n"
        "    with t.amp.scale_loss(loss, t.opt) as scaled_loss:\n        scaled_loss.backward()\n"
        "    t.opt.step()\n"
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    assert (
        "engine.py calls apex through `.amp` at its line 6"
        in _amp303(results)["trainer.py"].message
    )


def test_a_broken_link_is_not_also_reported_as_an_unlinked_sibling(tmp_path):
    """The 53rd review (TinyML): a script calls the training function of another module
    directly, and a third file calls it too, without a GradScaler. The link's own blocker says
    so; the script was also told that the rewrite links such files "only where this one calls
    the one function of that file that scales, directly ...", which it does."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "t.py").write_text(
        "import torch\nfrom apex import amp\n\n\ndef trainer(net, opt, batches):\n"
        "    for x in batches:\n        loss = net(x).sum()\n        opt.zero_grad()\n"
        "        with amp.scale_loss(loss, opt) as scaled:\n            scaled.backward()\n"
        "        opt.step()\n"
    )
    (root / "a.py").write_text(
        "import torch\nfrom apex import amp\nfrom t import trainer\n\n"
        "net = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        'net, opt = amp.initialize(net, opt, opt_level="O1")\n'
        "trainer(net, opt, [torch.randn(2, 4)])\n"
    )
    (root / "c.py").write_text(
        "import torch\nfrom t import trainer\n\nnet = torch.nn.Linear(4, 1)\n"
        "trainer(net, torch.optim.SGD(net.parameters(), lr=0.1), [torch.randn(2, 4)])\n"
    )
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["a.py"].message
    assert "`trainer` is also used at c.py:5, which would not pass the GradScaler" in message
    assert "relies on the amp state this file sets up" not in message
    assert "(2 blockers)" in message


_DERIVED = {
    "lib/__init__.py": "",
    "lib/training/__init__.py": "from .trainer import Trainer\n",
    "lib/training/trainer.py": (
        "import torch\n\n\nclass Trainer:\n"
        "    def __init__(self, model, optimizer, mixed_precision=False):\n"
        "        self.model, self.optimizer = model, optimizer\n"
        "        self.mixed_precision = mixed_precision\n"
        "        if self.mixed_precision:\n            from apex import amp\n\n"
        "            self.model, self.optimizer = amp.initialize(\n"
        '                self.model, self.optimizer, opt_level="O1"\n            )\n\n'
        "    def run(self, batches):\n        for x, y in batches:\n"
        "            self._train_step(x, y)\n\n"
        "    def _train_step(self, x, y):\n"
        "        loss = torch.nn.functional.mse_loss(self.model(x), y)\n"
        "        self.optimizer.zero_grad()\n        loss.backward()\n"
        "        self.optimizer.step()\n"
    ),
    "lib/training/multi.py": (
        "import torch\n\nfrom lib.training.trainer import Trainer\n\n\n"
        "class MultiTrainer(Trainer):\n    def step(self, x, y):\n"
        "        loss = torch.nn.functional.mse_loss(self.model(x), y)\n"
        "        if self.mixed_precision:\n            from apex import amp\n\n"
        "            with amp.scale_loss(loss, self.optimizer) as scaled:\n"
        "                scaled.backward()\n        else:\n            loss.backward()\n"
        "        self.optimizer.step()\n"
    ),
    # through the package's re-export: its own entry point runs the model
    "lib/training/viapkg.py": (
        "from lib.training import Trainer\n\n\nclass PkgTrainer(Trainer):\n"
        "    def evaluate(self, x):\n        return self.model(x)\n"
    ),
    # an override of a method the base calls outside any region
    "lib/training/n2v.py": (
        "import torch\n\nfrom lib.training.trainer import Trainer\n\n\n"
        "class N2VTrainer(Trainer):\n    def _train_step(self, x, y):\n"
        "        loss = torch.nn.functional.l1_loss(self.model(x), y)\n"
        "        loss.backward()\n        self.optimizer.step()\n"
    ),
}


def test_derived_classes_whose_forwards_leave_float16_are_named(tmp_path):
    """The 53rd review (elektronn3): the base class initializes, a subclass in another module
    scales (rewritten together); subclasses that only run the model kept no note where they
    took the base through its package's `__init__`, or overrode a method that the base calls
    outside any autocast region (`Noise2VoidTrainer._train_step`): their forwards run in
    float32 now, as the base's own `_train_step` does, and the finding says so."""
    root = tmp_path / "project"
    for name, text in _DERIVED.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    results = run(_files(root), _settings(fix=True))
    assert sorted(Path(r.path).name for r in results if r.changed) == ["multi.py", "trainer.py"]
    message = _amp303(results)["trainer.py"].message
    assert "`N2VTrainer._train_step` (n2v.py:8)" in message
    assert "`PkgTrainer.evaluate` (viapkg.py:6)" in message
    assert "a method of a class derived from `Trainer` in another module" in message


_BOTH_BRANCHES = {
    "runners/__init__.py": "",
    "runners/base.py": (
        "from apex import amp\n\n\nclass BaseRunner:\n"
        "    def __init__(self, model, history, optimizer, mode):\n"
        "        self.model, self.history, self.optimizer = model, history, optimizer\n"
        '        if self.history is None and mode == "TRAIN":\n'
        "            self.model, self.optimizer = amp.initialize(\n"
        '                self.model, self.optimizer, opt_level="O1"\n            )\n'
        '        elif mode == "TRAIN":\n'
        "            [self.model, self.history], self.optimizer = amp.initialize(\n"
        '                [self.model, self.history], self.optimizer, opt_level="O1"\n'
        "            )\n"
    ),
    "runners/mib.py": (
        "from apex import amp\n\nfrom runners.base import BaseRunner\n\n\n"
        "class MIBRunner(BaseRunner):\n    def train(self, x):\n"
        "        loss = self.model(x).sum()\n"
        "        with amp.scale_loss(loss, self.optimizer) as scaled:\n"
        "            scaled.backward()\n        self.optimizer.step()\n"
    ),
}


def test_a_refused_class_family_base_does_not_also_say_nothing_scales(tmp_path):
    """The 53rd review (cssegmentation's runners): the base class initializes (in both arms
    of an `if`, which keeps it refused) and a subclass in another module scales. Beside that
    true blocker the base was told that none of its imports calls apex amp, "apex only casts
    here", and to add a `scaler` argument to its second `amp.initialize`; and that nothing
    set the optimizer it hands over, which a tuple assignment does."""
    root = tmp_path / "project"
    for name, text in _BOTH_BRANCHES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["base.py"].message
    assert "classes derived from `BaseRunner` in other modules that call apex amp" in message
    assert "`amp.initialize` is called in both branches of the `if`" in message
    assert "apex only casts here" not in message
    assert "through `amp.initialize`" not in message
    # `self.model, self.history, self.optimizer = ...` sets it (a tuple of targets)
    assert "which nothing in this file sets" not in message


@pytest.mark.parametrize(
    ("library", "rewritten"),
    [
        ("BEST = None\n\n\ndef keep(m):\n    global BEST\n    BEST = m\n", False),
        ("def keep(m):\n    print(m.weight.dtype)\n", True),
    ],
)
def test_a_library_function_handed_the_pass_model_is_read(tmp_path, library, rewritten):
    """The 56c review (P11): a function of a project module (here through a star import) that
    a k-fold pass handed its model to was taken to keep nothing; one that kept it in a module
    global left it in float32 after the loop with no word. Its body is read now."""
    (tmp_path / "lib.py").write_text(library)
    (tmp_path / "main.py").write_text(
        "import torch\nfrom apex import amp\nfrom lib import *\n\n\ndef main(data):\n"
        "    for fold in range(2):\n        model = torch.nn.Linear(4, 1)\n"
        "        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        '        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "        for x, y in data:\n            loss = (model(x) - y).pow(2).mean()\n"
        "            with amp.scale_loss(loss, optimizer) as scaled:\n"
        "                scaled.backward()\n            optimizer.step()\n"
        "        keep(model)\n"
    )
    finding = _amp303(run(_files(tmp_path), _settings()))["main.py"]
    assert (finding.fix == "unsafe") is rewritten, finding.message
    if not rewritten:
        assert "which keeps it: `BEST`, a global of `keep` (lib.py, line 4)" in finding.message


@pytest.mark.parametrize(
    ("probe", "tied"),
    [
        ("CONFIG = vars(ARGS)", False),  # a lookup on an object: no name of this module
        ("CONFIG = vars()", True),  # this module's names: may reach `ApexScaler`
        # a computed lookup through a parameter may be of this module (58a's V6)
        ("import sys\n\n\ndef pick(ns, k):\n    return getattr(ns, k)\n\n\n"
         "CONFIG = pick(sys.modules[__name__], 'Apex' + 'Scaler')", True),
    ],
)  # fmt: skip
def test_a_star_import_of_the_helpers_package_leaves_them_to_the_apex_branch(tmp_path, probe, tied):
    """The 57th review (an older timm train script): `from utils import *` beside
    `from utils import ApexScaler, NativeScaler`, and `vars(args)` for the data config. Any
    `vars` made the star import "use every name", so the helper that only the apex branch
    used was said to "rely on the amp state this file sets up" (false)."""
    root = tmp_path / "project"
    (root / "utils").mkdir(parents=True)
    (root / "utils" / "__init__.py").write_text("from .cuda import ApexScaler, NativeScaler\n")
    (root / "utils" / "cuda.py").write_text(_TIMM_HELPERS)
    script = _TIMM_SCRIPT.replace(
        "from helpers import ApexScaler, NativeScaler\n",
        "from utils import *\nfrom utils import ApexScaler, NativeScaler\n",
    ).replace("PROBE = ", f"ARGS = object()\n{probe}\nPROBE = ")
    (root / "train.py").write_text(script)
    found = _amp303(run(_files(root), _settings()))
    message = found["train.py"].message
    if tied:
        assert "utils/cuda.py (imported by utils/__init__.py at line 1) calls" in message
    else:
        assert found["train.py"].fix == "unsafe", message
        assert "calls `amp.scale_loss` at its line 11 in code that only the apex branch" in (
            message
        )


@pytest.mark.parametrize(
    ("folder", "path"),
    [
        ("utils", 'sys.path.append("..")'),
        ("tools/helpers", 'sys.path.append("..")'),  # (58a: two levels down)
        ("utils", "print()"),  # (60a: run as `python -m examples.run`, no `sys.path`)
    ],
)
def test_a_helper_folder_imported_through_the_repository_top_is_not_said_unused(
    tmp_path, folder, path
):
    """The 57th review (an NER project): `utils/adversarial.py` (no `__init__.py`) scales
    with apex; `examples/run.py` puts the repository's top on `sys.path`, imports it and
    initializes amp. The helper was told "no file of the project initializes apex amp ... so
    delete it", which would have broken its fp16 training."""
    (tmp_path / "README.md").write_text("a project\n")
    (tmp_path / folder).mkdir(parents=True)
    (tmp_path / folder / "adversarial.py").write_text(
        "from apex import amp\n\n\ndef loss_backward(loss, optimizer):\n"
        "    with amp.scale_loss(loss, optimizer) as scaled:\n        scaled.backward()\n"
    )
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "run.py").write_text(
        f"import sys\n\n{path}\nfrom apex import amp\n"
        f"from {folder.replace('/', '.')}.adversarial import loss_backward\n\n\n"
        "def main(model, optimizer):\n"
        '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "    loss_backward(model(1).sum(), optimizer)\n    optimizer.step()\n"
    )
    message = _amp303(run(_files(tmp_path), _settings()))["adversarial.py"].message
    assert "no file of the project initializes" not in message
    assert "`loss_backward` uses `amp.scale_loss` but `amp.initialize` is not in this file" in (
        message
    )


_OBJECT_TRAINER = {
    "trainer.py": """\
import torch
from apex import amp


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def step(self, x):
        loss = torch.sigmoid(self.model(x)).sum()
        self.optimizer.zero_grad()
        with amp.scale_loss(loss, self.optimizer) as scaled:
            scaled.backward()
        self.optimizer.step()
        return loss.item()
""",
    "train.py": """\
import torch
from apex import amp

from trainer import Trainer


def main(data):
    model = torch.nn.Linear(4, 1).to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    amp.register_float_function(torch, "sigmoid")
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    trainer = Trainer(model, optimizer)
    for x in data:
        print(" loss", round(trainer.step(x), 4))


if __name__ == "__main__":
    torch.manual_seed(0)
    main([torch.randn(2, 4, device="cuda") for _ in range(3)])
""",
}


def test_a_trainer_object_built_by_a_script_that_registers_a_cast_is_linked(tmp_path):
    """Lydorn's frame-field training (the 53rd review): the script registers
    `amp.register_float_function(torch, "sigmoid")` before `initialize` and hands the model
    and optimizer to a `Trainer` of another module, whose method scales. Any apex call in the
    script besides `initialize` kept the two unlinked ("not through ... an object it
    builds"); the script's plan rewrites the registration, so they are linked as a hook: the
    class keeps a GradScaler, the script casts from `initialize` on. Run on CPU."""
    root, _ = _fixed_beside_original(tmp_path, _OBJECT_TRAINER, ["train.py", "trainer.py"])
    train = (root / "train.py").read_text()
    assert 'torch.sigmoid = torch.amp.custom_fwd(torch.sigmoid, device_type="cuda"' in train
    assert "self.scaler = torch.amp.GradScaler(" in (root / "trainer.py").read_text()
    for path in _files(root):
        path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    [(code, out, error)] = _runs([(root / "train.py", [], root, True)], tmp_path)
    assert code == 0, error
    assert out.count(" loss") == 3


def test_an_initialize_without_optimizer_is_not_counted_as_one_with(tmp_path):
    """58b (ClassyVision): `initialize(model, optimizers=None, ...)` in one branch and
    `initialize(model, optimizer, ...)` in the other; the sibling's refusal said "this file
    calls `amp.initialize` with an optimizer 2 times"."""
    (tmp_path / "util.py").write_text(
        "from apex import amp\n\n\ndef master_params(optimizer):\n"
        "    return amp.master_params(optimizer)\n"
    )
    (tmp_path / "task.py").write_text(
        "import torch\nfrom apex import amp\nfrom util import master_params\n\n\n"
        "def build(model, optimizer, kw):\n    if optimizer is None:\n"
        "        model = amp.initialize(model, optimizers=None, **kw)\n"
        "    else:\n"
        "        model, optimizer = amp.initialize(model, optimizer, **kw)\n"
        "    return model, optimizer\n\n\n"
        "def step(model, optimizer, x):\n    loss = model(x).sum()\n"
        "    with amp.scale_loss(loss, optimizer) as scaled:\n        scaled.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(master_params(optimizer), 1.0)\n"
        "    optimizer.step()\n"
    )
    message = _amp303(run(_files(tmp_path), _settings()))["task.py"].message
    assert "util.py (imported by task.py at line 3) calls `amp.master_params`" in message
    assert "with an optimizer 2 times" not in message


# a utilities module's helper that scales the loss it is given and leaves the step to its
# callers (57a's NER scripts: `loss_backward(loss, optimizer)`), the script casts and steps
BACKWARD_HELPER = {
    "utils.py": """\
from apex import amp


def loss_backward(loss, optimizer, fp16=False):
    if fp16:
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
    else:
        loss.backward()
""",
    "main.py": """\
import torch
import torch.nn.functional as F
from apex import amp
from utils import loss_backward


def main(fp16=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
    ).to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    data, target = torch.randn(32, 8) / 4, torch.randn(32, 2) / 4
    for _ in range(4):
        x, y = data.to("cuda"), target.to("cuda")
        loss = F.mse_loss(model(x).float(), y)
        loss_backward(loss, optimizer, fp16)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
""",
}


def test_a_helper_of_another_module_that_scales_leaves_the_step_to_the_script(tmp_path, stub):
    """The script initializes, runs the forward, clips and steps; the helper it imports only
    scales the backward (57a: refused, "links two files only where this one calls the one
    function of that file that scales ... handing it the model and the optimizer"). Both are
    rewritten: the helper takes the GradScaler, the script's forward gets its region, its
    clip an `unscale_` (apex unscaled at the block's exit), its step the scaler's; the
    helper's `fp16` is the script's switch. Run on CPU beside the O0 original."""
    root, original = _fixed_beside_original(tmp_path, BACKWARD_HELPER, ["main.py", "utils.py"])
    utils, main = (root / "utils.py").read_text(), (root / "main.py").read_text()
    assert "\ndef loss_backward(loss, optimizer, fp16=False, *, scaler):\n" in utils
    assert "        scaler.scale(loss).backward()\n    else:\n        loss.backward()\n" in utils
    assert "import torch" not in utils  # (nothing in it reads torch)
    assert "loss_backward(loss, optimizer, fp16, scaler=scaler)\n" in main
    lines = [line.strip() for line in main.splitlines()]
    at = lines.index("loss_backward(loss, optimizer, fp16, scaler=scaler)")
    assert lines[at - 2 : at] == [
        'with torch.amp.autocast("cuda", dtype=torch.float16, enabled=fp16):',
        "loss = F.mse_loss(model(x).float(), y)",
    ]
    assert lines[at + 1 : at + 5] == [
        "scaler.unscale_(optimizer)",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "scaler.step(optimizer)",
        "scaler.update()",
    ]
    assert "apex" not in utils + main
    _on_cpu_beside_original(tmp_path, root, original, stub)


def test_a_helper_that_always_scales_may_be_called_twice_before_the_step(tmp_path, stub):
    """Adversarial training (FGM): the helper scales the clean and the perturbed loss, one
    step follows both; the helper has no switch, so nothing is asked of its callers."""
    files = {
        "utils.py": BACKWARD_HELPER["utils.py"]
        .replace("optimizer, fp16=False):\n    if fp16:\n", "optimizer):\n    if True:\n")
        .replace("    if True:\n        with", "    with")
        .replace("\n            scaled_loss", "\n        scaled_loss")
        .replace("    else:\n        loss.backward()\n", ""),
        "main.py": BACKWARD_HELPER["main.py"]
        .replace("loss_backward(loss, optimizer, fp16)\n", "loss_backward(loss, optimizer)\n")
        .replace(
            "        torch.nn.utils.clip_grad_norm_",
            "        noisy = F.mse_loss(model(x + 0.01).float(), y)\n"
            "        loss_backward(noisy, optimizer)\n"
            "        torch.nn.utils.clip_grad_norm_",
        ),
    }
    assert files["utils.py"].endswith(
        "optimizer) as scaled_loss:\n        scaled_loss.backward()\n"
    )
    root, original = _fixed_beside_original(tmp_path, files, ["main.py", "utils.py"])
    main = (root / "main.py").read_text()
    assert main.count("scaler=scaler)") == 2 and main.count("scaler.step(optimizer)") == 1
    assert main.count('with torch.amp.autocast("cuda"') == 2
    _on_cpu_beside_original(tmp_path, root, original, stub)


@pytest.mark.parametrize(
    ("change", "blocker"),
    [
        (  # the helper's switch given something else than the scaler's
            ("loss_backward(loss, optimizer, fp16)", "loss_backward(loss, optimizer, not fp16)"),
            "tests `fp16`, here `not fp16`, which is not known to hold wherever the GradScaler",
        ),
        (  # left to its default (False): the helper's plain backward under apex's scaler
            ("loss_backward(loss, optimizer, fp16)", "loss_backward(loss, optimizer)"),
            "tests `fp16`, here `False`, which is not known to hold wherever",
        ),
        (  # no step after it in the script: nothing to make the scaler's
            ("        optimizer.step()\n", ""),
            "no `optimizer.step()` after `loss_backward(...)`",
        ),
        (  # the call's value is used: not a statement of its own
            (
                "        loss_backward(loss, optimizer, fp16)",
                "        done = loss_backward(loss, optimizer, fp16)",
            ),
            "this call is not a statement of its own",
        ),
    ],
)
def test_a_script_that_cannot_step_after_the_helper_keeps_both_on_apex(change, blocker, tmp_path):
    files = dict(BACKWARD_HELPER)
    files["main.py"] = files["main.py"].replace(*change)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = _amp303(run(_files(tmp_path), _settings()))
    assert found["main.py"].fix is None and found["utils.py"].fix is None
    assert blocker in found["main.py"].message
    assert "can only be rewritten together" in found["utils.py"].message


@pytest.mark.parametrize(
    "body",
    [
        # reads the gradients before its caller's step: apex's were unscaled there
        "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n        scaled_loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]['params'], 1.0)\n",
        # steps itself: not a helper that leaves the step to its caller
        "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n        scaled_loss.backward()\n"
        "    optimizer.step()\n",
        # rebinds the optimizer it scales for
        "    optimizer = optimizer.inner\n"
        "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n"
        "        scaled_loss.backward()\n",
    ],
)
def test_a_helper_that_does_more_than_scale_the_backward_is_not_delegated(body, tmp_path):
    (tmp_path / "utils.py").write_text(
        "import torch\nfrom apex import amp\n\n\ndef loss_backward(loss, optimizer):\n" + body
    )
    (tmp_path / "main.py").write_text(
        BACKWARD_HELPER["main.py"].replace(
            "loss_backward(loss, optimizer, fp16)", "loss_backward(loss, optimizer)"
        )
    )
    found = _amp303(run(_files(tmp_path), _settings()))
    assert found["main.py"].fix is None and found["utils.py"].fix is None
    assert "scales the loss and leaves the step" not in found["main.py"].message


def test_a_checkpoint_helper_beside_the_backward_helper_is_no_backward(tmp_path, stub):
    """The helper's module also saves apex's state (the review's p29c): only the calls of
    the helper that scales are the script's scaled backwards. The save was taken for one
    too: a region around the top of `main` (`UnboundLocalError`) and its "loss" was the
    model. Run and resumed on CPU beside the O0 original."""
    files = dict(BACKWARD_HELPER)
    files["utils.py"] = (
        "import torch\n"
        + files["utils.py"]
        + "\n\ndef save_checkpoint(model, optimizer, fp16, path):\n"
        '    state = {"model": model.state_dict(), "amp": amp.state_dict() if fp16 else None}\n'
        "    torch.save(state, path)\n"
    )
    files["main.py"] = (
        files["main.py"]
        .replace(
            "from utils import loss_backward", "from utils import loss_backward, save_checkpoint"
        )
        .replace(
            '        print(f"loss {loss.item():.4f}")\n',
            '        print(f"loss {loss.item():.4f}")\n'
            '        save_checkpoint(model, optimizer, fp16, "last.pt")\n',
        )
    )
    root, original = _fixed_beside_original(tmp_path, files, ["main.py", "utils.py"])
    main = (root / "main.py").read_text()
    assert 'save_checkpoint(model, optimizer, fp16, "last.pt", scaler=scaler)' in main
    assert main.count("with torch.amp.autocast(") == 1
    _on_cpu_beside_original(tmp_path, root, original, stub)


def test_the_helper_imported_under_another_name_is_known_at_each_call(tmp_path, stub):
    """`from utils import loss_backward as lb`, called for the clean and the perturbed loss
    before one step: the second call was "given `optimizer` between its scaled backward and
    the step" (the review's p02), though it is the helper itself."""
    files = {
        "utils.py": BACKWARD_HELPER["utils.py"],
        "main.py": BACKWARD_HELPER["main.py"]
        .replace("from utils import loss_backward", "from utils import loss_backward as lb")
        .replace(
            "        loss_backward(loss, optimizer, fp16)\n",
            "        lb(loss, optimizer, fp16)\n"
            "        noisy = F.mse_loss(model(x + 0.01).float(), y)\n"
            "        lb(noisy, optimizer, fp16)\n",
        ),
    }
    root, original = _fixed_beside_original(tmp_path, files, ["main.py", "utils.py"])
    assert (root / "main.py").read_text().count("fp16, scaler=scaler)") == 2
    _on_cpu_beside_original(tmp_path, root, original, stub)


def test_a_switch_that_differs_in_the_function_between_is_not_the_scalers(tmp_path):
    """`main` switches the GradScaler with `fp16` and hands `fp16 and epoch > 0` to the
    function that calls the helper, as its own `fp16` (the review's p07): the same spelling
    is another value there. Rewritten before, `scaler.step` then met the first epoch's
    unscaled backward (`Attempted unscale_ but _scale is None`); refused now."""
    (tmp_path / "utils.py").write_text(BACKWARD_HELPER["utils.py"])
    main = BACKWARD_HELPER["main.py"].replace(
        "    for _ in range(4):\n",
        "    for epoch in range(2):\n        train_epoch(model, optimizer, data, target, "
        "fp16 and epoch > 0)\n\n\ndef train_epoch(model, optimizer, data, target, fp16):\n"
        "    for _ in range(4):\n",
    )
    assert "def train_epoch(" in main
    (tmp_path / "main.py").write_text(main)
    found = _amp303(run(_files(tmp_path), _settings()))
    assert found["main.py"].fix is None
    assert "tests `fp16`, here `fp16`, which is not known to hold wherever" in (
        found["main.py"].message
    )


@pytest.mark.parametrize(
    ("helper", "call"),
    [
        ("fp16=False", "loss_backward(loss, optimizer, True)"),  # a literal True
        ("fp16=True", "loss_backward(loss, optimizer)"),  # a default True
        ("fp16=False", "loss_backward(loss, optimizer, fp16 and fp16)"),  # the switch itself
    ],
)
def test_a_helper_switch_that_always_holds_asks_nothing_of_the_scaler(helper, call, tmp_path):
    """The helper always scales there (the review's p13, p14: "not known to hold")."""
    (tmp_path / "utils.py").write_text(BACKWARD_HELPER["utils.py"].replace("fp16=False", helper))
    (tmp_path / "main.py").write_text(
        BACKWARD_HELPER["main.py"].replace("loss_backward(loss, optimizer, fp16)", call)
    )
    found = _amp303(run(_files(tmp_path), _settings()))
    assert found["main.py"].fix is not None and found["utils.py"].fix is not None


DECORATED_ENGINE = {
    "engine.py": """\
import functools

from apex import amp


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        print("start")
        return fn(*args, **kwargs)

    return wrapper


@logged
def train(model, optimizer, data, target):
    for _ in range(4):
        loss = ((model(data) - target) ** 2).mean()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"loss {loss.item():.4f}")
""",
    "main.py": """\
import torch
from apex import amp
from engine import train


def main():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2).to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    train(model, optimizer, torch.randn(16, 8).to("cuda"), torch.randn(16, 2).to("cuda"))


if __name__ == "__main__":
    main()
""",
}


def test_a_decorator_that_hands_every_argument_on_lets_the_linked_function_take_the_scaler(
    tmp_path, stub
):
    """The linked training function is decorated by a wrapper of `*args, **kwargs` that
    calls it with exactly those: the `scaler` its caller passes reaches it. Both files are
    rewritten and train like the O0 original on CPU."""
    root, original = _fixed_beside_original(tmp_path, DECORATED_ENGINE, ["engine.py", "main.py"])
    assert (
        "\ndef train(model, optimizer, data, target, scaler):\n" in (root / "engine.py").read_text()
    )
    _on_cpu_beside_original(tmp_path, root, original, stub)


def test_a_decorator_with_a_signature_of_its_own_keeps_the_linked_function_on_apex(tmp_path):
    """The 62nd review's q17 across modules: the wrapper takes the function's parameters by
    name and passes on what it chooses; a `scaler` added to the function would never reach
    it (TypeError at the wrapper). Refused, naming the decorator."""
    files = dict(DECORATED_ENGINE)
    files["engine.py"] = files["engine.py"].replace(
        '    def wrapper(*args, **kwargs):\n        print("start")\n'
        "        return fn(*args, **kwargs)\n",
        "    def wrapper(model, optimizer, data, target):\n"
        "        return fn(model, optimizer, data, target)\n",
    )
    assert "def wrapper(model, optimizer, data, target):" in files["engine.py"]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = _amp303(run(_files(tmp_path), _settings()))
    assert found["main.py"].fix is None and found["engine.py"].fix is None
    assert "it is decorated (`@logged`)" in found["engine.py"].message


def test_a_plain_backward_in_a_function_of_another_module_before_the_step_sees_unscaled(
    tmp_path, stub
):
    """The 62nd review's d08: beside the linked helper that scales, the script calls
    `aux_backward` of the same module, which runs a plain backward before the step; rewritten,
    `scaler.step` divided its gradients by the scale. apex had unscaled before they were
    added: `scaler.unscale_(optimizer)` goes before the call, and both files train like the
    O0 original on CPU."""
    files = dict(BACKWARD_HELPER)
    files["utils.py"] += "\n\ndef aux_backward(loss):\n    (0.5 * loss).backward()\n"
    files["main.py"] = (
        files["main.py"]
        .replace(
            "from utils import loss_backward\n", "from utils import aux_backward, loss_backward\n"
        )
        .replace(
            "        loss_backward(loss, optimizer, fp16)\n",
            "        loss_backward(loss, optimizer, fp16)\n"
            "        aux = F.mse_loss(model(x).float(), y)\n"
            "        aux_backward(aux)\n",
        )
    )
    assert "        aux_backward(aux)" in files["main.py"]
    root, original = _fixed_beside_original(tmp_path, files, ["main.py", "utils.py"])
    lines = [line.strip() for line in (root / "main.py").read_text().splitlines()]
    assert lines[lines.index("aux_backward(aux)") - 1] == "scaler.unscale_(optimizer)"
    _on_cpu_beside_original(tmp_path, root, original, stub)


SWITCH_FROM_ANOTHER_FILE = {
    "engine.py": """\
import torch.nn.functional as F
from apex import amp


def train(model, optimizer, xs, ys, fp16):
    for x, y in zip(xs, ys):
        optimizer.zero_grad()
        loss = F.mse_loss(model(x).float(), y)
        if fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.4f}")


def pretrain(model, optimizer, xs, ys, fp16=True):
    if fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    train(model, optimizer, xs, ys, fp16)
    return model
""",
    "finetune.py": """\
import torch
from engine import train


def finetune(model, xs, ys):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    before = [p.detach().clone() for p in model.parameters()]
    train(model, optimizer, xs, ys, False)
    moved = sum((p.detach() - b).norm().item() for p, b in zip(model.parameters(), before))
    print(f"moved {moved:.4f}")
""",
    "main.py": """\
import torch
from engine import pretrain
from finetune import finetune

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
model = model.to("cuda")
xs, ys = torch.randn(3, 16, 8).to("cuda"), torch.randn(3, 16, 2).to("cuda")
model = pretrain(model, torch.optim.SGD(model.parameters(), lr=0.5), xs, ys)
finetune(model, xs, ys)
""",
}


def test_a_switch_parameter_given_false_by_a_caller_in_another_file_keeps_its_step_plain(
    tmp_path, stub
):
    """The 63rd review's W1: `train(..., fp16)` scales under its parameter; `pretrain` in the
    same file hands it the scaler's switch, a fine-tuning module hands it False. The step was
    `scaler.step` for both branches, so the fine-tuning pass's plain gradients were divided by
    the scale (the weights moved 0.000004 instead of 0.27). A parameter whose calls are not
    all in this file is no switch: the step asks `fp16`, and it trains like the original."""
    root, original = _fixed_beside_original(tmp_path, SWITCH_FROM_ANOTHER_FILE, ["engine.py"])
    engine = (root / "engine.py").read_text()
    assert "        if fp16:\n            scaler.step(optimizer)\n" in engine
    assert "\n            optimizer.step()\n" in engine
    _on_cpu_beside_original(tmp_path, root, original, stub)


DEEP = """\
import torch

from trainers.base import DEVICE
from trainers.variants.clipped import ClippedTrainer

try:
    from apex import amp
except ImportError:
    amp = None


class DeepTrainer(ClippedTrainer):
    def run_iteration(self, x, y):
        self.optimizer.zero_grad()
        output = self.network(x.to(DEVICE))
        loss = 0.5 * torch.nn.functional.mse_loss(output.float(), y.to(DEVICE))
        if self.fp16:
            with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        self.optimizer.step()
        return loss.item()
"""


@pytest.mark.torch
def test_a_class_family_three_levels_deep_is_rewritten_together(tmp_path, stub):
    """nnUNet (the 66th review): the base initializes, a subclass in another module scales,
    and a grandchild in a third module (derived from the subclass, not the base) scales too.
    The grandchild was refused: "cannot read its GradScaler as `self.scaler` (the name is in
    use here)", where no `scaler` existed, and its parent's module "relies on the amp state
    this file sets up", where it sets up none. All three are rewritten, and the grandchild
    trains as the original does."""
    root = tmp_path / "project"
    shutil.copytree(FAMILY / "before", root)
    (root / "trainers" / "variants" / "deep.py").write_text(DEEP)
    script = root / "run.py"
    script.write_text(
        script.read_text()
        .replace(
            "from trainers.variants.clipped import ClippedTrainer, SlowClippedTrainer\n",
            "from trainers.variants.clipped import ClippedTrainer, SlowClippedTrainer\n"
            "from trainers.variants.deep import DeepTrainer\n",
        )
        .replace('"slow": SlowClippedTrainer}', '"slow": SlowClippedTrainer, "deep": DeepTrainer}')
    )
    original = tmp_path / "original"
    shutil.copytree(root, original)
    shutil.copytree(stub / "apex", original / "apex")
    results = run(_files(root), _settings(fix=True))
    assert not [d for r in results for d in r.diagnostics if d.code == "AMP303"]
    changed = sorted(str(Path(r.path).relative_to(root)) for r in results if r.changed)
    assert changed == [*FAMILY_FILES, "trainers/variants/deep.py"]
    for result in results:
        if result.changed:
            Path(result.path).write_bytes(result.new_source)
    assert "self.scaler.scale(loss).backward()" in (root / "trainers/variants/deep.py").read_text()
    for path in _files(root):
        path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    flags = ["--fp16", "--trainer", "deep"]
    before, after = _runs(
        [(original / "run.py", flags, original, False), (script, flags, root, True)], tmp_path
    )
    assert before[0] == after[0] == 0, (before[2], after[2])
    _tracks(_losses(after[1]), _losses(before[1]))


PROBE_MIXIN = (
    "try:\n    from apex import amp\n\n    APEX_AVAILABLE = True\nexcept ImportError:\n"
    "    APEX_AVAILABLE = False\n\n\nclass AMPMixin:\n    def init_amp(self, use_amp):\n"
    "        self.use_amp = use_amp and APEX_AVAILABLE\n"
)
PROBED_TRAINER = """\
import torch

try:
    from apex import amp
except ImportError:
    pass

from .amp_mixin import AMPMixin


class Trainer(AMPMixin):
    def fit(self, model, optimizer, x, use_amp):
        self.init_amp(use_amp)
        if self.use_amp:
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        for _ in range(3):
            optimizer.zero_grad()
            loss = model(x).float().pow(2).mean()
            if self.use_amp:
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
            else:
                loss.backward()
            optimizer.step()
"""


@pytest.mark.parametrize("trainer_rewritten", [True, False])
def test_a_probe_a_class_reads_goes_with_the_last_file_of_the_run_on_apex(
    tmp_path, trainer_rewritten
):
    """A probe (`APEX_AVAILABLE`) that a mixin reads (`self.use_amp = use_amp and
    APEX_AVAILABLE`) for a trainer that imports apex. Where the same run rewrites the trainer,
    the probe goes with it: kept, it switched the migrated trainer to float32 wherever apex was
    not installed, and a second `fix` removed it (the 70th review's p40). Where the trainer
    stays on apex (an opt level not known to be O1), the probe stays, saying why: removed, the
    trainer's apex code ran on to a NameError without apex (the 69th review's
    pytorch-lightning)."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "amp_mixin.py").write_text(PROBE_MIXIN)
    trainer = PROBED_TRAINER if trainer_rewritten else PROBED_TRAINER.replace('"O1"', "LEVEL")
    (package / "trainer.py").write_text(trainer)
    results = run(_files(tmp_path), _settings(fix=True))
    mixin = next(r for r in results if r.path.endswith("amp_mixin.py"))
    rewritten = next(r for r in results if r.path.endswith("trainer.py"))
    assert rewritten.changed is trainer_rewritten
    assert mixin.changed is trainer_rewritten
    if trainer_rewritten:
        assert (
            "apex" not in mixin.new_source.decode() and "apex" not in rewritten.new_source.decode()
        )
        for result in results:
            if result.changed:
                Path(result.path).write_bytes(result.new_source)
        again = run(_files(tmp_path), _settings(fix=True))
        assert not any(r.changed for r in again)
    else:
        [kept] = [d for d in mixin.diagnostics if d.code == "AMP303"]
        assert "trainer.py uses `AMPMixin` and still imports apex" in kept.message


def test_a_setup_function_the_run_calls_twice_keeps_the_component(tmp_path):
    """The 82nd review's a27: `setup(model, opt, fp16)`, then `setup(critic, copt, False)`:
    the GradScaler made where `initialize` was (before its `if`, switched by `fp16`) was made
    again, turned off, by the second call, and the model trained in float32 without scaling
    (apex kept its amp state for the process). A file calls it twice: refused, saying so;
    one call in each of two scripts (DPR's) is not that."""
    (tmp_path / "msetup.py").write_text(
        textwrap.dedent("""\
        from apex import amp


        def setup(model, optimizer, fp16=False):
            if fp16:
                model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            return model, optimizer
    """)
    )
    train = textwrap.dedent("""\
        import torch

        from msetup import setup


        def train(fp16, batches):
            net = torch.nn.Linear(4, 1)
            model, opt = setup(net, torch.optim.SGD(net.parameters(), lr=0.1), fp16)
            critic = torch.nn.Linear(4, 1)
            critic, copt = setup(critic, torch.optim.SGD(critic.parameters(), lr=0.1), False)
            for x, y in batches:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                if fp16:
                    from apex import amp

                    with amp.scale_loss(loss, opt) as scaled:
                        scaled.backward()
                else:
                    loss.backward()
                opt.step()
    """)
    (tmp_path / "train.py").write_text(train)
    results = run(_files(tmp_path), _settings(fix=True))
    assert not any(r.changed for r in results)
    messages = _amp303(results)
    assert "a file of this run calls it 2 times: each call would make it again" in (
        messages["msetup.py"].message
    ), messages["msetup.py"].message
    (tmp_path / "train.py").write_text(train.replace("    critic, copt = setup(", "    # ("))
    results = run(_files(tmp_path), _settings(fix=True))
    assert {Path(r.path).name for r in results if r.changed} == {"msetup.py", "train.py"}


# a script that initializes and scales once per batch (`head`: lines after its imports,
# `tail`: its function's last statement)
_ONE_STEP_LOOP = """\
import torch
from apex import amp
{head}

def main({params}):
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level="O1")
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        with amp.scale_loss(loss, opt) as scaled:
            scaled.backward()
        opt.step()
    {tail}
"""


@pytest.mark.parametrize(
    "read",
    ['ckpt["amp"]', 'ckpt.get("amp", {})', '"amp" in ckpt', 'torch.load(path)["amp"]'],
)
def test_a_checkpoint_key_another_file_reads_keeps_its_rename_refused(tmp_path, read):
    """The 82nd review's b06, b07, b14, b15: the save and load of `"amp"` moved to `"scaler"`
    in the files rewritten, while `resume.py`, which names no apex, read the old key from
    the same checkpoint (KeyError, or None where guarded). Refused, naming the reader; a
    configuration's `cfg["amp"]` is no checkpoint."""
    (tmp_path / "ckpt.py").write_text(
        textwrap.dedent("""\
        import torch
        from apex import amp


        def save_checkpoint(path, model, optimizer):
            torch.save({"model": model.state_dict(), "amp": amp.state_dict()}, path)
    """)
    )
    (tmp_path / "train.py").write_text(
        _ONE_STEP_LOOP.format(
            head="\nfrom ckpt import save_checkpoint\n",
            params="path, batches",
            tail="save_checkpoint(path, model, opt)",
        )
    )
    resume = "import torch\n\n\ndef resume(path):\n    ckpt = torch.load(path)\n"
    (tmp_path / "resume.py").write_text(resume + f"    return {read}\n")
    results = run(_files(tmp_path), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["ckpt.py"].message
    assert 'moves the checkpoint key "amp" to "scaler" here, and resume.py:6 reads it' in message
    (tmp_path / "resume.py").write_text(
        "def flag(cfg):\n    return cfg['amp']\n"  # (a configuration: not a checkpoint)
    )
    results = run(_files(tmp_path), _settings(fix=True))
    assert {Path(r.path).name for r in results if r.changed} == {"ckpt.py", "train.py"}


def test_an_importer_that_uses_the_amp_state_keeps_the_initializing_file(tmp_path):
    """The 82nd review's f03: `driver.py` runs `train.main(True)` and then saves
    `amp.state_dict()`; `train.py` was rewritten alone, and the driver then called apex
    uninitialized (AttributeError) or not at all (ImportError). Refused, naming it."""
    (tmp_path / "train.py").write_text(
        _ONE_STEP_LOOP.format(head="", params="batches", tail="return model, opt")
    )
    (tmp_path / "driver.py").write_text(
        "import torch\nfrom apex import amp\n\nimport train\n\nmodel, opt = train.main([])\n"
        'torch.save({"amp": amp.state_dict()}, "last.pt")\n'
    )
    results = run(_files(tmp_path), _settings(fix=True))
    assert not any(r.changed for r in results)
    assert "driver.py imports this file and calls `amp.state_dict` (its line 7)" in (
        _amp303(results)["train.py"].message
    )


def test_a_setup_module_another_file_loads_by_name_keeps_the_component(tmp_path):
    """The 82nd review's a09: `importlib.import_module("msetup").setup(...)` in an evaluation
    script was not seen as a use of `setup`: its forwards, cast by apex, ran in float32 after
    the setup module and the trainer were rewritten. Refused, naming the loader."""
    (tmp_path / "msetup.py").write_text(
        textwrap.dedent("""\
        from apex import amp


        def setup(model, optimizer):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            return model, optimizer
    """)
    )
    (tmp_path / "train.py").write_text(
        textwrap.dedent("""\
        import torch

        from msetup import setup


        def train(batches):
            net = torch.nn.Linear(4, 1)
            model, opt = setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
            for x, y in batches:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                from apex import amp

                with amp.scale_loss(loss, opt) as scaled:
                    scaled.backward()
                opt.step()
    """)
    )
    results = run(_files(tmp_path), _settings(fix=True))
    assert {Path(r.path).name for r in results if r.changed} == {"msetup.py", "train.py"}
    (tmp_path / "evaluate.py").write_text(
        "import importlib\n\nimport torch\n\n"
        'S = importlib.import_module("msetup")\nmodel, _ = S.setup(torch.nn.Linear(4, 1), None)\n'
    )
    results = run(_files(tmp_path), _settings(fix=True))
    assert not any(r.changed for r in results)
    assert "evaluate.py:5 loads msetup.py by name (`msetup`)" in (
        _amp303(results)["msetup.py"].message
    )


def test_a_script_that_imports_its_initializer_from_a_folder_beside_is_not_told_none_does(
    cli, tmp_path
):
    """The 82nd review's F2: `scripts/train.py` (no package, no project marker) puts the
    top folder on `sys.path` and imports `lib.setup_mod`, which initializes; checked alone it
    was told "no file of the project initializes apex amp ... delete it or give it a plain
    backward", false and harmful. The modules a file imports count, wherever they are."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("")
    (tmp_path / "lib" / "setup_mod.py").write_text(
        "from apex import amp\n\n\ndef setup(model, opt, fp16=False):\n    if fp16:\n"
        '        model, opt = amp.initialize(model, opt, opt_level="O1")\n'
        "    return model, opt\n"
    )
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "train.py"
    script.write_text(
        textwrap.dedent("""\
        import os
        import sys

        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        import torch
        from lib.setup_mod import setup


        def train(fp16, batches):
            net = torch.nn.Linear(4, 1)
            model, opt = setup(net, torch.optim.SGD(net.parameters(), lr=0.1), fp16)
            for x, y in batches:
                loss = torch.nn.functional.mse_loss(model(x), y)
                if fp16:
                    from apex import amp

                    with amp.scale_loss(loss, opt) as scaled:
                        scaled.backward()
                else:
                    loss.backward()
                opt.step()


        if __name__ == "__main__":
            train("--fp16" in sys.argv, [])
    """)
    )
    result = cli("check", "scripts/train.py", cwd=tmp_path)
    assert "AMP303" in result.stdout, result.stdout
    assert "no file of the project initializes" not in result.stdout, result.stdout


def test_the_setup_module_alone_is_told_to_run_with_its_importers(tmp_path):
    """The 82nd review's F1: `fix` on DPR's setup module alone said "the rewrite pairs a file
    that initializes with the modules it imports, not with its importers", which the run of
    the whole folder shows false (it rewrites them together)."""
    root = tmp_path / "project"
    shutil.copytree(SHARED / "before", root)
    setup = root / "retrieval" / "utils" / "model_setup.py"
    [result] = run([setup], _settings(fix=True))
    message = next(d for d in result.diagnostics if d.code == "AMP303").message
    assert "give `fix` them all in one run" in message and "not with its importers" not in message


def test_a_model_returned_to_another_module_that_runs_it_is_stated_float32(tmp_path):
    """The 82nd review's g13: `run_all.py` runs what `train.main(True)` returns; apex O1 cast
    that forward (its patch stayed on), it runs in float32 now, and no finding said so."""
    (tmp_path / "train.py").write_text(
        _ONE_STEP_LOOP.format(head="", params="batches", tail="return model")
    )
    (tmp_path / "run_all.py").write_text(
        "import torch\n\nimport train\n\nm = train.main([])\nprint(m(torch.randn(2, 4)))\n"
    )
    results = run(_files(tmp_path), _settings(fix=True))
    message = _amp303(results)["train.py"].message
    assert "behaviour change where another module runs what `main` returns" in message
    assert "run_all.py:5 calls `main`" in message, message


def test_a_trainer_checked_alone_names_the_module_that_initializes_for_it(tmp_path):
    """The 82nd review's F3: `fix train.py` alone, where `train` scales with what
    `msetup.setup` returns, said only "`amp.initialize` is not in this file": the module that
    initializes for it goes unnamed. It is named now."""
    (tmp_path / "msetup.py").write_text(
        "from apex import amp\n\n\ndef setup(model, opt):\n"
        '    model, opt = amp.initialize(model, opt, opt_level="O1")\n    return model, opt\n'
    )
    train = tmp_path / "train.py"
    train.write_text(
        textwrap.dedent("""\
        import torch
        from apex import amp

        from msetup import setup


        def train(batches):
            net = torch.nn.Linear(4, 1)
            model, opt = setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
            for x, y in batches:
                loss = torch.nn.functional.mse_loss(model(x), y)
                with amp.scale_loss(loss, opt) as scaled:
                    scaled.backward()
                opt.step()


        if __name__ == "__main__":
            train([])
    """)
    )
    [result] = run([train], _settings(fix=True))
    message = next(d for d in result.diagnostics if d.code == "AMP303").message
    assert "the `amp.initialize` it relies on is in msetup.py, which this file imports" in message
