"""Files that are never half written (a unique temporary file, fsynced, renamed over the target), and content hashes."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import torch


class WriteFailed(OSError, ValueError):
    """A file could not be written, named with the likely cause; a ValueError too, so a command prints one line."""


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call `write(f)` on a fresh temporary file, fsync it, and rename it to `path`; a failure to write (an OSError,
    or torch.save's RuntimeError) is a WriteFailed naming `path`."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        why = f"{e.strerror or e} (a folder on its path is a file, or read-only?)"
        raise WriteFailed(f"cannot write {path}: {why}") from e
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, (OSError, RuntimeError)) and not isinstance(e, WriteFailed):
            reason = " ".join(str(e).split())[:200]
            raise WriteFailed(f"writing {path} failed ({reason}): disk full?") from e
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text.encode()))


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """JSON with one-space indent and a final newline (the suite's record format)."""
    return write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def read_json_lines(path: str | Path) -> list[Any]:
    """Every row of a JSON-lines file."""
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def save_torch_atomic(obj: Any, path: str | Path) -> Path:
    return atomic_write(path, lambda f: torch.save(obj, f))


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tensors_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """Hash of a state dict's names, dtypes, shapes and bytes: the identity of a model's weights."""
    digest = hashlib.sha256()
    for name, t in state.items():
        t = t.detach().to("cpu").contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        if t.numel():
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
