"""Benchmark: processor or code? A record's cell re-run here with the code that made it.

`rerun_sample` re-runs a committed record with today's code. When a record made on another processor re-runs to
another result, either may have moved it. This runs the record's own command, narrowed to its cell, in a checkout of
the record's commit (a git worktree in --work-dir), on this processor, and compares three sparse models:

- the record's (made elsewhere): its mask hash and its numbers, as stored; a record older than the mask hash by its
  saved model's file hash (two saves of one model can differ in bytes, so the mask hash is the comparison where
  there is one);
- the old code's, here: its mask hash (its file hash for an older record), its numbers and where its zeros are;
- today's code's, here (`--today`, the model `rerun_sample --work-dir` saved): where its zeros are.

The same code giving another model here than there says the processor moved it; the same processor giving another
mask with other code says the code did. A record made from a tree with uncommitted changes (its commit ends in
`+dirty`) is re-run from its commit without them: if that still makes the record's model, they did not matter; if not,
they and the processor are not told apart, and the verdict says so. Masks are compared as the zero/non-zero
pattern of every weight with two or more dimensions in the saved state dicts (a pattern hash and the share of
positions that differ).

    R=results/runs/imagenet/imagenet-val1300/efficientnet_lite0/fcpts-fixed-sp90-cpu-seed0
    python -m benchmarks.code.rerun_sample --methods fcpts-fixed --work-dir rerun-work --out ...   # today's model
    python -m benchmarks.code.rerun_at_commit --record $R.json \
        --today rerun-work/fcpts-fixed/runs/models/${R#results/runs/}.pt --work-dir at-commit/fcpts-fixed \
        --data-root ../shared/data/imagenet --out results/benchmarks/rerun_at_commit_cpu.json

A row per record is kept in the JSON (and a table beside it, `.md`); a finished old-code run in --work-dir is reused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks.code.rerun_sample import processor, provenance, short_commit
from fcpts.core.io import file_sha256, write_json_atomic, write_text_atomic
from tasks.grid.paths import REPO_ROOT

DEFAULT_OUT = REPO_ROOT / "results" / "benchmarks" / "rerun_at_commit_cpu.json"
CELL_FLAGS = {"--models": "model", "--model": "model", "--methods": "method", "--sparsity": "target_sparsity"}


def cell_command(record: dict, results_dir: Path, data_root: str | None) -> list[str]:
    """The record's command (`python -m tasks.X ...`) with its model, method and sparsity lists narrowed to the
    record's cell, its records written to `results_dir`, and the data read from `data_root` when given."""
    words = shlex.split(record["command"])
    if words[:2] != ["python", "-m"]:
        raise ValueError(f"{record['_path']}: its command does not start with `python -m`: {record['command']!r}")
    out, i = [sys.executable, "-m", words[2]], 3
    while i < len(words):
        word = words[i]
        i += 1
        values = []
        while i < len(words) and not words[i].startswith("--"):
            values.append(words[i])
            i += 1
        if word in CELL_FLAGS:
            values = [str(record[CELL_FLAGS[word]])]
        if word in ("--results-dir", "--data-root", "--force"):
            continue
        out += [word, *values]
    out += ["--results-dir", str(results_dir)]
    return out + (["--data-root", data_root] if data_root else [])


def zero_patterns(path: Path) -> dict[str, torch.Tensor]:
    """Where the zeros are in each weight of two or more dimensions of a saved state dict (or module)."""
    saved = torch.load(path, map_location="cpu", weights_only=False)
    state = saved.state_dict() if isinstance(saved, torch.nn.Module) else saved
    return {k: v == 0 for k, v in state.items() if torch.is_tensor(v) and k.endswith("weight") and v.dim() > 1}


def pattern_sha256(patterns: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name in sorted(patterns):
        digest.update(name.encode())
        digest.update(patterns[name].numpy().tobytes())
    return digest.hexdigest()


def share_differing(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The share of weight positions that are zero in one model and not in the other (1.0: other layers)."""
    if sorted(a) != sorted(b) or any(a[k].shape != b[k].shape for k in a):
        return 1.0
    return sum((a[k] != b[k]).sum().item() for k in a) / sum(a[k].numel() for k in a)


def verdict(same_as_record: bool, same_as_today: bool, record_tree_dirty: bool = False) -> str:
    """What moved the re-run: the old code here against the record (made elsewhere) and against today's code here.
    From a dirty tree the commit is not all the code that made the record, so another model here does not say the
    processor."""
    if record_tree_dirty and not same_as_record:
        why = "the processor or the record's uncommitted changes: its commit makes another model here"
        return f"{why}, today's code the same mask" if same_as_today else f"both the code since and {why}"
    return {
        (True, True): "neither: the old code here makes the record's model, and today's code its mask",
        (False, True): "the processor: the same code makes another model here, today's code the same mask",
        (True, False): "the code: the old code makes the record's model here, today's code another mask",
        (False, False): "both: the old code makes another model here, and today's code another mask than it",
    }[(same_as_record, same_as_today)]


def record_commit(record: dict) -> tuple[str, bool]:
    """The commit a record names and whether its tree had uncommitted changes ('+dirty')."""
    commit = record["git_commit"]
    return commit.removesuffix("+dirty"), commit.endswith("+dirty")


def run_old_code(record: dict, work_dir: Path, data_root: str | None) -> tuple[dict, Path]:
    """The record's cell run by its own commit in work_dir/checkout (reused when finished): its record and model."""
    checkout, runs = work_dir / "checkout", work_dir / "runs"
    commit, _ = record_commit(record)
    relative = Path(record["_path"]).relative_to("results/runs")
    new_record, model = runs / relative, runs / Path(record["sparse_model"]["path"]).relative_to("results/runs")
    if not checkout.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(checkout), commit], check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True, check=True)
    if head.stdout.strip() != commit:
        raise SystemExit(f"{checkout} is at {head.stdout.strip()[:12]}, not the record's {commit[:12]}")
    if not new_record.exists():
        command = cell_command(record, runs.resolve(), data_root)
        print("[at-commit]", shlex.join(command), flush=True)
        subprocess.run(command, cwd=checkout, check=True, env={**os.environ, "PYTHONPATH": str(checkout.resolve())})
    return json.loads(new_record.read_text()), model


