"""`ampmigrate convert-checkpoint`: apex amp loss-scaler state -> GradScaler state."""

from __future__ import annotations

import collections
import fractions

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def apex_state(*scalers: tuple[float, int]) -> collections.OrderedDict:
    return collections.OrderedDict(
        (f"loss_scaler{i}", {"loss_scale": s, "unskipped": n}) for i, (s, n) in enumerate(scalers)
    )


def apex_checkpoint(path, amp):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    data = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "amp": amp,
        "epoch": 3,
    }
    torch.save(data, path)
    return data


def apex_scales(scale: float, unskipped: int, overflows: list[bool]) -> list[float]:
    """The test oracle: apex's dynamic LossScaler.update_scale, as the apex reference gives it."""
    out = []
    for overflow in overflows:
        if overflow:
            scale, unskipped = scale / 2.0, 0
        else:
            unskipped += 1
        if unskipped == 2000:
            scale, unskipped = min(2.0**24, scale * 2.0), 0
        out.append(scale)
    return out


def grad_scaler_scales(state: dict, overflows: list[bool]) -> list[float]:
    """A real GradScaler on CPU, loaded from the converted state, driven by the same overflows."""
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.0)
    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict(state)
    out = []
    for overflow in overflows:
        optimizer.zero_grad()
        scaler.scale(weight.sum()).backward()
        if overflow:
            weight.grad[0] = float("inf")
        scaler.step(optimizer)
        scaler.update()
        out.append(scaler.get_scale())
    return out


def test_convert_keeps_everything_else_and_continues_the_same_scale_sequence(cli, tmp_path):
    source, target = tmp_path / "apex.pt", tmp_path / "native.pt"
    original = apex_checkpoint(source, apex_state((32768.0, 1995)))
    before = source.read_bytes()
    result = cli("convert-checkpoint", str(source), str(target))
    assert result.returncode == 0, result.stderr
    assert "amp: apex {'loss_scaler0': {'loss_scale': 32768.0, 'unskipped': 1995}}" in result.stdout
    assert source.read_bytes() == before  # the input is never touched
    converted = torch.load(target, weights_only=True)
    assert converted["amp"] == {
        "scale": 32768.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
        "_growth_tracker": 1995,
    }  # fmt: skip
    assert converted["epoch"] == 3
    for name, tensor in original["model"].items():
        assert torch.equal(converted["model"][name], tensor)
    assert converted["optimizer"]["param_groups"] == original["optimizer"]["param_groups"]
    overflows = [False] * 11 + [True, True] + [False] * 30  # the tracker hits 2000 at step 5
    expected = apex_scales(32768.0, 1995, overflows)
    assert grad_scaler_scales(converted["amp"], overflows) == expected
    assert expected[4] == 65536.0 and min(expected) < 32768.0  # growth and backoff both happened


def test_store_as_moves_the_state_to_the_key_the_migrated_code_reads(cli, tmp_path):
    """DFU (the 47th review): the rewrite reads `checkpoint["scaler"]`, the note said to store
    the converted state there, and `convert-checkpoint` kept it under apex's `amp`: the
    resume, inside the project's `except KeyError`, silently skipped. `--store-as scaler`
    moves it; a key already there, or no single apex state, is an error that writes nothing."""
    source, target = tmp_path / "apex.pt", tmp_path / "native.pt"
    apex_checkpoint(source, apex_state((1024.0, 7)))
    result = cli("convert-checkpoint", "--store-as", "scaler", str(source), str(target))
    assert result.returncode == 0, result.stderr
    assert "scaler: apex {'loss_scaler0'" in result.stdout
    converted = torch.load(target, weights_only=True)
    assert "amp" not in converted and converted["scaler"]["scale"] == 1024.0
    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict(converted["scaler"])
    assert scaler.get_scale() == 1024.0
    clash = cli("convert-checkpoint", "--store-as", "epoch", str(source), str(tmp_path / "x.pt"))
    assert clash.returncode == 2 and "already has that key" in clash.stderr
    assert not (tmp_path / "x.pt").exists()
    torch.save({"a": apex_state((8.0, 1)), "b": apex_state((4.0, 1))}, source)
    two = cli("convert-checkpoint", "--store-as", "scaler", str(source), str(tmp_path / "y.pt"))
    assert two.returncode == 2 and "found 2: choose it with --key" in two.stderr
    one = cli("convert-checkpoint", "--key", "b", "--store-as", "scaler", str(source),
              str(tmp_path / "y.pt"))  # fmt: skip
    assert one.returncode == 0
    assert set(torch.load(tmp_path / "y.pt", weights_only=True)) == {"a", "scaler"}
    empty = cli("convert-checkpoint", "--store-as", "", str(source), str(tmp_path / "z.pt"))
    assert empty.returncode == 2 and "--store-as needs a key name" in empty.stderr  # (49a)


