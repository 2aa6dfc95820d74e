"""[tool.ampmigrate] in pyproject.toml, and command-line options over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import OPEN_LEVEL

DEPRECATED = (
    "import torch\n\nscaler = torch.cuda.amp.GradScaler()\ndtype = torch.get_autocast_gpu_dtype()\n"
)


def project(tmp_path: Path, config: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        f"[project]\nname = 'x'\n\n[tool.ampmigrate]\n{config}"
    )
    for name in ("src/train.py", "src/legacy_io.py", "tests/test_train.py"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(DEPRECATED)
    return tmp_path


def codes(stdout: str) -> list[tuple[str, str]]:
    return [(line.split(":")[0], line.split()[1]) for line in stdout.splitlines()]


def test_select_and_ignore_from_config(cli, tmp_path):
    project(tmp_path, 'select = ["AMP1"]\nignore = ["AMP104"]\n')
    result = cli("check", "src", cwd=tmp_path)
    assert {c for _, c in codes(result.stdout)} == {"AMP102"}
    # CLI options override the configuration
    result = cli("check", "--ignore", "AMP102", "src", cwd=tmp_path)
    assert {c for _, c in codes(result.stdout)} == {"AMP104"}


def test_config_is_found_from_a_subdirectory(cli, tmp_path):
    project(tmp_path, 'ignore = ["AMP102"]\n')
    result = cli("check", ".", cwd=tmp_path / "src")
    assert {c for _, c in codes(result.stdout)} == {"AMP104"}


def test_exclude_and_extend_exclude(cli, tmp_path):
    project(tmp_path, 'extend-exclude = ["tests", "legacy_*"]\n')
    assert {f for f, _ in codes(cli("check", ".", cwd=tmp_path).stdout)} == {"src/train.py"}
    # a file named explicitly is checked even when excluded
    assert cli("check", "src/legacy_io.py", cwd=tmp_path).returncode == 1


def test_per_file_ignores_apply_to_fix_too(cli, tmp_path):
    project(tmp_path, '[tool.ampmigrate.per-file-ignores]\n"tests/*" = ["AMP102", "AMP104"]\n')
    result = cli("fix", ".", cwd=tmp_path)
    assert result.returncode == 0
    assert (tmp_path / "tests/test_train.py").read_text() == DEPRECATED
    assert "torch.cuda.amp" not in (tmp_path / "src/train.py").read_text()


def test_target_torch_makes_newer_fixes_unsafe(cli, tmp_path):
    project(tmp_path, 'target-torch = "2.3"\n')
    result = cli("fix", "src/train.py", cwd=tmp_path)
    assert result.returncode == 1
    text = (tmp_path / "src/train.py").read_text()
    assert 'torch.amp.GradScaler("cuda")' in text  # needs 2.3: still safe
    assert "torch.get_autocast_gpu_dtype()" in text  # needs 2.4: now unsafe
    assert "(the fix needs torch >= 2.4; target-torch is 2.3)" in result.stdout
    assert cli("fix", "--unsafe-fixes", "src/train.py", cwd=tmp_path).returncode == 0


def test_output_format_from_config(cli, tmp_path):
    project(tmp_path, 'output-format = "github"\n')
    assert cli("check", "src/train.py", cwd=tmp_path).stdout.startswith("::error ")
    concise = cli("check", "--output-format", "concise", "src/train.py", cwd=tmp_path).stdout
    assert concise.startswith("src/train.py:3:10: AMP102 [*] ")


def test_unknown_key_is_a_clear_error(cli, tmp_path):
    project(tmp_path, 'selct = ["AMP1"]\n')
    result = cli("check", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown key(s) in [tool.ampmigrate]: selct" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_values_are_clear_errors(cli, tmp_path):
    project(tmp_path, 'target-torch = "two"\n')
    result = cli("check", ".", cwd=tmp_path)
    assert result.returncode == 2 and "target-torch must look like '2.4'" in result.stderr


def test_explicit_config_file(cli, tmp_path):
    project(tmp_path, "")
    other = tmp_path / "strict.toml"
    other.write_text('[tool.ampmigrate]\nselect = ["AMP104"]\n')
    result = cli("check", "--config", str(other), "src/train.py", cwd=tmp_path)
    assert {c for _, c in codes(result.stdout)} == {"AMP104"}


KERAS2_CODE = """\
import tensorflow as tf

opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
scaled = opt.get_scaled_loss(loss)
"""


def test_target_keras_from_config_and_command_line(cli, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.ampmigrate]\ntarget-keras = 2\n")
    (tmp_path / "train.py").write_text(KERAS2_CODE)
    assert cli("check", "train.py", cwd=tmp_path).returncode == 0  # valid Keras 2 code
    result = cli("check", "--target-keras", "3", "train.py", cwd=tmp_path)
    assert result.returncode == 1 and "AMP406" in result.stdout
    (tmp_path / "pyproject.toml").write_text("[tool.ampmigrate]\ntarget-keras = 4\n")
    result = cli("check", "train.py", cwd=tmp_path)
    assert result.returncode == 2 and "target-keras must be 2 or 3" in result.stderr


def _declared_project(tmp_path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "src").mkdir()
    (tmp_path / "src/train.py").write_text(DEPRECATED)


@pytest.mark.parametrize(
    "files",
    [
        {"pyproject.toml": "[project]\nname = 'x'\ndependencies = ['numpy', 'torch>=2.1,<3']\n"},
        {
            "pyproject.toml": "[project]\nname = 'x'\n[project.optional-dependencies]\n"
            "gpu = ['torch~=2.1.0']\n"
        },
        {"requirements.txt": "numpy\ntorch >= 2.1  # CUDA 11.8 builds\n"},
        {"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    torch>=2.1\n"},
        {
            "setup.py": "from setuptools import setup\nREQS = ['torch>=2.1']\n"
            "setup(name='x', install_requires=REQS)\n"
        },
        # several declarations: the project runs on the lowest
        {"requirements.txt": "torch==2.1.2\n", "requirements-dev.txt": "torch>=2.5\n"},
        # a requirements/ folder alone (InternLM's `requirements/torch.txt`, the 47th review:
        # the floor was not read, and a fix needing torch 2.4 was written for torch 1.13)
        {"requirements/torch.txt": "torch==2.1.0\n", "requirements/runtime.txt": "numpy\n"},
        # Poetry's table and a conda environment file (the 76th review: AdamW was written for
        # a project on `torch = "^1.0"` or `pytorch=1.0.1`)
        {
            "pyproject.toml": "[tool.poetry]\nname = 'x'\n[tool.poetry.dependencies]\n"
            "python = '^3.8'\ntorch = '^2.1'\n"
        },
        {
            "pyproject.toml": "[tool.poetry.dependencies]\n"
            "torch = [{version = '>=2.1,<3', markers = 'x'}, {version = '~2.2'}]\n"
        },
        {"pyproject.toml": "[tool.poetry.dependencies]\ntorch = {version = '2.1.0'}\n"},
        {"environment.yml": "name: x\ndependencies:\n  - python=3.9\n  - pytorch=2.1.0\n"},
        {"environment.yaml": "dependencies:\n  - pytorch::pytorch>=2.1  # cuda\n"},
        {"environment.yml": "dependencies:\n  - pip\n  - pip:\n    - torch>=2.1\n"},
        # the 77th review: groups, dev-dependencies, `pytorch-cpu`, quoted and spaced specs
        {"pyproject.toml": "[tool.poetry.group.train.dependencies]\ntorch = '^2.1'\n"},
        {"pyproject.toml": "[tool.poetry.dev-dependencies]\ntorch = '^2.1'\n"},
        {"environment.yml": "dependencies:\n  - pytorch-cpu=2.1.0\n  - pytorch-cuda=11.8\n"},
        {"environment.yml": 'dependencies:\n  - "pytorch=2.1"\n'},
        {"environment.yml": "dependencies:\n  - pytorch 2.1.*\n  - torchvision=0.2\n"},
        # the 81st and 83rd reviews: PyPI's `pytorch` placeholder, named for torch (WMSeg)
        {"pyproject.toml": "[tool.poetry.dependencies]\npytorch = '^2.1'\n"},
        {"requirements.txt": "numpy\npytorch == 2.1.0\n"},
        {"setup.py": "from setuptools import setup\nsetup(install_requires=['pytorch>=2.1'])\n"},
    ],
)
def test_declared_torch_floor_makes_newer_fixes_unsafe(cli, tmp_path, files):
    _declared_project(tmp_path, files)
    result = cli("fix", "src/train.py", cwd=tmp_path)
    text = (tmp_path / "src/train.py").read_text()
    assert 'torch.amp.GradScaler("cuda")' not in text  # needs 2.3 > 2.1: unsafe
    assert "torch.get_autocast_gpu_dtype()" in text  # needs 2.4 > 2.1: unsafe
    assert "(the fix needs torch >= 2.4; target-torch is 2.1)" in result.stdout
    assert result.returncode == 1
    # the command line wins over the declared floor
    assert cli("fix", "--target-torch", "2.4", "src/train.py", cwd=tmp_path).returncode == 0
    assert "torch.get_autocast_dtype(" in (tmp_path / "src/train.py").read_text()


def test_a_requirements_folder_below_the_project_does_not_hide_its_floor(cli, tmp_path):
    """The 49th review: checking `tools/`, whose `tools/requirements/extra.txt` names no torch,
    made `tools/` the project, and the root's `torch>=2.1` was not read (a fix needing 2.4 was
    offered as safe). A `requirements/` folder marks a project only where nothing above does;
    a nested one (`requirements/cuda/torch.txt`) is read too."""
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'x'\ndependencies = ['torch>=2.1']\n"
    )
    (tmp_path / "tools" / "requirements").mkdir(parents=True)
    (tmp_path / "tools" / "requirements" / "extra.txt").write_text("numpy\n")
    (tmp_path / "tools" / "train.py").write_text(DEPRECATED)
    result = cli("check", "--show-settings", "tools", cwd=tmp_path)
    assert "target-torch: 2.1 (pyproject.toml: torch>=2.1)" in result.stdout.splitlines()
    nested = tmp_path / "other"
    (nested / "requirements" / "cuda").mkdir(parents=True)
    (nested / "requirements" / "cuda" / "torch.txt").write_text("torch==2.1.0\n")
    (nested / "requirements" / "build").mkdir()  # a folder named `build` is read (51a)
    (nested / "requirements" / "build" / "torch.txt").write_text("torch>=2.0\n")
    (nested / "train.py").write_text(DEPRECATED)
    (tmp_path / "pyproject.toml").unlink()
    result = cli("check", "--show-settings", ".", cwd=nested)
    assert "target-torch: 2.0 (requirements/build/torch.txt: torch>=2.0)" in result.stdout
    copy = nested / "requirements" / ".ipynb_checkpoints"  # Jupyter's copy is no declaration
    copy.mkdir()
    (copy / "torch-checkpoint.txt").write_text("torch==1.13\n")
    result = cli("check", "--show-settings", ".", cwd=nested)
    assert "target-torch: 2.0 (requirements/build/torch.txt: torch>=2.0)" in result.stdout


def test_config_target_torch_wins_over_declared_floor(cli, tmp_path):
    pyproject = "[project]\nname = 'x'\ndependencies = ['torch>=2.1']\n"
    _declared_project(
        tmp_path, {"pyproject.toml": pyproject + "[tool.ampmigrate]\ntarget-torch = '2.4'\n"}
    )
    assert cli("fix", "src/train.py", cwd=tmp_path).returncode == 0
    result = cli("check", "--show-settings", "--target-torch", "2.2", "src", cwd=tmp_path)
    assert result.returncode == 0
    assert "target-torch: 2.2 (--target-torch)" in result.stdout.splitlines()


def test_show_settings_names_the_floor_and_its_source(cli, tmp_path):
    _declared_project(tmp_path, {"requirements.txt": "torch>=2.1\n"})
    result = cli("check", "--show-settings", ".", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "target-torch: 2.1 (requirements.txt: torch>=2.1)" in result.stdout.splitlines()
    assert "files: 2" in result.stdout.splitlines()  # train.py and, for AMP316, the requirements
    (tmp_path / "requirements.txt").write_text("torch\n")  # no lower bound: no floor
    result = cli("check", "--show-settings", ".", cwd=tmp_path)
    assert "target-torch: none (no torch requirement found" in result.stdout


def test_exclude_options_on_the_command_line(cli, tmp_path):
    project(tmp_path, "")
    files = {f for f, _ in codes(cli("check", "--extend-exclude", "tests,legacy_*", ".",
                                     cwd=tmp_path).stdout)}  # fmt: skip
    assert files == {"src/train.py"}
    files = {f for f, _ in codes(cli("check", "--exclude", "src", ".", cwd=tmp_path).stdout)}
    assert files == {"tests/test_train.py"}


def test_bad_target_torch_option_is_a_usage_error(cli, tmp_path):
    project(tmp_path, "")
    result = cli("check", "--target-torch", "latest", "src", cwd=tmp_path)
    assert result.returncode == 2 and "target-torch must look like '2.4'" in result.stderr


PLAIN = [
    "torch", "torch>=2.4", "Torch >= 2.1, <3", "torch>2.4.1", "torch~=2.3", "torch==2",
    "torch<=2.4", "torch != 2.0, >= 1.13", "torch\t>=2.1", "torchvision>=0.15", "torch-x>=2.1",
]  # fmt: skip
NOT_PLAIN = [
    "torch~=2", "torch==2.4.*", "torch[cuda]>=2.1", "torch>=2.1; python_version>'3.8'",
    "torch>=2.1,", "torch>=2.1rc1", "torch===2.4", "torch @ https://x/torch.whl", "torch,>=2",
    "torch>=2,,<3", "torch>=2.1<3", "torch (>=2.1)", "torch>=2.1\n",
]  # fmt: skip


@pytest.mark.parametrize("requirement", PLAIN + NOT_PLAIN)
def test_torch_floor_without_packaging_reads_what_packaging_reads(requirement):
    from ampmigrate import floor

    assert floor.lower_bound(requirement) == floor.packaging_bound(requirement)
    # plain declarations are read without importing packaging; the rest go through it
    assert (floor._plain_bound(requirement) is not None) == (requirement in PLAIN)


@pytest.mark.parametrize(
    ("declared", "keras"),
    [
        ({"requirements.txt": "tensorflow~=2.15.0\n"}, 2),
        ({"requirements.txt": "tensorflow-cpu>=2.16\n"}, 3),
        ({"requirements.txt": "tensorflow>=2.12\ntf-keras\n"}, 2),
        ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["keras>=3.0"]\n'}, 3),
        ({"requirements.txt": "numpy\n"}, 3),
    ],
)
def test_target_keras_from_the_declared_tensorflow(cli, tmp_path, declared, keras):
    """tf-models-official 2.15 pins TensorFlow 2.15 (Keras 2): AMP406's Keras 3 fix broke it."""
    for name, text in declared.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "train.py").write_text(KERAS2_CODE)
    shown = cli("check", "--show-settings", "train.py", cwd=tmp_path).stdout
    assert f"target-keras: {keras} (" in shown
    result = cli("check", "train.py", cwd=tmp_path)
    assert (result.returncode, "AMP406" in result.stdout) == (
        (1, True) if keras == 3 else (0, False)
    )


