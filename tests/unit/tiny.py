"""Tiny models and inputs the method tests share (small enough for every method to run in a second), and the
helpers they use to run a method and compare its runs."""

from __future__ import annotations

import torch
from torch import nn

from fcpts.core.report import SparsityReport
from fcpts.methods import get_method


def tiny_net() -> nn.Module:
    """Two convs (one with BN) and a linear head, seeded: the same weights in every test."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )


def tiny_images() -> torch.Tensor:
    """32 seeded 8x8 images for `tiny_net`."""
    return torch.randn(32, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def grid_run(name, model, x, target, options=None, **budget) -> tuple[nn.Module, SparsityReport]:
    """A method run the way the grid runs it: a budget it takes what it needs from, plus overrides."""
    method = get_method(name)
    return method(model, x, target, method.make_options({"progress": False, **budget}, options))


def untimed(history: list[dict]) -> list[dict]:
    """A run's history without its step times, which differ between runs that compute the same."""
    return [{k: v for k, v in row.items() if k != "step_s"} for row in history]


class FailingAt(torch.utils.data.Dataset):
    """Wraps a tensor; raises on the `fail_at`-th item fetched, to simulate an interrupted run."""

    def __init__(self, x, fail_at):
        self.x, self.fail_at, self.fetched = x, fail_at, 0

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        self.fetched += 1
        if self.fetched == self.fail_at:
            raise KeyboardInterrupt("simulated interruption")
        return self.x[i]


def wide_cnn() -> nn.Module:
    """Plain, depthwise and pointwise convs and a classifier: the layer kinds POT treats differently."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=16),
        nn.ReLU(),
        nn.Conv2d(16, 24, 1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(24, 5),
    ).eval()


def record_target_checks(monkeypatch) -> list[float]:
    """Every value a `Sparsity` is made from from now on, i.e. every target check (the list fills as they happen)."""
    from fcpts.core.masks import Sparsity

    seen: list[float] = []
    real = Sparsity.__new__
    monkeypatch.setattr(Sparsity, "__new__", lambda cls, target: seen.append(target) or real(cls, target))
    return seen
