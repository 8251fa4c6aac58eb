"""The authors' released FCPTS (ModelTC/FCPTS + ModelTC/msbench) beside ours, on identical inputs.

    git clone https://github.com/ModelTC/FCPTS.git ../ext/FCPTS
    git clone https://github.com/ModelTC/msbench.git ../ext/msbench
    pip install yacs   # their train/config.py needs it
    python -m benchmarks released-fcpts --release ../ext/FCPTS --msbench ../ext/msbench \
        --model resnet32 --sparsity 0.9 --seed 0 --epochs 100

Their code never enters this repository: it is imported from the checkout given, and the run is skipped (exit 0,
one line) when that checkout is missing. Each side gets the same inputs: our dense CIFAR-10 weights, our seeded
1,024 calibration images and, step by step, the very same augmented batch (`Calibration(...).batch(step)`), the
released code's budget (epochs of 16 batches of 64, one warm-up epoch, SGD lr 0.04 x 64/256, weight decay 3e-4,
none on thresholds: run.sh) and the CIFAR-10 test set for top-1.

Their models/resnet_cifar.py is the 4-stage 64..512-channel ResNet of CIFAR-100 work and has no ResNet-32/56
(3 stages of 16/32/64 channels): `release_keys` maps our names onto theirs, and `fits_release_model` shows the
shapes do not fit, so our model runs through their msbench sparsity wrappers and their training loop instead.

Their main.py is run as released, function for function (`main(config)`, `train_one_epoch`, their ERK start,
score init, optimiser, timm scheduler, `validate`), with the run-time patches of `PATCHES` (never edits of their
files), listed in every record.

Records: results/released/<dataset>-<model>-s<percent>-seed<seed>-e<epochs>-<side>.json, one per side (release,
ours-release, ours-default): top-1/top-5, achieved sparsity, whether it hit the target to one weight, wall time
(the release's includes its own pass over the test set in `validate`; ours is the method alone), seed, their
commits, the command, and a per-step trace (reconstruction loss, control loss, global sparsity of
the thresholds) for finding where the sides part.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from fcpts.core.io import write_text_atomic
from tasks.grid.layout import read_reference
from tasks.grid.records import device_description, provenance

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "results" / "released"
CLONE_HINT = (
    "git clone https://github.com/ModelTC/FCPTS.git and https://github.com/ModelTC/msbench.git, "
    "then pass --release and --msbench"
)
STEPS_PER_EPOCH = 16  # their loader: 1,024 images in batches of 64, drop_last
SIDES = ("release", "ours-release", "ours-default")
# our FCPTS options that reproduce run.sh (METHOD.md): histogram bridge, thresholds moved by the control loss only,
# teacher in train mode, KL (T=4) on the output only (run.sh passes --KD_loss KL, not --use_intel_layer_loss)
RELEASE_MODE = {
    "bridge": "histogram",
    "threshold_grad": "control-only",
    "teacher_mode": "train",
    "reconstruction": "kl",
    "control_loss": "abs",
    "control_weight": 1.0,
}
PATCHES = [
    "msbench: fake_sparse/__init__.py does not export FCPTSFakeSparse, which prepare.py imports: set "
    "msbench.fake_sparse.FCPTSFakeSparse = fake_sparse.sparse_base.FCPTSFakeSparse before importing it",
    "train/config.py: EXTRA.KD_loss is never declared nor copied from --KD_loss, so train_one_epoch's "
    "config.EXTRA.KD_loss raises: set config.EXTRA.KD_loss = 'KL' (run.sh's value)",
    "CUDA only: Tensor.cuda / Module.cuda made no-ops, torch.cuda.synchronize a no-op, "
    "torch.cuda.max_memory_allocated 0 (the run is on CPU)",
    "torch.distributed: a one-process gloo group stands in for run.sh's torch.distributed.launch "
    "(validate's all_reduce)",
    "data.build_loader replaced: our 1,024 seeded calibration images, the same batch per step as our side, "
    "and our CIFAR-10 test set (theirs samples its own 1,024 images with python's random)",
    "models.create_model_by_name replaced: our CIFAR ResNet (their resnet_cifar.py has no ResNet-32/56)",
    "__main__ replicated, not run: seed_all(SEED) (theirs hard-codes 1000), lr scaled 0.04 x 64 / 256 as their "
    "__main__ does, logger set; save_checkpoint made a no-op (nothing written)",
]


def release_keys(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our CIFAR ResNet's parameter names in their models/resnet_cifar.py naming (conv1 -> conv1.0, layerK ->
    conv{K+1}_x, convN/bnN of a block -> residual_function.{0,1,3,4}, shortcut.0/1 kept, linear -> fc)."""
    block = {"conv1": "residual_function.0", "bn1": "residual_function.1", "conv2": "residual_function.3"}
    block["bn2"] = "residual_function.4"
    out = {}
    for key, value in state_dict.items():
        parts = key.split(".")
        if parts[0] in ("conv1", "bn1"):
            parts = ["conv1", "0" if parts[0] == "conv1" else "1", *parts[1:]]
        elif parts[0] == "linear":
            parts = ["fc", *parts[1:]]
        elif parts[0].startswith("layer"):
            stage = f"conv{int(parts[0][5:]) + 1}_x"
            inner = block.get(parts[2], parts[2])
            parts = [stage, parts[1], *inner.split("."), *parts[3:]]
        out[".".join(parts)] = value
    return out


