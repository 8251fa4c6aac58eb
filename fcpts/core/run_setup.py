"""The opening every method's run shares, before any work, so a bad input fails the same way in every method."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

from .calibration import Calibration
from .masks import Sparsity, check_target
from .options import MethodOptions


class RunSetup(NamedTuple):
    target: Sparsity
    device: torch.device  # where the model now is and the run computes
    layers: dict[str, nn.Module]  # the layers the run prunes, by qualified name
    calib: Calibration | None  # None for a method that reads no calibration data

    def required_calib(self) -> Calibration:
        """The calibration batches of a method that reads them: open_run was given calibration data."""
        if self.calib is None:
            raise ValueError("this method reads calibration data, and calibration is None: pass the images")
        return self.calib


def open_run(model: nn.Module, calibration: Any, target: float, options: MethodOptions) -> RunSetup:
    """Check `target` and `options`, place `model`, choose its layers, seed its calibration batches (unless None)
    and fit the budget options left at None to them."""
    target = check_target(target)
    options.validate()
    device = options.place(model)
    layers = options.layers(model)
    calib = None if calibration is None else Calibration(calibration, options.batch_size, options.seed)  # type: ignore[attr-defined]
    if calib is not None:
        options.fit_budget(len(calib))
    return RunSetup(target, device, layers, calib)
