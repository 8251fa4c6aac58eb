"""The paper's figures, drawn from run records alone (never from the paper's numbers).

    python -m tasks.figures            # writes every figure into paper_figures/

Figure 4 (`fig4_allocation_<dataset>.png`): the per-layer sparsity each method ends with at 90% global
sparsity, in network order, for CIFAR ResNet-32 and ResNet-56 (the paper shows CIFAR-100; CIFAR-10 is
drawn too because its records exist). A panel without a record says which command makes it.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from .paper import METHOD_LABEL, best_records
from .records import RUNS_DIR, all_records

FIGURES_DIR = Path(__file__).resolve().parent.parent / "paper_figures"
METHOD_STYLE = {"fcpts": ("tab:red", "o"), "pot-l2norm": ("tab:blue", "s"), "pot-erk": ("tab:green", "^")}


def figure4(records: list[dict], dataset: str, out: Path, target: float = 0.9) -> Path:
    best = best_records([r for r in records if r["task"] == "cifar"])
    models = ("resnet32", "resnet56")
    fig, axes = plt.subplots(len(models), 1, figsize=(11, 3.6 * len(models)), squeeze=False)
    for ax, model in zip(axes[:, 0], models):
        drawn = []
        for method, (color, marker) in METHOD_STYLE.items():
            rec = best.get((dataset, model, method, target))
            if rec is None:
                continue
            layers = rec["per_layer"]
            xs = range(len(layers))
            ax.plot(xs, [100 * layer["sparsity"] for layer in layers], color=color, marker=marker, markersize=3.5,
                    linewidth=1.2, label=f"{METHOD_LABEL[method]}: top-1 {rec['metrics']['top1']:.2f}% "
                                         f"[{rec['profile']['name']}]")
            drawn.append(rec)
        ax.axhline(100 * target, color="gray", linestyle="--", linewidth=0.8, label=f"global target {target:.0%}")
        ax.set_title(f"{model} on {dataset}: per-layer sparsity at {target:.0%} global sparsity")
        ax.set_ylabel("layer sparsity (%)")
        ax.set_ylim(-2, 102)
        if drawn:
            names = [layer["name"] for layer in drawn[0]["per_layer"]]
            ticks = [i for i, n in enumerate(names) if i in (0, len(names) - 1) or n.endswith(".0.conv1")]
            ax.set_xticks(ticks, [names[i] for i in ticks], rotation=30, ha="right", fontsize=8)
            ax.set_xlabel("layer (network order; ticks mark the first conv, each stage's first block, the classifier)")
            ax.legend(fontsize=8, loc="lower left")
        else:
            ax.text(0.5, 0.5, f"no record yet: python -m tasks.cifar --dataset {dataset} --model {model} "
                              f"--all-methods --sparsity {target} --profile paper-cpu",
                    ha="center", va="center", transform=ax.transAxes, fontsize=9)
            ax.set_xticks([])
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def write_figures(runs_dir: Path = RUNS_DIR, out_dir: Path = FIGURES_DIR) -> list[Path]:
    records = all_records(runs_dir)
    return [figure4(records, ds, out_dir / f"fig4_allocation_{ds}.png") for ds in ("cifar100", "cifar10")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tasks.figures", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-dir", default=str(FIGURES_DIR))
    args = p.parse_args(argv)
    for path in write_figures(out_dir=Path(args.out_dir)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
