"""Run records: one JSON file per (task, dataset, model, method, sparsity, profile, seed), written atomically; the
only thing that crosses from running to reporting."""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from fcpts.core.io import file_sha256, write_json_atomic, write_text_atomic
from tasks.grid.paths import REPO_ROOT, RUNS_DIR, repo_relative
from tasks.grid.record_format import RecordError, expand, json_files
from tasks.grid.record_options import earlier_defaults


def sparsity_tag(target: float) -> str:
    """`sp90` for 0.9, `sp90.4` for 0.904: two targets never share a file."""
    percent = round(target * 100, 10)
    return f"sp{int(percent):02d}" if percent == int(percent) else f"sp{percent:.10g}"


def record_path(
    runs_dir: Path, task: str, dataset: str, model: str, method: str, target: float, profile: str, seed: int
) -> Path:
    return runs_dir / task / dataset / model / f"{method}-{sparsity_tag(target)}-{profile}-seed{seed}.json"


def read_record(path: Path) -> dict | None:
    """A finished record, whole, or None when absent or unreadable (then the run is redone)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return expand(data, path.parent) if isinstance(data, dict) and "metrics" in data else None


def all_records(runs_dir: Path = RUNS_DIR) -> list[dict]:
    """Every record under `runs_dir`; a stray JSON with `metrics` there is a RecordError naming it."""
    out = []
    for p in json_files(runs_dir):
        rec = read_record(p)
        if rec is not None:
            lacking = [key for key in ("task", "method", "profile") if key not in rec]  # else a stray file
            if lacking or not isinstance(rec["profile"], dict) or "name" not in rec["profile"]:
                raise RecordError(
                    f"{p} has 'metrics' but is no run record (it lacks {', '.join(lacking) or 'a profile name'}): "
                    f"move it out of {runs_dir}, or restore it from git"
                )
            rec["_path"] = str(p.relative_to(runs_dir))
            out.append(rec)
    return out


# The profiles whose records stand for a cell, most faithful first; variants (`cpu-it400`, `quick`) never do.
PROFILE_PREFERENCE = ("paper", "paper-cpu", "cpu", "fast")


def cell_key(record: dict) -> tuple:
    """(task, dataset, model, method, target sparsity rounded to 4 places)."""
    return (record["task"], record["dataset"], record["model"], record["method"], round(record["target_sparsity"], 4))


def same_cell_runs(records: list[dict]) -> dict[tuple, list[dict]]:
    """cell_key -> every record of the cell under a profile tables show (all seeds, all such profiles)."""
    out: dict[tuple, list[dict]] = {}
    for r in records:
        if r["profile"]["name"] in PROFILE_PREFERENCE:
            out.setdefault(cell_key(r), []).append(r)
    return out


def preferred_records(records: list[dict]) -> dict[tuple, dict]:
    """cell_key -> the record standing for it: the most faithful profile, today's defaults, then seed 0 first."""

    def rank(r: dict) -> tuple[int, bool, int]:
        return PROFILE_PREFERENCE.index(r["profile"]["name"]), bool(earlier_defaults(r)), r.get("seed", 0)

    return {key: min(candidates, key=rank) for key, candidates in same_cell_runs(records).items()}


MANIFEST = RUNS_DIR / "MANIFEST.txt"


def headline(record: dict) -> tuple[str, float]:
    """(metric name, value): top-1 for classification, mAP@0.5 for detection."""
    name = "top1" if "top1" in record["metrics"] else "map50"
    return name, float(record["metrics"][name])


def stored_numbers(record: dict) -> dict[str, float]:
    """Every number a record states about its result (each metric, the achieved sparsity), by a dotted name."""

    def flatten(prefix: str, value) -> dict[str, float]:
        if isinstance(value, dict):
            return {k: v for key, item in value.items() for k, v in flatten(f"{prefix}.{key}", item).items()}
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {prefix: float(value)}
        return {}

    return {"achieved_sparsity": float(record["achieved_sparsity"]), **flatten("metrics", record["metrics"])}


def read_manifest_entries(path: Path = MANIFEST) -> dict[str, dict[str, float]]:
    """Record path (under the runs folder) -> its registered numbers (`value`: the headline)."""
    if not path.is_file():
        return {}
    entries: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            rel, *fields = line.split("\t")
            entries[rel.strip()] = {k: float(v) for k, _, v in (f.partition("=") for f in fields if "=" in f)}
    return entries


