"""FCPTS+: FCPTS with changes that may help under the same post-training contract, each an option (an ERK exponent,
a cubic sparsity ramp, the blocks' MSE balanced against the KL), kept apart from `fcpts`, the faithful reproduction.
They reach the FCPTS loop through one object, `Plan`, at the points `fcpts.Variant` names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from torch import nn

from fcpts.core.allocation import erk_rates
from fcpts.core.options import RunSetup, check_at_least, fitted_iterations, open_run
from fcpts.core.report import SparsityReport

from .fcpts import FCPTSOptions, Variant, distill
from .registry import NOT_IN_PAPER, Method, register


@dataclass
class FCPTSPlusOptions(FCPTSOptions):
    DEFAULTS_BEFORE: ClassVar[dict[str, Any]] = {"block_weight": 1.0}  # "auto" since; records before ran with 1
    AUTO_RAMP: ClassVar[float] = 0.5  # what ramp="auto" ramps over, from AUTO_RAMP_FROM on
    AUTO_RAMP_FROM: ClassVar[float] = 0.9  # held-out training images chose the ramp at 90% and none at 80%

    erk_power: float = 1.0  # exponent of the start's (and a ramp's) ERK rates; 1: FCPTS's ERK, 0: one rate everywhere
    # fraction of the iterations over which the sparsity rises (0: none); "auto": AUTO_RAMP from AUTO_RAMP_FROM on
    ramp: float | Literal["auto"] = "auto"
    ramp_start: float = 0.5  # the sparsity at step 0, as a fraction of the target
    block_weight: float | Literal["auto"] = "auto"  # the blocks' MSE sum against the output KL (FCPTS: 1)
    block_balance: float = 1.0  # "auto": the blocks' gradient as a multiple of the KL's at the first step
    balance_batches: int = 4  # calibration batches "auto" measures the two gradients on

    def validate(self) -> None:
        super().validate()
        check_at_least(self, "erk_power", 0.0)
        if self.block_weight != "auto" and (isinstance(self.block_weight, str) or self.block_weight < 0):
            raise ValueError(
                f"block_weight weighs the blocks' MSE against the output KL: 'auto' or a number >= 0; "
                f"got {self.block_weight!r}"
            )
        check_at_least(self, "block_balance", 0.0, inclusive=False)
        check_at_least(self, "balance_batches", 1)
        fixed_ramp = None if self.ramp == "auto" else float(self.ramp)  # check_types has refused any other string
        if (fixed_ramp is not None and not 0 <= fixed_ramp <= 1) or not 0 < self.ramp_start <= 1:
            raise ValueError(
                f"ramp must be 'auto' or lie in [0, 1], and ramp_start in (0, 1]; got {self.ramp!r}, {self.ramp_start}"
            )

    def ramp_for(self, target: float) -> float:
        """The ramp this run follows: `ramp`, or for "auto" AUTO_RAMP at targets from AUTO_RAMP_FROM on."""
        return float(self.effective({"ramp": self.ramp}, target)["ramp"])

    @classmethod
    def effective(cls, values: dict[str, Any], target: float) -> dict[str, Any]:
        if values.get("ramp") != "auto":
            return values
        ramps = target >= cls.AUTO_RAMP_FROM - 1e-9
        return {**values, "ramp": cls.AUTO_RAMP if ramps else 0.0}


def cubic_ramp(target: float, start: float, steps: int) -> Callable[[int], float]:
    """step -> control target: from start * target at step 0 to target at `steps`, cubic (fast first)."""
    first = start * target

    def at(step: int) -> float:
        if steps <= 0 or step >= steps:
            return target
        return target + (first - target) * (1 - step / steps) ** 3

    return at


class Plan(Variant):
    """FCPTS+'s changes to the FCPTS loop at the points `Variant` names, made before the loop."""

    def __init__(self, setup: RunSetup, options: FCPTSPlusOptions):
        self.layers, self.power = setup.layers, options.erk_power
        self.ramp = options.ramp_for(setup.target)
        self.steps = round(self.ramp * fitted_iterations(options.iterations))  # the ramp's
        self.level = cubic_ramp(setup.target, options.ramp_start, self.steps)
        self.start_rates = erk_rates(self.layers, self.level(0) if self.ramp > 0 else setup.target, self.power)
        self.block_weight = 1.0 if options.block_weight == "auto" else options.block_weight
        # With the KL alone there are no blocks to weigh.
        if options.block_weight == "auto" and options.reconstruction == "mse-blocks":
            self.block_balance, self.balance_batches = options.block_balance, options.balance_batches

    def rates_at(self, step: int) -> dict[str, float] | None:
        if self.ramp > 0 and step < self.steps:
            return erk_rates(self.layers, self.level(step), self.power)
        return None


def run(model: nn.Module, calibration, target: float, options: FCPTSPlusOptions) -> tuple[nn.Module, SparsityReport]:
    """FCPTS's loop as `Plan` changes it; the report adds the ramp and the ERK exponent, and its wall time the
    automatic block weight's probe."""
    setup = open_run(model, calibration, target, options)
    plan = Plan(setup, options)
    model, report = distill(model, setup, options, "fcpts-plus", plan)
    report.extra["ramp"] = plan.ramp
    report.extra["erk_power"] = {"chosen": plan.power}
    report.wall_s += report.extra.get("block_weight", {}).get("wall_s", 0.0)
    return model, report


register(
    Method(
        "fcpts-plus",
        "FCPTS+ (this suite's)",
        run,
        FCPTSPlusOptions,
        role=NOT_IN_PAPER,
        family="fcpts",
        style=("tab:pink", "D"),
        summary="FCPTS with a sparsity ramp from 90% on (ERK rates rising over the first half) and the blocks' loss "
        "weighed against the output KL by their gradients (block_weight='auto'); same contract",
        headline=True,
    )
)
