"""FCPTS: the student's weights and per-layer thresholds trained against a frozen teacher (reconstruction + control
loss), then every threshold scaled by one factor so exactly round(target * N) weights are zero."""

from __future__ import annotations

import collections
import copy
import logging
import math
import time
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from fcpts.core.allocation import erk_rates, global_keep_masks
from fcpts.core.bn import recalibrate_bn
from fcpts.core.bridge import LayerBridges
from fcpts.core.calibration import Calibration
from fcpts.core.loop import (
    StepBatches,
    frozen_teacher,
    kl_distill,
    lr_schedulers,
    run_checkpoint,
    run_identity,
    train_loop,
)
from fcpts.core.masks import apply_keep_masks, hard_mask, layer_weight, unparametrize_weights
from fcpts.core.options import RunSetup, TrainingOptions, check_at_least, open_run
from fcpts.core.report import SparsityReport, loop_report

from . import thresholds
from .registry import PAPER_METHOD, Method, register

log = logging.getLogger("fcpts")
# the learned masks this far off the target before the exact step: that step prunes (or restores) a large share at once
DRIFT_WARNING = 0.01
# the block weight where one of the two gradients is zero and their ratio says nothing: the blocks as they come (FCPTS)
UNBALANCED_WEIGHT = 1.0


@dataclass
class FCPTSOptions(TrainingOptions):
    """Every knob of FCPTS (docs/api.md): the paper's defaults, else the released code's (METHOD.md)."""

    reconstruction: Literal["kl", "mse-blocks"] = "mse-blocks"
    block_names: list[str] | None = None  # for "mse-blocks"; None: detected automatically
    bridge: Literal["kde", "histogram"] = "kde"
    kde_points: int = 100
    kde_bandwidth: float = 0.5  # in units of the layer's weight std
    histogram_bins: int = 100
    control_loss: Literal["abs", "squared"] = "abs"
    control_weight: float = 1.0
    threshold_grad: Literal["ste", "control-only"] = "control-only"
    learn_thresholds: bool = True  # False: each layer held at its ERK rate (paper's Figure 4 ablation)
    channels_last: bool = True  # run teacher and student in NHWC (faster with oneDNN); output is NCHW
    bn_recalibration: bool = False  # re-estimate BN statistics on the calibration set after the exact step
    cuda_graphs: bool = True  # on a GPU, replay each step's forward and backward from a CUDA graph (step_graph.py)

    def validate(self) -> None:
        super().validate()  # the Literal options' choices are checked with the types
        check_at_least(self, "kde_points", 1)
        check_at_least(self, "kde_bandwidth", 0.0, inclusive=False)


def default_blocks(model: nn.Module) -> list[str]:
    """Block outputs for MSE reconstruction: each non-Sequential child holding a prunable layer of an nn.Sequential
    or of a timm-style stage (a class named `...Stage`)."""
    names = []
    for parent_name, parent in model.named_modules():
        if isinstance(parent, nn.Sequential) or type(parent).__name__.endswith("Stage"):
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


def block_difference(student: torch.Tensor, teacher: torch.Tensor, reuse_teacher: bool) -> torch.Tensor:
    """student - teacher in float32; with `reuse_teacher`, written over a float32 teacher of the student's shape."""
    if reuse_teacher and teacher.dtype == torch.float32 and teacher.shape == student.shape:
        return torch.sub(student.float(), teacher, out=teacher)
    return torch.sub(student.float(), teacher.float())


def block_differences(
    students: list[torch.Tensor], teachers: list, sole: list[bool], together: bool
) -> list[torch.Tensor]:
    """Every block's difference in float32: with `together`, in two operators for all blocks (those in `sole` as
    teacher - student, written over their teachers; the caller's gradient scales carry the sign); else one by one."""
    reused = [teachers[k] for k, reuse in enumerate(sole) if reuse]
    if len({storage_address(t) for t in reused}) < len(reused):
        raise RuntimeError(
            "a block's difference would be modified by an inplace operation: two teacher block outputs to be written "
            "over share their memory, which `sole` named though something else reads it"
        )
    if not together:
        return [block_difference(s, t, reuse) for s, t, reuse in zip(students, teachers, sole)]
    diffs: list[torch.Tensor] = list(teachers)
    fresh = [k for k, reuse in enumerate(sole) if not reuse]
    if fresh:
        for k, d in zip(fresh, torch._foreach_sub([students[k] for k in fresh], [teachers[k] for k in fresh])):
            diffs[k] = d
    if reused:
        torch._foreach_sub_(reused, [students[k] for k, reuse in enumerate(sole) if reuse])
    return diffs


