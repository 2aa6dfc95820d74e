"""``verify --emulate-cuda``: run a CUDA-written training script on the CPU.

Most CI runners have no GPU, and most training scripts call ``.cuda()``, ``torch.cuda.*`` and
CUDA autocast. Installed in each side's interpreter by ``bootstrap.py`` (both sides get the same
emulation), this module sends every CUDA tensor to the CPU, answers the cheap ``torch.cuda``
queries a script makes, and runs CUDA autocast and GradScaler as CPU float16 autocast and a CPU
GradScaler, so loss scaling, overflow skipping and scale growth really happen. Anything it does
not emulate raises ``NotEmulated`` naming the call, and the process exits with ``REFUSED_EXIT``.

Standalone like ``bootstrap.py``: it imports nothing from ampmigrate, and torch only in
``install``, so ``verify.py`` can read its constants without importing torch.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import types
from typing import Any, NoReturn

REFUSED_EXIT = 4
PREFIX = "--emulate-cuda:"
DEVICE_NAME = "ampmigrate emulated CUDA (CPU)"
CAPABILITY = (8, 0)  # float16 and bfloat16, like the GPUs mixed-precision scripts target

# torch.cuda names that need a real GPU; refused by name when called.
REFUSED = (
    "current_stream", "default_stream", "stream", "set_stream", "ExternalStream",
    "get_stream_from_external", "graph", "CUDAGraph", "make_graphed_callables",
    "graph_pool_handle", "set_per_process_memory_fraction", "caching_allocator_alloc",
    "caching_allocator_delete", "memory_snapshot", "list_gpu_processes", "utilization",
    "temperature", "power_draw", "clock_rate",
)  # fmt: skip
REFUSED_CLASSES = ("Stream", "Event")
NCCL = ("all_reduce", "reduce", "broadcast", "all_gather", "reduce_scatter", "init_rank")


class NotEmulated(RuntimeError):
    """A CUDA call outside the emulated set. A RuntimeError, as torch's own CUDA errors are."""


def refuse(name: str) -> NoReturn:
    raise NotEmulated(
        f"{PREFIX} {name} is not emulated (see 'ampmigrate verify --emulate-cuda' in "
        "docs/verify.md); verify this script on a GPU machine with --device cuda"
    )


