"""The CLI contract CI and pre-commit rely on: output lines, exit codes, noqa, bad input."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import FIXTURES

DEPRECATED = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
MIGRATED = 'import torch\n\nscaler = torch.amp.GradScaler("cuda")\n'


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_check_reports_path_line_col_code_and_exits_1(cli, tmp_path):
    write(tmp_path / "a.py", DEPRECATED)
    result = cli("check", "a.py", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "a.py:3:10: AMP102 [*] `torch.cuda.amp.GradScaler` is deprecated, use "
        '`torch.amp.GradScaler("cuda", ...)`'
    ]
    assert "Found 1 finding (1 fixable" in result.stderr


def test_clean_tree_exits_0(cli, tmp_path):
    write(tmp_path / "a.py", MIGRATED)
    result = cli("check", ".", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout == ""
    assert "All checks passed" in result.stderr


def test_no_files_exits_0_with_a_message(cli, tmp_path):
    result = cli("check", str(tmp_path))
    assert result.returncode == 0
    assert "No Python files found" in result.stderr


def test_exit_zero(cli, tmp_path):
    write(tmp_path / "a.py", DEPRECATED)
    assert cli("check", "--exit-zero", "a.py", cwd=tmp_path).returncode == 0


def test_fix_rewrites_and_exits_0_when_nothing_remains(cli, tmp_path):
    path = write(tmp_path / "a.py", DEPRECATED)
    result = cli("fix", "a.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert path.read_text() == MIGRATED
    assert "Fixed 1 finding in 1 file, 0 remaining" in result.stderr
    again = cli("fix", "a.py", cwd=tmp_path)
    assert again.returncode == 0 and "Fixed 0 findings" in again.stderr


def test_fix_exits_1_when_findings_remain(cli, tmp_path):
    path = write(tmp_path / "a.py", DEPRECATED + "ctx = torch.cuda.amp.autocast(*args)\n")
    result = cli("fix", "a.py", cwd=tmp_path)
    assert result.returncode == 1
    assert 'torch.amp.GradScaler("cuda")' in path.read_text()
    assert result.stdout.startswith("a.py:4:7: AMP101")


def test_fix_diff_prints_a_diff_and_writes_nothing(cli, tmp_path):
    path = write(tmp_path / "a.py", DEPRECATED)
    result = cli("fix", "--diff", "a.py", cwd=tmp_path)
    assert result.returncode == 1
    assert path.read_text() == DEPRECATED
    assert "--- a/a.py\n+++ b/a.py\n" in result.stdout
    assert '-scaler = torch.cuda.amp.GradScaler()\n+scaler = torch.amp.GradScaler("cuda")\n' in (
        result.stdout
    )
    assert "Would fix 1 finding" in result.stderr
    assert cli("fix", "--diff", "a.py", cwd=tmp_path).stdout == result.stdout


def test_fix_diff_on_clean_file_exits_0(cli, tmp_path):
    write(tmp_path / "a.py", MIGRATED)
    result = cli("fix", "--diff", "a.py", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == ""


def test_unsafe_fixes_are_applied_only_on_request(cli, tmp_path):
    path = write(tmp_path / "a.py", "import torch\n\nS = torch.cuda.amp.GradScaler\ns = S()\n")
    result = cli("fix", "a.py", cwd=tmp_path)
    assert result.returncode == 1
    assert "1 fixable with `--unsafe-fixes`" in result.stderr
    assert "torch.cuda.amp" in path.read_text()
    assert cli("fix", "--unsafe-fixes", "a.py", cwd=tmp_path).returncode == 0
    assert "functools.partial(torch.amp.GradScaler" in path.read_text()


@pytest.mark.parametrize(
    ("comment", "suppressed"),
    [("# noqa", True), ("# noqa: AMP102", True), ("#noqa:AMP101,AMP102", True),
     ("# NOQA: amp102", True), ("# noqa: AMP101", False)],
)  # fmt: skip
def test_noqa_suppresses_in_check_and_fix(cli, tmp_path, comment, suppressed):
    source = f"import torch\n\nscaler = torch.cuda.amp.GradScaler()  {comment}\n"
    path = write(tmp_path / "a.py", source)
    checked = cli("check", "a.py", cwd=tmp_path)
    assert checked.returncode == (0 if suppressed else 1)
    fixed = cli("fix", "a.py", cwd=tmp_path)
    assert fixed.returncode == 0
    assert (path.read_text() == source) is suppressed


def test_ignore_noqa_reports_and_fixes_what_a_bare_noqa_hides(cli, tmp_path):
    source = "from functools import partial\nfrom apex.normalization import FusedRMSNorm\n\n"
    source += "Norm = partial(FusedRMSNorm, eps=1e-6)  # noqa\n"
    path = write(tmp_path / "a.py", source)
    assert cli("check", "a.py", cwd=tmp_path).returncode == 0
    checked = cli("check", "--ignore-noqa", "a.py", cwd=tmp_path)
    assert checked.returncode == 1 and "a.py:4:" in checked.stdout and "AMP312" in checked.stdout
    fixed = cli("fix", "--unsafe-fixes", "--ignore-noqa", "a.py", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    migrated = path.read_text()
    assert "from apex" not in migrated and "torch.nn.RMSNorm" in migrated


def test_the_summary_and_the_report_count_what_a_noqa_hides(cli, tmp_path):
    """The 64th review: a bare `# noqa` written for flake8 on an apex availability probe hid
    the only apex import of the file: "All checks passed", and the report's "0 remaining".
    The exit status stays Ruff's (suppressed is not found); the summary line and the report
    say how many findings a `# noqa` hides, and the report lists them."""
    source = (
        "def policy():\n    try:\n        from apex.normalization import FusedRMSNorm  # noqa\n"
        "    except ImportError:\n        return None\n    return 'apex'\n"
    )
    write(tmp_path / "a.py", source)
    checked = cli("check", "a.py", cwd=tmp_path)
    assert checked.returncode == 0 and not checked.stdout
    assert "1 finding suppressed by `# noqa` (`--ignore-noqa` shows them)" in checked.stderr
    fixed = cli("fix", "--report", "report.md", "a.py", cwd=tmp_path)
    assert fixed.returncode == 0 and "1 finding suppressed by `# noqa`" in fixed.stderr
    report = (tmp_path / "report.md").read_text()
    assert "- Findings suppressed by `# noqa`: 1 (listed below)" in report
    assert "| `a.py:3:9` | `AMP312` |" in report
    plain = cli("check", "b.py", cwd=write(tmp_path / "b" / "b.py", "x = 1  # noqa\n").parent)
    assert plain.returncode == 0 and "All checks passed (1 file)." in plain.stderr


def test_select_and_ignore(cli, tmp_path):
    write(tmp_path / "a.py", DEPRECATED + "torch.get_autocast_gpu_dtype()\n")
    assert cli("check", "--select", "AMP104", "a.py", cwd=tmp_path).stdout.count("AMP") == 1
    assert cli("check", "--ignore", "AMP102", "a.py", cwd=tmp_path).stdout.count("AMP104") == 1
    assert cli("check", "--select", "AMP1", "a.py", cwd=tmp_path).stdout.count("AMP") == 2
    assert cli("check", "--ignore", "AMP1", "a.py", cwd=tmp_path).returncode == 0
    bad = cli("check", "--select", "XYZ9", "a.py", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown rule selector: XYZ9" in bad.stderr


def test_unparsable_file_is_reported_untouched_and_others_still_fixed(cli, tmp_path):
    broken = b"import torch\nscaler = torch.cuda.amp.GradScaler(\n"
    bad = write(tmp_path / "bad.py", broken)
    good = write(tmp_path / "good.py", DEPRECATED)
    result = cli("fix", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert bad.read_bytes() == broken
    assert good.read_text() == MIGRATED
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == [errors[0]] and errors[0].startswith("bad.py: error: syntax error")


def test_undecodable_file_is_one_error_line(cli, tmp_path):
    write(tmp_path / "latin.py", b"x = '\xe9'  # torch.cuda.amp.GradScaler\n")
    result = cli("check", "latin.py", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines()[0].startswith("latin.py: error: cannot decode")
    assert "Traceback" not in result.stderr


def test_missing_file_is_an_error_not_a_traceback(cli, tmp_path):
    result = cli("check", "gone.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "gone.py: error: No such file or directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_encodings_and_line_endings_survive(cli, tmp_path):
    for name in ("crlf", "bom", "latin1_cookie"):
        path = write(tmp_path / f"{name}.py", (FIXTURES / "migrate" / f"{name}.py").read_bytes())
        assert cli("fix", path.name, cwd=tmp_path).returncode == 0
        assert path.read_bytes() == (FIXTURES / "migrate" / f"{name}.fixed.py").read_bytes()


def test_fix_keeps_file_mode(cli, tmp_path):
    path = write(tmp_path / "a.py", DEPRECATED)
    path.chmod(0o754)
    cli("fix", "a.py", cwd=tmp_path)
    assert path.stat().st_mode & 0o777 == 0o754
    assert [p.name for p in tmp_path.iterdir()] == ["a.py"]  # no temp file left behind


def test_parallel_output_is_deterministic(cli, tmp_path):
    for i in range(12):
        write(tmp_path / f"pkg{i % 3}" / f"m{i}.py", DEPRECATED * (i % 4 + 1))
    one = cli("check", "--jobs", "1", ".", cwd=tmp_path)
    two = cli("check", "--jobs", "2", ".", cwd=tmp_path)
    assert one.stdout == two.stdout and one.stdout.count("AMP102") == 30
    lines = one.stdout.splitlines()
    assert lines == sorted(lines, key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


def test_json_output(cli, tmp_path):
    write(tmp_path / "a.py", DEPRECATED)
    result = cli("check", "--output-format", "json", "a.py", cwd=tmp_path)
    [item] = json.loads(result.stdout)
    assert item["code"] == "AMP102" and item["filename"] == "a.py"
    assert item["location"] == {"row": 3, "column": 10}
    assert item["end_location"] == {"row": 3, "column": 37}
    assert item["fix"] == {"applicability": "safe"}
    assert item["url"] is None  # no public docs site: nothing that does not resolve


def test_github_output(cli, tmp_path):
    write(tmp_path / "a.py", DEPRECATED)
    result = cli("check", "--output-format", "github", "a.py", cwd=tmp_path)
    assert result.stdout.startswith(
        "::error title=ampmigrate (AMP102),file=a.py,line=3,col=10,endLine=3,endColumn=37::AMP102 "
    )


def test_sarif_output(cli, tmp_path):
    write(tmp_path / "a.py", DEPRECATED)
    log = json.loads(cli("check", "--output-format", "sarif", "a.py", cwd=tmp_path).stdout)
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    [result] = run["results"]
    assert rules[result["ruleIndex"]]["id"] == result["ruleId"] == "AMP102"
    assert all(r["help"]["text"] and "helpUri" not in r for r in rules)  # no public docs site
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 3, "startColumn": 10, "endLine": 3, "endColumn": 37}


def test_statistics(cli, tmp_path):
    write(tmp_path / "a.py", DEPRECATED * 2 + "torch.get_autocast_gpu_dtype()\n")
    result = cli("check", "--statistics", "a.py", cwd=tmp_path)
    assert result.stdout.split() == [
        "2", "AMP102", "deprecated-device-grad-scaler",
        "1", "AMP104", "deprecated-autocast-state-function",
    ]  # fmt: skip


def test_rules_and_explain(cli):
    listed = cli("rules").stdout
    for code in ("AMP101", "AMP102", "AMP103", "AMP104"):
        assert code in listed
    page = cli("explain", "amp101").stdout
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead",
                    "## Fix safety"):  # fmt: skip
        assert heading in page
    unknown = cli("explain", "AMP999")
    assert unknown.returncode == 2 and "unknown rule code" in unknown.stderr


def test_demo_project(cli):
    project = FIXTURES / "example_project"
    checked = cli("check", str(project))
    assert checked.returncode == 1
    codes = [line.split()[1] for line in checked.stdout.splitlines()]
    assert sorted(set(codes)) == ["AMP101", "AMP102", "AMP103"]
    diff = cli("fix", "--diff", str(project))
    assert diff.returncode == 1 and diff.stdout.count("+++ b/") == 3


def test_package_init_keeps_its_imports_as_public_api(cli, tmp_path):
    source = "from torch.cuda.amp import GradScaler\n\nscaler = GradScaler()\n"
    init = write(tmp_path / "pkg" / "__init__.py", source)
    module = write(tmp_path / "pkg" / "mod.py", source)
    assert cli("fix", ".", cwd=tmp_path).returncode == 0
    assert init.read_text().startswith("from torch.cuda.amp import GradScaler\n")
    assert "from torch.cuda.amp" not in module.read_text()
    assert 'scaler = torch.amp.GradScaler("cuda")' in init.read_text()


def test_fix_report_markdown(cli, tmp_path):
    write(tmp_path / "a.py", DEPRECATED + "ctx = torch.cuda.amp.autocast(*args)\n")
    write(tmp_path / "b.py", "x = 1\n")
    result = cli("fix", ".", "--report", "migration.md", cwd=tmp_path)
    assert result.returncode == 1
    report = (tmp_path / "migration.md").read_text()
    assert "- Files checked: 2 (1 parsed)\n- Files changed: 1\n- Findings fixed: 1\n" in report
    assert "| `AMP102` | deprecated-device-grad-scaler | 1 |" in report
    assert "- `a.py`: AMP102" in report
    assert "| `a.py:4:7` | `AMP101` |" in report and "`*args` splat" in report


def test_progress_callback_counts_every_parsed_file(tmp_path):
    from ampmigrate.catalog import all_rules
    from ampmigrate.engine import Settings, run

    paths = [write(tmp_path / f"m{i}.py", DEPRECATED if i % 2 else MIGRATED) for i in range(9)]
    seen = []
    run(
        paths,
        Settings(rules=tuple(all_rules().values())),
        2,
        progress=lambda n, t: seen.append((n, t)),
    )
    done = [n for n, _ in seen]
    assert done[0] == 0 and done[-1] == 9 and done == sorted(done)
    assert {t for _, t in seen} == {9}


def test_progress_line_shows_after_a_second_even_before_a_file_is_done(monkeypatch, capsys):
    from ampmigrate import cli

    monkeypatch.setattr(cli._Progress, "DELAY", 0.05)
    bar = cli._Progress(enabled=True)
    bar(0, 3)
    time.sleep(0.3)
    bar(1, 3)
    bar.close()
    err = capsys.readouterr().err
    assert "Parsing: 0/3 files" in err and "Parsing: 1/3 files" in err
    quiet = cli._Progress(enabled=False)
    quiet(0, 3)
    quiet.close()
    assert capsys.readouterr().err == ""


def test_sarif_validates_against_the_sarif_2_1_0_model(cli, tmp_path):
    sarif_pydantic = pytest.importorskip("sarif_pydantic")
    write(tmp_path / "a.py", DEPRECATED)
    (tmp_path / "nb.ipynb").write_bytes((FIXTURES / "notebooks" / "train.ipynb").read_bytes())
    log = sarif_pydantic.Sarif.model_validate_json(
        cli("check", "--output-format", "sarif", ".", cwd=tmp_path).stdout
    )
    assert log.version == "2.1.0"
    assert len(log.runs[0].results) == 4
    assert {r.id for r in log.runs[0].tool.driver.rules} >= {"AMP101", "AMP102"}


def test_apex_requirements_reported_in_every_format_and_never_rewritten(cli, tmp_path):
    files = {
        "requirements.txt": b"torch>=2.4\r\napex @ git+https://github.com/NVIDIA/apex\r\n",
        "pyproject.toml": b'[project]\nname = "t"\ndependencies = ["torch", "apex"]\n',
        "setup.py": b'from setuptools import setup\n\nsetup(install_requires=["apex"])\n',
        "train.py": b"from apex.normalization import FusedLayerNorm\nnorm = FusedLayerNorm(8)\n",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    check = cli("check", ".", cwd=tmp_path)
    # train.py still needs apex: the NVIDIA line has nothing to change; PyPI's `apex` pins
    # (an unrelated package) never installed it, and say so
    pinned = sorted(line.split(": ")[0] for line in check.stdout.splitlines() if "AMP316" in line)
    assert check.returncode == 1 and pinned == ["pyproject.toml:3:26", "setup.py:3:25"]
    assert "still imports NVIDIA apex (`train.py`)" in check.stdout
    fixed = cli("fix", "--unsafe-fixes", "--report", "report.md", ".", cwd=tmp_path)
    assert fixed.returncode == 1, fixed.stderr
    for name in ("requirements.txt", "pyproject.toml", "setup.py"):
        assert (tmp_path / name).read_bytes() == files[name]
    assert b"apex" not in (tmp_path / "train.py").read_bytes()
    lines = sorted(line.split(": ")[0] for line in fixed.stdout.splitlines())
    assert lines == ["pyproject.toml:3:26", "requirements.txt:2:1", "setup.py:3:25"]
    assert "`requirements.txt:2:1` | `AMP316`" in (tmp_path / "report.md").read_text()
    as_json = json.loads(cli("check", "--output-format", "json", ".", cwd=tmp_path).stdout)
    assert {(d["filename"], d["location"]["row"], d["fix"]) for d in as_json} == {
        ("pyproject.toml", 3, None), ("requirements.txt", 2, None), ("setup.py", 3, None)
    }  # fmt: skip
    sarif = json.loads(cli("check", "--output-format", "sarif", ".", cwd=tmp_path).stdout)
    uris = {
        r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        for r in sarif["runs"][0]["results"]
    }
    assert uris == {"pyproject.toml", "requirements.txt", "setup.py"}
    github = cli("check", "--output-format", "github", ".", cwd=tmp_path).stdout
    assert "file=requirements.txt,line=2,col=1,endLine=2,endColumn=42" in github


def test_a_project_module_named_like_the_standard_library_is_not_imported(cli, tmp_path):
    """`cd project && python -m ampmigrate check ...`: `-m` puts the project first on sys.path,
    and an empty `copy.py` there was imported for the standard library's (ImportError:
    cannot import name 'deepcopy'), i.e. a project file was run."""
    (tmp_path / "copy.py").write_text("raise SystemExit('project code ran')\n")
    (tmp_path / "train.py").write_text(
        "import torch\n\nwith torch.cuda.amp.autocast():\n    x = 1\n"
    )
    result = cli("check", "train.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "AMP101" in result.stdout and "project code ran" not in result.stderr
