"""Where the suite writes: $FCPTS_RESULTS_DIR, else the repository's results/; each command's flags narrow it."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = Path(os.environ.get("FCPTS_RESULTS_DIR", REPO_ROOT / "results"))
RUNS_DIR = RESULTS_DIR / "runs"


def checkpoint_dir_for(runs_dir: str | Path) -> Path:
    """A runs folder's resumable state: its hidden `.checkpoints/`, or $FCPTS_CHECKPOINT_DIR."""
    env = os.environ.get("FCPTS_CHECKPOINT_DIR")
    return Path(env) if env else Path(runs_dir) / ".checkpoints"


def repo_relative(path: str | Path) -> str:
    """Repository-relative when inside the repository (records stay valid in any clone)."""
    path = Path(path).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)
