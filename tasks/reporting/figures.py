"""The paper's figures (`python -m tasks.reporting figures`, into paper_figures/), drawn from run records alone,
never from the paper's numbers; a panel without a record says which command makes it."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from fcpts.methods import METHODS, get_method, label
from fcpts.methods.registry import STUDIED_FAMILY, list_methods
from tasks.grid.layout import compared_methods, read_reference
from tasks.grid.paths import REPO_ROOT, RUNS_DIR
from tasks.grid.records import all_records, headline, preferred_records
from tasks.reporting.render import row_label

FIGURES_DIR = REPO_ROOT / "paper_figures"


def figure1_lines() -> list[str]:
    """Figure 1's lines in legend order: the paper's method, its baselines, then the extras beyond the paper."""
    return compared_methods(read_reference())


# The paper's Figure 5: ResNet-18/50 on ImageNet (left), ResNet-32/56 on CIFAR-100 (right).
FIGURE5_MODELS = {"cifar": ("resnet32", "resnet56"), "imagenet": ("resnet18", "resnet50")}
FIGURE5_HINT = {
    "cifar": "python -m tasks.cifar --dataset {dataset} --model {model} --all-methods --sparsity {target} "
    "--profile paper-cpu",
    "imagenet": "python -m tasks.imagenet --data-root IMAGENET --models {model} --all-methods "
    "--sparsity {target} --profile paper",
}


def allocation_panels(records: list[dict], task: str, dataset: str, target: float = 0.9) -> dict[str, list[dict]]:
    """Figure 5's panels: the paper's models (empty when not run), then any other model with records at the
    target, each with its methods' preferred records in Figure 1's legend order."""
    chosen = [
        r
        for r in preferred_records(records).values()
        if (r["task"], r["dataset"]) == (task, dataset)
        and round(r["target_sparsity"], 4) == target
        and "per_layer" in r
    ]
    # The paper's models get a panel even before they run, except on a partial ImageNet (never run there).
    paper = FIGURE5_MODELS.get(task, ()) if task == "cifar" or dataset == "imagenet" else ()
    models = list(paper) + sorted({r["model"] for r in chosen} - set(paper))
    # Figure 1's paper methods (not fcpts-fixed: its allocation is ERK's, drawn over POT (ERK)'s line and hiding it).
    order = [m for m in figure1_lines() if get_method(m).in_paper]
    return {
        m: sorted(
            (r for r in chosen if r["model"] == m and r["method"] in order), key=lambda r: order.index(r["method"])
        )
        for m in models
    }


def _stage_ticks(names: list[str], limit: int = 24) -> list[int]:
    """First layer, the first layer of each stage (`layer2.0.conv1`, `blocks.3.0.conv_pw`), last layer;
    of two ticks closer than `gap` layers only the first is kept (the last layer's always)."""

    def stage(name: str) -> str:
        parts = name.split(".")[:-1]
        numeric = [i for i, p in enumerate(parts) if p.isdigit()]
        return ".".join(parts[: numeric[-1]] if numeric else parts)

    gap = max(2, len(names) // limit)  # labels closer than this overlap; the later one wins at the end
    ticks: list[int] = []
    for i, n in enumerate(names):
        if i in (0, len(names) - 1) or stage(n) != stage(names[i - 1]):
            if ticks and i - ticks[-1] < gap:
                if i != len(names) - 1:
                    continue
                ticks.pop()
            ticks.append(i)
    return ticks


def figure5(records: list[dict], task: str, dataset: str, out: Path, target: float = 0.9) -> Path:
    panels = allocation_panels(records, task, dataset, target)
    fig, axes = plt.subplots(len(panels), 1, figsize=(14, 3.6 * len(panels)), squeeze=False)
    for ax, (model, recs) in zip(axes[:, 0], panels.items()):
        for rec in recs:
            color, marker = METHODS[rec["method"]].style
            sparsity = [100 * layer["sparsity"] for layer in rec["per_layer"]]
            text = f"{label(rec['method'])}: top-1 {rec['metrics']['top1']:.2f}% [{rec['profile']['name']}]"
            ax.plot(
                range(len(sparsity)), sparsity, color=color, marker=marker, markersize=3.5, linewidth=1.2, label=text
            )
        ax.axhline(100 * target, color="gray", linestyle="--", linewidth=0.8, label=f"global target {target:.0%}")
        substitute = " (substitute for the paper's models)" if recs and recs[0].get("substitute") else ""
        ax.set_title(f"{model} on {dataset}{substitute}: per-layer sparsity at {target:.0%} global sparsity")
        ax.set_ylabel("layer sparsity (%)")
        ax.set_ylim(-2, 102)
        if recs:
            names = [layer["name"] for layer in recs[0]["per_layer"]]
            ticks = _stage_ticks(names)
            ax.set_xticks(ticks, [names[i] for i in ticks], rotation=30, ha="right", fontsize=8)
            ax.set_xlabel(
                f"layer (network order, {len(names)} layers; ticks: first layer, each stage's first "
                "layer, last layer; adjacent ones thinned)"
            )
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside: no layer hidden
        else:
            hint = FIGURE5_HINT.get(task, "").format(dataset=dataset, model=model, target=target)
            ax.text(0.5, 0.5, f"no record yet: {hint}", ha="center", va="center", transform=ax.transAxes, fontsize=9)
            ax.set_xticks([])
        ax.grid(alpha=0.3)
    return _save(fig, out)


def _panels(n: int, empty: str, width: float = 4.6, height: float = 3.6):
    """A grid of `n` panels, three a row; without any, one saying `empty`."""
    cols = min(3, max(1, n))
    rows = max(1, -(-n // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[max(1, n) :]:
        ax.axis("off")
    if not n:
        axes[0][0].text(0.5, 0.5, empty, ha="center", va="center")
        axes[0][0].axis("off")
    return fig, list(axes.flat)


def _save(fig, out: Path, legend_below: float = 0.0) -> Path:
    """Lay the panels out (above a figure-wide legend taking `legend_below` of the height) and write the PNG."""
    fig.tight_layout(rect=(0, legend_below, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def accuracy_curves(records: list[dict]) -> dict[tuple, list[dict]]:
    """Figure 1's panels: (task, dataset, model) -> its preferred records of the compared methods (not the
    fcpts-fixed ablation, which is Figure 4's), for models with two or more sparsities (a point is no curve)."""
    groups: dict[tuple, list[dict]] = {}
    lines = figure1_lines()
    for r in preferred_records(records).values():
        if r["method"] in lines:
            groups.setdefault((r["task"], r["dataset"], r["model"]), []).append(r)
    return {k: v for k, v in sorted(groups.items()) if len({r["target_sparsity"] for r in v}) >= 2}


AXIS_LABELS = {"top1": "top-1 (%)", "map50": "mAP@0.5 (%)"}  # per headline metric (records.headline)


def figure1(records: list[dict], out: Path) -> Path:
    groups = accuracy_curves(records)
    lines = figure1_lines()
    fig, axes = _panels(len(groups), "no model has records at two sparsities yet")
    for ax, ((task, ds, model), rs) in zip(axes, groups.items()):
        key = headline(rs[0])[0]
        for method in [m for m in lines if any(r["method"] == m for r in rs)]:
            # At the sparsity reached: STR has no exact-target step and may end off its target.
            pts = sorted((r["achieved_sparsity"], r["metrics"][key]) for r in rs if r["method"] == method)
            color, marker = METHODS[method].style
            ax.plot([100 * p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color, label=row_label(method))
        ax.axhline(rs[0]["dense_metrics"][key], color="gray", linestyle="--", linewidth=0.8, label="dense")
        profiles = ", ".join(sorted({r["profile"]["name"] for r in rs}))
        # On as many lines as it needs, so a long model name is not clipped at the figure's edge.
        ax.set_title(textwrap.fill(f"{model} on {ds} [{profiles}]", 48, break_on_hyphens=False), fontsize=10)
        ax.set(xlabel="global sparsity reached (%)", ylabel=AXIS_LABELS[key])
        ax.grid(alpha=0.3)
    order = [row_label(m) for m in lines] + ["dense"]
    return _save(fig, out, shared_legend(fig, axes, order))


def shared_legend(fig, axes, order: list[str]) -> float:
    """One legend below every panel, each line once, in `order`; the fraction of the figure's height it takes."""
    entries: dict[str, object] = {}
    for ax in axes:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(text, handle)
    if not entries:
        return 0.0
    texts = sorted(entries, key=lambda t: order.index(t) if t in order else len(order))
    ncol = min(4, len(texts))
    fig.legend([entries[t] for t in texts], texts, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    rows = -(-len(texts) // ncol)
    return (0.1 + 0.2 * rows) / fig.get_figheight()


def fixed_learned_pairs(records: list[dict]) -> list[tuple[dict, dict]]:
    """Figure 4's bars: each record of a registered variant of the studied method that pins its rates (fcpts-fixed)
    with the studied method's record of the same cell and profile."""

    def cell(r):
        return r["task"], r["dataset"], r["model"], round(r["target_sparsity"], 4), r["profile"]["name"]

    learned = {cell(r): r for r in records if r["method"] == STUDIED_FAMILY}
    fixed = [n for n in list_methods(family=STUDIED_FAMILY) if METHODS[n].fixed.get("learn_thresholds") is False]
    return [(r, learned[cell(r)]) for r in records if r["method"] in fixed and cell(r) in learned]


def figure4(records: list[dict], out: Path) -> Path:
    pairs = fixed_learned_pairs(records)
    models = sorted({(r["dataset"], r["model"]) for r, _ in pairs})
    fig, axes = _panels(
        len(models), "no fcpts-fixed / fcpts pair yet:\npython -m tasks.cifar --methods fcpts-fixed fcpts ..."
    )
    for ax, (ds, model) in zip(axes, models):
        ps = sorted(
            (p for p in pairs if (p[0]["dataset"], p[0]["model"]) == (ds, model)), key=lambda p: p[0]["target_sparsity"]
        )
        xs = range(len(ps))
        fixed = {"color": "white", "edgecolor": "tab:red", "hatch": "//", "label": "ERK rates fixed"}
        learned = {"color": "tab:red", "label": "learned allocation (FCPTS)"}
        for i, (offset, style) in enumerate(((-0.2, fixed), (0.2, learned))):
            bars = ax.bar([x + offset for x in xs], [p[i]["metrics"]["top1"] for p in ps], 0.4, **style)
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        top = max(max(p[0]["metrics"]["top1"], p[1]["metrics"]["top1"]) for p in ps)
        ax.set_ylim(0, max(1.0, top) * 1.3)  # room for the legend above the bars
        ax.set_xticks(list(xs), [f"{p[0]['target_sparsity']:.0%}\n[{p[0]['profile']['name']}]" for p in ps])
        substitute = " (substitute)" if ps[0][0].get("substitute") else ""
        ax.set_title(f"{model} on {ds}{substitute}", fontsize=10)
        ax.set(xlabel="global sparsity", ylabel="top-1 (%)")
        ax.legend(fontsize=7, loc="upper left", ncol=2)
        ax.grid(alpha=0.3, axis="y")
    return _save(fig, out)


BRIDGE_NEEDS = "the CIFAR-10 ResNet-56 dense checkpoint (the data root's weights/cifar10/) and its FCPTS 90% record"


def figure3(records: list[dict], out: Path, layer: str = "layer2.0.conv1") -> Path | None:
    """The bridge on one layer of CIFAR-10 ResNet-56 at 90%; None without its checkpoint (not committed) or record,
    so that the committed figure is kept rather than replaced by one that cannot be regenerated."""
    import numpy as np
    import torch

    from fcpts.core.bridge import kde_density
    from tasks.grid.paths import resolve_data_root
    from tasks.grid.weights import default_cifar_weights, read_state_dict

    rec = preferred_records(records).get(("cifar", "cifar10", "resnet56", STUDIED_FAMILY, 0.9))
    try:  # the dense weights file alone: the figure needs one layer's tensor, not the model
        state, _ = read_state_dict(default_cifar_weights(resolve_data_root(None), "cifar10", "resnet56"))
    except (FileNotFoundError, ValueError):
        return None
    if rec is None or f"{layer}.weight" not in state:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    row = next(p for p in rec["per_layer"] if p["name"] == layer)
    w = state[f"{layer}.weight"].flatten().double()
    t = row["threshold"]
    grid = torch.linspace(float(w.min()), float(w.max()), 600, dtype=torch.float64)
    # All n weights: the bridge's bandwidth (0.5 std for 100 points) scaled by Silverman's n^(-1/5).
    density = kde_density(w, grid, 0.5 * w.std() * (100 / len(w)) ** 0.2)
    ax.plot(
        grid.numpy(), density.numpy(), color="black", linewidth=1.2, label=f"density p(w) of {layer} (dense weights)"
    )
    inside = (grid.abs() < t).numpy()
    shaded = f"r(t) = P(|w| < t) = {float((w.abs() < t).double().mean()):.3f}"
    ax.fill_between(grid.numpy(), 0, density.numpy(), where=inside, color="tab:red", alpha=0.35, label=shaded)
    for x in (-t, t):
        ax.axvline(x, color="tab:red", linestyle="--", linewidth=0.9)
    ax.set(xlabel="weight value w", ylabel="density")
    ax.set_title(
        f"Bridge function at the learned threshold t = {t:.4f} (ResNet-56, CIFAR-10, 90%, "
        f"{rec['profile']['name']} profile)\nlayer sparsity in the record after reconstruction: "
        f"{row['sparsity']:.3f}",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    ax.set_xlim(*np.quantile(w.numpy(), [0.001, 0.999]))
    return _save(fig, out)


def write_figures(
    runs_dir: Path = RUNS_DIR, out_dir: Path = FIGURES_DIR, skipped: Callable[[str], None] = print
) -> list[Path]:
    """Every figure the records and data here can draw; `skipped` is told of each one they cannot, left as it is."""
    records = all_records(runs_dir)
    out = [figure5(records, "cifar", ds, out_dir / f"fig5_allocation_{ds}.png") for ds in ("cifar100", "cifar10")]
    imagenet_sets = sorted({r["dataset"] for r in records if r["task"] == "imagenet"}) or ["imagenet"]
    out += [figure5(records, "imagenet", ds, out_dir / f"fig5_allocation_{ds}.png") for ds in imagenet_sets]
    out.append(figure1(records, out_dir / "fig1_accuracy_vs_sparsity.png"))
    out.append(figure4(records, out_dir / "fig4_fixed_vs_learned.png"))
    bridge = figure3(records, out_dir / "fig3_bridge.png")
    if bridge is None:
        skipped(f"skipped {out_dir / 'fig3_bridge.png'} (left as it is): it needs {BRIDGE_NEEDS}")
    return out + ([bridge] if bridge else [])
