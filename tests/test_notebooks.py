"""Notebooks: cells are linted and fixed as one module; everything else in the file survives."""

from __future__ import annotations

import json
import shutil

from conftest import FIXTURES

NOTEBOOK = FIXTURES / "notebooks" / "train.ipynb"
EXPECTED = FIXTURES / "notebooks" / "train.fixed.ipynb"


def test_check_reports_cell_locations(cli, tmp_path):
    shutil.copy(NOTEBOOK, tmp_path / "train.ipynb")
    result = cli("check", ".", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "train.ipynb:cell 3:2:6: AMP101 [*] `torch.cuda.amp.autocast` is deprecated, use "
        '`torch.amp.autocast("cuda", ...)`',
        "train.ipynb:cell 4:1:10: AMP102 [*] `torch.cuda.amp.GradScaler` is deprecated, use "
        '`torch.amp.GradScaler("cuda", ...)`',
        "train.ipynb:cell 5:1:6: AMP101 [*] `torch.cpu.amp.autocast` is deprecated, use "
        '`torch.amp.autocast("cpu", ...)`',
    ]


def test_fix_rewrites_code_cells_only(cli, tmp_path):
    path = tmp_path / "train.ipynb"
    shutil.copy(NOTEBOOK, path)
    assert cli("fix", "train.ipynb", cwd=tmp_path).returncode == 0
    assert path.read_bytes() == EXPECTED.read_bytes()
    before, after = json.loads(NOTEBOOK.read_text()), json.loads(path.read_text())
    assert before["metadata"] == after["metadata"]
    for old, new in zip(before["cells"], after["cells"], strict=True):
        assert {k: v for k, v in old.items() if k != "source"} == {
            k: v for k, v in new.items() if k != "source"
        }  # outputs, ids, execution counts, metadata
    sources = ["".join(c["source"]) for c in after["cells"]]
    assert sources[0] == "".join(before["cells"][0]["source"])  # markdown untouched
    assert sources[1].startswith("%matplotlib inline\n!pip install -q tqdm\nimport torch")
    assert "from torch.cuda.amp" not in sources[1]
    assert sources[2].startswith("%%time\nwith torch.amp.autocast(")
    assert sources[4].endswith("\ny?")
    assert "torch.is_autocast_cpu_enabled()  # noqa: AMP104" in sources[5]  # suppressed


def test_fix_is_idempotent_and_keeps_layout(cli, tmp_path):
    path = tmp_path / "train.ipynb"
    shutil.copy(EXPECTED, path)
    result = cli("fix", "train.ipynb", cwd=tmp_path)
    assert result.returncode == 0 and "Fixed 0 findings" in result.stderr
    assert path.read_bytes() == EXPECTED.read_bytes()


def test_diff_is_per_cell(cli, tmp_path):
    shutil.copy(NOTEBOOK, tmp_path / "train.ipynb")
    diff = cli("fix", "--diff", "train.ipynb", cwd=tmp_path).stdout
    assert "--- a/train.ipynb:cell 4\n+++ b/train.ipynb:cell 4\n" in diff
    assert '+scaler = torch.amp.GradScaler("cuda")\n' in diff
    assert (tmp_path / "train.ipynb").read_bytes() == NOTEBOOK.read_bytes()


def test_non_python_cell_magics_are_left_alone(cli, tmp_path):
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": ["%%bash\n", "echo torch.cuda.amp.GradScaler"]}  # fmt: skip
    notebook = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "b.ipynb").write_text(json.dumps(notebook, indent=1))
    assert cli("check", "b.ipynb", cwd=tmp_path).returncode == 0


def test_broken_notebook_is_an_error(cli, tmp_path):
    (tmp_path / "bad.ipynb").write_text('{"cells": [ torch.cuda.amp.GradScaler')
    result = cli("check", "bad.ipynb", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("bad.ipynb: error: not a Jupyter notebook")


def _notebook(*cells: str) -> str:
    return (
        json.dumps(
            {
                "cells": [
                    {
                        "cell_type": "code",
                        "execution_count": None,
                        "metadata": {},
                        "outputs": [],
                        "source": cell.splitlines(keepends=True),
                    }
                    for cell in cells
                ],
                "metadata": {},
                "nbformat": 4,
                "nbformat_minor": 5,
            },
            indent=1,
        )
        + "\n"
    )


IPYTHON_CELLS = (
    "!wget -O $DATA/weights.zip \\\n    https://example.org/w.zip \\\n"
    "  && unzip -o $DATA/weights.zip\nimport torch\n",
    "%pip install -q tqdm\nfiles = !ls $DATA\nlisting = %sx ls\ntorch.cuda.amp?\ntorch.nn??\n",
    "%%time\nscaler = torch.cuda.amp.GradScaler()\nif True:\n    !nvidia-smi \\\n"
    "        --query-gpu=name\n    x = 1\n",
    "%%bash\necho torch.cuda.amp.GradScaler \\\n  done\n",
)


def test_ipython_syntax_is_masked_and_restored(cli, tmp_path):
    """Line magics, `!` escapes continued over three lines (also indented), `x = !cmd`, `?`/`??`
    help and cell magics: checked, fixed, and every IPython line back byte for byte."""
    path = tmp_path / "nb.ipynb"
    path.write_text(_notebook(*IPYTHON_CELLS))
    result = cli("check", "nb.ipynb", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("nb.ipynb:cell 3:2:10: AMP102 [*] `torch.cuda.amp.GradScaler`")
    assert len(result.stdout.splitlines()) == 1  # the %%bash cell is not Python
    assert cli("fix", "nb.ipynb", cwd=tmp_path).returncode == 0
    after = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    expected = list(IPYTHON_CELLS)
    expected[2] = expected[2].replace("torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")')
    assert after == expected
    second = cli("fix", "nb.ipynb", cwd=tmp_path)
    assert second.returncode == 0 and "Fixed 0 findings" in second.stderr


def test_lines_a_message_cites_are_given_as_cells(cli, tmp_path):
    """The 69th review: a finding at `cell 2:4:18` whose text said "line 9", a line of the
    joined cells that exists nowhere in the notebook. The lines a message cites are its cells'
    lines, as its place is."""
    notebook = _notebook(
        "import torch\nfrom apex import amp\n",
        "model = torch.nn.Linear(2, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "x = 1\nmodel, opt = amp.initialize(model, opt, opt_level='O1')\n",
    )
    (tmp_path / "nb.ipynb").write_text(notebook)
    result = cli("check", "--select", "AMP303", "nb.ipynb", cwd=tmp_path)
    [line] = [x for x in result.stdout.splitlines() if "AMP303" in x]
    assert line.startswith("nb.ipynb:cell 2:4:")
    assert "(1 blocker): cell 2 line 4: " in line
    assert "line 9" not in line and "line 7" not in line
