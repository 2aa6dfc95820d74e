"""apex's cast decorators in a model's layers (maskrcnn-benchmark's ``nms =
amp.float_function(_C.nms)`` and ``@amp.float_function`` on a module's forward), migrated with the
files that initialize amp (``amp.initialize`` in train.py, the old ``amp.init`` in test.py): all
rewritten in one run, or none."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from test_apex import _runs
from test_apex_modules import _amp303, _files, _rewritten_exactly, _settings

from ampmigrate.engine import run

from conftest import FIXTURES, check_source

PROJECT = FIXTURES / "apex" / "cast_layers"
FILES = ["detector/layers.py", "train.py", "test.py"]


def _copy(tmp_path: Path, side: str = "before", name: str | None = None) -> Path:
    root = tmp_path / (name or side)
    shutil.copytree(PROJECT / side, root)
    return root


def test_the_layers_and_both_scripts_are_rewritten_together_exactly_and_once(tmp_path):
    _rewritten_exactly(tmp_path, PROJECT, ["detector/layers.py", "test.py", "train.py"])
    found = _amp303(run(_files(_copy(tmp_path)), _settings()))
    layers = found["layers.py"].message
    assert "with `test.py` and `train.py` (migrated together)" in layers
    assert "the function runs with autocast off, where apex kept casting inside it" in layers
    assert '`amp.disable_casts()` at line 27 -> `torch.amp.autocast("cuda", enabled=False)`' in (
        layers
    )
    assert "where amp was never initialized, apex's `disable_casts` raised" in layers
    assert "detector/layers.py's `amp.float_function` at its line 15 gets its torch.amp form" in (
        found["train.py"].message
    )
    assert "the rest of `main` runs under" in found["test.py"].message


def test_each_file_alone_refuses_and_names_the_layers(tmp_path):
    root = _copy(tmp_path)
    for alone in FILES:
        [result] = run([root / alone], _settings(fix=True))
        assert not result.changed
        finding = _amp303([result]).get(Path(alone).name)
        if alone == "detector/layers.py":  # the decorator alone is AMP301's; the call is here
            assert finding is not None and finding.fix is None
            assert "only together with the files that initialize amp" in finding.message
        else:
            assert finding.fix is None
            assert "layers.py (imported by " in finding.message


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        # a keyword autocast cannot express: test.py is refused, so all are
        ("verbose=False)", "verbose=False, allow_banned=True)", "sets `allow_banned`"),
        # the handle is used: its API has no native counterpart
        ("    torch.manual_seed(1)\n", "    torch.manual_seed(1)\n    print(amp_handle)\n",
         "the handle `amp_handle` that `amp.init` returns is used"),
        # code after `main()`: apex kept casting there, a region would not
        ('    main()\n', '    main()\n    print(torch.ones(1) @ torch.ones(1))\n',
         "`main()` is not the script's last statement"),
    ],
)  # fmt: skip
def test_a_refused_member_keeps_the_whole_component_refused(tmp_path, old, new, why):
    root = _copy(tmp_path)
    script = root / "test.py"
    assert old in script.read_text()
    script.write_text(script.read_text().replace(old, new))
    results = run(_files(root), _settings(fix=True))
    assert not any(r.changed for r in results)
    found = _amp303(results)
    assert why in found["test.py"].message
    assert "test.py is not rewritten in this run" in found["layers.py"].message
    assert found["train.py"].fix is None


@pytest.mark.torch
def test_the_migrated_project_runs_like_the_original_and_its_kernels_get_float32(tmp_path, stub):
    """The originals against apex's O0 stand-in and the migration as written print the same;
    with "cuda" -> "cpu" the linear layers run in float16, the float32-only kernels still
    receive float32 through custom_fwd, and the solver runs in float32 in the region switched
    off. Without either, they raise."""
    pytest.importorskip("torch")
    before, after = _copy(tmp_path), _copy(tmp_path, "after")
    cpu, bare = _copy(tmp_path, "after", "cpu"), _copy(tmp_path, "after", "bare")
    region = _copy(tmp_path, "after", "region")
    for root in (
        cpu,
        bare,
        region,
    ):  # a scale float16 holds the first backward at (65536 overflows)
        for path in root.rglob("*.py"):
            text = path.read_text().replace('"cuda"', '"cpu"')
            scaler = 'GradScaler("cpu", '
            path.write_text(text.replace(scaler, scaler + "init_scale=1024.0, "))
    layers = bare / "detector" / "layers.py"
    cast = 'device_type="cpu", cast_inputs=torch.float32'
    text = layers.read_text().replace(f"torch.amp.custom_fwd(_kernel, {cast})", "_kernel")
    layers.write_text(text.replace(f"    @torch.amp.custom_fwd({cast})\n", ""))
    layers = region / "detector" / "layers.py"
    off = 'torch.amp.autocast("cpu", enabled=False)'
    layers.write_text(layers.read_text().replace(off, "contextlib.nullcontext()"))
    layers.write_text("import contextlib\n" + layers.read_text())
    shutil.copytree(stub / "apex", before / "apex")
    specs = []
    for root in (before, after):
        for script, args in (("train.py", ["--fp16"]), ("test.py", ["--fp16"]), ("train.py", [])):
            specs.append((root / script, [*args, "--out", str(tmp_path / "m.pt")]
                          if script == "train.py" else args, root, False))  # fmt: skip
    specs += [(cpu / "train.py", ["--fp16", "--out", str(tmp_path / "c.pt")], cpu, True),
              (cpu / "test.py", ["--fp16"], cpu, True),
              (bare / "test.py", ["--fp16"], bare, False),
              (region / "train.py", ["--fp16", "--out", "r.pt"], region, False)]  # fmt: skip
    results = _runs(specs, tmp_path)
    for (code, original, error), (code2, migrated, error2) in zip(
        results[:3], results[3:6], strict=True
    ):
        assert code == 0, error
        assert code2 == 0, error2
        assert original == migrated and ("loss" in original or "outputs" in original)
    for code, out, error in results[6:8]:
        assert code == 0, error
        assert "forward dtypes: ['torch.float16']" in out, out
    losses = [float(line.split()[-1]) for line in results[6][1].splitlines() if "loss" in line]
    reference = [float(line.split()[-1]) for line in results[0][1].splitlines() if "loss" in line]
    assert losses == pytest.approx(reference, rel=2e-2)
    code, _, error = results[8]
    assert code != 0 and "float32 only, got torch.float16" in error  # the pool or the kernel
    code, _, error = results[9]
    assert code != 0 and "solver: float32 only, got torch.float16" in error


_FUNCTION = """\
import torch
from apex import amp


class Deform(torch.autograd.Function):
    @staticmethod
    @amp.float_function
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @amp.float_function
    def backward(ctx, grad):
        return grad * 2
"""


def test_an_autograd_backward_gets_custom_bwd_and_a_module_nothing_initializes_is_told(tmp_path):
    """ASFF's deformable convolution: `@amp.float_function` on an autograd Function's forward
    and backward. Its backward got `custom_fwd(cast_inputs=...)` (the advice too), where torch
    has `custom_bwd`; and in a run where nothing initializes amp the module had no AMP303
    finding at all, though apex's casts do nothing there."""
    root = _copy(tmp_path)
    (root / "detector" / "deform.py").write_text(_FUNCTION)
    train = root / "train.py"
    train.write_text(
        "from detector.deform import Deform\n\nDEFORM = Deform.apply\n" + train.read_text()
    )
    results = run(_files(root), _settings(fix=True))
    [out] = [r.new_source.decode() for r in results if r.path.endswith("deform.py")]
    assert '    @torch.amp.custom_bwd(device_type="cuda")\n    def backward' in out
    cast = '@torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)'
    assert f"    {cast}\n    def forward" in out and "apex" not in out
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "deform.py").write_text(_FUNCTION)
    [result] = run([alone / "deform.py"], _settings(fix=True))
    [finding] = [d for d in result.diagnostics if d.code == "AMP303"]
    assert not result.changed and finding.fix is None and finding.line == 7
    assert (
        "no file of this run that initializes amp reaches it through the imports the tool resolves"
        in (finding.message)
    )
    assert "they do nothing and can simply go" in finding.message