def test_apex_opt_level_from_config_and_command_line(cli, tmp_path):
    """apex-opt-level = "O1" lets the apex rewrite take an open opt level as O1; the command
    line gives it too; --show-settings says where it came from; only "O1" is accepted."""
    (tmp_path / "train.py").write_text(OPEN_LEVEL)
    plain = project(tmp_path, "")
    refused = cli("check", "--select", "AMP303", "train.py", cwd=plain)
    assert "is not provably O1" in refused.stdout
    # the summary says what the setting would let through, as Ruff names hidden fixes
    hint = "1 apex file stops at an opt level not known to be O1"
    assert hint in refused.stderr
    assert hint in cli("fix", "--diff", "--unsafe-fixes", "train.py", cwd=plain).stderr
    (tmp_path / "o2.py").write_text(OPEN_LEVEL.replace("args.fp16_opt_level", '"O2"'))
    assert "stops at an opt level" not in cli("check", "o2.py", cwd=plain).stderr
    assert (
        "apex-opt-level: none (not declared"
        in cli("check", "--show-settings", "train.py", cwd=plain).stdout
    )
    given = cli("check", "--select", "AMP303", "--apex-opt-level", "O1", "train.py", cwd=plain)
    assert "the setting `apex-opt-level` (--apex-opt-level) takes it as O1 or O0" in given.stdout
    shown = cli("check", "--show-settings", "--apex-opt-level", "O1", "train.py", cwd=plain)
    assert "apex-opt-level: O1 (--apex-opt-level)" in shown.stdout.splitlines()

    project(tmp_path, 'apex-opt-level = "O1"\n')
    shown = cli("check", "--show-settings", "train.py", cwd=tmp_path)
    where = f"{tmp_path / 'pyproject.toml'}: apex-opt-level"
    assert f"apex-opt-level: O1 ({where})" in shown.stdout.splitlines()
    result = cli("fix", "--unsafe-fixes", "--select", "AMP303", "train.py", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    fixed = (tmp_path / "train.py").read_text()
    assert "amp.initialize" not in fixed
    assert 'torch.amp.GradScaler("cuda", enabled=args.fp16_opt_level == "O1")' in fixed

    project(tmp_path, 'apex-opt-level = "O2"\n')
    result = cli("check", "train.py", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "apex-opt-level must be \"O1\", not 'O2'" in result.stderr
    project(tmp_path, "")
    result = cli("check", "--apex-opt-level", "o1", "train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "--apex-opt-level must be \"O1\", not 'o1'" in result.stderr


@pytest.mark.parametrize(
    ("constraint", "bound"),
    [
        ("^1.0", (1, 0)),
        ("~1.2.3", (1, 2)),
        (">=1.4,<2", (1, 4)),
        ("1.0.1", (1, 0)),
        ("==2.1.*", (2, 1)),
        ("^1.4 || ^2.0", (1, 4)),
        ("*", None),
        ("<2.0", None),
        (">=1.13 || *", None),
    ],
)
def test_poetry_constraints_give_their_lowest_release(constraint, bound):
    from ampmigrate.floor import poetry_bound

    assert poetry_bound(constraint) == bound


def test_a_poetry_key_that_is_no_table_and_a_nested_requirements_folder(cli, tmp_path):
    """The 77th review: `[tool] poetry = "legacy"` crashed every command (AttributeError),
    and a `tools/requirements/` folder hid the root's `environment.yml` and its floor."""
    (tmp_path / "pyproject.toml").write_text('[tool]\npoetry = "legacy"\n')
    (tmp_path / "train.py").write_text(DEPRECATED)
    assert cli("check", "--show-settings", ".", cwd=tmp_path).returncode == 0
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "environment.yml").write_text("dependencies:\n  - pytorch=2.1\n")
    (tmp_path / "tools" / "requirements").mkdir(parents=True)
    (tmp_path / "tools" / "requirements" / "base.txt").write_text("numpy\n")
    (tmp_path / "tools" / "train.py").write_text(DEPRECATED)
    result = cli("check", "--show-settings", "tools", cwd=tmp_path)
    assert "target-torch: 2.1 (environment.yml: pytorch=2.1)" in result.stdout, result.stdout


@pytest.mark.parametrize(
    "pyproject",
    [
        '[tool.poetry]\ngroup = ["dev"]\n',
        '[tool.poetry]\ngroup = "x"\n',
        'project = "x"\n',
        '[project]\noptional-dependencies = "x"\n',
        '[project]\ndependencies = ["torch>=1' + "0" * 5000 + '"]\n',
    ],
)
def test_a_malformed_declaration_is_no_crash(cli, tmp_path, pyproject):
    """The 79th review: a Poetry `group` or a `project` that is no table, and a 5,000-digit
    version, aborted every command."""
    (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / "train.py").write_text(DEPRECATED)
    result = cli("check", "--show-settings", ".", cwd=tmp_path)
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr
