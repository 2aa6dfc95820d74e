"""The apex API outside apex.amp (AMP311-AMP315): import forms, contexts, refusals, the floor."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from ampmigrate.catalog import all_rules
from ampmigrate.engine import run
from ampmigrate.engine.migrate import migrate_source
from ampmigrate.engine.settings import Settings

from conftest import check_source


def _fix(source: str, target_torch: tuple[int, ...] | None = None) -> tuple[str, list, list]:
    settings = Settings(
        rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True, target_torch=target_torch
    )
    new, remaining, fixed = migrate_source(textwrap.dedent(source).encode(), settings)
    return new.decode(), remaining, fixed


def _codes(source: str) -> list[str]:
    return [d.code for d in check_source(textwrap.dedent(source))]


def test_every_import_form_resolves_to_the_same_optimizer():
    forms = [
        "from apex.optimizers import FusedAdam as Adam\nopt = Adam(p, lr=1.0)\n",
        "import apex\nopt = apex.optimizers.FusedAdam(p, lr=1.0)\n",
        "import apex.optimizers as apex_optim\nopt = apex_optim.FusedAdam(p, lr=1.0)\n",
        "from apex.optimizers.fused_adam import FusedAdam\nopt = FusedAdam(p, lr=1.0)\n",
        "import apex as amp\nopt = amp.optimizers.FusedAdam(p, lr=1.0)\n",
        "def f(p):\n    from apex import optimizers\n    return optimizers.FusedAdam(p, lr=1.0)\n",
    ]
    for source in forms:
        out, remaining, fixed = _fix(source)
        assert "torch.optim.AdamW(p, lr=1.0, weight_decay=0.0)" in out, source
        assert "apex" not in out, out
        assert [d.code for d in fixed] == ["AMP311"] and not remaining


def test_text_that_only_looks_like_apex_is_left_alone():
    source = """
    from deepspeed.ops.adam import FusedAdam
    from mylib import apex

    opt = FusedAdam(p)
    norm = apex.normalization.FusedLayerNorm(8)
    """
    assert not [c for c in _codes(source) if c.startswith("AMP31")]


def test_refusals_say_why_and_change_nothing():
    cases = {
        "FusedAdam(p, **cfg)": "the keys of `**cfg` are not all visible here",
        "FusedAdam(p, adam_w_mode=args.adamw)": "depends on its value",
        "FusedAdam(p, set_grad_none=False)": "set_to_none=False",
        "FusedAdam(p, max_grad_norm=1.0)": "pre-2019 FusedAdam",
        "FusedAdam(p, master_weights=True)": "master copies",
    }
    for call, reason in cases.items():
        source = f"from apex.optimizers import FusedAdam\nopt = {call}\n"
        out, remaining, _ = _fix(source)
        assert out == source
        [finding] = [d for d in remaining if d.code == "AMP311"]
        assert reason in finding.message and finding.fix is None


def test_a_fused_adam_beside_the_old_fp16_optimizer_is_the_pre_2019_one():
    """The 67th review: `FP16_Optimizer` lived in `apex.optimizers` only before 2019-10, and
    it calls `step(grads=..., scale=...)` on the FusedAdam it wraps, which that era's class
    took. Rewritten to `torch.optim.AdamW`, the first step raised TypeError, though the
    message said "the same update rule". With the old wrapper in the file: no fix, and why."""
    source = """\
    from apex.optimizers import FusedAdam, FP16_Optimizer

    optimizer = FusedAdam(model.parameters(), lr=1e-3)
    optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
    """
    out, remaining, _ = _fix(source)
    assert out == textwrap.dedent(source)
    [finding] = [d for d in remaining if d.code == "AMP311"]
    assert finding.fix is None
    assert "uses `apex.optimizers.FP16_Optimizer` (line 4)" in finding.message
    assert "pre-2019" in finding.message
    modern = "from apex.optimizers import FusedAdam\n\noptimizer = FusedAdam(p, lr=1e-3)\n"
    assert "torch.optim.AdamW(p, lr=1e-3, weight_decay=0.0)" in _fix(modern)[0]


def test_rmsnorm_respects_the_project_torch_floor():
    source = "from apex.normalization import FusedRMSNorm\nnorm = FusedRMSNorm(8)\n"
    settings = Settings(rules=tuple(all_rules().values()), target_torch=(2, 1))
    _, remaining, _ = migrate_source(source.encode(), settings)
    [finding] = remaining
    assert finding.fix is None
    assert "needs torch >= 2.4; the project supports torch 2.1" in finding.message
    assert (
        _fix(source, target_torch=(2, 4))[0]
        == "import torch\n\nnorm = torch.nn.RMSNorm(8, eps=1e-5)\n"
    )


def test_floors_older_than_the_torch_api_withhold_the_fix():
    """The 72nd review's wrong rewrites: a project on torch 1.0/1.1 (TinyBERT's `torch>=1.0.1`)
    got `torch.optim.AdamW` (torch 1.2) and DDP's `find_unused_parameters` (1.1), which raise
    there. Each is withheld with the version it needs; FusedAdam's L2 mode, torch.optim.Adam,
    is in every torch."""
    cases = {
        "from apex.optimizers import FusedAdam\nopt = FusedAdam(p, lr=1e-3)\n": (
            (1, 1),
            (1, 2),
            "`torch.optim.AdamW` needs torch >= 1.2; the project supports torch 1.1",
        ),
        "from apex.parallel import DistributedDataParallel as DDP\nnet = DDP(net)\n": (
            (1, 0),
            (1, 1),
            "`find_unused_parameters=True` (which keeps apex's tolerance of "
            "parameters without a gradient) needs torch >= 1.1; the project supports torch 1.0",
        ),
        "from apex.parallel import convert_syncbn_model\nnet = convert_syncbn_model(net)\n": (
            (1, 0),
            (1, 1),
            "needs torch >= 1.1; the project supports torch 1.0",
        ),
    }
    for source, (old, new, text) in cases.items():
        settings = Settings(rules=tuple(all_rules().values()), target_torch=old)
        _, remaining, _ = migrate_source(source.encode(), settings)
        [finding] = remaining
        assert finding.fix is None and text in finding.message, source
        assert _fix(source, target_torch=new)[0] != source
    l2 = "from apex.optimizers import FusedAdam\nopt = FusedAdam(p, adam_w_mode=False)\n"
    assert "opt = torch.optim.Adam(p)\n" in _fix(l2, target_torch=(1, 0))[0]


def test_a_none_fallback_is_an_availability_flag_not_a_migration():
    source = """
    import torch

    try:
        from apex.optimizers import FusedAdam
    except ImportError:
        FusedAdam = None


    def build(p):
        if FusedAdam is not None:
            return FusedAdam(p, lr=1.0)
        return torch.optim.AdamW(p, lr=1.0)
    """
    out, remaining, _ = _fix(source)
    assert "return torch.optim.AdamW(p, lr=1.0, weight_decay=0.0)" in out
    [left] = [d for d in remaining if d.code == "AMP311"]
    assert "availability check" in left.message and left.fix is None


def test_a_swap_without_the_projects_own_class_is_not_deleted():
    source = """
    try:
        from apex.normalization import FusedRMSNorm

        RMSNorm = FusedRMSNorm
    except ImportError:
        pass
    """
    out, remaining, _ = _fix(source)
    assert "RMSNorm = torch.nn.RMSNorm" not in out  # a value use: RMSNorm's eps differs
    assert any(d.code == "AMP312" and d.fix is None for d in remaining)


def test_value_and_type_uses():
    source = """
    from apex.optimizers import FusedAdam
    from apex.parallel import DistributedDataParallel as DDP, SyncBatchNorm

    factory = FusedAdam
    wrapper = DDP
    bn = SyncBatchNorm
    """
    out, remaining, _ = _fix(source)
    assert "bn = torch.nn.SyncBatchNorm" in out
    messages = {d.message.split(":")[0]: d.message for d in remaining}
    assert any("weight decay" in m or "defaults" in m for m in messages.values())
    assert any("broadcast_buffers" in m for m in messages.values())
    assert "factory = FusedAdam" in out and "wrapper = DDP" in out


def test_no_native_names_get_a_finding_naming_the_alternative():
    source = """
    import amp_C
    from apex.parallel import LARC
    from apex.optimizers import FusedLAMB
    from apex.transformer import parallel_state

    opt = LARC.LARC(torch.optim.SGD(p, lr=0.1), trust_coefficient=0.02)
    lamb = FusedLAMB(p)
    norms = amp_C.multi_tensor_l2norm
    rank = parallel_state.get_tensor_model_parallel_rank()
    """
    remaining = check_source(textwrap.dedent(source))
    texts = [d.message for d in remaining if d.code == "AMP315"]
    assert len(texts) == 4
    assert any("timm.optim.Lars" in t for t in texts)
    assert any("timm.optim.Lamb" in t for t in texts)
    assert any("_foreach_" in t for t in texts)
    assert any("Megatron Core" in t for t in texts)
    assert all(d.fix is None for d in remaining if d.code == "AMP315")


def test_each_compiled_extension_names_its_own_counterpart():
    """The 67th review: every compiled extension was told the multi-tensor text (private
    `_foreach_*` ops), which fits only `amp_C`: a layer-norm kernel's counterpart is
    `F.layer_norm`, a SyncBatchNorm kernel's `nn.SyncBatchNorm`."""
    source = """
    import amp_C
    import fused_layer_norm_cuda
    import syncbn
    import fused_adam_cuda

    scale = amp_C.multi_tensor_scale
    norm = fused_layer_norm_cuda.forward
    stats = syncbn.welford_mean_var
    adam = fused_adam_cuda.adam
    """
    texts = {
        d.message.split("`")[1].partition(".")[0]: d.message
        for d in check_source(textwrap.dedent(source))
        if d.code == "AMP315"
    }
    assert "_foreach_" in texts["amp_C"]
    assert "torch.nn.functional.layer_norm" in texts["fused_layer_norm_cuda"]
    assert "torch.nn.SyncBatchNorm" in texts["syncbn"]
    assert "torch.optim.AdamW" in texts["fused_adam_cuda"]
    assert sum("_foreach_" in t for t in texts.values()) == 1


def test_apex_amp_and_fp16_optimizer_belong_to_their_own_rules():
    source = """
    from apex import amp
    from apex.fp16_utils import FP16_Optimizer

    model, opt = amp.initialize(model, opt)
    opt = FP16_Optimizer(opt)
    """
    assert not [c for c in _codes(source) if c.startswith("AMP31")]


def test_a_project_of_fixable_apex_uses_ends_apex_free_and_compiles():
    source = """
    import torch
    import apex
    from apex import amp
    from apex.normalization import FusedLayerNorm
    from apex.parallel import DistributedDataParallel as DDP, convert_syncbn_model


    def train(model, loader):
        model.norm = FusedLayerNorm(8)
        model = convert_syncbn_model(model)
        optimizer = apex.optimizers.FusedAdam(model.parameters(), lr=1e-3)
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        model = DDP(model, delay_allreduce=True)
        for x, y in loader:
            optimizer.zero_grad()
            loss = model(x).sum()
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
    """
    out, remaining, fixed = _fix(source)
    compile(out, "<migrated>", "exec")
    assert "apex" not in out, out
    assert not remaining
    assert {d.code for d in fixed} == {"AMP303", "AMP311", "AMP312", "AMP313"}
    again, _, fixed_again = _fix(out)
    assert again == out and not fixed_again


def test_a_call_only_the_torch_fallback_accepts_is_left_alone():
    source = """
    try:
        from apex.parallel import DistributedDataParallel as DDP
        has_apex = True
    except ImportError:
        from torch.nn.parallel import DistributedDataParallel as DDP
        has_apex = False


    def wrap(model, rank):
        if has_apex:
            return DDP(model, delay_allreduce=True)
        return DDP(model, device_ids=[rank])
    """
    out, remaining, _ = _fix(source)
    assert "torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True" in out
    assert "return DDP(model, device_ids=[rank])" in out
    assert not [d for d in remaining if d.code == "AMP313"]


def test_a_name_bound_to_the_torch_class_too_keeps_torch_s_defaults_for_its_calls():
    """The 47th review: `if fused: from apex.optimizers import FusedAdam as Opt` / `else: from
    torch.optim import AdamW as Opt`, then `Opt(params, lr=...)`: the fix wrote one
    `torch.optim.AdamW(..., weight_decay=0.0)`, so the runs that took torch's arm lost its
    default weight decay (0.01). Refused where the fix would write out a default; a call that
    gives the argument, or one only apex's class takes (`delay_allreduce`), is rewritten."""
    template = """
    def build(args, params):
        if args.fused:
            from apex.optimizers import FusedAdam as Opt
        else:
            from torch.optim import AdamW as Opt
        return Opt(params, {arguments})
    """
    out, remaining, _ = _fix(template.format(arguments="lr=args.lr"))
    assert "from apex.optimizers import FusedAdam as Opt" in out
    [refusal] = [d for d in remaining if d.code == "AMP311"]
    assert "the name is also bound to `torch.optim.AdamW` itself" in refusal.message
    assert "`weight_decay=0.0`" in refusal.message
    out, remaining, _ = _fix(template.format(arguments="lr=args.lr, weight_decay=0.05"))
    assert "torch.optim.AdamW(params, lr=args.lr, weight_decay=0.05)" in out
    assert "apex" not in out and not remaining
    # torch's Adam in the other arm (the 49th review): a weight decay there is L2, which the
    # AdamW the fix writes would make decoupled; without one the two classes agree
    adam = template.replace("import AdamW as Opt", "import Adam as Opt")
    out, remaining, _ = _fix(adam.format(arguments="lr=args.lr, weight_decay=0.1"))
    [refusal] = [d for d in remaining if d.code == "AMP311"]
    assert "the name is also bound to `torch.optim.Adam`, whose calls would build" in (
        refusal.message
    )
    out, remaining, _ = _fix(adam.format(arguments="lr=args.lr"))
    assert "torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)" in out and not remaining
    # the other arm's class by assignment, a project class, another package's (the 50th
    # review: each became AdamW); `None` there is an availability flag (calling it raises)
    for arm, named in (
        ("Opt = torch.optim.Adam", "the name is also bound to `torch.optim.Adam`"),
        ("Opt = CPUAdam", "the name is also bound at line 8 (`Opt = CPUAdam`)"),
        ("from deepspeed.ops.adam import DeepSpeedCPUAdam as Opt",
         "(`from deepspeed.ops.adam import DeepSpeedCPUAdam as Opt`), which this call may run"),
    ):  # fmt: skip
        other = "\n    import torch\n" + template.replace(
            "from torch.optim import AdamW as Opt", arm
        )
        _, remaining, _ = _fix(other.format(arguments="lr=args.lr, weight_decay=0.1"))
        [refusal] = [d for d in remaining if d.code == "AMP311"]
        assert named in refusal.message, refusal.message
    # an argument only apex takes does not prove the call apex's where a project class or
    # another package's may take it too (the 51st review)
    other = template.replace("from torch.optim import AdamW as Opt", "Opt = MyAdam")
    _, remaining, _ = _fix(
        other.format(arguments="lr=args.lr, weight_decay=0.1, set_grad_none=True")
    )
    assert any("(`Opt = MyAdam`), which this call may run" in d.message for d in remaining)
    # a binding later in a loop reaches the call on the next pass (the 51st review)
    looped = """
    import torch
    from apex.optimizers import FusedAdam as Opt


    def build(params):
        for _ in range(2):
            try:
                return Opt(params, lr=1e-2, weight_decay=0.1)
            except RuntimeError:
                Opt = torch.optim.Adam
    """
    _, remaining, fixed = _fix(looped)
    assert not fixed and any("`torch.optim.Adam`" in d.message for d in remaining)
    arms = """
    import torch
    from apex.optimizers import FusedAdam as Opt

    opts = []
    for i in range(2):
        if i == 0:
            Opt = torch.optim.Adam
        else:
            opts.append(Opt(params, lr=1e-2, weight_decay=0.1))
    """
    _, remaining, fixed = _fix(arms)  # another arm, but the loop joins them (the 52nd review)
    assert not fixed and any("`torch.optim.Adam`" in d.message for d in remaining)
    flag = template.replace("from torch.optim import AdamW as Opt", "Opt = None")
    out, remaining, _ = _fix(flag.format(arguments="lr=args.lr"))
    assert "torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)" in out and not remaining


def test_an_unused_apex_module_import_goes():
    source = """
    import torch

    try:
        from apex import amp, optimizers
    except ImportError:
        amp = None
    from apex import parallel

    model, opt = amp.initialize(model, opt)
    """
    out, _, fixed = _fix(source)
    assert "from apex import amp\n" in out and "optimizers" not in out and "parallel" not in out
    grades = {d.message.split("`")[1]: d.fix for d in fixed if d.code.startswith("AMP31")}
    assert grades == {"apex.optimizers": "unsafe", "apex.parallel": "safe"}


def test_a_function_local_apex_import_beside_a_torch_one_goes_with_its_use():
    """DeeBERT's distiller: `if fp16: from apex.parallel import DistributedDataParallel` and
    `else: from torch.nn.parallel import DistributedDataParallel` in one method. The else
    arm's read of the name made the apex import look used (by scope), so it stayed after its
    own call was rewritten, and `check` passed a file that still needs apex."""
    source = """
    import torch


    def wrap(model, fp16):
        if fp16:
            from apex.parallel import DistributedDataParallel

            print("apex DDP")
            model = DistributedDataParallel(model)
        else:
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model, device_ids=[0])
        return model
    """
    out, remaining, fixed = _fix(source)
    assert "apex" not in out.replace('"apex DDP"', "") and not remaining
    assert "    if fp16:\n        print(" in out  # (the blank line after it went with it)
    assert {d.code for d in fixed} == {"AMP313"} and len(fixed) == 2
    again, _, refixed = _fix(out)
    assert again == out and not refixed
    compile(out, "wrap", "exec")
    # a read its own arm does not rebind first may be the apex class: the import stays
    kept = source.replace(
        "            from torch.nn.parallel import DistributedDataParallel\n\n", ""
    )
    out, _, _ = _fix(kept)
    assert "from apex.parallel import DistributedDataParallel" in out


def test_the_two_module_apex_project_ends_apex_free_with_every_rule(tmp_path):
    """fixtures/apex/two_modules with AMP303 and this family together: no apex import is left,
    every file compiles, a second run changes nothing."""
    import shutil
    from pathlib import Path

    from ampmigrate.engine import run

    from conftest import FIXTURES

    root = tmp_path / "project"
    shutil.copytree(FIXTURES / "apex" / "two_modules" / "before", root)
    files = sorted(root.rglob("*.py"))
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    for result in run(files, settings):
        if result.changed:
            Path(result.path).write_bytes(result.new_source)
    for path in files:
        tree = compile(path.read_text(), str(path), "exec", ast.PyCF_ONLY_AST)
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        imported += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in imported if m and m.split(".")[0] == "apex"], path
    assert not [d for r in run(files, settings) for d in r.fixed + r.diagnostics]


DDP_BEFORE_INITIALIZE = """
import torch
from apex import amp
from apex.parallel import DistributedDataParallel


class Trainer:
    def __init__(self, model, multi_gpu):
        self.model = model
        self.optim = torch.optim.SGD(model.parameters(), lr=0.1)
        if multi_gpu:
            self.model = DistributedDataParallel(self.model)
            self.model, self.optim = amp.initialize(self.model, self.optim, opt_level="O2")

    def step(self, x):
        loss = self.model(x).sum()
        with amp.scale_loss(loss, self.optim) as scaled:
            scaled.backward()
        self.optim.step()
"""


def test_an_apex_wrapper_that_initialize_receives_waits_for_the_amp_rewrite():
    """apex's `initialize` raises RuntimeError for a torch DistributedDataParallel and let
    its own through (its test for it never fires): swapping the wrapper while `initialize`
    stays broke the multi-GPU path (TNT's trainers). Refused with that reason while
    `initialize` stays (O2); where the amp rewrite removes it (O1; O0, a disabled GradScaler),
    the next pass of the same `fix` swaps it."""
    out, remaining, _ = _fix(DDP_BEFORE_INITIALIZE)
    assert "DistributedDataParallel(self.model)" in out and "apex.parallel" in out
    [ddp] = [d for d in remaining if d.code == "AMP313"]
    assert "reaches `amp.initialize` at line 13" in ddp.message and ddp.fix is None
    for level in ('"O1"', '"O0"'):
        out, remaining, fixed = _fix(DDP_BEFORE_INITIALIZE.replace('"O2"', level))
        assert "apex" not in out and not remaining, out
        assert sorted(d.code for d in fixed) == ["AMP303", "AMP313"]
        written = "find_unused_parameters=True, broadcast_buffers=False)"
        assert f"DistributedDataParallel(self.model, {written}" in out


def test_an_apex_wrapper_made_after_initialize_is_swapped():
    source = """
    from apex import amp
    from apex.parallel import DistributedDataParallel

    def setup(model, optim):
        model, optim = amp.initialize(model, optim, opt_level="O2")
        model = DistributedDataParallel(model)
        return model, optim
    """
    out, _, fixed = _fix(source)
    written = "find_unused_parameters=True, broadcast_buffers=False)"
    assert f"DistributedDataParallel(model, {written}" in out
    assert "AMP313" in [d.code for d in fixed]
    source = source.replace("        model = DistributedDataParallel(model)\n", "").replace(
        "initialize(model,", "initialize(DistributedDataParallel(model),"
    )
    _, remaining, _ = _fix(source)
    [ddp] = [d for d in remaining if d.code == "AMP313"]
    assert "reaches `amp.initialize` at line 6" in ddp.message


def test_a_syncbn_conversion_before_initialize_is_still_swapped():
    """apex's `check_models` rejects parallel wrappers only: a model converted to SyncBatchNorm
    before `initialize` (the MVS trainers) is an ordinary module there."""
    source = """
    from apex import amp
    from apex.parallel import convert_syncbn_model

    def setup(model, optim):
        model = convert_syncbn_model(model)
        model, optim = amp.initialize(model, optim, opt_level="O2")
        return model, optim
    """
    out, _, fixed = _fix(source)
    assert "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)" in out
    assert "AMP313" in [d.code for d in fixed]


def test_a_fallback_that_is_not_the_torch_counterpart_is_not_kept_as_the_migration():
    """long-context-asr, ERNIE (27th review): a fallback that is the project's own norm (other
    parameter names, eps and numerics), `FusedAdam = torch.optim.Adam` (L2 decay where apex's
    is decoupled) or torch's RMSNorm (eps default) was kept as "the same function": no fix
    now, and the finding says what the fallback is (a project's own class has its own fix, see
    `test_a_projects_own_fallback_class_gives_way_to_the_torch_counterpart`). torch's LayerNorm
    still is the migration."""
    cases = {
        "from apex.normalization import FusedRMSNorm as RMS": (
            "from mypkg.norms import RMSNorm as RMS", "binds `RMS` to `mypkg.norms.RMSNorm`"),
        "from apex.optimizers import FusedAdam": (
            "FusedAdam = torch.optim.Adam", "(apex's maps to `torch.optim.AdamW`)"),
        "from apex.normalization import FusedLayerNorm as LN": (
            "def LN(h):\n        return torch.nn.LayerNorm(h)", "it defines `LN` itself (line 5)"),
        "from apex.normalization import FusedRMSNorm as Norm": (
            "Norm = torch.nn.RMSNorm", "`torch.nn.RMSNorm`'s defaults differ from apex's"),
        "from apex.normalization import FusedLayerNorm": (
            "import mypkg.norm as FusedLayerNorm", "binds `FusedLayerNorm` to `mypkg.norm`"),
    }  # fmt: skip
    for imported, (fallback, why) in cases.items():
        name = imported.rpartition(" ")[2]  # (read as a value: no call shows its arguments)
        source = f"import torch\ntry:\n    {imported}\nexcept ImportError:\n    {fallback}\n"
        source += f"registry = [{name}]\n"
        [finding] = [d for d in check_source(source) if d.code.startswith("AMP31")]
        assert "the fallback is not its migration" in finding.message, finding.message
        assert why in finding.message, finding.message
        assert finding.fix is None
        assert _fix(source)[0] == source
    kept = "import torch\ntry:\n    from apex.normalization import FusedLayerNorm as LN\n"
    kept += "except ImportError:\n    LN = torch.nn.LayerNorm\n"
    assert _fix(kept)[0] == "import torch\nLN = torch.nn.LayerNorm\n"
    # FlagAI (28th review): a relative import was read as nothing, so "the migration"; it is
    # the project's class, taken from another module: the class fallback's fix, which states
    # it (the 72nd review: it was refused)
    flagai = "import torch\ntry:\n    from apex.normalization.fused_layer_norm import "
    flagai += "FusedLayerNorm as LayerNorm\nexcept ImportError:\n    from .layer_norm import "
    flagai += "LayerNorm\n"
    out, _, [fixed] = _fix(flagai)
    assert out == "import torch\nLayerNorm = torch.nn.LayerNorm\n"
    assert "the project's own class `LayerNorm`, taken from the project's `.layer_norm`" in (
        fixed.message
    )


def test_an_annotation_gets_the_torch_class():
    """X-VLM (27th review): `-> Tuple[ApexDDP, Optimizer]` was refused as "used as a value ...
    the calls are not visible", which was false (an annotation constructs nothing, and the
    call was rewritten beside it), and the apex import stayed for it alone."""
    source = """\
        from typing import Optional, Tuple

        from apex.parallel import DistributedDataParallel as DDP


        def wrap(model, opt) -> Tuple[DDP, object]:
            wrapped: Optional[DDP] = DDP(model)
            return wrapped, opt
        """
    new, remaining, _ = _fix(source)
    assert "apex" not in new and not remaining
    assert "-> Tuple[torch.nn.parallel.DistributedDataParallel, object]:" in new
    assert "wrapped: Optional[torch.nn.parallel.DistributedDataParallel] = " in new
    findings = [d for d in check_source(textwrap.dedent(source)) if d.code == "AMP313"]
    assert sum("in an annotation, which constructs nothing" in d.message for d in findings) == 2
    compile(new, "new", "exec")


def test_the_sync_batchnorm_function_is_not_said_to_be_ddps_all_reduce():
    """dual_imagenet's vendored SyncBatchNorm calls apex's `SyncBatchnormFunction` with its own
    statistics (27th review): the reason given was DDP's gradient all-reduce, which is not
    what the function's collective does."""
    source = (
        "from apex.parallel.sync_batchnorm_kernel import SyncBatchnormFunction\n"
        "y = SyncBatchnormFunction.apply(x, w, b, mean, var, 1e-5, None, 2)\n"
    )
    messages = [d.message for d in check_source(source) if d.code == "AMP315"]
    assert messages and all("DistributedDataParallel does its own" not in m for m in messages)
    assert any("all-reduces the batch-norm gradient terms" in m for m in messages), messages


BERT_FALLBACK = """\
import logging

import torch
from torch import nn

logger = logging.getLogger(__name__)

try:
    from apex.normalization.fused_layer_norm import FusedLayerNorm as BertLayerNorm
except ImportError:
    logger.info("Better speed can be achieved with apex installed.")

    class BertLayerNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-12):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.bias = nn.Parameter(torch.zeros(hidden_size))
            self.variance_epsilon = eps

        def forward(self, x):
            u = x.mean(-1, keepdim=True)
            s = (x - u).pow(2).mean(-1, keepdim=True)
            x = (x - u) / torch.sqrt(s + self.variance_epsilon)
            return self.weight * x + self.bias


class Embeddings(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.LayerNorm = BertLayerNorm(hidden, eps=1e-12)


def init_weights(module):
    if isinstance(module, BertLayerNorm):
        module.weight.data.fill_(1.0)
"""

T5_FALLBACK = """\
from torch import nn

try:
    from apex.normalization import FusedRMSNorm as T5LayerNorm
except ImportError:

    class T5LayerNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.scale = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, x):
            v = x.pow(2).mean(-1, keepdim=True)
            return self.scale * x * torch.rsqrt(v + self.variance_epsilon)


class Block(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = T5LayerNorm(hidden)


class Scaled(T5LayerNorm):
    def forward(self, x):
        return super().forward(x) * self.weight
"""


def _rms(x, weight, eps):
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def test_a_projects_own_fallback_class_gives_way_to_the_torch_counterpart():
    """BERT's forks (vilbert, ERNIE): `try: from apex... import FusedLayerNorm as BertLayerNorm`
    with the project's TF-style class as the fallback got a finding and no fix. What ran with
    apex is kept (torch's counterpart under the same name; for RMSNorm a class with apex's
    eps default), the project's class goes, and the message says what changes where apex was
    not installed (its class, its defaults, its parameter names)."""
    import torch

    out, remaining, fixed = _fix(BERT_FALLBACK)
    assert not remaining and "apex" not in out and "class BertLayerNorm" not in out
    assert "logger.info" not in out
    assert "\nBertLayerNorm = torch.nn.LayerNorm\n" in out
    [finding] = fixed
    assert "the project's own class `BertLayerNorm` (line 13)" in finding.message
    assert "`__init__(self, hidden_size, eps=1e-12)`" in finding.message
    assert "Where it was not, the project's class" in finding.message
    assert "checkpoints" not in finding.message  # weight and bias, as torch's
    assert _fix(out)[0] == out
    scope: dict = {}
    exec(compile(out, "bert", "exec"), scope)
    emb = scope["Embeddings"](8)
    scope["init_weights"](emb.LayerNorm)
    x = torch.randn(2, 8)
    assert torch.allclose(emb.LayerNorm(x), torch.nn.functional.layer_norm(x, (8,), eps=1e-12))

    out, remaining, fixed = _fix(T5_FALLBACK)
    assert not remaining and "import apex" not in out and "self.scale" not in out
    assert "class T5LayerNorm(torch.nn.RMSNorm):" in out and "import torch\n" in out
    [finding] = fixed
    assert "its parameters (`scale`) are not torch's (`weight`)" in finding.message
    assert "`eps=1e-5` default" in finding.message
    assert _fix(out)[0] == out
    scope = {}
    exec(compile(out, "t5", "exec"), scope)
    block, scaled = scope["Block"](8), scope["Scaled"](8)
    assert block.norm.eps == 1e-5 and isinstance(block.norm, torch.nn.RMSNorm)
    x = torch.randn(2, 8) * 1e-3  # where eps matters
    assert torch.allclose(block.norm(x), _rms(x, block.norm.weight, 1e-5))
    assert torch.allclose(scaled(x), _rms(x, 1.0, 1e-5))


def test_a_projects_fallback_class_stays_where_a_use_may_need_it():
    """The rule: every use of the name outside the `try` is a call whose arguments torch's
    class takes alike, a type test, or a subclass that reads only what it sets itself or what
    apex's and torch's classes share; the name is not imported by another module; torch's
    class exists in the project's oldest torch. Otherwise the finding says why, and no fix."""
    cases = {
        "x = BertLayerNorm(8, memory_efficient=True)\n": "passes `memory_efficient`",
        "x = BertLayerNorm(**cfg)\n": "passes a splat",
        "class Sub(BertLayerNorm):\n    def f(self):\n        return self.variance_epsilon\n": (
            "reads `self.variance_epsilon`"
        ),
        "eff = emb.LayerNorm.memory_efficient\n": "`.memory_efficient` is read at line 38",
    }
    for extra, reason in cases.items():
        source = BERT_FALLBACK + "\n\n" + extra
        out, remaining, _ = _fix(source)
        assert out == source, extra
        [finding] = [d for d in remaining if d.code == "AMP312"]
        assert reason in finding.message and finding.fix is None, finding.message
        assert "the fallback is not its migration" in finding.message
    # a value torch's LayerNorm may stand for as apex's does (TinyBERT's registry, the 72nd
    # review): fixed, as the plain import's value is
    out, remaining, _ = _fix(BERT_FALLBACK + "\n\nNORM = {'layer_norm': BertLayerNorm}\n")
    assert "BertLayerNorm = torch.nn.LayerNorm\n" in out and not remaining
    out, remaining, _ = _fix(T5_FALLBACK, target_torch=(2, 1))
    assert out == T5_FALLBACK
    [finding] = remaining
    assert "`torch.nn.RMSNorm` needs torch >= 2.4; the project supports torch 2.1" in (
        finding.message
    )


RMS_AS_VALUE = """\
import torch
from apex.normalization import FusedRMSNorm

norm_cls = FusedRMSNorm


class Scaled(FusedRMSNorm):
    def forward(self, x):
        return super().forward(x) * 2


def build(hidden):
    norm = FusedRMSNorm(hidden)
    return norm, isinstance(norm, (FusedRMSNorm, torch.nn.LayerNorm))
"""


def test_rmsnorm_as_a_value_becomes_a_class_with_apexs_eps_default():
    """`norm_cls = FusedRMSNorm`, a subclass of it: torch's RMSNorm would take the input
    dtype's machine epsilon where apex took 1e-5 at calls not visible here. The import becomes
    a subclass of torch's with apex's parameters and default under the same name, so every use
    keeps working (its calls, the value, the subclass); a call and a type test still get
    torch's class."""
    import torch

    out, remaining, fixed = _fix(RMS_AS_VALUE)
    assert not remaining and "apex" not in out.replace("apex's", "")
    assert "\n\n\nclass FusedRMSNorm(torch.nn.RMSNorm):\n" in out
    assert "norm_cls = FusedRMSNorm\n" in out and "class Scaled(FusedRMSNorm):" in out
    assert "norm = torch.nn.RMSNorm(hidden, eps=1e-5)" in out
    assert "isinstance(norm, (torch.nn.RMSNorm, torch.nn.LayerNorm))" in out
    assert any("used as a value, so the import becomes" in d.message for d in fixed)
    assert all(d.code == "AMP312" for d in fixed)
    again, _, refixed = _fix(out)
    assert again == out and not refixed
    scope: dict = {}
    exec(compile(out, "rms", "exec"), scope)
    x = torch.randn(3, 8) * 1e-3
    made = scope["norm_cls"](8)
    assert made.eps == 1e-5 and scope["norm_cls"](8, 1e-6, False, True).weight is None
    assert torch.allclose(made(x), _rms(x, 1.0, 1e-5))
    assert not torch.allclose(torch.nn.RMSNorm(8)(x), _rms(x, 1.0, 1e-5))  # torch's default
    assert torch.allclose(scope["Scaled"](8)(x), 2 * _rms(x, 1.0, 1e-5))
    assert scope["build"](8)[1]
    # an alias, another name in the import, no `import torch`, a function-level import
    source = (
        "from apex.normalization import FusedRMSNorm as RMS, FusedLayerNorm\n"
        "import numpy as np\n\nLN = FusedLayerNorm\nlayers = {'rms': RMS}\n"
    )
    out, remaining, _ = _fix(source)
    assert not remaining and "apex" not in out.replace("apex's", "")
    assert out.startswith("import numpy as np\nimport torch\n\n\nclass RMS(torch.nn.RMSNorm):")
    assert _fix(out)[0] == out
    exec(compile(out, "alias", "exec"), scope)
    assert scope["layers"]["rms"](4).eps == 1e-5
    source = "def f():\n    from apex.normalization import MixedFusedRMSNorm\n\n"
    source += "    return MixedFusedRMSNorm\n"
    out, remaining, _ = _fix(source)
    assert not remaining and "    class MixedFusedRMSNorm(torch.nn.RMSNorm):\n" in out
    exec(compile(out, "local", "exec"), scope)
    assert scope["f"]()(4).eps == 1e-5


def test_rmsnorm_as_a_value_is_refused_where_the_class_cannot_stand_in():
    cases = {
        RMS_AS_VALUE.replace("import torch\n", "") + "import torch\n": (
            "`torch` is imported at line 14, after the apex import"
        ),
        RMS_AS_VALUE + "eff = build(8)[0].memory_efficient\n": "`.memory_efficient` is read",
    }
    for source, reason in cases.items():
        out, remaining, _ = _fix(source)
        assert "from apex.normalization import FusedRMSNorm" in out
        assert any(reason in d.message and d.fix is None for d in remaining), remaining


_FACTORY = """
from apex.optimizers import FusedAdam, FusedSGD


def build(args, params):
    kw = {{"lr": args.lr, "weight_decay": args.wd}}
    if args.eps is not None:
        kw["eps"] = args.eps
    if args.betas is not None:
        kw.update(betas=args.betas)
    {extra}
    if args.name == "sgd":
        kw.pop("eps", None)
        return FusedSGD(params, momentum=0.9, nesterov=True, **kw)
    return FusedAdam(params, adam_w_mode=args.name == "adamw" or True, **kw)
"""


