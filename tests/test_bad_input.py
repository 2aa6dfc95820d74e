"""Bad input: one clear error line each, exit 2, nothing modified, every other file processed.

Every bad file mentions a deprecated API, so the prefilter sends it to the parser (a file that
cannot contain a finding is never parsed, and so never rejected).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from ampmigrate.catalog import all_rules
from ampmigrate.engine import Settings, run

GOOD = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
TRIGGER = b"\nscaler = torch.cuda.amp.GradScaler()\n"


def bad_files(root: Path) -> dict[str, str]:
    """File name -> the start of the error message it must produce."""
    rng = random.Random(0)
    (root / "binary.py").write_bytes(bytes(rng.randrange(256) for _ in range(4096)) + TRIGGER)
    line = b"x = [1, 2, 3]  # padding to make the file big\n"
    (root / "huge.py").write_bytes(b"import torch\n" + line * (10_000_000 // len(line)) + TRIGGER)
    (root / "nested.py").write_bytes(
        b"import torch\nx = " + b" + ".join([b"1"] * 20_000) + b"\n" + TRIGGER
    )
    (root / "python2.py").write_bytes(b"import torch\nprint 'hello'\n" + TRIGGER)
    (root / "nul.py").write_bytes(b"import torch\nx = 1\x00\n" + TRIGGER)
    (root / "latin1.py").write_bytes(b"import torch\nname = 'caf\xe9'\n" + TRIGGER)
    os.symlink("loop.py", root / "loop.py")
    os.symlink("missing.py", root / "dangling.py")
    return {
        "binary.py": "error: ",
        "huge.py": "error: too large to parse (10.0 MB > 2 MB)",
        "nested.py": "error: too deeply nested to parse",
        "python2.py": "error: syntax error at 2:1: Missing parentheses in call to 'print'",
        "nul.py": "error: ",
        "latin1.py": "error: cannot decode at 2:",
        "dangling.py": "error: No such file or directory",
        "loop.py": "error: Too many levels of symbolic links",
    }


@pytest.mark.parametrize("command", ["check", "fix"])
def test_bad_files_are_reported_and_left_untouched(cli, tmp_path, command):
    expected = bad_files(tmp_path)
    (tmp_path / "good.py").write_text(GOOD)
    before = {
        p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and not p.is_symlink()
    }
    result = cli(command, *sorted(expected), "good.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = {
        line.split(":")[0]: line for line in result.stderr.splitlines() if ": error: " in line
    }
    assert set(errors) == set(expected)
    for name, start in expected.items():
        message = errors[name].split(": ", 1)[1]
        assert message.startswith(start), errors[name]
        assert "\n" not in errors[name]
    for name, data in before.items():
        if name != "good.py":
            assert (tmp_path / name).read_bytes() == data, name
    if command == "fix":
        assert (tmp_path / "good.py").read_text() == GOOD.replace(
            "torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")'
        )
    else:
        assert "good.py:3:10: AMP102" in result.stdout


def test_max_file_size_is_configurable(cli, tmp_path):
    (tmp_path / "a.py").write_text(GOOD)
    small = cli("check", "--max-file-size", "0.00001", "a.py", cwd=tmp_path)
    assert small.returncode == 2
    assert "a.py: error: too large to parse (0.0 MB > 1e-05 MB)" in small.stderr
    unlimited = cli("check", "--max-file-size", "0", "a.py", cwd=tmp_path)
    assert unlimited.returncode == 1 and "AMP102" in unlimited.stdout


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(cli, tmp_path):
    path = tmp_path / "secret.py"
    path.write_text(GOOD)
    path.chmod(0)
    result = cli("fix", "secret.py", cwd=tmp_path)
    assert result.returncode == 2 and "secret.py: error: Permission denied" in result.stderr


def test_file_deleted_during_the_run(tmp_path):
    kept, gone = tmp_path / "kept.py", tmp_path / "gone.py"
    kept.write_text(GOOD)
    gone.write_text(GOOD)
    paths = [gone, kept]  # discovered, then deleted before it is read
    gone.unlink()
    results = run(paths, Settings(rules=tuple(all_rules().values())), jobs=1)
    assert results[0].error == "No such file or directory"
    assert [d.code for d in results[1].diagnostics] == ["AMP102"]


def test_a_worker_crash_costs_only_its_file(tmp_path, monkeypatch):
    """A native crash (segfault) in a worker: the other files still get their results."""
    import ampmigrate.engine.migrate as migrate_module

    paths = []
    for i in range(6):
        path = tmp_path / f"m{i}.py"
        path.write_text(GOOD + ("# CRASH\n" if i == 3 else ""))
        paths.append(path)
    real = migrate_module.process

    def crashing(path, source, *args, **kwargs):
        if b"# CRASH" in source:
            os._exit(139)  # what a segfault looks like to the pool
        return real(path, source, *args, **kwargs)

    monkeypatch.setattr(migrate_module, "process", crashing)
    monkeypatch.setattr("ampmigrate.engine.PARALLEL_MIN_BYTES", 0)  # small files: a pool anyway
    results = run(paths, Settings(rules=tuple(all_rules().values())), jobs=2)
    assert [r.error is not None for r in results] == [False, False, False, True, False, False]
    assert "parser crashed" in results[3].error
    assert all(r.diagnostics for i, r in enumerate(results) if i != 3)


OLD_SCRIPT = (
    b"import torch\nfrom apex import amp\n\n"
    b"x = torch.randn(2).cuda(async=True)\n"
    b"print 'x'\n"
    b"scaler = torch.cuda.amp.GradScaler()\n"
    b"model, opt = amp.initialize(model, opt, opt_level='O1')\n"
)


@pytest.mark.parametrize("command", ["check", "fix"])
def test_a_file_python_3_cannot_parse_still_gets_its_findings(cli, tmp_path, command):
    """A training script from before Python 3.7 (`.cuda(async=True)`, a Python 2 `print`):
    its apex amp calls had no finding, only the syntax error (the 66th review's CMC
    `train_CMC.py`). The lines the parser stops at are set aside, the rest is read: its
    findings are reported beside the error, the exit code is 2 and nothing is fixed."""
    (tmp_path / "old.py").write_bytes(OLD_SCRIPT)
    result = cli(command, "--unsafe-fixes", "old.py", cwd=tmp_path)
    assert result.returncode == 2
    [error] = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert error.startswith("old.py: error: syntax error at 4:")
    assert "with lines 4, 5 set aside; nothing is fixed until it parses" in error
    assert "old.py:6:10: AMP102" in result.stdout
    assert "old.py:7:14: AMP301 `apex.amp.initialize`" in result.stdout
    assert "AMP303" not in result.stdout  # (a plan of the project, which the file is not in)
    assert (tmp_path / "old.py").read_bytes() == OLD_SCRIPT
    (tmp_path / "open.py").write_bytes(b"import torch\nx = f(\n  print 'a'\n)\n" + TRIGGER)
    result = cli(command, "open.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "set aside" not in result.stderr and "AMP102" not in result.stdout
