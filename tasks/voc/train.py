"""Dense detector training: the suite's own SSD for the CPU substitute of PASCAL VOC (no VOC checkpoint here).

    python -m tasks.voc.make_set --out data/voc-cifar
    python -m tasks.voc.train --data-root data/voc-cifar --model mb2-ssd-lite --image-size 160 --epochs 60

pytorch-ssd's train_ssd.py recipe, from scratch (`--base-net PATH`: a backbone state dict in its `base_net`
layout): SSD augmentation (photometric distortion, zoom-out up to `--max-zoom-out`, SSD's IoU crop, flip), priors
matched at IoU 0.5 without difficult boxes, MultiBox loss, SGD with a one-epoch warm-up to 0.05 x batch/32 and
cosine to 0. Resumable: batches depend only on (seed, step). Writes `results/weights/<dataset>/<model>-<size>.pth`
and its training record, which `tasks.voc` finds by default; the test mAP is observed, never used to select.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tasks.grid import cli
from tasks.grid.help import add_training_args, at_least, command_parser, default_device
from tasks.voc import MODELS


def train(args: argparse.Namespace) -> dict:
    from collections.abc import Iterable
    from dataclasses import asdict
    from functools import partial
    from typing import Any

    import torch
    from torch.utils.data import DataLoader

    from fcpts.core.calibration import to_device
    from fcpts.core.io import save_torch_atomic
    from fcpts.core.options import resolve_device
    from tasks.grid import training
    from tasks.grid.paths import resolve_data_root
    from tasks.grid.records import device_description
    from tasks.grid.weights import load_checkpoint
    from tasks.voc.data import DetectionImages, DetectionTrainSet, VOCDetection, batch_for_step, one_thread, voc2007_dir
    from tasks.voc.grid import evaluate_detector  # the task's own metric
    from tasks.voc.ssd import SSDConfig, create_ssd, multibox_loss

    folder = voc2007_dir(resolve_data_root(args.data_root))
    trainval = VOCDetection(folder, args.train_split, limit=args.train_limit)
    test = VOCDetection(folder, "test", limit=args.eval_limit)
    dataset = (trainval.manifest or {}).get("dataset", "voc2007")
    num_classes = len(trainval.class_names)
    torch.manual_seed(args.seed)
    model = create_ssd(args.model, num_classes)
    base_net = load_checkpoint(model.base_net, args.base_net)["sha256"] if args.base_net else None
    device = resolve_device(default_device(args.device))
    # before the optimiser sees its parameters; torch's stub lacks this (device, memory_format=) overload
    model = model.to(device, memory_format=torch.channels_last)  # type: ignore[call-overload]
    config = SSDConfig.for_model(model, args.image_size)
    train_set = DetectionTrainSet(trainval, config, augment=not args.no_augment, max_zoom_out=args.max_zoom_out)
    eval_images = DetectionImages(test, args.image_size)

    steps_per_epoch, total = training.epoch_steps(len(train_set), args.batch_size, args.epochs)
    lr = args.lr if args.lr is not None else 0.05 * args.batch_size / 32
    recipe = {
        "dataset": dataset,
        "model": args.model,
        "image_size": args.image_size,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": lr,
        "momentum": 0.9,
        "weight_decay": args.weight_decay,
        "warmup_steps": steps_per_epoch,
        "schedule": "linear warm-up 1 epoch, cosine to 0",
        "augment": "none" if args.no_augment else f"photometric, zoom-out <= {args.max_zoom_out}, SSD IoU crop, flip",
        "loss": "multibox: CE with 3:1 hard negatives + smooth L1, / positives",
        "match_iou": config.match_iou,
        "seed": args.seed,
        "n_train": len(train_set),
        "train_split": args.train_split,
        "steps": total,
        "base_net": base_net,
        "ssd_config": asdict(config),
    }
    fingerprint = training.recipe_fingerprint(recipe)
    opt, sched = training.sgd_warmup_cosine(model, lr, args.weight_decay, steps_per_epoch, total)

    name = f"{args.model}-{args.image_size}"
    out_dir = Path(args.results_dir) / dataset
    ckpt = Path(args.checkpoint_dir) / "train_ssd" / dataset / f"{name}-{fingerprint}.pt"

    def evaluate() -> dict:
        m = evaluate_detector(model, test, eval_images, config, workers=args.workers)
        return {"map50": round(m["map50"], 3), "ap50": m["ap50_per_class"]}

    def step_loss(batch: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        x, targets, labels = (to_device(t, device) for t in batch)
        logits, regression = model(x.contiguous(memory_format=torch.channels_last))
        loc, cls = multibox_loss(logits, regression, labels, targets)
        return loc + cls, torch.stack([loc.detach(), cls.detach()]).double()

    def batches(start: int) -> Iterable:
        # each step's batch made by a worker ahead of time when --workers asks (the same batches); a range indexes
        # as a map-style dataset does, which torch's stub does not say
        steps: Any = range(start, total)
        make = partial(batch_for_step, train_set, batch_size=args.batch_size, seed=args.seed)
        init = one_thread if args.workers else None
        return DataLoader(steps, batch_size=None, collate_fn=make, num_workers=args.workers, worker_init_fn=init)

    run = training.TrainingState(ckpt, fingerprint, model, opt, sched)
    wall_s = training.train_epochs(
        run,
        args,
        steps_per_epoch,
        total,
        f"train {dataset}/{name}",
        batches=batches,
        step_loss=step_loss,
        summary=lambda sums, steps: {"loc_loss": round(sums[0] / steps, 5), "cls_loss": round(sums[1] / steps, 5)},
        test_at=lambda epoch: evaluate() if epoch % args.eval_every == 0 and epoch < args.epochs else None,
    )
    final = evaluate()
    model = model.to("cpu", memory_format=torch.contiguous_format)
    weights = out_dir / f"{name}.pth"
    save_torch_atomic({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
    trained = {"task": "train_ssd", "dataset": dataset, "model": args.model, "image_size": args.image_size}
    where = {"device": device_description(device), "workers": args.workers, "data_root": str(folder)}
    score = f"mAP@0.5 (VOC07) {final['map50']:.2f}"
    return training.write_record(weights, trained, recipe, final, len(test), run.history, wall_s, where, score)


def parse_args(argv=None) -> argparse.Namespace:
    p = command_parser("python -m tasks.voc.train", __doc__)
    p.add_argument("--data-root", help="VOC-layout folder (holding VOCdevkit/VOC2007), e.g. data/voc-cifar")
    p.add_argument("--model", "--models", dest="model", default="mb2-ssd-lite", choices=sorted(MODELS))
    p.add_argument("--image-size", type=int, default=160, help="square input (300: pytorch-ssd's)")
    p.add_argument("--max-zoom-out", type=float, default=2.0, help="largest zoom-out (SSD's expand; pytorch-ssd 4)")
    p.add_argument("--no-augment", action="store_true")
    p.add_argument("--base-net", help="state dict for base_net (pytorch-ssd layout), e.g. an ImageNet backbone")
    p.add_argument("--train-split", default="trainval")
    p.add_argument(
        "--workers", type=at_least(int, 0), default=0, help="processes preparing batches ahead (same batches)"
    )
    add_training_args(
        p, epochs=60, batch_size=32, eval_every=10, lr_help="peak learning rate (default 0.05 x batch/32)"
    )
    return p.parse_args(argv)


main = cli.script_main(parse_args, train)


if __name__ == "__main__":
    sys.exit(main())
