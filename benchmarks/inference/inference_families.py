"""The models Table 7 (`benchmarks.inference.inference`) compares, each architecture as a family of one dense
model and its sparse versions: random weights show what a sparsity rate costs or buys, real sparse models
from deploy checkpoints and run records show what the methods actually produce. Every model is exported
to ONNX beside its sparse storage files, so all runtimes read the same graphs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from fcpts.core.masks import layer_weight, prunable_layers, sparsity_summary
from tasks.deploy.checkpoints import load_sparse_checkpoint
from tasks.deploy.export import export_onnx, inference_copy, max_abs_diff, ort_session
from tasks.deploy.sparse_storage import write_sparse_files


@dataclass
class Family:
    """One architecture at several sparsities: torch models (BN folded) and their ONNX files."""

    name: str
    shape: tuple[int, ...]
    note: str
    models: dict[str, nn.Module] = field(default_factory=dict)  # label -> inference model
    sparsity: dict[str, float] = field(default_factory=dict)
    files: dict[str, dict[str, Path]] = field(default_factory=dict)
    onnx_max_abs_diff: dict[str, float] = field(default_factory=dict)  # ONNX vs torch, per model


@torch.no_grad()
def random_unstructured(model: nn.Module, rate: float, seed: int) -> nn.Module:
    """Zero exactly round(rate * n) randomly chosen weights in every Conv2d/Linear (in place)."""
    g = torch.Generator().manual_seed(seed)
    for layer in prunable_layers(model).values():
        w = layer_weight(layer).view(-1)
        w[torch.randperm(w.numel(), generator=g)[: round(rate * w.numel())]] = 0.0
    return model


def random_family(name: str, sparsities: list[float], size: int, seed: int) -> Family:
    import torchvision

    builder = {"resnet18": torchvision.models.resnet18, "mobilenet_v2": torchvision.models.mobilenet_v2}[name]
    torch.manual_seed(seed)
    dense = inference_copy(builder(weights=None, num_classes=1000))
    fam = Family(name, (3, size, size), "random weights, uniform random unstructured sparsity in every conv/linear")
    for s in [0.0, *sparsities]:
        m = random_unstructured(inference_copy(dense), s, seed + 1) if s else dense
        fam.models[_label(s)], fam.sparsity[_label(s)] = m, sparsity_summary(m)[0]
    return fam


def cifar_family(checkpoint: Path, data_root: str | None) -> Family:
    """The real sparse CIFAR model of a deploy checkpoint beside the dense weights it started from."""
    from tasks.grid.cifar_models import cifar_resnet
    from tasks.grid.data import resolve_data_root
    from tasks.grid.weights import default_cifar_weights, load_checkpoint

    sparse, meta = load_sparse_checkpoint(checkpoint, None, None)
    dense = cifar_resnet(meta["model"])
    load_checkpoint(dense, default_cifar_weights(resolve_data_root(data_root), meta["dataset"], meta["model"]))
    fam = Family(f"cifar10-{meta['model']}", (3, 32, 32), f"real weights: FCPTS sparse model {checkpoint.name}")
    for m in (dense, sparse):
        s = sparsity_summary(m)[0]
        fam.models[_label(s)], fam.sparsity[_label(s)] = inference_copy(m), s
    return fam


def record_families(paths: list[Path]) -> list[Family]:
    """Real sparse models of run records (their saved state dicts), one family per task/dataset/model,
    each with the dense weights the records started from."""
    from tasks.deploy.saved_models import models_from_record
    from tasks.grid.data import DataNotFoundError

    fams: dict[tuple, Family] = {}
    for path in paths:
        try:
            dense, sparse, shape, rec = models_from_record(path)
        except DataNotFoundError as e:  # no record yet, or its sparse model (not committed) is not here
            print(f"[skip] {e}")
            continue
        key = (rec["task"], rec["dataset"], rec["model"])
        name = rec["model"] if rec["task"] == "imagenet" else f"{rec['dataset']}-{rec['model']}"
        if key not in fams:
            fams[key] = Family(name, shape, f"real weights ({rec['weights'].get('source') or rec['weights']['path']})")
            fams[key].models["dense"], fams[key].sparsity["dense"] = inference_copy(dense), sparsity_summary(dense)[0]
        s = sparsity_summary(sparse)[0]
        m = rec["metrics"]
        fams[key].note += (
            f"; {_label(s)}: {rec['method']} run record {Path(path).name} (top-1 {m['top1']:.2f} on "
            f"{m['n_images']} {rec['dataset']} images, dense {rec['dense_metrics']['top1']:.2f})"
        )
        fams[key].models[_label(s)], fams[key].sparsity[_label(s)] = inference_copy(sparse), s
    return list(fams.values())


def _label(s: float) -> str:
    return "dense" if s < 0.005 else f"{s:.0%}"


def export_family(fam: Family, work: Path) -> None:
    for label, m in fam.models.items():
        path = work / f"{fam.name}-{label.rstrip('%')}.onnx"
        data = export_onnx(m, path, fam.shape)
        fam.files[label] = write_sparse_files(path)
        x = torch.randn(2, *fam.shape, generator=torch.Generator().manual_seed(0))
        fam.onnx_max_abs_diff[label] = max_abs_diff(m, ort_session(data), x)


def build_families(args) -> dict[str, Family]:
    fams = {}
    for name in args.families:
        if name == "cifar":
            ckpt = Path(args.cifar_checkpoint)
            if not ckpt.is_file():
                print(
                    f"[skip] cifar: no sparse checkpoint at {ckpt}; make one with "
                    "python -m tasks.deploy --record results/runs/cifar/cifar10/resnet56/fcpts-sp90-fast-seed0.json"
                )
                continue
            fam = cifar_family(ckpt, args.data_root)
        elif name == "records":
            for fam in record_families([Path(r) for r in args.records]):
                fams[fam.name] = fam
            continue
        else:
            fam = random_family(name, args.sparsity, args.size, seed=0)
        fams[fam.name] = fam
    return fams
