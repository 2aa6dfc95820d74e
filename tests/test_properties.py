"""Property-based: deprecated AMP uses embedded in generated modules and contexts.

For every generated module: fix never crashes, the output compiles, a second fix changes and
reports nothing fixable, and no line changes except the findings' lines and import lines.
"""

from __future__ import annotations

import difflib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import check_source, fix_source

IMPORTS = {
    "torch": ("import torch", "torch.cuda.amp", "torch.cpu.amp", "torch"),
    "th": ("import torch as th", "th.cuda.amp", "th.cpu.amp", "th"),
    "module_as": ("import torch.cuda.amp as A\nimport torch.cpu.amp as C", "A", "C", None),
    "from_cuda": (
        "from torch.cuda import amp\nfrom torch.cpu import amp as camp",
        "amp",
        "camp",
        None,
    ),
}
USES = [
    "{cuda}.autocast()",
    "{cuda}.autocast(True, None, False)",
    "{cuda}.autocast(enabled=flag)",
    "{cpu}.autocast(dtype=None)",
    "{cuda}.GradScaler()",
    "{cpu}.GradScaler(1024.0, enabled=flag)",
    "{cuda}.GradScaler(**options)",
    "{cuda}.autocast(*args)",
    "{cuda}.custom_fwd(fn)",
    "isinstance(obj, {cuda}.GradScaler)",
    "{torch}.get_autocast_gpu_dtype()",
    "{torch}.set_autocast_cpu_enabled(flag)",
]
FILLER = [
    "x = 1",
    "s = 'torch.cuda.amp.autocast is mentioned in a string'",
    "# torch.cuda.amp.GradScaler() in a comment",
    "def helper(a, b=2):\n    return a + b",
    "values = [i * 2 for i in range(3)]",
    "class Plain:\n    attr = None",
]
CONTEXTS = [
    "{use}",
    "value = {use}",
    "def f():\n    return {use}",
    "class K:\n    def m(self):\n        y = {use}\n        return y",
    "if flag:\n    z = {use}\nelse:\n    z = None",
    "try:\n    w = {use}\nexcept ValueError:\n    pass",
    "with {use} if False else open(__file__):\n    pass",
    "result = [({use}) for _ in range(1)]",
    "fn2 = lambda: {use}",
    "q = {use}  # noqa",
]


@st.composite
def modules(draw):
    form = draw(st.sampled_from(sorted(IMPORTS)))
    header, cuda, cpu, torch_name = IMPORTS[form]
    names = {"cuda": cuda, "cpu": cpu, "torch": torch_name or "torch"}
    uses = [u for u in USES if torch_name or "{torch}" not in u]
    body = []
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            body.append(draw(st.sampled_from(FILLER)))
        use = draw(st.sampled_from(uses)).format(**names)
        body.append(draw(st.sampled_from(CONTEXTS)).format(use=use))
    extra = "import torch\n" if torch_name is None and "{torch}" in "".join(body) else ""
    return f"{extra}{header}\n\n" + "\n\n".join(body) + "\n"


TF_IMPORTS = {
    "tf": ("import tensorflow as tf", "tf.keras.mixed_precision.experimental"),
    "keras": ("from tensorflow import keras", "keras.mixed_precision.experimental"),
    "module": ("from tensorflow.keras.mixed_precision import experimental as mpe", "mpe"),
    "keras3": ("import keras", "keras.mixed_precision.experimental"),
}
TF_USES = [
    "{mp}.set_policy('mixed_float16')",
    "{mp}.global_policy()",
    "{mp}.Policy('mixed_float16', loss_scale='dynamic')",
    "{mp}.Policy('mixed_float16', loss_scale=n)",
    "{mp}.LossScaleOptimizer(opt, 'dynamic')",
    "{mp}.LossScaleOptimizer(opt, loss_scale=128)",
    "{mp}.LossScaleOptimizer(SGD(0.1), 2**10)",
    "{mp}.get_layer_policy(layer)",
    "isinstance(o, {mp}.LossScaleOptimizer)",
]


@st.composite
def tf_modules(draw):
    header, mp = TF_IMPORTS[draw(st.sampled_from(sorted(TF_IMPORTS)))]
    body = []
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            body.append(draw(st.sampled_from(FILLER)))
        use = draw(st.sampled_from(TF_USES)).format(mp=mp)
        body.append(draw(st.sampled_from(CONTEXTS)).format(use=use))
    return f"{header}\n\n" + "\n\n".join(body) + "\n"


def _changed_original_lines(before: str, after: str) -> set[int]:
    old, new = before.splitlines(), after.splitlines()
    changed = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(a=old, b=new).get_opcodes():
        if tag in ("replace", "delete"):
            changed.update(range(i1 + 1, i2 + 1))
    return changed


@settings(max_examples=160, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(modules(), tf_modules()))
def test_fix_invariants(source):
    compile(source, "<generated>", "exec")
    findings = check_source(source)
    out, _remaining, _fixed = fix_source(source, unsafe=True)
    compile(out, "<fixed>", "exec")
    again, remaining2, fixed2 = fix_source(out, unsafe=True)
    assert again == out and fixed2 == []
    assert all(d.fix is None for d in remaining2)
    allowed = {line for d in findings for line in range(d.line, d.end_line + 1)}
    allowed |= {i for i, text in enumerate(source.splitlines(), 1) if "import " in text}
    assert _changed_original_lines(source, out) <= allowed
    added = [
        line for line in difflib.ndiff(source.splitlines(), out.splitlines())
        if line.startswith("+ ")
    ]  # fmt: skip
    assert len(added) <= len(allowed) + 2  # rewritten lines plus at most two new imports
    suppressed = [line for line in source.splitlines() if "# noqa" in line]
    assert all(line in out.splitlines() for line in suppressed)  # never rewritten
    if not suppressed:
        assert findings, "a generated module without a finding: the generator is broken"
