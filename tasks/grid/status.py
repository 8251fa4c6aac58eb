"""`python -m tasks.grid status`: where each submitted cell stands, from the submission manifests the launcher
wrote into the jobs folder, the records, and submitit's job folders (one scheduler query per grid)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tasks.grid.job_state import cell_states
from tasks.grid.paths import RUNS_DIR
from tasks.grid.submission import jobs_dir_for, manifests, read_cells

STATES = ("done", "running", "failed", "missing")


def status_rows(jobs_dir: Path) -> list[dict]:
    """One row per cell of every grid submitted from `jobs_dir`: cell, state, job, detail, log."""
    rows = []
    for manifest in manifests(jobs_dir):
        cells = list(read_cells(manifest.parent).values())
        for cell, state in zip(cells, cell_states(cells, manifest.parent)):
            rows.append(
                {
                    "cell": cell["cell"],
                    "state": state.state,
                    "job": cell.get("job_id") or "-",
                    "detail": state.detail,
                    "log": state.log,
                    "command": cell["command"],
                }
            )
    return rows


def format_status(rows: list[dict]) -> str:
    width = max([len("cell")] + [len(r["cell"]) for r in rows])
    lines = [f"{'state':8s} {'cell':{width}s} {'job':>12s}  detail", "-" * (width + 32)]
    for r in rows:
        lines.append(f"{r['state']:8s} {r['cell']:{width}s} {r['job']:>12s}  {r['detail']}")
        if r["state"] == "failed" and r["log"]:
            lines.append(f"{'':8s} log: {r['log']}")
    counts = Counter(r["state"] for r in rows)
    lines.append(f"{len(rows)} cells: " + ", ".join(f"{counts[s]} {s}" for s in STATES))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tasks.grid status", description=__doc__)
    p.add_argument("--results-dir", default=str(RUNS_DIR), help="the grid's --results-dir (default: results/runs)")
    p.add_argument("--jobs-dir", help="the grid's --jobs-dir (default: <results-dir>/.jobs)")
    p.add_argument("--state", choices=STATES, action="append", help="show only cells in this state (repeatable)")
    args = p.parse_args(argv)
    jobs_dir = jobs_dir_for(args.results_dir, args.jobs_dir)
    try:
        rows = status_rows(jobs_dir)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not rows:
        print(f"no submissions under {jobs_dir} (the launcher writes <grid>/submission.json there)")
        return 1
    print(format_status([r for r in rows if not args.state or r["state"] in args.state]))
    return 0
