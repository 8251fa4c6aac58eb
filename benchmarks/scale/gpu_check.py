"""The GPU check: every GPU measurement the suite lacks, as parts with time limits (docs/notebook/benchmarks.md); a
second call given the first's packed work (--continue-from) finishes what it left.

    python -m benchmarks gpu-check prepare          # here: CIFAR-10 subset + weight files -> gpu_data/
    python -m benchmarks gpu-check run --out OUT    # there (--dry-run: a CPU, tiny sizes: the plumbing)
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import parser
from tasks.grid.paths import REPO_ROOT
from tasks.grid.records import checkout_commit

TRAVEL_LIMIT = 64 * 2**20  # what travels to the device: the tracked files and gpu_data/ together
# The archives' own filter chain (../shared/data/README.md): small enough to travel.
XZ_FILTERS = [
    {"id": lzma.FILTER_DELTA, "dist": 3},
    {"id": lzma.FILTER_DELTA, "dist": 96},
    {"id": lzma.FILTER_LZMA2, "preset": 9, "lc": 4, "lp": 0, "pb": 0},
]
WEIGHTS = ("resnet20", "resnet32", "resnet56")  # ResNet-20: the cuda smoke tests
SCALE_CELL_TIMEOUT_S = 90  # a ViT-L cell on an H200 (ViT-B's took 16-22 s)
WIDE = ("resnet18", "resnet50")  # step-time at 224 px: arithmetic, not kernel launches


@dataclass
class Part:
    name: str
    command: list[str]
    budget_s: float  # the time this part is granted; earlier parts' leftovers come on top


SCALE_CUDA = REPO_ROOT / "results" / "benchmarks" / "scale_cuda.json"


def same_gpu(scale_output: Path, device: str) -> bool:
    """Whether a committed scale output was measured on this machine's GPU (its cells then need no re-run)."""
    import torch

    from benchmarks.scale.scale import measured_on

    if not scale_output.is_file() or not (device.startswith("cuda") and torch.cuda.is_available()):
        return False
    return measured_on(json.loads(scale_output.read_text()), device)


def tracked_files() -> list[str]:
    """The checkout's tracked files (what travels besides gpu_data/)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [n.decode() for n in out.split(b"\0") if n and (REPO_ROOT / n.decode()).is_file()]


def tree_digest(files: list[str]) -> str:
    """sha256 over the files' names and contents (a missing file counts as missing)."""
    h = hashlib.sha256()
    for name in files:
        path = REPO_ROOT / name
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"<missing>") + b"\0")
    return h.hexdigest()


def sent_commit(prepared: dict) -> str | None:
    """The commit `prepare` ran at, while the files it listed are unchanged (a device's git folder may be older)."""
    files, digest = prepared.get("files"), prepared.get("tree_sha256")
    return prepared.get("commit") if files and digest and tree_digest(files) == digest else None


def write_npz_xz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    buf = io.BytesIO()
    np.savez(buf, allow_pickle=True, **arrays)  # numpy's default, named: else mypy fits an array to it
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(lzma.compress(buf.getvalue(), format=lzma.FORMAT_XZ, filters=XZ_FILTERS))


def prepare(source: Path, dest: Path, n_train: int, n_test: int, seed: int = 0) -> dict:
    """CIFAR-10 subsets and the ResNet-20/32/56 weights from `source` (a data root) into `dest`; the commit too."""
    from tasks.grid.cifar_data import load_cifar

    x_train, y_train = load_cifar(source, "cifar10", "train")
    x_test, y_test = load_cifar(source, "cifar10", "test")
    if not (0 < n_train <= len(x_train) and 0 < n_test <= len(x_test)):
        raise ValueError(f"--train must be in 1..{len(x_train)} and --test in 1..{len(x_test)}")
    idx = np.sort(np.random.default_rng(seed).choice(len(x_train), n_train, replace=False))
    if dest.exists():
        shutil.rmtree(dest)
    write_npz_xz(dest / "cifar10" / "train.npz.xz", {"x": x_train[idx], "y": y_train[idx]})
    write_npz_xz(dest / "cifar10" / "test.npz.xz", {"x": x_test[:n_test], "y": y_test[:n_test]})
    for model in WEIGHTS:
        src = source / "weights" / "cifar10" / f"{model}.th"
        if not src.is_file():
            raise FileNotFoundError(f"{src} not found: the CIFAR-10 weights come from the suite's data folder")
        (dest / "weights" / "cifar10").mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dest / "weights" / "cifar10" / src.name)
    files = tracked_files()
    info: dict[str, Any] = dict(commit=checkout_commit(), source=str(source), train=n_train, test=n_test, seed=seed)
    info.update(tree_sha256=tree_digest(files), files=files)  # the run checks it has this commit's files
    (dest / "prepared.json").write_text(json.dumps(info, indent=1) + "\n")
    data_bytes = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    info["bytes"] = data_bytes
    info["travel_bytes"] = data_bytes + sum((REPO_ROOT / n).stat().st_size for n in files)
    return info


