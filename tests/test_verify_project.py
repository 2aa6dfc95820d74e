"""`ampmigrate verify` on whole projects: the mirror holds the project root, every module the run
imports is migrated however it is reached, and the verdict says what was exercised."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

# Two fixable findings (the import, the autocast call), fp16 CPU autocast and a CPU GradScaler.
TRAINER = """
import torch
from torch.cpu.amp import GradScaler


def train(steps=50):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler(init_scale=2.0**4, growth_interval=2)
    x = torch.randn(8, 4)
    y = x.sum(dim=1, keepdim=True)
    for _ in range(steps):
        opt.zero_grad()
        with torch.cpu.amp.autocast(dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
"""


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "ampmigrate", *args],
        capture_output=True, text=True, check=False, cwd=cwd,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})},
    )  # fmt: skip


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text).lstrip())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A package + tools/ layout, its root marked by pyproject.toml (no git)."""
    root = tmp_path / "proj"
    write(
        root,
        {
            "pyproject.toml": "[project]\nname = 'mypkg'\nversion = '0'\n",
            "mypkg/__init__.py": "",
            "mypkg/trainer.py": TRAINER,
            "tools/train.py": """
                import os
                import sys

                sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
                from mypkg.trainer import train

                train()
            """,
            "tools/train_installed.py": """
                from mypkg.trainer import train

                train()
            """,
        },
    )
    return root


def test_package_reached_through_a_sys_path_edit_is_migrated_and_counted(project):
    result = run_cli("verify", str(project / "tools" / "train.py"), "--steps", "4")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "migration: 2 fixes (AMP101: 1, AMP102: 1) in 1 of 3 project files" in result.stdout
    assert (
        "MATCH: 4 steps bit-for-bit; 2 of 2 rewritten sites ran; "
        "autocast enabled (float16, cpu) in 4 steps, GradScaler active"
    ) in result.stdout
    assert (project / "mypkg" / "trainer.py").read_text().lstrip() == TRAINER.lstrip()


def test_package_on_pythonpath_is_migrated_not_a_vacuous_match(project, tmp_path):
    # The script's own directory does not hold the package; the root is on PYTHONPATH, which
    # names the original: the copy must import the mirror's migrated files instead, and the
    # rewritten sites in them must run (coverage is measured on the mirror's files only).
    result = run_cli(
        "verify", str(project / "tools" / "train_installed.py"), "--steps", "3",
        "--report", str(tmp_path / "report"),
        env={"PYTHONPATH": str(project)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "migration: 2 fixes" in result.stdout
    assert "2 of 2 rewritten sites ran" in result.stdout
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["verdict"] == "match" and summary["exit_status"] == 0
    assert summary["migration"]["changed"] == ["mypkg/trainer.py"]
    assert summary["coverage"] == {
        "kind": "rewritten sites", "total": 2, "ran": 2, "not_run": [],
        "ran_sites": ["AMP102 mypkg/trainer.py:9", "AMP101 mypkg/trainer.py:14"],
    }  # fmt: skip
    assert summary["precision"]["migrated"]["autocast"] == ["float16, cpu"]
    assert summary["precision"]["migrated"]["autocast_steps"] == 3


def test_editable_install_and_a_dynamic_import_reach_the_migrated_copy(project, tmp_path):
    # An editable install's finder maps `mypkg` to the original root, and the script imports it
    # by a computed name, so only the run tells which modules it uses.
    site = tmp_path / "site"
    write(
        site,
        {
            "sitecustomize.py": f"""
                import importlib.abc
                import importlib.util
                import sys

                class EditableFinder(importlib.abc.MetaPathFinder):
                    def find_spec(self, name, path=None, target=None):
                        if name != "mypkg":
                            return None
                        package = {str(project / "mypkg")!r}
                        return importlib.util.spec_from_file_location(
                            name, package + "/__init__.py", submodule_search_locations=[package]
                        )

                sys.meta_path.append(EditableFinder())
            """
        },
    )
    write(
        project,
        {
            "tools/train_dynamic.py": """
                import importlib

                importlib.import_module("mypkg." + "trainer").train()
            """
        },
    )
    result = run_cli(
        "verify", str(project / "tools" / "train_dynamic.py"), "--steps", "3",
        env={"PYTHONPATH": str(site)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "migration: 2 fixes (AMP101: 1, AMP102: 1) in 1 of 3 project files" in result.stdout
    assert "MATCH: 3 steps bit-for-bit; 2 of 2 rewritten sites ran" in result.stdout


def test_script_with_nothing_to_migrate_is_inconclusive(tmp_path):
    script = tmp_path / "modern.py"
    modern = (
        TRAINER.replace("torch.cpu.amp", "torch.amp")
        .replace("GradScaler(init", 'GradScaler("cpu", init')
        .replace("autocast(dtype", 'autocast("cpu", dtype')
    )
    write(tmp_path, {"modern.py": modern + "\ntrain()\n"})
    result = run_cli("verify", str(script), "--steps", "2")
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "INCONCLUSIVE: nothing was migrated: modern.py hold(s) nothing `fix` changes with these "
        "settings"
    ) in result.stdout
    assert "MATCH" not in result.stdout


def test_rewritten_sites_that_never_run_are_inconclusive(tmp_path):
    # The only deprecated call sits in a function the training never calls.
    write(
        tmp_path,
        {
            "unused_eval.py": """
                import torch

                def evaluate(model, x):
                    with torch.cpu.amp.autocast():
                        return model(x)

                model = torch.nn.Linear(2, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for _ in range(10):
                    opt.zero_grad()
                    model(torch.ones(3, 2)).sum().backward()
                    opt.step()
            """
        },
    )
    result = run_cli("verify", str(tmp_path / "unused_eval.py"), "--steps", "2")
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "INCONCLUSIVE: both sides trained alike for 2 steps, but none of the 1 rewritten sites "
        "ran, so the migration was not exercised: AMP101 unused_eval.py:4"
    ) in result.stdout


def test_float32_only_match_is_qualified_and_require_amp_refuses_it(tmp_path):
    write(
        tmp_path,
        {
            "off.py": """
                import torch
                from torch.cpu.amp import GradScaler

                model = torch.nn.Linear(2, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                scaler = GradScaler(enabled=False)
                for _ in range(10):
                    opt.zero_grad()
                    with torch.cpu.amp.autocast(enabled=False):
                        loss = model(torch.ones(3, 2)).sum()
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    scaler.update()
            """
        },
    )
    result = run_cli("verify", str(tmp_path / "off.py"), "--steps", "3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MATCH: 3 steps bit-for-bit; 2 of 2 rewritten sites ran; float32 path only" in (
        result.stdout
    )
    # 6.: the script switched it off, not torch
    assert "note: the script disabled cpu GradScaler itself (enabled=False at off.py:6)" in (
        result.stdout
    )
    assert "note: the script disabled cpu autocast itself (enabled=False at off.py:9)" in (
        result.stdout
    )
    assert "torch disabled" not in result.stdout
    required = run_cli("verify", str(tmp_path / "off.py"), "--steps", "3", "--require-amp")
    assert required.returncode == 2
    assert "float32 path only" in required.stdout
    assert "--require-amp: no autocast region or GradScaler was enabled" in required.stderr


def test_torch_disabling_cuda_amp_is_named_as_torch(cli):
    from conftest import FIXTURES

    result = cli("verify", str(FIXTURES / "loops" / "cuda_api_on_cpu.py"), "--steps", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "float32 path only" in result.stdout
    assert (
        "note: torch disabled the script's cuda autocast (fixtures/loops/cuda_api_on_cpu.py:17): "
        "no CUDA device here"
    ) in result.stdout
    assert "the script disabled" not in result.stdout


def test_a_module_missing_from_the_copy_is_an_error_not_a_mismatch(tmp_path):
    # Only the migrated copy cannot import it (its environment, not the migration).
    write(
        tmp_path,
        {
            "copy_only.py": """
                import torch

                if "ampmigrate-verify-" in __file__ and "/migrated/" in __file__:
                    import lost_in_the_copy
                model = torch.nn.Linear(2, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                scaler = torch.cpu.amp.GradScaler()
                for _ in range(10):
                    opt.zero_grad()
                    scaler.scale(model(torch.ones(3, 2)).sum()).backward()
                    scaler.step(opt)
                    scaler.update()
            """
        },
    )
    result = run_cli("verify", str(tmp_path / "copy_only.py"), "--steps", "2")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "MISMATCH" not in result.stdout
    first = result.stderr.splitlines()[0]
    assert first.startswith("ampmigrate verify: error: the migrated side cannot import ")
    assert "'lost_in_the_copy'" in first
