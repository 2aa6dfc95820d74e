"""apex's amp taken through a project module's star export (``from library import *``, where
library.py runs ``from apex import amp``): the scripts are planned as if they imported it
themselves, and the exporter's import goes in the run that rewrites every script using it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_apex_modules import (
    _TRAINER,
    _amp303,
    _files,
    _rewritten_exactly,
    _runs_beside_original,
    _settings,
)

from ampmigrate.engine import run

from conftest import FIXTURES

STAR = FIXTURES / "apex" / "star_export"
REFUSED = "does not follow apex's amp through another module"


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(STAR / "before", root)
    return root


def test_the_scripts_and_their_exporter_are_rewritten_exactly_and_once(tmp_path):
    _rewritten_exactly(tmp_path, STAR, ["finetune.py", "library.py", "train.py"])


def test_check_offers_the_scripts_and_says_the_export_goes_with_them(tmp_path):
    results = run(_files(_project(tmp_path)), _settings())
    found = _amp303(results)
    assert found["train.py"].fix == found["finetune.py"].fix == "unsafe"
    library = found["library.py"]
    assert library.fix is None
    assert "other modules use `amp` through it (finetune.py:14" in library.message
    assert "their AMP303 rewrite, offered in this run, takes apex's amp from apex" in (
        library.message
    )


def test_without_unsafe_fixes_nothing_changes(tmp_path):
    settings = _settings(fix=True)
    results = run(_files(_project(tmp_path)), settings.__class__(**{
        **settings.__dict__, "unsafe_fixes": False
    }))  # fmt: skip
    assert not any(r.changed for r in results)
    assert "offered in this run" in _amp303(results)["library.py"].message


def test_a_script_left_on_apex_keeps_the_export(tmp_path):
    """finetune.py's rewrite is suppressed: it still reads `amp` through library.py, whose
    import stays (train.py, which no longer needs it, is rewritten)."""
    root = _project(tmp_path)
    script = root / "finetune.py"
    script.write_text(
        script.read_text().replace('opt_level="O1")', 'opt_level="O1")  # noqa: AMP303')
    )
    results = run(_files(root), _settings(fix=True))
    changed = sorted(Path(r.path).name for r in results if r.changed)
    assert changed == ["train.py"]
    message = _amp303(results)["library.py"].message
    assert "other modules use `amp` through it (finetune.py:14" in message
    assert "which this run leaves on apex" in message


def test_a_script_outside_the_run_keeps_the_export(tmp_path):
    root = _project(tmp_path)
    results = run([root / "library.py", root / "train.py"], _settings(fix=True))
    assert sorted(Path(r.path).name for r in results if r.changed) == ["train.py"]
    assert "finetune.py:14" in _amp303(results)["library.py"].message


UNCERTAIN = [
    # amp may be None: planned as apex's module, the script's tests of it would lie
    ("library.py", "from apex import amp\n",
     "try:\n    from apex import amp\nexcept ImportError:\n    amp = None\n"),
    # the star import does not give amp at all
    ("library.py", "import torch\n",
     '__all__ = ["DEVICE", "make_model", "batches"]\nimport torch\n'),
    # bound again after the import
    ("library.py", "\n\ndef make_model", "\namp = None\n\n\ndef make_model"),
    # a later star import may bind it in the script
    ("train.py", "from library import *\n", "from library import *\nfrom helpers import *\n"),
]  # fmt: skip


@pytest.mark.parametrize(("file", "old", "new"), UNCERTAIN)
def test_an_uncertain_binding_keeps_the_refusal(tmp_path, file, old, new):
    root = _project(tmp_path)
    (root / "helpers.py").write_text("amp = None\n")
    target = root / file
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new, 1))
    results = run(_files(root), _settings(fix=True))
    assert not {Path(r.path).name for r in results if r.changed} & {"train.py", "library.py"}
    assert REFUSED in _amp303(results)["train.py"].message


def test_a_script_that_binds_the_name_itself_is_no_user(tmp_path):
    """train.py binds `amp = None` itself: its calls are not apex's (no finding), and the
    export goes with finetune.py's rewrite."""
    root = _project(tmp_path)
    script = root / "train.py"
    script.write_text(
        script.read_text().replace("def train(fp16):", "amp = None\n\n\ndef train(fp16):")
    )
    results = run(_files(root), _settings(fix=True))
    assert sorted(Path(r.path).name for r in results if r.changed) == ["finetune.py", "library.py"]
    assert "train.py" not in _amp303(results)