def test_a_layer_a_package_only_re_exports_still_moves_with_the_scripts(tmp_path):
    """LSTFE-Net: `layers/__init__.py` re-exports `ROIPool` (its forward decorated with
    `@amp.float_function`), which no script uses. The decorator runs when the package is
    imported, so the module needs apex whatever the scripts take: it moves with them (a
    re-exported name that nothing reads no longer counted as used, and this module was left
    on apex, the migrated scripts failing at import)."""
    root = _copy(tmp_path)
    (root / "detector" / "deform.py").write_text(_FUNCTION)
    init = root / "detector" / "__init__.py"
    init.write_text(init.read_text() + "from .deform import Deform\n")
    results = run(_files(root), _settings(fix=True))
    [out] = [r.new_source.decode() for r in results if r.path.endswith("deform.py")]
    assert "apex" not in out and "torch.amp.custom_bwd" in out


def test_the_advice_for_each_cast_decorator_keeps_its_direction():
    """`@amp.half_function` cast to float16; its advice said to run the function under
    `autocast(enabled=False)`, which runs it in float32: the opposite (a RetinaNet loss)."""
    found = {}
    for member in ("half_function", "float_function", "promote_function"):
        source = f"from apex import amp\n\n\n@amp.{member}\ndef f(a, b):\n    return a @ b\n"
        [finding] = [d for d in check_source(source) if d.code == "AMP301"]
        found[member] = finding.message
    assert "cast_inputs=torch.float16" in found["half_function"]
    assert "enabled=False" not in found["half_function"]
    assert "cast_inputs=torch.float32" in found["float_function"]
    assert "enabled=False" in found["float_function"]
    assert "widest type" in found["promote_function"]


def test_a_project_on_torch_before_2_4_is_told_custom_fwd_needs_it(tmp_path):
    """`torch.amp.custom_fwd(device_type=...)` is new in torch 2.4 (the twenty-fifth review:
    MEGA under `--target-torch 2.3` got it without a word, and would fail at import): with an
    older target the layers' finding says what the fix needs."""
    root = _copy(tmp_path)
    settings = _settings()
    old = dataclasses.replace(settings, target_torch=(2, 3))
    layers = _amp303(run(_files(root), old))["layers.py"]
    assert layers.message.endswith("(the fix needs torch >= 2.4; target-torch is 2.3)")
    assert "needs torch" not in _amp303(run(_files(root), settings))["layers.py"].message


_OUTSIDE_SCRIPT = """\
import torch
from apex import amp
from {package}.layers import ROIAlign


def main():
    model = torch.nn.Linear(2, 2).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for _ in range(3):
        loss = model(torch.ones(2, 2).cuda()).sum()
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
"""
_OUTSIDE_LAYERS = """\
import torch
{imports}

{decorator}
def roi_align(x):
    return x


class ROIAlign(torch.nn.Module):
    def forward(self, x):
        return roi_align(x)
"""


def _outside_project(tmp_path: Path, package: str) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "train.py").write_text(_OUTSIDE_SCRIPT.format(package=package))
    return root


def test_a_package_outside_the_run_known_to_cast_through_apex_keeps_the_script_refused(
    tmp_path, monkeypatch
):
    """siam-mot: the model calls an installed maskrcnn-benchmark's `ROIAlign` and `nms`, which
    cast through `@amp.float_function`; rewritten, its CUDA kernels got autocast's float16 (they
    take float and double only). The package is not installed here: its published layers are
    known to cast."""
    monkeypatch.setattr("ampmigrate.apex.casts._outside", {})
    root = _outside_project(tmp_path, "maskrcnn_benchmark")
    [result] = run([root / "train.py"], _settings(fix=True))
    assert not result.changed
    finding = _amp303([result])["train.py"]
    assert finding.fix is None
    assert "imports `maskrcnn_benchmark` (line 3), a package outside this run" in finding.message
    assert "cast through `amp.float_function` in maskrcnn-benchmark's published" in (
        finding.message
    )


