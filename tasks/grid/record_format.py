"""How a record lies on disk: compact, read back whole.

Calibration lists go to `calibration-<sha256[:16]>.lists` (shared by the folder's records with the same images),
the per-layer table and method report to `<record name>.<sha256[:16]>.detail`; each named by its content's hash,
so an interrupted rewrite never leaves a record naming the wrong file. `read_record` puts everything back; a missing
or edited side file is an error naming it; a record with everything inline (the format before) reads as it is.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fcpts.core.io import write_text_atomic

LIST_KEYS = ("indices", "files", "image_ids")  # the calibration block's per-image lists
DETAIL_KEYS = ("per_layer", "method_report")  # the per-layer rows and the method's report, in the detail file


def record_text(record: dict) -> str:
    """JSON of a record: one key per line, each row of a list of rows and each list of numbers on one line."""
    return _layout(record, 0) + "\n"


def _one_line(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "))


def _layout(value: Any, depth: int) -> str:
    pad = " " * (depth + 1)
    if isinstance(value, dict) and value and (depth == 0 or len(_one_line(value)) > 100):
        items = [f"{pad}{json.dumps(k)}: {_layout(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(f"{pad}{_one_line(v)}" for v in value) + "\n" + " " * depth + "]"
    return _one_line(value)


def _sha16(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _digest(value: Any) -> str:
    return _sha16(_one_line(value))


def side_files(path: Path) -> list[Path]:
    """The side files the compact record at `path` names (none for a record with everything inline)."""
    raw = json.loads(path.read_text())
    calibration = raw.get("calibration")
    names = [calibration.get("lists")] if isinstance(calibration, dict) else []
    return [path.parent / name for name in [*names, raw.get("detail")] if isinstance(name, str)]


def _replace_keys(block: dict, moved: tuple[str, ...], key: str, value: Any) -> dict:
    """`block` without the `moved` keys, `key: value` standing where the first of them stood."""
    out: dict[str, Any] = {}
    for k, v in block.items():
        if k in moved:
            out.setdefault(key, value)
        else:
            out[k] = v
    return out


def _insert_keys(block: dict, key: str, values: dict) -> dict:
    """`block` with `values` standing where `key` stood (the inverse of _replace_keys)."""
    out: dict[str, Any] = {}
    for k, v in block.items():
        out.update(values if k == key else {k: v})
    return out


def compact(record: dict, path: Path) -> dict:
    """The record as written to `path`: its calibration lists and detail moved to their side files."""
    calibration = record.get("calibration")
    if isinstance(calibration, dict) and any(k in calibration for k in LIST_KEYS):
        lists = {k: calibration[k] for k in LIST_KEYS if k in calibration}
        name = f"calibration-{_digest(lists)}.lists"
        write_text_atomic(path.parent / name, _one_line(lists) + "\n")
        record = {**record, "calibration": _replace_keys(calibration, LIST_KEYS, "lists", name)}
    if any(k in record for k in DETAIL_KEYS):
        detail = {k: v for k, v in record.items() if k in DETAIL_KEYS}  # in the record's order
        name = f"{path.stem}.{_digest(detail)}.detail"
        write_text_atomic(path.parent / name, record_text(detail))
        record = _replace_keys(record, DETAIL_KEYS, "detail", name)
    return record


class RecordError(ValueError):
    """A file in a runs folder that cannot be read as the record it claims to be, named with the fix."""


def _read_side(side: Path) -> dict:
    """A side file's content, checked against the hash its name carries (else a RecordError)."""
    fix = "re-run the record's cell with --force, or restore the file from git"
    try:
        content = json.loads(side.read_text())
    except FileNotFoundError:
        raise RecordError(f"{side} is missing: the record beside it keeps part of itself there; {fix}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{side} is damaged (truncated or empty?: {e}); {fix}") from None
    if not isinstance(content, dict) or not side.name.endswith(f"{_digest(content)}{side.suffix}"):
        raise RecordError(f"{side} does not hash to its name: it was edited; {fix}")
    return content


def expand(record: dict, folder: Path) -> dict:
    """The whole record, its side files read back; a missing, damaged or altered one is a RecordError."""
    calibration = record.get("calibration")
    if isinstance(calibration, dict) and "lists" in calibration:
        lists = _read_side(folder / calibration["lists"])
        record = {**record, "calibration": _insert_keys(calibration, "lists", lists)}
    if isinstance(record.get("detail"), str):
        record = _insert_keys(record, "detail", _read_side(folder / record["detail"]))
    return record


def write_record(path: Path, record: dict) -> Path:
    """Write a record compactly, its side files first; the replaced record's stale detail file goes."""
    try:
        before = [p for p in side_files(path) if p.suffix == ".detail"]
    except (FileNotFoundError, json.JSONDecodeError, AttributeError):
        before = []
    written = write_text_atomic(path, record_text(compact(record, path)))
    for stale in set(before) - set(side_files(path)):
        stale.unlink(missing_ok=True)
    return written


def json_files(root: Path) -> list[Path]:
    """The JSON files under `root` but in its hidden folders (a runs folder's own checkpoints and caches)."""
    return [p for p in sorted(root.rglob("*.json")) if not any(s.startswith(".") for s in p.relative_to(root).parts)]