def test_a_splat_of_a_dict_built_in_the_function_is_mapped_and_builds_the_same_optimizer():
    import torch

    out, remaining, fixed = _fix(_FACTORY.format(extra="pass"))
    assert "torch.optim.SGD(params, momentum=0.9, nesterov=True, **kw)" in out, out
    assert [d.code for d in fixed] == ["AMP311"]  # adam_w_mode is not a literal: refused
    [left] = [d for d in remaining if d.code == "AMP311"]
    assert "depends on its value" in left.message
    assert "`**kw` carries" in fixed[0].message
    namespace: dict = {}
    runnable = out.replace("from apex.optimizers import FusedAdam\n", "")
    exec(compile(runnable, "migrated", "exec"), namespace)
    args = type("A", (), {"lr": 0.1, "wd": 1e-4, "eps": 1e-8, "betas": None, "name": "sgd"})
    opt = namespace["build"](args, [torch.nn.Parameter(torch.ones(2))])
    group = opt.param_groups[0]
    assert type(opt) is torch.optim.SGD and (group["lr"], group["weight_decay"]) == (0.1, 1e-4)


def test_a_splat_whose_keys_are_not_all_visible_is_refused_with_the_reason():
    cases = {
        "kw = dict(kw, lr=2.0)": "line 11 binds `kw` to a value whose keys are not all literal",
        "configure(kw)": "line 11 uses `kw` in a way that may change it",
        "kw[args.key] = 1.0": "line 11 uses `kw` in a way that may change it",
        "kw = load()": "line 11 binds `kw` to a value whose keys are not all literal",
        # (the 81st review's AdvXL: "uses" was said of the line that builds it)
        "kw = dict(lr=2.0, **args.extra)": "line 11 binds `kw` to a value whose keys are not",
        "kw.update(args.extra)": "line 11 uses `kw` in a way that may change it",
        "kw['set_grad_none'] = True": "`**kw` may carry `set_grad_none`, which the fix must drop",
        "kw['maximize'] = True": "`maximize`, which apex's signature lacks and `torch.optim.SGD`",
    }
    for extra, reason in cases.items():
        source = textwrap.dedent(_FACTORY.format(extra=extra))
        out, remaining, _ = _fix(source)
        assert out == source, extra
        sgd = [d for d in remaining if d.code == "AMP311" and "FusedSGD" in d.message]
        assert sgd and reason in sgd[0].message, (extra, sgd[0].message if sgd else remaining)


def test_a_splat_that_may_lack_weight_decay_is_refused_for_adamw_but_not_for_adam():
    source = """
    from apex.optimizers import FusedAdam


    def build(args, params):
        kw = {"lr": args.lr}
        if args.wd:
            kw["weight_decay"] = args.wd
        return FusedAdam(params, adam_w_mode={mode}, **kw)
    """
    out, remaining, _ = _fix(source.replace("{mode}", "True"))
    [finding] = [d for d in remaining if d.code == "AMP311"]
    assert "may carry `weight_decay` or not" in finding.message
    out, remaining, fixed = _fix(source.replace("{mode}", "False"))
    assert "torch.optim.Adam(params, **kw)" in out and [d.code for d in fixed] == ["AMP311"]


def test_a_splat_in_a_comprehension_reads_the_functions_dict():
    source = """
    from apex.optimizers import FusedAdam


    def build(args, groups):
        kw = dict(lr=args.lr, weight_decay=0.0)
        return [FusedAdam(g, **kw) for g in groups]
    """
    out, remaining, fixed = _fix(source)
    assert "[torch.optim.AdamW(g, **kw) for g in groups]" in out
    assert [d.code for d in fixed] == ["AMP311"] and not remaining


def test_apex_ddp_is_kept_where_the_file_calls_its_own_methods():
    """A fairseq-style trainer toggles `disable_allreduce()`/`enable_allreduce()` on apex's
    DDP: torch's has neither (AttributeError at the first step), so neither the call nor the
    type test is rewritten, and the refusal names the methods (29th review, FlagPerf)."""
    import torch

    source = """
    from apex.parallel import DistributedDataParallel as DDP


    class Trainer:
        def __init__(self, model, world):
            self.model = DDP(model) if world > 1 else model

        def step(self, batch, last):
            if isinstance(self.model, DDP):
                if last:
                    self.model.disable_allreduce()
                else:
                    self.model.enable_allreduce()
    """
    out, remaining, fixed = _fix(source)
    assert out == textwrap.dedent(source) and not fixed
    ddp = [d for d in remaining if d.code == "AMP313"]
    assert len(ddp) == 2 and all("`disable_allreduce()`" in d.message for d in ddp)
    assert not hasattr(torch.nn.parallel.DistributedDataParallel, "disable_allreduce")
    plain = (
        textwrap.dedent(source)
        .replace("disable_allreduce", "train")
        .replace("enable_allreduce", "eval")
    )
    assert "torch.nn.parallel.DistributedDataParallel(model" in _fix(plain)[0]


def test_a_torch_fallback_is_the_migration_where_every_call_gives_what_differs():
    """FlagPerf's GLM (29th review): `except ImportError: from torch.optim import AdamW as Adam`
    was "not its migration" by its default `weight_decay`, though the one call passes it; and
    `FusedAdam = torch.optim.Adam` is apex's update wherever no weight decay is given. Both
    build what apex built, so the fallback stays and the `try` goes; a call that leaves the
    differing default to the fallback gets apex's written out (the 31st review), and one
    that passes decay to Adam keeps the refusal."""
    import torch

    head = "import torch\ntry:\n    from apex.optimizers import FusedAdam as Adam\n"
    adamw = head + "except ImportError:\n    from torch.optim import AdamW as Adam\n"
    adam = head + "except ImportError:\n    Adam = torch.optim.Adam\n"
    calls = {
        (adamw, "Adam(ps, lr=0.1, weight_decay=0.0, eps=1e-6)"): "passes `weight_decay`",
        (adamw, "Adam(ps, 0.1, weight_decay=0.0)"): "passes `weight_decay`",
        (adam, "Adam(ps, lr=0.1, betas=(0.8, 0.9))"): "no weight decay",
        (adam, "Adam(ps, lr=0.1, weight_decay=0)"): "no weight decay",
        # (LLaMA2-Accessory, 31st review) apex's default is written where the call leaves it
        (adamw, "Adam(ps, lr=0.1)"): "apex's default is written where a call leaves",
        (adam, "Adam(ps, lr=0.1, weight_decay=0.1)"): None,  # L2 where apex decoupled
        (adamw, "Adam(ps, 0.1, True, (0.8, 0.9), weight_decay=0.0)"): None,  # positions differ
        (adamw, "Adam(ps, lr=0.1, weight_decay=0.0, bias_correction=False)"): None,
        (adamw, "Adam(ps, weight_decay=0.0, **kw)"): None,
        (adamw, "[Adam(ps, weight_decay=0.0), Adam][0]"): None,  # a use that is no call
    }
    for (fallback, call), why in calls.items():
        source = fallback + f"\n\ndef build(ps, kw=None):\n    return {call}\n"
        out, remaining, fixed = _fix(source)
        if why is None:
            assert out == source, call
            [left] = [d for d in remaining if d.code == "AMP311"]
            assert "the fallback is not its migration" in left.message, left.message
            continue
        [done] = [d for d in fixed if d.code == "AMP311"]
        assert why in done.message, done.message
        assert "apex" not in out and "try" not in out, out
        namespace: dict = {}
        exec(compile(out, "migrated", "exec"), namespace)
        group = namespace["build"]([torch.nn.Parameter(torch.ones(2))]).param_groups[0]
        assert group["weight_decay"] == 0.0, call


def test_fusedsgd_without_lr_is_mapped_where_every_group_carries_one():
    """FlagPerf's DLRM (29th review): `FusedSGD(groups)` with `lr` in every group was said to
    lack a required argument. A list built in the function from groups that each set `lr` is
    mapped (and builds the same optimizer); a group written without `lr` already fails, and
    groups not visible here get that reason, not a false one."""
    import torch

    source = textwrap.dedent("""\
        from apex import optimizers as apex_optim


        def build(top, bottom, lr, world, main_rank):
            groups = [{"params": top, "lr": lr}]
            if main_rank:
                groups.append({"params": bottom, "lr": lr / world})
            return apex_optim.FusedSGD(groups)


        def lacking(top):
            return apex_optim.FusedSGD([{"params": top}])


        def unseen(groups):
            return apex_optim.FusedSGD(groups)


        def changed(top, extra):
            groups = [dict(params=top, lr=0.1)]
            groups.extend(extra)
            return apex_optim.FusedSGD(groups)
        """)
    out, remaining, fixed = _fix(source)
    assert [d.code for d in fixed] == ["AMP311"], [d.message for d in remaining]
    assert "return torch.optim.SGD(groups)\n" in out
    reasons = sorted(d.message.split("no automatic fix: ")[1] for d in remaining)
    assert reasons[0].startswith("a parameter group written here has no `lr`"), reasons
    assert all("which is not visible here" in r for r in reasons[1:]) and len(reasons) == 3
    namespace: dict = {}
    exec(compile(out.replace("from apex import", "# "), "migrated", "exec"), namespace)
    top, bottom = [torch.nn.Parameter(torch.ones(2))], [torch.nn.Parameter(torch.ones(2))]
    opt = namespace["build"](top, bottom, 0.4, 4, True)
    assert [g["lr"] for g in opt.param_groups] == [0.4, 0.1]


def test_an_argument_passed_through_is_not_reported_as_its_worst_value():
    """A wrapper passing its own parameters positionally (29th review, shape s2) was told
    "`wd_after_momentum=True` has no torch counterpart" though nothing says True: the reason
    now says the value is not a literal. `lr` given positionally is no missing `lr`."""
    source = textwrap.dedent("""\
        from apex.optimizers import FusedSGD


        def SGD(params, lr, momentum=0, wd_after_momentum=False):
            return FusedSGD(params, lr, momentum, 0, 0, False, wd_after_momentum)
        """)
    out, remaining, fixed = _fix(source)
    [left] = [d for d in remaining if d.code == "AMP311"]
    assert "`wd_after_momentum` is given as `wd_after_momentum`, not as a literal" in left.message
    assert out == source and not fixed
    literal = source.replace("False, wd_after_momentum)", "False, False)")
    out, remaining, fixed = _fix(literal)
    assert "torch.optim.SGD(params, lr, momentum, 0, 0, False)" in out, out


def test_apex_contribs_clip_grad_norm_becomes_torchs_and_no_finding_contradicts_itself():
    """FlagPerf's MoFlow (29th review): `apex.contrib.clip_grad.clip_grad_norm_` "has no torch
    counterpart: `torch.nn.utils.clip_grad_norm_(...)`". apex's function is torch's with a
    fused CUDA norm (it calls torch's off CUDA): an unsafe rename now, which clips the same
    on CPU; a name with a named alternative is not said to have no counterpart."""
    import torch

    source = textwrap.dedent("""\
        from apex.contrib.clip_grad import clip_grad_norm_
        from apex.contrib.xentropy import SoftmaxCrossEntropyLoss


        def step(params, max_norm):
            return clip_grad_norm_(params, max_norm)


        def loss(logits, labels):
            return SoftmaxCrossEntropyLoss.apply(logits, labels, 0.0, 0, False)
        """)
    out, remaining, fixed = _fix(source)
    [done] = [d for d in fixed if d.code == "AMP314"]
    assert "inf above 65504" in done.message
    assert "return torch.nn.utils.clip_grad_norm_(params, max_norm)" in out
    [xentropy] = [d for d in remaining if d.code == "AMP315"]
    assert "no torch counterpart" not in xentropy.message
    assert "has no automatic fix; use instead: `torch.nn.functional.cross_entropy" in (
        xentropy.message
    )
    namespace: dict = {}
    exec(compile(out.replace("from apex.contrib.xentropy", "# "), "migrated", "exec"), namespace)
    p = torch.nn.Parameter(torch.zeros(4))
    p.grad = torch.full((4,), 3.0)
    norm = namespace["step"]([p], 1.0)
    assert torch.isclose(norm, torch.tensor(6.0)) and torch.isclose(
        p.grad.norm(), torch.tensor(1.0)
    )


def test_a_wrap_in_a_method_after_the_constructors_initialize_is_swapped():
    """EfficientSegmentation (30th review): `amp.initialize` in `__init__`, apex's DDP in
    `do_train`, was refused as "the wrapped model reaches `amp.initialize`", though on any
    instance `__init__` ran first. A method `__init__` calls before its `initialize` (directly
    or through another method) still reaches it."""
    source = textwrap.dedent("""\
        import apex
        from apex import amp


        class Trainer:
            def __init__(self, cfg, model, opt):
                self.cfg, self.model, self.opt = cfg, model, opt
                {before}
                if cfg.use_apex:
                    self.model, self.opt = amp.initialize(self.model, self.opt, opt_level="O1")
                self.fit()

            def setup(self):
                self.fit()

            def fit(self):
                self.model = apex.parallel.DistributedDataParallel(self.model)
        """)
    for before, swapped in (("pass", True), ("self.fit()", False), ("self.setup()", False)):
        [ddp] = [d for d in check_source(source.format(before=before)) if d.code == "AMP313"]
        assert (ddp.fix is not None) is swapped, (before, ddp.message)
        assert swapped or "reaches `amp.initialize` at line 10" in ddp.message


def test_a_name_a_package_re_exports_keeps_its_import(tmp_path):
    """ru-gpts (30th review): `mpu/transformer.py` imports FusedLayerNorm as LayerNorm and
    `mpu/__init__.py` re-exports it; rewriting the calls deleted the import, and `import mpu`
    raised ImportError (a wrong rewrite). A `from` import of the name in another module is a
    use now (relative or absolute): the import binds the name to torch's LayerNorm instead
    (same defaults), and the package imports and runs; a name whose torch class differs
    (FusedAdam -> AdamW's weight decay) is refused, naming the importer, used here or only
    re-exported; a FusedLayerNorm only re-exported (FlagPerf's one-line module) is rebound."""
    import subprocess
    import sys

    from ampmigrate.engine import run

    package = tmp_path / "mpu"
    package.mkdir()
    norm = "from apex.normalization import FusedLayerNorm as LayerNorm\n"
    calls = "\n\ndef block(d):\n    return LayerNorm(d, eps=1e-5)\n"
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    check = [sys.executable, "-c", "import mpu; mpu.transformer.block(4); print(mpu.LayerNorm)"]
    wrapped = (
        "from apex.normalization.fused_layer_norm import (\n    FusedLayerNorm as LayerNorm\n)\n"
    )
    for init, imported in (
        ("from .transformer import LayerNorm\n", norm),
        ("from mpu.transformer import LayerNorm\n", wrapped),  # HERO's, over two lines
    ):
        (package / "__init__.py").write_text(init + "from . import transformer\n")
        (package / "transformer.py").write_text(imported + calls)
        [result] = [r for r in run([package / "transformer.py"], settings)]
        [done] = [d for d in result.fixed if d.code == "AMP312"]
        assert "__init__.py:1" in done.message and "not read here" in done.message, done.message
        new = result.new_source.decode()
        assert new.startswith("from torch.nn import LayerNorm as LayerNorm\n"), new
        assert "return LayerNorm(d, eps=1e-5)" in new
        (package / "transformer.py").write_text(new)
        ran = subprocess.run(check, cwd=tmp_path, capture_output=True, text=True)
        assert "torch.nn.modules.normalization.LayerNorm" in ran.stdout, ran.stderr
        assert not [d for r in run([package / "transformer.py"], settings) for d in r.fixed]
    # FlagPerf's one-line `layers/layernorm.py` (29th review): a module that only re-exports it
    (package / "transformer.py").write_text(norm)
    [result] = [r for r in run([package / "transformer.py"], settings)]
    assert result.new_source.decode() == "from torch.nn import LayerNorm as LayerNorm\n"
    [done] = [d for d in result.fixed if d.code == "AMP312"]
    assert "is not read in this file, but other modules take it" in done.message
    adam = "from apex.optimizers import FusedAdam as LayerNorm\n"
    for body in (adam, adam + calls):
        (package / "transformer.py").write_text(body)
        [result] = [r for r in run([package / "transformer.py"], settings)]
        assert not result.changed and not result.fixed, body
        [kept] = [d for d in result.diagnostics if d.code.startswith("AMP31")]
        assert "__init__.py:1" in kept.message, kept.message
        assert "no automatic fix" in kept.message or "is not read in this file" in kept.message


def test_a_splat_dict_that_is_only_printed_or_logged_is_still_mapped():
    """VideoMAE and LaBraM (30th review): `print("optimizer settings:", opt_args)` was "a use
    that may change it", withholding four exact fixes; a refusal of `adam_w_mode=False` named
    AdamW, where the fix builds torch's Adam."""
    source = textwrap.dedent("""\
        import logging

        from apex.optimizers import FusedAdam, FusedSGD

        logger = logging.getLogger(__name__)


        def make(params, args):
            kw = dict(lr=args.lr, weight_decay=args.wd)
            print("optimizer:", kw)
            logger.info(f"settings {kw}")
            if args.opt == "adam":
                return FusedAdam(params, adam_w_mode=False, **kw)
            kw.pop("weight_decay")
            return FusedSGD(params, momentum=0.9, **kw)


        def unseen(params, kw):
            return FusedAdam(params, adam_w_mode=False, **kw)
        """)
    out, remaining, _ = _fix(source)
    assert "return torch.optim.Adam(params, **kw)" in out
    assert "return torch.optim.SGD(params, momentum=0.9, **kw)" in out
    [left] = [d for d in remaining if d.code == "AMP311"]
    assert left.message.startswith("`apex.optimizers.FusedAdam` -> `torch.optim.Adam`:")
    mutated = source.replace('    print("optimizer:", kw)\n', "    kw.clear()\n")
    assert "may change it" in " ".join(d.message for d in _fix(mutated)[1])


