"""One grid cell as a cluster job: the task's own command narrowed to that cell, run in a child process, so the
record, lock, resume and provenance are a local run's. Standard library only: the job process stays light."""

from __future__ import annotations

import codecs
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tasks.grid.lock import JOB_ENV


class CellFailed(RuntimeError):
    """The cell's command failed or left no record; the message ends with its last line of stderr."""


@dataclass(frozen=True)
class CellCommand:
    """Picklable callable that submitit runs as a job: `python -m <module> <argv>` in `cwd`."""

    module: str  # tasks.cifar
    argv: tuple[str, ...]
    cwd: str
    record: str  # the record this cell writes (absolute)

    @property
    def command(self) -> str:
        return shlex.join(["python", "-m", self.module, *self.argv])

    def __call__(self) -> str:
        import submitit

        env = {**os.environ, JOB_ENV: str(submitit.JobEnvironment().job_id)}
        print(f"cell: {self.command}\n  in {self.cwd}", flush=True)
        sys.stderr.flush()
        child = subprocess.Popen(
            [sys.executable, "-m", self.module, *self.argv], cwd=self.cwd, env=env, stderr=subprocess.PIPE
        )
        last_line = _copy_stderr(child)
        status = child.wait()
        if status != 0:
            raise CellFailed(f"exited with status {status}: {last_line}")
        if not Path(self.record).is_file():
            raise CellFailed(f"exited without writing {self.record}: {last_line}")
        return self.record


def _copy_stderr(child: subprocess.Popen) -> str:
    """Stream the child's stderr into this job's log as it comes; return its last non-empty line."""
    assert child.stderr is not None
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace")
    tail = ""
    while chunk := child.stderr.read1(8192):  # type: ignore[attr-defined]  # a BufferedReader: Popen without text
        text = decode.decode(chunk)
        sys.stderr.write(text)
        sys.stderr.flush()
        tail = (tail + text)[-4096:]
    lines = [line.strip() for line in tail.replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output on stderr)"
