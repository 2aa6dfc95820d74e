from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ampmigrate.catalog import all_rules
from ampmigrate.engine import Settings
from ampmigrate.engine.migrate import migrate_source

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


def fix_source(
    source: str | bytes,
    unsafe: bool = False,
    select: tuple[str, ...] = (),
    target_keras: int = 3,
    path: str | os.PathLike = "",
):
    """(new source, remaining diagnostics, fixed diagnostics) through the real engine (``path``:
    where the file would be, for the modules it imports from disk)."""
    rules = tuple(r for c, r in all_rules().items() if not select or c in select)
    data = source.encode() if isinstance(source, str) else source
    settings = Settings(rules=rules, fix=True, unsafe_fixes=unsafe, target_keras=target_keras)
    new, remaining, fixed = migrate_source(data, settings, str(path))
    return (new.decode() if isinstance(source, str) else new), remaining, fixed


def check_source(source: str, target_keras: int = 3):
    rules = tuple(all_rules().values())
    settings = Settings(rules=rules, target_keras=target_keras)
    _, remaining, _ = migrate_source(source.encode(), settings)
    return remaining


# apex O1 whose level comes from a flag without `choices` (open: not provably O1), the shape
# the setting apex-opt-level speaks for
OPEN_LEVEL = """\
import argparse

from apex import amp


def train(model, optimizer, x):
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16_opt_level", default="O1")
    args = parser.parse_args()
    model, optimizer = amp.initialize(model, optimizer, opt_level=args.fp16_opt_level)
    loss = model(x).sum()
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
"""


class CLI:
    """Runs the installed console script the way a user or CI does."""

    def __call__(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
        return subprocess.run(
            [sys.executable, "-m", "ampmigrate", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )


@pytest.fixture
def cli() -> CLI:
    return CLI()


# An O0 stand-in for apex (the tests that run the original apex scripts on CPU).
STUB = '''
"""apex.amp with enabled=False semantics (O0): what the original scripts do without a GPU."""
import contextlib


def initialize(models, optimizers=None, enabled=True, opt_level="O1", **kwargs):
    return (models, optimizers) if optimizers is not None else models


@contextlib.contextmanager
def scale_loss(loss, optimizers, **kwargs):
    yield loss


def master_params(optimizer):
    for group in optimizer.param_groups:
        yield from group["params"]


class _LossScaler:
    _loss_scale = 1.0

    def loss_scale(self):
        return self._loss_scale


class _State:
    loss_scalers = [_LossScaler()]


_amp_state = _State()


def state_dict():
    return {"loss_scaler0": {"loss_scale": 1.0, "unskipped": 0}}


def load_state_dict(state):
    pass


def register_half_function(module, name):
    getattr(module, name)  # apex checks the attribute; O0 casts nothing


def float_function(fn):
    return fn  # O0 casts nothing


def init(enabled=True, **kwargs):
    return None  # the old handle API: O0 casts nothing


@contextlib.contextmanager
def disable_casts():
    yield  # O0 casts nothing
'''


@pytest.fixture
def stub(tmp_path) -> Path:
    package = tmp_path / "stub" / "apex"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import amp\n")
    (package / "amp.py").write_text(textwrap.dedent(STUB))
    return tmp_path / "stub"
