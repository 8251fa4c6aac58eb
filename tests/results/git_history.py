"""Files as an earlier commit held them: some tables and notes quote runs whose records were made again since."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

from tasks.grid.paths import REPO_ROOT, RESULTS_DIR
from tests.conftest import IN_CI


def _needs_history(message: str) -> NoReturn:
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def is_ancestor(older: str, commit: str) -> bool:
    """Whether `older` is in `commit`'s history (a record's code included that change)."""
    run = subprocess.run(["git", "merge-base", "--is-ancestor", older, commit], cwd=REPO_ROOT, capture_output=True)
    if run.returncode not in (0, 1):
        _needs_history(f"needs git history holding {older} and {commit} ({run.stderr.decode().strip()})")
    return run.returncode == 0


def text_at(commit: str, path: str) -> str:
    """A committed file (path relative to the repository) as `commit` held it, from git history; without that
    history (an export, a shallow clone) the test fails in CI and skips elsewhere, saying so."""
    shown = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO_ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        _needs_history(f"needs git history holding {commit} ({shown.stderr.strip() or 'git failed'})")
    return shown.stdout


def json_at(commit: str, path: str) -> dict:
    """A committed JSON file as `commit` held it (`text_at`)."""
    return json.loads(text_at(commit, path))


def committed_path(path: Path) -> str:
    """Where a file of the results folder is committed: results/<its path there>, also when FCPTS_RESULTS_DIR
    puts the folder (a copy of the checkout's) outside the checkout."""
    return str(Path("results") / Path(path).relative_to(RESULTS_DIR))


def record_at(commit: str, relative: str) -> dict:
    """A record under results/runs/ as committed at `commit`."""
    return json_at(commit, str(Path("results") / "runs" / relative))