@pytest.mark.torch
def test_migrated_scripts_train_like_the_original(tmp_path, stub):
    """The O0 stand-in for apex against the migration: the same losses, with and without
    `--fp16`; with "cuda" -> "cpu" the forward runs in float16 under `--fp16`."""
    runs = [("train.py", []), ("train.py", ["--fp16"]), ("finetune.py", ["--fp16"])]
    results = _runs_beside_original(tmp_path, stub, STAR, runs)
    assert "step 5 loss" in results[0][1]
    assert "forward dtypes: ['torch.float32']" in results[2][1]
    assert "forward dtypes: ['torch.float16']" in results[5][1]
    assert "forward dtypes: ['torch.float16']" in results[8][1]


@pytest.mark.parametrize("imports", ["from .utils import *", "from .common import *"])
def test_a_package_star_export_is_followed_through_modules(tmp_path, imports):
    """`from .utils import *` in a package, and through a module that stars utils itself."""
    root = tmp_path / "project"
    files = {
        "pkg/__init__.py": "",
        "pkg/utils.py": "import torch\nfrom apex import amp\n",
        "pkg/common.py": "from .utils import *\n",
        "pkg/trainer.py": _TRAINER.format(imports=imports),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    results = run(_files(root), _settings(fix=True))
    changed = {Path(r.path).name: r.new_source.decode() for r in results if r.changed}
    assert sorted(changed) == ["trainer.py", "utils.py"]
    assert changed["utils.py"] == "import torch\n"
    assert changed["trainer.py"].startswith(f"{imports}\nimport torch\n\n\ndef train(")
    assert 'scaler = torch.amp.GradScaler("cuda", enabled=fp16)' in changed["trainer.py"]


@pytest.mark.parametrize(
    "other",
    [
        "from library import *\n\n\ndef save():\n    return amp.state_dict()\n",
        "from library import amp\n\n\ndef save():\n    return amp.state_dict()\n",
        "import library\n\n\ndef save():\n    return library.amp.state_dict()\n",
        # text that mentions `amp.initialize(` is no call of it (56b)
        "from library import *\n\n# train.py calls amp.initialize(model, opt) first\n"
        "NOTE = 'amp.initialize('\n\n\ndef save():\n    return amp.state_dict()\n",
    ],
)
def test_a_module_reading_the_same_amp_state_keeps_the_script_refused(tmp_path, other):
    """The 56th review: another module reads apex's amp through the same export without
    initializing it (`other.save()` saves `amp.state_dict()` after the script trained). It
    relied on the script's `initialize`: the script alone rewritten, it raised there."""
    root = _project(tmp_path)
    (root / "other.py").write_text(other)
    results = run(_files(root), _settings(fix=True))
    assert sorted(Path(r.path).name for r in results if r.changed) == []
    message = _amp303(results)["train.py"].message
    assert "`amp` is apex's amp taken through library.py's star export, and other.py " in message
    assert "without initializing apex amp itself" in message


def test_a_module_taking_amp_from_the_script_keeps_it_refused(tmp_path):
    """The script is itself star-exported, and its importer reads `amp` through it."""
    root = _project(tmp_path)
    (root / "report.py").write_text("from finetune import *\n\nprint(amp.state_dict())\n")
    results = run(_files(root), _settings(fix=True))
    assert "finetune.py" not in {Path(r.path).name for r in results if r.changed}
    message = _amp303(results)["finetune.py"].message
    assert "and report.py (line 3) takes it from this file without initializing" in message