@pytest.mark.parametrize("casts", [True, False])
def test_a_package_installed_for_development_is_read_for_apex_casts(tmp_path, monkeypatch, casts):
    """A development install (the usual one for a package that builds its own kernels) is
    read: its layers' apex casts keep the script refused, naming the file; without them the
    script is rewritten."""
    monkeypatch.setattr("ampmigrate.apex.casts._outside", {})
    site = tmp_path / "checkout"
    (site / "mydetector").mkdir(parents=True)
    (site / "mydetector" / "__init__.py").write_text("")
    (site / "mydetector" / "layers.py").write_text(_OUTSIDE_LAYERS.format(
        imports="from apex import amp" if casts else "",
        decorator="@amp.float_function" if casts else "",
    ))  # fmt: skip
    monkeypatch.syspath_prepend(str(site))
    root = _outside_project(tmp_path, "mydetector")
    [result] = run([root / "train.py"], _settings(fix=True))
    assert result.changed is not casts
    if casts:
        message = _amp303([result])["train.py"].message
        assert "its `mydetector/layers.py` casts through apex" in message
    else:
        assert "apex" not in result.new_source.decode()


def test_a_script_at_a_literal_o2_does_not_hold_the_layers_it_reaches(tmp_path):
    """The 57th review (a detectron2 fork): an O2 script that imports the layers kept the O1
    trainer and the layers on apex, "not rewritten in this run". apex's cast decorators acted
    only once O1 patched torch's functions; under O2 they were plain calls, as `custom_fwd`
    is where autocast is off: the O2 script stays on apex (its level), the others move."""
    root = _copy(tmp_path)
    (root / "train_o2.py").write_text(
        (root / "train.py").read_text().replace('opt_level="O1"', 'opt_level="O2"')
        # another library's `init` is no apex initializer (rnnt's `dllogger.init(...)`)
        + "\n\ndef log(dllogger):\n    dllogger.init(backends=[])\n"
    )
    assert 'opt_level="O2"' in (root / "train_o2.py").read_text()
    found = _amp303(run(_files(root), _settings()))
    assert found["layers.py"].fix == "unsafe", found["layers.py"].message
    assert found["train.py"].fix == "unsafe"
    o2 = found["train_o2.py"].message
    assert "(1 blocker)" in o2 and "opt_level O2" in o2, o2
    assert "layers.py" not in o2


@pytest.mark.parametrize(
    "o1",
    [
        "from apex.amp import initialize as init_amp\n\ninit_amp(None, None, opt_level='O1')\n",
        "from apex import amp as AMP\n\nAMP.init()\n",
        "from apex import amp\n\nSTART = amp.initialize\n",
    ],
)
def test_a_script_that_may_also_initialize_at_o1_still_holds_the_layers(tmp_path, o1):
    """58a: an O2 script with a second path that initializes at O1 under another name (an
    alias of `initialize`, `init` on an aliased module) let the layers go to custom_fwd while
    it stayed on apex, whose O1 path then fed them float16 (`TypeError` in the kernel)."""
    root = _copy(tmp_path)
    (root / "train_o2.py").write_text(
        (root / "train.py").read_text().replace('opt_level="O1"', 'opt_level="O2"') + o1
    )
    found = _amp303(run(_files(root), _settings()))
    assert found["layers.py"].fix is None
    assert "train_o2.py is not rewritten in this run" in found["layers.py"].message


_NEVER_STEPPED = {
    "layer.py": (
        "import torch\nfrom apex import amp\n\n\nclass Head(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, 1)\n\n    @amp.float_function\n"
        "    def forward(self, x):\n        return self.fc(x)\n"
    ),
    "train.py": (
        "import torch\nfrom apex import amp\nfrom layer import Head\n\n\ndef main(fp16):\n"
        '    model = Head().to("cuda")\n'
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        '    model, opt = amp.initialize(model, opt, opt_level="O1" if fp16 else "O0")\n'
        "    for _ in range(3):\n"
        '        loss = model(torch.randn(2, 4, device="cuda")).sum()\n'
        "        opt.zero_grad()\n        with amp.scale_loss(loss, opt) as scaled:\n"
        "            scaled.backward()\n        opt.step()\n"
    ),
    "test.py": (
        "import torch\nfrom apex import amp\nfrom layer import Head\n\n\ndef main(fp16):\n"
        '    model = Head().to("cuda")\n'
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # never stepped\n"
        '    model, opt = amp.initialize(model, opt, opt_level="O1" if fp16 else "O0")\n'
        "    with torch.no_grad():\n"
        '        print(model(torch.randn(2, 4, device="cuda")).dtype)\n\n\n'
        'if __name__ == "__main__":\n    main(True)\n'
    ),
}