def test_an_apex_extension_loaded_by_name_gets_a_finding():
    """jukebox (30th review): `importlib.import_module("fused_adam_cuda")` kept the project on
    apex's kernel after every other apex use was migrated, and no rule said so."""
    source = textwrap.dedent("""\
        import importlib

        try:
            ext = importlib.import_module("fused_adam_cuda")
            step = ext.adam
        except ModuleNotFoundError:
            step = None
        other = __import__("apex.contrib.xentropy")
        fine = importlib.import_module("json")
        """)
    found = [d for d in check_source(source) if d.code == "AMP315"]
    assert [d.line for d in found] == [4, 8], [d.message for d in found]
    assert found[0].message.startswith("`fused_adam_cuda` is loaded by name at run time")
    assert "use instead: `torch.nn.functional.cross_entropy" in found[1].message


def test_an_apex_class_looked_up_by_name_names_its_torch_counterpart():
    """physicsnemo's diffusion_fwi (the 48th review): `getattr(importlib.import_module(
    "apex.optimizers"), "FusedAdam")` was told "this apex optimizer has no torch counterpart",
    from the module's name alone. The class named by the literal decides: FusedAdam's is
    `torch.optim.AdamW` (apex's `weight_decay=0.0` to pass), FusedLAMB has none."""
    source = textwrap.dedent("""\
        import importlib

        adam = getattr(importlib.import_module("apex.optimizers"), "FusedAdam")
        lamb = getattr(importlib.import_module("apex.optimizers"), "FusedLAMB")
        """)
    found = {d.line: d for d in check_source(source) if d.code.startswith("AMP31")}
    assert (found[3].code, found[4].code) == ("AMP311", "AMP315")
    assert found[3].message.startswith(
        "`apex.optimizers.FusedAdam` is loaded by name at run time: its torch counterpart is "
        "`torch.optim.AdamW`"
    )
    assert "passing `weight_decay=0.0` where a call gives none" in found[3].message
    assert found[4].message.startswith("`apex.optimizers.FusedLAMB` is loaded by name")
    assert "timm.optim.Lamb" in found[4].message and found[3].fix is None
    # the 49th review: a class read off the loaded module, and `__import__`, alike
    for line in (
        'LN = importlib.import_module("apex.normalization").FusedLayerNorm\n',
        'Adam = __import__("apex.optimizers", fromlist=["FusedAdam"]).FusedAdam\n',
        # down a chain (the 50th review); `__import__` without `fromlist` gives the package
        'Adam = importlib.import_module("apex").optimizers.FusedAdam\n',
        'Adam = __import__("apex.optimizers").optimizers.FusedAdam\n',
    ):
        [named] = [
            d for d in check_source("import importlib\n" + line) if d.code.startswith("AMP31")
        ]
        assert "is loaded by name at run time: its torch counterpart is `torch." in named.message


def test_a_fallback_of_several_names_pairs_each_with_its_own_counterpart():
    """atorch's `normalization/__init__.py` (the 48th review): FusedLayerNorm and apex's
    SyncBatchNorm in one `try`, torch's LayerNorm and SyncBatchNorm in the `except`: it was
    refused as "binds `SyncBatchNorm` to `torch.nn.SyncBatchNorm` (apex's maps to
    `torch.nn.LayerNorm`)", each name held against the first's counterpart. Each is its own
    migration: the fallback stays, and the message states both differences."""
    source = textwrap.dedent("""\
        try:
            from apex.normalization import FusedLayerNorm as LayerNorm
            from apex.parallel import SyncBatchNorm
        except ImportError:
            from torch.nn import LayerNorm
            from torch.nn import SyncBatchNorm
        ln = LayerNorm(8)
        bn = SyncBatchNorm(8)
        """)
    out, remaining, fixed = _fix(source)
    assert out.startswith("from torch.nn import LayerNorm\nfrom torch.nn import SyncBatchNorm\n")
    assert not remaining
    [finding] = fixed
    assert "the fallback is the migration" in finding.message
    assert "`apex.parallel.SyncBatchNorm` -> `torch.nn.SyncBatchNorm`" in finding.message
    swapped = source.replace(
        "from torch.nn import SyncBatchNorm", "from torch.nn import GroupNorm as SyncBatchNorm"
    )
    [refused] = [d for d in check_source(swapped) if d.code.startswith("AMP31")]
    assert "it binds `SyncBatchNorm` to `torch.nn.GroupNorm` (apex's maps to " in refused.message
    assert "`torch.nn.SyncBatchNorm`)" in refused.message


def test_an_apex_module_read_as_a_value_gets_a_finding():
    """physicsnemo's unified_recipe (the 48th review): `from apex import optimizers as
    apex_optimizers`, then `getattr(optimizers, cfg.name)(...)`: "All checks passed" on a file
    that cannot import without apex. The module read as a value is reported, with the torch
    counterparts of its names; the class is chosen at run time, so no fix."""
    source = textwrap.dedent("""\
        from apex import optimizers as apex_optimizers


        def build(cfg, params):
            optimizers = apex_optimizers
            return getattr(optimizers, cfg.name)(params, lr=1e-3)
        """)
    [finding] = [d for d in check_source(source) if d.code.startswith("AMP31")]
    assert finding.code == "AMP311" and finding.fix is None and finding.line == 5
    assert finding.message.startswith("`apex.optimizers` is read as a module value (line 5)")
    assert "`FusedAdam` -> `torch.optim.AdamW`" in finding.message
    dunder = (  # (49a)
        "from apex import optimizers\n\n\ndef build(name, params):\n"
        "    return optimizers.__dict__[name](params, lr=1e-3)\n"
    )
    [finding] = [d for d in check_source(dunder) if d.code.startswith("AMP31")]
    assert "`apex.optimizers` is read as a module value (line 5)" in finding.message
    got = dunder.replace("__dict__[name]", "__dict__.get(name)")  # (50a)
    [finding] = [d for d in check_source(got) if d.code.startswith("AMP31")]
    assert "`apex.optimizers` is read as a module value (line 5)" in finding.message


_LOCAL_CLASS = """\
import torch
from apex.optimizers import FusedAdam as Adam


def build(params, args):
    if args.cpu_optimizer:
        opt_cls = torch.optim.Adam
    else:
        opt_cls = Adam
    return opt_cls(params, lr=args.lr, weight_decay=args.wd, betas=(0.9, 0.95), eps=1e-8)
"""


def test_an_apex_class_bound_to_a_local_whose_calls_give_every_default_is_rewritten():
    """Megatron's `optimizer/__init__.py`, vendored in many projects (md_ppo, the 49th
    review): `adam_optimizer = Adam` in one arm (CPUAdam or bitsandbytes in the others), called
    below with `weight_decay` given. It was refused as "used as a value: the calls that
    construct it are not visible". Every call of the local is visible and gives the default
    that differs: `torch.optim.AdamW` builds there what apex built. A call that leaves
    `weight_decay` out, a local that escapes, or one read otherwise keeps the refusal."""
    torch = __import__("torch")
    out, remaining, fixed = _fix(_LOCAL_CLASS)
    [finding] = fixed
    assert "        opt_cls = torch.optim.AdamW\n" in out and "apex" not in out
    assert not remaining and finding.fix == "unsafe"
    assert "bound to `opt_cls` (line 9), whose every call in `build` (line 10) passes" in (
        finding.message
    )
    namespace: dict = {}
    exec(compile(out, "migrated", "exec"), namespace)
    args = type("Args", (), {"cpu_optimizer": False, "lr": 0.1, "wd": 0.0})()
    built = namespace["build"]([torch.nn.Parameter(torch.ones(2))], args)
    assert isinstance(built, torch.optim.AdamW) and built.defaults["weight_decay"] == 0.0
    printed = _LOCAL_CLASS.replace("    if args.cpu", "    print(vars(args))\n    if args.cpu")
    assert "torch.optim.AdamW" in _fix(printed)[0]  # `vars(x)` reads no local (51a)
    for old, new in (
        ("weight_decay=args.wd, ", ""),  # apex's default 0.0, torch's 0.01: not given
        ("    return opt_cls(", "    keep(opt_cls)\n    return opt_cls("),  # it escapes
        ("    return opt_cls(", "    print(opt_cls)\n    return opt_cls("),
        # read where no call shows it (the 50th review)
        ("    return opt_cls(", '    locals()["opt_cls"](params, lr=1.0)\n    return opt_cls('),
        ("    return opt_cls(", '    get = locals\n    get()["opt_cls"](ps)\n    return opt_cls('),
    ):
        changed = _LOCAL_CLASS.replace(old, new)
        assert changed != _LOCAL_CLASS
        [refused] = [d for d in check_source(changed) if d.code == "AMP311"]
        assert refused.fix is None and "used as a value" in refused.message, refused.message


def test_a_project_star_import_that_defines_the_name_keeps_it(tmp_path):
    """The 50th review: `from apex.normalization import FusedLayerNorm`, then `from mylib
    import *` where mylib defines its own `FusedLayerNorm`: the call, mylib's class at run
    time, became `torch.nn.LayerNorm`. A later star import of a project module that defines
    the name refuses; one that does not changes nothing."""
    from ampmigrate.engine import run

    source = (
        "import torch\nfrom apex.normalization import FusedLayerNorm\nfrom mylib import *\n\n"
        "m = FusedLayerNorm(4)\n"
    )
    (tmp_path / "train.py").write_text(source)
    (tmp_path / "mylib.py").write_text(
        "import torch\n\n\nclass FusedLayerNorm(torch.nn.GroupNorm):\n    pass\n"
    )
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    [result] = run([tmp_path / "train.py"], settings, jobs=1)
    assert not result.changed
    [kept] = [d for d in result.diagnostics if d.code == "AMP312"]
    assert "`from mylib import *` at line 3 comes after apex's import" in kept.message
    (tmp_path / "mylib.py").write_text("def helper():\n    pass\n")
    [result] = run([tmp_path / "train.py"], settings, jobs=1)
    assert result.changed and b"torch.nn.LayerNorm(4)" in result.new_source
    # bound otherwise (the 51st review): an import, an annotation, under `except`, a
    # package's own star import; a literal `__all__` without it binds nothing
    for library, rebinds in (
        ("from torch.nn import GroupNorm as FusedLayerNorm\n", True),
        ("import torch\nFusedLayerNorm: type = torch.nn.GroupNorm\n", True),
        ("try:\n    import apex\nexcept ImportError:\n    FusedLayerNorm = None\n", True),
        ("from .sub import *\n", True),
        ("__all__ = ['helper']\nFusedLayerNorm = None\n\n\ndef helper():\n    pass\n", False),
        # the 52nd review: `__all__` extended later, a tuple target, syntax this Python lacks
        ("__all__ = ['helper']\n__all__ += ['FusedLayerNorm']\nFusedLayerNorm = None\n", True),
        ("FusedLayerNorm, helper = None, None\n", True),
        ("type Alias = int\n", True),
    ):
        (tmp_path / "mylib.py").write_text(library)
        [result] = run([tmp_path / "train.py"], settings, jobs=1)
        assert result.changed != rebinds, library
    (tmp_path / "mylib.py").write_text("FusedLayerNorm = None\n")
    guarded = source.replace(
        "from mylib import *\n", "try:\n    from mylib import *\nexcept ImportError:\n    pass\n"
    )
    (tmp_path / "train.py").write_text(guarded)
    [result] = run([tmp_path / "train.py"], settings, jobs=1)
    assert not result.changed  # the star import inside a `try` counts too


def test_the_ddp_rewrite_states_that_torch_refuses_a_module_without_parameters():
    """CSI (the 51st review) wraps a buffers-only augmentation pipeline in apex's DDP, which
    passed it through; torch's raises RuntimeError at construction for a module without a
    parameter that requires a gradient. The finding says so, and what to do."""
    source = """
    from apex.parallel import DistributedDataParallel

    aug = DistributedDataParallel(make_augmentation(), delay_allreduce=True)
    """
    [finding] = [d for d in check_source(textwrap.dedent(source)) if d.code == "AMP313"]
    assert finding.fix == "unsafe"
    assert "torch raises RuntimeError at construction for a module without a parameter" in (
        finding.message
    )
    assert "drop the wrapper there" in finding.message


def test_betas_given_where_apex_takes_bias_correction_is_named_as_such():
    """StudioGAN (the 51st review): `FusedAdam(params, lr, [beta1, beta2], eps=1e-6)`: apex's
    third positional parameter is `bias_correction`, so apex ran with its default betas; the
    refusal said "`bias_correction=False` has no torch counterpart". It names the mix-up."""
    source = (
        "from apex.optimizers import FusedAdam\n\nopt = FusedAdam(ps, lr, [b1, b2], eps=1e-6)\n"
    )
    [finding] = [d for d in check_source(source) if d.code == "AMP311"]
    assert finding.fix is None
    assert (
        "positional argument 3 is apex's `bias_correction`, where `torch.optim.AdamW` takes "
        "`betas`: `[b1, b2]` there left apex on its own `betas` default"
    ) in finding.message
    own = "from apex.optimizers import FusedAdam\n\nopt = FusedAdam(ps, 1e-3, True, [0.9, 0.98])\n"
    out, _, _ = _fix(own)  # apex's own order: the list is its betas (the 52nd review)
    assert "torch.optim.AdamW(ps, 1e-3, betas=[0.9, 0.98]" in out, out


def test_a_fix_that_empties_a_guard_states_the_flag_its_except_set():
    """BiSeNet: `has_apex = True; try: from apex import parallel except ImportError:
    has_apex = False`; the DDP rewrite drops the import, the emptied `try` goes with its
    `except`, and `has_apex` stays True for a run without apex, whose torch DDP branch no
    longer runs: a behaviour change the message did not state. A flag nothing reads, or an
    `except` that sets none, adds nothing."""
    source = textwrap.dedent("""\
        import torch

        has_apex = True
        try:
            from apex import parallel
        except ImportError:
            has_apex = False


        def wrap(net, rank):
            if has_apex:
                net = parallel.DistributedDataParallel(net, delay_allreduce=True)
            else:
                net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[rank])
            return net
    """)
    out, _, fixed = _fix(source)
    [finding] = [d for d in fixed if d.code == "AMP313"]
    assert "try:" not in out and "has_apex = False" not in out
    assert (
        "behaviour change once the `try` at line 4 loses its last apex import: its `except`, "
        "which set `has_apex` where apex was not installed, goes with it, and every test of it "
        "(line 11) takes the path that ran where apex was installed"
    ) in finding.message
    unread = source.replace("    if has_apex:\n", "    if True:\n")
    [finding] = [d for d in _fix(unread)[2] if d.code == "AMP313"]
    assert "behaviour change once the `try`" not in finding.message
    # FAN (the 33rd review): the flag set in the `try` itself stays, and the `except`, which
    # can no longer run, goes with the `try` (since the 72nd review's dead `except`): stated
    inside = source.replace(
        "has_apex = True\ntry:\n    from apex import parallel\n",
        "try:\n    from apex import parallel\n    has_apex = True\n",
    )
    out, _, fixed = _fix(inside)
    [finding] = [d for d in fixed if d.code == "AMP313"]
    assert "import torch\n\nhas_apex = True\n\n\ndef wrap" in out, out
    assert (
        "its `except`, which set `has_apex` where apex was not installed, no longer runs"
    ) in finding.message
    # unmasked_teacher (the 47th review): an import of the `try` that has no fix (FusedLAMB)
    # keeps it, and its `except`, whatever the others' fixes do: nothing to state
    kept = source.replace(
        "    from apex import parallel\n",
        "    from apex import parallel\n    from apex.optimizers import FusedLAMB\n",
    )
    out, _, fixed = _fix(kept + "\nLAMB = FusedLAMB\n")
    [finding] = [d for d in fixed if d.code == "AMP313"]
    assert "from apex.optimizers import FusedLAMB\nexcept ImportError:" in out, out
    assert "behaviour change once the `try`" not in finding.message


def test_a_flag_that_picks_apex_by_name_keeps_its_guard():
    """physicsnemo's flow_reconstruction (the 48th review): `have_apex` from the guard picks
    `"apex.optimizers.FusedAdam"`, loaded by `importlib`. Dropping the unused import emptied
    the `try`, `have_apex` stayed True, and a run without apex raised ModuleNotFoundError.
    No fix while a string names apex; the message says which line."""
    source = textwrap.dedent("""\
        import importlib

        try:
            from apex.optimizers import FusedAdam
            have_apex = True
        except ImportError:
            have_apex = False


        def build(params):
            name = "apex.optimizers.FusedAdam" if have_apex else "torch.optim.Adam"
            module, cls = name.rsplit(".", 1)
            return getattr(importlib.import_module(module), cls)(params, lr=1e-3)
    """)
    out, remaining, fixed = _fix(source)
    assert out == source and not fixed
    finding, named = sorted((d for d in remaining if d.code == "AMP311"), key=lambda d: d.line)
    assert finding.fix is None
    assert "line 11 names `apex.optimizers.FusedAdam` in a string" in finding.message
    assert named.line == 11 and "the string" in named.message and named.fix is None
    torch_only = source.replace('"apex.optimizers.FusedAdam"', '"torch.optim.AdamW"')
    out, _, fixed = _fix(torch_only)
    assert "from apex" not in out and [d.code for d in fixed] == ["AMP311"]


def test_an_emptied_guard_last_in_its_block_keeps_the_comments_above_it():
    """A `try:` of apex imports only, emptied by the fix, goes; the comment lines above it
    moved to the next statement, and were lost where none followed (the 32nd review: a
    function's last statement). They stay, in the block's footer, as the import fix keeps
    them."""
    source = textwrap.dedent("""\
        import torch


        def wrap(net):
            from apex import parallel
            net = parallel.DistributedDataParallel(net)
            # apex is optional here
            try:
                from apex.optimizers import FusedSGD
            except ImportError:
                pass
    """)
    out, _, _ = _fix(source)
    assert "try:" not in out and "apex" not in out.replace("# apex is optional", ""), out
    assert out.endswith("    # apex is optional here\n"), out
    compile(out, "<fixed>", "exec")


