"""Text edits of the rename rules: only the callee and the changed arguments are touched."""

from __future__ import annotations

import pytest

from conftest import fix_source

CASES = {
    "parenthesised arguments": (
        "torch.cuda.amp.autocast((True), torch.bfloat16)",
        'torch.amp.autocast("cuda", dtype=torch.bfloat16, enabled=(True))',
    ),
    "commas and brackets inside an argument": (
        'torch.cuda.amp.GradScaler(init_scale=float("2,0".split(",")[0]), enabled=a[1, 2])',
        'torch.amp.GradScaler("cuda", init_scale=float("2,0".split(",")[0]), enabled=a[1, 2])',
    ),
    "a splat keeps its place": (
        "torch.cuda.amp.autocast(**kw, enabled=True)",
        'torch.amp.autocast("cuda", **kw, enabled=True)',
    ),
    "a call among the positionals keeps the evaluation order": (
        "torch.cuda.amp.autocast(flag(), torch.float16)",
        'torch.amp.autocast("cuda", enabled=flag(), dtype=torch.float16)',
    ),
    "a trailing comma stays": (
        "torch.cuda.amp.autocast(enabled=False,)",
        'torch.amp.autocast("cuda", enabled=False,)',
    ),
    "a parenthesised callee": (
        "(torch.cuda.amp.autocast)()",
        '(torch.amp.autocast)("cuda", dtype=torch.float16)',
    ),
    "partial: the device follows the callee": (
        "functools.partial(torch.cuda.amp.autocast, enabled=True)",
        'functools.partial(torch.amp.autocast, "cuda", dtype=torch.float16, enabled=True)',
    ),
    "custom_fwd: device_type before cast_inputs": (
        "torch.cuda.amp.custom_fwd(fwd, cast_inputs=torch.float32)",
        'torch.amp.custom_fwd(fwd, device_type="cuda", cast_inputs=torch.float32)',
    ),
}


@pytest.mark.parametrize(("before", "after"), CASES.values(), ids=CASES.keys())
def test_rewrite(before: str, after: str) -> None:
    head = "import functools\nimport torch\n\nx = "
    out, remaining, fixed = fix_source(head + before + "\n", unsafe=True)
    assert out == head + after + "\n"
    assert fixed and not [d for d in remaining if d.fix]


def test_star_args_are_refused() -> None:
    source = "import torch\n\nx = torch.cuda.amp.autocast(*args)\n"
    out, remaining, _ = fix_source(source, unsafe=True)
    assert out == source
    assert "`*args` splat cannot be mapped" in remaining[0].message
