"""Benchmark: one POT cell end to end, its layers reconstructed one by one vs together, in one run.

The cell is Table 2's CIFAR-10 ResNet-32 POT L2Norm at 80% with the `paper-cpu` budget (1,024 images,
1,000 Adam steps per layer) unless told otherwise. Each variant runs `pot()` in a fresh subprocess on the
same dense weights and calibration images (so none inherits another's memory or warm caches) and reports
its wall time, how many layers took their steps stacked, and the mean relative layer error it reached,
so a faster variant that optimised something else would show. The layers together run twice: their Gram
objectives' gradient written down (the default) and by autograd (`gram_gradient="autograd"`, as before).
`--baseline-rev` adds the POT of another commit (checked out into a temporary git worktree) for a before/after
comparison on the same machine.

    python -m benchmarks.speed.pot_cell                                   # sequential vs concurrent
    python -m benchmarks.speed.pot_cell --baseline-rev 9c9af00            # + that commit's POT, same cell
    python -m benchmarks.speed.pot_cell --iterations 20000 --images 10240 # the paper's budget
    python -m benchmarks.speed.pot_cell --output results/benchmarks/pot_cell_cpu.txt
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from fcpts.core.io import write_text_atomic
from tasks.grid.data import resolve_data_root
from tasks.grid.paths import REPO_ROOT
from tasks.grid.records import git_commit

# Runs inside the subprocess, from the root of the code being measured; uses only APIs every compared
# commit has. argv: dataset model target iterations images threads device options-json
WORKER = """
import json, sys, time, torch
from tasks.cifar.data import CifarCalibration
from tasks.grid.cifar_data import load_cifar
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.weights import default_cifar_weights, load_checkpoint
from tasks.grid.data import calibration_indices, resolve_data_root
from baselines.pot import POTOptions, pot

dataset, model_name, target, iterations, images, threads, device, extra = sys.argv[1:]
torch.set_num_threads(int(threads))
root = resolve_data_root(None)
x_train, _ = load_cifar(root, dataset, "train")
calib = CifarCalibration(x_train[calibration_indices(len(x_train), int(images), 0)], augment=False)
model = cifar_resnet(model_name, 100 if dataset == "cifar100" else 10)
load_checkpoint(model, default_cifar_weights(root, dataset, model_name))
options = POTOptions(
    allocation="l2norm", iterations=int(iterations), progress=False, device=device, **json.loads(extra)
)
tic = time.perf_counter()
_, report = pot(model.to(device), calib, float(target), options)
wall = time.perf_counter() - tic
rows = report.per_layer
print(json.dumps({
    "wall_s": wall,
    "stacked": sum(r.get("stacked_layers", 1) > 1 for r in rows),
    "layers": len(rows),
    "mean_error": sum(r["error_reconstructed"] for r in rows) / len(rows),
    "achieved": report.achieved_sparsity,
}))
"""


TOGETHER = "this checkout, same-shape layers together"
AUTOGRAD = "this checkout, together, autograd's gradient"


def run_variant(root: Path, args: argparse.Namespace, options: dict) -> dict:
    """One `pot()` of the cell in a subprocess with the code under `root`."""
    argv = [args.dataset, args.model, str(args.target), str(args.iterations), str(args.images), str(args.threads)]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(args.threads),
        "PYTHONPATH": str(root),
        "FCPTS_DATA_ROOT": str(resolve_data_root(args.data_root)),  # a temporary checkout has no ../shared
    }
    done = subprocess.run(
        [sys.executable, "-c", WORKER, *argv, args.device, json.dumps(options)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the POT variant under {root} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def baseline_checkout(rev: str, into: Path) -> Path:
    """A detached git worktree of `rev`."""
    path = into / f"pot-baseline-{rev}"
    subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(path), rev], check=True)
    return path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cifar10")
    p.add_argument("--model", default="resnet32")
    p.add_argument("--target", type=float, default=0.8)
    p.add_argument("--iterations", type=int, default=1000, help="Adam steps per layer (paper: 20,000)")
    p.add_argument("--images", type=int, default=1024, help="calibration images (paper: 10,240)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--data-root", help="folder with the CIFAR data and weights (default: as the tasks find it)")
    p.add_argument("--baseline-rev", help="also time the POT of this git commit on the same cell")
    p.add_argument("--output", type=Path, help="also write the printed lines to this file (atomically)")
    args = p.parse_args(argv)
    commit = git_commit()  # the code measured is the code at start-up

    lines = [
        f"POT L2Norm {args.dataset} {args.model} at {args.target:.0%}: {args.images} images, {args.iterations} "
        f"steps per layer, {args.threads} thread(s), device {args.device}; each variant a fresh subprocess",
        f"{'variant':44s} {'wall s':>8s} {'stacked':>8s} {'mean layer error':>17s}",
    ]
    print(*lines, sep="\n", flush=True)
    variants: list[tuple[str, Path, dict]] = [
        ("this checkout, layers one by one", REPO_ROOT, {"concurrent": False}),
        (AUTOGRAD, REPO_ROOT, {"concurrent": True, "gram_gradient": "autograd"}),
        (TOGETHER, REPO_ROOT, {"concurrent": True}),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline_rev:
            variants.insert(
                0, (f"commit {args.baseline_rev} (its defaults)", baseline_checkout(args.baseline_rev, Path(tmp)), {})
            )
        results = {}
        try:
            for name, root, options in variants:
                r = results[name] = run_variant(root, args, options)
                lines.append(
                    f"{name:44s} {r['wall_s']:8.1f} {r['stacked']:>4d}/{r['layers']:<3d} {r['mean_error']:17.5f}"
                )
                print(lines[-1], flush=True)
        finally:
            if args.baseline_rev:
                subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(variants[0][1])])
    first, *rest = results.values()
    for name, r in list(results.items())[1:]:
        lines.append(f"speed-up of '{name}' over '{next(iter(results))}': {first['wall_s'] / r['wall_s']:.2f}x")
        print(lines[-1])
    lines.append(
        f"speed-up of the closed-form Gram gradient over autograd's (layers together): "
        f"{results[AUTOGRAD]['wall_s'] / results[TOGETHER]['wall_s']:.2f}x"
    )
    print(lines[-1])
    lines.append(
        f"command: python -m benchmarks.speed.pot_cell {' '.join(argv if argv is not None else sys.argv[1:])}; "
        f"this checkout at commit {commit}; load average at the end "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; created {datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%S}Z"
    )
    print(lines[-1])
    if args.output:
        write_text_atomic(args.output, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
