"""Run a training script under instrumentation; executed as a file in a fresh interpreter.

    python bootstrap.py SCRIPT [ARGS...]    (settings come from AMPMIGRATE_* variables)

It seeds python/numpy/torch, pins the thread count, asks for deterministic algorithms, then runs
SCRIPT as ``__main__`` (``sys.argv[0]`` and ``sys.path[0]`` as if run directly). Hooks on
``GradScaler.scale/update``, ``Optimizer.step`` and ``autocast.__enter__`` record, per optimizer
step: the loss(es), the scale, the growth tracker and whether the step was skipped. After
AMPMIGRATE_STEPS steps it writes the trace (with a parameter checksum and the scaler's final
state_dict) and exits at once, so the rest of the script never runs.

Standalone on purpose: it imports nothing from ampmigrate, which may not be importable here.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import inspect
import itertools
import json
import os
import random
import resource
import runpy
import sys
import time

STEPS = int(os.environ.get("AMPMIGRATE_STEPS", "0")) or None
SEED = int(os.environ.get("AMPMIGRATE_SEED", "0"))
THREADS = int(os.environ.get("AMPMIGRATE_THREADS", "1"))
TRACE = os.environ["AMPMIGRATE_TRACE"].replace("{rank}", os.environ.get("RANK", "0"))
TRACING = os.environ.get("AMPMIGRATE_TRACING", "1") == "1"
FP32 = os.environ.get("AMPMIGRATE_FP32") == "1"  # autocast and GradScaler forced off
SYNC = os.environ.get("AMPMIGRATE_SYNC") == "1"  # wait for the GPU at each step, for timing
HARNESS = os.path.dirname(os.path.abspath(__file__))  # read now: the script may replace __main__


class Recorder:
    def __init__(self, torch) -> None:
        self.torch = torch
        self.steps: list[dict] = []
        self.losses: list = []  # this step's losses, kept as tensors (no device sync per step)
        self.scaler = None
        self.scaled = False  # a GradScaler scaled a loss since the last step boundary
        self.optimizer_stepped = False
        self.optimizers: list = []
        self.autocast: dict[str, dict[str, int]] = {}
        self.step_times: list[float] = []
        self._last_boundary = time.perf_counter()
        self.finished = False

    def loss(self, value) -> None:
        if isinstance(value, self.torch.Tensor) and value.numel() == 1:
            self.losses.append(value.detach().clone())

    def _append_step(self, scaler, skipped) -> None:
        # Tensors are cloned, not read: reading them would synchronise a GPU on every step.
        record = {"step": len(self.steps), "losses": self.losses, "skipped": skipped}
        enabled = scaler is not None and scaler.is_enabled()
        scale = getattr(scaler, "_scale", None) if enabled else None
        tracker = getattr(scaler, "_growth_tracker", None) if enabled else None
        record["scale"] = scale.detach().clone() if scale is not None else None
        record["growth_tracker"] = tracker.detach().clone() if tracker is not None else None
        if enabled and scale is None:  # enabled, but nothing scaled yet
            record["scale"] = float(scaler.get_scale())
        self.steps.append(record)
        self.losses, self.scaled, self.optimizer_stepped = [], False, False
        if SYNC and self.torch.cuda.is_initialized():
            self.torch.cuda.synchronize()
        now = time.perf_counter()
        self.step_times.append(now - self._last_boundary)
        self._last_boundary = now

    def close_step(self, scaler=None, skipped=None) -> None:
        self._append_step(scaler, skipped)
        if STEPS is not None and len(self.steps) >= STEPS:
            self.finish()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def checksum(self) -> tuple[str | None, list[float]]:
        digest = hashlib.sha256()
        norms = []
        seen = set()
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if id(p) in seen:
                        continue
                    seen.add(id(p))
                    data = p.detach().cpu().contiguous()
                    digest.update(str(tuple(data.shape)).encode())
                    digest.update(data.view(-1).view(self.torch.uint8).numpy().tobytes())
                    norms.append(float(data.double().norm()))
        return (digest.hexdigest() if seen else None), norms

    def finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        if self.optimizer_stepped:  # the last step's update() never came
            self._append_step(self.scaler, None)
        for record in self.steps:
            record["losses"] = [float(t.float().item()) for t in record["losses"]]
            record["losses_hex"] = [v.hex() for v in record["losses"]]
            for name, kind in (("scale", float), ("growth_tracker", int), ("skipped", bool)):
                value = record[name]
                if isinstance(value, self.torch.Tensor):
                    record[name] = kind(value.item())
        try:
            checksum, norms = self.checksum()
        except Exception as exc:  # e.g. numpy missing: keep the trace, say why
            checksum, norms = f"unavailable: {exc}", []
        scaler_state = scaler = None
        if self.scaler is not None:
            scaler = {"device": str(self.scaler._device), "enabled": self.scaler.is_enabled()}
            scaler_state = self.scaler.state_dict() if self.scaler.is_enabled() else None
        trace = {
            "scaler": scaler,
            "steps": self.steps,
            "param_checksum": checksum,
            "param_norms": norms,
            "scaler_state": scaler_state,
            "autocast": self.autocast,
            "step_times": self.step_times,
            "peak_memory": peak_memory(self.torch),
            "environment": environment(self.torch),
            **run_facts(),
        }
        with open(TRACE, "w", encoding="utf-8") as f:
            json.dump(trace, f)


def environment(torch) -> dict:
    cuda = torch.cuda.is_available()
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda_available": cuda,
        "device_name": torch.cuda.get_device_name(0) if cuda else None,
        "threads": torch.get_num_threads(),
        "seed": SEED,
        "rank": int(os.environ.get("RANK", "0")),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
    }


def peak_memory(torch) -> dict:
    """CUDA's max allocated bytes where CUDA ran, and the process's peak RSS (Linux: KiB)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (
        1 if sys.platform == "darwin" else 1024
    )
    cuda = torch.cuda.max_memory_allocated() if torch.cuda.is_initialized() else None
    return {"cuda_max_allocated": cuda, "max_rss": rss}


