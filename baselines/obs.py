"""OBS: second-order one-shot pruning of Conv2d/Linear weights (Optimal Brain Surgeon in SparseGPT's blocked
column-wise form; Frantar & Alistarh 2022, 2023). No training: a few forwards and small linear solves per layer.

Per layer H = X X^T / n over its inputs; per-layer zero counts from an allocation ("error": where the measured
output error grows least), then layers pruned in forward order on the pruned model's inputs (docs/METHOD.md).
"""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from fcpts.core.allocation import allocation_keep_masks
from fcpts.core.bn import recalibrate_bn
from fcpts.core.calibration import Calibration
from fcpts.core.layer_inputs import LayerInputs, forward_order
from fcpts.core.loop import LoopResult
from fcpts.core.masks import layer_weight
from fcpts.core.options import MethodOptions, check_choice, check_choose_for, open_run
from fcpts.core.report import SparsityReport, loop_report
from fcpts.methods.registry import NOT_IN_PAPER, Method, register

ALLOCATIONS = ("error", "erk", "uniform", "l2norm", "global-magnitude")
GRAM_CHUNK_BYTES = 64 * 2**20  # the most unfolded inputs a Hessian update copies at once


@dataclass
class OBSOptions(MethodOptions):
    allocation: str = "error"  # one of ALLOCATIONS
    # "error" allocation: the per-layer sparsities whose errors are measured (the target is added)
    levels: tuple[float, ...] = (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.925, 0.95, 0.97, 0.98, 0.99)
    percdamp: float = 0.01  # dampening: H + percdamp * mean(diag(H)) * I before inversion (SparseGPT's)
    block_size: int = 128  # columns per lazy-update block, and per mask decision (SparseGPT's)
    bn_recalibration: bool = False  # re-estimate BN statistics on the calibration set at the end
    dense_targets: bool = True  # reconstruct the dense model's layer outputs (False: SparseGPT's W X_pruned)
    batch_size: int = 128  # images per forward while collecting Hessians (memory only)
    reuse_inputs: bool = True  # start each layer's forward at its nn.Sequential unit (fcpts.core.layer_inputs)
    CACHE_COPIES: ClassVar[int] = 1  # buffers of `cache_bytes` held at once: the kept inputs (docs/memory.md)
    cache_bytes: float = 4e9  # the most kept inputs; a unit whose inputs would take more is reached from the image
    choose_for: dict | None = None  # {"images": N}: choose as a run of N images would (a probe); None: the run's own
    # seed: calibration order only, OBS itself draws nothing at random; checkpoint: unused, a run takes minutes

    def validate(self) -> None:
        super().validate()
        check_choice(self, "allocation", ALLOCATIONS)
        if self.percdamp < 0 or self.block_size < 1 or self.batch_size < 1:
            raise ValueError("percdamp must be >= 0, block_size and batch_size >= 1")
        if not all(0 < s < 1 for s in self.levels):
            raise ValueError(f"levels must lie in (0, 1), got {self.levels}")
        check_choose_for(self.choose_for, ("images",))


