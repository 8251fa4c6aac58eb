"""How a record lies on disk: compact, and read back as the whole record.

A record's calibration block used to hold its image lists inline (1,024 CIFAR indices one per line, or 1,000
ImageNet file names: most of a record's bytes). They now go to a side file beside the record, named by the hash
of its content, `calibration-<sha256[:16]>.lists` (JSON; not `*.json`, so no globbing for records meets it),
shared by every record of the folder that used the same images; the record keeps the lists' hash (`indices_sha256`,
unchanged) and names the side file under `lists`. Rows of the per-layer table and of the step history stand
one per line. `read_record` puts the lists back, so a reader sees the same record either way, and records written
before (lists inline) read as they are.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fcpts.core.io import write_text_atomic

LIST_KEYS = ("indices", "files", "image_ids")  # the calibration block's per-image lists


def record_text(record: dict) -> str:
    """JSON of a record: one key per line, nested blocks indented, each row of a list of rows (per-layer,
    history) and each list of numbers on one line."""
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


def lists_name(lists: dict) -> str:
    return f"calibration-{hashlib.sha256(_one_line(lists).encode()).hexdigest()[:16]}.lists"


def compact(record: dict, folder: Path) -> dict:
    """The record as it is written into `folder`: its calibration lists moved to their side file there (written
    when absent; same content, same name)."""
    calibration = record.get("calibration")
    if not isinstance(calibration, dict) or not any(k in calibration for k in LIST_KEYS):
        return record
    lists = {k: calibration[k] for k in LIST_KEYS if k in calibration}
    name = lists_name(lists)
    side = folder / name
    if not side.is_file():
        write_text_atomic(side, _one_line(lists) + "\n")
    kept: dict[str, Any] = {}
    for k, v in calibration.items():  # `lists` where the first list stood
        if k in LIST_KEYS:
            kept.setdefault("lists", name)
        else:
            kept[k] = v
    return {**record, "calibration": kept}


def expand(record: dict, folder: Path) -> dict:
    """The whole record: its calibration lists read back from the side file it names (a record with its lists
    inline is returned as it is). A missing or altered side file is an error naming it, never a silent gap."""
    calibration = record.get("calibration")
    if not isinstance(calibration, dict) or "lists" not in calibration:
        return record
    side = folder / calibration["lists"]
    try:
        lists = json.loads(side.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{side} is missing: the record beside it keeps its calibration lists there (restore it from git)"
        ) from None
    if lists_name(lists) != side.name:
        raise ValueError(f"{side} does not hash to its name: it was edited; restore it from git")
    whole: dict[str, Any] = {}
    for k, v in calibration.items():
        whole.update(lists if k == "lists" else {k: v})
    return {**record, "calibration": whole}


def write_record(path: Path, record: dict) -> Path:
    """Write a record compactly (side file first, so a record never names a side file that is not there)."""
    return write_text_atomic(path, record_text(compact(record, path.parent)))


def rewrite_compact(root: Path) -> tuple[int, int]:
    """Rewrite every record under `root` compactly, checking each is the same record read back (every key and
    value, the calibration lists and their recorded hash); a record that is not is left as it was and stops the
    rewrite. Returns (records rewritten, bytes before - bytes after, side files included)."""
    count = saved = 0
    for path in sorted(root.rglob("*.json")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        before_text = path.read_text()
        before = json.loads(before_text)
        if not isinstance(before, dict) or "metrics" not in before:
            continue
        before = expand(before, path.parent)  # a record already compact is rewritten as the same record
        sides_before = {p.name for p in path.parent.glob("calibration-*.lists")}
        write_record(path, before)
        after = expand(json.loads(path.read_text()), path.parent)  # as records.read_record reads it
        calibration = (after or {}).get("calibration") or {}
        same_hash = (
            "indices" not in calibration
            or calibration.get("indices_sha256")
            == (hashlib.sha256(",".join(map(str, calibration["indices"])).encode()).hexdigest()[:16])
        )
        if after != before or not same_hash:
            write_text_atomic(path, before_text)
            raise ValueError(f"{path}: the compact record does not read back as the record; left as it was")
        new_sides = {p.name for p in path.parent.glob("calibration-*.lists")} - sides_before
        saved += len(before_text) - len(path.read_text()) - sum((path.parent / n).stat().st_size for n in new_sides)
        count += 1
    return count, saved


if __name__ == "__main__":
    import sys

    for folder in sys.argv[1:] or ["results/runs", "results/regression"]:
        n, saved = rewrite_compact(Path(folder))
        print(f"{folder}: {n} records rewritten compactly, {saved / 1e6:.2f} MB saved")