def test_a_wrap_in_a_helper_called_after_initialize_does_not_reach_it():
    """BiSeNet's `set_model_dist(net)` binds the wrapper to its own local `net` and is called
    after `amp.initialize`: the refusal said the wrapped model "reaches `amp.initialize`"
    (the caller's `net` shares the name). Called before `initialize`, it does reach it."""
    source = textwrap.dedent("""\
        from apex import amp, parallel


        def wrap(net):
            net = parallel.DistributedDataParallel(net)
            return net


        def train(net, opt, loader):
            net, opt = amp.initialize(net, opt, opt_level="O1")
            net = wrap(net)
            for x in loader:
                loss = net(x).sum()
                with amp.scale_loss(loss, opt) as s:
                    s.backward()
                opt.step()
    """)
    [ddp] = [d for d in check_source(source) if d.code == "AMP313"]
    assert ddp.fix == "unsafe" and "reaches `amp.initialize`" not in ddp.message
    before = source.replace(
        '    net, opt = amp.initialize(net, opt, opt_level="O1")\n    net = wrap(net)\n',
        '    net = wrap(net)\n    net, opt = amp.initialize(net, opt, opt_level="O1")\n',
    )
    [ddp] = [d for d in check_source(before) if d.code == "AMP313"]
    assert ddp.fix is None and "the wrapped model reaches `amp.initialize` at line 11" in (
        ddp.message
    )


def test_an_unused_apex_import_of_a_package_init_is_deleted_or_left_by_hand(tmp_path):
    """CodeGeeX's `optimizer/__init__.py` keeps `from apex.optimizers import FusedAdam as Adam`
    once its call is rewritten: the fix offered its removal, which the import manager never
    makes in a package's `__init__` (its public API), so every pass counted it fixed again
    and the import stayed. No module takes the name: the statement itself goes. Two names in
    one statement: reported, to delete by hand."""
    from ampmigrate.engine import run

    package = tmp_path / "pkg" / "opt"
    package.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    init = package / "__init__.py"
    init.write_text(
        "import torch\nfrom apex.optimizers import FusedAdam as Adam\n\n\n"
        "def build(groups):\n    return torch.optim.AdamW(groups, weight_decay=0.0)\n"
    )
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    [result] = run([init], settings)
    assert result.changed and b"apex" not in result.new_source
    assert [d.code for d in result.fixed] == ["AMP311"]
    init.write_text(
        "import torch\nfrom apex.optimizers import FusedAdam as Adam, FusedSGD as SGD\n\n\n"
        "def build(groups):\n    return torch.optim.AdamW(groups, weight_decay=0.0)\n"
    )
    [result] = run([init], settings)
    assert not result.changed and not result.fixed
    assert all(d.fix is None and "delete it by hand" in d.message for d in result.diagnostics)
    assert len(result.diagnostics) == 2


def test_an_apex_import_bound_again_before_any_read_is_deleted_as_dead():
    """InternVideo's BERT fork: a guarded `FusedLayerNorm as BertLayerNorm` import, then
    `BertLayerNorm = torch.nn.LayerNorm` on the next line: every call already built torch's
    class, yet each was reported as an apex -> torch change with autocast's float32 output,
    and rewritten. The import is dead: it goes (with its `try`), the calls stay. Where
    something reads the name before it is bound again, the import is live."""
    source = textwrap.dedent("""\
        import logging

        import torch

        logger = logging.getLogger(__name__)

        try:
            from apex.normalization.fused_layer_norm import FusedLayerNorm as BertLayerNorm
        except (ImportError, AttributeError):
            logger.info("no apex")
        BertLayerNorm = torch.nn.LayerNorm


        class Block(torch.nn.Module):
            def __init__(self, h):
                super().__init__()
                self.ln = BertLayerNorm(h, eps=1e-12)
    """)
    out, remaining, fixed = _fix(source)
    [finding] = [d for d in fixed if d.code == "AMP312"]
    assert not remaining
    assert "which line 11 binds again before anything reads it" in finding.message
    assert "autocast" not in finding.message
    assert "apex" not in out and "try:" not in out
    assert "BertLayerNorm = torch.nn.LayerNorm\n" in out
    assert "self.ln = BertLayerNorm(h, eps=1e-12)" in out
    namespace: dict = {}
    exec(compile(out, "migrated", "exec"), namespace)
    assert isinstance(namespace["Block"](8).ln, __import__("torch").nn.LayerNorm)
    read = source.replace(
        "BertLayerNorm = torch.nn.LayerNorm\n",
        "Norm = BertLayerNorm\nBertLayerNorm = torch.nn.LayerNorm\n",
    )
    assert not any("binds again before anything reads it" in d.message for d in check_source(read))


FORWARD_ONLY = """\
import torch

try:
    from apex.normalization import FusedLayerNorm as _FusedLayerNorm

    has_fused_layernorm = True

    class FusedLayerNorm(_FusedLayerNorm):
        def forward(self, x):
            if not x.is_cuda:
                return super().forward(x)
            with torch.cuda.device(x.device):
                return super().forward(x)

except ImportError:
    has_fused_layernorm = False


def LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True):
    if has_fused_layernorm:
        return FusedLayerNorm(normalized_shape, eps, elementwise_affine)
    return torch.nn.LayerNorm(normalized_shape, eps, elementwise_affine)
"""


def test_a_forward_only_subclass_of_fused_layer_norm_is_rebased_on_torch_s():
    """fairseq's `layer_norm.py` (copied in fairseq forks, metaseq, ONE-PEACE and others):
    `FusedLayerNorm(_FusedLayerNorm)` only wraps `super().forward` in `torch.cuda.device`,
    and is built with torch's positional arguments. It was refused as relying on "apex's
    constructor arguments and internals"; rebased on `torch.nn.LayerNorm` it keeps its
    meaning, and the message states the `except` that can no longer run. One that reads an
    attribute only apex has, or has a constructor of its own that skips apex's, stays
    refused."""
    torch = __import__("torch")
    out, remaining, fixed = _fix(FORWARD_ONLY)
    [finding] = [d for d in fixed if d.code == "AMP312"]
    assert not remaining and "apex" not in out
    assert "    class FusedLayerNorm(torch.nn.LayerNorm):\n" in out
    assert "`has_fused_layernorm` now keeps the value the `try` sets" in finding.message
    namespace: dict = {}
    exec(compile(out, "migrated", "exec"), namespace)
    norm = namespace["LayerNorm"](8, 1e-6)
    reference = torch.nn.LayerNorm(8, 1e-6)
    x = torch.randn(3, 8)
    assert isinstance(norm, torch.nn.LayerNorm) and norm.eps == 1e-6
    assert torch.equal(norm(x), reference(x))
    for old, new, why in (
        ("        def forward(self, x):\n",
         "        def forward(self, x):\n            print(self.memory_efficient)\n",
         "reads `self.memory_efficient`"),
        ("        def forward(self, x):\n",
         "        def __init__(self, shape, eps, affine):\n"
         "            self.shape = shape\n\n"
         "        def forward(self, x):\n",
         "has a constructor of its own that does not call `super().__init__(...)`"),
    ):  # fmt: skip
        [refused] = [d for d in check_source(FORWARD_ONLY.replace(old, new)) if d.code == "AMP312"]
        assert refused.fix is None and why in refused.message, refused.message


_FALLS_BACK = """\
import torch
from torch import nn

try:
    from apex.normalization import FusedLayerNorm as _FusedLayerNorm

    class FastLN(_FusedLayerNorm):
        def forward(self, x):
            if not x.is_cuda:
                return super().forward(x)
            with torch.cuda.device(x.device):
                return super().forward(x)

except ImportError:
    {fallback}


def build(d, fast=True):
    norm = FastLN if fast else nn.LayerNorm
    return norm(d)
"""


def test_a_subclass_whose_fallback_is_torch_s_class_is_rebased_whatever_its_uses():
    """ESM (the 47th review): the subclass is read as a value (`FastLN if fast else ...`) and
    imported by other modules, so what is built with it was "not visible here". Its `except
    ImportError` binds the same name to `torch.nn.LayerNorm`: where apex was missing, every
    use built torch's class, so the rebase keeps every use working. A fallback that is another
    class keeps the refusal."""
    torch = __import__("torch")
    for fallback in ("from torch.nn import LayerNorm as FastLN", "FastLN = nn.LayerNorm"):
        out, remaining, fixed = _fix(_FALLS_BACK.format(fallback=fallback))
        [finding] = [d for d in fixed if d.code == "AMP312"]
        assert not remaining and "apex" not in out, out
        assert "    class FastLN(torch.nn.LayerNorm):\n" in out
        assert "the `except` at line 14 binds `FastLN` to `torch.nn.LayerNorm`" in (finding.message)
        namespace: dict = {}
        exec(compile(out, "migrated", "exec"), namespace)
        x = torch.randn(3, 8)
        assert torch.equal(namespace["build"](8)(x), torch.nn.LayerNorm(8)(x))
        assert _fix(out)[0] == out
    for fallback in (
        "FastLN = nn.GroupNorm",
        # the last binding counts (the 49th review: torch's LayerNorm, then a GroupNorm)
        "from torch.nn import LayerNorm as FastLN\n    FastLN = nn.GroupNorm",
    ):
        other = _FALLS_BACK.format(fallback=fallback)
        [refused] = [d for d in check_source(other) if d.code == "AMP312"]
        assert refused.fix is None and "other than by a call" in refused.message


_OWN_FALLBACK = """\
import logging

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)


def _cross_entropy_pytorch(logits, target, ignore_index=-100):
    return F.nll_loss(F.log_softmax(logits, dim=-1, dtype=torch.float32), target,
                      ignore_index=ignore_index)


try:
    import xentropy_cuda
    from apex.contrib import xentropy

    def cross_entropy(logits, target, ignore_index=-100):
        if logits.device == torch.device("cpu"):
            return _cross_entropy_pytorch(logits, target, ignore_index)
        losses = xentropy.SoftmaxCrossEntropyLoss.apply(logits, target, 0.0, ignore_index, True)
        return losses.mean()

except ImportError:
    logger.info("apex's fused cross entropy is not installed")

    def cross_entropy(logits, target, ignore_index=-100):
        return _cross_entropy_pytorch(logits, target, ignore_index)
"""


def test_apex_code_the_project_defines_again_in_its_except_is_named_not_fixed():
    """fairseq's `modules/cross_entropy.py` (OFA's copy, the 47th review): apex.contrib's
    xentropy, which has no torch counterpart, is used only by `cross_entropy` inside the
    `try`, and the `except ImportError` defines `cross_entropy` again in torch. The fix kept
    that fallback, but its results are not the kernel's (the 72nd review: fairseq's `mean`
    divides by every target under apex, by those not ignored in the fallback: 1.964 against
    2.946 on a padded batch), and a name without a counterpart gets no fix: the finding names
    the fallback as the migration by hand. Other shapes name the names alone."""
    out, remaining, fixed = _fix(_OWN_FALLBACK)
    assert out == _OWN_FALLBACK and not fixed
    [finding] = [d for d in remaining if d.code == "AMP315"]
    assert finding.fix is None
    assert "the `except` at line 24 defines `cross_entropy` again without apex" in finding.message
    assert "the migration by hand, once its results are checked" in finding.message
    for old, new in (
        ("    def cross_entropy(logits, target, ignore_index=-100):\n        return _cross",
         '    raise ImportError("apex")\n\n    def unused():\n        return _cross'),
        ("    def cross_entropy(logits, target, ignore_index=-100):\n        return _cross",
         "    def other(logits, target, ignore_index=-100):\n        return _cross"),
        ('logger.info("apex', 'print(xentropy)\n    logger.info("apex'),
        # the 49th review: a fallback that takes other parameters (a caller's `reduction=`
        # would raise TypeError), or one the `try`'s code never returns (apex's label smoothing)
        ("    def cross_entropy(logits, target, ignore_index=-100):\n        return _cross",
         "    def cross_entropy(logits, target, ignore_index=-1):\n        return _cross"),
        ("            return _cross_entropy_pytorch(logits, target, ignore_index)\n",
         "            return _cross_entropy_pytorch(logits, target, ignore_index) * 0.9\n"),
        # the 50th review: a parameter changed before the matching return, or in the test
        ("        if logits.device == torch.device(\"cpu\"):\n",
         "        logits = logits / 2.0\n        if logits.device == torch.device(\"cpu\"):\n"),
        ("        if logits.device == torch.device(\"cpu\"):\n",
         "        if target.fill_(0).device == torch.device(\"cpu\"):\n"),
    ):  # fmt: skip
        changed = _OWN_FALLBACK.replace(old, new)
        assert changed != _OWN_FALLBACK
        out, remaining, _ = _fix(changed)
        assert "from apex.contrib import xentropy" in out
        assert any(d.code == "AMP315" and d.fix is None for d in remaining)


def test_apex_code_another_module_takes_keeps_its_try(tmp_path):
    """The 49th review: `train.py` does `from losses import cross_entropy, xentropy`; keeping
    the fallback dropped `xentropy` from `losses.py` (ImportError)."""
    from ampmigrate.engine import run

    (tmp_path / "losses.py").write_text(_OWN_FALLBACK)
    (tmp_path / "train.py").write_text("from losses import cross_entropy, xentropy\n")
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    results = {Path(r.path).name: r for r in run([tmp_path / "losses.py"], settings, jobs=1)}
    assert not results["losses.py"].changed
    [kept] = [d for d in results["losses.py"].diagnostics if d.code == "AMP315"]
    assert kept.fix is None


def test_a_fallback_s_log_line_goes_with_its_try():
    """LLaMA2-Accessory's fallback warns that apex is missing before importing torch's AdamW:
    the kept fallback moved the warning out of the `except`, so it ran on every import (and
    raised under `-W error`). It goes, and the message says so."""
    source = textwrap.dedent("""\
        import warnings

        try:
            from apex.optimizers import FusedAdam as AdamW
        except ImportError:
            warnings.warn("cannot import FusedAdam from apex, use torch AdamW instead")
            from torch.optim import AdamW


        def build(groups, lr):
            return AdamW(groups, lr=lr, betas=(0.9, 0.95))
    """)
    out, _, fixed = _fix(source)
    [finding] = [d for d in fixed if d.code == "AMP311"]
    assert "warnings.warn(" not in out and "try:" not in out
    assert "from torch.optim import AdamW\n" in out
    assert "AdamW(groups, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)" in out
    assert "what the fallback logged where apex was missing (line 6) goes" in finding.message
    assert "(`from torch.optim import AdamW`)" in finding.message


def test_a_re_exported_import_in_a_try_says_the_try_is_what_blocks_it(tmp_path):
    """YaLM's `mpu/layers.py` imports FusedLayerNorm from `apex.normalization.fused_layer_norm`
    (one name, its own statement) in a `try` with a construction probe; `mpu/__init__.py`
    re-exports it. The refusal said it "is not a one-name `from apex.normalization import` of
    its own", which is false: the `try` is what keeps the import from being rebound (with a
    named probe; one bound to `_` goes with the `try`)."""
    from ampmigrate.engine import run

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .layers import LayerNorm\n")
    (package / "layers.py").write_text(
        textwrap.dedent("""\
        try:
            from apex.normalization.fused_layer_norm import FusedLayerNorm as LayerNorm

            _ = LayerNorm(8, eps=1e-5)
        except Exception:
            from torch.nn import LayerNorm


        def block(h):
            return LayerNorm(h, eps=1e-5)
    """)
    )
    settings = Settings(rules=tuple(all_rules().values()))
    found = [d for r in run(sorted(package.glob("*.py")), settings) for d in r.diagnostics]
    messages = [d.message for d in found if d.code == "AMP312"]
    assert not any("not a one-name" in m for m in messages)
    # (the 76th review: the probe build goes with the `try`, whose fallback is the migration)
    assert [m for m in messages if "the module built to probe apex's kernel" in m], messages
    named = (
        (package / "layers.py").read_text().replace("    _ = LayerNorm", "    probe = LayerNorm")
    )
    (package / "layers.py").write_text(named)
    found = [d for r in run(sorted(package.glob("*.py")), settings) for d in r.diagnostics]
    messages = [d.message for d in found if d.code == "AMP312"]
    assert messages and all("it sits in the `try` at line 1" in m for m in messages), messages


def test_comments_around_a_rewritten_call_and_a_removed_import_stay():
    """The 32nd review (AliceMind, tinypar): a comment line above a function-local
    `import apex` that the DDP rewrite leaves unused went with it (a commented-out torch DDP
    alternative), and an argument's trailing comment went when the optimizer call was
    rewritten. Only the import statement goes, as Ruff's F401 fix; a kept argument keeps its
    comment."""
    out, _, _ = _fix("""
        import torch


        def wrap(model, distributed):
            if distributed:
                # model = torch.nn.parallel.DistributedDataParallel(model)
                import apex
                model = apex.parallel.DistributedDataParallel(model)
            return model


        def build(params):
            from apex.optimizers import FusedAdam
            return FusedAdam(
                params,  # the groups
                lr=1e-4,  # * scale, see notes
                bias_correction=True,
                betas=(0.9, 0.98),
            )
    """)
    assert (
        "        # model = torch.nn.parallel.DistributedDataParallel(model)\n"
        "        model = torch.nn.parallel.DistributedDataParallel(model, "
    ) in out, out
    assert "import apex" not in out and "from apex" not in out
    assert (
        "        params,  # the groups\n"
        "        lr=1e-4,  # * scale, see notes\n"
        "        betas=(0.9, 0.98),\n"
        "        weight_decay=0.0,\n"
    ) in out, out
    ast.parse(out)


def test_a_probe_whose_try_runs_more_than_the_import_is_left_by_hand():
    """OpenDiT: `try: from apex.normalization import FusedRMSNorm` then code that registers
    replacements which only hold with apex installed; deleting the import ran that code
    everywhere (an AssertionError without apex). No fix, with the line that decides it."""
    source = textwrap.dedent("""
        def module_policy(policy):
            try:
                from apex.normalization import FusedRMSNorm

                policy["layer_norm"] = "fused"
                register(policy)
            except ImportError:
                pass
            return policy


        def register(policy):
            return policy
    """)
    [finding] = [d for d in check_source(source) if d.code == "AMP312"]
    assert finding.fix is None
    assert "whose `try` also runs line 7 only where apex is installed" in finding.message
    flag = source.replace('        policy["layer_norm"] = "fused"\n        register(policy)\n',
                          "        FOUND = True\n")  # fmt: skip
    [finding] = [d for d in check_source(flag) if d.code == "AMP312"]
    assert finding.fix is not None and "an availability probe" in finding.message


