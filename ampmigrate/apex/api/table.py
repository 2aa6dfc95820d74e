"""What each apex name outside ``apex.amp`` becomes in torch, as data the planner reads.

The facts behind every entry (defaults, kernels, measured differences) are in
``docs/apex.md`` ("Leaving apex entirely"); the planner (:mod:`ampmigrate.apex.api.plan`) only
maps arguments as these records say. ``accepts`` is the behaviour difference a fix accepts,
quoted in its finding; an argument in ``refuse`` blocks the fix with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OPTIMIZERS = "AMP311"
NORMALIZATION = "AMP312"
PARALLEL = "AMP313"
SAME_OBJECT = "AMP314"
NO_NATIVE = "AMP315"

# apex's defaults, as Python values: an argument written as exactly this literal may go.
TRUE, FALSE, NONE, ONE = (True,), (False,), (None,), (1,)


@dataclass(frozen=True)
class Target:
    """One apex class or function with a torch counterpart reached by mapping its arguments."""

    code: str
    new: str  # the torch callable, spelled from ``torch``
    params: tuple[str, ...]  # apex's parameters in positional order
    new_positional: tuple[str, ...]  # torch's leading positional parameters with the same meaning
    rename: dict[str, str] = field(default_factory=dict)  # apex keyword -> torch keyword
    drop: dict[str, tuple[object, ...]] = field(default_factory=dict)  # may go when one of these
    drop_any: tuple[str, ...] = ()  # go whatever their (side-effect free) value
    refuse: dict[str, str] = field(default_factory=dict)  # present (and not dropped): no fix
    write: tuple[tuple[str, str], ...] = ()  # written out when absent (apex's default differs)
    required: int = 1
    accepts: str = ""
    min_torch: tuple[int, ...] = ()  # () where torch 1.0 has it already
    as_value: str = ""  # "": a reference may become the torch name; else why it may not
    as_type: str = ""  # "": an isinstance class may become the torch class; else why not


_STEP = (
    "torch counts `step` per parameter (apex once per group, so a parameter that skips steps is "
    "bias-corrected differently) and keeps the moments in the parameter's dtype (apex: float32); "
    "apex optimizer checkpoints load after `ampmigrate convert-checkpoint`"
)
_ZERO_GRAD = (
    "`zero_grad()` sets gradients to None since torch 2.0 (FusedSGD zeroed them unless "
    "`set_grad_none=True`): a parameter without a gradient in a step is now skipped instead "
    "of getting momentum and weight decay"
)
_SET_GRAD_NONE = (
    "`set_grad_none=False` makes apex's `zero_grad()` zero the gradients; torch's needs "
    "`zero_grad(set_to_none=False)` at every call, which this fix cannot find"
)
_OPTIMIZER_VALUE = (
    "used as a value: the calls that construct it are not visible here, and {new}'s defaults "
    "differ from apex's (see the finding at a call)"
)
_OPTIMIZER_TYPE = (
    "a type test: the optimizers built from it become `torch.optim.Adam` or `torch.optim.AdamW` "
    "depending on `adam_w_mode`, so no one torch class has its meaning"
)
_NORM_AUTOCAST = (
    "under CUDA autocast torch's layer norm returns float32 (`layer_norm` autocasts to float32) "
    "where apex returned the autocast dtype"
)

ADAM_PARAMS = (
    "params", "lr", "bias_correction", "betas", "eps", "adam_w_mode", "weight_decay", "amsgrad",
    "set_grad_none", "capturable", "master_weights",
)  # fmt: skip

TARGETS: dict[str, Target] = {}

# Every keyword the torch counterparts take (torch 2.13): a key apex's signature lacks fails in
# both where torch lacks it too (a `**` splat may carry one on a path that raised under apex).
_OPTIM = ("params", "lr", "weight_decay", "maximize", "foreach", "differentiable", "fused")
_ADAM = (*_OPTIM, "betas", "eps", "amsgrad", "capturable")
# torch's positional parameters, in order (torch 2.13): where apex's differ at an index, a
# value given there means another thing to each
TORCH_POSITIONAL: dict[str, tuple[str, ...]] = {
    "torch.optim.AdamW": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "torch.optim.Adam": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "torch.optim.SGD": ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
    "torch.optim.Adagrad": (
        "params", "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps",
    ),
}  # fmt: skip
TORCH_TAKES: dict[str, frozenset[str]] = {
    "torch.optim.AdamW": frozenset(_ADAM),
    "torch.optim.Adam": frozenset((*_ADAM, "decoupled_weight_decay")),
    "torch.optim.SGD": frozenset((*_OPTIM, "momentum", "dampening", "nesterov")),
    "torch.optim.Adagrad": frozenset((*_OPTIM, "lr_decay", "initial_accumulator_value", "eps")),
    "torch.nn.parallel.DistributedDataParallel": frozenset((
        "module", "device_ids", "output_device", "dim", "broadcast_buffers", "init_sync",
        "process_group", "bucket_cap_mb", "find_unused_parameters", "check_reduction",
        "gradient_as_bucket_view", "static_graph", "delay_all_reduce_named_params",
        "param_to_hook_all_reduce", "mixed_precision", "device_mesh",
        "skip_all_reduce_unused_params", "forward_sync_buffers", "bucket_cap_mb_list",
        "batched_grad_copy",
    )),
}  # fmt: skip


def _add(names: tuple[str, ...], target: Target) -> None:
    for name in names:
        TARGETS[name] = target


_add(
    ("apex.optimizers.FusedAdam", "apex.optimizers.fused_adam.FusedAdam"),
    Target(
        OPTIMIZERS,
        "torch.optim.AdamW",  # torch.optim.Adam when adam_w_mode=False (see plan)
        ADAM_PARAMS,
        ("params", "lr"),
        drop={
            "bias_correction": TRUE,
            "adam_w_mode": TRUE + FALSE,
            "set_grad_none": TRUE,
            "capturable": FALSE,
            "master_weights": FALSE,
            "amsgrad": FALSE,
        },
        refuse={
            "bias_correction": "`bias_correction=False` has no torch counterpart: torch's Adam "
            "and AdamW always correct the bias of the moments",
            "adam_w_mode": "`adam_w_mode` is not a literal: the torch class (Adam for L2 weight "
            "decay, AdamW for decoupled) depends on its value",
            "set_grad_none": _SET_GRAD_NONE,
            "capturable": "apex's `capturable=True` also moves `lr` onto the device; torch's "
            "`capturable` does not: set it by hand",
            "master_weights": "`master_weights=True` keeps float32 master copies of half "
            "parameters; no torch optimizer does",
            "amsgrad": "apex's FusedAdam raises on `amsgrad=True`; the call already fails",
        },
        write=(("weight_decay", "0.0"),),
        required=1,
        accepts=f"the same update rule; {_STEP}",
        as_value=_OPTIMIZER_VALUE.format(new="torch.optim.AdamW"),
        as_type=_OPTIMIZER_TYPE,
        min_torch=(1, 2),  # AdamW (pytorch#21250); Adam for adam_w_mode=False: any (targets)
    ),
)
_add(
    ("apex.optimizers.FusedSGD", "apex.optimizers.fused_sgd.FusedSGD"),
    Target(
        OPTIMIZERS,
        "torch.optim.SGD",
        (
            "params",
            "lr",
            "momentum",
            "dampening",
            "weight_decay",
            "nesterov",
            "wd_after_momentum",
            "materialize_master_grads",
            "set_grad_none",
        ),
        ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
        drop={"wd_after_momentum": FALSE, "set_grad_none": TRUE + FALSE},
        drop_any=("materialize_master_grads",),
        refuse={
            "wd_after_momentum": "`wd_after_momentum=True` (weight decay applied after the "
            "momentum update) has no torch counterpart",
            "set_grad_none": "`set_grad_none` is not a literal",
        },
        required=2,
        accepts=(
            f"the same update rule and state (`momentum_buffer`); {_ZERO_GRAD}; torch raises "
            "on `nesterov=True` without momentum or with dampening, where apex ran"
        ),
        as_value=_OPTIMIZER_VALUE.format(new="torch.optim.SGD"),
    ),
)
_add(
    ("apex.optimizers.FusedAdagrad", "apex.optimizers.fused_adagrad.FusedAdagrad"),
    Target(
        OPTIMIZERS,
        "torch.optim.Adagrad",
        ("params", "lr", "eps", "weight_decay", "set_grad_none", "adagrad_w_mode"),
        ("params", "lr"),
        drop={"set_grad_none": TRUE, "adagrad_w_mode": FALSE},
        refuse={
            "set_grad_none": _SET_GRAD_NONE,
            "adagrad_w_mode": "`adagrad_w_mode=True` (decoupled weight decay) has no torch "
            "Adagrad counterpart",
        },
        accepts=(
            "the same update rule (L2 weight decay, `lr_decay=0`); torch keeps a per-parameter "
            "`step` in the state (apex's has `sum` only: convert old checkpoints)"
        ),
        as_value=_OPTIMIZER_VALUE.format(new="torch.optim.Adagrad"),
    ),
)
_NORM = ("normalized_shape", "eps", "elementwise_affine", "memory_efficient")
_add(
    ("apex.normalization.FusedLayerNorm", "apex.normalization.fused_layer_norm.FusedLayerNorm"),
    Target(
        NORMALIZATION,
        "torch.nn.LayerNorm",
        _NORM,
        ("normalized_shape", "eps", "elementwise_affine"),
        drop_any=("memory_efficient",),
        accepts=f"the same function and parameters (`weight`, `bias`); {_NORM_AUTOCAST}",
    ),
)
_add(
    ("apex.normalization.FusedRMSNorm", "apex.normalization.fused_layer_norm.FusedRMSNorm"),
    Target(
        NORMALIZATION,
        "torch.nn.RMSNorm",
        _NORM,
        ("normalized_shape", "eps", "elementwise_affine"),
        drop_any=("memory_efficient",),
        write=(("eps", "1e-5"),),
        accepts=(
            "the same function and parameter (`weight`); the output dtype follows torch's "
            "rules: off CUDA the input's (apex returned float32 for half input with float32 "
            "weights), under CUDA autocast float32 where torch lists `rms_norm` among its "
            "float32 ops (apex cast to the autocast dtype)"
        ),
        min_torch=(2, 4),
        as_value="used as a value: torch.nn.RMSNorm's `eps` default (the dtype's machine "
        "epsilon) differs from apex's 1e-5, and the calls that construct it are not visible here",
    ),
)
_MIXED = (
    "apex returned the parameters' dtype, torch returns the input's; unknown keyword arguments, "
    "which apex swallowed, would raise in torch"
)
_add(
    ("apex.normalization.MixedFusedLayerNorm",
     "apex.normalization.fused_layer_norm.MixedFusedLayerNorm"),
    Target(
        NORMALIZATION,
        "torch.nn.LayerNorm",
        ("normalized_shape", "eps"),
        ("normalized_shape", "eps"),
        drop_any=("memory_efficient",),
        accepts=f"the same function and parameters; {_MIXED}; {_NORM_AUTOCAST}",
    ),
)  # fmt: skip
_add(
    ("apex.normalization.MixedFusedRMSNorm",
     "apex.normalization.fused_layer_norm.MixedFusedRMSNorm"),
    Target(
        NORMALIZATION,
        "torch.nn.RMSNorm",
        ("normalized_shape", "eps"),
        ("normalized_shape", "eps"),
        drop_any=("memory_efficient",),
        write=(("eps", "1e-5"),),
        accepts=f"the same function; {_MIXED}",
        min_torch=(2, 4),
        as_value="used as a value: torch.nn.RMSNorm's `eps` default differs from apex's 1e-5",
    ),
)  # fmt: skip
# Functional forms: apex's argument order differs from torch's, so every argument after the
# input is passed by keyword (in the order written: the evaluation order stays).
_FUNCTIONAL = "the arguments passed by keyword; " + _NORM_AUTOCAST
_add(
    ("apex.normalization.fused_layer_norm.fused_layer_norm_affine",),
    Target(
        NORMALIZATION,
        "torch.nn.functional.layer_norm",
        ("input", "weight", "bias", "normalized_shape", "eps", "memory_efficient"),
        ("input",),
        drop_any=("memory_efficient",),
        write=(("eps", "1e-6"),),
        required=4,
        accepts=_FUNCTIONAL,
    ),
)
_add(
    ("apex.normalization.fused_layer_norm.fused_layer_norm",),
    Target(
        NORMALIZATION,
        "torch.nn.functional.layer_norm",
        ("input", "normalized_shape", "eps", "memory_efficient"),
        ("input", "normalized_shape"),
        drop_any=("memory_efficient",),
        write=(("eps", "1e-6"),),
        required=2,
        accepts=_FUNCTIONAL,
    ),
)
_add(
    ("apex.normalization.fused_layer_norm.fused_rms_norm_affine",),
    Target(
        NORMALIZATION,
        "torch.nn.functional.rms_norm",
        ("input", "weight", "normalized_shape", "eps", "memory_efficient"),
        ("input",),
        drop_any=("memory_efficient",),
        write=(("eps", "1e-6"),),
        required=3,
        accepts="the arguments passed by keyword; torch's output dtype rules (see FusedRMSNorm)",
        min_torch=(2, 4),
    ),
)
_add(
    ("apex.normalization.fused_layer_norm.fused_rms_norm",),
    Target(
        NORMALIZATION,
        "torch.nn.functional.rms_norm",
        ("input", "normalized_shape", "eps", "memory_efficient"),
        ("input", "normalized_shape"),
        drop_any=("memory_efficient",),
        write=(("eps", "1e-6"),),
        required=2,
        accepts="the arguments passed by keyword; torch's output dtype rules (see FusedRMSNorm)",
        min_torch=(2, 4),
    ),
)
_DDP_DROPPED = (
    "message_size", "allreduce_trigger_params", "retain_allreduce_buffers",
    "allreduce_always_fp32", "num_allreduce_streams", "allreduce_communicators", "prof",
)  # fmt: skip
_add(
    ("apex.parallel.DistributedDataParallel", "apex.parallel.distributed.DistributedDataParallel"),
    Target(
        PARALLEL,
        "torch.nn.parallel.DistributedDataParallel",
        ("module", "message_size", "delay_allreduce", "shared_param", "allreduce_trigger_params",
         "retain_allreduce_buffers", "allreduce_always_fp32", "num_allreduce_streams",
         "allreduce_communicators", "gradient_average", "gradient_predivide_factor",
         "gradient_average_split_factor", "prof"),
        ("module",),
        drop={"gradient_average": TRUE,
              "gradient_predivide_factor": ONE, "gradient_average_split_factor": NONE,
              "shared_param": NONE},
        drop_any=("delay_allreduce", *_DDP_DROPPED),
        refuse={
            "gradient_average": "`gradient_average=False` (summed gradients) needs a DDP "
            "communication hook",
            "gradient_predivide_factor": "`gradient_predivide_factor` needs a DDP communication "
            "hook (torch divides by the world size before the all-reduce)",
            "gradient_average_split_factor": "`gradient_average_split_factor` needs a DDP "
            "communication hook",
            "shared_param": "apex raises on `shared_param`; the call already fails",
        },
        write=(("find_unused_parameters", "True"), ("broadcast_buffers", "False")),
        accepts=(
            "`broadcast_buffers=False` keeps apex's behaviour of never broadcasting buffers "
            "(torch's default re-broadcasts them before every forward); "
            "`find_unused_parameters=True` keeps apex's tolerance of parameters without a "
            "gradient (its buckets held only the gradients the first backward made; with "
            "`delay_allreduce`, those of each step), where torch raises at the next step "
            "without it, at the cost of a graph traversal per forward (drop it, or use "
            "`static_graph=True`, where every parameter gets a gradient in every step); "
            "communication overlaps backward and torch divides by the world "
            "size before the all-reduce; apex's bucket, stream and profiling options go; "
            "`device_ids` stays None (the module's one device, as apex assumed); torch >= 2.13 "
            "warns that `broadcast_buffers` is deprecated, and its warning says to keep "
            "`broadcast_buffers=False` where buffers must not be synced at construction; "
            "torch raises RuntimeError at construction for a module without a parameter "
            "that requires a gradient (a buffers-only augmentation pipeline), which apex "
            "wrapped and passed through: drop the wrapper there"
        ),
        as_value="used as a value: torch DDP re-broadcasts buffers by default "
        "(`broadcast_buffers=True`) where apex never did, and the calls are not visible here",
        min_torch=(1, 1),  # `find_unused_parameters` (torch 1.0's DDP raises TypeError on it)
    ),
)  # fmt: skip
_SYNCBN = ("apex.parallel.SyncBatchNorm", "apex.parallel.optimized_sync_batchnorm.SyncBatchNorm",
           "apex.parallel.sync_batchnorm.SyncBatchNorm")  # fmt: skip
_add(
    _SYNCBN,
    Target(
        PARALLEL,
        "torch.nn.SyncBatchNorm",
        ("num_features", "eps", "momentum", "affine", "track_running_stats", "process_group",
         "channel_last", "fuse_relu"),
        ("num_features", "eps", "momentum", "affine", "track_running_stats", "process_group"),
        drop={"channel_last": FALSE, "fuse_relu": FALSE},
        refuse={
            "channel_last": "`channel_last=True` selects apex's NHWC kernel; torch follows the "
            "input's memory format: drop it by hand once the input layout is checked",
            "fuse_relu": "`fuse_relu=True` has no torch counterpart: apply `F.relu` after it",
        },
        required=1,
        accepts=(
            "the same parameters and buffers; torch raises on CPU input while training with a "
            "process group"
        ),
        min_torch=(1, 1),
    ),
)  # fmt: skip
_add(
    ("apex.parallel.convert_syncbn_model",),
    Target(
        PARALLEL,
        "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
        ("module", "process_group", "channel_last"),
        ("module", "process_group"),
        drop={"channel_last": FALSE},
        refuse={"channel_last": "`channel_last=True` has no torch counterpart"},
        accepts=(
            "torch keeps the BatchNorm's Parameter objects and its `training` flag (apex made "
            "new Parameters and set `training=True`): an optimizer built before the conversion "
            "keeps working"
        ),
        min_torch=(1, 1),
    ),
)

_add(
    ("apex.contrib.clip_grad.clip_grad_norm_", "apex.contrib.clip_grad.clip_grad.clip_grad_norm_"),
    Target(
        SAME_OBJECT,
        "torch.nn.utils.clip_grad_norm_",
        ("parameters", "max_norm", "norm_type", "error_if_nonfinite"),
        ("parameters", "max_norm", "norm_type", "error_if_nonfinite"),
        required=2,
        accepts=(
            "apex's function is torch's with a fused CUDA 2-norm (it calls torch's off CUDA and "
            "for other norms): the same clip and return value, the norm rounded differently; "
            "torch takes each float16 gradient's norm in float16 (inf above 65504, where apex "
            "summed in float32)"
        ),
    ),
)  # fmt: skip

# apex modules whose names have torch counterparts (`from apex import optimizers`), by rule.
MODULES = {"apex.optimizers": OPTIMIZERS, "apex.normalization": NORMALIZATION,
           "apex.parallel": PARALLEL}  # fmt: skip

# Names that are torch's own object under another name: the fix is safe.
SAME: dict[str, str] = {
    "apex.parallel.ReduceOp": "torch.distributed.ReduceOp",
    "apex.fp16_utils.clip_grad_norm": "torch.nn.utils.clip_grad_norm_",
    "apex.fp16_utils.fp16util.clip_grad_norm": "torch.nn.utils.clip_grad_norm_",
}
TO_PYTHON_FLOAT = frozenset(
    {"apex.fp16_utils.to_python_float", "apex.fp16_utils.fp16util.to_python_float"}
)

_LAMB = (
    "torch has no LAMB optimizer; projects use `timm.optim.Lamb` (a pure-PyTorch port of "
    "FusedLAMB with its defaults) or `deepspeed.ops.lamb.FusedLamb`, or keep apex for it"
)
# apex.contrib's optimizers are the pre-2019 ones, driven by its FP16_Optimizer (the 72nd review:
# its FusedAdam was told to use a LAMB optimizer)
_PRE_2019 = (
    "; it also takes `step(grads=..., scale=...)` from apex's FP16_Optimizer, which torch's "
    "`step()` does not: migrate it with that wrapper (a GradScaler), by hand"
)
_CONTRIB_ADAM = (
    "apex.contrib's FusedAdam is the pre-2019 one: its nearest torch counterparts are "
    "`torch.optim.Adam` and `torch.optim.AdamW`, which have no `max_grad_norm` (clip with "
    "`torch.nn.utils.clip_grad_norm_` before the step) nor `eps_inside_sqrt`" + _PRE_2019
)
_CONTRIB_SGD = (
    "apex.contrib's FusedSGD is the pre-2019 one: its torch counterpart is `torch.optim.SGD`"
    + _PRE_2019
)
_COMPILED = "apex's compiled CUDA extension `{name}`: {instead}"
_MULTI_TENSOR = (
    "its kernels have no public torch counterpart; the private `torch._foreach_*` ops "
    "(`_foreach_mul`, `_foreach_norm`) and `torch.nn.utils.get_total_norm` do the multi-tensor "
    "work without apex's overflow flag"
)
_SOFTMAX = (
    "its fused scale-mask-softmax kernels: `torch.nn.functional.softmax` of the scaled scores "
    "with the mask filled in (`masked_fill` with the dtype's minimum) computes the same, or "
    "`torch.nn.functional.scaled_dot_product_attention` the whole attention"
)
_LINEAR = "`torch.nn.functional.linear` (cuBLAS adds the bias in the same GEMM) and the activation"
# what each extension's kernels are, in torch's public API (67th review: every extension was
# told the multi-tensor text, which fits only `amp_C`)
_EXTENSION_INSTEAD = {
    "amp_C": _MULTI_TENSOR,
    "apex_C": "its `flatten`/`unflatten` do what torch's private "
    "`torch._utils._flatten_dense_tensors` / `_unflatten_dense_tensors` do",
    "fused_layer_norm_cuda": "its layer and RMS norms are `torch.nn.functional.layer_norm` and "
    "`torch.nn.functional.rms_norm` (torch >= 2.4), or the modules `torch.nn.LayerNorm` and "
    "`torch.nn.RMSNorm`",
    "fast_layer_norm": "its layer norm is `torch.nn.functional.layer_norm` (`torch.nn.LayerNorm`)",
    "fused_adam_cuda": "its Adam update is `torch.optim.Adam` / `torch.optim.AdamW` (`fused=True` "
    "for one kernel on CUDA)",
    "distributed_adam_cuda": "its Adam update is `torch.optim.AdamW`; the sharded optimizer "
    "state is `torch.distributed.optim.ZeroRedundancyOptimizer`'s",
    "fused_lamb_cuda": _LAMB,
    "syncbn": "its synchronized batch norm is `torch.nn.SyncBatchNorm` (its statistics "
    "all-reduced by torch's own `torch.batch_norm_gather_stats_with_counts`)",
    "xentropy_cuda": "its softmax cross entropy is `torch.nn.functional.cross_entropy` "
    "(`label_smoothing=`, torch >= 1.10)",
    "fused_dense_cuda": _LINEAR,
    "mlp_cuda": _LINEAR + ", one `torch.nn.Linear` per layer",
    "fused_weight_gradient_mlp_cuda": "its weight-gradient accumulation into a float32 buffer "
    "has no public torch counterpart; autograd of `torch.nn.functional.linear` computes the "
    "same gradient (into `.grad`)",
    "scaled_upper_triang_masked_softmax_cuda": _SOFTMAX,
    "scaled_masked_softmax_cuda": _SOFTMAX,
    "scaled_softmax_cuda": _SOFTMAX,
    "generic_scaled_masked_softmax_cuda": _SOFTMAX,
}
_SYNC_BN_FUNCTION = (
    "apex's autograd function of synchronized batch norm, given statistics by its caller: no "
    "public torch function normalizes with supplied statistics (its backward all-reduces the "
    "batch-norm gradient terms, which DistributedDataParallel does not); use "
    "`torch.nn.SyncBatchNorm` where its own statistics will do, or keep a copy of apex's "
    "Python function (BSD-3) in the project"
)
# Longest prefix first wins. (prefix, what projects use instead)
INSTEAD: tuple[tuple[str, str], ...] = (
    ("apex.optimizers.FusedLAMB", _LAMB),
    ("apex.optimizers.fused_lamb", _LAMB),
    ("apex.optimizers.FusedMixedPrecisionLamb", _LAMB),
    ("apex.optimizers.fused_mixed_precision_lamb", _LAMB),
    ("apex.optimizers.FusedNovoGrad",
     "torch has no NovoGrad optimizer; timm ships `timm.optim.NvNovoGrad`"),
    ("apex.optimizers.fused_novograd",
     "torch has no NovoGrad optimizer; timm ships `timm.optim.NvNovoGrad`"),
    ("apex.parallel.LARC",
     "torch has no LARC; vendor apex's `LARC.py` (BSD-3) or, for SGD, use `timm.optim.Lars(..., "
     "trust_coeff=<LARC's trust_coefficient>, always_adapt=True)` (timm's default trust "
     "coefficient is 0.001, LARC's 0.02)"),
    ("apex.parallel.create_syncbn_process_group",
     "`torch.distributed.new_subgroups(group_size=n)[0]` (None for n == 0) builds the same "
     "groups of consecutive ranks; every rank must call it"),
    ("apex.parallel.sync_batchnorm_kernel", _SYNC_BN_FUNCTION),
    ("apex.parallel.optimized_sync_batchnorm_kernel", _SYNC_BN_FUNCTION),
    ("apex.parallel",
     "no public torch counterpart: torch's DistributedDataParallel does its own all-reduce"),
    ("apex.multi_tensor_apply",
     "torch has no public multi-tensor applier: `torch._foreach_*` ops do the work without "
     "apex's overflow flag (Megatron-LM's `local_multi_tensor_applier` is a plain-PyTorch "
     "fallback)"),
    ("apex.transformer",
     "`apex.transformer` was removed from apex in January 2026; apex points to Megatron Core"),
    ("apex.contrib.xentropy",
     "`torch.nn.functional.cross_entropy(logits, labels, reduction=\"none\", "
     "label_smoothing=smoothing, ignore_index=padding_idx)` computes the same loss (apex's "
     "`padding_idx` defaults to 0, torch's `ignore_index` to -100)"),
    ("apex.contrib.optimizers.distributed_fused_adam",
     "`torch.distributed.optim.ZeroRedundancyOptimizer(params, "
     "optimizer_class=torch.optim.AdamW)` or FSDP shard the optimizer state"),
    *((name, _CONTRIB_ADAM) for name in (
        "apex.contrib.optimizers.FusedAdam", "apex.contrib.optimizers.fused_adam")),
    *((name, _CONTRIB_SGD) for name in (
        "apex.contrib.optimizers.FusedSGD", "apex.contrib.optimizers.fused_sgd")),
    *((name, _LAMB) for name in (
        "apex.contrib.optimizers.FusedLAMB", "apex.contrib.optimizers.fused_lamb")),
    ("apex.contrib.optimizers",
     "this `apex.contrib` optimizer has no torch counterpart; keep apex for it, or replace it "
     "by the torch optimizer of its update rule by hand"),
    ("apex.contrib.layer_norm",
     "`torch.nn.LayerNorm(hidden_size, eps)` / `torch.nn.functional.layer_norm`"),
    ("apex.contrib.group_norm", "`torch.nn.GroupNorm` (and `torch.nn.functional.silu` for `act`)"),
    ("apex.contrib.multihead_attn",
     "`torch.nn.MultiheadAttention` / `torch.nn.functional.scaled_dot_product_attention`"),
    ("apex.contrib.fmha", "`torch.nn.functional.scaled_dot_product_attention`"),
    ("apex.contrib.focal_loss", "`torchvision.ops.sigmoid_focal_loss`"),
    ("apex.contrib", "this `apex.contrib` module has no torch counterpart"),
    ("apex.normalization",
     "`torch.nn.functional.layer_norm(input, normalized_shape, weight, bias, eps)` / "
     "`torch.nn.functional.rms_norm` (apex's autograd functions take their arguments in another "
     "order)"),
    ("apex.optimizers", "this apex optimizer has no torch counterpart"),
    ("apex.mlp", "`torch.nn.Sequential` of `torch.nn.Linear` and activations (state-dict keys "
     "differ: `weight_0` vs `0.weight`)"),
    ("apex.fused_dense", "`torch.nn.Linear` (same `weight`/`bias` names)"),
    ("apex.RNN", "`torch.nn.LSTM` / `torch.nn.GRU`"),
    # (the removals first: the 64th review's sentiment-discovery was told to apply a norm)
    ("apex.reparameterization.remove_weight_norm",
     "`torch.nn.utils.parametrize.remove_parametrizations(module, name)` for each parameter "
     "that `torch.nn.utils.parametrizations.weight_norm` was applied to (apex's removes it from "
     "every parameter of the module tree where `name` is left `''`); apex removed this module "
     "in July 2022"),
    ("apex.reparameterization.remove_reparameterization",
     "`torch.nn.utils.parametrize.remove_parametrizations(module, name)` for each "
     "parametrized parameter; apex removed this module in July 2022"),
    ("apex.reparameterization",
     "`torch.nn.utils.parametrizations.weight_norm(module, name)` (torch >= 2.1), once per "
     "parameter: apex's `apply_weight_norm` applies it to every parameter of the module tree "
     "where `name` is left `''`, and the state-dict keys differ; apex removed this module in "
     "July 2022"),
    ("apex.pyprof",
     "`torch.cuda.nvtx` / `torch.autograd.profiler.emit_nvtx` (apex removed `pyprof` in July "
     "2022)"),
    ("apex._autocast_utils", "no public torch counterpart (private autocast cast helpers)"),
)  # fmt: skip
COMPILED = frozenset(_EXTENSION_INSTEAD)
# Owned by other rules: apex.amp (AMP301/AMP303) and the rest of apex.fp16_utils (AMP302).
ELSEWHERE = ("apex.amp", "apex.fp16_utils")


def no_native(name: str) -> str | None:
    """What projects use instead of the apex name ``name`` (None: not one of these)."""
    root = name.partition(".")[0]
    if root in COMPILED:
        return _COMPILED.format(name=root, instead=_EXTENSION_INSTEAD[root])
    for prefix, text in INSTEAD:
        if name == prefix or name.startswith(prefix + "."):
            return text
    return None
