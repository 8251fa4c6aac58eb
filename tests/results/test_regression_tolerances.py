"""The regression check's tolerances are what the committed cross-processor re-runs measure (no runs)."""

import re

from tasks.grid.paths import REPO_ROOT
from tasks.regression import SPREAD_FACTOR, SUMMATION_TOLERANCE, measured_spread, tolerance_table

TOLERANCE, _ = tolerance_table()


def test_each_tolerance_is_its_summation_bound_or_twice_the_measured_processor_spread():
    spread = measured_spread()
    assert spread, "no re-run on another processor under results/regression/spread/"
    for task, metrics in SUMMATION_TOLERANCE.items():
        for metric, floor in metrics.items():
            move = spread.get(task, {}).get(metric, (0.0, ""))[0]
            assert TOLERANCE[task][metric] >= max(floor, SPREAD_FACTOR * move - 1e-9), (task, metric)
            assert TOLERANCE[task][metric] <= max(floor, SPREAD_FACTOR * move + 0.01), (task, metric)


def test_the_docs_quote_the_measured_moves():
    """Each move that sets a tolerance is quoted (to two decimals) where the tolerances are explained."""
    doc = " ".join((REPO_ROOT / "docs" / "tasks.md").read_text().split())
    for task, metrics in measured_spread().items():
        for metric, (move, seen) in metrics.items():
            if move > 0:
                assert re.search(rf"[+-]{move:.2f}", doc), f"{task} {metric}: {move:.2f} ({seen}) not in docs/tasks.md"
    assert f"{TOLERANCE['imagenet']['top5']:.2f}" in doc
