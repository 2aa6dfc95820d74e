"""apex's amp module handed to a function of another file (Lightning's ``configure_apex``): the
callee's apex calls through its parameter are reported where they are, with the calls that
hand the module over, and nothing there is rewritten."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ampmigrate.catalog import all_rules
from ampmigrate.engine import Settings, run

HELPERS = """\
def prepare(model, optimizer, amp=None):
    if amp:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    return model, optimizer


class Module:
    def configure_apex(self, amp, model, optimizers, level):
        model, optimizers = amp.initialize(model, optimizers, opt_level=level)
        return model, optimizers

    @staticmethod
    def restore(amp, state):
        amp.load_state_dict(state["amp"])


def unrelated(amp, value):
    return amp.initialize(value)
"""

TRAIN = """\
from apex import amp
from helpers import prepare, Module

def main(model, optimizer, data, state):
    model, optimizer = prepare(model, optimizer, amp=amp)
    m = Module()
    model, optimizer = m.configure_apex(amp, model, optimizer, "O1")
    m.restore(amp, state)
    for x in data:
        loss = model(x).sum()
        with amp.scale_loss(loss, optimizer) as s:
            s.backward()
        optimizer.step()
"""


def _project(root: Path, helpers: str = HELPERS, train: str = TRAIN) -> list[Path]:
    (root / "helpers.py").write_text(helpers)
    (root / "train.py").write_text(train)
    return [root / "helpers.py", root / "train.py"]


def _results(paths: list[Path], fix: bool = False) -> dict[str, list]:
    settings = Settings(rules=tuple(all_rules().values()), fix=fix, unsafe_fixes=True)
    return {Path(r.path).name: [*r.fixed, *r.diagnostics] for r in run(paths, settings, jobs=1)}


def test_each_function_that_receives_apex_module_reports_its_uses(tmp_path):
    found = _results(_project(tmp_path))["helpers.py"]
    assert [d.code for d in found] == ["AMP303"]
    message = found[0].message
    assert found[0].line == 3  # the first use: prepare's initialize
    assert "(3 blockers)" in message
    assert (
        "line 3: `amp.initialize` calls apex amp through the parameter `amp` of `prepare`, "
        "which train.py:5 fills with apex's module"
    ) in message
    # a method: called on an object whose class is not known, so "may" (the 73rd review: an
    # unrelated class's method of that name was said to be filled)
    assert (
        "line 9: `amp.initialize` calls apex amp through the parameter `amp` of "
        "`configure_apex`, which train.py:7 may fill with apex's module (a method of that name"
    ) in message
    # a static method: the first argument is its first parameter
    assert (
        "line 14: `amp.load_state_dict` calls apex amp through the parameter `amp` of "
        "`restore`, which train.py:8 may fill"
    ) in message
    assert "`unrelated`" not in message  # nothing hands it the module


def test_a_parameter_the_function_binds_anew_is_not_reported(tmp_path):
    """The 73rd review: `amp = FakeAmp()` in the function before `amp.initialize`."""
    helpers = HELPERS.replace("    if amp:\n", "    amp = object()\n    if amp:\n")
    message = _results(_project(tmp_path, helpers=helpers))["helpers.py"][0].message
    assert "`prepare`" not in message and "`configure_apex`" in message


def test_a_function_of_the_same_name_that_the_caller_does_not_import_is_not_reported(tmp_path):
    paths = _project(tmp_path)
    other = tmp_path / "other.py"
    other.write_text("def prepare(model, optimizer, amp=None):\n    return amp.initialize(model)\n")
    found = _results([*paths, other])
    assert "other.py" not in found or not found["other.py"]


def test_nothing_is_rewritten_and_a_second_run_says_the_same(tmp_path):
    paths = _project(tmp_path)
    before = {p: p.read_bytes() for p in paths}
    first = _results(paths, fix=True)
    assert [d.code for d in first["helpers.py"]] == ["AMP303"]
    assert {p: p.read_bytes() for p in paths} == before
    second = _results(paths, fix=True)
    assert [d.message for d in first["helpers.py"]] == [d.message for d in second["helpers.py"]]


def test_noqa_on_the_use_suppresses_it(tmp_path):
    helpers = HELPERS.replace('opt_level="O1")', 'opt_level="O1")  # noqa: AMP303')
    paths = _project(tmp_path, helpers=helpers)
    settings = Settings(rules=tuple(all_rules().values()))
    (result,) = [r for r in run(paths, settings, jobs=1) if r.path.endswith("helpers.py")]
    assert [d for d in result.diagnostics if d.code == "AMP303"] == []
    assert result.suppressed


def test_the_file_without_apex_is_analysed_only_where_a_call_hands_the_module_over(tmp_path):
    train = TRAIN.replace("prepare(model, optimizer, amp=amp)", "prepare(model, optimizer)")
    train = train.replace('m.configure_apex(amp, model, optimizer, "O1")', "(model, optimizer)")
    train = train.replace("m.restore(amp, state)", "m.restore(None, state)")
    found = _results(_project(tmp_path, train=train))
    assert found["helpers.py"] == []


def test_cli_reports_it_in_a_project_run(tmp_path, cli):
    _project(tmp_path)
    done = cli("check", "--select", "AMP303", "--output-format", "concise", ".", cwd=tmp_path)
    assert done.returncode == 1
    lines = [line for line in done.stdout.splitlines() if line.startswith("helpers.py")]
    assert len(lines) == 1 and lines[0].startswith("helpers.py:3:")
    assert "AMP303" in lines[0] and "train.py:5" in lines[0]


def test_the_caller_is_not_told_that_no_file_initializes(tmp_path):
    """The 73rd review's p1a: in the run that reports `amp.initialize` in lib.py, the caller was
    told "no file of the project initializes apex amp ... delete it" (harmful advice: it
    trains)."""
    (tmp_path / "lib.py").write_text(
        textwrap.dedent("""\
        def prepare(model, optimizer, amp=None, level="O1"):
            if amp is not None:
                model, optimizer = amp.initialize(model, optimizer, opt_level=level)
            return model, optimizer
    """)
    )
    (tmp_path / "train.py").write_text(
        textwrap.dedent("""\
        import torch
        from apex import amp
        from lib import prepare


        def main():
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 2).to("cpu")
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model, optimizer = prepare(model, optimizer, amp=amp)
            for _ in range(3):
                out = model(torch.ones(8, 4).to("cpu") * 0.1)
                loss = out.float().pow(2).mean()
                optimizer.zero_grad()
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
                print(out.dtype, round(loss.item(), 5))

        main()
    """)
    )
    found = _results([tmp_path / "lib.py", tmp_path / "train.py"])["train.py"]
    message = next(d.message for d in found if d.code == "AMP303")
    assert "no file of the project initializes apex amp" not in message
    assert "`amp` is passed to `prepare(...)`" in message
