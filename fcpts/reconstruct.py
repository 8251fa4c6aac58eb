"""The FCPTS optimisation loop: reconstruction + control loss, then the exact-target step.

Net-wise: a frozen dense teacher and the masked student see the same calibration batch; the student's
weights, biases, BN affine parameters and per-layer thresholds are trained together with SGD
(released-code defaults), then every threshold is scaled by one global factor so the model has
exactly round(target * N) zeros, and the masks are folded into plain weights.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from . import thresholds
from .allocation import erk_rates, global_keep_masks
from .bridge import Bridge
from .calibration import Calibration
from .masks import apply_keep_masks, check_target, hard_mask, prunable_layers, sparsity_summary
from .options import FCPTSOptions, SparsityReport


def kl_distill(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(teacher || student) on softened outputs, summed, times T^2 / batch (released code)."""
    log_p_s = F.log_softmax(student_logits.flatten(1) / temperature, dim=1)
    p_t = F.softmax(teacher_logits.flatten(1) / temperature, dim=1)
    return F.kl_div(log_p_s, p_t, reduction="sum") * temperature**2 / student_logits.shape[0]


def default_blocks(model: nn.Module) -> list[str]:
    """Block outputs for MSE reconstruction: each non-Sequential child of an nn.Sequential that holds
    a prunable layer (ResNet BasicBlocks, MobileNet inverted residuals, ...)."""
    names = []
    for parent_name, parent in model.named_modules():
        if isinstance(parent, nn.Sequential):
            for child_name, child in parent.named_children():
                if not isinstance(child, nn.Sequential) and any(
                    isinstance(m, (nn.Conv2d, nn.Linear)) for m in child.modules()
                ):
                    names.append(f"{parent_name}.{child_name}" if parent_name else child_name)
    return names


