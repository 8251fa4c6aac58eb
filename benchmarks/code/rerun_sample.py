"""Benchmark: one committed record per registered method re-run with today's code, compared by mask hash and numbers;
the record picked is the cheapest that can show the most (with a mask hash, a CIFAR/ImageNet cell, the least time)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import torch

from benchmarks import parser
from fcpts.core.io import write_json_atomic, write_text_atomic
from fcpts.methods.registry import list_methods
from tasks.grid.paths import RESULTS_DIR, RUNS_DIR, DataNotFoundError, repo_relative, resolve_data_root
from tasks.grid.records import all_records, command_line, cpu_identity, device_description, git_commit, headline
from tasks.grid.rerun import get_task, rerun_record
from tasks.grid.runner import Where

RECORD_DIRS = (RUNS_DIR, RESULTS_DIR / "regression")
LEFT_OUT = ("spread",)  # under results/regression: the references re-run on other processors
STAND_IN_TASKS = ("cifar", "imagenet")  # preferred: their data is here and their cells are cheap


def committed_records(dirs: Iterable[Path] = RECORD_DIRS, with_spread: bool = False) -> list[dict]:
    """Every committed record, `_path` relative to the repository; the regression's spread only `with_spread`."""
    out = []
    for d in dirs:
        for record in all_records(d):
            if not with_spread and record["_path"].split("/", 1)[0] in LEFT_OUT:
                continue
            record["_path"] = repo_relative(Path(d) / record["_path"])
            out.append(record)
    return out


def why_not_runnable(record: dict) -> str | None:
    """Why a record cannot be re-run on this machine (None: it can, as far as can be told without its data)."""
    if (record["task"] == "coco" or record.get("framework") == "mmdet") and not importlib.util.find_spec("mmdet"):
        return "an mmdet detector: needs the [mmdet] extra (pip install -e .[mmdet]), not installed here"
    return None


def processor(device: str) -> str:
    """`cpu: AMD EPYC` of `cpu: AMD EPYC, 1 threads`: what a device string says about the processor alone."""
    return device.split(",")[0].strip()


class Processor(NamedTuple):
    """What a record's machine must share with this one for a re-run's mask to compare: the processor's name and
    the kernels torch picks with its generation (`records.cpu_identity`)."""

    name: str
    kernels: str


def recorded_kernels(record: dict) -> str | None:
    """The kernels and generation the record's machine ran (None: the record predates them)."""
    return record.get("environment", {}).get("cpu")


def why_another_processor(record: dict, here: Processor) -> str | None:
    """Why a record was not made on this machine's processor (None: as far as the record tells, it was)."""
    if processor(record["device"]) != here.name:
        return f"made on another processor ({processor(record['device'])}), not this machine's"
    kernels = recorded_kernels(record)
    if kernels is not None and kernels != here.kernels:
        return f"made on another generation of it ({kernels}), not this machine's ({here.kernels})"
    return None


def pick_record(records: list[dict], method: str, this_processor: Processor | None = None):
    """(the record to re-run for `method` or None, why none); given `this_processor`, only records made on it.
    Preferred: a record naming this processor's generation, with a mask hash, a stand-in task's, the cheapest."""
    mine = [r for r in records if r["method"] == method]
    if not mine:
        return None, "no committed record of this method"
    why = {
        id(r): why_not_runnable(r) or (why_another_processor(r, this_processor) if this_processor else None)
        for r in mine
    }
    usable = [r for r in mine if not why[id(r)]]
    if not usable:
        return None, "; ".join(f"{n} record(s): {w}" for w, n in Counter(why.values()).items())
    return min(
        usable,
        key=lambda r: (
            this_processor is not None and recorded_kernels(r) is None,
            "mask_sha256" not in r,
            r["task"] not in STAND_IN_TASKS,
            float(r["wall_s"]),
            r["_path"],
        ),
    ), None


def _voc_substitute(record: dict, scratch: Path) -> str | None:
    """The substitute detection set a voc record names (made from CIFAR) written once into scratch, else None."""
    if record["task"] != "voc" or not record.get("substitute"):
        return None
    out = scratch / "voc-cifar"
    if not out.is_dir():
        manifest = record["substitute_manifest"]
        make_data = get_task("voc").make_data
        assert make_data is not None  # the voc task registers the maker of its substitute set
        make_data(out, resolve_data_root(None), seed=manifest["seed"], log=lambda _: None)
    return str(out)


