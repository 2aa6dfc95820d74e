"""Convert apex amp loss-scaler state inside a torch checkpoint into GradScaler state.

apex's ``amp.state_dict()`` is ``{'loss_scaler0': {'loss_scale': s, 'unskipped': n}, ...}``;
``GradScaler.state_dict()`` is ``{'scale', 'growth_factor', 'backoff_factor', 'growth_interval',
'_growth_tracker'}``. apex's dynamic scaler is GradScaler's algorithm with factors 2.0/0.5 and a
2000-step window, so ``scale = loss_scale`` and ``_growth_tracker = unskipped`` continue the same
scale sequence (measured in the apex reference, section 5). Projects store the apex state under
keys of their own ('amp', 'amp_state', ...), so it is found by its shape, not by its key.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

APEX_FACTORS = {"growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}


class CheckpointError(Exception):
    pass


def is_apex_state(value: object) -> bool:
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(k, str) and k.startswith("loss_scaler") for k in value)
        and all(
            isinstance(v, dict) and {"loss_scale", "unskipped"} <= set(v) for v in value.values()
        )
    )


def find_paths(
    obj: object, matches: Callable[[object], bool], path: tuple = (), depth: int = 0
) -> Iterator[tuple]:
    """Paths (tuples of keys/indices) of every value inside a loaded checkpoint that ``matches``
    (apex's amp state, an apex optimizer state), not looking inside a match."""
    if matches(obj):
        yield path
        return
    if depth > 6:
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from find_paths(value, matches, (*path, key), depth + 1)
    elif isinstance(obj, list | tuple):
        for index, value in enumerate(obj):
            yield from find_paths(value, matches, (*path, index), depth + 1)


@dataclass
class Conversion:
    path: tuple
    apex: dict
    scaler: dict  # the torch state: GradScaler's, or an optimizer's (kind "optimizer")
    warnings: list[str] = field(default_factory=list)
    kind: str = "amp"


def convert_state(apex: dict, choice: str = "min") -> tuple[dict, list[str]]:
    """GradScaler state for one apex amp state; ``choice`` picks among several loss scalers."""
    scalers = [apex[k] for k in sorted(apex, key=lambda k: int(k[len("loss_scaler") :] or 0))]
    warnings = []
    chosen = scalers[0]
    if len(scalers) > 1:
        if choice == "min":
            chosen = min(scalers, key=lambda s: float(s["loss_scale"]))
        scales = ", ".join(f"{float(s['loss_scale']):g}" for s in scalers)
        warnings.append(
            f"{len(scalers)} loss scalers (num_losses > 1: scales {scales}); one GradScaler "
            f"takes the {'smallest' if choice == 'min' else 'first'} "
            f"({float(chosen['loss_scale']):g})"
        )
    tracker = int(chosen["unskipped"])
    if tracker >= APEX_FACTORS["growth_interval"]:
        warnings.append(
            f"unskipped = {tracker} >= 2000: a static apex loss scale; the GradScaler will scale "
            "dynamically (it backs off and skips steps on overflow), growth tracker set to 0"
        )
        tracker = 0
    state = {"scale": float(chosen["loss_scale"]), **APEX_FACTORS, "_growth_tracker": tracker}
    return state, warnings


def _get(obj, path):
    for part in path:
        obj = obj[part]
    return obj


def _set(obj, path, value):
    parent = _get(obj, path[:-1])
    if isinstance(parent, tuple):
        raise CheckpointError(f"the apex state at {list(path)} sits in a tuple; cannot replace it")
    parent[path[-1]] = value


def load(path: Path, trust: bool):
    import pickle

    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=not trust)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0]
        raise CheckpointError(
            f"{path}: cannot load with weights_only=True ({first}); if you trust the file, "
            "rerun with --trust to unpickle arbitrary objects"
        ) from exc
    except (OSError, RuntimeError, EOFError) as exc:
        raise CheckpointError(f"{path}: cannot load: {str(exc).splitlines()[0]}") from exc


def convert(
    checkpoint, key: str | None, choice: str, store_as: str | None = None
) -> tuple[object, list[Conversion]]:
    """Replace every apex state in ``checkpoint`` (or the one under ``key``); returns the new
    checkpoint (the same object, unless the whole file was an apex state) and what changed.
    ``store_as``: the key the GradScaler state moves to in its mapping (the migrated code
    reads ``checkpoint["scaler"]`` where apex's was ``checkpoint["amp"]``)."""
    from ampmigrate.apex.api import optimstate

    optimizers: list[tuple] = []
    if key is not None:
        path = tuple(key.split("."))
        try:
            target = _get(checkpoint, path)
        except (KeyError, IndexError, TypeError) as exc:
            raise CheckpointError(f"no key {key!r} in the checkpoint") from exc
        if optimstate.is_apex_adam_state(target):
            optimizers, paths = [path], []
        elif not is_apex_state(target):
            raise CheckpointError(
                f"{key!r} holds neither apex amp state (loss_scaler0, ...) nor apex optimizer "
                "state (a param group `step`)"
            )
        else:
            paths = [path]
    else:
        paths = list(find_paths(checkpoint, is_apex_state))
        optimizers = list(find_paths(checkpoint, optimstate.is_apex_adam_state))
        if not paths and not optimizers:
            raise CheckpointError(
                "no apex amp state (loss_scaler0: loss_scale, unskipped) and no apex optimizer "
                "state (FusedAdam's param group `step`) found"
            )
    conversions = []
    for path in optimizers:
        apex = _get(checkpoint, path)
        state, warnings = optimstate.convert(apex)
        if path:
            _set(checkpoint, path, state)
        else:
            checkpoint = state
        conversions.append(Conversion(path, apex, state, warnings, kind="optimizer"))
    if store_as is not None and len(paths) != 1:
        raise CheckpointError(
            f"--store-as needs exactly one apex loss-scaler state, found {len(paths)}"
            + (": choose it with --key" if paths else "")
        )
    for path in paths:
        apex = _get(checkpoint, path)
        state, warnings = convert_state(apex, choice)
        if store_as is not None:
            path = _moved(checkpoint, path, store_as)
        if path:
            _set(checkpoint, path, state)
        else:
            checkpoint = state
        conversions.append(Conversion(path, apex, state, warnings))
    return checkpoint, conversions


def _moved(checkpoint, path: tuple, store_as: str) -> tuple:
    """``path`` with its last key replaced by ``store_as``, the old entry removed."""
    parent = _get(checkpoint, path[:-1]) if path else None
    if not isinstance(parent, dict):
        raise CheckpointError("--store-as needs the apex state under a key of a mapping")
    if store_as in parent and store_as != path[-1]:
        raise CheckpointError(f"--store-as {store_as!r}: the checkpoint already has that key")
    del parent[path[-1]]
    return (*path[:-1], store_as)


def save_atomic(obj, path: Path) -> None:
    import torch

    fd, tmp = tempfile.mkstemp(dir=path.resolve().parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
