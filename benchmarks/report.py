"""What the benchmarks share: a text output's measured lines followed by its provenance."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone

import torch

from fcpts.core.io import write_text_atomic
from tasks.grid.records import command_line, git_commit


def synchronize(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def provenance() -> list[str]:
    """Command, commit, torch and threads, the load the measurement ran under, and when."""
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    return [
        f"command: {command_line()}",
        f"commit {git_commit()}, torch {torch.__version__}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}, "
        f"{torch.get_num_threads()} torch threads, load average at the end {load}",
        f"created {datetime.now(timezone.utc).isoformat(timespec='seconds')}",
    ]


def measure_then_emit(measure: Callable[[], list[str]], out: str | None) -> None:
    """Pin the commit first (the code that ran, not what was committed meanwhile), then measure; print the lines
    with their provenance and write the same text to `out` (atomically) if given."""
    git_commit()
    text = "\n".join([*measure(), *provenance()])
    print(text)
    if out:
        write_text_atomic(out, text + "\n")