def test_a_script_whose_optimizer_is_never_stepped_moves_with_the_layers(tmp_path):
    """58b (a scene-graph project's retrieval test): the script gives `initialize` an
    optimizer it never steps nor scales with; with a cast layer beside it, the refusal said
    "the loss is scaled in another file" (false), and held the whole component on apex. It
    only casts: autocast around its forwards, no GradScaler, and the layers move with it."""
    for name, text in _NEVER_STEPPED.items():
        (tmp_path / name).write_text(text)
    results = run(_files(tmp_path), _settings(fix=True))
    assert sorted(Path(r.path).name for r in results if r.changed) == [
        "layer.py", "test.py", "train.py",
    ]  # fmt: skip
    for result in results:
        Path(result.path).write_bytes(result.new_source)
    test = (tmp_path / "test.py").read_text()
    assert "GradScaler" not in test and "amp.initialize" not in test
    for path in _files(tmp_path):
        path.write_text(path.read_text().replace('"cuda"', '"cpu"'))
    [(code, out, error)] = _runs([(tmp_path / "test.py", [], tmp_path, True)], tmp_path)
    assert code == 0, error
    assert "torch.float32" in out  # (the layer's forward runs with its inputs cast to float32)


def test_a_script_at_o2_that_calls_an_o1_helper_still_holds_the_layers(tmp_path):
    """59a's C2: the O2 script's other path initializes at O1 through a helper of another
    file (`setup_o1`), which does not import the layers: the script reaches them and runs
    them under apex O1, so they stay with it."""
    root = _copy(tmp_path)
    (root / "amp_utils.py").write_text(
        "from apex import amp\n\n\ndef setup_o1(model, optimizer):\n"
        '    return amp.initialize(model, optimizer, opt_level="O1")\n'
    )
    (root / "train_o2.py").write_text(
        "from amp_utils import setup_o1\n"
        + (root / "train.py").read_text().replace('opt_level="O1"', 'opt_level="O2"')
    )
    found = _amp303(run(_files(root), _settings()))
    assert found["layers.py"].fix is None
    assert "train_o2.py is not rewritten in this run" in found["layers.py"].message


@pytest.mark.parametrize(
    ("o2", "beside"),
    [
        # the optional-apex import: `amp = None` and `amp is not None` initialize nothing
        ('try:\n    from apex import amp\nexcept ImportError:\n    amp = None\n\n'
         'if amp is not None:\n    amp.initialize(None, None, opt_level="O2")\n', None),
        # a module with no apex whose class has an `initialize` method
        ('import meters\nfrom apex import amp\n\nmeters.make()\n'
         'amp.initialize(None, None, opt_level="O2")\n',
         "class Meter:\n    def initialize(self):\n        self.n = 0\n\n\n"
         "def make():\n    Meter().initialize()\n"),
    ],
)  # fmt: skip
def test_an_o2_script_with_a_guarded_import_or_a_meter_still_frees_the_layers(tmp_path, o2, beside):
    """60a's R1 and R2: the stricter reading of an O2 script held the layers for the
    ordinary `try: from apex import amp except ImportError: amp = None`, and for any
    `.initialize(` in a module it imports (a meter's)."""
    root = _copy(tmp_path)
    (root / "train_o2.py").write_text("from detector.layers import *\n" + o2)
    if beside is not None:
        (root / "meters.py").write_text(beside)
    found = _amp303(run(_files(root), _settings()))
    assert found["layers.py"].fix == "unsafe", found["layers.py"].message