def fits_release_model(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> str | None:
    """None when our state dict, renamed, loads into theirs key for key and shape for shape; else why not."""
    mapped = release_keys(ours)
    missing = sorted(set(theirs) - set(mapped))
    extra = sorted(set(mapped) - set(theirs))
    wrong = [k for k in mapped.keys() & theirs.keys() if mapped[k].shape != theirs[k].shape]
    if not (missing or extra or wrong):
        return None
    parts = [f"{len(missing)} of their keys missing"] if missing else []
    parts += [f"{len(extra)} of ours unknown to theirs"] if extra else []
    if wrong:
        k = sorted(wrong)[0]
        parts.append(
            f"{len(wrong)} shapes differ (e.g. {k}: ours {tuple(mapped[k].shape)}, theirs {tuple(theirs[k].shape)})"
        )
    return "; ".join(parts)


def missing_checkout(release: str | None, msbench: str | None) -> str | None:
    """Why the released code cannot run from these paths, or None when both checkouts are there."""
    if not release or not (Path(release) / "main.py").is_file():
        return f"no FCPTS checkout at {release!r} (needs main.py)"
    if not msbench or not (Path(msbench) / "msbench" / "scheduler").is_dir():
        return f"no msbench checkout at {msbench!r} (needs msbench/scheduler)"
    return None


def git_commit(path: str) -> str | None:
    r = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or None if r.returncode == 0 else None


# ---------------------------------------------------------------- inputs shared by every side


def load_inputs(args) -> SimpleNamespace:
    from fcpts.core.calibration import Calibration
    from tasks.cifar.data import CifarCalibration
    from tasks.grid.cifar_data import load_cifar, normalize_cifar
    from tasks.grid.data import CIFAR_DATA, calibration_subset, resolve_data_root
    from tasks.grid.weights import default_cifar_weights, load_checkpoint

    root = resolve_data_root(args.data_root, True, CIFAR_DATA, "")
    x_train, _ = load_cifar(root, "cifar10", "train")
    x_test, y_test = load_cifar(root, "cifar10", "test")
    if args.eval_limit:
        x_test, y_test = x_test[: args.eval_limit], y_test[: args.eval_limit]
    idx, info = calibration_subset(len(x_train), 1024, args.seed, "train", "crop4+flip")
    dataset = CifarCalibration(x_train[idx], augment=True)
    weights = default_cifar_weights(root, "cifar10", args.model)
    probe = dense_model(args.model)
    weights_info = load_checkpoint(probe, weights)
    return SimpleNamespace(
        dataset=dataset,
        calibration=info,
        batches=Calibration(dataset, 64, args.seed),  # step -> the batch both sides train on
        weights=weights,
        weights_info=weights_info,
        state_dict=probe.state_dict(),
        x_eval=normalize_cifar(x_test),
        y_eval=torch.as_tensor(y_test),
    )


def dense_model(name: str) -> nn.Module:
    from tasks.grid.cifar_models import cifar_resnet

    return cifar_resnet(name, 10)


def global_sparsity(masks: dict[str, torch.Tensor]) -> tuple[float, int, int]:
    zeros = sum(int((m == 0).sum()) for m in masks.values())
    total = sum(m.numel() for m in masks.values())
    return zeros / total, zeros, total


# ---------------------------------------------------------------- their side


@contextlib.contextmanager
def cpu_only():
    """Their `.cuda()` calls and CUDA-only queries as no-ops for the length of the run."""
    saved = (torch.Tensor.cuda, nn.Module.cuda, torch.cuda.synchronize, torch.cuda.max_memory_allocated)
    torch.Tensor.cuda = lambda self, *a, **k: self
    nn.Module.cuda = lambda self, *a, **k: self
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.max_memory_allocated = lambda *a, **k: 0
    try:
        yield
    finally:
        torch.Tensor.cuda, nn.Module.cuda, torch.cuda.synchronize, torch.cuda.max_memory_allocated = saved


class SameBatches:
    """Their train loader: epoch e yields our steps 16e..16e+15 as (images, dummy labels); `sampler.set_epoch`
    chooses the epoch, as their DistributedSampler's does."""

    def __init__(self, batches):
        self.batches, self.epoch = batches, 0
        self.sampler = self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return STEPS_PER_EPOCH

    def __iter__(self):
        for i in range(STEPS_PER_EPOCH):
            x = self.batches.batch(self.epoch * STEPS_PER_EPOCH + i)
            yield x, torch.zeros(len(x), dtype=torch.long)


def import_release(release: str, msbench: str):
    for p in (msbench, release):
        if p not in sys.path:
            sys.path.insert(0, p)
    import msbench.fake_sparse as fake_sparse
    import msbench.fake_sparse.sparse_base as sparse_base

    fake_sparse.FCPTSFakeSparse = sparse_base.FCPTSFakeSparse  # PATCHES[0]
    spec = importlib.util.spec_from_file_location("fcpts_release_main", Path(release) / "main.py")
    assert spec is not None and spec.loader is not None  # a .py file's path always gives a spec and its loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def release_config(rm, args, target: float, output: str):
    """run.sh's options, for CIFAR at 32x32 and our budget."""
    argv = ["main.py", "--arch", args.model, "--batch-size", "64", "--output", output, "--tag", "released",
            "--KD_loss", "KL", "--opts", "TRAIN.EPOCHS", str(args.epochs), "TRAIN.BASE_LR", "0.04",
            "TRAIN.WEIGHT_DECAY", "3e-4", "TRAIN.WARMUP_EPOCHS", "1", "MODEL.LABEL_SMOOTHING", "0.1",
            "AUG.PRESET", "weak", "AUG.MIXUP", "0.0", "DATA.DATASET", "cf100", "DATA.IMG_SIZE", "32",
            "SAVE_FREQ", "1", "PRINT_FREQ", "1000000", "SEED", str(args.seed), "EXTRA.sInit_value", "-8",
            "EXTRA.target_sparsity", str(target), "EXTRA.sparsity_loss_type", "abs",
            "EXTRA.sparsity_lambda", "1.0", "EXTRA.st_decay", "0.0"]  # fmt: skip
    saved, sys.argv = sys.argv, argv
    try:
        _, config = rm.parse_option()
    finally:
        sys.argv = saved
    config.defrost()
    config.EXTRA.KD_loss = "KL"  # PATCHES[1]
    scale = config.DATA.BATCH_SIZE / 256.0  # their __main__, world size 1
    config.TRAIN.BASE_LR, config.TRAIN.WARMUP_LR = config.TRAIN.BASE_LR * scale, config.TRAIN.WARMUP_LR * scale
    config.TRAIN.MIN_LR = config.TRAIN.MIN_LR * scale
    config.freeze()
    return config


def run_release(args, inputs, target: float) -> dict:
    import torch.distributed as dist

    rm = import_release(args.release, args.msbench)
    tmp = tempfile.mkdtemp(prefix="released-fcpts-")
    config = release_config(rm, args, target, tmp)
    if not dist.is_initialized():  # PATCHES[3]
        dist.init_process_group("gloo", init_method=f"file://{tmp}/pg", rank=0, world_size=1)
    from models import resnet_cifar  # theirs, importable once their checkout is on sys.path

    build = resnet_cifar.func_dict.get(args.model)
    misfit = fits_release_model(inputs.state_dict, build().state_dict()) if build else (
        f"their resnet_cifar.py has only {sorted(resnet_cifar.func_dict)}; against its resnet18: "
        + str(fits_release_model(inputs.state_dict, resnet_cifar.resnet18().state_dict()))
    )  # fmt: skip
    plain = Path(tmp) / "dense.pth"
    torch.save(release_keys(inputs.state_dict) if misfit is None else inputs.state_dict, plain)
    config.defrost()
    config.MODEL.RESUME = str(plain)
    config.freeze()
    rm.logger = logging.getLogger("released-fcpts")
    val = torch.utils.data.TensorDataset(inputs.x_eval, inputs.y_eval)
    rm.build_loader = lambda cfg: (None, val, SameBatches(inputs.batches), torch.utils.data.DataLoader(val, 500), None)
    rm.create_model_by_name = (lambda cfg: build()) if misfit is None else (lambda cfg: dense_model(args.model))
    rm.save_checkpoint = lambda *a, **k: None
    trace: list[dict] = []
    seen: dict = {}
    validate, constrain, kl = rm.validate, rm.SparsityConstrain.__call__, rm.DistillKL.forward

    def traced_constrain(self, model):
        loss = constrain(self, model)
        with torch.no_grad():
            layers = [m for m in model.modules() if isinstance(m, rm._SUPPORT_MODULE_TYPES)]
            below = [int((m.weight.abs() < torch.sigmoid(m.weight_fake_sparse.scores)).sum()) for m in layers]
            total = sum(m.weight.numel() for m in layers)
        lr = seen["optimizer"].param_groups[0]["lr"]  # the rate this step's update will use
        step = {"step": len(trace), "rec": seen.pop("kl", None), "control": loss.item(), "sparsity": sum(below) / total}
        trace.append({**step, "lr": lr})
        return loss

    def traced_kl(self, y_s, y_t):
        out = kl(self, y_s, y_t)
        seen["kl"] = out.item()
        return out

    def captured_validate(cfg, loader, model):
        seen["model"] = model
        return validate(cfg, loader, model)

    def captured_optimizer(cfg, model):
        seen["optimizer"] = make_optimizer(cfg, model)
        return seen["optimizer"]

    make_optimizer = rm.get_str_optimizer
    rm.SparsityConstrain.__call__, rm.DistillKL.forward, rm.validate = traced_constrain, traced_kl, captured_validate
    rm.get_str_optimizer = captured_optimizer
    rm.seed_all(args.seed)
    t = time.perf_counter()
    with cpu_only():
        rm.main(config)
    wall = time.perf_counter() - t
    model = seen["model"]
    masks = {n: m.weight_fake_sparse.generate_mask(m.weight) for n, m in model.named_modules()
             if isinstance(m, rm._SUPPORT_MODULE_TYPES)}  # fmt: skip
    achieved, zeros, total = global_sparsity(masks)
    halves = sum(int((m == 0.5).sum()) for m in masks.values())
    metrics = evaluate(model, inputs)
    return {
        "metrics": metrics,
        "achieved_sparsity": achieved,
        "zeros": zeros,
        "prunable": total,
        "half_masked": halves,  # |W| exactly at a threshold: BinActive's sign(0) gives mask 0.5
        "per_layer": {n: float((m == 0).float().mean()) for n, m in masks.items()},
        "wall_s": wall,
        "model_source": "their resnet_cifar.py" if misfit is None else f"ours in their wrappers ({misfit})",
        "trace": trace,
        "patches": PATCHES,
    }


# ---------------------------------------------------------------- our side


def run_ours(args, inputs, target: float, release_mode: bool) -> dict:
    import fcpts
    from tasks.grid.weights import load_checkpoint

    model = dense_model(args.model)
    load_checkpoint(model, inputs.weights)
    options = {"iterations": args.epochs * STEPS_PER_EPOCH, "seed": args.seed, "device": "cpu", "progress": False,
               "log_every": 1, **(RELEASE_MODE if release_mode else {})}  # fmt: skip
    t = time.perf_counter()
    with learned_masks_kept() as learned:
        model, report = fcpts.sparsify(model, inputs.dataset, target, method="fcpts", **options)
    wall = time.perf_counter() - t
    return {
        "metrics": evaluate(model, inputs),
        "at_learned_masks": at_learned_masks(model, learned, inputs),
        "achieved_sparsity": report.achieved_sparsity,
        "prunable": sum(r["numel"] for r in report.per_layer),
        "per_layer": {r["name"]: r["sparsity"] for r in report.per_layer},
        "before_exact_step": report.extra,
        "wall_s": wall,
        "options": report.options,
        "trace": report.history,
    }


@contextlib.contextmanager
def learned_masks_kept() -> Iterator[dict[str, torch.Tensor]]:
    """The weights at the learned thresholds, kept as the exact-target step begins: the release has no such step,
    so comparing at its thresholds needs ours at theirs (filled into the yielded dict, layer name -> weight)."""
    from fcpts.core.masks import hard_mask
    from fcpts.methods import fcpts as fcpts_module
    from fcpts.methods.thresholds import original_weight

    kept: dict[str, torch.Tensor] = {}
    real = fcpts_module._exact_step

    def keeping(thr, target, method):
        out = real(thr, target, method)
        for name, layer in thr.layers.items():
            w = original_weight(layer).detach()
            kept[name] = (w * hard_mask(w, out[0][name])).clone()
        return out

    fcpts_module._exact_step = keeping
    try:
        yield kept
    finally:
        fcpts_module._exact_step = real


def at_learned_masks(model: nn.Module, learned: dict, inputs) -> dict:
    """Top-1 and sparsity of the finished model with the learned masks in place of the exact step's."""
    twin = copy.deepcopy(model)
    layers = dict(twin.named_modules())
    with torch.no_grad():
        for name, weight in learned.items():
            layers[name].weight.copy_(weight)
    zeros = sum(int((w == 0).sum()) for w in learned.values())
    total = sum(w.numel() for w in learned.values())
    return {"metrics": evaluate(twin, inputs), "achieved_sparsity": zeros / total}


def evaluate(model: nn.Module, inputs) -> dict:
    from tasks.grid.evaluate import classify

    return classify(model, inputs.x_eval, inputs.y_eval)


# ---------------------------------------------------------------- records and table


def record_path(out: Path, model: str, target: float, seed: int, epochs: int, side: str) -> Path:
    return out / f"cifar10-{model}-s{round(target * 100)}-seed{seed}-e{epochs}-{side}.json"


def paper_top1() -> dict[tuple[str, float], float]:
    """(model, target) -> the paper's CIFAR-10 FCPTS top-1, from the suite's reference numbers."""
    return {
        (r["model"], float(r["sparsity"])): float(r["top1"])
        for r in read_reference()
        if (r["dataset"], r["method"]) == ("cifar10", "fcpts")
    }


def table(records: list[dict]) -> str:
    lines = [
        "| model | target | side | iterations | top-1 | achieved | hit | wall s | at the learned masks (ours) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        learned = r.get("at_learned_masks")
        shown = f"{learned['metrics']['top1']:.2f} at {learned['achieved_sparsity']:.5f}" if learned else ""
        lines.append(
            f"| {r['model']} | {r['target_sparsity']:.0%} | {r['side']} | {r['iterations']} | "
            f"{r['metrics']['top1']:.2f} | {r['achieved_sparsity']:.5f} | {'yes' if r['hit_target'] else 'no'} | "
            f"{r['wall_s']:.0f} | {shown} |"
        )
    cells, paper = sorted({(r["model"], r["target_sparsity"]) for r in records}), paper_top1()
    for model, target in cells:
        p = paper.get((model, target))
        shown = f"{p:.2f}" if p is not None else "n/a"
        lines.append(f"| {model} | {target:.0%} | paper's Table 2 (1,600 it, GPU) | 1600 | {shown} | | | | |")
    return "\n".join(lines)


def summary(records: list[dict]) -> str:
    """Per cell and side over its seeds: top-1 as mean ± sd with each seed's, the sparsity reached, and ours at its
    learned masks; the paper's FCPTS beside it. What the notebook's side-by-side table quotes."""
    lines = [
        "| model | target | iterations | side | seeds | top-1 mean ± sd (each seed) | sparsity reached | "
        "ours at the learned masks: top-1 (sparsity) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    cells = sorted({(r["model"], r["target_sparsity"], r["iterations"]) for r in records})
    paper_numbers = paper_top1()
    for model, target, iterations in cells:
        for side in SIDES:
            runs = sorted(
                (r for r in records if (r["model"], r["target_sparsity"], r["iterations"], r["side"])
                 == (model, target, iterations, side)),
                key=lambda r: r["seed"],
            )  # fmt: skip
            if not runs:
                continue
            top1 = [r["metrics"]["top1"] for r in runs]
            spread = f" ± {statistics.stdev(top1):.2f}" if len(top1) > 1 else ""
            each = ", ".join(f"{t:.2f}" for t in top1)
            reached = ", ".join(f"{r['achieved_sparsity']:.5f}" for r in runs)
            learned = [r["at_learned_masks"] for r in runs if r.get("at_learned_masks")]
            at = ", ".join(f"{a['metrics']['top1']:.2f} ({a['achieved_sparsity']:.5f})" for a in learned)
            lines.append(
                f"| {model} | {target:.0%} | {iterations} | {side} | {len(runs)} | "
                f"{statistics.mean(top1):.2f}{spread} ({each}) | {reached} | {at or '—'} |"
            )
        paper = paper_numbers.get((model, target))
        lines.append(f"| {model} | {target:.0%} | 1600 | paper's Table 2 (GPU) | | {paper if paper else 'n/a'} | | |")
    return "\n".join(lines)


def trace_table(records: list[dict], points: int = 6) -> str:
    """Reconstruction loss and threshold sparsity of every side at a few steps: where the sides part."""
    n = min(len(r["trace"]) for r in records)
    steps = sorted({round(i * (n - 1) / (points - 1)) for i in range(points)})
    head = "| step | " + " | ".join(f"{r['side']} rec / sparsity" for r in records) + " |"
    lines = [head, "|---" * (len(records) + 1) + "|"]
    for k in steps:
        cells = [f"{r['trace'][k]['rec']:.3f} / {r['trace'][k]['sparsity']:.4f}" for r in records]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.code.released_fcpts", description=__doc__.split("\n")[0])
    p.add_argument("--release", help="checkout of ModelTC/FCPTS")
    p.add_argument("--msbench", help="checkout of ModelTC/msbench")
    p.add_argument("--model", default="resnet32", choices=["resnet32", "resnet56"])
    p.add_argument("--sparsity", type=float, nargs="+", default=[0.9])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=100, help="epochs of 16 batches (their budget: 100 = 1,600 steps)")
    p.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    p.add_argument("--eval-limit", type=int, help="first N test images only (smoke)")
    p.add_argument("--data-root")
    p.add_argument("--out", default=str(OUT_DIR))
    p.add_argument(
        "--summarize", action="store_true", help="run nothing: the records under --out, summed up per cell and side"
    )
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error(f"--epochs must be >= 1, got {args.epochs}")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.summarize:
        records = [json.loads(p.read_text()) for p in sorted(Path(args.out).glob("cifar10-*.json"))]
        text = summary(records)
        write_text_atomic(Path(args.out) / "summary.md", text + "\n")
        print(text)
        return 0
    why = missing_checkout(args.release, args.msbench) if "release" in args.sides else None
    if why:
        print(f"skipped: {why}; {CLONE_HINT}")
        return 0
    torch.manual_seed(args.seed)
    inputs = load_inputs(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for target in args.sparsity:
        for side in args.sides:
            if side == "release":
                result = run_release(args, inputs, target)
            else:
                result = run_ours(args, inputs, target, release_mode=side == "ours-release")
            record = {
                "side": side,
                "dataset": "cifar10",
                "model": args.model,
                "target_sparsity": target,
                "hit_target": abs(result["achieved_sparsity"] - target) * result["prunable"] <= 1.0,
                "iterations": args.epochs * STEPS_PER_EPOCH,
                "seed": args.seed,
                "eval_images": len(inputs.y_eval),
                "release_commit": git_commit(args.release) if args.release else None,
                "msbench_commit": git_commit(args.msbench) if args.msbench else None,
                **provenance(),  # this suite's commit, the command as typed, the environment, when
                "device": device_description("cpu"),
                "calibration": {k: v for k, v in inputs.calibration.items() if k != "indices"},
                "weights": inputs.weights_info,
                **result,
            }
            path = record_path(out, args.model, target, args.seed, args.epochs, side)
            write_text_atomic(path, json.dumps(record, indent=1, default=str) + "\n")
            top1, achieved = record["metrics"]["top1"], record["achieved_sparsity"]
            print(f"{side}: top-1 {top1:.2f}, sparsity {achieved:.4f} -> {path}")
            records.append(record)
    print(table(records))
    if len(records) > 1 and all(r["trace"] for r in records):
        print(trace_table([r for r in records if r["target_sparsity"] == args.sparsity[-1]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
