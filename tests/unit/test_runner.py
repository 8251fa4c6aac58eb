"""The grid runner's bookkeeping: the dense evaluation is done once per grid identity, not per invocation."""

import torch
from torch import nn

from tasks.grid.profiles import Profile
from tasks.grid.runner import Grid, run_grid


def _grid(tmp_path, calls: list, weights: str) -> Grid:
    def build():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 6 * 6, 4))

    def evaluate(model):
        calls.append(1)
        return {"top1": 100.0 * float((model[0].weight == 0).float().mean()), "top5": 0.0}

    def calibration(n, augment):
        return torch.randn(n, 3, 8, 8), {"split": "train", "n_images": n, "indices": list(range(n))}

    return Grid(
        task="t",
        dataset="d",
        model="m",
        build_model=build,
        make_calibration=calibration,
        evaluate=evaluate,
        profile=Profile("tiny", n_calibration=4, iterations=1),
        seed=0,
        provenance={"weights": {"sha256": weights}},
        runs_dir=tmp_path / "runs",
        checkpoint_dir=tmp_path / "ck",
        progress=False,
    )


def test_dense_metrics_are_evaluated_once_per_identity(tmp_path):
    calls, lines = [], []
    run_grid(_grid(tmp_path, calls, "a"), ["uniform"], [0.5], log=lines.append)
    assert len(calls) == 2  # dense + the sparse model
    run_grid(_grid(tmp_path, calls, "a"), ["uniform"], [0.6], log=lines.append)
    assert len(calls) == 3  # the dense number came from the first invocation
    assert any("kept in dense-" in line for line in lines)
    run_grid(_grid(tmp_path, calls, "b"), ["uniform"], [0.7], log=lines.append)
    assert len(calls) == 5  # other weights: evaluated again