def test_a_name_a_later_project_import_rebinds_is_not_apex_s():
    """YOLOv1 (the 33rd review): `from apex.fp16_utils import *`, then `from util import
    to_python_float`: the later import is the binding the calls reach, yet AMP314 rewrote them
    to `.item()` and deleted that import as "a fallback" (on a project helper that averages,
    `.item()` of a 3-element tensor raises). A binding after apex's, in the scope's own block,
    gets no fix and is named; a fallback in the `except`, or in an `if` after it, keeps it."""
    source = textwrap.dedent("""\
        import torch
        try:
            from apex.fp16_utils import *
        except ImportError:
            raise ImportError("needs apex")
        from util import to_python_float

        print(to_python_float(torch.ones(3)))
    """)
    out, _, fixed = _fix(source)
    assert out == source and not fixed
    [finding] = [d for d in check_source(source) if d.code == "AMP314"]
    assert (
        "no automatic fix: the name is also bound at line 6 (`from util import "
        "to_python_float`), which is no fallback of apex's import"
    ) in finding.message
    rival_class = textwrap.dedent("""\
        import torch
        from apex.normalization import FusedLayerNorm as LayerNorm


        class LayerNorm(torch.nn.Module):
            pass


        norm = LayerNorm(8)
    """)
    # (the 81st review: a class right after the import always replaces it: the import is dead)
    [dead] = [d for d in check_source(rival_class) if d.code == "AMP312"]
    assert dead.fix is not None and "binds again before anything reads it" in dead.message
    rival_class = rival_class.replace("\n\nclass", "\nprint(LayerNorm)\n\nclass")
    assert [d.fix for d in check_source(rival_class) if d.code == "AMP312"] == ["unsafe", None]
    fallback = textwrap.dedent("""\
        import torch
        try:
            from apex.normalization import FusedLayerNorm as LayerNorm
            HAS_APEX = True
        except ImportError:
            HAS_APEX = False
        if not HAS_APEX:
            LayerNorm = torch.nn.LayerNorm

        norm = LayerNorm(8)
    """)
    out, _, fixed = _fix(fallback)
    assert "norm = torch.nn.LayerNorm(8)" in out, out


def test_apex_modules_the_prefilter_missed_and_fp16_utils_scalers_get_findings():
    """The 33rd review: a file whose only apex was `apex.reparameterization`, `apex.RNN` or
    `apex.pyprof` passed `check` (AMP315's triggers left them out: only another trigger word,
    even in a comment, brought the finding), and `apex.fp16_utils`' loss scalers had none."""
    for line, name in (
        ("from apex.reparameterization import apply_weight_norm\n"
         "apply_weight_norm(torch.nn.Linear(2, 2))\n", "apex.reparameterization"),
        ("from apex.RNN import LSTM\nrnn = LSTM(2, 2, 1)\n", "apex.RNN"),
        ("from apex import pyprof\npyprof.init()\n", "apex.pyprof"),
    ):  # fmt: skip
        found = check_source("import torch\n" + line)
        assert [d.code for d in found] == ["AMP315"] and name in found[0].message, found
        if name == "apex.reparameterization":  # (why it is no one-to-one swap)
            assert "to every parameter of the module tree" in found[0].message
    scaler = check_source(
        "from apex.fp16_utils import DynamicLossScaler\nscaler = DynamicLossScaler()\n"
    )
    assert [d.code for d in scaler] == ["AMP302"]
    assert "is the dynamic loss scaler" in scaler[0].message


def test_a_call_with_arguments_apex_lacks_belongs_to_the_other_binding():
    """sagemaker-cv (the 34th review): `DDP` is smdistributed's in one arm of an `if` and apex's
    in the other; the call in the smdistributed arm (`broadcast_buffers=False`, which apex's
    signature lacks, so apex would raise TypeError there) got "no automatic fix: not an
    argument of apex's signature". Only the apex arm's call is apex's."""
    source = textwrap.dedent("""\
        import os


        def main(model):
            other = os.environ.get("OTHER") == "1"
            if other:
                from smdistributed.dataparallel.torch.parallel import DistributedDataParallel as DDP
            else:
                from apex.parallel import DistributedDataParallel as DDP
            if other:
                model = DDP(model, broadcast_buffers=False)
            else:
                model = DDP(model, delay_allreduce=True)
            return model
    """)
    found = [d for d in check_source(source) if d.code == "AMP313"]
    assert [d.line for d in found] == [13], [d.message for d in found]


def test_an_unused_fp16_utils_import_in_every_form_is_reported_and_goes(tmp_path):
    """The 41st review: `from apex.fp16_utils import *` (NAIC DMT's processor, inside a `try`
    whose `except ImportError:` raises), a named import and `import apex.fp16_utils` that
    nothing reads had no finding, so after `fix` the file still needed apex to import."""
    from ampmigrate.engine import run

    forms = {
        "star.py": "from apex.fp16_utils import *\n",
        "named.py": "from apex.fp16_utils import FP16_Optimizer\n",
        "module.py": "import apex.fp16_utils\n",
        "guarded.py": (
            "try:\n    from apex.fp16_utils import *\n"
            'except ImportError:\n    raise ImportError("apex")\n'
        ),
    }
    files = []
    for name, head in forms.items():
        (tmp_path / name).write_text(head + "import torch\n\nx = torch.zeros(1)\n")
        files.append(tmp_path / name)
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    results = run(files, settings)
    assert len(results) == 4
    for result in results:
        assert [d.code for d in result.fixed] == ["AMP302"], result.path
        assert b"apex" not in result.new_source and b"try" not in result.new_source
        compile(result.new_source, result.path, "exec")
        Path(result.path).write_bytes(result.new_source)
    again = run(files, settings)  # a second pass changes and reports nothing
    assert not any(r.changed or r.fixed or r.diagnostics for r in again)


def test_a_read_or_reexported_star_import_of_fp16_utils_stays(tmp_path):
    """A name the star import binds, read here, makes it used; a module-level one whose names
    another module takes from this file is re-exported: reported, never deleted."""
    assert "AMP302" not in _codes("from apex.fp16_utils import *\n\nn = to_python_float(loss)\n")
    (tmp_path / "utils.py").write_text("from apex.fp16_utils import *\n")
    (tmp_path / "train.py").write_text("from utils import network_to_half\n")
    from ampmigrate.engine import run

    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    [result] = run([tmp_path / "utils.py"], settings)
    assert not result.changed
    [finding] = [d for d in result.diagnostics if d.code == "AMP302"]
    assert finding.fix is None and "train.py:1" in finding.message


def test_the_fp16_utils_module_imported_from_apex_and_an_exported_name(tmp_path):
    """The 43rd review: `from apex import fp16_utils`, unused, had no finding; a named import
    that `__all__` exports was "imported but unused" (and fixable), then never fixed: it is
    exported, reported as such, and left to a person."""
    assert _codes("from apex import fp16_utils\nimport torch\n") == ["AMP302"]
    [finding] = [
        d
        for d in check_source(
            'from apex.fp16_utils import FP16_Optimizer\n\n__all__ = ["FP16_Optimizer"]\n'
        )
        if d.code == "AMP302"
    ]
    assert finding.fix is None and "its `__all__` exports `FP16_Optimizer`" in finding.message


def test_a_probe_whose_outcome_nothing_reads_goes_though_an_import_still_needs_apex(tmp_path):
    """The 43rd review (timm's benchmark and inference scripts, from the parent of their
    authors' migration): `try: from apex import amp; has_apex = True except ImportError:
    has_apex = False`, `has_apex` read nowhere, beside an import of a module that still
    imports apex: kept, "code that tests the probe's outcome guards that use", which nothing
    does. It goes (unsafe: a probe); read, it stays."""
    from ampmigrate.engine import run

    (tmp_path / "helper.py").write_text(
        "import torch\n\ntry:\n    from apex.normalization import FusedLayerNorm as LN\n"
        "except ImportError:\n    LN = torch.nn.LayerNorm\n"
    )
    main = (
        "import helper\n\ntry:\n    from apex import amp\n    has_apex = True\n"
        "except ImportError:\n    has_apex = False\n"
    )
    (tmp_path / "main.py").write_text(main)
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    [result] = run([tmp_path / "main.py"], settings)
    assert result.changed and b"from apex" not in result.new_source
    (tmp_path / "main.py").write_text(main + "\nprint(has_apex)\n")
    [result] = run([tmp_path / "main.py"], settings)
    assert not result.changed
    assert any("still imports apex" in d.message for d in result.diagnostics)


def test_a_fallback_class_other_modules_type_test_is_read_there(tmp_path):
    """The 57th review (CPM-1): "what they do with the project's class is not visible here"
    named the very line that uses it (a type test). Since the 64th review the uses in other
    modules are read where they are: the type test lets the fix bind torch's class, and the
    message says that test now matches every torch LayerNorm."""
    (tmp_path / "norm.py").write_text(
        "import torch\n\ntry:\n"
        "    from apex.normalization.fused_layer_norm import FusedLayerNorm as LayerNorm\n"
        "except ImportError:\n    class LayerNorm(torch.nn.Module):\n"
        "        def forward(self, x):\n            return x\n"
    )
    (tmp_path / "model.py").write_text(
        "from norm import LayerNorm\n\n\ndef init(module):\n"
        "    return isinstance(module, LayerNorm)\n"
    )
    settings = Settings(rules=tuple(all_rules().values()))
    [result] = [r for r in run(sorted(tmp_path.glob("*.py")), settings) if "norm" in r.path]
    [finding] = [d for d in result.diagnostics if d.code == "AMP312"]
    assert finding.fix == "unsafe" and "not visible" not in finding.message
    assert "its uses in other modules (model.py:5, model.py:1) are imports, calls" in (
        finding.message
    )
    assert "(a type test in model.py now matches every `torch.nn.LayerNorm`" in finding.message


@pytest.mark.parametrize(
    ("use", "said"),
    [
        ("register_leaf_impl(FusedLayerNorm)(shape_only)\n", "handed to `register_leaf_impl(...)`"),
        ("IMPLS = {FusedLayerNorm: shape_only}\n", "a dict key"),
        ("IMPLS[FusedLayerNorm] = shape_only\n", "a subscript key"),
        ("def leaf(m):\n    return type(m) in (FusedLayerNorm,)\n", "compared"),
        ("def leaf(m):\n    return type(m) is FusedLayerNorm\n", "compared"),
    ],
)
def test_an_apex_class_read_for_its_identity_is_not_renamed(use, said):
    """The 64th review's ColossalAI tracer: `register_leaf_module(FusedLayerNorm)` became
    `register_leaf_module(torch.nn.LayerNorm)`: every torch LayerNorm of the process took the
    shape-only stub meant for apex's. A class read as a key of itself (a registry, a dict key,
    a comparison) is refused with that reason; one handed on to build with is renamed."""
    head = (
        "import torch\nfrom apex.normalization import FusedLayerNorm\n\nIMPLS = {}\n\n\n"
        "def register_leaf_impl(cls):\n    return lambda fn: IMPLS.setdefault(cls, fn)\n\n\n"
        "def shape_only(module, x):\n    return x.clone()\n\n\n"
    )
    [finding] = [d for d in check_source(head + use) if d.code == "AMP312"]
    assert finding.fix is None and f"used as a key of the class itself ({said})" in (
        finding.message
    )
    out, _, fixed = _fix(head + "def build(dim, norm=FusedLayerNorm):\n    return norm(dim)\n")
    assert "norm=torch.nn.LayerNorm" in out and [d.code for d in fixed] == ["AMP312"]


@pytest.mark.parametrize("factor", ["torch.distributed.get_world_size()", "dist.get_world_size()"])
def test_a_predivide_factor_of_the_world_size_is_torchs_own_division(factor):
    """The 64th review's FlagPerf: apex divides the gradients by `gradient_predivide_factor`
    before the all-reduce and multiplies them by factor / world size after; at the world size
    that is torch DDP's own division before the all-reduce. It was refused as "needs a DDP
    communication hook"; the argument goes. Another factor keeps the refusal."""
    source = (
        "import torch\nimport torch.distributed as dist\n"
        "from apex.parallel import DistributedDataParallel as DDP\n\n\n"
        f"def wrap(model):\n    return DDP(model, gradient_predivide_factor={factor})\n"
    )
    out, remaining, fixed = _fix(source)
    assert "torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True" in out
    assert "predivide" not in out and not remaining and [d.code for d in fixed] == ["AMP313"]
    # (the 72nd review: the keyword went unnamed)
    assert "dropped `gradient_predivide_factor` (the world size" in fixed[0].message
    [refused] = check_source(source.replace(factor, "2.0"))
    assert refused.fix is None and "needs a DDP communication hook" in refused.message


def test_the_removal_of_a_weight_norm_is_told_torchs_removal():
    """The 64th review's sentiment-discovery: `remove_weight_norm` was told to use
    `parametrizations.weight_norm`, which applies a norm; its counterpart removes one."""
    torch = pytest.importorskip("torch")
    source = (
        "from apex.reparameterization import apply_weight_norm, remove_weight_norm\n\n"
        "def export(model):\n    remove_weight_norm(model)\n\n"
        "def build(model):\n    apply_weight_norm(model, 'weight')\n"
    )
    removal, applied = check_source(source)
    assert "use instead: `torch.nn.utils.parametrize.remove_parametrizations(" in removal.message
    assert "use instead: `torch.nn.utils.parametrizations.weight_norm(" in applied.message
    layer = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(2, 2), "weight")
    torch.nn.utils.parametrize.remove_parametrizations(layer, "weight")
    assert not torch.nn.utils.parametrize.is_parametrized(layer)  # (the advice runs)


def test_groups_read_by_another_optimizer_in_the_other_arm_still_carry_their_lr():
    """The 64th review's FlagPerf DLRM adapter: the groups, each with its `lr`, go to
    `FusedAdam` in one arm of an `if` and to `FusedSGD` in the other; the other arm's read
    made them "not visible here". A read in the same arm (which may change them) keeps it."""
    source = textwrap.dedent("""\
        from apex import optimizers as apex_optim


        def make(model, lr, use_adam):
            groups = [{"params": list(model.parameters()), "lr": lr}]
            if use_adam:
                opt = apex_optim.FusedAdam(groups)
            else:
                opt = apex_optim.FusedSGD(groups)
            return opt
        """)
    out, remaining, fixed = _fix(source)
    assert "opt = torch.optim.SGD(groups)\n" in out and not remaining and len(fixed) == 2
    same_arm = source.replace(
        "    else:\n        opt = apex_optim.FusedSGD(groups)\n",
        "    else:\n        keep(groups)\n        opt = apex_optim.FusedSGD(groups)\n",
    )
    assert "keep(groups)" in same_arm
    [refused] = [d for d in check_source(same_arm) if "FusedSGD" in d.message]
    assert refused.fix is None and "which is not visible here" in refused.message


_PARTIAL_SWAP = textwrap.dedent("""\
    import torch


    class RMSNorm(torch.nn.Module):
        def __init__(self, hidden, eps=1e-6):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(hidden))
            self.eps = eps


    try:
        from functools import partial

        from apex.normalization import FusedRMSNorm

        RMSNorm = partial(FusedRMSNorm, eps=1e-6)
    except ImportError:
        pass


    def build(hidden):
        return RMSNorm(hidden)
    """)


def test_a_swap_through_partial_is_a_swap():
    """The 64th review's InternVL: `RMSNorm = partial(FusedRMSNorm, eps=1e-6)` in the `try`
    (with `from functools import partial` there) was refused as needing torch >= 2.4, where
    the plain swap `RMSNorm = FusedRMSNorm` is deleted and the project's class kept. It is the
    same swap: deleted, with the import it needed; a `partial` read after the `try` keeps it."""
    out, remaining, fixed = _fix(_PARTIAL_SWAP, target_torch=(2, 0))
    assert "apex" not in out and "partial" not in out and "class RMSNorm" in out
    assert not remaining and "the arguments `functools.partial` gave" in fixed[0].message
    namespace: dict = {}
    exec(compile(out, "migrated", "exec"), namespace)
    assert type(namespace["build"](4)).__name__ == "RMSNorm"
    used = _PARTIAL_SWAP + "\nmake = partial(build, 8)\n"
    out, _, _ = _fix(used, target_torch=(2, 0))
    assert "from apex.normalization import FusedRMSNorm" in out


_FALLBACK_NORMS = textwrap.dedent("""\
    import torch

    try:
        from apex.normalization import FusedRMSNorm as RMSNorm
    except ImportError:
        class RMSNorm(torch.nn.Module):
            def __init__(self, dim, eps=1e-6):
                super().__init__()
                self.eps = eps
                self.weight = torch.nn.Parameter(torch.ones(dim))

            def forward(self, x):
                y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
                return y.type_as(x) * self.weight
    """)


@pytest.mark.parametrize(
    ("use", "refused"),
    [
        ("        self.norm = RMSNorm(dim, eps=eps)\n", None),
        ("        self.norm = RMSNorm(dim, **kw)\n", "the call at block.py:9 passes a splat"),
        ("        self.norm = build(RMSNorm, dim)\n", "block.py:9 uses the name other than"),
    ],
)
def test_a_fallback_class_used_only_by_other_modules_reads_their_uses(tmp_path, use, refused):
    """The 64th review's Lumina-T2X: `try: from apex.normalization import FusedRMSNorm as
    RMSNorm` over the project's own class, used only by other modules (`RMSNorm(dim,
    eps=norm_eps)`), was refused as "the rewrite reads the uses ... in this file only". Those
    uses are read where they are: calls torch's class takes alike, and type tests, let the
    fix bind the stand-in class; a splat or the class handed on keeps the refusal, named."""
    from ampmigrate.engine import run

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "norms.py").write_text(_FALLBACK_NORMS)
    (package / "block.py").write_text(
        "import torch\n\nfrom .norms import RMSNorm\n\n\nclass Block(torch.nn.Module):\n"
        "    def __init__(self, dim, eps=1e-6, **kw):\n        super().__init__()\n" + use
        + "        assert isinstance(self.norm, (RMSNorm, torch.nn.Module))\n"
    )  # fmt: skip
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    [result] = run([package / "norms.py"], settings)
    if refused is not None:
        [finding] = [d for d in result.diagnostics if d.code == "AMP312"]
        assert finding.fix is None and refused in finding.message, finding.message
        return
    [done] = [d for d in result.fixed if d.code == "AMP312"]
    assert "its uses in other modules (block.py:9, block.py:10, block.py:3)" in done.message
    new = result.new_source.decode()
    assert "from apex" not in new and "class RMSNorm(torch.nn.RMSNorm):" in new
    (package / "norms.py").write_text(new)
    import subprocess
    import sys

    code = "from pkg.block import Block\nprint(type(Block(4).norm).__mro__[1].__name__)"
    ran = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert ran.stdout.strip() == "RMSNorm" and "torch.nn" in new, ran.stderr