def test_several_loss_scalers_take_the_smallest_and_warn(cli, tmp_path):
    source = tmp_path / "apex.pt"
    torch.save({"amp_state": apex_state((65536.0, 3), (8192.0, 10))}, source)
    result = cli("convert-checkpoint", str(source), str(tmp_path / "out.pt"))
    assert result.returncode == 0
    assert "2 loss scalers (num_losses > 1: scales 65536, 8192)" in result.stderr
    state = torch.load(tmp_path / "out.pt", weights_only=True)["amp_state"]
    assert state["scale"] == 8192.0 and state["_growth_tracker"] == 10
    first = cli("convert-checkpoint", "--loss-scaler", "first", str(source), str(tmp_path / "f.pt"))
    assert first.returncode == 0
    assert torch.load(tmp_path / "f.pt", weights_only=True)["amp_state"]["scale"] == 65536.0


def test_static_scale_is_flagged(cli, tmp_path):
    source = tmp_path / "apex.pt"
    torch.save(apex_state((128.0, 5000)), source)  # the whole file is amp.state_dict()
    result = cli("convert-checkpoint", str(source), str(tmp_path / "out.pt"))
    assert result.returncode == 0 and "a static apex loss scale" in result.stderr
    assert torch.load(tmp_path / "out.pt", weights_only=True)["_growth_tracker"] == 0


def test_key_option_and_error_paths(cli, tmp_path):
    source = tmp_path / "apex.pt"
    apex_checkpoint(source, apex_state((1024.0, 0)))
    assert (
        cli("convert-checkpoint", "--key", "amp", str(source), str(tmp_path / "o.pt")).returncode
        == 0
    )
    wrong = cli("convert-checkpoint", "--key", "epoch", str(source), str(tmp_path / "o.pt"))
    assert wrong.returncode == 2 and "'epoch' holds neither apex amp state" in wrong.stderr
    plain = tmp_path / "plain.pt"
    torch.save({"model": {}}, plain)
    none = cli("convert-checkpoint", str(plain), str(tmp_path / "o.pt"))
    assert none.returncode == 2 and "no apex amp state" in none.stderr
    same = cli("convert-checkpoint", str(source), str(source))
    assert same.returncode == 2 and "--in-place" in same.stderr
    missing = cli("convert-checkpoint", str(tmp_path / "nope.pt"), str(tmp_path / "o.pt"))
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_in_place(cli, tmp_path):
    source = tmp_path / "apex.pt"
    apex_checkpoint(source, apex_state((2048.0, 1)))
    assert cli("convert-checkpoint", "--in-place", str(source)).returncode == 0
    assert torch.load(source, weights_only=True)["amp"]["scale"] == 2048.0


def test_untrusted_pickle_needs_trust(cli, tmp_path):
    source = tmp_path / "apex.pt"
    torch.save({"amp": apex_state((4096.0, 2)), "extra": fractions.Fraction(1, 3)}, source)
    refused = cli("convert-checkpoint", str(source), str(tmp_path / "o.pt"))
    assert refused.returncode == 2
    assert "cannot load with weights_only=True" in refused.stderr and "--trust" in refused.stderr
    trusted = cli("convert-checkpoint", "--trust", str(source), str(tmp_path / "o.pt"))
    assert trusted.returncode == 0
