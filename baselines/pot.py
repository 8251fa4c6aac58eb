"""POT: post-training sparsity by layer-wise reconstruction (Lazarevich et al. 2021) as msbench runs it (the
protocol: docs/METHOD.md): BN folded, an L2Norm or ERK allocation, weight and bias correction, then each layer's
masked weights fitted by Adam to the dense outputs; where cheaper from Gram statistics (pot_objective.py), layers of
one shape stacked.
"""

from __future__ import annotations

import contextlib
import copy
import time
import zlib
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
from torch import nn
from tqdm.auto import tqdm

from fcpts.core import step_graph
from fcpts.core.allocation import allocation_keep_masks
from fcpts.core.bn import fold_batchnorm
from fcpts.core.layer_inputs import StopForward, forward_order
from fcpts.core.loop import LoopResult, run_checkpoint, run_identity
from fcpts.core.masks import apply_keep_masks, layer_bias, layer_weight
from fcpts.core.options import (
    MethodOptions,
    check_at_least,
    check_choice,
    check_choose_for,
    epochs_budget,
    fitted_iterations,
    open_run,
)
from fcpts.core.report import SparsityReport, loop_report
from fcpts.methods.registry import PAPER_BASELINE, Method, register

from .pot_objective import (
    ForwardObjective,
    GramObjective,
    GramStack,
    NotLinearInWeights,
    gram_candidate,
    gram_plan,
    stack_signature,
)


@dataclass
class POTOptions(MethodOptions):
    allocation: str = "l2norm"  # or "erk"
    # per layer, upper bound; None: EPOCHS passes over the calibration set's batches, at most PAPER_ITERATIONS
    iterations: int | None = None
    batch_size: int = 64
    lr_weight: float = 1e-5
    lr_bias: float = 1e-4
    early_stop_loss: float = 1e-5
    weight_correction: bool = True
    bias_correction: bool = True
    fold_bn: bool = True
    # Buffers of `cache_bytes` held at once at the peak (docs/memory.md)
    CACHE_COPIES: ClassVar[int] = 4
    cache_bytes: float = 4e9  # dense layer inputs cached for all images; a layer whose inputs alone exceed it
    # has them recomputed for each batch it reads. Gram statistics may take as much again (docs/memory.md)
    gram: bool = True  # same loss from per-image input Gram matrices where cheaper (pot_objective.py)
    sampling: str = "batches"  # each step one of fixed batches (msbench's); "random": a fresh draw of batch_size
    concurrent: bool = True  # layers whose Gram statistics share a shape take their steps together, stacked
    cuda_graphs: bool = True  # on a GPU, replay each group's steps from a CUDA graph
    gram_gradient: str = "closed-form"  # a Gram objective's gradient written down, or "autograd"
    DEFAULTS_BEFORE: ClassVar[dict[str, Any]] = {"gram_gradient": "autograd"}  # what records before it ran with
    choose_for: dict | None = None  # {"images": N, "iterations": T}: make the size choices as a run of that size
    # would (the scale benchmark's probe); None: the run's own sizes

    def validate(self) -> None:
        super().validate()
        check_choice(self, "allocation", ("l2norm", "erk"))
        check_choice(self, "sampling", ("batches", "random"))
        check_choice(self, "gram_gradient", ("closed-form", "autograd"))
        for name in ("iterations", "lr_weight", "lr_bias", "early_stop_loss", "cache_bytes"):
            check_at_least(self, name, 0)
        check_at_least(self, "batch_size", 1)
        check_choose_for(self.choose_for, ("images", "iterations"))

    EPOCHS: ClassVar[int] = 125
    PAPER_ITERATIONS: ClassVar[int] = 20_000

    def fit_budget(self, n_images: int) -> None:
        self.iterations = self.iterations_for(n_images)

    def iterations_for(self, n_images: int) -> int:
        """The iterations per layer a run on `n_images` takes: the option, else the budget fitted to them."""
        if self.iterations is not None:
            return self.iterations
        return epochs_budget(n_images, self.batch_size, self.EPOCHS, self.PAPER_ITERATIONS)

    def sizes_for_choices(self, n_images: int) -> tuple[int, int]:
        """(images, iterations) the size choices are made for: `choose_for`'s, else the run's own."""
        if self.choose_for is None:
            return n_images, self.iterations_for(n_images)
        return self.choose_for["images"], self.choose_for["iterations"]