def _number(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".")


def update_manifest(runs_dir: Path = RUNS_DIR, path: Path = MANIFEST, refresh: tuple[str, ...] = ()) -> list[str]:
    """Register every record present with its headline and stored numbers; an entry is never removed, a registered
    number changed only for paths in `refresh`."""
    entries = read_manifest_entries(path)
    records = all_records(runs_dir)
    unknown = sorted(set(refresh) - {r["_path"] for r in records})
    if unknown:  # a refresh that matched nothing would leave the old numbers registered without a word
        raise ValueError(
            f"--refresh {' '.join(unknown)}: no record there; name records by their path under "
            f"{repo_relative(runs_dir)}/ (e.g. cifar/cifar10/resnet56/fcpts-sp90-paper-cpu-seed0.json)"
        )
    for r in records:
        if bad := [key for key, value in stored_numbers(r).items() if not math.isfinite(value)]:
            raise ValueError(
                f"{repo_relative(runs_dir / r['_path'])}: {', '.join(bad)}: not a finite number (NaN or Inf); "
                "the record is damaged or its run diverged: restore it from git or re-run its cell with --force"
            )
        now = {"value": headline(r)[1], **stored_numbers(r)}
        kept = {} if r["_path"] in refresh else entries.get(r["_path"], {})
        entries[r["_path"]] = {**now, **kept}
    header = (
        "# Records that were run and committed, with their headline number (value=: top-1 or mAP@0.5) and every\n"
        "# other number they store; tests/results/test_records.py fails when one goes missing or a number moves.\n"
    )
    lines = []
    for rel, numbers in sorted(entries.items()):
        fields = [f"value={numbers['value']:.2f}"] if "value" in numbers else []
        fields += [f"{k}={_number(v)}" for k, v in sorted(numbers.items()) if k != "value"]
        lines.append("\t".join([rel, *fields]))
    write_text_atomic(path, header + "".join(f"{line}\n" for line in lines))
    return sorted(entries)


def checkout_commit() -> str | None:
    """HEAD, with '+dirty' when tracked files outside results/ differ from it; None without a git folder."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


@lru_cache(maxsize=1)
def git_commit() -> str:
    """HEAD (`checkout_commit`), read once per process: the code that runs is the code at start-up. A copy sent
    elsewhere names its commit in $FCPTS_GIT_COMMIT, recorded as that copy's claim beside what its git folder says."""
    claimed = os.environ.get("FCPTS_GIT_COMMIT")
    found = checkout_commit()
    if found is None:
        return f"{claimed} (no git checkout; from $FCPTS_GIT_COMMIT)" if claimed else "unknown"
    if claimed and claimed != found:
        return f"{claimed} (from $FCPTS_GIT_COMMIT; this checkout's git folder says {found})"
    return found


def device_description(device: torch.device | str = "cpu") -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    cpu = first_processor().get("model name") or platform.processor() or "cpu"
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
    record = {
        **record,
        "weights": {"path": repo_relative(weights), "sha256": file_sha256(weights)},
        **provenance(),
        "note": "final model after the last epoch; the test split was only observed, never used to select",
    }
    write_json_atomic(weights.with_suffix(".json"), record)
    return record


# Libraries whose version can move a task's numbers, recorded when installed.
PROVENANCE_PACKAGES = ("timm", "mmdet", "mmcv", "mmengine")


def first_processor(cpuinfo: str | None = None) -> dict[str, str]:
    """The first processor's block of /proc/cpuinfo (or of `cpuinfo`), field by field; empty where there is none."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    block = cpuinfo.split("\n\n", 1)[0]
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in block.splitlines())}


def cpu_identity(cpuinfo: str | None = None) -> str:
    """torch's CPU kernels and the processor's generation (a lent machine may mask its model name)."""
    fields = first_processor(cpuinfo)
    generation = " ".join(f"{k.split()[-1]} {fields[k]}" for k in ("cpu family", "model", "stepping") if k in fields)
    return ", ".join(x for x in (torch.backends.cpu.get_cpu_capability(), generation) if x)


def environment() -> dict[str, str]:
    import torchvision

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cpu": cpu_identity(),
    }
    for name in PROVENANCE_PACKAGES:
        try:
            env[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return env
