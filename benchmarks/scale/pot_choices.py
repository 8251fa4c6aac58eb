"""Benchmark: what POT chooses for each layer of an ImageNet model at the scale benchmark's probe sizes and at the
paper's calibration size: its inputs cached or recomputed, and its objective (Gram statistics or the layer's forward).

Why: POT makes both choices by comparing sizes that grow with the calibration images against `cache_bytes`
(baselines/pot.py: `input_groups`, `takes_gram`). The scale benchmark times POT on a few layers at 256 and 512
images and projects the cell to the paper's 10,240; a layer that chooses otherwise at 10,240 images runs other code
there than its probes timed. This lists each layer's choices at every size from one image's shapes (no
reconstruction runs; seconds on a CPU), with the budget and options of the scale benchmark's POT cells, and marks
the layers the scale benchmark times.

    python -m benchmarks.scale.pot_choices --model resnet18 --out results/benchmarks/pot_choices_resnet18.txt
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from baselines.pot import POTOptions, collect_inputs, input_groups, takes_gram
from baselines.pot_objective import gram_candidate, gram_plan
from benchmarks.report import measure_then_emit
from benchmarks.scale.scale import FULL, paper_budget
from benchmarks.scale.scale_cell import IMAGE_SIZE, layer_costs, spread
from fcpts.core.masks import prunable_layers


def choices(model: torch.nn.Module, sample: torch.Tensor, n_images: int, iterations: int, cfg: POTOptions) -> dict:
    """Per prunable layer: (inputs MB an image, "recomputed"/"cached", "gram"/"forward", GB of the inputs over
    all images, GB of the Gram statistics or None where the layer has none) at `n_images`."""
    layers = prunable_layers(model)
    inputs = collect_inputs(model, list(layers), sample)
    cfg = dataclasses.replace(cfg, iterations=iterations)
    per_image = {name: x.numel() * x.element_size() for name, x in inputs.items()}
    recomputed_at = {
        start for start, _, recomputed in input_groups([per_image[n] for n in layers], n_images, cfg) if recomputed
    }
    out = {}
    for i, (name, layer) in enumerate(layers.items()):
        recomputed = i in recomputed_at
        gram = takes_gram(layer, inputs[name], n_images, cfg, cfg.batch_size, recomputed)
        statistics = None
        if gram_candidate(layer):
            statistics = gram_plan(layer, inputs[name], n_images, iterations, cfg.batch_size, cfg.batch_size)["bytes"]
        out[name] = (
            per_image[name] / 1e6, "recomputed" if recomputed else "cached", "gram" if gram else "forward",
            per_image[name] * n_images / 1e9, None if statistics is None else statistics / 1e9,
        )  # fmt: skip
    return out


def run(args: argparse.Namespace) -> list[str]:
    from tasks.imagenet.models import architecture

    torch.manual_seed(0)
    model = architecture(args.model).eval()
    sample = torch.randn(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    budget = paper_budget("pot-l2norm")
    cfg = POTOptions(**{k: v for k, v in budget["options"].items() if k in POTOptions.field_names()})
    paper_images, paper_iterations = budget["n_calibration"], budget["iterations"]
    timed = set(spread(list(layer_costs(model)), FULL["layers"]))
    sizes = [(n, FULL["iterations"][0]) for n in FULL["images"]] + [(paper_images, paper_iterations)]
    at = {size: choices(model, sample, *size, cfg) for size in sizes}
    head = " | ".join(f"{n} images, {it} it." for n, it in sizes)
    lines = [
        f"POT (L2Norm) on {args.model} (random weights, {IMAGE_SIZE} px): each layer's inputs cached or recomputed, "
        f"and its objective, at the scale benchmark's probe sizes and at the paper's {paper_images} images "
        f"({paper_iterations} iterations, batch {cfg.batch_size}, cache_bytes {cfg.cache_bytes / 1e9:.0f} GB); "
        "* = a layer the scale benchmark times; last: the inputs over the paper's images and the Gram statistics there",
        f"{'layer':28s} {'MB/image':>8s} | {head} | GB at {paper_images}",
    ]
    differ = []
    for name, (mb, *_) in at[sizes[0]].items():
        picks = [" ".join(at[size][name][1:3]) for size in sizes]
        mark = "*" if name in timed else " "
        inputs_gb, gram_gb = at[sizes[-1]][name][3:]
        held = f"inputs {inputs_gb:.1f}, Gram " + ("-" if gram_gb is None else f"{gram_gb:.1f}")
        lines.append(f"{mark}{name:27s} {mb:8.2f} | " + " | ".join(f"{p:24s}" for p in picks) + f" | {held}")
        if len(set(picks)) > 1:
            differ.append(f"{name}{' (timed)' if name in timed else ''}")
    lines.append(
        f"layers whose choices at the paper's size differ from a probe's: {len(differ)} of {len(at[sizes[0]])}"
        + (f": {', '.join(differ)}" if differ else "")
    )
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--out", help="also write the output (with its provenance) to this file")
    args = p.parse_args(argv)
    measure_then_emit(lambda: run(args), args.out)


if __name__ == "__main__":
    main()
