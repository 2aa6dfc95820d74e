"""The apex O1 rewrites of tests/test_apex.py, run: each migrated fixture trains on CPU exactly
like its original against an O0 stand-in for apex, and in float16 where "cuda" becomes "cpu".
A file of its own so that pytest-xdist (``--dist loadfile``) runs it beside the rest of
test_apex.py: these runs are most of that file's time."""

from __future__ import annotations

import pytest
from test_apex import APEX, CASES, REWRITTEN, _runs


@pytest.mark.torch
@pytest.mark.parametrize("name", REWRITTEN)
def test_migrated_runs_like_the_original_and_really_in_float16(name, stub, tmp_path):
    """Without a GPU, CUDA autocast and GradScaler switch themselves off: the migrated file
    prints exactly what the original prints against apex with O0 semantics, with mixed
    precision off and on. With "cuda" replaced by "cpu", autocast and GradScaler really run
    (float16 on CPU): a region that misses the forward shows as a float32 forward, an unscale_
    that runs twice per update() raises."""
    pytest.importorskip("torch")
    specs = []
    for args in CASES[name]:
        specs += [(APEX / f"{name}.py", args, stub, False)]
        specs += [(APEX / f"{name}.fixed.py", args, None, False)]
    cpu = tmp_path / f"{name}_cpu.py"
    cpu.write_text((APEX / f"{name}.fixed.py").read_text().replace('"cuda"', '"cpu"'))
    specs.append((cpu, CASES[name][-1], None, True))
    results = _runs(specs, tmp_path)
    for i, args in enumerate(CASES[name]):
        (code, original, error), (migrated_code, migrated, migrated_error) = results[
            2 * i : 2 * i + 2
        ]
        assert code == 0, error
        assert "loss" in original
        assert migrated_code == 0, migrated_error
        assert migrated == original, f"args {args}"
    code, out, error = results[-1]
    assert code == 0, error
    assert "forward dtypes: ['torch.float16']" in out, out


@pytest.mark.torch
def test_a_static_loss_scale_given_to_the_migration_stops_it(stub, tmp_path):
    """`loss_scale=args.loss_scale`: the original trains with `--loss-scale 128` (apex's static
    scale); the migration, whose GradScaler cannot keep one, stops where it is made and names
    the value, instead of training with a dynamic scale."""
    script = APEX / "loss_scale_flag.py"
    flags = ["--amp", "--loss-scale", "128"]
    specs = [(script, flags, stub, False), (APEX / "loss_scale_flag.fixed.py", flags, None, False)]
    (code, out, _), (migrated_code, _, error) = _runs(specs, tmp_path)
    assert code == 0 and "batch 5 loss" in out
    assert migrated_code == 1
    assert "ValueError: static loss scale '128': GradScaler is always dynamic" in error
