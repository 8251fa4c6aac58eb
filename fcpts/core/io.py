"""Files that are never half written: the one atomic writer of the suite, and content hashes.

A write goes to a unique temporary file in the target's folder, is flushed to disk, then renamed over the
target. An interrupted run leaves either the old file or the new one, and two processes writing the same
path never share a temporary name.
"""

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
    """A file could not be written (a full disk, a folder on its path that is a file, no permission), named with
    the likely cause: torch's own message for a full disk ("unexpected pos") names neither. A ValueError too, so a
    command prints it as its one-line error."""


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


def append_json_line(path: str | Path, row: Any) -> Path:
    """One more line of a JSON-lines file (a benchmark's rows), through the atomic writer: an interrupted run
    leaves the file with the line or without it, never half of it for the next resume to choke on."""
    path = Path(path)
    before = path.read_bytes() if path.exists() else b""
    return atomic_write(path, lambda f: f.write(before + (json.dumps(row) + "\n").encode()))


def read_json_lines(path: str | Path, missing_ok: bool = False) -> list[Any]:
    """Every row of a JSON-lines file; with `missing_ok`, none for a file not written yet (a run's first row)."""
    path = Path(path)
    if missing_ok and not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


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
