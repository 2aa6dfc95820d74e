"""AMP303 on ``ast`` (ampmigrate/apex/verdict.py) for files without ``amp.initialize``: the same
message and position as the libcst planner's refusal, run directly, on the fixtures, the rule
examples and one source per blocker kind; the cases ``ast`` cannot be sure of go to the planner;
``check`` on such a file never imports libcst and ``fix`` leaves it as it is."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ampmigrate.catalog import all_rules
from ampmigrate.engine.source import Source

from conftest import FIXTURES, check_source, fix_source

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from apex_verdict import judged, planned

HELPER = """\
import torch
from apex import amp


def {where}(loss, optimizer, model):
    with amp.scale_loss(loss, optimizer) as scaled:
        scaled.backward()
    torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
    optimizer.step()
"""

# one source per blocker kind (and the shapes around them); each is judged on ast
JUDGED = {
    "other_members": """\
        import torch
        from apex import amp

        @amp.half_function
        def mm(a, b):
            return a @ b

        def train(loss, opt):
            with amp.scale_loss(loss, opt) as s:
                s.backward()
            g = amp.half_function(torch.mm)
            with amp.disable_casts():
                pass
            amp.register_float_function(torch, "sigmoid")
            amp.float_function(torch.mm)
        """,
    "only_other_members": """\
        from apex import amp
        amp.register_half_function(torch, "mm")
        """,
    "apex_imports_of_other_modules": """\
        from apex import amp, parallel
        from apex import fp16_utils
        from apex.fp16_utils import *
        from apex.parallel import DistributedDataParallel
        from apex import optimizers, fp16_utils as fu
        from apex.contrib.sparsity import ASP
        import apex.normalization

        def step(loss, opt):
            with amp.scale_loss(loss, opt) as s:
                s.backward()
        """,
    "import_apex_parallel_and_amp": """\
        import apex.parallel, apex.amp

        def step(loss, opt):
            with apex.amp.scale_loss(loss, opt) as s:
                s.backward()
            return apex.amp.state_dict()
        """,
    "import_apex_attribute_calls": """\
        import apex

        class Trainer:
            def step(self, loss):
                with apex.amp.scale_loss(loss, self.opt) as s:
                    s.backward()

            async def save(self):
                return {"amp": apex.amp.state_dict()}
        """,
    "try_does_more": """\
        try:
            from apex import amp
            import fancy
            value = fancy.setup()
        except ImportError:
            amp = None
            fallback = True

        def step(loss, opt):
            with amp.scale_loss(loss, opt) as s:
                s.backward()
        """,
    "try_other_exception": """\
        try:
            from apex import amp
        except (ImportError, ValueError):
            amp = None

        def step(loss, opt):
            with amp.scale_loss(loss, opt) as s:
                s.backward()
        """,
    "try_finally_and_compound": """\
        try:
            from apex import amp
        except ImportError:
            amp = None
        finally:
            done = True
        try:
            import apex.amp
            if True:
                x = 1
        except ImportError:
            pass

        def step(loss, opt):
            with amp.scale_loss(loss, opt) as s:
                s.backward()
        """,
    "try_binds_in_handler_or_one_line": """\
        try:
            from apex import amp
        except Exception as error:
            amp = None
        try:
            from apex import amp
        except ImportError: amp = None
        try:
            from apex import amp
        except ImportError:
            amp = None
        else: ok = True

        def step(loss, opt):
            with amp.scale_loss(loss, opt) as s:
                s.backward()
        """,
    "try_guard_only_with_else": """\
        has = False
        try:
            from apex import amp
            has = True
        except (ImportError, builtins.ModuleNotFoundError):
            amp = None
            has = False
            print("no apex")
        else:
            print("apex", amp)

        def step(loss, opt):
            with amp.scale_loss(loss, opt) as s:
                s.backward()
        """,
    "value_uses": """\
        from apex import amp
        import apex

        x = amp
        print(amp, apex.amp)
        amp(1)
        flag = None is amp
        same = amp == None
        while amp:
            break
        y = amp if x else 0
        del amp

        def step(loss, opt):
            with amp.scale_loss(loss, opt) as s:
                s.backward()
        """,
    "availability_checks": """\
        from apex import amp

        assert amp is not None
        assert amp is None
        assert not amp
        assert x, amp
        assert amp is None and x
        assert amp is None or x
        if amp is None:
            raise SystemExit
        elif not amp or x:
            pass
        use = amp is not None
        neg = -amp
        if amp:
            pass

        def step(loss, opt):
            if amp is not None and opt:
                with amp.scale_loss(loss, opt) as s:
                    s.backward()
        """,
    "module_level_and_method": """\
        from apex import amp
        from apex.amp import scale_loss
        import apex.amp as amp2

        with amp.scale_loss(loss, opt) as s:
            s.backward()
        amp.load_state_dict(ckpt["amp"])
        scale_loss(loss, opt)
        amp2.master_params(opt)[0]

        class Model:
            state = amp.state_dict()

            def resume(self, ckpt):
                amp.load_state_dict(ckpt["amp"])
                fn = lambda: amp.state_dict()
        """,
    "duplicates_on_one_line": """\
        from apex import amp

        def save():
            return {"a": amp.state_dict(), "b": amp.state_dict()}
        """,
    "unicode_tabs_crlf": (
        "from apex import amp\r\n\r\ndef save():\r\n\tnote = 'é'; return amp.state_dict()\r\n"
    ),
    "parenthesized_and_spaced_calls": """\
        from apex import amp
        x = (amp.state_dict)()
        y = (
          amp
          .load_state_dict
        )(
        )
        z = f((amp.master_params(opt)))
        w = [amp .state_dict ( ) , amp . load_state_dict(1)]
        print(
            amp,
            (amp.state_dict()),
        )
        """,
    "first_call_is_a_default": """\
        from apex import amp

        def save(state=amp.state_dict(), *, extra=amp.master_params(opt)):
            with amp.scale_loss(state, extra) as s:
                s.backward()
        """,
}

# shapes where ast might not see what libcst sees: left to the planner
PLANNER = {
    "initialize": """\
        from apex import amp
        model, opt = amp.initialize(model, opt, opt_level="O1")
        """,
    "parameter_named_amp": """\
        from apex import amp

        def step(loss, opt, amp=amp):
            with amp.scale_loss(loss, opt) as s:
                s.backward()
        amp.state_dict()
        """,
    "keyword_named_amp": """\
        from apex import amp
        run(amp=True)
        amp.state_dict()
        """,
    "global_amp": """\
        from apex import amp

        def setup():
            global amp
            amp.state_dict()
        """,
    "parenthesized_value": """\
        from apex import amp
        x = (amp)
        amp.state_dict()
        """,
    "try_on_one_line": """\
        try: from apex import amp
        except ImportError: amp = None
        amp.state_dict()
        """,
    "parenthesized_except": """\
        try:
            from apex import amp
        except (ImportError):
            amp = None
        amp.state_dict()
        """,
    "import_sharing_its_line": """\
        import torch; from apex import amp
        amp.state_dict()
        """,
    "value_in_an_f_string": """\
        from apex import amp
        x = f"{amp}" + amp.state_dict()
        """,
    "value_after_a_comment": """\
        from apex import amp
        x = f(  # a comment (
            amp
        )
        amp.state_dict()
        """,
    "call_of_a_call": """\
        from apex import amp
        amp.state_dict()()
        """,
}


def _compare(text: str) -> tuple:
    return judged(text), planned(text)


@pytest.mark.parametrize("name", sorted(JUDGED))
def test_blocker_kinds_are_judged_on_ast_as_the_planner_refuses(name):
    text = JUDGED[name] if "\r" in JUDGED[name] else textwrap.dedent(JUDGED[name])
    on_ast, on_libcst = _compare(text)
    assert on_libcst is not None and "cannot be rewritten" in on_libcst[0]
    assert on_ast == on_libcst


@pytest.mark.parametrize("name", sorted(PLANNER))
def test_unsure_shapes_go_to_the_planner(name):
    text = textwrap.dedent(PLANNER[name])
    assert judged(text) == "planner"
    assert planned(text) is not None  # the engine reports the planner's finding


@pytest.mark.parametrize("where", ["train", "save_checkpoint"])
def test_generated_helpers(where):
    on_ast, on_libcst = _compare(HELPER.format(where=where))
    assert isinstance(on_ast, tuple) and on_ast == on_libcst


def _apex_sources() -> list[tuple[str, str]]:
    fixtures = [
        (str(p.relative_to(FIXTURES)), Source.from_bytes(p.read_bytes()).text)
        for p in FIXTURES.rglob("*.py")
    ]
    examples = [
        (f"{code} example {i}", ex.before)
        for code, rule in all_rules().items()
        for i, ex in enumerate(rule.invalid)
    ] + [
        (f"{code} valid {i}", text)
        for code, rule in all_rules().items()
        for i, text in enumerate(rule.valid)
    ]
    return fixtures + examples


def test_every_fixture_and_rule_example_without_initialize_matches_the_planner():
    compared = 0
    for name, text in _apex_sources():
        try:
            on_ast = judged(text)
        except SyntaxError:
            continue
        if on_ast == "no calls":
            continue
        expected = planned(text)
        if on_ast == "planner":
            # nothing here is left to it but initialize and the old `amp.init` (HandleInit)
            assert "initialize" in text or "amp.init(" in text, name
            continue
        assert on_ast == expected, name
        compared += 1
    assert compared >= 3  # blocked_sibling_helper, the trainer of two_modules, AMP303's example


@pytest.mark.parametrize(
    "path", sorted(p for p in (FIXTURES / "apex").rglob("*.py") if ".fixed" not in p.name)
)
def test_fixtures_with_initialize_renamed_match_the_planner(path):
    """Every apex fixture made a file without ``initialize`` (most of them initialize)."""
    text = re.sub(r"\b(apex_)?amp\.initialize\(", "amp_initialize(", path.read_text())
    on_ast, on_libcst = _compare(text)
    if on_ast == "no calls":
        assert on_libcst is None
    elif on_ast == "planner":  # apex behind a torch-version gate: only the planner can drop it;
        # a keyword, parameter or `global` spelled as the import (`amp=amp`,
        # `def save(model, amp)`, `global amp`): libcst may resolve it to the import; the old
        # `amp.init` is the planner's
        spelled = re.search(r"[(,]\s*amp\s*[=,)]|\bglobal amp\b", text)
        assert ("__version__" in text or spelled or "amp.init(" in text) and on_libcst is not None
    else:
        assert isinstance(on_ast, tuple) and on_ast == on_libcst


def test_check_never_imports_libcst_for_a_file_without_initialize(tmp_path):
    path = tmp_path / "cuda.py"
    path.write_text(textwrap.dedent(JUDGED["try_guard_only_with_else"]))
    script = (
        "import sys\n"
        "from ampmigrate.cli import main\n"
        "try:\n"
        f"    main(['check', {str(path)!r}])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('LIBCST' if 'libcst' in sys.modules else 'NO-LIBCST')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert "AMP303" in out.stdout and out.stdout.strip().endswith("NO-LIBCST"), out


def test_fix_leaves_such_a_file_and_reports_the_same_finding():
    text = textwrap.dedent(JUDGED["value_uses"])
    before = [d for d in check_source(text) if d.code == "AMP303"]
    out, remaining, fixed = fix_source(text, unsafe=True)
    assert out == text and not fixed
    assert [d for d in remaining if d.code == "AMP303"] == before
    assert len(before) == 1 and before[0].message == planned(text)[0]


_IMPORTS = [
    "from apex import amp",
    "import apex",
    "import apex.amp",
    "import apex.amp as amp",
    "from apex import amp, parallel",
    "from apex import fp16_utils",
    "import apex.parallel, apex.amp",
    "from apex.fp16_utils import *",
    "from apex.amp import scale_loss",
    "from apex import amp as apex_amp",
    "try:\n    from apex import amp\n    has = 1\nexcept ImportError:\n    amp = None\n    has = 0",
    "try:\n    from apex import amp\nexcept ImportError:\n    amp = None\n    other = 1",
    "try:\n    from apex import amp\nexcept ImportError:\n    print(0)\nelse:\n    print(amp)",
    "try:\n    import apex\nexcept (ImportError, RuntimeError):\n    apex = None",
    "try:\n    from apex import amp\nexcept ImportError:\n    pass\nfinally:\n    x = 1",
    "try:\n    from apex import amp\n    if x:\n        y = 2\nexcept:\n    amp = None",
]
_USES = [
    "amp.state_dict()",
    "amp.load_state_dict(sd)",
    "amp.master_params(opt)",
    "with amp.scale_loss(loss, opt) as s:\n    s.backward()",
    "amp.half_function(f)",
    "amp.register_half_function(torch, 'mm')",
    "x = amp",
    "print(amp)",
    "assert amp is not None",
    "assert amp is None",
    "assert not amp",
    "if amp is None:\n    pass",
    "y = amp is not None and z",
    "if not amp or z:\n    pass",
    "apex.amp.state_dict()",
    "q = apex.amp",
    "scale_loss(l, o)",
    "apex_amp.master_params(o)",
    "z = [amp.state_dict(), amp.state_dict()]",
    "torch.nn.utils.clip_grad_norm_(amp.master_params(opt), 1.0)",
    "del amp",
    "with amp.disable_casts():\n    pass",
]
_HOMES = [
    "{uses}",
    "def f(loss, opt):\n{uses:4}",
    "async def g(l, o):\n{uses:4}",
    "class T:\n    def step(self, loss, opt):\n{uses:8}",
    "def outer():\n    def inner(loss, opt):\n{uses:8}\n    return inner",
]


def test_random_combinations_match_the_planner():
    """Seeded combinations of apex imports and uses in functions, methods and at module level:
    the order and deduplication of the blockers, not only each kind alone."""
    rng = random.Random(0)
    compared = 0
    for _ in range(60):
        parts = rng.sample(_IMPORTS, rng.randint(1, 4))
        for _ in range(rng.randint(1, 4)):
            uses = "\n".join(rng.sample(_USES, rng.randint(1, 4)))
            home = rng.choice(_HOMES)
            for width in (4, 8):
                home = home.replace(f"{{uses:{width}}}", textwrap.indent(uses, " " * width))
            parts.append(home.replace("{uses}", uses))
        text = "\n\n".join(parts) + "\n"
        on_ast = judged(text)
        if on_ast == "no calls":
            continue
        assert on_ast == planned(text), text
        compared += 1
    assert compared >= 30


def test_a_method_without_initialize_is_told_to_keep_the_scaler_on_its_object():
    """A trainer method that scales apex's loss: the GradScaler fits on its object
    (`self.scaler`); a plain function gets a `scaler` parameter. ast and libcst agree."""
    method = textwrap.dedent(
        """
        from apex import amp


        class Trainer:
            def backward(self, loss, optimizer):
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
        """
    )
    on_ast, on_libcst = _compare(method)
    assert on_ast == on_libcst
    assert "keep the GradScaler on `backward`'s object (`self.scaler`" in on_ast[0]
    function = method.replace("class Trainer:\n    def backward(self, ", "def backward(")
    function = "\n".join(line.removeprefix("    ") for line in function.splitlines())
    on_ast, on_libcst = _compare(function)
    assert on_ast == on_libcst
    assert "give `backward` a `scaler` parameter (`scaler.scale(loss)" in on_ast[0]


def test_a_transformers_trainer_subclass_is_told_the_library_initializes():
    """An HF Trainer subclass's `training_step` copy (`if self.use_apex: amp.scale_loss`,
    else the accelerator's backward): transformers' Trainer runs `amp.initialize` itself, so
    the refusal says to train with its native AMP and drop the branch, not to keep a
    GradScaler on the object. ast and libcst agree; a class of another base keeps the advice."""
    source = textwrap.dedent(
        """
        from transformers import Trainer
        from transformers.utils import is_apex_available

        if is_apex_available():
            from apex import amp


        class MyTrainer(Trainer):
            def training_step(self, model, inputs):
                loss = self.compute_loss(model, inputs)
                if self.use_apex:
                    with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                        scaled_loss.backward()
                else:
                    self.accelerator.backward(loss)
                return loss.detach()
        """
    )
    on_ast, on_libcst = _compare(source)
    assert on_ast == on_libcst
    assert "in a subclass of `transformers.Trainer`" in on_ast[0]
    assert "transformers' Trainer calls it itself" in on_ast[0]
    assert "keep the GradScaler" not in on_ast[0]
    other = source.replace("from transformers import Trainer", "from mylib import Trainer")
    on_ast, on_libcst = _compare(other)
    assert on_ast == on_libcst and "keep the GradScaler on `training_step`'s object" in on_ast[0]
