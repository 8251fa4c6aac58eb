"""Choose the exponent of the ERK allocation, before any training, as the one whose one-shot magnitude pruning (BN
re-estimated) gives the lowest output KL to the dense model."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.utils.data import Subset

from .allocation import erk_rates, keep_masks_for_rates
from .bn import recalibrate_bn
from .calibration import Calibration, to_device
from .loop import kl_distill
from .masks import apply_keep_masks


def probe_calibration(calib: Calibration, n_images: int) -> Calibration:
    """The first `n_images` of the calibration set's first shuffle, as a calibration set of their own."""
    idx = calib.order(0)[: min(n_images, len(calib))]
    data = calib.data[idx] if isinstance(calib.data, torch.Tensor) else Subset(calib.data, idx)
    return Calibration(data, calib.batch_size, calib.seed)


@torch.no_grad()
def one_shot_kl(
    model: nn.Module,
    layers_of: Callable[[nn.Module], dict[str, nn.Module]],
    probe: Calibration,
    target: float,
    powers: Sequence[float],
    device: torch.device,
) -> dict[float, float]:
    """power -> KL(dense || pruned) on the probe images, each pruned copy's BN statistics re-estimated on
    them. `model` itself is left as it was (modes included)."""
    x = to_device(probe.take(list(range(len(probe))), seed=probe.seed), device)
    was_training = model.training
    model.eval()
    reference = torch.cat([model(part) for part in x.split(probe.batch_size)])
    losses = {}
    for power in powers:
        pruned = copy.deepcopy(model)
        layers = layers_of(pruned)
        apply_keep_masks(layers, keep_masks_for_rates(layers, erk_rates(layers, target, power), target))
        recalibrate_bn(pruned, probe, device, batch_size=probe.batch_size)
        pruned.eval()
        out = torch.cat([pruned(part) for part in x.split(probe.batch_size)])
        losses[power] = float(kl_distill(out, reference, 1.0))
    model.train(was_training)
    return losses


def choose_erk_power(
    model: nn.Module,
    layers_of: Callable[[nn.Module], dict[str, nn.Module]],
    calib: Calibration,
    target: float,
    powers: Sequence[float],
    n_images: int,
    device: torch.device,
) -> tuple[float, dict]:
    """The exponent with the least one-shot KL (ties: the earlier in `powers`), and what the probe measured."""
    start = time.perf_counter()
    losses = one_shot_kl(model, layers_of, probe_calibration(calib, n_images), target, powers, device)
    best = min(powers, key=lambda p: losses[p])
    probe = {
        "chosen": best,
        "one_shot_kl": {str(p): float(f"{v:.6g}") for p, v in losses.items()},
        "images": min(n_images, len(calib)),
        "wall_s": round(time.perf_counter() - start, 1),
    }
    return best, probe