class _BlocksMSE(torch.autograd.Function):
    """The sum of every block's F.mse_loss(student, teacher) in float32, teacher fixed, in a few kernels for all
    blocks from one saved difference each; the teachers' outputs are let go once the differences are made."""

    @staticmethod
    def forward(
        ctx, teachers: list, sole: list[bool], together: bool, scales: torch.Tensor, *students: torch.Tensor
    ) -> torch.Tensor:
        diffs = [d.detach() for d in block_differences(list(students), teachers, sole, together)]
        teachers[:] = [None] * len(teachers)  # the teachers' objects let go too
        ctx.save_for_backward(scales, *diffs)
        ctx.student_dtypes = [s.dtype for s in students]
        inverse_numels, _ = scales
        return (torch.stack(torch._foreach_norm(diffs)).square_() * inverse_numels).sum()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        scales, *diffs = ctx.saved_tensors  # read once: a second backward through this graph fails on its version
        _, twice_inverse_numels = scales
        torch._foreach_mul_(diffs, list((grad * twice_inverse_numels).unbind()))
        return None, None, None, None, *(d.to(dtype) for d, dtype in zip(diffs, ctx.student_dtypes))


class BlocksMSE:
    """sum_k F.mse_loss(students[k], teachers[k]), the teachers popped from their dict (those in `sole` overwritten
    with the difference: only tensors nothing else reads); each set of block sizes' 1/n and 2/n is made on the
    device once (a CUDA graph replay cannot copy them there)."""

    def __init__(self) -> None:
        self.scales: dict[tuple, torch.Tensor] = {}

    def __call__(self, students: dict[str, torch.Tensor], teachers: dict[str, torch.Tensor], sole: set[str]):
        names = list(students)
        device, numels = students[names[0]].device, [students[k].numel() for k in names]
        teacher_list = [teachers.pop(k) for k in names]  # no gradient: read inside the forward only
        reuse = [k in sole for k in names]
        # all float32 and of one shape: `block_differences` takes its few operators, teacher - student where `reuse`
        pairs = zip(students.values(), teacher_list)
        together = all(s.dtype == t.dtype == torch.float32 and s.shape == t.shape for s, t in pairs)
        key = (device, *numels, *(together and r for r in reuse))
        if key not in self.scales:  # a flipped difference's gradient scale is negative: -(t - s) = s - t exactly
            twice = [(-2.0 if together and r else 2.0) / n for n, r in zip(numels, reuse)]
            self.scales[key] = torch.tensor([[1.0 / n for n in numels], twice], dtype=torch.float32).to(device)
        return _BlocksMSE.apply(teacher_list, reuse, together, self.scales[key], *students.values())


def storage_address(t: torch.Tensor) -> int:
    """The address of a tensor's storage, without making a storage object (one would keep it shared)."""
    return t.data_ptr() - int(t.storage_offset()) * t.element_size()


def sole_tensors(blocks: dict[str, torch.Tensor], output: torch.Tensor) -> set[str]:
    """The block outputs that alone cover their memory densely: the ones a block MSE may overwrite."""
    users = collections.Counter(storage_address(t) for t in [*blocks.values(), output])
    return {
        name for name, t in blocks.items()
        if users[storage_address(t)] == 1 and t.numel() > 0
        and (t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)))
    }  # fmt: skip


class Variant:
    """The points at which a variant of FCPTS (`fcpts_plus.Plan`) changes its loop, each default FCPTS's own."""

    block_weight = 1.0  # the factor of the blocks' MSE sum against the output KL
    block_balance: float | None = None  # instead: the weight whose blocks' gradient is this times the KL's at step 0
    balance_batches = 4  # calibration batches that measurement takes
    start_rates: dict[str, float] | None = None  # the layers' rates at the first step (None: ERK at the target)

    def rates_at(self, step: int) -> dict[str, float] | None:
        """Rates the layers are held at before `step`, as a schedule does (None: the learned thresholds rule)."""
        return None


