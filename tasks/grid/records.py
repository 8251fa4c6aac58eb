"""Run records: one JSON file per (task, dataset, model, method, sparsity, profile, seed).

A record is the only thing that crosses from running to reporting. It is written atomically (temp file
+ rename), so an interrupted grid never leaves a half record, and a finished cell is skipped on resume.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from fcpts.core.io import write_json_atomic, write_text_atomic
from tasks.grid.paths import REPO_ROOT, RUNS_DIR, repo_relative


def sparsity_tag(target: float) -> str:
    """`sp90` for 0.9, `sp90.4` for 0.904: whole percentages keep their short names, any other target
    its exact digits, so two targets never share a file."""
    percent = round(target * 100, 10)
    return f"sp{int(percent):02d}" if percent == int(percent) else f"sp{percent:.10g}"


def record_path(
    runs_dir: Path, task: str, dataset: str, model: str, method: str, target: float, profile: str, seed: int
) -> Path:
    return runs_dir / task / dataset / model / f"{method}-{sparsity_tag(target)}-{profile}-seed{seed}.json"


def read_record(path: Path) -> dict | None:
    """A finished record, or None when absent or unreadable (then the run is redone)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and "metrics" in data else None


def all_records(runs_dir: Path = RUNS_DIR) -> list[dict]:
    out = []
    for p in sorted(runs_dir.rglob("*.json")):
        if any(part.startswith(".") for part in p.relative_to(runs_dir).parts):
            continue  # checkpoints and caches
        rec = read_record(p)
        if rec is not None:
            rec["_path"] = str(p.relative_to(runs_dir))
            out.append(rec)
    return out


# The record that stands for a cell when several profiles ran it: the most faithful first. Each task uses a
# subset (cifar: paper, paper-cpu, fast; imagenet, voc: paper, cpu); variants such as `cpu-it400`,
# `cpu-pot100` or `quick` never stand for a cell. Tables and figures all choose through preferred_records.
PROFILE_PREFERENCE = ("paper", "paper-cpu", "cpu", "fast")


def cell_key(record: dict) -> tuple:
    """(task, dataset, model, method, target sparsity rounded to 4 places)."""
    return (record["task"], record["dataset"], record["model"], record["method"], round(record["target_sparsity"], 4))


def preferred_records(records: list[dict]) -> dict[tuple, dict]:
    """cell_key -> the record of the most faithful profile in PROFILE_PREFERENCE that ran the cell."""
    out: dict[tuple, dict] = {}
    for r in records:
        if r["profile"]["name"] not in PROFILE_PREFERENCE:
            continue
        key = cell_key(r)
        if key not in out or (
            PROFILE_PREFERENCE.index(r["profile"]["name"]) < PROFILE_PREFERENCE.index(out[key]["profile"]["name"])
        ):
            out[key] = r
    return out


MANIFEST = RUNS_DIR / "MANIFEST.txt"


def read_manifest(path: Path = MANIFEST) -> list[str]:
    """Record paths (relative to the runs folder) that were run before and must stay present."""
    if not path.is_file():
        return []
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


def update_manifest(runs_dir: Path = RUNS_DIR, path: Path = MANIFEST) -> list[str]:
    """Add every record now present; never removes one (dropping a cell is a deliberate manual edit)."""
    entries = sorted(set(read_manifest(path)) | {r["_path"] for r in all_records(runs_dir)})
    header = "# Records that were run and committed; tests/test_records.py fails when one goes missing.\n"
    write_text_atomic(path, header + "".join(f"{e}\n" for e in entries))
    return entries


@lru_cache(maxsize=1)
def git_commit() -> str:
    """HEAD's hash, with '+dirty' when tracked files differ from it, read once per process: the code
    that runs is the code at start-up, whatever is committed while a long grid runs."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT, capture_output=True, text=True
        ).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def device_description(device: torch.device | str = "cpu") -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"cpu: {cpu}, {torch.get_num_threads()} threads"


def command_line() -> str:
    """The command as typed: `python -m tasks.cifar ...` (module name from __main__'s spec)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    prog = ["-m", spec.name.removesuffix(".__main__")] if spec is not None and spec.name else [sys.argv[0]]
    return " ".join(["python", *prog, *sys.argv[1:]])


def provenance() -> dict[str, Any]:
    """What every record says about where it came from: code, command, environment, time."""
    return {
        "git_commit": git_commit(),
        "command": command_line(),
        "environment": environment(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_training_record(weights: Path, record: dict) -> dict:
    """The record beside a dense model the suite trained itself (weights hash and provenance added)."""
    from fcpts.core.io import file_sha256

    record = {
        **record,
        "weights": {"path": repo_relative(weights), "sha256": file_sha256(weights)},
        **provenance(),
        "note": "final model after the last epoch; the test split was only observed, never used to select",
    }
    write_json_atomic(weights.with_suffix(".json"), record)
    return record


def environment() -> dict[str, str]:
    import torchvision

    return {"python": platform.python_version(), "torch": torch.__version__, "torchvision": torchvision.__version__}