@pytest.mark.parametrize(
    "builder",
    [
        "from torch.utils import cpp_extension\n\n\ndef load():\n    return cpp_extension.load("
        'name="scaled_masked_softmax_cuda", sources=["softmax.cpp", "softmax.cu"])\n',
        "from torch.utils.cpp_extension import CUDAExtension\n\next = CUDAExtension("
        '"megatron.scaled_masked_softmax_cuda", ["softmax.cu"])\n',
    ],
)
def test_an_extension_the_project_builds_is_its_own_kernel(tmp_path, builder):
    """The 67th review: Megatron builds `scaled_masked_softmax_cuda` in its `fused_kernels`,
    a name apex's setup uses too; AMP315 called the project's kernel "apex's compiled CUDA
    extension", so a migrated project looked blocked by apex. A name the project builds
    (`cpp_extension.load`, a setup's `CUDAExtension`) is not apex's; `torch.load` builds
    nothing."""
    user = "import torch\n\n\ndef softmax(x, mask):\n    import scaled_masked_softmax_cuda\n"
    user += "    return scaled_masked_softmax_cuda.forward(x, mask, 1.0)\n"
    settings = Settings(rules=tuple(all_rules().values()))

    def codes(project: Path, builds: bool) -> list[str]:
        (project / "pkg").mkdir(parents=True)
        (project / "pkg" / "__init__.py").write_text("")
        (project / "pkg" / "softmax.py").write_text(user)
        (project / "pkg" / "io.py").write_text('import torch\n\nstate = torch.load("w.pt")\n')
        if builds:
            (project / "pkg" / "kernels.py").write_text(builder)
        path = str(project / "pkg" / "softmax.py")
        _, remaining, _ = migrate_source(user.encode(), settings, path)
        return [d.code for d in remaining]

    assert codes(tmp_path / "plain", builds=False) == ["AMP315"]  # (a name apex builds)
    assert codes(tmp_path / "megatron", builds=True) == []


def test_a_project_module_named_like_an_apex_extension_is_the_project_s(tmp_path):
    """`import syncbn` where the project has its own `syncbn.py` is that module, not apex's
    compiled extension."""
    source = b"import syncbn\n\nstats = syncbn.welford\n"
    settings = Settings(rules=tuple(all_rules().values()))

    def codes(folder: Path, own: bool) -> list[str]:
        folder.mkdir(parents=True)
        if own:
            (folder / "syncbn.py").write_text("def welford(x):\n    return x.mean(), x.var()\n")
        (folder / "train.py").write_bytes(source)
        _, remaining, _ = migrate_source(source, settings, str(folder / "train.py"))
        return [d.code for d in remaining]

    assert codes(tmp_path / "own" / "src", own=True) == []
    assert codes(tmp_path / "apex_s" / "src", own=False) == ["AMP315"]


def test_a_construction_is_held_back_while_a_type_test_of_its_class_stays(tmp_path):
    """The 67th review's Megatron-LLaMA: `FusedAdam(...)` became `torch.optim.AdamW(...)`
    while `assert isinstance(optimizer, Adam)` (apex's class, which no one torch class can
    stand for) stayed, in the same function or in another module: AssertionError on every
    run with apex installed. The construction is refused while such a test stays, and names
    it; without the test it is rewritten."""
    same = """\
    from apex.optimizers import FusedAdam as Adam


    def get(params):
        opt = Adam(params, lr=1e-3)
        assert isinstance(opt, Adam)
        return opt
    """
    out, remaining, _ = _fix(same)
    assert out == textwrap.dedent(same)
    built = next(d for d in remaining if d.code == "AMP311" and d.line == 5)
    assert built.fix is None and "a type test of apex's class at line 6" in built.message
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    build = package / "build.py"
    build.write_text("from apex.optimizers import FusedAdam\n\nopt = FusedAdam(p, lr=1e-3)\n")
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)

    def fixed() -> tuple[str, list]:
        new, remaining, _ = migrate_source(build.read_bytes(), settings, str(build))
        return new.decode(), remaining

    assert "torch.optim.AdamW(p, lr=1e-3, weight_decay=0.0)" in fixed()[0]
    (package / "dist.py").write_text(
        "import apex\n\n\ndef wrap(optimizer):\n"
        "    assert isinstance(optimizer, apex.optimizers.FusedAdam)\n"
    )
    out, [kept] = fixed()
    assert out == build.read_text()
    assert "a type test of apex's class at dist.py:5 stays on it" in kept.message


@pytest.mark.torch
def test_a_sync_batchnorm_subclass_with_its_own_constructor_is_rebased():
    """The 67th review's fast-reid: `class SyncBatchNorm(apex.parallel.SyncBatchNorm)` whose
    `__init__` hands `super().__init__` what torch's class takes alike and then sets its
    weight and bias: "relies on apex's constructor arguments and internals" was false. It is
    rebased on `torch.nn.SyncBatchNorm` and builds the same module; a constructor that skips
    `super().__init__`, or a read of apex's own `channel_last`, still refuses."""
    source = """\
    import torch
    from torch import nn

    try:
        from apex import parallel
    except ImportError:
        raise ImportError("Please install apex to run model with syncBN")


    class SyncBatchNorm(parallel.SyncBatchNorm):
        def __init__(self, num_features, eps=1e-05, weight_init=1.0, bias_freeze=False):
            super().__init__(num_features, eps=eps, momentum=0.1)
            nn.init.constant_(self.weight, weight_init)
            self.bias.requires_grad_(not bias_freeze)
    """
    out, remaining, [fixed] = _fix(source)
    assert "class SyncBatchNorm(torch.nn.SyncBatchNorm):" in out and "apex" not in out
    assert not remaining and fixed.code == "AMP313"
    namespace: dict = {}
    exec(compile(out, "rebased", "exec"), namespace)
    norm = namespace["SyncBatchNorm"](8, weight_init=0.5, bias_freeze=True)
    assert float(norm.weight.detach()[0]) == 0.5 and not norm.bias.requires_grad
    assert sorted(norm.state_dict()) == [
        "bias", "num_batches_tracked", "running_mean", "running_var", "weight"
    ]  # fmt: skip
    skipped = source.replace("super().__init__(num_features, eps=eps, momentum=0.1)", "pass")
    [kept] = [d for d in _fix(skipped)[1] if d.code == "AMP313"]
    assert "does not call `super().__init__(...)`" in kept.message
    apex_only = source.replace(
        "bias_freeze)\n", "bias_freeze)\n        self.nhwc = self.channel_last\n"
    )
    [kept] = [d for d in _fix(apex_only)[1] if d.code == "AMP313"]
    assert "reads `self.channel_last`" in kept.message


def test_an_apex_name_in_a_string_is_found():
    """flash-attention (the 67th review): `_target_: apex.optimizers.FusedAdam` that Hydra
    instantiates, `pydoc.locate("apex.normalization.FusedLayerNorm")`, a dotted name split and
    imported at run time: apex runs there, and `check` said "All checks passed". A finding
    for each, with the torch counterpart and no fix; a docstring or a module alone is none."""
    source = '''\
    """Builds apex.optimizers.FusedAdam when asked."""
    import pydoc

    CFG = {"_target_": "apex.optimizers.FusedAdam", "lr": 1e-3}
    NORM = pydoc.locate("apex.normalization.FusedLayerNorm")
    LAMB = "apex.optimizers.FusedLAMB"
    PACKAGE = "apex.optimizers"
    '''
    found = {d.line: d for d in check_source(textwrap.dedent(source))}
    assert sorted(found) == [4, 5, 6]
    assert found[4].code == "AMP311" and "torch.optim.AdamW" in found[4].message
    assert "`weight_decay=0.0`" in found[4].message and found[4].fix is None
    assert found[5].code == "AMP312" and "torch.nn.LayerNorm" in found[5].message
    assert found[6].code == "AMP315" and "timm.optim.Lamb" in found[6].message


@pytest.mark.parametrize("test", ["type(opt) is Adam", "opt.__class__ == Adam"])
def test_an_identity_test_of_the_class_holds_back_the_construction_too(test):
    """The 68th review's n3: `type(opt) is aopt.FusedAdam` beside the construction; the
    construction became `torch.optim.AdamW`, and the test stopped matching without a word."""
    source = f"""\
    from apex.optimizers import FusedAdam as Adam


    def get(params):
        opt = Adam(params, lr=1e-3)
        if {test}:
            print("fused path")
        return opt
    """
    out, remaining, _ = _fix(source)
    assert out == textwrap.dedent(source)
    built = next(d for d in remaining if d.code == "AMP311" and d.line == 5)
    assert "a type test of apex's class at line 6" in built.message


def test_contrib_optimizers_are_named_for_their_own_update_rule():
    """The 72nd review: apex.contrib's (pre-2019) FusedAdam was told to use `timm.optim.Lamb`
    or DeepSpeed's FusedLamb, the LAMB text; each contrib optimizer names its own kind."""
    texts = {
        "FusedAdam": "its nearest torch counterparts are `torch.optim.Adam` and "
        "`torch.optim.AdamW`, which have no `max_grad_norm`",
        "FusedSGD": "its torch counterpart is `torch.optim.SGD`",
        "FusedLAMB": "torch has no LAMB optimizer",
    }
    for name, text in texts.items():
        source = f"from apex.contrib.optimizers import {name}\n\nopt = {name}(params, lr=1e-3)\n"
        [finding] = [d for d in _fix(source)[1] if d.code == "AMP315"]
        assert text in finding.message and finding.fix is None, name
        assert ("LAMB" in finding.message) == (name == "FusedLAMB"), finding.message


def test_a_fallback_alias_nothing_reads_is_its_own_migration():
    """The 72nd review's over-refusal (Lumina-mGPT): `FusedAdam as AdamW` with a torch AdamW
    fallback, and the file builds `torch.optim.AdamW` itself: "AdamW's defaults differ" was
    no reason, as nothing reads the name; the `try` goes, the fallback stays. Called once, the
    call gets apex's `weight_decay=0.0` written out, as before."""
    source = textwrap.dedent("""\
        import torch

        try:
            from apex.optimizers import FusedAdam as AdamW
        except ImportError:
            from torch.optim import AdamW


        def build(model):
            return torch.optim.AdamW(model.parameters(), lr=1e-3)
    """)
    out, remaining, fixed = _fix(source)
    assert "apex" not in out and "from torch.optim import AdamW\n" in out and not remaining
    [finding] = fixed
    assert "nothing reads `AdamW` outside the `try`" in finding.message
    assert _fix(out)[0] == out
    read = source.replace("torch.optim.AdamW(model", "AdamW(model")
    out, remaining, _ = _fix(read)
    assert "return AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)" in out


def test_a_try_left_with_nothing_that_can_raise_import_error_dissolves():
    """The 72nd review's bad diff (MPNet's fairseq `LayerNorm` helper): `try: from apex...
    import FusedLayerNorm; return FusedLayerNorm(...) except ImportError: pass` kept a dead
    `except` around `return torch.nn.LayerNorm(...)`. The `try` goes where nothing left in it
    can raise ImportError; a call of the project's own stays guarded."""
    source = textwrap.dedent("""\
        import torch


        def LayerNorm(shape, eps=1e-5, affine=True, export=False):
            if not export and torch.cuda.is_available():
                try:
                    from apex.normalization import FusedLayerNorm

                    # apex's fused kernel
                    return FusedLayerNorm(shape, eps, affine)
                except ImportError:
                    pass
            return torch.nn.LayerNorm(shape, eps, affine)
    """)
    out, remaining, _ = _fix(source)
    assert not remaining and "try" not in out and "ImportError" not in out, out
    assert (
        "    if not export and torch.cuda.is_available():\n\n"
        "        # apex's fused kernel\n"
        "        return torch.nn.LayerNorm(shape, eps, affine)\n"
    ) in out, out
    assert _fix(out)[0] == out
    namespace: dict = {}
    exec(compile(out, "migrated", "exec"), namespace)
    assert isinstance(namespace["LayerNorm"](4), namespace["torch"].nn.LayerNorm)
    guarded = source.replace(
        "return FusedLayerNorm(shape, eps, affine)", "return wrap(FusedLayerNorm(shape))"
    )
    out, remaining, _ = _fix(guarded)  # (the 81st review: the apex path would run everywhere,
    assert out == guarded, out  # where the `except`'s code ran without apex: left by hand)
    assert "the `try` also runs line 10" in remaining[0].message, remaining[0].message


def test_a_tuple_of_classes_only_type_tests_read_is_a_type_test():
    """The 72nd review (cvpods' `DDP_TYPES = (ApexDDP, DDP)`, read only by `isinstance`): it
    was refused as a value whose calls are not visible; it is a type test, rewritten as one
    (the `try` around it dissolves, its `except` can no longer run). FusedAdam in such a tuple
    keeps the type-test reason; a tuple read otherwise keeps the value's."""
    source = textwrap.dedent("""\
        import torch
        from torch.nn.parallel import DistributedDataParallel

        try:
            from apex.parallel import DistributedDataParallel as ApexDDP
            DDP_TYPES = (ApexDDP, DistributedDataParallel)
        except ImportError:
            DDP_TYPES = (DistributedDataParallel,)


        def unwrap(model):
            return model.module if isinstance(model, DDP_TYPES) else model
    """)
    out, remaining, fixed = _fix(source)
    assert not remaining and "apex" not in out and "try" not in out, out
    # (the 76th review: torch's class twice, and the constructor's differences in the message)
    assert "DDP_TYPES = (DistributedDataParallel,)\n" in out, out
    assert "apex's class leaves the type test, which names" in fixed[0].message
    assert "broadcast_buffers" not in fixed[0].message
    # apex's last, or a trailing comma: still a tuple, which `+` can join (the 77th review:
    # `(DDP)` was a class and `W + (C,)` raised TypeError); over lines or with comments: kept
    for spelled in ("(DistributedDataParallel, ApexDDP)", "(ApexDDP, DistributedDataParallel,)"):
        joined = source.replace("(ApexDDP, DistributedDataParallel)", spelled) + (
            "\n\nDDP_TYPES = DDP_TYPES + (torch.nn.DataParallel,)\n"
        )
        out, remaining, _ = _fix(joined)
        assert "DDP_TYPES = (DistributedDataParallel,)\n" in out and not remaining, out
        exec(compile(out, "migrated", "exec"), {})
    lines = source.replace(
        "(ApexDDP, DistributedDataParallel)",
        "(\n        ApexDDP,  # apex's\n        DistributedDataParallel,\n    )",
    )
    out, _, _ = _fix(lines)
    assert "torch.nn.parallel.DistributedDataParallel,  # apex's\n" in out, out
    apart = source.replace(
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel\n", "import torch\n"
    ).replace("DistributedDataParallel)", "torch.nn.DataParallel)")
    out, remaining, fixed = _fix(apart)
    assert (
        not remaining
        and ("DDP_TYPES = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)")
        in out
    ), out
    assert "the type test now matches every" in fixed[0].message
    assert "broadcast_buffers" not in fixed[0].message
    # joined to another tuple in the `try` (catalyst's `is_wrapped_with_ddp`): still a type test
    for extend in ("wrappers = wrappers + (apex_DDP,)", "wrappers += (apex_DDP,)"):
        joined = textwrap.dedent(f"""\
            from torch import nn


            def is_wrapped(model):
                wrappers = (nn.DataParallel,)
                try:
                    from apex.parallel import DistributedDataParallel as apex_DDP
                    {extend}
                except ImportError:
                    pass
                return isinstance(model, wrappers)
        """)
        out, remaining, _ = _fix(joined)
        assert not remaining and "apex" not in out, (extend, remaining)
        assert "(torch.nn.parallel.DistributedDataParallel,)" in out
        namespace: dict = {}
        exec(compile(out, "migrated", "exec"), namespace)
        torch = namespace["torch"]
        assert namespace["is_wrapped"](torch.nn.DataParallel(torch.nn.Linear(2, 2)))
        assert not namespace["is_wrapped"](torch.nn.Linear(2, 2))
    called = source + "\n\nwrapped = DDP_TYPES[0](net)\n"
    out, remaining, _ = _fix(called)
    assert out == called and "used as a value" in remaining[0].message
    adam = (
        "from apex.optimizers import FusedAdam\nKINDS = (FusedAdam,)\nok = isinstance(o, KINDS)\n"
    )
    [finding] = _fix(adam)[1]
    assert "a type test" in finding.message and finding.fix is None


def test_a_fallback_alias_only_type_tests_read_is_refused_for_the_test():
    """The 76th review: `FusedAdam as AdamW` with torch's AdamW as its fallback, read only by
    `isinstance`, was refused because "AdamW's defaults differ": no call builds with the name,
    so no default applies. Taken as the migration (this session, reverted by the 77th review)
    it turned `is_adamw` False for a FusedAdam built with `adam_w_mode=False` elsewhere (now
    torch's Adam): the reason is the type test's."""
    source = textwrap.dedent("""\
        try:
            from apex.optimizers import FusedAdam as AdamW
        except ImportError:
            from torch.optim import AdamW


        def is_adamw(opt):
            return isinstance(opt, AdamW)
    """)
    out, [finding], _ = _fix(source)
    assert out == source and finding.fix is None
    assert "only type tests read `AdamW`; a type test: the optimizers built" in finding.message
    assert "defaults differ" not in finding.message
    called = source + "\n\nopt = AdamW(params, **config)\n"
    [finding] = _fix(called)[1]
    assert "defaults differ" in finding.message and finding.fix is None
    # a call beside the type test does not make the test exact (the re-read of stop 63)
    mixed = source + "\n\nopt = AdamW(params, lr=0.1)\n"
    out, [finding], _ = _fix(mixed)
    assert out == mixed and finding.fix is None, out


