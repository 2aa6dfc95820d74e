"""AMP316: the apex requirement in dependency files, judged over the project's Python files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ampmigrate.catalog import all_rules
from ampmigrate.engine import Settings, run
from ampmigrate.requirements import apex_requirements, classify

RULES = tuple(all_rules().values())


@pytest.mark.parametrize(
    ("text", "origin"),
    [
        ("apex", "pypi"),
        ("Apex[x]>=0.9; python_version > '3'", "pypi"),
        ("apex @ git+https://github.com/NVIDIA/apex", "nvidia"),
        ("git+https://github.com/NVIDIA/apex.git@24.04.01#egg=apex", "nvidia"),
        ("https://github.com/NVIDIA/apex/archive/refs/heads/master.zip", "nvidia"),
        ("git+ssh://git@github.com/someone/apex", "source"),
        ("../third_party/apex/", "source"),
        ("apex-personal", None),
        ("apexpy>=1", None),
        ("git+https://github.com/huggingface/transformers#egg=transformers", None),
    ],
)
def test_what_a_requirement_installs(text, origin):
    assert classify(text) == origin


def test_requirements_txt_with_crlf_editable_options_and_comments():
    data = (
        b"--index-url https://example.org/simple\r\n"
        b"-r base.txt\r\n"
        b"# apex is built below\r\n"
        b"-e git+https://github.com/NVIDIA/apex.git#egg=apex  # noqa: AMP316\r\n"
        b"torch>=2.4\r\n"
    )
    [found] = apex_requirements("requirements.txt", data)
    assert (found.line, found.col, found.origin) == (4, 4, "nvidia")
    assert found.text == "git+https://github.com/NVIDIA/apex.git#egg=apex"


def test_setup_cfg_and_poetry_and_setup_py_positions():
    cfg = b"[metadata]\nname = x\n[options]\ninstall_requires =\n    torch\n    apex\n"
    assert [(r.line, r.col) for r in apex_requirements("setup.cfg", cfg)] == [(6, 5)]
    toml = b'[tool.poetry.dependencies]\npython = "^3.10"\napex = {git = "https://github.com/NVIDIA/apex"}\n'
    [poetry] = apex_requirements("pyproject.toml", toml)
    assert (poetry.line, poetry.origin) == (3, "nvidia")
    setup = b'from setuptools import setup\nREQ = ["torch", "apex"]\nsetup(install_requires=REQ)\n'
    [listed] = apex_requirements("setup.py", setup)
    assert (listed.line, listed.col, listed.end_col) == (2, 17, 23)


def _project(root: Path, files: dict[str, bytes]) -> list[Path]:
    paths = []
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        paths.append(path)
    return paths


def _run(paths: list[Path], fix: bool = False):
    settings = Settings(rules=RULES, fix=fix, unsafe_fixes=fix)
    return {Path(r.path).name: r for r in run(paths, settings, jobs=1)}


def test_reported_only_once_no_python_file_of_the_project_imports_apex(tmp_path):
    paths = _project(
        tmp_path,
        {
            "requirements.txt": b"torch\napex @ git+https://github.com/NVIDIA/apex\n",
            "train.py": b"from apex.optimizers import FusedAdam\nopt = FusedAdam(params)\n",
        },
    )
    assert not _run(paths)["requirements.txt"].diagnostics  # apex still imported
    fixed = _run(paths, fix=True)  # the fix removes the import: the line is dead now
    [finding] = fixed["requirements.txt"].diagnostics
    assert finding.code == "AMP316" and (finding.line, finding.col) == (2, 1)
    assert "NVIDIA apex, built from its repository" in finding.message
    assert "none of the 1 Python file" in finding.message
    assert not fixed["requirements.txt"].changed


def test_a_pypi_pin_is_reported_while_apex_is_still_imported(tmp_path):
    """unmasked_teacher's `apex==0.9.10dev` (the 47th review): while a file still imports
    NVIDIA apex (FusedLAMB has no torch counterpart), the pin got no finding, yet it installs
    PyPI's unrelated package and never installed the apex those files need. Reported, naming
    them; once they no longer import apex, the finding says to remove the line."""
    paths = _project(
        tmp_path,
        {
            "requirements.txt": b"torch\napex==0.9.10dev\n",
            "train.py": b"from apex.optimizers import FusedLAMB\nopt = FusedLAMB(params)\n",
        },
    )
    [finding] = _run(paths)["requirements.txt"].diagnostics
    assert finding.code == "AMP316" and finding.line == 2
    assert "an unrelated 2013 Pyramid toolkit" in finding.message
    assert "while 1 Python file under" in finding.message and "(`train.py`)" in finding.message
    assert "build NVIDIA apex from source where they run" in finding.message


def test_a_file_the_run_did_not_check_still_counts(tmp_path):
    req, _ = _project(
        tmp_path,
        {
            "requirements.txt": b"apex @ git+https://github.com/NVIDIA/apex\n",
            "other/model.py": b"import amp_C\n",
        },
    )
    assert not _run([req])["requirements.txt"].diagnostics  # a pre-commit run on one file


def test_noqa_and_per_file_ignores(tmp_path):
    paths = _project(tmp_path, {"requirements.txt": b"apex  # noqa: AMP316\n"})
    assert not _run(paths)["requirements.txt"].diagnostics
    ignored = run(paths, Settings(rules=RULES), jobs=1, ignored_codes=lambda p: {"AMP316"})
    assert not ignored[0].diagnostics and not ignored[0].error


def test_a_non_utf8_requirements_file_is_a_one_line_error(tmp_path):
    paths = _project(tmp_path, {"requirements.txt": b"torch\r\n# caf\xe9\r\napex\r\n"})
    [result] = run(paths, Settings(rules=RULES), jobs=1)
    assert result.error is not None and "\n" not in result.error
    assert "line 2" in result.error and "UTF-8" in result.error


def test_a_run_without_a_dependency_file_does_not_load_the_rule(tmp_path):
    (tmp_path / "a.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    (tmp_path / "b.py").write_text("x = 1\n")
    code = (
        "import sys; from pathlib import Path; from ampmigrate.catalog import all_rules; "
        "from ampmigrate.engine import Settings, run; "
        f"run([Path({str(tmp_path / 'a.py')!r}), Path({str(tmp_path / 'b.py')!r})], "
        "Settings(rules=tuple(all_rules().values())), jobs=1); "
        "print('ampmigrate.requirements' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
