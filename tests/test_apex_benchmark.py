"""The apex benchmark's classifier (scripts/apex_benchmark.py) on hand-written snippets: the
region invariant and the eligibility rules decide what the success rate means."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap

from conftest import ROOT

_spec = importlib.util.spec_from_file_location(
    "apex_benchmark", ROOT / "scripts" / "apex_benchmark.py"
)
bench = importlib.util.module_from_spec(_spec)
sys.modules["apex_benchmark"] = bench
_spec.loader.exec_module(bench)


def violations(source: str, models: set[str]) -> list[str]:
    return bench.region_violations(textwrap.dedent(source), models)


def use(source: str):
    return bench.apex_use(textwrap.dedent(source))


GOOD_LOOP = """
    def train(model, optimizer, scaler, batches):
        for x, y in batches:
            with torch.amp.autocast("cuda", dtype=torch.float16):
                out = model(x)
                loss = crit(out, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
"""


def test_forward_and_loss_in_the_region_and_backward_outside_pass():
    assert violations(GOOD_LOOP, {"model"}) == []


def test_forward_outside_the_region_is_reported_with_its_line():
    source = """
        def train(model, optimizer, scaler, batches):
            for x, y in batches:
                out = model(x)
                if accumulate:
                    with torch.autocast("cuda"):
                        loss = crit(out, y) / 2
                else:
                    with torch.autocast("cuda"):
                        loss = crit(out, y)
                scaler.scale(loss).backward()
    """
    assert violations(source, {"model"}) == ["line 4: `model(...)` in train runs outside autocast"]


def test_a_script_training_at_module_level_is_judged():
    source = """
        for x, y in batches:
            out = model(x)
            with torch.autocast("cuda"):
                loss = crit(out, y)
            scaler.scale(loss).backward()
    """
    assert violations(source, {"model"}) == [
        "line 3: `model(...)` in <module> runs outside autocast"
    ]


def test_backward_inside_the_region_is_reported():
    source = """
        def train(model, scaler, x):
            with torch.amp.autocast("cuda"):
                loss = model(x).sum()
                scaler.scale(loss).backward()
    """
    assert violations(source, {"model"}) == ["line 5: `.backward()` in train is in autocast"]


def test_a_disabled_autocast_block_is_no_region():
    source = """
        def train(model, scaler, x):
            with torch.amp.autocast("cuda", enabled=False):
                loss = model(x).sum()
            scaler.scale(loss).backward()
    """
    assert len(violations(source, {"model"})) == 1


def test_only_initialized_models_and_training_functions_are_judged():
    source = """
        def train(model, teacher, scaler, x):
            with teacher_context():
                target = teacher(x)
            with torch.amp.autocast("cuda"):
                loss = (model(x) - target).sum()
            scaler.scale(loss).backward()

        def evaluate(model, x):
            return model(x)
    """
    assert violations(source, {"model"}) == []


def test_a_method_computing_the_scaled_loss_must_run_in_the_region():
    source = """
        class Trainer:
            def batch_loss(self, batch):
                return self.model(**batch)["loss"]

            def validate(self, batch):
                return self.model(**batch)

            def train_step(self, batch):
                loss = self.batch_loss(batch)
                metrics = self.validate(batch)
                self.scaler.scale(loss).backward()
    """
    assert violations(source, {"self.model"}) == [
        "line 4: `self.model(...)` in Trainer.batch_loss (computes the scaled loss) runs"
        " outside autocast"
    ]
    wrapped = source.replace(
        "loss = self.batch_loss(batch)",
        'with torch.amp.autocast("cuda"):\n                    loss = self.batch_loss(batch)',
    )
    assert violations(wrapped, {"self.model"}) == []


def test_a_later_assignment_does_not_enter_the_loss_data_flow():
    source = """
        def train(model, scaler, batches, valset):
            for x in batches:
                with torch.amp.autocast("cuda"):
                    pred = model(x)
                    loss = crit(pred)
                scaler.scale(loss).backward()
                val_loss, pred = validation(model, valset)

        def validation(model, valset):
            return model(valset), None
    """
    assert violations(source, {"model"}) == []


def test_a_closure_that_scales_the_loss_is_a_training_function():
    source = """
        def main(model, optimizer):
            scaler = torch.amp.GradScaler("cuda")

            def update(batch):
                out = model(batch)
                scaled = scaler.scale(out.sum())
                scaled.backward()

            return update
    """
    assert violations(source, {"model"}) == [
        "line 6: `model(...)` in main.update runs outside autocast"
    ]


def test_unrewritten_apex_code_breaks_the_invariant():
    source = """
        def train(model, optimizer, x):
            loss = model(x).sum()
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
    """
    assert violations(source, {"model"}) == ["line 3: `model(...)` in train runs outside autocast"]


def test_o1_with_a_variable_opt_level_and_state_dicts_is_eligible():
    found = use(
        """
        from apex import amp

        def main(args, model, optimizer):
            model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level)
            torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
            torch.save({"amp": amp.state_dict()}, "c.pt")
        """
    )
    assert found.blockers == []
    assert found.models == {"model"}
    assert found.amp_calls == {"initialize", "master_params", "state_dict"}


def test_other_apex_features_make_a_file_ineligible():
    found = use(
        """
        import apex
        from apex.parallel import DistributedDataParallel
        from apex import amp

        class T:
            def setup(self):
                self.model, self.opt = amp.initialize(
                    self.model, self.opt, opt_level="O2" if self.fast else "O1",
                    keep_batchnorm_fp32=True, loss_scale=128.0,
                )
                amp.register_half_function(torch, "einsum")
                self.fused = apex.optimizers.FusedAdam(self.params)
        """
    )
    assert found.blockers == [
        "amp.register_half_function",
        "apex.optimizers",
        "apex.parallel",
        "initialize(keep_batchnorm_fp32=)",
        "initialize(loss_scale=)",
        "opt_level O2",
    ]
    assert found.models == {"self.model"}


def test_inference_only_initialize_is_not_a_training_rewrite():
    found = use(
        """
        from apex import amp
        model = amp.initialize(model, None, opt_level="O1")
        """
    )
    assert found.blockers == ["inference-only initialize (no optimizer)"]
    assert found.models == {"model"}


def test_a_torch_amp_module_named_amp_is_not_apex():
    found = use(
        """
        from torch.cuda import amp
        scaler = amp.GradScaler()
        """
    )
    assert not found.uses_apex


def test_opt_level_read_from_a_mapping_or_formatted_is_a_variable():
    found = use(
        """
        from apex import amp
        model, opt = amp.initialize(model, opt, opt_level=args["fp16_opt_level"])
        model, opt = amp.initialize(model, opt, opt_level="O%i" % params.amp)
        """
    )
    assert found.blockers == []


def test_a_wrapped_or_aliased_model_is_judged_too():
    source = """
        class Trainer:
            def __init__(self, model):
                self.model = model
                self._pytorch_model = DistributedDataParallel(self.model)

            def train_step(self, batch):
                loss = self._pytorch_model(**batch)["loss"]
                self.scaler.scale(loss).backward()
    """
    assert violations(source, {"self.model"}) == [
        "line 8: `self._pytorch_model(...)` in Trainer.train_step runs outside autocast"
    ]


def test_a_forward_helper_given_the_model_must_run_in_the_region():
    source = """
        def train(model, scaler, batches):
            for batch in batches:
                out = forward(model=model, batch=batch)
                loss = out.loss
                scaler.scale(loss).backward()
                log(model, loss)
    """
    assert violations(source, {"model"}) == [
        "line 4: `forward(..., model, ...)` in train computes the scaled loss with the model"
        " outside autocast"
    ]


def test_a_parameter_added_by_the_rewrite_must_reach_every_caller():
    original = "def do_train(model, optimizer):\n    pass\n"
    output = "def do_train(model, optimizer, scaler):\n    pass\n"
    added = bench.added_parameters(original, output)
    func, new = added["do_train"]
    assert new == ["scaler"]
    caller = textwrap.dedent(
        """
        import trainer
        from trainer import do_train
        run = do_train
        do_train(m, o)
        do_train(m, o, scaler)
        trainer.do_train(m, o, scaler=scaler)
        run(m, o)
        net.do_train(m, o)
        """
    )
    assert bench.missed_callers("do_train", func, new, caller) == [5, 8]
    # another script with a `do_train` of its own calls that one by the plain name
    own = "def do_train(model, optimizer):\n    pass\ndo_train(m, o)\ntrainer.do_train(m, o)\n"
    own = "import trainer\n" + own
    assert bench.missed_callers("do_train", func, new, own, own=False) == [5]
    assert bench.missed_callers("do_train", func, new, own) == [4, 5]


def test_a_sibling_projects_copy_that_imports_its_own_module_is_no_caller(tmp_path):
    """Two sub-projects with their own `mmcv_custom/runner` (UniFormer's detection and
    segmentation): the one not rewritten calls `from .checkpoint import save_checkpoint`, its
    own module, not the changed one; a copy importing the changed module still counts."""
    func, new = bench.added_parameters(
        "def save_checkpoint(model, filename):\n    pass\n",
        "def save_checkpoint(model, filename, *, scaler):\n    pass\n",
    )["save_checkpoint"]
    for project in ("detection", "segmentation"):
        (tmp_path / project / "runner").mkdir(parents=True)
        (tmp_path / project / "runner" / "checkpoint.py").write_text("")
    changed = tmp_path / "detection" / "runner" / "checkpoint.py"
    runner = "from .checkpoint import save_checkpoint\n\nsave_checkpoint(m, 'x.pth')\n"
    other = tmp_path / "segmentation" / "runner" / "runner.py"
    assert bench.missed_callers("save_checkpoint", func, new, runner, False, other, changed) == []
    mine = tmp_path / "detection" / "runner" / "runner.py"
    assert bench.missed_callers("save_checkpoint", func, new, runner, False, mine, changed) == [3]


def test_the_census_names_every_apex_module_and_object_a_file_uses():
    path = ROOT / "scripts" / "apex_census.py"
    spec = importlib.util.spec_from_file_location("apex_census", path)
    census = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(census)
    source = """
        import apex
        import amp_C
        from apex import amp
        from apex.optimizers import FusedAdam as Adam
        from apex.parallel import DistributedDataParallel
        import apex.normalization as norm

        model, opt = amp.initialize(model, Adam(params), opt_level="O1")
        model = apex.parallel.convert_syncbn_model(model)
        layer = norm.FusedRMSNorm(8)
    """
    assert census.apex_names(textwrap.dedent(source)) == [
        "amp_C",
        "apex",
        "apex.amp",
        "apex.amp.initialize",
        "apex.normalization",
        "apex.normalization.FusedRMSNorm",
        "apex.optimizers.FusedAdam",
        "apex.parallel",
        "apex.parallel.DistributedDataParallel",
        "apex.parallel.convert_syncbn_model",
    ]
    assert census.apex_names("from torch.cuda import amp\nscaler = amp.GradScaler()\n") == []


def row(file: str, split: str, migrate: bool | None, outcome: str, eligible: bool = True):
    reason = "unchanged; no finding" if outcome == "silent" else ""
    outcome = "refused" if outcome == "silent" else outcome
    return bench.Row(file, eligible, outcome, reason, split=split, migrate=migrate)


def test_each_split_is_reported_on_its_own_and_the_held_out_rows_are_withheld():
    rows = [
        row("a+b/tuned.py", "tuned", None, "rewritten"),
        row("a+b/old.py", "tuned", None, "refused", eligible=False),
        row("c+d/one.py", "dev", True, "rewritten"),
        row("c+d/two.py", "dev", True, "refused"),
        row("c+d/three.py", "dev", False, "rewritten"),
        row("e+f/secret_name.py", "heldout", True, "wrong"),
        row("e+f/other.py", "heldout", False, "silent"),
    ]
    text = bench.report(rows, "stamp", markdown=False)
    assert "secret_name" not in text
    assert "c+d/three.py\tno\trewritten" in text
    assert text.splitlines()[-3:] == [
        "tuned: 2 files of 1 repositories, 1 eligible (automatic) migratable, 1/1 rewritten"
        " (100 %), 0 wrong, 0 rewritten though judged not migratable, 0 with no finding",
        "dev: 3 files of 1 repositories, 2 judged migratable, 1/2 rewritten (50 %), 0 wrong,"
        " 1 rewritten though judged not migratable, 0 with no finding",
        "heldout: 2 files of 1 repositories, 1 judged migratable, 0/1 rewritten (0 %), 1 wrong,"
        " 0 rewritten though judged not migratable, 1 with no finding",
    ]
    assert "secret_name" in bench.report(rows, "stamp", markdown=True, show_heldout=True)


def test_every_new_file_of_the_corpus_has_a_hand_judgement():
    manifest = json.loads(bench.MANIFEST.read_text())
    for entry in manifest["entries"]:
        judged = entry.get("judgement", {})
        if entry["split"] == "tuned":
            continue
        assert sorted(judged) == sorted(entry["files"]), entry["repo"]
        for verdict in judged.values():
            assert isinstance(verdict["migrate"], bool) and verdict["why"]
    dev = bench.select(manifest, "dev")["entries"]
    assert dev and {e["split"] for e in dev} == {"dev"}


def test_an_apex_import_the_rewrite_left_unguarded_is_wrong():
    """The original ran without apex (every apex import in a try that catches ImportError); a
    rewrite that drops the try and keeps `from apex.parallel import ...` fails at import."""
    guarded = textwrap.dedent("""
        try:
            from apex import amp
            from apex.parallel import DistributedDataParallel
            has_apex = True
        except ImportError:
            has_apex = False
    """)
    dropped = "from apex.parallel import DistributedDataParallel\nhas_apex = True\n"
    kept = guarded.replace("    from apex import amp\n", "")
    assert bench.unguarded_apex(guarded, dropped) == [
        "line 1: apex import no longer guarded (fails at import without apex)"
    ]
    assert bench.unguarded_apex(guarded, kept) == []
    # an original that already needed apex at import is not made worse by the rewrite
    assert bench.unguarded_apex("from apex import amp\n", "from apex import parallel\n") == []


def test_the_setting_reaches_every_ampmigrate_run(monkeypatch, tmp_path):
    """``--apex-opt-level O1`` measures what a project that declares the setting gets: each
    ``fix`` and ``check`` the classifier runs carries it, and the stamp says so."""
    seen: list[list[str]] = []

    class Done:
        stdout, stderr, returncode = "[]", "", 0

    def classify(*args):
        stamp = bench._version()
        bench.ampmigrate("check", "x")
        return [], stamp

    monkeypatch.setattr(bench.subprocess, "run", lambda argv, **kw: seen.append(argv) or Done())
    monkeypatch.setattr(bench, "SETTING", [])
    monkeypatch.setattr(bench, "classify", classify)
    stamps: list[str] = []
    monkeypatch.setattr(bench, "report", lambda rows, stamp, *a: stamps.append(stamp) or "")
    bench.main([str(tmp_path), "--split", "dev"])
    assert not any("--apex-opt-level" in argv for argv in seen)
    assert "setting" not in stamps[-1]
    bench.main([str(tmp_path), "--split", "dev", "--apex-opt-level", "O1"])
    assert seen[-1][seen[-1].index("--apex-opt-level") + 1] == "O1"
    assert stamps[-1].endswith("setting apex-opt-level O1")