class _Taps:
    """Forward hooks that keep the latest output of named modules."""

    def __init__(self, model: nn.Module, names: list[str]):
        self.outputs: dict[str, torch.Tensor] = {}
        modules = dict(model.named_modules())
        missing = [n for n in names if n not in modules]
        if missing:
            raise ValueError(f"block_names not found in the model: {missing}")
        self.handles = [modules[n].register_forward_hook(self._hook(n)) for n in names]

    def _hook(self, name):
        def hook(_module, _inp, out):
            self.outputs[name] = out

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _model_device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _warmup_cosine(warmup: int, total: int):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def _fingerprint(target: float, opts: FCPTSOptions, calib: Calibration, model: nn.Module) -> str:
    keep = {k: v for k, v in opts.to_dict().items() if k not in ("progress", "checkpoint", "checkpoint_every_s", "device")}
    blob = json.dumps(
        {
            "target": target,
            "options": keep,
            "calibration": calib.indices,
            "n_calibration": len(calib),
            "params": sum(p.numel() for p in model.parameters()),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _save_atomic(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def run(model: nn.Module, calibration, target: float, opts: FCPTSOptions) -> tuple[nn.Module, SparsityReport]:
    target = check_target(target)
    opts.validate()
    device = torch.device(opts.device) if opts.device else _model_device(model)
    model.to(device)
    layers = prunable_layers(model, opts.exclude)
    calib = Calibration(calibration, opts.batch_size, opts.seed)
    numels = {n: m.weight.numel() for n, m in layers.items()}
    total = sum(numels.values())

    teacher = copy.deepcopy(model).to(device)
    teacher.train(opts.teacher_mode == "train")
    teacher.requires_grad_(False)

    rates = erk_rates(layers, target)
    learn_t = opts.learn_thresholds
    params = thresholds.attach(layers, rates, threshold_grad=learn_t and opts.threshold_grad == "ste")
    gen = torch.Generator().manual_seed(opts.seed)
    bridges = {
        n: Bridge(numels[n], opts.bridge, opts.kde_points, opts.kde_bandwidth, opts.histogram_bins, gen)
        for n in layers
    }

    score_params = [p.score for p in params.values()]
    for s in score_params:
        s.requires_grad_(learn_t)
    score_ids = {id(s) for s in score_params}
    other = [p for p in model.parameters() if id(p) not in score_ids and p.requires_grad]
    lr = opts.lr if opts.lr is not None else 0.04 * calib.batch_size / 256
    groups = [{"params": other, "weight_decay": opts.weight_decay}]
    if learn_t:
        groups.append({"params": score_params, "weight_decay": 0.0})
    optimizer = torch.optim.SGD(groups, lr=lr, momentum=opts.momentum)
    warmup = opts.warmup_iterations if opts.warmup_iterations is not None else calib.steps_per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine(warmup, opts.iterations))

    taps_s = taps_t = None
    if opts.reconstruction == "mse-blocks":
        blocks = opts.block_names if opts.block_names is not None else default_blocks(model)
        taps_s, taps_t = _Taps(model, blocks), _Taps(teacher, blocks)

    fingerprint = _fingerprint(target, opts, calib, model)
    ckpt = Path(opts.checkpoint) if opts.checkpoint else None
    start, history, elapsed_before = 0, [], 0.0
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=False)
        if state.get("fingerprint") != fingerprint:
            raise ValueError(
                f"checkpoint {ckpt} belongs to a different run (target/options/calibration differ); "
                "delete it or pass another checkpoint path"
            )
        model.load_state_dict(state["model"])
        teacher.load_state_dict(state["teacher"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        start, history, elapsed_before = state["step"], state["history"], state["elapsed_s"]

    def save(step: int) -> None:
        if ckpt is not None:
            _save_atomic(
                {
                    "fingerprint": fingerprint,
                    "step": step,
                    "model": model.state_dict(),
                    "teacher": teacher.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "history": history,
                    "elapsed_s": elapsed_before + time.perf_counter() - t0,
                },
                ckpt,
            )

    t0 = last_save = time.perf_counter()
    model.train()
    bar = tqdm(
        range(start, opts.iterations), initial=start, total=opts.iterations, disable=not opts.progress,
        desc=f"fcpts {target:.2f}", dynamic_ncols=True,
    )
    for step in bar:
        if not learn_t:  # ablation: every layer keeps its ERK rate exactly while weights move
            thresholds.pin_rates(params, layers, rates)
        x = calib.batch(step).to(device)
        with torch.no_grad():
            y_t = teacher(x)
        y_s = model(x)
        rec = kl_distill(y_s, y_t, opts.temperature)
        if taps_s is not None:
            rec = rec + sum(F.mse_loss(taps_s.outputs[k], taps_t.outputs[k]) for k in taps_s.outputs)
        global_r = sum(
            bridges[n](params[n].threshold(), thresholds.original_weight(m)) * numels[n] for n, m in layers.items()
        ) / total
        gap = global_r - target
        control = gap.abs() if opts.control_loss == "abs" else gap.pow(2)
        loss = rec + opts.control_weight * control if learn_t else rec
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        history.append(
            {
                "step": step,
                "loss": round(loss.item(), 6),
                "rec": round(rec.item(), 6),
                "control": round(control.item(), 8),
                "sparsity": round(global_r.item(), 6),
                "lr": scheduler.get_last_lr()[0],
            }
        )
        if step % 10 == 0:
            bar.set_postfix(rec=f"{rec.item():.4f}", sparsity=f"{global_r.item():.4f}")
        if time.perf_counter() - last_save > opts.checkpoint_every_s:
            save(step + 1)
            last_save = time.perf_counter()
    bar.close()
    if opts.iterations > start:
        save(opts.iterations)
    if taps_s is not None:
        taps_s.remove()
        taps_t.remove()

    # Exact target: rank |W| / t_l globally, i.e. scale every threshold by one common factor.
    with torch.no_grad():
        t_final = {n: params[n].threshold().item() for n in layers}
        weights = {n: thresholds.original_weight(m).detach() for n, m in layers.items()}
        before = {n: hard_mask(weights[n], t_final[n]) for n in layers}
        masks = global_keep_masks({n: weights[n].abs() / t_final[n] for n in layers}, target)
        flipped = sum(int((masks[n] != before[n]).sum().item()) for n in layers)
        sparsity_before = 1.0 - sum(int(before[n].sum().item()) for n in layers) / total
    thresholds.detach_all(layers)
    apply_keep_masks(layers, masks)
    model.eval()

    achieved, per_layer = sparsity_summary(model, opts.exclude)
    for row in per_layer:
        row["threshold"] = t_final[row["name"]]
        row["initial_sparsity"] = rates[row["name"]]
    report = SparsityReport(
        method="fcpts" if learn_t else "fcpts-fixed",
        target_sparsity=target,
        achieved_sparsity=achieved,
        per_layer=per_layer,
        history=history,
        wall_s=elapsed_before + time.perf_counter() - t0,
        seed=opts.seed,
        calibration_indices=calib.indices,
        options=opts.to_dict(),
        extra={
            "sparsity_before_exact_step": sparsity_before,
            "weights_flipped_by_exact_step": flipped,
            "kept_dense": list(opts.exclude),
            "lr": lr,
            "warmup_iterations": warmup,
            "resumed_from_step": start,
        },
    )
    return model, report