def install(torch: Any) -> None:
    """Emulate CUDA on the CPU for the rest of this process."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a real GPU, if any, stays unused
    _install_devices(torch)
    _install_cuda_module(torch)
    _install_autocast(torch)
    _install_grad_scaler(torch)
    _install_load(torch)
    _install_generator(torch)
    _install_parallel(torch)
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        previous(kind, value, tb)
        if isinstance(value, NotEmulated):
            sys.stderr.flush()
            os._exit(REFUSED_EXIT)

    sys.excepthook = excepthook


def is_cuda(torch: Any, device: Any) -> bool:
    """Whether ``device`` (a str, torch.device or bare index) names a CUDA device."""
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True  # a bare index means a CUDA device to torch
    if isinstance(device, str):
        return device.split(":")[0].strip() == "cuda"
    return isinstance(device, torch.device) and device.type == "cuda"


def _install_devices(torch: Any) -> None:
    """Every torch call that would put a tensor on CUDA puts it on the CPU instead."""
    from torch.overrides import TorchFunctionMode

    tensor = torch.Tensor

    class CpuForCuda(TorchFunctionMode):
        def __torch_function__(self, func, kinds, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is tensor.cuda:  # cuda(device=None, non_blocking=False, memory_format=...)
                non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
                memory_format = kwargs.get("memory_format", torch.preserve_format)
                return args[0].to("cpu", non_blocking=non_blocking, memory_format=memory_format)
            if func is tensor.pin_memory:  # pinned host memory only matters for a real GPU
                return args[0]
            if func is tensor.to and len(args) > 1 and is_cuda(torch, args[1]):
                args = (args[0], "cpu", *args[2:])
            if is_cuda(torch, kwargs.get("device")):
                kwargs = {**kwargs, "device": "cpu"}
            return func(*args, **kwargs)

    # Entered for good. Function modes are per thread: each new thread enters its own.
    CpuForCuda().__enter__()
    start = threading.Thread._bootstrap_inner

    @functools.wraps(start)
    def _bootstrap_inner(self: threading.Thread) -> None:
        with CpuForCuda():  # left before the thread ends: its stack must be empty by then
            start(self)

    threading.Thread._bootstrap_inner = _bootstrap_inner
    # torch.set_default_device("cuda") and `with torch.device("cuda"):` set the device of
    # factory calls in a mode of their own, at the bottom of the stack, below CpuForCuda.
    from torch.utils._device import DeviceContext

    init = DeviceContext.__init__

    @functools.wraps(init)
    def __init__(self, device: Any) -> None:
        init(self, "cpu" if is_cuda(torch, device) else device)

    DeviceContext.__init__ = __init__


class _Properties(types.SimpleNamespace):
    """What ``torch.cuda.get_device_properties`` returns, for the emulated device."""


def _install_cuda_module(torch: Any) -> None:
    cuda = torch.cuda
    count = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    current = [0]  # as on a GPU machine, until the script calls set_device

    def index(device: Any = None) -> int:
        if device is None:
            return current[0]
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if device.type != "cuda":
                raise ValueError(f"Expected a cuda device, but got: {device}")
            device = current[0] if device.index is None else device.index
        if not 0 <= int(device) < count:
            raise RuntimeError(f"{PREFIX} invalid device ordinal {device} (emulating {count})")
        return int(device)

    def set_device(device: Any) -> None:
        current[0] = index(device)

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def get_device_properties(device: Any = None) -> _Properties:
        index(device)
        major, minor = CAPABILITY
        return _Properties(
            name=DEVICE_NAME, major=major, minor=minor, total_memory=total,
            multi_processor_count=os.cpu_count() or 1, is_integrated=False,
            is_multi_gpu_board=False, gcnArchName="",
        )  # fmt: skip

    def synchronize(device: Any = None) -> None:
        index(device)

    def get_device_name(device: Any = None) -> str:
        index(device)
        return DEVICE_NAME

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        index(device)
        return CAPABILITY

    # One function object per name: torch._dynamo's rules map each torch.cuda object to one role.
    def zero() -> Any:
        return lambda device=None: 0

    def nothing() -> Any:
        return lambda *args, **kwargs: None

    # The emulated device has no generator of its own: its tensors draw from the CPU generator,
    # so seeding it does nothing and its state is the CPU generator's.
    def get_rng_state(device: Any = "cuda") -> Any:
        return torch.get_rng_state()

    def set_rng_state(state: Any, device: Any = "cuda") -> None:
        torch.set_rng_state(state)

    def get_rng_state_all() -> list:
        return [torch.get_rng_state() for _ in range(count)]

    def set_rng_state_all(states: list) -> None:
        torch.set_rng_state(states[current[0]])

    emulated = {
        "is_available": lambda: True,
        "device_count": lambda: count,
        "current_device": lambda: current[0],
        "set_device": set_device,
        "synchronize": synchronize,
        "init": nothing(),
        "get_device_name": get_device_name,
        "get_device_capability": get_device_capability,
        "get_device_properties": get_device_properties,
        "is_bf16_supported": lambda including_emulation=True: True,
        "get_arch_list": lambda: [f"sm_{CAPABILITY[0]}{CAPABILITY[1]}"],
        "manual_seed": nothing(),
        "manual_seed_all": nothing(),
        "seed": nothing(),
        "seed_all": nothing(),
        "initial_seed": lambda: torch.initial_seed(),
        "get_rng_state": get_rng_state,
        "set_rng_state": set_rng_state,
        "get_rng_state_all": get_rng_state_all,
        "set_rng_state_all": set_rng_state_all,
        # nothing is ever allocated on the emulated device
        "memory_allocated": zero(),
        "max_memory_allocated": zero(),
        "memory_reserved": zero(),
        "max_memory_reserved": zero(),
        "memory_cached": zero(),
        "max_memory_cached": zero(),
        "memory_stats": lambda device=None: {},
        "memory_summary": lambda device=None, abbreviated=False: f"{DEVICE_NAME}: no memory use",
        "mem_get_info": lambda device=None: (total, total),
        "reset_peak_memory_stats": nothing(),
        "reset_max_memory_allocated": nothing(),
        "reset_max_memory_cached": nothing(),
        "reset_accumulated_memory_stats": nothing(),
        "empty_cache": nothing(),
        "ipc_collect": nothing(),
        "_exchange_device": lambda device: current[0],  # torch.cuda.device(i) as a context
        "_maybe_exchange_device": lambda device: current[0],
    }
    for name, function in emulated.items():
        setattr(cuda, name, function)
    for name in REFUSED:
        if hasattr(cuda, name):
            setattr(cuda, name, _refusing(f"torch.cuda.{name}"))
    for name in REFUSED_CLASSES:
        setattr(cuda, name, _refusing_class(getattr(cuda, name), f"torch.cuda.{name}"))
    for name in ("range_push", "range_pop", "range_start", "range_end", "mark"):
        setattr(cuda.nvtx, name, nothing())  # profiler annotations: nothing to annotate
    for name in NCCL:
        if hasattr(cuda.nccl, name):
            setattr(cuda.nccl, name, _refusing(f"torch.cuda.nccl.{name}"))
    # What is left reaches the lazy CUDA initialisation: refuse it naming the torch.cuda call.
    original = cuda._lazy_init
    for module in [m for n, m in sys.modules.items() if n.startswith("torch.cuda")]:
        if getattr(module, "_lazy_init", None) is original:
            module._lazy_init = lambda: refuse(_caller())
    if torch.distributed.is_available():
        _install_distributed(torch)


def _caller() -> str:
    """The outermost torch.cuda function on the stack, as the script spelled it; else where
    the script's call into torch began."""
    frame, name = sys._getframe(2), None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("torch.cuda"):
            qualname = frame.f_code.co_qualname.removesuffix(".__new__").removesuffix(".__init__")
            name = f"torch.cuda.{qualname}"
        elif not module.startswith("torch.") and module != __name__:
            break
        frame = frame.f_back
    if name is None:
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame else "?"
        return f"the CUDA call at {where}"
    return name