def same_as_record(record: dict, old_here: dict, old_model_sha256: str) -> tuple[bool, str]:
    """Whether the old code here made the record's model, and by what: the mask hash with every number where the
    record has a mask hash, else the saved model's file hash."""
    if record.get("mask_sha256"):
        same = all(old_here.get(k) == record[k] for k in ("mask_sha256", "achieved_sparsity", "metrics"))
        return same, "mask hash and numbers"
    return old_model_sha256 == record["sparse_model"]["sha256"], "model file hash"


def row_for(record: dict, old_here: dict, old_model: Path, today_model: Path) -> dict:
    old_patterns, today_patterns = zero_patterns(old_model), zero_patterns(today_model)
    old_sha = file_sha256(old_model)
    same, compared_by = same_as_record(record, old_here, old_sha)
    differing = share_differing(old_patterns, today_patterns)
    metric = next(iter(record["metrics"]))
    return {
        "record": record["_path"],
        "method": record["method"],
        "record_commit": record["git_commit"],
        "record_device": record["device"],
        "old_here_device": old_here["device"],
        "metric": metric,
        "record_value": record["metrics"][metric],
        "old_here_value": old_here["metrics"][metric],
        "record_achieved_sparsity": record["achieved_sparsity"],
        "old_here_achieved_sparsity": old_here["achieved_sparsity"],
        "record_model_sha256": record["sparse_model"]["sha256"],
        "old_here_model_sha256": old_sha,
        "record_mask_sha256": record.get("mask_sha256"),
        "old_here_mask_sha256": old_here.get("mask_sha256"),
        "same_as_record": same,
        "compared_by": compared_by,
        "old_here_pattern_sha256": pattern_sha256(old_patterns),
        "today_pattern_sha256": pattern_sha256(today_patterns),
        "positions_differing_old_vs_today": differing,
        "old_here_wall_s": old_here["wall_s"],
        "old_here_command": old_here["command"],
        "verdict": verdict(same, differing == 0.0, record_commit(record)[1]),
    }


def _same(row: dict) -> bool:
    """A row's own answer; rows written before rows said so compared the model files."""
    return row.get("same_as_record", row["old_here_model_sha256"] == row["record_model_sha256"])


def markdown(output: dict) -> str:
    lines = [
        f"Records re-run here with the code that made them ({output['provenance']['device']}, commit of this tool "
        f"{output['provenance']['git_commit'][:12]}), against the record and against today's code here.",
        "",
        "| method | record made on | headline: record → old code here | old code here made the record's model | "
        "zero positions differing, old code vs today's (here) | verdict |",
        "|---|---|---|---|---:|---|",
    ]
    for r in output["rows"]:
        lines.append(
            f"| {r['method']} | {processor(r['record_device'])}, {short_commit(r['record_commit'], 8)} | {r['metric']} "
            f"{r['record_value']:.2f} → {r['old_here_value']:.2f} | "
            f"{'yes' if _same(r) else 'no'} (by {r.get('compared_by', 'model file hash')}) | "
            f"{100 * r['positions_differing_old_vs_today']:.2f}% | {r['verdict']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.code.rerun_at_commit", description=__doc__)
    p.add_argument("--record", required=True, help="a committed record (results/runs/...json) with a saved model")
    p.add_argument("--today", required=True, type=Path, help="today's code's model of the same cell, made here")
    p.add_argument("--work-dir", required=True, type=Path, help="the old checkout and its runs (reused)")
    p.add_argument("--data-root", help="passed to the old command (the data folder it reads)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    path = REPO_ROOT / args.record
    if not path.is_file() or not args.today.is_file():
        p.error(f"no such file: {args.record if not path.is_file() else args.today}")
    if not Path(args.record).as_posix().startswith("results/runs/"):
        p.error(f"{args.record}: name a grid record under results/runs/ (its cell and saved model are found there)")
    record = {**json.loads(path.read_text()), "_path": str(path.relative_to(REPO_ROOT))}
    if not record.get("sparse_model", {}).get("sha256"):
        p.error(f"{args.record} names no saved model's hash: nothing to compare the old code's model with")
    tic = time.perf_counter()
    old_here, old_model = run_old_code(record, args.work_dir, args.data_root)
    row = row_for(record, old_here, old_model, args.today)
    rows = json.loads(args.out.read_text())["rows"] if args.out.exists() else []
    rows = [r for r in rows if r["record"] != row["record"]] + [row]
    output = {"provenance": {**provenance(), "wall_s": round(time.perf_counter() - tic, 1)}, "rows": rows}
    write_json_atomic(args.out, output)
    write_text_atomic(args.out.with_suffix(".md"), markdown(output))
    print(markdown(output))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