def force_fp32(torch) -> None:
    """Make every autocast region and GradScaler disabled, whatever the script asks for."""
    from torch.amp import GradScaler, autocast

    for cls in (autocast, GradScaler):
        cls.__init__ = _disabled(cls.__init__)


def _disabled(original):
    signature = inspect.signature(original)

    @functools.wraps(original)  # keeps the signature visible to track_precision
    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["enabled"] = False
        original(*bound.args, **bound.kwargs)

    return __init__


def install(torch) -> Recorder:
    rec = Recorder(torch)
    from torch.amp import GradScaler, autocast
    from torch.optim.optimizer import register_optimizer_step_post_hook

    original_scale, original_update = GradScaler.scale, GradScaler.update
    original_enter = autocast.__enter__

    def scale(self, outputs):
        if rec.optimizer_stepped:  # a step whose update() was dropped ends here
            rec.close_step(rec.scaler)
        rec.scaler, rec.scaled = self, True
        rec.loss(outputs)
        return original_scale(self, outputs)

    def update(self, new_scale=None):
        states = getattr(self, "_per_optimizer_states", {}) or {}
        found = [
            v for state in states.values() for v in state.get("found_inf_per_device", {}).values()
        ]
        skipped = sum(found) if found else None  # a tensor; read at the end
        result = original_update(self, new_scale)
        rec.scaler = self
        rec.close_step(self, skipped)
        return result

    def step_hook(optimizer, args, kwargs):
        if optimizer not in rec.optimizers:
            rec.optimizers.append(optimizer)
        if rec.scaled:
            rec.optimizer_stepped = True  # the scaler's update() closes this step
        else:
            rec.close_step(None, False)

    def enter(self):
        result = original_enter(self)
        counts = rec.autocast.setdefault(str(self.device), {"entered": 0, "enabled": 0})
        counts["entered"] += 1
        counts["enabled"] += bool(self._enabled)
        counts.setdefault("dtypes", [])
        dtype = str(self.fast_dtype).replace("torch.", "")
        if self._enabled and dtype not in counts["dtypes"]:
            counts["dtypes"].append(dtype)
        return result

    def backward_loss(tensor, *args, **kwargs):
        if not rec.scaled:
            rec.loss(tensor)
        return original_backward(tensor, *args, **kwargs)

    original_backward = torch.Tensor.backward
    GradScaler.scale, GradScaler.update, autocast.__enter__ = scale, update, enter
    torch.Tensor.backward = backward_loss
    register_optimizer_step_post_hook(step_hook)
    return rec