@torch.no_grad()
def correct_weight(weight: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Per output channel, restore the dense channel's std and mean over the sparse weights."""
    w = weight.flatten(1).double()
    m = keep.flatten(1).double()
    rho = w.std(dim=1, keepdim=True) / ((w * m).std(dim=1, keepdim=True) + 1e-9)
    corrected = rho * w + (w.mean(dim=1, keepdim=True) - (rho * w * m).mean(dim=1, keepdim=True))
    return (corrected * m).view_as(weight).to(weight.dtype)


def fixed_batches(n: int, batch_size: int, seed: int) -> torch.Tensor:
    """(n // batch_size, batch_size) image indices: one seeded shuffle cut into batches (msbench's cached ones)."""
    size = min(batch_size, n)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + 1))
    return perm[: n // size * size].view(-1, size)


@torch.no_grad()
def collect_inputs(
    model: nn.Module, names: list[str], images: torch.Tensor, chunk: int = 256
) -> dict[str, torch.Tensor]:
    """Inputs of the named layers over all images, from one (early-stopped) pass of the dense model."""
    modules = dict(model.named_modules())
    store: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    last = names[-1]

    def hook(name):
        def fn(_m, inp):
            store[name].append(inp[0].detach().clone())
            if name == last:
                raise StopForward

        return fn

    device = next(model.parameters()).device
    with contextlib.ExitStack() as hooks:
        for n in names:
            hooks.enter_context(modules[n].register_forward_pre_hook(hook(n)))
        for i in range(0, len(images), chunk):
            with contextlib.suppress(StopForward):
                model(images[i : i + chunk].to(device, non_blocking=True))
    return {n: torch.cat(v) for n, v in store.items()}


class RecomputedInputs:
    """A layer's dense inputs, recomputed by an early-stopped forward whenever they are read; indexed like a tensor
    over every image would be."""

    def __init__(self, dense: nn.Module, name: str, images: torch.Tensor, chunk: int = 64):
        self.dense, self.name, self.images, self.chunk = dense, name, images, chunk

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, idx) -> torch.Tensor:
        if isinstance(idx, torch.Tensor):
            idx = idx.cpu()
        return collect_inputs(self.dense, [self.name], self.images[idx], self.chunk)[self.name]


