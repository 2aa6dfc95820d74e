"""apex optimizer state -> torch optimizer state, for ``ampmigrate convert-checkpoint``.

apex's FusedAdam/FusedLAMB-style optimizers count ``step`` once per param group
(``param_groups[i]["step"]``) and keep per parameter only the moments (``exp_avg``,
``exp_avg_sq``); torch's Adam/AdamW keep ``step`` per parameter (``state[p]["step"]``, a float
tensor) and raise ``KeyError: 'step'`` on apex's layout. The conversion gives every parameter of
a group that has state the group's count (what apex's bias correction used) and drops the
apex-only group keys. FusedSGD's state (``momentum_buffer``) is torch SGD's already.
"""

from __future__ import annotations

_MOMENTS = frozenset({"exp_avg", "exp_avg_sq"})
_APEX_ONLY = ("step", "bias_correction")


def is_apex_adam_state(value: object) -> bool:
    """An optimizer ``state_dict`` in apex FusedAdam's layout (a group ``step``, no
    per-parameter one)."""
    if not isinstance(value, dict) or set(value) != {"state", "param_groups"}:
        return False
    state, groups = value["state"], value["param_groups"]
    if not isinstance(state, dict) or not isinstance(groups, list) or not groups:
        return False
    if not all(isinstance(g, dict) and "params" in g for g in groups):
        return False
    if not any(isinstance(g.get("step"), int) for g in groups):
        return False
    entries = [s for s in state.values() if isinstance(s, dict)]
    return bool(entries) and all(set(s) >= _MOMENTS and "step" not in s for s in entries)


def convert(state_dict: dict) -> tuple[dict, list[str]]:
    """The torch Adam/AdamW ``state_dict`` for apex's, and warnings about what has no
    torch counterpart."""
    import torch

    warnings = []
    state = {index: dict(entry) for index, entry in state_dict["state"].items()}
    groups = []
    for number, group in enumerate(state_dict["param_groups"]):
        step = group.get("step", 0)
        for index in group["params"]:
            if index in state:
                state[index]["step"] = torch.tensor(float(step))
        if group.get("bias_correction", True) is False:
            warnings.append(
                f"param group {number}: bias_correction=False has no torch counterpart; torch's "
                "Adam/AdamW will correct the bias from here on"
            )
        groups.append({k: v for k, v in group.items() if k not in _APEX_ONLY})
    return {"state": state, "param_groups": groups}, warnings