class _Thresholds:
    """Every layer's threshold sigmoid(s_l), learned, and the differentiable global sparsity they give (the bridge)."""

    def __init__(self, model: nn.Module, layers: dict[str, nn.Module], rates: dict[str, float], options: FCPTSOptions):
        self.layers, self.names = layers, list(layers)
        numels = [layer_weight(layers[n]).numel() for n in self.names]
        ste = options.learn_thresholds and options.threshold_grad == "ste"
        self.params = thresholds.attach(layers, rates, threshold_grad=ste)
        together = thresholds.MaskedTogether.applies(layers, self.params)
        self.together = thresholds.MaskedTogether(model, layers, self.params) if together else None
        gen = torch.Generator().manual_seed(options.seed)  # the KDE samples: drawn on the host, moved once
        self.bridges = LayerBridges(
            numels, options.bridge, options.kde_points, options.kde_bandwidth, options.histogram_bins, gen
        )
        self.scores: list[torch.Tensor] = [self.params[n].score for n in self.names]
        for s in self.scores:
            s.requires_grad_(options.learn_thresholds)

    def values(self) -> torch.Tensor:
        """Every layer's threshold, in layer order, as one tensor."""
        return torch.sigmoid(torch.stack(self.scores))


def _grads(loss: torch.Tensor, params: list[torch.Tensor], retain: bool = False) -> list[torch.Tensor]:
    grads = torch.autograd.grad(loss, params, retain_graph=retain, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params)]


class _Reconstruction:
    """The reconstruction loss: the output KL, plus the weighted sum of the blocks' MSE with "mse-blocks"."""

    def __init__(self, model: nn.Module, teacher: nn.Module, options: FCPTSOptions, variant: Variant):
        self.temperature, self.weight = options.temperature, variant.block_weight
        self.at_once = BlocksMSE()
        self.taps = None
        if options.reconstruction == "mse-blocks":
            blocks = options.block_names if options.block_names is not None else default_blocks(model)
            if not blocks:
                log.warning(
                    "reconstruction='mse-blocks' found no blocks in %s (children of an nn.Sequential or a "
                    "timm-style stage): only the output KL reconstructs; name them with block_names=[...]",
                    type(model).__name__,
                )
            self.taps = _Taps(model, blocks), _Taps(teacher, blocks)

    def __call__(self, y_s: torch.Tensor, y_t: torch.Tensor) -> torch.Tensor:
        rec = kl_distill(y_s, y_t, self.temperature)
        if self.taps is not None:
            s, t = self.taps[0].outputs, self.taps[1].outputs
            sole = sole_tensors(t, y_t)
            if s:
                rec = rec + self.weight * self.at_once(s, t, sole)
        return rec

    def balance(
        self,
        student: nn.Module,
        teacher: nn.Module,
        batch_of: StepBatches,
        params: list[torch.Tensor],
        *,
        balance: float,
        batches: int,
    ) -> dict:
        """Set the block weight w so that ||grad(w * blocks' MSE)|| = balance * ||grad(KL)|| over the first `batches`
        of the loop's calibration batches (UNBALANCED_WEIGHT where a gradient is zero), so their balance is chosen
        rather than set by the network's activation scale and block count; what was measured. Both models are left
        as they were."""
        assert self.taps is not None  # a variant balances only with "mse-blocks"
        student_blocks, teacher_blocks = self.taps[0].outputs, self.taps[1].outputs
        t0 = time.perf_counter()
        saved = copy.deepcopy(student.state_dict()), copy.deepcopy(teacher.state_dict())
        was_training = student.training
        student.train()
        kl_sum = [torch.zeros_like(p) for p in params]
        block_sum = [torch.zeros_like(p) for p in params]
        steps = min(batches, max(1, batch_of.calib.steps_per_epoch))
        has_blocks = False
        for step in range(steps):
            x = batch_of(step)
            with torch.no_grad():
                y_t = teacher(x).float()
            y_s = student(x).float()
            kl = kl_distill(y_s, y_t, self.temperature)
            has_blocks = bool(student_blocks)  # no block found: no block term to weigh
            torch._foreach_add_(kl_sum, _grads(kl, params, retain=has_blocks))
            if has_blocks:
                torch._foreach_add_(block_sum, _grads(self.at_once(student_blocks, teacher_blocks, set()), params))
        student.load_state_dict(saved[0])
        teacher.load_state_dict(saved[1])
        student.train(was_training)
        kl_norm, block_norm = (
            float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))) / steps
            for grads in (kl_sum, block_sum)
        )
        if not (math.isfinite(kl_norm) and math.isfinite(block_norm)):
            raise FloatingPointError(
                f"block balancing measured a non-finite gradient (KL {kl_norm:.3g}, blocks {block_norm:.3g}) on the "
                f"first {steps} calibration batches: check the calibration images and the dense model's outputs for "
                "NaN/Inf, or set block_weight to a number instead of 'auto'"
            )
        unbalanced = None
        if kl_norm > 0 and block_norm > 0:
            self.weight = balance * kl_norm / block_norm
        else:  # a zero gradient on one side (both: the student equals the teacher, e.g. nothing pruned yet)
            self.weight = UNBALANCED_WEIGHT
            unbalanced = "the blocks' gradient is zero" if kl_norm > 0 else "the output KL's gradient is zero"
            if not has_blocks:
                unbalanced = "the model has no block outputs to reconstruct"
            elif not (kl_norm > 0 or block_norm > 0):
                unbalanced = "both gradients are zero: the student equals the teacher on the probe batches"
            log.warning("block balancing: %s; block weight %g (FCPTS's) instead of a ratio", unbalanced, self.weight)
        return {
            "chosen": self.weight,
            "balance": balance,
            "kl_grad_norm": kl_norm,
            "blocks_grad_norm": block_norm,
            "probe_batches": steps,
            "wall_s": round(time.perf_counter() - t0, 2),
            **({"unbalanced": unbalanced} if unbalanced else {}),
        }

    def remove(self) -> None:
        for taps in self.taps or ():
            taps.remove()