@pytest.mark.parametrize(
    ("call", "shown"),
    [("kern(a=x, scale=2.0)", "no positional argument"), ("kern([x, x])", "`[x, x]` first")],
)
def test_a_wrapped_kernel_called_without_a_tensor_first_keeps_the_component(tmp_path, call, shown):
    """The 82nd review's c16/c17: `kern = amp.float_function(_kernel)` (a call, not a
    decorator) called by keyword only, or with a list first, from a model module that names
    no apex: `torch.amp.custom_fwd` sets `_dtype` on the first positional argument and raised
    (IndexError, AttributeError), with fp16 off too; apex cast those and ran."""
    (tmp_path / "layers.py").write_text(
        "import torch\nfrom apex import amp\n\n\ndef _kernel(a, scale=1.0):\n"
        "    return a * scale\n\n\nkern = amp.float_function(_kernel)\n"
    )
    (tmp_path / "model.py").write_text(
        "import torch\nfrom layers import kern\n\n\nclass Model(torch.nn.Linear):\n"
        f"    def forward(self, x):\n        x = super().forward(x)\n        return {call}\n"
    )
    (tmp_path / "train.py").write_text(
        "import torch\nfrom apex import amp\nfrom model import Model\n\n\ndef main(batches):\n"
        "    model = Model(4, 4)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        '    model, opt = amp.initialize(model, opt, opt_level="O1")\n'
        "    for x in batches:\n        loss = model(x).sum()\n"
        "        with amp.scale_loss(loss, opt) as scaled:\n            scaled.backward()\n"
        "        opt.step()\n"
    )
    results = run(_files(tmp_path), _settings(fix=True))
    assert not any(r.changed for r in results)
    message = _amp303(results)["layers.py"].message
    assert f"`kern` (layers.py:9) is a plain function, and model.py:8 calls it with {shown}" in (
        message
    ), message


def test_a_layer_module_a_script_loads_by_a_literal_name_moves_with_it(tmp_path):
    """The 82nd review's c05/c08: `importlib.import_module("layers")` made no import edge, so
    the layer module with `amp.float_function` was refused alone while the script that
    initializes was rewritten (its kernel then got float16, or apex was missing). A literal
    name is an import: the two move together."""
    (tmp_path / "layers.py").write_text(
        "import torch\nfrom apex import amp\n\n\n@amp.float_function\n"
        "def kernel(a):\n    return a * 2\n"
    )
    (tmp_path / "train.py").write_text(
        "import importlib\n\nimport torch\nfrom apex import amp\n\n"
        'layers = importlib.import_module("layers")\n\n\ndef main(batches):\n'
        "    model = torch.nn.Linear(4, 4)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        '    model, opt = amp.initialize(model, opt, opt_level="O1")\n'
        "    for x in batches:\n        loss = layers.kernel(model(x)).sum()\n"
        "        with amp.scale_loss(loss, opt) as scaled:\n            scaled.backward()\n"
        "        opt.step()\n"
    )
    results = run(_files(tmp_path), _settings(fix=True))
    changed = {Path(r.path).name for r in results if r.changed}
    assert {"layers.py", "train.py"} <= changed, changed
    layers = next(r for r in results if r.path.endswith("layers.py")).new_source.decode()
    assert "@torch.amp.custom_fwd(" in layers and "apex" not in layers, layers


def test_a_function_of_the_same_name_elsewhere_in_the_run_is_not_the_kernel(tmp_path):
    """The benchmark's run over many repositories: retinanet-examples' own `nms(*decoded)`
    was read as a call of maskrcnn-benchmark's `nms = amp.float_function(_C.nms)` and kept the
    whole component refused. A call counts where its file imports the layer module (directly
    or through a package)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "layers.py").write_text(
        "import torch\nfrom apex import amp\n\n\ndef _kernel(a, scale=1.0):\n"
        "    return a * scale\n\n\nkern = amp.float_function(_kernel)\n"
    )
    (project / "train.py").write_text(
        "import torch\nfrom apex import amp\nfrom layers import kern\n\n\ndef main(batches):\n"
        "    model = torch.nn.Linear(4, 4)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        '    model, opt = amp.initialize(model, opt, opt_level="O1")\n'
        "    for x in batches:\n        loss = kern(model(x)).sum()\n"
        "        with amp.scale_loss(loss, opt) as scaled:\n            scaled.backward()\n"
        "        opt.step()\n"
    )
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.py").write_text(  # (it names apex: it is among the run's files)
        "from apex import amp\n\n\ndef kern(*boxes):\n    return boxes\n\n\n"
        "def run(decoded):\n    return kern(*decoded)\n"
    )
    results = run(_files(tmp_path), _settings(fix=True))
    changed = {Path(r.path).name for r in results if r.changed}
    assert {"layers.py", "train.py"} <= changed, changed