def _refusing(name: str):
    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        refuse(name)

    return refused


def _refusing_class(cls: type, name: str) -> type:
    """A subclass, so isinstance checks in torch and the script still work; creating one fails."""

    def __new__(klass, *args: Any, **kwargs: Any) -> NoReturn:
        refuse(name)

    return type(cls.__name__, (cls,), {"__new__": __new__, "__module__": cls.__module__})


def _install_distributed(torch: Any) -> None:
    import torch.distributed as dist

    original = dist.init_process_group
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        backend = signature.bind(*args, **kwargs).arguments.get("backend")
        if backend is not None and "nccl" in str(backend).lower():
            refuse(f"torch.distributed.init_process_group(backend={str(backend)!r})")
        return original(*args, **kwargs)

    dist.init_process_group = init_process_group
    ddp = torch.nn.parallel.DistributedDataParallel
    ddp_init = ddp.__init__
    ddp_signature = inspect.signature(ddp_init)

    @functools.wraps(ddp_init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # device_ids=[local_rank] names the emulated device; torch takes none for a CPU module.
        bound = ddp_signature.bind(self, *args, **kwargs)
        bound.arguments.pop("device_ids", None)
        bound.arguments.pop("output_device", None)
        ddp_init(*bound.args, **bound.kwargs)

    ddp.__init__ = __init__


def _install_autocast(torch: Any) -> None:
    """CUDA autocast, in every spelling, runs as CPU autocast with CUDA's dtype (float16 unless
    the script says otherwise); ``torch.is_autocast_enabled("cuda")`` and
    ``torch.get_autocast_dtype("cuda")`` answer as inside a real CUDA region."""
    from torch.amp import autocast_mode

    autocast = autocast_mode.autocast
    init, enter, exit_ = autocast.__init__, autocast.__enter__, autocast.__exit__
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        self._emulated_cuda = bound.arguments["device_type"] == "cuda"
        if self._emulated_cuda:
            bound.arguments["device_type"] = "cpu"
            if bound.arguments.get("dtype") is None:
                bound.arguments["dtype"] = torch.get_autocast_dtype("cuda")
        init(*bound.args, **bound.kwargs)

    @functools.wraps(enter)
    def __enter__(self):
        if getattr(self, "_emulated_cuda", False):
            self._cuda_state = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
            torch.set_autocast_enabled("cuda", self._enabled)
            torch.set_autocast_dtype("cuda", self.fast_dtype)
        return enter(self)

    @functools.wraps(exit_)
    def __exit__(self, *exc: Any):
        result = exit_(self, *exc)
        if getattr(self, "_emulated_cuda", False):
            enabled, dtype = self._cuda_state
            torch.set_autocast_enabled("cuda", enabled)
            torch.set_autocast_dtype("cuda", dtype)
        return result

    autocast.__init__, autocast.__enter__, autocast.__exit__ = __init__, __enter__, __exit__
    cast = autocast_mode._cast

    @functools.wraps(cast)
    def _cast(value: Any, device_type: str, dtype: Any) -> Any:
        return cast(value, "cpu" if device_type == "cuda" else device_type, dtype)

    autocast_mode._cast = _cast  # custom_fwd(cast_inputs=...) casts the (CPU) inputs


def _install_grad_scaler(torch: Any) -> None:
    """A CUDA GradScaler, in every spelling, is a CPU GradScaler with the same settings."""
    from torch.amp import GradScaler

    init = GradScaler.__init__
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        if is_cuda(torch, bound.arguments.get("device", "cuda")):
            bound.arguments["device"] = "cpu"
        init(*bound.args, **bound.kwargs)

    GradScaler.__init__ = __init__


def _install_load(torch: Any) -> None:
    """``torch.load`` maps every storage to the CPU: CUDA checkpoints load, nothing goes to CUDA."""
    load = torch.load
    signature = inspect.signature(load)

    @functools.wraps(load)
    def emulated_load(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        where = bound.arguments.get("map_location")
        if not isinstance(where, (str, torch.device)) or is_cuda(torch, where):
            bound.arguments["map_location"] = "cpu"  # None, a dict, a function, or CUDA
        return load(*bound.args, **bound.kwargs)

    torch.load = emulated_load


def _install_generator(torch: Any) -> None:
    """``torch.Generator(device="cuda")`` makes a CPU generator. The C type cannot be patched, so
    ``torch.Generator`` becomes a subclass whose isinstance checks still accept every generator."""
    base = torch.Generator

    class GeneratorType(type(base)):
        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, base)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, base)

    class Generator(base, metaclass=GeneratorType):
        def __new__(cls, device: Any = "cpu") -> Any:
            return base.__new__(cls, "cpu" if is_cuda(torch, device) else device)

    Generator.__module__ = "torch"
    torch.Generator = Generator


def _install_parallel(torch: Any) -> None:
    """``nn.DataParallel`` on the one emulated device calls the module, as torch does without
    GPUs (it would otherwise scatter over CUDA streams)."""
    import importlib

    # (torch.nn.parallel.data_parallel is also the name of a function there: import the module)
    module = importlib.import_module("torch.nn.parallel.data_parallel")
    module._get_available_device_type = lambda: None