def same_numbers(old: dict, new: dict) -> bool:
    """Whether two records state the same sparsity, metrics, dense metrics and per-layer sparsity."""

    def flat(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, 9) if math.isfinite(value) else str(value)
        if isinstance(value, dict):
            return {k: flat(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [flat(v) for v in value]
        return value

    def numbers(record: dict) -> Any:  # each layer's sparsity: the allocation, where a record has no mask hash
        layers = [(layer["name"], layer["sparsity"]) for layer in record["per_layer"]]
        return flat([record["achieved_sparsity"], record["metrics"], record["dense_metrics"], layers])

    return numbers(old) == numbers(new)


def run_cell(record: dict, scratch: Path, resume: bool = False) -> dict:
    """Re-run one record's cell on one thread into scratch (`resume`: from what an earlier re-run left there);
    the comparison: hashes (none recorded: the numbers alone decide, as `compared` says), headline, numbers."""
    torch.set_num_threads(1)
    where = Where(runs_dir=scratch / "runs", checkpoint_dir=scratch / "checkpoints", progress=False)
    if data_root := _voc_substitute(record, scratch):
        where = replace(where, data_root=data_root)
    wall, cpu = time.perf_counter(), time.process_time()
    new, _ = rerun_record(record, where, force=not resume)
    metric, old_value = headline(record)
    old_hash, new_hash = record.get("mask_sha256"), new["mask_sha256"]
    numbers = same_numbers(record, new)
    return {
        "metric": metric,
        "old_value": old_value,
        "new_value": headline(new)[1],
        "old_achieved_sparsity": record["achieved_sparsity"],
        "new_achieved_sparsity": new["achieved_sparsity"],
        "old_mask_sha256": old_hash,
        "new_mask_sha256": new_hash,
        "hash_match": None if old_hash is None else old_hash == new_hash,
        "numbers_match": numbers,
        "match": numbers and (old_hash is None or old_hash == new_hash),
        "compared": "mask hash and numbers" if old_hash else "numbers only (the record predates its mask hash)",
        "cell_wall_s": time.perf_counter() - wall,  # data, dense evaluation, method and evaluation
        "cell_cpu_s": time.process_time() - cpu,
        "old_wall_s": record["wall_s"],
        "new_wall_s": new["wall_s"],
        "old_device": record["device"],
        "old_kernels": recorded_kernels(record),
        "new_device": new["device"],
        "new_kernels": recorded_kernels(new),
        "old_git_commit": record["git_commit"],
        "new_git_commit": new["git_commit"],
        "old_created": record.get("created"),
    }


def same_code_as_before(scratch: Path) -> bool:
    """Whether what an earlier re-run left in scratch was made by this commit; stamps scratch with it."""
    stamp = scratch / "git_commit"
    same = stamp.is_file() and stamp.read_text().strip() == str(git_commit())
    scratch.mkdir(parents=True, exist_ok=True)
    stamp.write_text(f"{git_commit()}\n")
    return same


def row_for(
    method: str,
    picked: tuple[dict | None, str | None],
    max_wall_s: float,
    log: Callable[[str], None] = print,
    work_dir: Path | None = None,
) -> dict:
    """One method's row from its `pick_record` pick: the record it re-ran and the comparison, or why it was skipped;
    in work_dir/<method> (resumed if this commit began it) or a temporary folder."""
    record, why = picked
    if record is None:
        return {"method": method, "status": "skipped", "reason": why}
    base = {"method": method, "record": record["_path"], "task": record["task"], "profile": record["profile"]["name"]}
    if record["wall_s"] > max_wall_s:
        return {
            **base,
            "status": "skipped",
            "old_wall_s": record["wall_s"],
            "reason": f"its cheapest runnable record took {record['wall_s']:.0f} s of method time when made, over "
            f"this run's limit of {max_wall_s:.0f} s per cell (--max-wall-s)",
        }
    log(f"[rerun] {method}: {record['_path']} (recorded {record['wall_s']:.1f} s)")
    try:
        if work_dir is not None:
            row = run_cell(record, work_dir / method, resume=same_code_as_before(work_dir / method))
        else:
            with tempfile.TemporaryDirectory(prefix="rerun-sample-") as tmp:
                row = run_cell(record, Path(tmp))
    except DataNotFoundError as e:
        return {**base, "status": "skipped", "reason": f"its data is missing here: {e}"}
    log(
        f"[{'match' if row['match'] else 'DIFFERS'}] {method}: {row['metric']} {row['old_value']:.2f} -> "
        f"{row['new_value']:.2f}, hash {str(row['old_mask_sha256'])[:12]} -> {row['new_mask_sha256'][:12]}, "
        f"{row['cell_wall_s']:.0f} s"
    )
    return {**base, "status": "ran", **row}


def provenance() -> dict:
    return {
        "git_commit": git_commit(),
        "command": command_line(),
        "device": device_description("cpu"),
        "torch": torch.__version__,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "torch_threads": torch.get_num_threads(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def summary(rows: list[dict]) -> dict:
    ran = [r for r in rows if r["status"] == "ran"]
    return {
        "methods": len(rows),
        "matched": sum(r["match"] for r in ran),
        "differed": sum(not r["match"] for r in ran),
        "skipped": len(rows) - len(ran),
        "cpu_s": round(sum(r["cell_cpu_s"] for r in ran), 1),
        "wall_s": round(sum(r["cell_wall_s"] for r in ran), 1),
    }


def table_row(r: dict) -> str:
    """A re-run's row: where it differs and the record names no generation, the processor's may be why."""
    old_kernels, new_kernels = r.get("old_kernels"), r.get("new_kernels")
    unplaced = not old_kernels and new_kernels
    recorded_on = f"{r['old_device']} ({old_kernels})" if old_kernels else r["old_device"]
    if unplaced:
        recorded_on = f"{r['old_device']} (generation not recorded)"
    match = "yes" if r["match"] else "NO"
    if not r["match"] and unplaced and processor(r["old_device"]) == processor(r["new_device"]):
        match = "NO (the record names no generation: perhaps the processor's)"
    commit = r["new_git_commit"][:7] + ("+dirty" if "+dirty" in r["new_git_commit"] else "")
    return (
        f"| {r['method']} | {r['record']} | {r['compared']} | {r['metric']} {r['old_value']:.2f} → "
        f"{r['new_value']:.2f} | {str(r['old_mask_sha256'])[:12]} → {r['new_mask_sha256'][:12]} | {match} | "
        f"{r['cell_wall_s']:.0f} | {recorded_on} | {processor(r['new_device'])}"
        f"{f' ({new_kernels})' if new_kernels else ''}, {commit} |"
    )


def markdown(output: dict) -> str:
    """The table beside the JSON, one line per method; each row names its run's processor and commit."""
    s = output["summary"]
    p = output["provenance"]
    lines = [
        f"Re-runs of one committed record per method (one thread each; torch {p['torch']}; each row's re-run names "
        f"its processor and commit; last written at commit {p['git_commit'][:12]} on {p['device']}): "
        f"{s['matched']} matched, {s['differed']} differed, {s['skipped']} skipped; {s['cpu_s']:.0f} s CPU in all.",
        "",
        "| method | record | compared | old → new headline | old → new mask hash | match | cell s | recorded on "
        "| re-run on |",
        "|---|---|---|---|---|---|---:|---|---|",
    ]
    for r in output["rows"]:
        skipped = f"| {r['method']} | {r.get('record', '-')} | skipped: {r.get('reason')} | | | | | | |"
        lines.append(table_row(r) if r["status"] == "ran" else skipped)
    return "\n".join(lines) + "\n"


def write(out: Path, rows: list[dict], notes: list[str]) -> dict:
    output = {"provenance": provenance(), "summary": summary(rows), "rows": rows, "notes": notes}
    write_json_atomic(out, output)
    write_text_atomic(out.with_suffix(".md"), markdown(output))
    return output


def kept_rows(out: Path) -> dict[str, dict]:
    """method -> its row already in `out` that ran (what --resume keeps); skipped rows are decided again."""
    if not out.is_file():
        return {}
    try:
        rows = json.loads(out.read_text())["rows"]
    except (ValueError, KeyError, TypeError) as e:
        raise SystemExit(
            f"--resume: {out} is not this benchmark's output ({e}); move it away or drop --resume"
        ) from None
    return {r["method"]: r for r in rows if r.get("status") == "ran"}


def still_current(row: dict, record: dict | None) -> bool:
    """Whether a kept row still describes the record this run picked: the same file, commit, time and mask."""
    if record is None:
        return False
    now = (record["_path"], record.get("created"), record.get("git_commit"), record.get("mask_sha256"))
    return now == (row["record"], row.get("old_created"), row.get("old_git_commit"), row.get("old_mask_sha256"))


def main(argv=None) -> int:
    p = parser("rerun-sample")
    args = p.parse_args(argv)
    methods = [m for m in list_methods() if m in (args.methods or list_methods())]  # registry order
    if args.out.suffix != ".json":
        p.error(f"--out {args.out}: name a .json file (the table goes beside it as .md)")
    kept = kept_rows(args.out) if args.resume else {}
    earlier = json.loads(args.out.read_text()).get("notes", []) if kept else []
    for text in args.forget_note:
        if not any(text in n for n in earlier):
            p.error(f"--forget-note {text!r}: no note kept in {args.out} contains it (its notes: {earlier})")
    earlier = [n for n in earlier if not any(text in n for text in args.forget_note)]
    notes = [*earlier, *(n for n in args.note if n not in earlier)]
    git_commit()  # pin the commit of the code that runs
    here = Processor(processor(device_description("cpu")), cpu_identity()) if args.this_processor else None
    records = committed_records(with_spread=args.this_processor)
    picks = {m: pick_record(records, m, this_processor=here) for m in {*methods, *kept}}
    for method in [m for m in kept if not still_current(kept[m], picks[m][0])]:
        then = "running it again" if method in methods else "its row is dropped (name it in --methods to re-run it)"
        print(f"[stale] {method}: the record it re-ran has been made again or another is picked now; {then}")
        del kept[method]
    rows: dict[str, dict] = dict(kept)
    order = list_methods()
    # The cheapest picked record first: an interrupted run has the most rows.
    for method in sorted(methods, key=lambda m: float((picks[m][0] or {}).get("wall_s", 0.0))):
        if method in kept:
            print(f"[kept] {method}: {kept[method]['record']}")
            continue
        rows[method] = row_for(method, picks[method], args.max_wall_s, work_dir=args.work_dir)
        write(args.out, [rows[m] for m in order if m in rows], notes)
    output = write(args.out, [rows[m] for m in order if m in rows], notes)
    print(markdown(output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
