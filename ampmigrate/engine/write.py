"""The write stage: read and write source files without losing a byte."""

from __future__ import annotations

import os
from pathlib import Path


def read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` via a temporary file in the same directory and a rename,
    so a crash or a full disk never leaves a half-written file; the mode bits are kept."""
    import tempfile  # only when writing: it costs `check` start-up time

    target = path.resolve()
    mode = target.stat().st_mode
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
