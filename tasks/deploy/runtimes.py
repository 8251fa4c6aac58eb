"""Finding a runtime's python (each may live in its own venv: DeepSparse pins onnx 1.14 and numpy 1.26) and
starting the inference worker in it, a fresh process per measurement; a missing runtime says how to install it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tasks.grid.paths import REPO_ROOT  # no torch there: workers run in venvs without it

RESULT_MARK = "FCPTS_WORKER_RESULT "

# runtime (its import name) -> (default venv folder, install hint); $FCPTS_<RUNTIME>_PYTHON names its python
RUNTIMES = {
    "onnxruntime": (None, "pip install onnxruntime (a core dependency of this suite)"),
    "deepsparse": (
        ".venv-deepsparse",
        "python3.11 -m venv .venv-deepsparse && .venv-deepsparse/bin/pip install deepsparse==1.8.0 "
        "(Python <= 3.11; pins onnx 1.14.1 and numpy 1.26, hence its own environment; Neural Magic "
        "Community License: evaluation use only)",
    ),
    "openvino": (".venv-openvino", "python3 -m venv .venv-openvino && .venv-openvino/bin/pip install openvino"),
}


class RuntimeNotInstalled(RuntimeError):
    """A runtime is missing; the message says where we looked and how to install it."""


def _spec(runtime: str) -> tuple[str, str, str | None, str]:
    """(import name, environment variable naming its python, default venv folder, install hint)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}; choose one of {sorted(RUNTIMES)}")
    return (runtime, f"FCPTS_{runtime.upper()}_PYTHON", *RUNTIMES[runtime])


def runtime_python(runtime: str) -> str:
    """The python that has `runtime`: $FCPTS_<RUNTIME>_PYTHON, else <repo>/<default venv>, else this one."""
    _, env, venv, _ = _spec(runtime)
    if os.environ.get(env):
        return os.environ[env]
    if venv and (REPO_ROOT / venv / "bin" / "python").is_file():
        return str(REPO_ROOT / venv / "bin" / "python")
    return sys.executable


def runtime_version(runtime: str, python: str | None = None) -> str:
    """The runtime's version in its python, or RuntimeNotInstalled saying how to install it."""
    module, env, _, hint = _spec(runtime)
    python = python or runtime_python(runtime)
    code = f"import {module} as m; print(getattr(m, '__version__', None) or m.get_version())"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120, env=_worker_env(1))
    except OSError as e:
        raise RuntimeNotInstalled(
            f"{runtime}: cannot start {python} ({e}). Install: {hint}; or set {env}=/path/to/python"
        ) from e
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeNotInstalled(
            f"{runtime} is not installed for {python} ({last}). Install: {hint}; "
            f"then set {env}=/path/to/that/python (or use the default venv folder)"
        )
    return out.stdout.strip().splitlines()[-1]


def _worker_env(threads: int) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), NM_DISABLE_ANALYTICS="1", PYTHONPATH=str(REPO_ROOT))
    env.pop("PYTHONHOME", None)
    return env


def run_worker(runtime: str, args: list[str], threads: int = 1, timeout: float = 3600) -> dict:
    """Run `python -m tasks.deploy worker --runtime R ...` in the runtime's python; its JSON result."""
    python = runtime_python(runtime)
    runtime_version(runtime, python)  # clear error when missing
    cmd = [python, "-m", "tasks.deploy", "worker", "--runtime", runtime, "--threads", str(threads), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, env=_worker_env(threads), timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(RESULT_MARK)]
    if out.returncode != 0 or not lines:
        tail = "\n".join((out.stderr or out.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"{runtime} worker failed (exit {out.returncode}): {' '.join(cmd)}\n{tail}")
    return json.loads(lines[-1][len(RESULT_MARK) :])


def peak_memory(runtime: str, path: str | Path, shape: tuple[int, ...], threads: int = 1) -> dict:
    """VmHWM of a fresh process that loads one model file and runs 5 batch-1 inferences."""
    runs = "--batch 1 --warmup 1 --runs 5".split()
    r = run_worker(runtime, ["--mode", "memory", "--models", str(path), "--shape", *map(str, shape), *runs], threads)
    return {
        "vmhwm_mib": r["vmhwm_kib"] / 1024,
        "vmhwm_after_import_mib": r["vmhwm_kib_after_import"] / 1024,
        "model_mib": (r["vmhwm_kib"] - r["vmhwm_kib_after_import"]) / 1024,
        "runtime_version": r["version"],
    }