def time_steps_only(torch):
    """The untraced baseline for measuring the tracer's own cost: step timestamps, nothing else."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    stamps = [time.perf_counter()]
    register_optimizer_step_post_hook(lambda *_: stamps.append(time.perf_counter()))

    def finish() -> None:
        times = [b - a for a, b in itertools.pairwise(stamps)]
        with open(TRACE, "w", encoding="utf-8") as f:
            json.dump({"steps": [], "step_times": times}, f)

    return finish


def seed_everything(torch) -> None:
    random.seed(SEED)
    try:
        import numpy

        numpy.random.seed(SEED)
    except ImportError:
        pass
    torch.manual_seed(SEED)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if torch.backends.cudnn.is_available():
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True


# -- What was verified: project modules imported, rewritten sites run, who enabled AMP ----------
# AMPMIGRATE_PROJECT: the root whose imported files are listed; AMPMIGRATE_SITES: a JSON file
# {path: [[line, col, end_line, end_col]]} to watch; AMPMIGRATE_REDIRECT:
# "ORIGINAL_ROOT<os.pathsep>COPY_ROOT", imports of files under the original root load the copy's
# files instead.
_FACTS: dict = {"spans_hit": {}, "precision": {"autocast": {}, "scalers": {}, "autocast_steps": []}}


def run_facts() -> dict:
    """What finish() adds to the trace: the facts gathered by the functions below."""
    root = os.environ.get("AMPMIGRATE_PROJECT")
    files, outside = set(), {}
    if root:
        root = os.path.realpath(root)
        installed = {
            os.path.realpath(p) + os.sep
            for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
        }
        installed.add(HARNESS + os.sep)
        for name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None)
            if not isinstance(path, str) or not os.path.isabs(path):
                continue
            real = os.path.realpath(path)
            parts = real.split(os.sep)
            if "site-packages" in parts or "dist-packages" in parts:
                continue
            if real.startswith(root + os.sep):
                files.add(os.path.relpath(real, root))
            elif real.endswith(".py") and not any(real.startswith(p) for p in installed):
                outside[name] = real  # a source module of no environment: another project's
        if sys.argv and sys.argv[0]:
            files.add(os.path.relpath(os.path.realpath(sys.argv[0]), root))
    precision = _FACTS["precision"]
    return {
        "project_files": sorted(f for f in files if f.endswith(".py")),
        "outside_modules": dict(sorted(outside.items())),
        "spans_hit": {path: sorted(spans) for path, spans in _FACTS["spans_hit"].items()},
        "precision": {
            "autocast": list(precision["autocast"].values()),
            "scalers": list(precision["scalers"].values()),
            "autocast_steps": sorted(precision["autocast_steps"]),
        },
    }


def track_sites() -> None:
    """Record which watched spans (AMPMIGRATE_SITES: {path: [[line, col, end_line, end_col]]})
    some bytecode instruction ran in, by the instruction's position (PEP 657): sys.monitoring's
    INSTRUCTION events on the watched files' code objects where Python has it (each instruction
    reports once, then is disabled), else a trace function on the watched files that traces
    opcodes on the watched lines only."""
    sites = os.environ.get("AMPMIGRATE_SITES")
    if not sites:
        return
    with open(sites, encoding="utf-8") as f:
        wanted = {os.path.realpath(k): [tuple(s) for s in v] for k, v in json.load(f).items()}
    lines = {
        path: frozenset(n for s in spans for n in range(s[0], s[2] + 1))
        for path, spans in wanted.items()
    }
    hits = _FACTS["spans_hit"]
    names: dict[str, str | None] = {}
    positions: dict = {}

    def watched(filename: str) -> str | None:
        if filename not in names:
            real = os.path.realpath(filename)
            names[filename] = real if real in wanted else None
        return names[filename]

    def ran(path: str, code, offset: int) -> None:
        table = positions.get(code)
        if table is None:
            table = positions[code] = list(code.co_positions())
        index = offset // 2
        if index >= len(table):
            return
        line, end_line, col, end_col = table[index]
        if None in (line, end_line, col, end_col):
            return
        for span in wanted[path]:
            if (span[0], span[1]) <= (line, col) and (end_line, end_col) <= (span[2], span[3]):
                hits.setdefault(path, set()).add(span)

    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None and monitoring.get_tool(monitoring.COVERAGE_ID) is None:
        tool, events = monitoring.COVERAGE_ID, monitoring.events
        monitoring.use_tool_id(tool, "ampmigrate")

        def on_start(code, offset):
            if watched(code.co_filename) is not None:
                monitoring.set_local_events(tool, code, events.INSTRUCTION)
            return monitoring.DISABLE

        def on_instruction(code, offset):
            path = watched(code.co_filename)
            if path is not None:
                ran(path, code, offset)
            return monitoring.DISABLE

        monitoring.register_callback(tool, events.PY_START, on_start)
        monitoring.register_callback(tool, events.INSTRUCTION, on_instruction)
        monitoring.set_events(tool, events.PY_START)
        return

    import threading

    def local(frame, event, arg):
        path = watched(frame.f_code.co_filename)
        if event == "line":
            frame.f_trace_opcodes = frame.f_lineno in lines[path]
        elif event == "opcode":
            ran(path, frame.f_code, frame.f_lasti)
        return local

    def on_call(frame, event, arg):
        return local if watched(frame.f_code.co_filename) is not None else None

    sys.settrace(on_call)
    threading.settrace(on_call)


def track_precision(torch, rec: Recorder) -> None:
    """Per autocast/GradScaler construction: what the script asked for (its ``enabled``), what
    torch made of it and where; and in which steps an enabled autocast region was entered."""
    from torch.amp import GradScaler, autocast

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    wrappers = {__file__, functools.__file__, inspect.__file__}  # and deprecation decorators':
    wrappers |= {
        getattr(sys.modules.get(m), "__file__", "") for m in ("typing_extensions", "warnings")
    }
    wrappers.add(os.path.join(os.path.dirname(os.path.abspath(__file__)), "emulate.py"))
    precision = _FACTS["precision"]

    def caller() -> str:
        frame = sys._getframe(2)
        while frame is not None and (
            frame.f_code.co_filename.startswith(torch_dir) or frame.f_code.co_filename in wrappers
        ):
            frame = frame.f_back
        return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame else "?"

    def recording(cls, kind: str):
        original = cls.__init__
        signature = inspect.signature(original)

        @functools.wraps(original)
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if kind == "autocast":
                device = str(self.device)
                dtype = str(self.fast_dtype).replace("torch.", "")
            else:
                device, dtype = str(self._device), None
            try:  # what the script passed, before any emulation
                bound = signature.bind(self, *args, **kwargs)
                bound.apply_defaults()
                requested = bool(bound.arguments.get("enabled", True))
                asked = bound.arguments.get("device_type" if kind == "autocast" else "device")
            except TypeError:
                requested, asked = True, None
            asked = str(asked) if asked is not None else device
            enabled = bool(self._enabled)
            where = caller()
            entry = precision[kind].setdefault(
                (device, asked, dtype, requested, enabled, where),
                {"device": device, "asked": asked, "dtype": dtype, "requested": requested,
                 "enabled": enabled, "where": where, "count": 0},
            )  # fmt: skip
            entry["count"] += 1

        cls.__init__ = __init__

    recording(autocast, "autocast")
    recording(GradScaler, "scalers")
    original_enter = autocast.__enter__
    steps = set()
    precision["autocast_steps"] = steps

    def __enter__(self):
        if self._enabled:
            steps.add(len(rec.steps))
        return original_enter(self)

    autocast.__enter__ = __enter__


def redirect_imports() -> None:
    """Make a copy of the project import its own files, however the original is reached
    (sys.path edits relative to a symlink, the root on PYTHONPATH, an editable install)."""
    redirect = os.environ.get("AMPMIGRATE_REDIRECT")
    if not redirect:
        return
    import importlib.abc
    import importlib.util

    original, copy = (os.path.realpath(p) for p in redirect.split(os.pathsep))
    # Virtual environments and caches inside the root hold nothing migrated: torch stays torch.
    skip = set(os.environ.get("AMPMIGRATE_REDIRECT_SKIP", "").split(os.pathsep)) - {""}

    def moved(path: str | None) -> str | None:
        if not path or path.startswith(copy + os.sep):
            return None
        real = os.path.realpath(path)
        if real == original or real.startswith(original + os.sep):
            if skip.intersection(real[len(original) :].split(os.sep)):
                return None
            candidate = copy + real[len(original) :]
            return candidate if os.path.exists(candidate) else None
        return None

    sys.path[:] = [moved(p) or p for p in sys.path]

    class Redirect(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            locations = spec.submodule_search_locations
            origin = moved(spec.origin) if spec.has_location else None
            if origin is None:
                return spec
            return importlib.util.spec_from_file_location(
                name,
                origin,
                submodule_search_locations=None
                if locations is None
                else [moved(p) or p for p in locations],
            )

    class Outside(importlib.abc.MetaPathFinder):
        """Last resort: a sys.path entry that leaves the copy (``dirname(__file__)/..`` of a
        script at the copy's top) means the same place next to the original root, as in the
        original run; what is found there is not migrated (verify names it)."""

        def find_spec(self, name, path=None, target=None):
            if path is not None:
                return None
            from importlib.machinery import PathFinder

            entries = []
            for entry in sys.path:
                real = os.path.realpath(entry or ".")
                if real == copy or real.startswith(copy + os.sep):
                    continue
                parent = os.path.dirname(copy)
                above = real == parent or parent.startswith(real.rstrip(os.sep) + os.sep)
                if above or real.startswith(parent + os.sep):  # reached from the copy by ..
                    entries.append(
                        os.path.normpath(os.path.join(original, os.path.relpath(real, copy)))
                    )
            return PathFinder.find_spec(name, entries) if entries else None

    sys.meta_path.insert(0, Redirect())
    sys.meta_path.append(Outside())


def emulate_cuda(torch) -> None:
    """Load emulate.py from beside this file (ampmigrate may not be importable) and install it."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "emulate.py")
    spec = importlib.util.spec_from_file_location("_ampmigrate_emulate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install(torch)


def bytecode_to_the_run() -> None:
    """From here on, bytecode is cached in the run's directory (AMPMIGRATE_PYCACHE), in this
    process and the script's child processes, as the user's settings allow; none is written in
    the user's tree. Until now (interpreter start-up, torch and the harness's imports) none was
    written and the installed bytecode was read: a cache prefix set from the start hides it, so
    each side compiled all of torch from source again (about 2.5x the CPU of importing it)."""
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"] = os.environ["AMPMIGRATE_PYCACHE"]
    if os.environ["AMPMIGRATE_WRITE_BYTECODE"] == "1":
        sys.dont_write_bytecode = False
        del os.environ["PYTHONDONTWRITEBYTECODE"]


def main() -> None:
    script, args = sys.argv[1], sys.argv[2:]
    import torch

    if os.environ.get("AMPMIGRATE_REQUIRE_CUDA") == "1" and not torch.cuda.is_available():
        print("ampmigrate: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        sys.exit(3)

    if os.environ.get("AMPMIGRATE_EMULATE_CUDA") == "1":  # verify --emulate-cuda
        emulate_cuda(torch)
    seed_everything(torch)
    if FP32:
        force_fp32(torch)
    if TRACING:
        recorder = install(torch)
        track_precision(torch, recorder)
        atexit.register(recorder.finish)
    else:
        atexit.register(time_steps_only(torch))
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    bytecode_to_the_run()
    redirect_imports()
    track_sites()
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