def part_list(out: Path, dry_run: bool, device: str) -> list[Part]:
    """The parts, with the GPU's sizes, or tiny ones for a CPU dry run."""
    py = sys.executable
    work = out / "work"
    records = ["--results-dir", str(work / "records"), "--device", device, "--no-progress"]

    def cifar(model: str, method: str, sparsity: str, profile: str, *extra: str) -> list[str]:
        head = [py, "-m", "tasks.cifar", "--dataset", "cifar10", "--model", model, "--methods", method]
        return head + ["--sparsity", sparsity, "--profile", "quick" if dry_run else profile, *records, *extra]

    def benchmark(name: str, *args: str) -> list[str]:
        return [py, "-m", "benchmarks", name, "--device", device, *args]

    smoke = [py, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "-rs", "--durations=8"]
    smoke += ["tests/unit/test_cuda_smoke.py", "tests/unit/test_obs.py", "tests/unit/test_pot.py"]
    smoke += ["tests/unit/test_step_graph.py", "tests/integration/test_cuda_smoke_tasks.py"]
    step = benchmark("step-time", "--out", str(work / "step_time.txt"))
    pot_step = benchmark("pot-step-time", "--out", str(work / "pot_step_time.txt"))
    pot_step_r18 = benchmark("pot-step-time", "--out", str(work / "pot_step_time_resnet18_224.txt"))
    scale = benchmark("scale", "--out", str(work / "scale.json"), "--resume")
    step_r18, step_r50 = (
        benchmark("step-time", "--model", m, "--out", str(work / f"step_time_{m}_224.txt")) for m in WIDE
    )
    if dry_run:  # collect and skip the cuda tests; one step; one one-shot scale cell
        smoke = [py, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider", "tests/unit/test_cuda_smoke.py"]
        step += "--model resnet20 --batch-size 4 --steps 1 --rounds 1".split()
        pot_step += "--model resnet20 --images 64 --steps 2 --rounds 1".split()
        pot_step_r18 += "--model resnet20 --layers layer3. --images 64 --steps 2 --rounds 1".split()
        scale += "--models resnet18 --methods erk --small --cell-timeout 60".split()
        step_r50[step_r50.index("--model") + 1] = "resnet18"  # a CPU takes 45 s for ResNet-50's
        for cmd in (step_r18, step_r50):
            cmd += "--batch-size 2 --steps 1 --rounds 1".split()
    else:
        step += ["--amp", "bf16"]
        step_r18 += "--steps 5 --rounds 2".split()
        step_r50 += "--steps 5 --rounds 2".split()
        pot_step_r18 += "--model resnet18 --layers layer4. --images 256 --steps 100 --rounds 2".split()
        scale += ["--paper-grid", "--cell-timeout", str(SCALE_CELL_TIMEOUT_S)]
        if same_gpu(SCALE_CUDA, device):  # its cells kept, but for those that predate what made their method faster
            from benchmarks.scale.scale_cell import makes_size_choices, method_kind
            from fcpts.methods import METHODS

            # the training-loop methods and those whose probes choose as at the paper's size
            again = [name for name, m in METHODS.items() if method_kind(m) == "training" or makes_size_choices(m)]
            scale += ["--merge", str(SCALE_CUDA), "--again", *again]
    # Budgets: what each part took on an H200 (results/benchmarks/gpu_check_h200_*), rounded up; pot-step-r18-224's
    # is an estimate.
    return [
        Part("smoke", smoke, 90),
        Part("step-time", step, 60),
        Part("step-r18-224", step_r18, 35),
        Part("step-r50-224", step_r50, 45),
        Part("pot-step", pot_step, 60),
        Part("pot-step-r18-224", pot_step_r18, 50),
        Part("r56-fp32", cifar("resnet56", "fcpts", "0.9", "fast"), 30),
        Part("r56-bf16", cifar("resnet56", "fcpts", "0.9", "fast", "--option", "amp=bf16"), 30),
        Part("r32-fcpts", cifar("resnet32", "fcpts", "0.8", "paper"), 50),
        Part("r32-pot", cifar("resnet32", "pot-l2norm", "0.8", "paper"), 80),
        Part("scale", scale, 480),
    ]


def part_limit(budget: float, later: list[float], todo_total: float, left: float, total_s: float) -> float:
    """A part's time limit as it starts, `left` seconds of the call remaining: its share (earlier leftovers too)
    where the parts to run fit in the call, else its budget while time is left, the last part all that remains."""
    if todo_total <= total_s:
        return left - total_s / todo_total * sum(later)
    return min(budget, left) if later else left


def continue_work(source: Path, work: Path) -> None:
    """An earlier call's work (its gpu_check.tar.gz or work folder) into `work`, less its stale lock files."""
    if source.is_file():
        with tarfile.open(source) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(work.parent / "earlier", filter="data")
            else:  # Python < 3.10.12: no filters
                tar.extractall(work.parent / "earlier")
        source = work.parent / "earlier" / "gpu_check"
    if not any((source / name).exists() for name in ("summary.json", "records", "scale.json")):
        raise SystemExit(
            f"--continue-from {source}: no summary.json, records/ or scale.json in it (an earlier call's OUT/work "
            "or its gpu_check.tar.gz)"
        )
    shutil.copytree(source, work, dirs_exist_ok=True)
    for lock in work.rglob("*.lock"):
        lock.unlink()
    shutil.rmtree(work.parent / "earlier", ignore_errors=True)


def run_part(part: Part, timeout_s: float, log: Path, env: dict[str, str]) -> dict:
    """One part in its own process group (killed whole at its limit); its exit, time and log."""
    t = time.perf_counter()
    with open(log, "w") as f:
        f.write("$ " + " ".join(part.command) + "\n")
        f.flush()
        proc = subprocess.Popen(
            part.command, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=max(timeout_s, 1))
            status = "passed" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = f"timed out after {timeout_s:.0f} s"
    seconds = round(time.perf_counter() - t, 1)
    return {"part": part.name, "status": status, "seconds": seconds, "limit_s": round(timeout_s)}


def scale_status(result: dict, scale_json: Path) -> dict:
    """A scale part that left cells not started (past its --budget-s) is not done: a continuing call runs it again."""
    if result["status"] != "passed" or not scale_json.is_file():
        return result
    left = sum(c["status"] == "skipped" for c in json.loads(scale_json.read_text())["cells"])
    return {**result, "status": f"incomplete: {left} cells not started"} if left else result


def run(
    out: Path,
    data_root: Path,
    device: str,
    total_s: float,
    dry_run: bool,
    only: list[str] | None,
    continue_from: Path | None = None,
) -> list[dict]:
    """Every part within `total_s` (after an earlier call's work, `continue_from`); the summary; OUT/work packed."""
    if not (data_root / "cifar10" / "test.npz.xz").is_file():
        raise SystemExit(
            f"no CIFAR-10 under {data_root}: run `python -m benchmarks gpu-check prepare` (writes gpu_data/) "
            "and carry gpu_data to the device, or pass --data-root"
        )
    (out / "work").mkdir(parents=True, exist_ok=True)
    if continue_from is not None:
        continue_work(continue_from, out / "work")
    env = {**os.environ, "FCPTS_DATA_ROOT": str(data_root), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    prepared = data_root / "prepared.json"
    commit = (sent_commit(json.loads(prepared.read_text())) if prepared.is_file() else None) or checkout_commit()
    if commit and "FCPTS_GIT_COMMIT" not in os.environ:
        env["FCPTS_GIT_COMMIT"] = commit
    parts = part_list(out, dry_run, device)
    unknown = sorted(set(only or []) - {p.name for p in parts})
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(unknown)}; parts: {', '.join(p.name for p in parts)}")
    parts = [p for p in parts if not only or p.name in only]
    earlier = out / "work" / "summary.json"  # an earlier call's, when continuing
    parts_before = json.loads(earlier.read_text())["parts"] if earlier.is_file() else []
    passed = {r["part"]: r for r in parts_before if r["status"].startswith("passed")}
    todo = [p for p in parts if p.name not in passed]
    deadline = time.perf_counter() + total_s
    results = []
    for part in parts:
        if part.name in passed:
            results.append({**passed[part.name], "status": "passed in an earlier call"})
            print(f"{part.name:10s} passed in an earlier call", flush=True)
            continue
        later = [p.budget_s for p in todo[todo.index(part) + 1 :]]
        left = deadline - time.perf_counter()
        timeout_s = part_limit(part.budget_s, later, sum(p.budget_s for p in todo), left, total_s)
        if timeout_s < 1:
            results.append({"part": part.name, "status": "not started: this call's time is spent", "seconds": 0.0,
                            "limit_s": 0})  # fmt: skip
            print(f"{part.name:10s} not started (run again with --continue-from)", flush=True)
            continue
        if part.name == "scale":  # start no cell that could not finish in time
            part.command += ["--budget-s", str(max(timeout_s - SCALE_CELL_TIMEOUT_S - 5, 1))]
        results.append(run_part(part, timeout_s, out / "work" / f"{part.name}.log", env))
        if part.name == "scale":
            results[-1] = scale_status(results[-1], out / "work" / "scale.json")
        print(f"{part.name:10s} {results[-1]['status']} in {results[-1]['seconds']} s", flush=True)
    write_summary(out, results, device, commit, dry_run)
    with tarfile.open(out / "gpu_check.tar.gz", "w:gz") as tar:
        tar.add(out / "work", arcname="gpu_check")
    return results


def write_summary(out: Path, results: list[dict], device: str, commit: str | None, dry_run: bool) -> None:
    import torch

    where = torch.cuda.get_device_name() if device.startswith("cuda") and torch.cuda.is_available() else "cpu"
    passed = sum(r["status"].startswith("passed") for r in results)
    left = "; what is left: run again with --continue-from this gpu_check.tar.gz (carried inside gpu_data/)"
    lines = [
        f"GPU check{' (CPU dry run, tiny sizes: no result)' if dry_run else ''} on {where}, torch {torch.__version__}, "
        f"commit {commit or 'unknown'}",
        *(f"{r['part']:10s} {r['status']:28s} {r['seconds']:7.1f} s (limit {r['limit_s']} s)" for r in results),
        f"{passed} of {len(results)} parts passed; logs and records in gpu_check.tar.gz"
        + (left if passed < len(results) else ""),
    ]
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    summary = {"git_commit": commit, "device": where, "torch": torch.__version__, "dry_run": dry_run, "parts": results}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    shutil.copy(out / "summary.json", out / "work" / "summary.json")  # packed: a continuing call reads it
    print("\n".join(lines))


def main(argv=None) -> int:
    p = parser("gpu-check")
    args = p.parse_args(argv)
    if args.command == "prepare":
        info = prepare(Path(args.source), Path(args.dest), args.train, args.test)
        print(json.dumps({k: v for k, v in info.items() if k != "files"}, indent=1))
        if info["travel_bytes"] > TRAVEL_LIMIT:
            print(
                f"too large to travel: the tracked files and {args.dest} come to "
                f"{info['travel_bytes'] / 2**20:.1f} MiB, over {TRAVEL_LIMIT / 2**20:.0f} MiB; "
                "use fewer --train/--test images",
                file=sys.stderr,
            )
            return 1
        return 0
    device = args.device or ("cpu" if args.dry_run else "cuda")
    total = args.total_s or (1500.0 if args.dry_run else 465.0)
    earlier = Path(args.continue_from) if args.continue_from else None
    if earlier is not None and not earlier.exists():
        p.error(f"--continue-from {earlier}: no such file or folder")
    results = run(Path(args.out), Path(args.data_root), device, total, args.dry_run, args.only, earlier)
    return 0 if all(r["status"].startswith("passed") for r in results) else 1
