"""The pieces of `verify` that need no training run: project root, mirror, site mapping,
precision wording, the environment-failure classification."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from ampmigrate.findings import Diagnostic
from ampmigrate.harness.coverage import WHOLE_LINE, Span, changed_sites, fixed_sites, measure
from ampmigrate.harness.project import COPY_LIMIT, build_mirror, find_root, guess_imports
from ampmigrate.harness.verify import (
    Side,
    _environment_failure,
    describe_precision,
    precision_notes,
)


def test_project_root_git_then_marker_then_script_directory(tmp_path):
    plain = tmp_path / "plain" / "tools"
    plain.mkdir(parents=True)
    assert find_root(plain / "train.py") == plain.resolve()
    (tmp_path / "plain" / "setup.cfg").write_text("")
    assert find_root(plain / "train.py") == (tmp_path / "plain").resolve()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert find_root(plain / "train.py") == tmp_path.resolve()


def test_mirror_writes_the_migrated_files_and_links_the_rest(tmp_path):
    root = tmp_path / "root"
    names = ("pkg/a.py", "pkg/b.py", "pkg/sub/c.py", "data/x.bin", "tools/train.py", ".venv/l.py")
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    mirror = tmp_path / "mirror"
    build_mirror(root, mirror, {Path("pkg/a.py"): b"migrated", Path("tools/train.py"): b"t"})
    assert (mirror / "pkg/a.py").read_bytes() == b"migrated"
    assert not (mirror / "pkg/a.py").is_symlink() and not (mirror / "pkg").is_symlink()
    # small files are copies (a script that rewrites one rewrites the copy), large ones links
    assert not (mirror / "pkg/b.py").is_symlink()
    assert (mirror / "pkg/b.py").read_text() == "pkg/b.py"
    # directories are real (what the run writes stays in the copy), environments are links
    assert not (mirror / "data").is_symlink() and not (mirror / "data/x.bin").is_symlink()
    assert os.readlink(mirror / ".venv") == str(root / ".venv")
    (root / "data/big.bin").write_bytes(b"\0" * (COPY_LIMIT + 1))
    build_mirror(root, tmp_path / "again", {})
    assert os.readlink(tmp_path / "again/data/big.bin") == str(root / "data/big.bin")
    assert (root / "pkg/a.py").read_text() == "pkg/a.py"
    # past the budget, directories are linked whole
    small = tmp_path / "small"
    build_mirror(root, small, {Path("pkg/a.py"): b"m"}, budget=3)
    assert os.readlink(small / "tools") == str(root / "tools")
    assert not (small / "pkg").is_symlink()


def test_import_guess_follows_relative_sys_path_layouts(tmp_path):
    files = {
        "tools/train.py": "import sys\nfrom pkg.model import Net\nimport torch\n",
        "pkg/__init__.py": "from . import util\n",
        "pkg/model.py": "from .util import helper\n",
        "pkg/util.py": "",
        "pkg/unused.py": "",
        ".venv/lib/pkg2.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert guess_imports(tmp_path / "tools/train.py", tmp_path.resolve()) == {
        "tools/train.py", "pkg/__init__.py", "pkg/model.py", "pkg/util.py",
    }  # fmt: skip


def test_fixed_sites_follow_the_lines_a_fix_moved():
    original = textwrap.dedent(
        """\
        import torch
        from torch.cuda.amp import GradScaler

        scaler = GradScaler(
            init_scale=4.0,
        )
        with torch.cuda.amp.autocast():
            pass
        """
    ).encode()
    new = textwrap.dedent(
        """\
        import torch

        scaler = torch.amp.GradScaler(
            "cuda",
            init_scale=4.0,
        )
        with torch.amp.autocast("cuda"):
            pass
        """
    ).encode()
    found = [  # the calls, as the rules report them (columns 1-based)
        Diagnostic("", 4, 10, 6, 2, "AMP102", "m", "safe"),
        Diagnostic("", 7, 6, 7, 31, "AMP101", "m", "safe"),
    ]
    sites = fixed_sites(original, new, found, "/m/t.py", "t.py")
    assert [(s.label, s.spans) for s in sites] == [
        ("AMP102 t.py:4", (Span(3, 9, 6, 1),)),  # the rewritten call, over its lines
        ("AMP101 t.py:7", (Span(7, 5, 7, 31),)),  # the call in the with header, not its body
    ]
    coverage = measure("rewritten sites", sites, {"/m/t.py": [[3, 9, 6, 1]]})
    assert coverage.describe() == "1 of 2 rewritten sites ran"
    assert coverage.to_dict()["not_run"] == ["AMP101 t.py:7"]


def test_a_site_is_the_rewritten_node_so_each_arm_of_a_conditional_is_its_own():
    original = (
        b"import torch\n"
        b"ctx = (torch.cpu.amp.autocast(dtype=torch.bfloat16) if c\n"
        b"       else torch.cuda.amp.autocast())\n"
    )
    new = (
        b"import torch\n"
        b'ctx = (torch.amp.autocast("cpu", dtype=torch.bfloat16) if c\n'
        b'       else torch.amp.autocast("cuda"))\n'
    )
    found = [
        Diagnostic("", 2, 8, 2, 52, "AMP101", "m", "safe"),
        Diagnostic("", 3, 13, 3, 37, "AMP101", "m", "safe"),
    ]
    first, second = fixed_sites(original, new, found, "/m/t.py", "t.py")
    assert first.spans == (Span(2, 7, 2, 54),) and second.spans == (Span(3, 12, 3, 38),)
    # instruction positions: the condition and the first arm ran, the second arm did not
    hits = {"/m/t.py": [list(first.spans[0])]}
    assert measure("rewritten sites", [first, second], hits).describe() == (
        "1 of 2 rewritten sites ran"
    )
    assert Span(2, 7, 2, 54).holds((2, 2, 7, 24)) and not Span(2, 7, 2, 54).holds((2, 2, 58, 59))


def test_changed_sites_keep_amp_hunks_that_can_run():
    old = b"import os\nfrom torch.cuda.amp import autocast\nx = 1\nlr = 0.1\ny = 2\ns = f(2)\n"
    new = b"import os\nx = 1\nlr = 0.2\ny = 2\ns = f(3)\n"
    # the deleted import cannot run; lr is no AMP line; line 5 had a finding at REV
    sites = changed_sites(old, new, {6}, "/w/t.py", "t.py")
    assert [(s.label, s.lines) for s in sites] == [("t.py:5", (5,))]
    assert sites[0].spans == (Span(5, 0, 5, WHOLE_LINE),)  # changed lines: whole lines
    # --migrated: every hunk that can run
    assert [s.label for s in changed_sites(old, new, None, "/w/t.py", "t.py")] == [
        "t.py:3", "t.py:5",
    ]  # fmt: skip


def _entry(kind, requested, enabled, device="cuda", where="train.py:3"):
    by = "script" if not requested else "torch"
    return {"kind": kind, "device": device, "dtype": "float16", "requested": requested,
            "enabled": enabled, "where": where, "by": by}  # fmt: skip


def test_precision_wording_and_who_disabled_it():
    on = {"autocast": ["float16, cpu"], "autocast_steps": 5, "grad_scaler": True, "disabled": []}
    assert describe_precision(on) == "autocast enabled (float16, cpu) in 5 steps, GradScaler active"
    off = {"autocast": [], "autocast_steps": 0, "grad_scaler": False}
    mine = {**off, "disabled": [_entry("autocast", False, False, "cpu", "t.py:9")]}
    theirs = {
        **off,
        "disabled": [_entry("GradScaler", True, False), _entry("autocast", False, False, "cpu")],
    }
    assert describe_precision(mine) == "float32 path only"
    notes = precision_notes([mine, theirs])
    assert notes[0] == "the script disabled cpu autocast itself (enabled=False at t.py:9)"
    assert notes[1].startswith("torch disabled the script's cuda GradScaler (train.py:3): no CUDA")
    assert len(notes) == 2  # the second side's cpu autocast note is the first side's


def test_only_a_missing_non_torch_module_is_an_environment_failure():
    side = Side("migrated", Path("t.py"))
    side.output = "Traceback...\nModuleNotFoundError: No module named 'mypkg.data'\n"
    assert "cannot import 'mypkg.data'" in str(_environment_failure(side, "the copy"))
    side.output = "ModuleNotFoundError: No module named 'torch.amp.nothing'\n"
    assert _environment_failure(side, "the copy") is None
    side.output = "ImportError: cannot import name 'GradScaler' from 'torch.amp'\n"
    assert _environment_failure(side, "the copy") is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--against", "HEAD", "--migrated", "x.py"],
            "--against and --migrated exclude each other",
        ),
        (["--against", "HEAD", "--compare-fp32"], "--compare-fp32 does not take --against"),
    ],
)
def test_against_excludes_other_modes(cli, args, message):
    result = cli("verify", "train.py", *args)
    assert result.returncode == 2 and message in result.stderr
