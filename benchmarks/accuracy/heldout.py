"""Choose a method's settings for the ImageNet `cpu` profile without the evaluation images: the method calibrates
on part of train/ and is scored on the train/ images it did not see.

train/ holds one labelled image per class; a seeded `--held-out` of them never enters calibration and is
the tuning set (top-1 against the labels, and top-1 agreement with the dense model, which varies less on
few images). All the rest is the calibration set (the task's `cpu` profile asks for 1,000 images and so takes
all of train/). val/ is not read. Every finished variant (method, target, options) is one JSON line in
`--out` (resume: variants already there are skipped), with provenance.

    python -m benchmarks.accuracy.heldout --method fcpts --option lr=0.02 --target 0.7 \
        --out results/ablations/lite0-heldout.jsonl
    python -m benchmarks.accuracy.heldout --method fcpts-plus --option lr=0.02 ramp=0 erk_power=0.5 --target 0.5 0.7 \
        --crop-scale 0.35 --out results/ablations/lite0-heldout.jsonl
    python -m benchmarks.accuracy.heldout --method pot-l2norm --option iterations=1000 --target 0.5 \
        --out results/ablations/lite0-heldout.jsonl

(results/ablations/lite0-lr-heldout.jsonl holds the learning-rate rows of FCPTS, written before the method and
options became arguments: `lr` at the top level there.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Subset

from fcpts import get_method
from fcpts.core.io import append_json_line, read_json_lines
from tasks.grid.data import calibration_indices, resolve_data_root
from tasks.grid.profiles import parse_option_pairs
from tasks.grid.records import command_line, device_description, git_commit
from tasks.imagenet.data import ImageFiles, imagenet_dir, list_split
from tasks.imagenet.models import architecture, preprocessing, pretrained


@torch.no_grad()
def predictions(model: torch.nn.Module, dataset) -> torch.Tensor:
    model.eval()
    return torch.cat([model(x).argmax(1) for x, _ in DataLoader(dataset, batch_size=50)])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="efficientnet_lite0")
    p.add_argument("--method", default="fcpts")
    p.add_argument("--option", nargs="+", default=[], metavar="KEY=VALUE", help="the method's options, e.g. lr=0.02")
    p.add_argument("--target", type=float, nargs="+", default=[0.7])
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--held-out", type=int, default=300, help="train/ images kept out of calibration to score on")
    p.add_argument(
        "--crop-scale", type=float, default=0.08, help="smallest area of the calibration random resized crop (0.08-1)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if not 0 < args.crop_scale <= 1:
        p.error(f"--crop-scale is a share of the image's area, in (0, 1]; got {args.crop_scale}")
    options = parse_option_pairs(args.option)
    method = get_method(args.method)  # an unknown method fails here, before any image is read

    commit = git_commit()  # pin the commit of the code that is about to run
    folder = imagenet_dir(resolve_data_root(args.data_root))
    train = list_split(folder, "train")
    held = set(calibration_indices(len(train), args.held_out, args.seed + 1))
    calib_idx = [i for i in range(len(train)) if i not in held]  # all the rest, as the task takes all of train/
    dense, weights_info = pretrained(args.model, None)
    eval_tf, calib_tf, _ = preprocessing(args.model, dense, crop_scale=(args.crop_scale, 1.0))
    # Augmented for the training-loop methods, the evaluation transform for the others, as the task does.
    calibration = Subset(ImageFiles(train, calib_tf if method.trains else eval_tf, cache=True), calib_idx)
    tuning = Subset(ImageFiles(train, eval_tf), sorted(held))
    labels = torch.tensor([train[i][1] for i in sorted(held)])

    def fresh() -> torch.nn.Module:
        model = architecture(args.model)
        model.load_state_dict(dense.state_dict())
        return model

    dense_pred = predictions(fresh(), tuning)
    crop_scale = args.crop_scale if method.trains else None  # the others see no crop

    def key(method_name, target, opts, crop_scale) -> tuple:
        return (method_name, target, json.dumps(opts, sort_keys=True), crop_scale)

    done = {
        # rows written before the option ran at the default crop, 0.08
        key(r.get("method"), r["target"], r.get("options"), r.get("calibration_crop_scale", 0.08))
        for r in read_json_lines(args.out, missing_ok=True)
    }
    for target in args.target:
        if key(args.method, target, options, crop_scale) in done:
            print(f"[skip] {args.method} {target} {options} crop scale {crop_scale}")
            continue
        t = time.perf_counter()
        # The loop budget is the training-loop methods'; others take theirs as options (POT: iterations=1000).
        budget = {"iterations": args.iterations, "batch_size": args.batch_size} if method.trains else {}
        model, report = method(fresh(), calibration, target, **budget, seed=args.seed, progress=False, **options)
        wall = time.perf_counter() - t
        pred = predictions(model, tuning)
        row = {
            "model": args.model,
            "method": args.method,
            "target": target,
            "options": options,
            "iterations": args.iterations if method.trains else None,
            "batch_size": args.batch_size if method.trains else None,
            "tuning_top1": round(100.0 * float((pred == labels).float().mean()), 2),
            "agreement_with_dense": round(100.0 * float((pred == dense_pred).float().mean()), 2),
            "dense_tuning_top1": round(100.0 * float((dense_pred == labels).float().mean()), 2),
            "achieved_sparsity": report.achieved_sparsity,
            "method_extra": report.extra,  # e.g. the exponent erk_power="auto" chose
            "n_calibration": len(calib_idx),
            "calibration_crop_scale": crop_scale,
            "n_tuning": len(held),
            "tuning_indices_sha256": hashlib.sha256(",".join(map(str, sorted(held))).encode()).hexdigest()[:16],
            "data": {"root": str(folder), "split": "train", "val_read": False},
            "weights": weights_info,
            "seed": args.seed,
            "wall_s": round(wall, 1),
            "device": device_description(),
            "git_commit": commit,
            "command": command_line(),
        }
        append_json_line(args.out, row)
        print(
            f"{args.method} {target} {options}: tuning top-1 {row['tuning_top1']:.2f} "
            f"(dense {row['dense_tuning_top1']:.2f}), "
            f"agreement {row['agreement_with_dense']:.2f}, sparsity {report.achieved_sparsity:.6f}, {wall:.0f}s",
            flush=True,
        )


if __name__ == "__main__":
    main()
