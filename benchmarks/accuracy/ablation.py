"""FCPTS design measurements on real CIFAR data and weights: option variants x iteration counts x seeds.

Used to choose and document defaults (METHOD.md asks: threshold gradient, teacher mode, KDE bandwidth,
and how accuracy depends on the iteration count for a CPU profile). Every finished variant is appended
as one JSON line to the output file, with provenance; variants already there are skipped (resume).

    python -m benchmarks.accuracy.ablation --model resnet56 --target 0.9 --iterations 100 400 1600 \
        --variants default control-only teacher-eval --out results/ablations/resnet56-sp90.jsonl
    python -m benchmarks.accuracy.ablation --model resnet32 --iterations 400 --seeds 0 1 2 \
        --variants default no-augment teacher-eval t1 lr0.005 lr0.02 bn-recal kl --out results/ablations/x.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from fcpts.core.io import append_json_line, read_json_lines
from fcpts.methods import get_method
from tasks.cifar.data import CifarCalibration
from tasks.grid.cifar_data import load_cifar, normalize_cifar
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.data import calibration_indices, resolve_data_root
from tasks.grid.evaluate import classify
from tasks.grid.records import device_description, git_commit
from tasks.grid.weights import default_cifar_weights, load_checkpoint

PLUS_OFF = {"method": "fcpts-plus", "ramp": 0.0, "block_weight": 1.0}  # fcpts-plus with every part off: FCPTS
VARIANTS = {
    "default": {},
    "ste": {"threshold_grad": "ste"},
    "ste-teacher-eval": {"threshold_grad": "ste", "teacher_mode": "eval"},
    "teacher-eval": {"teacher_mode": "eval"},
    "histogram": {"bridge": "histogram"},
    "kde-h0.1": {"kde_bandwidth": 0.1},
    "kde-h2": {"kde_bandwidth": 2.0},
    "kl": {"reconstruction": "kl"},
    "mse-blocks": {"reconstruction": "mse-blocks"},
    "bn-recal": {"bn_recalibration": True},
    "fixed": {"learn_thresholds": False},
    "squared": {"control_loss": "squared"},
    "lr0.02": {"lr": 0.02},
    "lr0.005": {"lr": 0.005},
    "kl-lr0.005": {"reconstruction": "kl", "lr": 0.005},
    "wd0": {"weight_decay": 0.0},
    "t1": {"temperature": 1.0},
    # FCPTS+ parts (fcpts/methods/fcpts_plus.py; those not kept: fcpts_plus_experimental.py), each alone on top of
    # FCPTS (every other part off)
    "plus-obs-start": {**PLUS_OFF, "start": "obs"},
    "plus-obs-allocation": {**PLUS_OFF, "start": "obs-allocation"},
    "plus-mixup": {**PLUS_OFF, "mix": "mixup"},
    "plus-cutmix": {**PLUS_OFF, "mix": "cutmix"},
    "plus-ramp": {**PLUS_OFF, "ramp": 0.5},
    "plus-ramp-short": {**PLUS_OFF, "ramp": 0.25},
    "plus-ramp-long": {**PLUS_OFF, "ramp": 0.75},
    "plus-ramp-from-quarter": {**PLUS_OFF, "ramp": 0.5, "ramp_start": 0.25},
    "plus-erk0.5": {**PLUS_OFF, "erk_power": 0.5},  # small and large layers' rates closer than ERK's
    "plus-ramp-erk0.5": {**PLUS_OFF, "ramp": 0.5, "erk_power": 0.5},
    "plus-ramp-ratios": {**PLUS_OFF, "ramp": 0.5, "ramp_hold": "ratios"},  # the allocation learns during the ramp
    "plus-ramp-restart": {**PLUS_OFF, "ramp": 0.5, "lr_restart": True},  # a fresh cosine from the ramp's end
    "plus-ramp-wd0": {**PLUS_OFF, "ramp": 0.5, "weight_decay": 0.0},  # no decay pulling the kept weights down
    "plus-ramp-dense-gradient": {**PLUS_OFF, "ramp": 0.5, "dense_gradient": True},  # pruned weights may regrow
    "plus-ramp-t8": {**PLUS_OFF, "ramp": 0.5, "temperature": 8.0},  # softer teacher outputs
    "plus-ramp-dense-gradient-t8": {**PLUS_OFF, "ramp": 0.5, "dense_gradient": True, "temperature": 8.0},
    "plus-ramp-t16": {**PLUS_OFF, "ramp": 0.5, "temperature": 16.0},
    "plus-ramp-lr0.02": {**PLUS_OFF, "ramp": 0.5, "lr": 0.02},  # weights adapt to a moving mask: a larger step?
    "plus-ramp-lr0.08": {**PLUS_OFF, "ramp": 0.5, "lr": 0.08},  # every loss's step as large as block weight 8's
    "plus-ramp-blocks0.5": {**PLUS_OFF, "ramp": 0.5, "block_weight": 0.5},  # the blocks' MSE against the KL
    "plus-ramp-blocks2": {**PLUS_OFF, "ramp": 0.5, "block_weight": 2.0},
    "plus-ramp-blocks4": {**PLUS_OFF, "ramp": 0.5, "block_weight": 4.0},
    "plus-ramp-blocks8": {**PLUS_OFF, "ramp": 0.5, "block_weight": 8.0},
    "plus-ramp-blocks16": {**PLUS_OFF, "ramp": 0.5, "block_weight": 16.0},
    "plus-ramp-blocks32": {**PLUS_OFF, "ramp": 0.5, "block_weight": 32.0},
    # the block weight measured per network: the blocks' gradient at the first step as large as the KL's (or x0.5, x2)
    "plus-ramp-balanced": {**PLUS_OFF, "ramp": 0.5, "block_weight": "auto"},
    "plus-ramp-balanced0.5": {**PLUS_OFF, "ramp": 0.5, "block_weight": "auto", "block_balance": 0.5},
    "plus-ramp-balanced2": {**PLUS_OFF, "ramp": 0.5, "block_weight": "auto", "block_balance": 2.0},
    # the blocks' gradient at FCPTS's size (weight 8 at an eighth of the rate) with the KL's eight times smaller:
    # is block weight 8 a balance between the losses or a larger step?
    "plus-ramp-blocks8-lr0.00125": {**PLUS_OFF, "ramp": 0.5, "block_weight": 8.0, "lr": 0.00125},
    "plus-ste-projected": {**PLUS_OFF, "threshold_grad": "ste", "projection": True},
    "plus-relative-blocks": {**PLUS_OFF, "relative_blocks": True},
    "plus-dynamic": {**PLUS_OFF, "dense_gradient": True, "projection": True},
    "no-augment": {},  # the calibration images as they are (the data, not an option, differs: DATA_VARIANTS)
    "resized-crop": {},  # random resized crop + flip instead of pad-crop + flip
}
DATA_VARIANTS: dict[str, dict[str, bool | str]] = {
    "no-augment": {"augment": False},
    "resized-crop": {"augment": "resized-crop"},
}  # how a variant changes the calibration data


def _reconstruction(row: dict) -> str:
    """The reconstruction loss a row ran with (older rows carry it in their provenance note)."""
    if "reconstruction" in row["options"]:
        return row["options"]["reconstruction"]
    if "resolved_options" in row:
        return row["resolved_options"]["reconstruction"]
    return "kl" if "reconstruction=kl" in row.get("provenance_note", "") else "mse-blocks"


def summarize(paths: list[str]) -> str:
    """A markdown table of finished rows (for the README), straight from the JSON lines."""
    rows = [
        "| model | variant | reconstruction | lr | iterations | top-1 | sparsity before exact step | wall s "
        "| threads |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for path in paths:
        for r in read_json_lines(path):
            lr = r["options"].get("lr", 0.01)
            rows.append(
                f"| {r['model']} | {r['variant']} | {_reconstruction(r)} | {lr} | {r['iterations']} | "
                f"{r['top1']:.2f} | {r['sparsity_before_exact_step']:.4f} | {r['wall_s']:.0f} | "
                f"{r['device'].split(', ')[-1].split()[0]} |"
            )
    return "\n".join(rows)


def summarize_seeds(paths: list[str]) -> str:
    """A markdown table of variants run with several seeds: mean and sample sd of top-1, the mean difference
    to `default` over the seeds both ran (paired: a seed fixes the images and batches), and the mean sparsity
    the learned thresholds held before the exact-target step (how far that step had to move them)."""
    rows = [r for path in paths for r in read_json_lines(path)]
    groups: dict[tuple, dict[int, dict]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["iterations"], r["variant"]), {})[r["seed"]] = r
    out = [
        "| model | iterations | variant | seeds | top-1 mean ± sd | vs default (paired) | per seed "
        "| sparsity before exact step |",
        "|---|---:|---|---:|---:|---:|---|---:|",
    ]
    for (model, iterations, variant), by_seed in groups.items():
        seeds = sorted(by_seed)
        top1 = [by_seed[k]["top1"] for k in seeds]
        sd = f" ± {statistics.stdev(top1):.2f}" if len(top1) > 1 else ""
        base = groups.get((model, iterations, "default"), {})
        paired = [by_seed[k]["top1"] - base[k]["top1"] for k in seeds if k in base]
        diff = f"{statistics.mean(paired):+.2f}" if paired and variant != "default" else ""
        per_seed = ", ".join(f"{t:.2f}" for t in top1)
        before = statistics.mean(by_seed[k]["sparsity_before_exact_step"] for k in seeds)
        out.append(
            f"| {model} | {iterations} | {variant} | {len(top1)} | {statistics.mean(top1):.2f}{sd} | {diff} | "
            f"{per_seed} | {before:.4f} |"
        )
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--summarize", nargs="+", metavar="JSONL", help="print a markdown table of these files and exit")
    p.add_argument("--summarize-seeds", nargs="+", metavar="JSONL", help="the same, mean ± sd over seeds per variant")
    p.add_argument("--dataset", default="cifar10", choices=["cifar10", "cifar100"])
    p.add_argument("--model", default="resnet56")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--iterations", type=int, nargs="+", default=[400])
    p.add_argument("--variants", nargs="+", default=["default"], choices=sorted(VARIANTS))
    p.add_argument("--n-calibration", type=int, default=1024)
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="each seed draws other images and batches")
    p.add_argument("--data-root")
    p.add_argument("--out")
    args = p.parse_args()
    if args.summarize or args.summarize_seeds:
        print(summarize(args.summarize) if args.summarize else summarize_seeds(args.summarize_seeds))
        return
    if not args.out:
        p.error("--out is required")

    git_commit()  # pin the commit of the code that is about to run
    root = resolve_data_root(args.data_root)
    x_test, y_test = load_cifar(root, args.dataset, "test")
    x_eval, y_eval = normalize_cifar(x_test), torch.as_tensor(y_test)
    x_train, _ = load_cifar(root, args.dataset, "train")
    weights = default_cifar_weights(root, args.dataset, args.model)
    out = Path(args.out)
    done = {(r["variant"], r["iterations"], r["seed"]) for r in read_json_lines(out, missing_ok=True)}

    for seed in args.seeds:
        idx = calibration_indices(len(x_train), args.n_calibration, seed)
        for iterations in args.iterations:
            for variant in args.variants:
                if (variant, iterations, seed) in done:
                    print(f"[skip] {variant} x {iterations} seed {seed}")
                    continue
                run_variant(args, variant, iterations, seed, x_train[idx], weights, x_eval, y_eval, out)


def run_variant(args, variant, iterations, seed, images, weights, x_eval, y_eval, out: Path) -> None:
    """One FCPTS run of the variant; its row appended to `out`."""
    data: dict[str, bool | str] = {"augment": True, **DATA_VARIANTS.get(variant, {})}
    calib = CifarCalibration(images, **data)
    dense = cifar_resnet(args.model, 100 if args.dataset == "cifar100" else 10)
    load_checkpoint(dense, weights)
    t = time.perf_counter()
    options = dict(VARIANTS[variant])
    method = get_method(options.pop("method", "fcpts"))
    model, report = method(dense, calib, args.target, iterations=iterations, seed=seed, progress=False, **options)
    wall = time.perf_counter() - t
    metrics = classify(model, x_eval, y_eval)
    row = {
        "dataset": args.dataset,
        "model": args.model,
        "target": args.target,
        "data": data,
        "variant": variant,
        "options": VARIANTS[variant],
        "resolved_options": {k: v for k, v in report.options.items() if k not in ("progress", "checkpoint")},
        "iterations": iterations,
        "top1": metrics["top1"],
        "top5": metrics["top5"],
        "achieved_sparsity": report.achieved_sparsity,
        "sparsity_before_exact_step": report.extra["sparsity_before_exact_step"],
        "final_rec_loss": report.history[-1]["rec"] if report.history else None,
        **({"block_weight": report.extra["block_weight"]} if "block_weight" in report.extra else {}),
        "wall_s": round(wall, 1),
        "n_calibration": len(images),
        "seed": seed,
        "device": device_description(),
        "git_commit": git_commit(),
    }
    append_json_line(out, row)
    print(
        f"{variant:14s} it={iterations:5d} seed {seed} top1={metrics['top1']:.2f} "
        f"sp={report.achieved_sparsity:.6f} pre={row['sparsity_before_exact_step']:.4f} {wall:.0f}s",
        flush=True,
    )


if __name__ == "__main__":
    main()