class LayerOBS:
    """One layer's Hessian (running average over images) and its SparseGPT pruning, per group of a conv."""

    def __init__(self, layer: nn.Module):
        if not isinstance(layer, (nn.Conv2d, nn.Linear)):
            raise TypeError(f"OBS prunes Conv2d and Linear layers, got {type(layer).__name__}")
        self.layer = layer
        self.groups = layer.groups if isinstance(layer, nn.Conv2d) else 1
        w = layer.weight
        cols = w[0].numel() if isinstance(layer, nn.Conv2d) else w.shape[1]
        self.H = torch.zeros(self.groups, cols, cols, dtype=torch.float64, device=w.device)
        self.C: torch.Tensor | None = None  # dense-model inputs times the pruned model's, for `dense_targets`
        self.n_images = 0

    def columns(self, x: torch.Tensor) -> torch.Tensor:
        """The layer's input as (groups, columns, positions): what each output is a dot product with."""
        layer = self.layer
        if isinstance(layer, nn.Linear):
            return x.reshape(-1, x.shape[-1]).t().unsqueeze(0)
        padding: str | tuple[int, ...] | int = layer.padding
        if isinstance(padding, str) or layer.padding_mode != "zeros":  # "same"/"valid", reflect, ...
            mode = "constant" if layer.padding_mode == "zeros" else layer.padding_mode
            x, padding = F.pad(x, layer._reversed_padding_repeated_twice, mode=mode), 0
        if layer.kernel_size == (1, 1) and layer.stride == (1, 1) and padding in (0, (0, 0)):
            patches = x.flatten(2)  # a 1x1 conv's patches are its inputs: no unfold copy
        else:
            patches = F.unfold(x, layer.kernel_size, layer.dilation, padding, layer.stride)  # (B, C*k*k, L)
        b, d, n = patches.shape
        g = self.groups
        return patches.view(b, g, d // g, n).permute(1, 2, 0, 3).reshape(g, d // g, b * n)

    def gram(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Sum over images and positions of columns(b) columns(a)^T, per group, in float64, a few images at a time."""
        k = 1 if isinstance(self.layer, nn.Linear) else self.layer.kernel_size[0] * self.layer.kernel_size[1]
        step = max(1, GRAM_CHUNK_BYTES // (4 * k * a[0].numel()))
        total = torch.zeros_like(self.H)
        for i in range(0, a.shape[0], step):
            cols_a = self.columns(a[i : i + step])
            cols_b = cols_a if b is a else self.columns(b[i : i + step])
            total += torch.bmm(cols_b, cols_a.transpose(1, 2)).double()
        return total

    @torch.no_grad()
    def add_batch(self, x: torch.Tensor, x_dense: torch.Tensor | None = None) -> None:
        """Add a batch of the layer's inputs; with `x_dense`, the dense model's inputs for the same images."""
        x = x.detach().float()
        total = self.n_images + x.shape[0]  # a running average over images of their summed X X^T
        self.H.mul_(self.n_images / total).add_(self.gram(x, x), alpha=1 / total)
        if x_dense is not None:
            if self.C is None:
                self.C = torch.zeros_like(self.H)
            self.C.mul_(self.n_images / total).add_(self.gram(x, x_dense.detach().float()), alpha=1 / total)
        self.n_images = total

    def weight(self) -> torch.Tensor:
        w = self.layer.weight.detach().double()
        return w.reshape(self.groups, w.shape[0] // self.groups, -1)

    def error(self, w_new: torch.Tensor, w_old: torch.Tensor | None = None) -> float:
        """tr(dW H dW^T) over all groups: the summed squared output error per image."""
        w_old = self.weight() if w_old is None else w_old
        dw = w_new.detach().reshape(self.groups, -1, self.H.shape[-1]).double() - w_old
        return float(torch.einsum("grc,gcd,grd->", dw, self.H, dw))

    def inverse_factor(self, percdamp: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]:
        """(H + damp I)^-1 (dead diagonals set to 1 first), its upper Cholesky factor U, the dead-input
        flags and the damping used; the damping grows tenfold while H + damp I is not positive definite."""
        H = self.H.clone()
        dead = torch.diagonal(H, dim1=1, dim2=2) == 0
        torch.diagonal(H, dim1=1, dim2=2)[dead] = 1.0
        mean_diag = torch.diagonal(H, dim1=1, dim2=2).mean(dim=1)[:, None]
        eye = torch.eye(H.shape[-1], dtype=H.dtype, device=H.device)
        rel = percdamp
        for _ in range(8):
            L, info = torch.linalg.cholesky_ex(H + (rel * mean_diag)[..., None] * eye)
            if not info.any():
                Hinv = torch.cholesky_inverse(L)
                return Hinv, torch.linalg.cholesky(Hinv, upper=True), dead, rel
            rel = max(rel * 10, 1e-6)
        raise RuntimeError(f"Hessian of {type(self.layer).__name__} not positive definite even with damping {rel}")

    @torch.no_grad()
    def prune(
        self, count: int, block_size: int = 128, percdamp: float = 0.01, keep: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, dict]:
        """The pruned weight (float64) with exactly `count` zeros (or the given keep-mask), the rest updated optimally;
        the layer itself is not changed."""
        Hinv, U, dead, damp = self.inverse_factor(percdamp)
        W = self.weight().clone()  # never a view of a float64 layer's own weight
        if self.C is not None:  # the dense outputs W X_dense, best reached from these inputs: W C H^-1
            W = torch.where(dead[:, None, :], W, W @ self.C @ Hinv)  # a dead input's weight keeps its value
        fixed = None if keep is None else ~keep.reshape(W.shape).to(W.device)
        (pruned,), (rel_error,) = self._sweep(W, U, dead, [count], block_size, fixed)
        info = {"rel_error": rel_error, "damp": damp, "dead_inputs": int(dead.sum())}
        return pruned.reshape(self.layer.weight.shape), info

    @torch.no_grad()
    def error_curve(self, counts: list[int], block_size: int = 128, percdamp: float = 0.01) -> list[float]:
        """The relative output errors of pruning `counts` weights each, in one batched column sweep."""
        _Hinv, U, dead, _damp = self.inverse_factor(percdamp)
        return self._sweep(self.weight().clone(), U, dead, counts, block_size)[1]

    def _sweep(
        self,
        W: torch.Tensor,
        U: torch.Tensor,
        dead: torch.Tensor,
        counts: list[int],
        block_size: int,
        fixed: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[float]]:
        """SparseGPT's blocked column sweep of W (G, R, D) for each count at once (a leading level dimension):
        the pruned weights (levels, G, R, D) and each level's error relative to W's own output energy."""
        reference = W
        G, R, D = W.shape
        W = W.expand(len(counts), G, R, D).clone()
        total = torch.tensor(counts, device=W.device)[:, None]
        for b0 in range(0, D, block_size):
            b1 = min(b0 + block_size, D)
            W1, U1 = W[..., b0:b1].clone(), U[:, b0:b1, b0:b1]
            d = torch.diagonal(U1, dim1=1, dim2=2)[:, None, :]  # (G, 1, n)
            if fixed is not None:
                mask1 = fixed[None, :, :, b0:b1]
            else:  # this block's share of each count, cumulative rounding so the shares add up exactly
                k = torch.clamp(_rounded(total * b1, D) - _rounded(total * b0, D), max=W1[0].numel())
                score = torch.where(dead[:, None, b0:b1], -1 / (1 + W1.abs()), W1**2 / d**2).flatten(1)
                order = torch.sort(score, dim=1, stable=True).indices
                ranks = torch.arange(score.shape[1], device=W.device).expand_as(order)
                mask1 = torch.zeros_like(order, dtype=torch.bool).scatter_(1, order, ranks < k).view_as(W1)
            err = torch.zeros_like(W1)
            for i in range(b1 - b0):
                w = W1[..., i]
                q = torch.where(mask1[..., i], torch.zeros_like(w), w)
                err[..., i] = (w - q) / d[:, :, i]
                W1[..., i:] -= err[..., i, None] * U1[:, None, i, i:]
                W1[..., i] = q
            W[..., b0:b1] = W1
            W[..., b1:] -= torch.matmul(err, U[:, b0:b1, b1:])
        energy = max(self.error(torch.zeros_like(reference), reference), 1e-30)
        return W, [self.error(w, reference) / energy for w in W]


def _rounded(numerator: torch.Tensor, denominator: int) -> torch.Tensor:
    """round(numerator / denominator) elementwise as Python rounds ints (half to even)."""
    return torch.round(numerator.double() / denominator).long()


def hull_allocation(curves: dict[str, list[tuple[int, float]]], total: int) -> dict[str, int]:
    """Prune counts adding up to `total` along the lower convex hulls of the curves {name: [(count, error), ...]},
    cheapest error per zero first."""

    def cross(a: tuple[int, float], b: tuple[int, float], c: tuple[int, float]) -> float:  # <= 0: b is not below a-c
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    segments = []
    for idx, (name, pts) in enumerate(curves.items()):
        hull: list[tuple[int, float]] = []
        for p in sorted(set(pts)):
            while len(hull) >= 2 and cross(hull[-2], hull[-1], p) <= 0:
                hull.pop()
            hull.append(p)
        segments += [((e1 - e0) / (z1 - z0), idx, z0, z1, name) for (z0, e0), (z1, e1) in zip(hull, hull[1:])]
    counts, left = {n: 0 for n in curves}, total
    for _slope, _idx, z0, z1, name in sorted(segments):
        take = min(z1 - z0, left)
        counts[name] += take
        left -= take
        if left == 0:
            break
    if left:
        raise ValueError(f"the error curves cannot hold {total} zeros; add higher levels")
    return counts


def error_counts(
    model: nn.Module, layers: dict[str, nn.Module], calib: Calibration, target: float, options: OBSOptions
) -> tuple[dict[str, int], dict[str, list]]:
    """The "error" allocation: each layer pruned alone on the dense model's Hessians at every level."""
    obs = {n: LayerOBS(m) for n, m in layers.items()}
    modules, device = dict(model.named_modules()), next(model.parameters()).device
    batches = range(calib.in_order_batches(options.batch_size))
    with torch.no_grad(), contextlib.ExitStack() as hooks:  # the dense Hessians, from one pass over the images
        for n in obs:
            hooks.enter_context(modules[n].register_forward_pre_hook(lambda _m, inp, n=n: obs[n].add_batch(inp[0])))
        for b in tqdm(batches, disable=not options.progress, desc="obs dense Hessians", unit="batch", leave=False):
            model(calib.in_order(b, options.batch_size).to(device))
    levels = sorted(set(options.levels) | {target})
    curves = {}
    bar = tqdm(list(obs), disable=not options.progress, desc="obs error curves", unit="layer", leave=False)
    for n in bar:
        bar.set_postfix(layer=n)
        counts = [round(s * layer_weight(layers[n]).numel()) for s in levels]
        curves[n] = [(0, 0.0), *zip(counts, obs.pop(n).error_curve(counts, options.block_size, options.percdamp))]
    return hull_allocation(curves, round(target * sum(layer_weight(m).numel() for m in layers.values()))), curves


def obs(model: nn.Module, calibration, target: float, options: OBSOptions) -> tuple[nn.Module, SparsityReport]:
    t0 = time.perf_counter()
    target, device, layers, _ = setup = open_run(model, calibration, target, options)
    calib = setup.required_calib()
    order = forward_order(model, layers, calib.take([0]).to(device), "obs")
    model.eval()
    layers = {n: layers[n] for n in order}
    total = round(target * sum(layer_weight(m).numel() for m in layers.values()))
    curves = None
    if options.allocation == "error":
        counts, curves = error_counts(model, layers, calib, target, options)
    else:
        masks = allocation_keep_masks(layers, target, options.allocation)  # existing zeros included, total exact
        counts = {n: int((~keep).sum()) for n, keep in masks.items()}
    allocation_s = time.perf_counter() - t0

    nets = [model] + ([copy.deepcopy(model)] if options.dense_targets else [])
    inputs = LayerInputs(
        nets,
        lambda b: calib.in_order(b, options.batch_size).to(device),
        calib.in_order_batches(options.batch_size),
        reuse=options.reuse_inputs,
        max_bytes=options.cache_bytes,
        # sized by the first batch, which holds min(batch_size, images) images
        planned_batches=None
        if options.choose_for is None
        else options.choose_for["images"] / min(options.batch_size, len(calib)),
    )
    log, planned, actual = {}, 0, 0
    desc = f"obs-{options.allocation} {target:.2f} pruning"
    bar = tqdm(layers.items(), disable=not options.progress, desc=desc, unit="layer")
    for n, layer in bar:
        bar.set_postfix(layer=n)
        tic = time.perf_counter()
        o = LayerOBS(layer)
        for x, *x_dense in inputs(n):
            o.add_batch(x, *x_dense)
        hessian_s = time.perf_counter() - tic
        planned += counts[n]
        count = min(max(planned - actual, 0), layer_weight(layer).numel())  # this layer's count plus any carry
        w, info = o.prune(count, options.block_size, options.percdamp)
        with torch.no_grad():
            weight = layer_weight(layer)
            weight.copy_(w.to(weight.dtype))
        actual += int((weight == 0).sum())
        log[n] = {
            "planned_zeros": counts[n],
            "pruned": count,
            "hessian_s": round(hessian_s, 2),
            "wall_s": round(time.perf_counter() - tic, 2),
            **info,
        }
    if actual != total:
        raise RuntimeError(
            f"OBS ended with {actual} zeros instead of {total}: the last layer could not absorb "
            "the zeros earlier layers ended with"
        )
    if options.bn_recalibration:
        recalibrate_bn(model, calib, device, options.batch_size)
        model.eval()
    extra = {"allocation_s": round(allocation_s, 3), "layer_order": order, "error_curves": curves}
    report = loop_report("obs", target, model, options, calib, LoopResult(wall_s=time.perf_counter() - t0), extra)
    for row in report.per_layer:
        row.update(log[row["name"]])
    return model, report


register(
    Method(
        "obs",
        "OBS (second-order, one-shot)",
        obs,
        OBSOptions,
        role=NOT_IN_PAPER,
        style=("tab:olive", "P"),
        summary="second-order one-shot pruning: SparseGPT's blocked OBS per layer, sequential, towards the "
        "dense layer outputs, allocation from each layer's OBS error curve",
        headline=True,
    )
)
