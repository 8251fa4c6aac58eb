"""Benchmark: every method on common torchvision and timm models (random weights, 8 images, 2 iterations, 70%): each
cell reaches the exact target, is refused before any work with a named reason, runs past the limit, or fails."""

from __future__ import annotations

import logging
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

import fcpts
from benchmarks import parser
from benchmarks.report import measure_then_emit
from fcpts.core.masks import describe_unprunable, layer_weight, prunable_layers, unprunable_weights
from tasks.grid.paths import REPO_ROOT

TARGET, IMAGES, ITERATIONS, BATCH = 0.7, 8, 2, 4


@dataclass(frozen=True)
class Model:
    library: str  # "torchvision" or "timm"
    name: str
    pixels: int
    kwargs: tuple[tuple[str, Any], ...] = ()  # e.g. a smaller image size where the model takes one

    def build(self) -> nn.Module:
        torch.manual_seed(0)
        if self.library == "torchvision":
            import torchvision

            return torchvision.models.get_model(self.name, weights=None, num_classes=10, **dict(self.kwargs))
        import timm

        return timm.create_model(self.name, pretrained=False, num_classes=10, **dict(self.kwargs))


MODELS = (
    Model("torchvision", "resnet18", 64),
    Model("torchvision", "mobilenet_v3_small", 64),
    Model("torchvision", "efficientnet_b0", 64),
    Model("torchvision", "regnet_x_400mf", 64),
    Model("torchvision", "shufflenet_v2_x1_0", 64),
    Model("torchvision", "convnext_tiny", 64),
    Model("torchvision", "swin_t", 64),
    Model("torchvision", "vit_b_16", 64, (("image_size", 64),)),
    Model("timm", "ecaresnet26t", 64),
    Model("timm", "convnextv2_atto", 64),
    Model("timm", "mobilevit_xxs", 64),
    Model("timm", "poolformer_s12", 64),
    Model("timm", "deit_tiny_patch16_224", 64, (("img_size", 64),)),
    Model("timm", "levit_128s", 224),
    Model("timm", "efficientformer_l1", 224),
    Model("timm", "resnetv2_50x1_bit", 64),  # standardised convs (StdConv2d): refused, they compute dense
    Model("timm", "nf_regnet_b0", 64),  # ScaledStdConv2d, the same
)


class TimeLimit(Exception):
    """Raised in a cell by SIGALRM once its seconds have passed (when control is back in Python)."""


def expire(*_: object) -> None:
    raise TimeLimit


def refused_by_the_suite(error: BaseException) -> bool:
    """Whether `error` is one of the suite's own refusals: a `raise` statement in fcpts/ or baselines/."""
    frame = traceback.extract_tb(error.__traceback__)[-1]
    path = Path(frame.filename).resolve()
    ours = any(path.is_relative_to(REPO_ROOT / package) for package in ("fcpts", "baselines"))
    return ours and (frame.line or "").lstrip().startswith("raise")


def run_cell(build: Callable[[], nn.Module], pixels: int, method: str, limit_s: int) -> tuple[str, str]:
    """(outcome, detail) of one method on a fresh model: ok, refused, failed or over the limit."""
    model = fcpts.attention_as_linear(build())
    images = torch.randn(IMAGES, 3, pixels, pixels, generator=torch.Generator().manual_seed(0))
    spec = fcpts.get_method(method)
    budget: dict[str, Any] = {"iterations": ITERATIONS} if spec.trains or spec.family == "pot" else {}
    if spec.trains:
        budget["batch_size"] = BATCH
    start = time.perf_counter()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(limit_s)
    try:
        _, report = fcpts.sparsify(model, images, TARGET, method=method, progress=False, **budget)
    except TimeLimit:
        return "over the limit", f"{limit_s} s"
    except Exception as e:  # noqa: BLE001 - what the benchmark is for: every failure is reported, not raised
        first_line = str(e).splitlines()[0] if str(e) else ""
        return ("refused" if refused_by_the_suite(e) else "failed"), f"{type(e).__name__}: {first_line}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    wall = time.perf_counter() - start
    total = sum(r["numel"] for r in report.per_layer)
    exact = round(TARGET * total) / total
    if method != "str" and abs(report.achieved_sparsity - exact) > 1e-12:  # STR reaches what its search reaches
        return "failed", f"sparsity {report.achieved_sparsity:.6f}, not the exact {exact:.6f}"
    return "ok", f"{wall:.1f} s"


def measure(models: tuple[Model, ...], methods: list[str], limit_s: int) -> list[str]:
    logging.getLogger("fcpts").setLevel(logging.ERROR)  # the cells' warnings (STR's reach, no blocks found)
    rows, outcomes = [], []
    for spec in models:
        model = spec.build()
        layers_before, before = prunable_layers(model), unprunable_weights(model)
        fcpts.attention_as_linear(model)
        layers, after = prunable_layers(model), unprunable_weights(model)
        pruned = sum(layer_weight(m).numel() for m in layers.values())
        outside = describe_unprunable(before) if before else "none"
        if not before or after == before:
            swapped = ""  # no nn.MultiheadAttention among them: the swap changes nothing
        else:
            swapped = f" ({describe_unprunable(after) + ' still not' if after else 'all'} pruned once swapped)"
        rows.append(
            f"{spec.library} {spec.name} at {spec.pixels} px: {pruned:,} weights in {len(layers)} layers pruned "
            f"({len(layers_before)} before the attention swap); in layers no method prunes: {outside}{swapped}"
        )
        for method in methods:
            outcome, detail = run_cell(spec.build, spec.pixels, method, limit_s)
            outcomes.append(outcome)
            rows.append(f"  {method:16s} {outcome:14s} {detail}")
            print(rows[-1], flush=True)
    counts = {o: outcomes.count(o) for o in ("ok", "refused", "over the limit", "failed")}
    head = [
        f"{len(models)} models x {len(methods)} methods, {IMAGES} random images, {ITERATIONS} iterations where a "
        f"method takes them, target {TARGET:.0%}, attention swapped (fcpts.attention_as_linear), {limit_s} s a cell "
        "at most",
        f"cells: {counts['ok']} ok (the exact target; STR what its search reached), {counts['refused']} refused "
        f"before any work with a named reason, {counts['over the limit']} over the time limit, "
        f"{counts['failed']} failed otherwise",
    ]
    return head + rows


def main(argv: list[str] | None = None) -> None:
    p = parser("model-coverage")
    args = p.parse_args(argv)
    known = {m.name: m for m in MODELS}
    unknown = sorted(set(args.models or ()) - set(known))
    if unknown:
        p.error(f"unknown model {', '.join(unknown)}; models: {', '.join(known)}")
    models = tuple(known[n] for n in args.models) if args.models else MODELS
    methods = args.methods or list(fcpts.METHODS)
    measure_then_emit(lambda: measure(models, methods, args.limit_s), args.out)
