"""CIFAR-10/100 classification: dense evaluation, then each method x sparsity, one record per run.

    python -m tasks.cifar --dataset cifar10 --model resnet56 --methods fcpts --sparsity 0.7 0.8 0.9

Calibration images come from the training split (a seeded subset, labels unused); accuracy is measured
on the test split. Profiles: `paper` (METHOD.md's protocol: 1,024 images, 1,600 iterations of batch 64),
`fast` (the same data, fewer iterations: minutes on a CPU), `quick` (tiny, for tests).
"""
from __future__ import annotations

import argparse
import sys

import torch

from baselines.registry import METHODS

from .data import (
    CIFAR_CLASSES,
    CifarCalibration,
    DataNotFoundError,
    calibration_indices,
    load_cifar,
    normalize_cifar,
    resolve_data_root,
)
from .evaluate import classify
from .models import CIFAR_DEPTHS, cifar_resnet, default_cifar_weights, load_checkpoint
from .records import RESULTS_DIR
from .runner import Grid, Profile, format_table, indices_hash, pot_budget, run_grid

PROFILES = {
    "paper": Profile("paper", n_calibration=1024, iterations=1600, batch_size=64,
                     note="METHOD.md: FCPTS 1,024 images x 1,600 iterations of 64; POT 10,240 images "
                          "(capped at the split), up to 20,000 iterations per layer",
                     methods=pot_budget(10240, 20000)),
    "paper-cpu": Profile("paper-cpu", n_calibration=1024, iterations=1600, batch_size=64,
                         note="paper protocol with POT cut to 1,000 iterations per layer on the same 1,024 "
                              "images as FCPTS (CPU budget); compare times only within this profile",
                         methods=pot_budget(1024, 1000)),
    "fast": Profile("fast", n_calibration=1024, iterations=400, batch_size=64,
                    note="paper data, a quarter of the FCPTS iterations, POT 500 per layer: the CPU default",
                    methods=pot_budget(1024, 500)),
    "quick": Profile("quick", n_calibration=128, iterations=10, batch_size=32, eval_limit=1000,
                     note="smoke test only; not a result", methods=pot_budget(128, 5)),
}
PAPER_METHODS = ["pot-l2norm", "pot-erk", "fcpts"]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tasks.cifar", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cifar10", choices=sorted(CIFAR_CLASSES))
    p.add_argument("--model", default="resnet56", choices=sorted(CIFAR_DEPTHS))
    p.add_argument("--methods", nargs="+", default=["fcpts"], help=f"from: {', '.join(sorted(METHODS))}")
    p.add_argument("--all-methods", action="store_true", help=f"the paper's set: {' '.join(PAPER_METHODS)}")
    p.add_argument("--sparsity", nargs="+", type=float, default=[0.9], help="global sparsity targets in [0,1)")
    p.add_argument("--profile", default="fast", choices=sorted(PROFILES))
    p.add_argument("--iterations", type=int, help="override the profile's iteration count (recorded)")
    p.add_argument("--pot-iterations", type=int,
                   help="override POT's iterations per layer (recorded; the profile is renamed <name>-pot<N>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root", help="folder with CIFAR (default: $FCPTS_DATA_ROOT, then ../shared/data)")
    p.add_argument("--download", action="store_true", help="download CIFAR with torchvision if missing")
    p.add_argument("--weights", help="dense checkpoint (default: <data-root>/weights/<dataset>/<model>.th)")
    p.add_argument("--results-dir", default=str(RESULTS_DIR / "runs"))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--force", action="store_true", help="redo cells that already have a record")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


def build_grid(args: argparse.Namespace) -> Grid:
    from pathlib import Path

    root = resolve_data_root(args.data_root, must_exist=not args.download)
    if args.download:
        root.mkdir(parents=True, exist_ok=True)
    profile = PROFILES[args.profile]
    if args.iterations is not None:
        profile = profile.with_iterations(args.iterations, "FCPTS iterations")
    if args.pot_iterations is not None:
        profile = profile.with_pot_iterations(args.pot_iterations)
    x_test, y_test = load_cifar(root, args.dataset, "test", args.download)
    if profile.eval_limit:
        x_test, y_test = x_test[: profile.eval_limit], y_test[: profile.eval_limit]
    x_train, _ = load_cifar(root, args.dataset, "train", args.download)

    def make_calibration(n: int, augment: bool):
        """n seeded training images (capped at the split's size, which the record then shows)."""
        idx = calibration_indices(len(x_train), min(n, len(x_train)), args.seed)
        info = {"split": "train", "n_images": len(idx), "n_requested": n, "seed": args.seed,
                "indices_sha256": indices_hash(idx), "indices": idx, "augment": "crop4+flip" if augment else "none"}
        return CifarCalibration(x_train[idx], augment=augment), info

    weights = Path(args.weights) if args.weights else default_cifar_weights(root, args.dataset, args.model)
    num_classes = CIFAR_CLASSES[args.dataset]
    probe = cifar_resnet(args.model, num_classes)
    weights_info = load_checkpoint(probe, weights)  # fail early on a bad file
    state = {k: v.clone() for k, v in probe.state_dict().items()}
    device = torch.device(args.device)

    def build_model():
        m = cifar_resnet(args.model, num_classes)
        m.load_state_dict(state)
        return m.to(device)

    x_eval, y_eval = normalize_cifar(x_test), torch.as_tensor(y_test)
    return Grid(
        task="cifar", dataset=args.dataset, model=args.model, build_model=build_model,
        make_calibration=make_calibration,
        evaluate=lambda m: classify(m, x_eval, y_eval),
        profile=profile, seed=args.seed,
        provenance={"weights": weights_info,
                    "data": {"root": str(root), "eval_split": "test", "n_eval": len(y_test)}},
        runs_dir=Path(args.results_dir), progress=not args.no_progress,
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    methods = PAPER_METHODS if args.all_methods else args.methods
    try:
        grid = build_grid(args)
        records = run_grid(grid, methods, args.sparsity, force=args.force)
    except (DataNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print()
    print(format_table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
