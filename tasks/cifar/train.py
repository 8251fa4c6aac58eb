"""Dense CIFAR training: the suite's own CIFAR-100 (or CIFAR-10) ResNets, where no pretrained ones exist.

    python -m tasks.cifar.train --dataset cifar100 --model resnet32 --epochs 40

He et al. 2016 / akamaster's recipe shortened for a CPU: Nesterov SGD, batch 128, lr 0.1 x batch/128 after a
one-epoch warm-up then cosine to 0, weight decay 5e-4, pad-4 crop + flip. Resumable: batches depend only on
(seed, step). Writes `results/weights/<dataset>/<model>.th` (akamaster's format) and its training record, which
`tasks.cifar` finds by default; the accuracy is the final model's (no selection on test data).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.cifar import DATASETS, MODELS
from tasks.grid import cli
from tasks.grid.help import add_training_args, command_parser, default_device

if TYPE_CHECKING:  # the work imports torch when it runs: --help needs none of it
    import torch


def augment_batch(x_uint8: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(B, 32, 32, 3) uint8 -> normalised (B, 3, 32, 32): zero-padded random 32x32 crop and flip."""
    import torch
    import torch.nn.functional as F

    from tasks.grid.cifar_data import normalize_cifar

    b = x_uint8.shape[0]
    padded = F.pad(x_uint8.permute(0, 3, 1, 2), (4, 4, 4, 4))
    dy, dx = torch.randint(0, 9, (2, b), generator=generator)
    flip = torch.rand(b, generator=generator) < 0.5
    crops = torch.stack([padded[i, :, dy[i] : dy[i] + 32, dx[i] : dx[i] + 32] for i in range(b)])
    crops = torch.where(flip.view(b, 1, 1, 1), crops.flip(3), crops)
    return normalize_cifar(crops.permute(0, 2, 3, 1))


def train(args: argparse.Namespace) -> dict:
    import torch
    import torch.nn.functional as F

    from fcpts.core.calibration import to_device
    from fcpts.core.io import save_torch_atomic
    from fcpts.core.options import resolve_device
    from tasks.grid import training
    from tasks.grid.cifar_data import CIFAR_CLASSES, load_cifar, normalize_cifar
    from tasks.grid.cifar_models import cifar_resnet
    from tasks.grid.evaluate import classify
    from tasks.grid.paths import CIFAR_DATA, resolve_data_root
    from tasks.grid.records import device_description

    root = resolve_data_root(args.data_root, not args.download, CIFAR_DATA)
    x_train, y_train = map(torch.as_tensor, load_cifar(root, args.dataset, "train", args.download))
    x_test, y_test = load_cifar(root, args.dataset, "test", args.download)
    if args.train_limit:
        x_train, y_train = x_train[: args.train_limit], y_train[: args.train_limit]
    if args.eval_limit:
        x_test, y_test = x_test[: args.eval_limit], y_test[: args.eval_limit]
    x_eval, y_eval = normalize_cifar(x_test), torch.as_tensor(y_test)

    steps_per_epoch, total = training.epoch_steps(len(x_train), args.batch_size, args.epochs)
    lr = args.lr if args.lr is not None else 0.1 * args.batch_size / 128
    recipe = {
        "dataset": args.dataset,
        "model": args.model,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": lr,
        "momentum": 0.9,
        "nesterov": True,
        "weight_decay": args.weight_decay,
        "warmup_steps": steps_per_epoch,
        "schedule": "linear warm-up 1 epoch, cosine to 0",
        "augment": "pad4 random crop + horizontal flip",
        "seed": args.seed,
        "n_train": len(x_train),
        "steps": total,
    }
    fingerprint = training.recipe_fingerprint(recipe)

    device = resolve_device(default_device(args.device))
    torch.manual_seed(args.seed)
    model = cifar_resnet(args.model, CIFAR_CLASSES[args.dataset])
    # before the optimiser sees its parameters; torch's stub lacks this (device, memory_format=) overload
    model = model.to(device, memory_format=torch.channels_last)  # type: ignore[call-overload]
    opt, sched = training.sgd_warmup_cosine(model, lr, args.weight_decay, steps_per_epoch, total, nesterov=True)

    out_dir = Path(args.results_dir) / args.dataset
    ckpt = Path(args.checkpoint_dir) / "train" / args.dataset / f"{args.model}-{fingerprint}.pt"

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = training.batch_indices(len(x_train), step, args.batch_size, args.seed)
        x = augment_batch(x_train[idx], torch.Generator().manual_seed(args.seed * 7_919 + step))
        return to_device(x, device).contiguous(memory_format=torch.channels_last), to_device(y_train[idx], device)

    def step_loss(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        return loss, torch.stack([loss.detach().double() * len(y), (logits.argmax(1) == y).sum().double()])

    def summary(sums: list[float], steps: int) -> dict:
        seen = steps * args.batch_size  # whole batches only
        return {"train_loss": round(sums[0] / seen, 5), "train_top1": round(100 * sums[1] / seen, 3)}

    run = training.TrainingState(ckpt, fingerprint, model, opt, sched)
    wall_s = training.train_epochs(
        run,
        args,
        steps_per_epoch,
        total,
        f"train {args.dataset}/{args.model}",
        batches=lambda start: map(batch, range(start, total)),
        step_loss=step_loss,
        summary=summary,
        test_at=lambda epoch: (
            classify(model, x_eval, y_eval) if epoch % args.eval_every == 0 or epoch == args.epochs else None
        ),
    )
    final = classify(model, x_eval, y_eval)
    weights = out_dir / f"{args.model}.th"
    state_dict = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_torch_atomic(
        {
            "state_dict": state_dict,
            "best_prec1": final["top1"],
            "epochs": args.epochs,
            "recipe_fingerprint": fingerprint,
        },
        weights,
    )
    trained = {"task": "train", "dataset": args.dataset, "model": args.model}
    where = {"device": device_description(device), "data_root": str(root)}
    score = f"top-1 {final['top1']:.2f} top-5 {final['top5']:.2f}"
    return training.write_record(weights, trained, recipe, final, len(y_eval), run.history, wall_s, where, score)


def parse_args(argv=None) -> argparse.Namespace:
    p = command_parser("python -m tasks.cifar.train", __doc__)
    p.add_argument("--dataset", default="cifar100", choices=sorted(DATASETS))
    p.add_argument("--model", "--models", dest="model", default="resnet32", choices=sorted(MODELS))
    p.add_argument("--data-root", help="folder with CIFAR (default: $FCPTS_DATA_ROOT, then ../shared/data)")
    p.add_argument("--download", action="store_true")
    add_training_args(
        p,
        epochs=40,
        batch_size=128,
        eval_every=5,
        lr_help="peak learning rate (default 0.1 x batch/128)",
        epochs_help="40 fits a CPU (hours); the classic schedule is 160-200",
    )
    return p.parse_args(argv)


main = cli.script_main(parse_args, train)


if __name__ == "__main__":
    sys.exit(main())