def _optimizer(model: nn.Module, thr: _Thresholds, options: FCPTSOptions, calib: Calibration):
    """SGD on the other parameters (with weight decay) and the thresholds (without): its scheduler, the other
    parameters and the rates for the report."""
    score_ids = {id(s) for s in thr.scores}
    other = [p for p in model.parameters() if id(p) not in score_ids and p.requires_grad]
    lr = options.resolved_lr(calib.batch_size)
    groups = [{"params": other, "weight_decay": options.weight_decay}]
    if options.learn_thresholds:  # one update for all thresholds (a CPU's default steps each scalar on its own)
        groups.append({"params": thr.scores, "weight_decay": 0.0, "foreach": True})
    schedulers, warmup = lr_schedulers(options, calib, torch.optim.SGD(groups, lr=lr, momentum=options.momentum))
    return schedulers, other, {"lr": lr, "warmup_iterations": warmup}


@torch.no_grad()
def _exact_step(thr: _Thresholds, target: float, method: str) -> tuple[dict, dict, dict]:
    """Rank |W| / t_l globally (one factor on every threshold) so exactly round(target * N) weights are pruned: the
    thresholds, the keep masks and how far the learned masks were from them."""
    t_final = dict(zip(thr.names, thr.values().tolist()))
    weights = {n: thresholds.original_weight(m).detach() for n, m in thr.layers.items()}
    before = {n: hard_mask(weights[n], t_final[n]) for n in thr.names}
    masks = global_keep_masks({n: weights[n].abs() / t_final[n] for n in thr.names}, target)
    flipped = sum(int((masks[n] != before[n]).sum().item()) for n in thr.names)
    total = sum(w.numel() for w in weights.values())
    sparsity_before = 1.0 - sum(int(before[n].sum().item()) for n in thr.names) / total
    if abs(sparsity_before - target) > DRIFT_WARNING:
        log.warning(
            "%s: the learned masks held %.2f%% sparsity against the %.2f%% target at the last step; the exact-target "
            "step changed %d weights at once, which usually costs accuracy. The control loss did not hold the level "
            "(a threshold gradient outpaced it, or a ramp ended short of the target): more iterations, a larger "
            "control_weight or a shorter ramp keep it on target.",
            method,
            100 * sparsity_before,
            100 * target,
            flipped,
        )
    return t_final, masks, {"sparsity_before_exact_step": sparsity_before, "weights_flipped_by_exact_step": flipped}