def test_a_fallback_class_taken_from_a_project_module_gives_way_too(tmp_path):
    """The 72nd review (FlagAI's embeddings, EVA-CLIP): the `except` takes the project's class
    from a sibling module; the fix the in-file class gets applies (torch's LayerNorm bound to the
    name), and the finding reads that class on disk: its constructor and its parameters."""
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "layer_norm.py").write_text(
        textwrap.dedent("""\
        import torch
        from torch import nn


        class LayerNorm(nn.Module):
            def __init__(self, hidden_size, eps=1e-6):
                super().__init__()
                self.gamma = nn.Parameter(torch.ones(hidden_size))
                self.beta = nn.Parameter(torch.zeros(hidden_size))
                self.eps = eps
    """)
    )
    source = textwrap.dedent("""\
        import torch

        try:
            from apex.normalization import FusedLayerNorm as LayerNorm
        except ImportError:
            from .layer_norm import LayerNorm

        norm = LayerNorm(8)
    """)
    path = tmp_path / "embeddings.py"
    path.write_text(source)
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    new, remaining, [fixed] = migrate_source(source.encode(), settings, str(path))
    assert new.decode() == "import torch\n\nLayerNorm = torch.nn.LayerNorm\n\nnorm = LayerNorm(8)\n"
    assert not remaining
    assert "`__init__(self, hidden_size, eps=1e-06)`" in fixed.message
    assert "its parameters (`gamma`, `beta`) are not torch's" in fixed.message


def test_a_log_import_only_the_dropped_fallback_read_goes():
    """The 72nd review's switti: the fallback's `warnings.warn(...)` went with the `try`, and
    `import warnings`, which nothing else read, stayed. It goes where nothing else reads it
    (the blank line after it stays: a fix changes no line it need not)."""
    source = textwrap.dedent("""\
        import warnings

        import torch

        try:
            from apex.normalization import FusedLayerNorm as LayerNorm
        except ImportError:
            warnings.warn("apex is missing: torch's LayerNorm")
            LayerNorm = torch.nn.LayerNorm

        norm = LayerNorm(8)
    """)
    out, remaining, _ = _fix(source)
    assert not remaining
    assert out == "\nimport torch\n\nLayerNorm = torch.nn.LayerNorm\n\nnorm = LayerNorm(8)\n", out
    read = source + "warnings.warn('kept')\n"
    assert _fix(read)[0].startswith("import warnings\n\nimport torch\n")


def test_a_guard_that_opened_a_block_takes_the_blank_line_after_it():
    """The 72nd review (huawei's CAME, TinyBERT): removing `try: from apex.parallel import
    DistributedDataParallel as DDP except ImportError: raise ...` at the top of an `if` left the
    block opening with a blank line."""
    source = textwrap.dedent("""\
        import torch


        def wrap(model, rank):
            if rank != -1:
                try:
                    from apex.parallel import DistributedDataParallel as DDP
                except ImportError:
                    raise ImportError("Please install apex.")

                model = DDP(model)
            return model
    """)
    out, remaining, _ = _fix(source)
    assert not remaining
    assert "    if rank != -1:\n        model = torch.nn.parallel.DistributedDataParallel(" in out


def test_a_name_read_without_being_spelled_is_read(tmp_path):
    """The 73rd review's wrong rewrites of this stop's "nothing reads it" rule: an alias read
    through `globals()`, `eval` or `getattr` on the module from another file (FusedAdam then
    became torch's AdamW with its 0.01 weight decay), and a registry of the fallback class
    that is called (`NORM['ln'](6, memory_efficient=True)`: TypeError on torch's class), keep
    their refusals; a handler's `global` keeps its `try` (UnboundLocalError once it went)."""
    alias = textwrap.dedent("""\
        try:
            from apex.optimizers import FusedAdam as AdamW
        except ImportError:
            from torch.optim import AdamW
    """)
    for read in ('build = globals()["AdamW"]\n', 'build = eval("AdamW")\n'):
        out, remaining, _ = _fix(alias + read)
        assert out == alias + read and remaining[0].fix is None, read
    (tmp_path / "optim.py").write_text(alias)
    (tmp_path / "train.py").write_text('import optim\n\nbuild = getattr(optim, "Adam" + "W")\n')
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    new, remaining, _ = migrate_source(alias.encode(), settings, str(tmp_path / "optim.py"))
    assert new.decode() == alias and remaining[0].fix is None
    called = BERT_FALLBACK + "\n\nNORM = {'ln': BertLayerNorm}\nx = NORM['ln'](6, eps=1e-12)\n"
    out, remaining, _ = _fix(called)
    assert out == called and "used as a value" in remaining[0].message
    declared = textwrap.dedent("""\
        import torch

        BUILT = 0


        def make(shape):
            try:
                from apex.normalization import FusedLayerNorm
                ln = FusedLayerNorm(shape)
            except ImportError:
                global BUILT
                ln = torch.nn.LayerNorm(shape)
            BUILT = BUILT + 1
            return ln
    """)
    out, _, _ = _fix(declared)
    assert "global BUILT" in out and "FusedLayerNorm" not in out
    namespace: dict = {}
    exec(compile(out, "migrated", "exec"), namespace)
    namespace["make"](4)
    assert namespace["BUILT"] == 1


def test_an_unused_import_beside_another_apex_import_in_its_try_changes_no_probe():
    """The 76th review (iVMCL's `train_supervised.py`): an unused `convert_syncbn_model`
    removed from a `try` that keeps `from apex import amp` was said to make code that tests the
    probe run "as if apex were installed"; the other import still decides it."""
    source = textwrap.dedent("""\
        try:
            from apex import amp
            from apex.parallel import convert_syncbn_model
            has_apex = True
        except ImportError:
            has_apex = False


        def main(model, optimizer):
            if not has_apex:
                raise RuntimeError("install apex")
            return amp.initialize(model, optimizer, opt_level="O2")
    """)
    [finding] = [d for d in check_source(source) if d.code == "AMP313"]
    assert "while the `try`'s apex import at line 2 stays, code that tests" in finding.message
    assert "once that goes too, it runs as if apex were installed" in finding.message
    # two unused ones: neither keeps the probe (the 77th review)
    both = source.replace(
        "    from apex import amp\n", "    from apex.optimizers import FusedLAMB\n"
    )
    for finding in [d for d in check_source(both) if d.code in ("AMP313", "AMP315")]:
        assert "now runs as if apex were installed" in finding.message, finding.message
    alone = source.replace("    from apex import amp\n", "")
    [finding] = [d for d in check_source(alone) if d.code == "AMP313"]
    assert "now runs as if apex were installed" in finding.message


def test_a_module_built_to_probe_apex_s_kernel_goes_with_its_try(tmp_path):
    """The 76th review (Megatron's `mpu/layers.py`, copied in YaLM-100B): the `try` builds a
    module of the apex class only to learn whether its kernel loads (`_ = LayerNorm(8,
    eps=1e-5)`); the fallback is still the migration: the `try` (probe included) goes, in a
    file that uses the name and in one other modules import it from (refused before)."""
    source = textwrap.dedent("""\
        try:
            from apex.normalization.fused_layer_norm import FusedLayerNorm as LayerNorm
            _ = LayerNorm(8, eps=1e-5)
        except ImportError:
            print("WARNING: APEX is not installed, using torch.nn.LayerNorm")
            from torch.nn import LayerNorm
    """)
    used = source + "\nnorm = LayerNorm(16, eps=1e-5)\n"
    out, remaining, fixed = _fix(used)
    assert not remaining and "try" not in out and "apex" not in out, out
    assert out.startswith("from torch.nn import LayerNorm\n"), out
    assert "the module built to probe apex's kernel (line 3) goes too" in fixed[0].message
    namespace: dict = {}
    exec(compile(out, "migrated", "exec"), namespace)
    assert namespace["norm"].eps == 1e-5
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from .layers import LayerNorm\n")
    (package / "layers.py").write_text(source)
    (tmp_path / "use.py").write_text("from pkg import LayerNorm\nn = LayerNorm(4)\n")
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    new, remaining, _ = migrate_source(source.encode(), settings, path=str(package / "layers.py"))
    assert new.decode() == "from torch.nn import LayerNorm\n" and not remaining
    named = used.replace("    _ = LayerNorm(8", "    default_norm = LayerNorm(8")
    out, _, fixed = _fix(named)  # (a named module may be imported elsewhere: the 77th review)
    assert "try:" in out and "probe" not in " ".join(d.message for d in fixed), out
    read = used + "print(_)\n"  # (the probe's module is read: the `try` stays)
    out, _, fixed = _fix(read)
    assert "try:" in out and "probe" not in " ".join(d.message for d in fixed), out


def test_a_read_after_the_fallback_s_own_import_is_not_apex_s():
    """The 76th review (InternEvo's `try_import_RMSNorm`): `return RMSNorm` in the `except`,
    after `from .norm import RMSNormTorch as RMSNorm`, was reported as apex's
    `MixedFusedRMSNorm`; it reads the project's class. The read in the `try` stays apex's."""
    source = textwrap.dedent("""\
        def try_import_RMSNorm():
            try:
                from apex.normalization.fused_layer_norm import MixedFusedRMSNorm as RMSNorm
                return RMSNorm
            except ImportError:
                from .norm import RMSNormTorch as RMSNorm
                return RMSNorm
    """)
    lines = sorted(d.line for d in check_source(source) if d.code == "AMP312")
    assert 7 not in lines and 4 in lines, lines


@pytest.mark.parametrize("spelled", ["(DDP, (ApexDDP))", "((ApexDDP), DDP)", "(ApexDDP , DDP)"])
def test_a_parenthesized_element_keeps_the_tuple_as_it_is(spelled):
    """The 79th review: `(T, (A))` came out as code that does not parse (an internal error, no
    fix applied to the file); such a tuple keeps torch's class twice, harmlessly."""
    source = (
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "from apex.parallel import DistributedDataParallel as ApexDDP\n\n"
        f"W = {spelled}\nok = isinstance(1, W)\n"
    )
    out, remaining, _ = _fix(source)
    compile(out, "migrated", "exec")
    assert "apex" not in out and not remaining, out


def test_a_probe_module_imported_elsewhere_as_underscore_keeps_its_try(tmp_path):
    """The 79th review: `from pkg.layers import _` in another module reads the probe's module
    the `try` built; dropping the `try` with it made that import fail."""
    source = textwrap.dedent("""\
        try:
            from apex.normalization.fused_layer_norm import FusedLayerNorm as LayerNorm
            _ = LayerNorm(8, eps=1e-5)
        except ImportError:
            from torch.nn import LayerNorm
    """)
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "layers.py").write_text(source)
    (tmp_path / "use.py").write_text("from pkg.layers import _\nprint(_)\n")
    settings = Settings(rules=tuple(all_rules().values()), fix=True, unsafe_fixes=True)
    new, _, fixed = migrate_source(source.encode(), settings, path=str(package / "layers.py"))
    assert b"try:" in new and "probe" not in " ".join(d.message for d in fixed), new
    (tmp_path / "use.py").write_text("from pkg.layers import LayerNorm\n")
    new, remaining, _ = migrate_source(source.encode(), settings, path=str(package / "layers.py"))
    assert new.decode() == "from torch.nn import LayerNorm\n" and not remaining, new


def test_a_kernel_probe_through_a_device_method_goes_with_its_try():
    """The 81st review's D1: `_ = LayerNorm(8).cuda()` in the `try` was not read as a probe;
    the call was rewritten in the `try` (`torch.nn.LayerNorm(8).cuda()`), whose import went:
    on a machine without CUDA the module raised AssertionError at import, where it fell back
    before. The probe goes with the `try` now; a probe kept under a name keeps its call."""
    source = textwrap.dedent("""\
        import torch

        try:
            from apex.normalization import FusedLayerNorm as LayerNorm
            _ = LayerNorm(8).cuda()
        except ImportError:
            LayerNorm = torch.nn.LayerNorm

        norm = LayerNorm(16)
    """)
    out, remaining, _ = _fix(source)
    assert not remaining and "try" not in out and ".cuda()" not in out, out
    namespace: dict = {}
    exec(compile(out, "migrated", "exec"), namespace)  # (on this CPU-only torch)
    assert isinstance(namespace["norm"], namespace["torch"].nn.LayerNorm)
    named = source.replace("    _ = LayerNorm(8)", "    probe = LayerNorm(8)")
    out, remaining, _ = _fix(named)
    assert "    probe = LayerNorm(8).cuda()\n" in out and "from apex" in out, out
    (left,) = [d for d in remaining if d.line == 5]
    assert "this use follows apex's import (line 4) in a `try` that catches ImportError" in (
        left.message
    ), left.message


def test_a_use_in_the_try_of_its_import_beside_other_code_is_left():
    """A log (or any call but torch's constructors) in the `try` ran only where apex imported:
    rewriting the use there and dropping the import would run it everywhere."""
    source = textwrap.dedent("""\
        import torch

        try:
            from apex.normalization import FusedLayerNorm
            print("using apex")
            NORM = FusedLayerNorm
        except ImportError:
            NORM = torch.nn.LayerNorm
    """)
    out, remaining, _ = _fix(source)
    assert out == source and "the `try` also runs line 5" in remaining[0].message
    alone = source.replace('    print("using apex")\n', "")
    out, remaining, _ = _fix(alone)
    assert "apex" not in out and not remaining, out


def test_a_sys_modules_read_for_apex_keeps_the_fixes_of_its_file():
    """The 81st review's D2: `if "apex" not in sys.modules: raise ImportError(...)` stayed while
    the fix dropped the file's only apex import: the guard raised on every run. A read of the
    table for apex (or one that may be: an alias) refuses the file's fixes; other names stay."""
    source = textwrap.dedent("""\
        import sys

        import torch
        from apex.optimizers import FusedAdam

        if "apex" not in sys.modules:
            raise ImportError("this trainer needs NVIDIA apex")


        def build(params):
            return FusedAdam(params, lr=1e-3)
    """)
    out, remaining, _ = _fix(source)
    assert out == source, out
    assert "line 6 reads `sys.modules` for apex" in remaining[0].message
    other = source.replace('"apex" not in sys.modules', '"numpy" not in sys.modules')
    out, remaining, _ = _fix(other)
    assert "torch.optim.AdamW(" in out and not remaining, out


def test_an_apex_import_a_class_of_the_same_name_replaces_is_dead():
    """The 81st review's D3 (WebQA's `modeling.py`): `class BertLayerNorm(nn.Module)` right
    after the guarded apex import always replaces it; its six uses were refused for "the
    binding a use reaches depends on which ran last". The import is dead: it goes with its
    `try`, and the uses are the project's class."""
    source = textwrap.dedent("""\
        import torch
        from torch import nn

        try:
            from apex.normalization.fused_layer_norm import FusedLayerNorm as BertLayerNorm
        except ImportError:
            print("apex not installed")
        class BertLayerNorm(nn.Module):
            def __init__(self, hidden_size, eps=1e-12):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(hidden_size))


        norm = BertLayerNorm(768, eps=1e-12)
    """)
    out, remaining, fixed = _fix(source)
    assert "apex" not in out and not remaining, out
    assert "which line 8 binds again before anything reads it" in fixed[0].message
    based = source.replace("BertLayerNorm(nn.Module)", "BertLayerNorm(BertLayerNorm)")
    out, remaining, _ = _fix(based)  # (the class reads the import: not dead)
    assert "from apex" in out, out


@pytest.mark.parametrize(
    ("source", "refused"),
    [
        # the 83rd review's 4: a torch call on "cuda" in the `try` ran only where apex imported
        (
            "import torch\ntry:\n    from apex.normalization import FusedLayerNorm as LN\n"
            '    _probe = torch.ones(1, device="cuda")\nexcept ImportError:\n'
            "    LN = torch.nn.LayerNorm\nnorm = LN(4)\n",
            True,
        ),
        # 5: the `try`'s `else:` runs only where the import did
        (
            "import torch\ntry:\n    from apex.normalization import FusedLayerNorm\n"
            "except ImportError:\n    FusedLayerNorm = None\nelse:\n"
            '    print("using apex")\n    NORM = FusedLayerNorm\n',
            True,
        ),
        # 6: a use in a `def` of the `try`, beside a log
        (
            "import torch\ntry:\n    from apex.normalization import FusedLayerNorm\n"
            '    print("using apex")\n\n    def make(n):\n        return FusedLayerNorm(n)\n'
            "except ImportError:\n\n    def make(n):\n        return torch.nn.LayerNorm(n)\n",
            True,
        ),
        # a class of the `try` whose methods call things is no statement the `try` runs
        (
            "import torch\ntry:\n    from apex.normalization import FusedLayerNorm as _F\n\n"
            "    class Norm(_F):\n        def forward(self, x):\n"
            "            return super().forward(x)\n\nexcept ImportError:\n    Norm = None\n",
            False,
        ),
    ],
)
def test_what_the_try_of_an_apex_import_runs_is_read_as_it_runs(source, refused):
    """The 83rd review: the refusal of a use in the `try` of its own import missed a torch
    call on "cuda", the `try`'s `else:` and a use inside a `def` of the `try`; a method body
    runs later and is not what the `try` runs."""
    out, remaining, _ = _fix(source)
    said = " ".join(d.message for d in remaining)
    kept = "the `try` also runs line" in said or "only where apex is installed" in said
    assert kept is refused, (out, said)
    assert not refused or "from apex" in out, out


@pytest.mark.parametrize(
    ("read", "refused"),
    [
        ('from sys import modules as loaded\nOK = "apex" in loaded', True),
        ('OK = "apex" in getattr(sys, "modules")', True),
        ('OK = "numpy" in sys.modules.keys()', False),
    ],
)
def test_every_spelling_of_the_module_table_is_read_for_apex(read, refused):
    """The 83rd review's 1 and 3: `from sys import modules as loaded` and `getattr(sys,
    "modules")` escaped the refusal (a guard then raised on every run); `"numpy" in
    sys.modules.keys()` was refused as a read for apex."""
    source = (
        f"import sys\n\nimport torch\nfrom apex.optimizers import FusedAdam\n\n{read}\n\n\n"
        "def build(params):\n    return FusedAdam(params, lr=1e-3)\n"
    )
    out, remaining, _ = _fix(source)
    assert (out == source) is refused, out
    assert any("reads `sys.modules` for apex" in d.message for d in remaining) is refused


def test_a_class_that_reads_the_apex_name_in_a_star_annotation_keeps_the_import():
    """The 83rd review's 8: `def __init__(self, *shape: FusedLayerNorm)` reads the import when
    the class is made: it is not dead (the output raised NameError at import)."""
    source = textwrap.dedent("""\
        from apex.normalization import FusedLayerNorm


        class FusedLayerNorm(object):
            def __init__(self, *shape: FusedLayerNorm):
                self.shape = shape
    """)
    out, _, _ = _fix(source)
    assert "from apex.normalization import FusedLayerNorm" in out, out