@torch.no_grad()
def network_errors(
    dense: nn.Module, model: nn.Module, names: list[str], images: torch.Tensor, cache_bytes: float
) -> dict[str, float | None]:
    """Per layer, ||sparse output - dense output||^2 / ||dense output||^2 inside the whole networks, over chunks of
    at most 128 images whose outputs in both networks fit in `cache_bytes`."""

    def outputs(net: nn.Module, x: torch.Tensor) -> dict[str, list[torch.Tensor]]:  # every call's, in order
        mods, got = dict(net.named_modules()), {n: list[torch.Tensor]() for n in names}
        with contextlib.ExitStack() as hooks:
            for n in names:
                hooks.enter_context(mods[n].register_forward_hook(lambda _m, _i, out, n=n: got[n].append(out)))
            net(x)
        return got

    device = next(model.parameters()).device
    first = outputs(dense, images[:1].to(device)).values()
    per_image = sum(out.numel() * out.element_size() for calls in first for out in calls)
    chunk = max(1, min(128, int(cache_bytes // max(1, 2 * per_image))))
    sums = torch.zeros(len(names), 2, dtype=torch.float64, device=device)  # error, energy; read back once
    for i in range(0, len(images), chunk):
        x = images[i : i + chunk].to(device, non_blocking=True)
        d, s = outputs(dense, x), outputs(model, x)
        for k, n in enumerate(names):
            sums[k, 0] += (s[n][-1] - d[n][-1]).double().pow(2).sum()
            sums[k, 1] += d[n][-1].double().pow(2).sum()
    host = sums.tolist()
    return {n: relative_error(*host[k]) for k, n in enumerate(names)}


def relative_error(error: float, energy: float) -> float | None:
    """Squared error over the dense output's energy; None where that is zero."""
    return error / energy if energy > 0 else None


def takes_gram(
    layer: nn.Module, sample: torch.Tensor, n_images: int, options: POTOptions, unit_size: int, recomputed: bool
) -> bool:
    """Whether the layer's objective is its Gram statistics: where they fit in cache_bytes and are estimated cheaper
    (recomputed inputs: whenever they fit)."""
    if not (options.gram and gram_candidate(layer)):
        return False
    n_images, iterations = options.sizes_for_choices(n_images)
    batch = min(options.batch_size, n_images)
    plan = gram_plan(layer, sample, n_images, iterations, batch, unit_size, options.gram_gradient)
    return (recomputed or plan["gram_s"] < plan["forward_s"]) and plan["bytes"] <= options.cache_bytes


def layer_objective(
    layer: nn.Module, inputs: torch.Tensor | RecomputedInputs, options: POTOptions, units: torch.Tensor | None = None
) -> ForwardObjective | GramObjective:
    """Gram statistics where `takes_gram` says so (and the layer is linear in its weight), else the layer's forward."""
    unit_size = 1 if units is None else units.shape[1]
    if takes_gram(layer, inputs[:1], len(inputs), options, unit_size, isinstance(inputs, RecomputedInputs)):
        try:
            return GramObjective(layer, inputs, units)
        except NotLinearInWeights:
            pass
    return ForwardObjective(layer, inputs, units)


def input_groups(bytes_per_image: list[int], n_images: int, options: POTOptions) -> list[tuple[int, int, bool]]:
    """(start, end, recomputed) of consecutive layers whose inputs fit in cache_bytes together; a layer whose inputs
    alone exceed it is a group of its own, recomputed wherever they are read."""
    planned = options.sizes_for_choices(n_images)[0]
    groups, start = [], 0
    while start < len(bytes_per_image):
        end, used = start, 0
        while end < len(bytes_per_image) and used + bytes_per_image[end] * planned <= options.cache_bytes:
            used += bytes_per_image[end] * planned
            end += 1
        groups.append((start, max(end, start + 1), end == start))
        start = max(end, start + 1)
    return groups


@dataclass
class LayerProblem:
    """One layer, corrected and ready for its Adam steps."""

    name: str
    layer: nn.Module
    bias: torch.Tensor  # the layer's: `prepare_layer` gives one to every layer that had none
    keep: torch.Tensor
    w_dense: torch.Tensor
    b_dense: torch.Tensor
    objective: ForwardObjective | GramObjective
    draws: torch.Tensor
    energy: float
    log: dict

    def error(self) -> float | None:
        """The layer's output error at its current weights, relative to the dense output's energy."""
        loss = self.objective.full_loss(self.layer.weight, self.layer.bias, self.w_dense, self.b_dense)
        return relative_error(loss, self.energy)


def prepare_layer(
    name: str,
    dense_layer: nn.Module,
    layer: nn.Module,
    keep: torch.Tensor,
    inputs: torch.Tensor | RecomputedInputs,
    options: POTOptions,
    units: torch.Tensor | None,
) -> LayerProblem:
    """The layer's objective, then bias correction."""
    tic = time.perf_counter()
    w_dense = layer_weight(dense_layer).detach()
    if layer.bias is None:
        weight = layer_weight(layer)
        layer.bias = nn.Parameter(torch.zeros(weight.shape[0], device=weight.device))
    bias, dense_bias = cast(torch.Tensor, layer.bias), layer_bias(dense_layer)
    b_dense = torch.zeros_like(bias) if dense_bias is None else dense_bias.detach()
    objective = layer_objective(layer, inputs, options, units)
    del inputs  # a Gram objective keeps only its statistics
    zeros_w, zeros_b = torch.zeros_like(w_dense), torch.zeros_like(b_dense)
    energy = objective.full_loss(zeros_w, zeros_b, w_dense, b_dense)  # the dense output's mean squared norm
    per_step = 1 if units is not None else min(options.batch_size, len(objective))
    gen = torch.Generator().manual_seed(options.seed * 1_000_003 + zlib.crc32(name.encode()))  # the layer's own
    draws = torch.randint(len(objective), (fitted_iterations(options.iterations), per_step), generator=gen)
    keep_f = keep.to(layer_weight(layer).dtype)
    p = LayerProblem(name, layer, bias, keep_f, w_dense, b_dense, objective, draws.to(w_dense.device), energy, {})
    p.log["error_masked"] = p.error()
    if options.bias_correction:
        with torch.no_grad():
            bias.add_(objective.mean_error(layer_weight(layer), bias, w_dense, b_dense))
    p.log["error_bias_corrected"] = p.error()
    p.log["objective"] = "gram" if isinstance(objective, GramObjective) else "forward"
    p.log["setup_s"] = time.perf_counter() - tic
    return p


def stacked_groups(problems: list[LayerProblem], concurrent: bool) -> list[list[LayerProblem]]:
    """Problems whose Gram statistics share a signature and whose weights share a shape form one group (with
    `concurrent`; else each is a group of its own)."""
    groups: dict[object, list[LayerProblem]] = {}
    for i, p in enumerate(problems):
        signature = stack_signature(p.objective)
        groups.setdefault((signature, tuple(p.w_dense.shape)) if signature and concurrent else i, []).append(p)
    return list(groups.values())


def group_gradients(group: list[LayerProblem], gram_gradient: str):
    """losses(sel, W, B) -> (L,) for stacked weights and biases, their gradients left in W.grad and B.grad."""
    w_dense = torch.stack([p.w_dense for p in group])
    b_dense = torch.stack([p.b_dense for p in group])
    if isinstance(group[0].objective, GramObjective):
        # A group shares one stack signature: every objective is a Gram one when the first is.
        stack = GramStack([cast(GramObjective, p.objective) for p in group])
        if gram_gradient == "closed-form":
            return lambda sel, W, B: stack.losses_and_gradients(sel, W, B, w_dense, b_dense)
        return _by_autograd(lambda sel, W, B: stack.losses(sel, W, B, w_dense, b_dense))
    (one,) = group
    return _by_autograd(lambda sel, W, B: one.objective.loss(sel[0], W[0], B[0], w_dense[0], b_dense[0]).unsqueeze(0))


def _by_autograd(losses_of):
    def losses_and_gradients(sel, W, B):
        losses = losses_of(sel, W, B)
        losses.sum().backward()
        return losses.detach()

    return losses_and_gradients


def optimise(group: list[LayerProblem], options: POTOptions, check_every: int = 50) -> None:
    """Adam on each layer's own loss with its mask fixed, the group's layers stacked; a layer's weights are held
    after the step whose loss is below early_stop_loss (msbench)."""
    tic = time.perf_counter()
    losses_and_gradients = group_gradients(group, options.gram_gradient)
    weight = torch.stack([layer_weight(p.layer).detach() for p in group]).requires_grad_(True)
    bias = torch.stack([p.bias.detach() for p in group]).requires_grad_(True)
    keep = torch.stack([p.keep for p in group])
    draws = torch.stack([p.draws for p in group], 1)  # (iterations, L, per_step)
    held = [getattr(p.objective, "inputs", None) for p in group]  # a graph reads device tensors: none recomputed
    capturable = group[0].w_dense.is_cuda and all(t is None or isinstance(t, torch.Tensor) for t in held)
    graphs = options.cuda_graphs and capturable and fitted_iterations(options.iterations) > step_graph.WARMUP
    params = [{"params": [weight], "lr": options.lr_weight}, {"params": [bias], "lr": options.lr_bias}]
    opt = torch.optim.Adam(params, capturable=graphs)  # capturable: Adam's step count stays on the device
    active = torch.ones(len(group), dtype=torch.bool, device=weight.device)
    steps = torch.zeros(len(group), dtype=torch.long, device=weight.device)
    last = torch.full((len(group),), float("nan"), device=weight.device)
    by_layer = (-1,) + (1,) * (weight.dim() - 1)

    def step(sel: torch.Tensor) -> None:  # in place throughout: a graph replays into the same tensors
        opt.zero_grad(set_to_none=True)  # on the host: a captured step's backward allocates the gradients it rewrites
        losses = losses_and_gradients(sel, weight, bias)
        cast(torch.Tensor, weight.grad).mul_(keep)  # losses_and_gradients has just set it
        before = weight.detach().clone(), bias.detach().clone()
        opt.step()
        with torch.no_grad():
            weight.mul_(keep)  # Adam's moments must never revive a pruned weight
            weight.copy_(torch.where(active.view(by_layer), weight, before[0]))
            bias.copy_(torch.where(active.view(-1, 1), bias, before[1]))
            last.copy_(torch.where(active, losses, last))
            steps.add_(active)
            active.logical_and_(losses >= options.early_stop_loss)

    # A graph is captured on the current device: the weights' device, for the time of the steps.
    runner = step_graph.StepRunner(lambda _it, sel: step(sel), graphs)
    with torch.cuda.device(weight.device) if graphs else contextlib.nullcontext():
        for it in range(len(draws)):  # until no layer is active (read every `check_every` steps)
            runner.run(it, draws[it], then=lambda: None)
            if (it + 1) % check_every == 0 and not bool(active.any()):
                break
    share = (time.perf_counter() - tic) / len(group)
    with torch.no_grad():
        for i, p in enumerate(group):
            layer_weight(p.layer).copy_(weight[i])
            p.bias.copy_(bias[i])
            final = float(last[i])
            p.log.update(
                iterations=int(steps[i]),
                final_loss=final,
                early_stopped=final < options.early_stop_loss,
                error_reconstructed=p.error(),
                stacked_layers=len(group),
                steps_on=runner.how,
                wall_s=round(p.log.pop("setup_s") + share, 2),  # statistics + its share of the steps
            )
            for k in ("error_masked", "error_bias_corrected", "error_reconstructed"):
                p.log[k] = None if p.log[k] is None else round(p.log[k], 6)


def pot(model: nn.Module, calibration, target: float, options: POTOptions) -> tuple[nn.Module, SparsityReport]:
    """POT with the chosen allocation: correct, then reconstruct each layer on the dense model's inputs."""
    t0 = time.perf_counter()
    target, device, chosen, _ = setup = open_run(model, calibration, target, options)
    calib = setup.required_calib()
    forward_order(model, chosen, calib.take([0]).to(device), f"pot-{options.allocation}")  # every layer reached
    checkpoint = run_checkpoint(
        options, run_identity(target, options, calib, model), f"pot-{options.allocation} {target:.2%}"
    )
    model.eval()
    try:
        folded = fold_batchnorm(model) if options.fold_bn else []
    except ValueError as e:  # an untraceable model: say how to run POT on it anyway
        raise ValueError(f"{e}; or run POT without folding (fold_bn=False: msbench folds)") from e
    model.requires_grad_(False)
    layers = options.layers(model)
    dense = copy.deepcopy(model)
    masks = allocation_keep_masks(layers, target, options.allocation)
    with torch.no_grad():
        for n, m in layers.items():
            weight = layer_weight(m)
            weight.copy_(correct_weight(weight, masks[n]) if options.weight_correction else weight * masks[n])

    images = calib.take(list(range(len(calib))))  # on the host, each forward's chunk sent to the device
    if device.type == "cuda":
        images = images.pin_memory()
    units = (
        fixed_batches(len(images), options.batch_size, options.seed).to(device)
        if options.sampling == "batches"
        else None
    )
    per_layer_log: dict[str, dict] = {}
    elapsed_before = 0.0
    state = checkpoint.load()
    if state is not None:
        model.load_state_dict(state["model"])
        per_layer_log, elapsed_before = state["log"], state["elapsed_s"]
    names = [n for n in layers if n not in per_layer_log]
    sample = collect_inputs(dense, names, images[:1]) if names else {}
    per_image = {n: t.numel() * t.element_size() for n, t in sample.items()}
    bar = tqdm(
        total=len(layers),
        initial=len(per_layer_log),
        disable=not options.progress,
        desc=f"pot-{options.allocation} {target:.2f}",
        dynamic_ncols=True,
    )
    pending: list[LayerProblem] = []

    def reconstruct_pending() -> None:
        for group in stacked_groups(pending, options.concurrent):
            optimise(group, options)
            for p in group:
                per_layer_log[p.name] = p.log
            checkpoint.save(
                {
                    "model": model.state_dict(),
                    "log": per_layer_log,
                    "elapsed_s": elapsed_before + time.perf_counter() - t0,
                },
                progress=f"layer {len(per_layer_log)} of {len(layers)}",
            )
            bar.update(len(group))
            bar.set_postfix(layer=group[-1].name, loss=f"{group[-1].log['final_loss']:.2e}")
        pending.clear()

    collect_s = 0.0
    planned_images = options.sizes_for_choices(len(images))[0]
    for start, end, recomputed in input_groups([per_image[n] for n in names], len(images), options):
        tic = time.perf_counter()
        inputs: dict[str, torch.Tensor | RecomputedInputs]
        if recomputed:
            inputs = {names[start]: RecomputedInputs(dense, names[start], images)}
        else:
            inputs = dict(collect_inputs(dense, names[start:end], images))
        collect_s += time.perf_counter() - tic
        for n in names[start:end]:
            pending.append(prepare_layer(n, dense.get_submodule(n), layers[n], masks[n], inputs.pop(n), options, units))
            statistics = sum(p.objective.grams.numel() * 4 for p in pending if isinstance(p.objective, GramObjective))
            over = statistics * planned_images > options.cache_bytes * len(images)  # at the size choices are made for
            if not isinstance(pending[-1].objective, GramObjective) or over:
                reconstruct_pending()  # a forward objective holds its inputs
    reconstruct_pending()
    bar.close()
    apply_keep_masks(layers, masks)
    for n, error in network_errors(dense, model, list(layers), images, options.cache_bytes).items():
        per_layer_log[n]["error_in_network"] = None if error is None else round(error, 6)
    model.requires_grad_(True)
    extra = {
        "folded_bn": [list(p) for p in folded],
        "resumed_layers": len(layers) - len(names),
        "input_collection_s": round(collect_s, 3),  # this process's share
    }
    timed = LoopResult(wall_s=elapsed_before + time.perf_counter() - t0)
    report = loop_report(f"pot-{options.allocation}", target, model, options, calib, timed, extra)
    for row in report.per_layer:
        row.update(per_layer_log[row["name"]])
    return model, report


for allocation_name, label, style in (("l2norm", "L2Norm", ("tab:blue", "s")), ("erk", "ERK", ("tab:green", "^"))):
    register(
        Method(
            f"pot-{allocation_name}",
            f"POT ({label})",
            pot,
            POTOptions,
            fixed={"allocation": allocation_name},
            role=PAPER_BASELINE,
            family="pot",  # one budget and one set of `--pot-*` flags for both allocations
            style=style,
            summary=f"POT with the {label} allocation (msbench protocol)",
            headline=True,
        )
    )