def run(model: nn.Module, calibration, target: float, options: FCPTSOptions) -> tuple[nn.Module, SparsityReport]:
    """FCPTS with learned thresholds (the paper's method), or ERK rates held (`learn_thresholds=False`)."""
    setup = open_run(model, calibration, target, options)
    return distill(model, setup, options, "fcpts" if options.learn_thresholds else "fcpts-fixed")


def distill(
    model: nn.Module, setup: RunSetup, options: FCPTSOptions, method: str, variant: Variant | None = None
) -> tuple[nn.Module, SparsityReport]:
    """The FCPTS loop on an opened run, changed where `variant` says; the exact-target step always ends it."""
    variant = variant if variant is not None else Variant()
    target, device, layers, calib = setup
    assert calib is not None
    if options.channels_last:
        model.to(memory_format=torch.channels_last)
    identity = run_identity(target, options, calib, model)
    teacher = frozen_teacher(model, options.teacher_mode)
    rates = variant.start_rates if variant.start_rates is not None else erk_rates(layers, target)
    learn_t = options.learn_thresholds
    thr = _Thresholds(model, layers, rates, options)
    schedulers, other, lr_rows = _optimizer(model, thr, options, calib)
    reconstruction = _Reconstruction(model, teacher, options, variant)

    def loss_fn(y_s: torch.Tensor, y_t: torch.Tensor, step: int):
        rec = reconstruction(y_s, y_t)
        global_r = thr.bridges(thr.values(), [thresholds.original_weight(layers[n]) for n in thr.names])
        gap = global_r - target
        control = gap.abs() if options.control_loss == "abs" else gap.pow(2)
        loss = rec + options.control_weight * control if learn_t else rec
        return loss, {"rec": rec.detach(), "control": control.detach(), "sparsity": global_r.detach()}

    def pin(step: int) -> None:
        """Before a step: ERK rates held (without learned thresholds), a variant's rates, or nothing."""
        held = rates if not learn_t else variant.rates_at(step)
        if held is not None:
            thresholds.pin_rates(thr.params, layers, held)

    batches = StepBatches(calib, device, options.channels_last)
    balance = None
    if variant.block_balance is not None:
        pin(0)  # the masks of the first step
        balance = reconstruction.balance(
            model, teacher, batches, other, balance=variant.block_balance, batches=variant.balance_batches
        )
        log.info("%s: block weight %.3g (the blocks' gradient %.3g x the KL's at the start)",
                 method, reconstruction.weight, variant.block_balance)  # fmt: skip

    checkpoint = run_checkpoint(options, identity, f"{method} {target:.2%}")
    desc = f"{method} {target:.2f}"
    loop = train_loop(
        model, teacher, batches, options, schedulers, loss_fn, checkpoint, desc=desc, before_step=pin,
        cuda_graphs=options.cuda_graphs,
    )  # fmt: skip
    reconstruction.remove()
    if thr.together is not None:  # the layers mask themselves again: their weights are read elsewhere from now on
        thr.together.remove()
    t_final, masks, exact = _exact_step(thr, target, method)
    unparametrize_weights(layers)
    apply_keep_masks(layers, masks)
    model.to(memory_format=torch.contiguous_format)
    if options.bn_recalibration:
        recalibrate_bn(model, calib, device)
    model.eval()

    extra = {**exact, "kept_dense": list(options.exclude), **lr_rows}
    if balance is not None:
        extra["block_weight"] = balance
    extra["resumed_from_step"] = loop.resumed_from_step
    report = loop_report(method, target, model, options, calib, loop, extra)
    for row in report.per_layer:
        row["threshold"] = t_final[row["name"]]
        row["initial_sparsity"] = rates[row["name"]]
    return model, report


register(
    Method(
        "fcpts",
        "FCPTS (ours)",
        run,
        FCPTSOptions,
        role=PAPER_METHOD,
        style=("tab:red", "o"),
        summary="learned per-layer thresholds, net-wise reconstruction, exact global target",
        headline=True,
    )
)
register(
    Method(
        "fcpts-fixed",
        "FCPTS, ERK rates fixed",
        run,
        FCPTSOptions,
        fixed={"learn_thresholds": False},
        role=PAPER_METHOD,
        ablation=True,
        family="fcpts",
        style=("tab:orange", "o"),
        summary="ERK rates held in every layer, FCPTS reconstruction otherwise (the paper's Figure 4)",
    )
)
