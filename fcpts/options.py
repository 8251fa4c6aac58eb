"""FCPTS options (documented defaults) and the report returned with a sparse model."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class FCPTSOptions:
    """Every knob of FCPTS. Defaults follow the paper, else the released code (METHOD.md).

    threshold_grad: "control-only" (released code: the mask is built under no_grad, so only the
        control loss moves thresholds; allocation still changes as weights move across them) or "ste"
        (paper, Eq. 12-14: the reconstruction loss also reaches thresholds through a straight-through
        mask). Default "control-only", by measurement: with "ste" the reconstruction gradient, summed
        over every weight of a layer, outweighs the control loss, the thresholds drift below the
        target (85.7% instead of 90% on CIFAR-10 ResNet-20) and the exact-target step then has to
        prune thousands of weights at once; see results/ablations/ and the README.
    reconstruction: "mse-blocks" (released code's `use_intel_layer_loss`: MSE on every block output
        plus the KL on the network output) or "kl" (paper, Eq. 4: KL on the output only). Default
        "mse-blocks", by measurement: on CIFAR-10 ResNet-56 at 90%, 400 steps, 89.12 vs 87.30 top-1.
    teacher_mode: "train" (released code: the dense teacher normalises with batch statistics) or
        "eval" (running statistics). The student always trains its BN, which re-estimates the
        statistics of the sparse network.
    """

    iterations: int = 1600
    batch_size: int = 64
    lr: float | None = None  # None: 0.04 * batch_size / 256 (released code)
    momentum: float = 0.9
    weight_decay: float = 3e-4  # not applied to thresholds
    warmup_iterations: int | None = None  # None: one epoch over the calibration set
    reconstruction: Literal["kl", "mse-blocks"] = "mse-blocks"
    temperature: float = 4.0
    block_names: list[str] | None = None  # for "mse-blocks"; None: detected automatically
    bridge: Literal["kde", "histogram"] = "kde"
    kde_points: int = 100
    kde_bandwidth: float = 0.5  # in units of the layer's weight std
    histogram_bins: int = 100
    control_loss: Literal["abs", "squared"] = "abs"
    control_weight: float = 1.0
    threshold_grad: Literal["ste", "control-only"] = "control-only"
    learn_thresholds: bool = True  # False: each layer held at its ERK rate (paper's Figure 3 ablation)
    teacher_mode: Literal["train", "eval"] = "train"
    exclude: list[str] = field(default_factory=list)  # layer names kept dense
    seed: int = 0
    device: str | None = None  # None: the model's device
    channels_last: bool = True  # run teacher and student in NHWC (faster with oneDNN); output is NCHW
    bn_recalibration: bool = False  # re-estimate BN statistics on the calibration set after the exact step
    progress: bool = True
    checkpoint: str | None = None  # path: save every checkpoint_every_s and resume from it
    checkpoint_every_s: float = 180.0

    def validate(self) -> "FCPTSOptions":
        choices = {
            "reconstruction": ("kl", "mse-blocks"),
            "bridge": ("kde", "histogram"),
            "control_loss": ("abs", "squared"),
            "threshold_grad": ("ste", "control-only"),
            "teacher_mode": ("train", "eval"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"option {name}={getattr(self, name)!r} is not one of {allowed}")
        if self.iterations < 0 or self.batch_size < 1:
            raise ValueError(f"iterations must be >= 0 and batch_size >= 1, got {self.iterations}, {self.batch_size}")
        if self.kde_points < 1 or self.kde_bandwidth <= 0:
            raise ValueError("kde_points must be >= 1 and kde_bandwidth > 0")
        return self

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "FCPTSOptions":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown FCPTS options {unknown}; known options: {sorted(known)}")
        return cls(**kwargs).validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class SparsityReport:
    """What a sparsification did: enough to reproduce it and to plot it."""

    method: str
    target_sparsity: float
    achieved_sparsity: float
    per_layer: list[dict]  # name, numel, sparsity (and the method's own extras, e.g. threshold)
    history: list[dict] = field(default_factory=list)  # per step: loss terms, sparsity, lr
    wall_s: float = 0.0
    seed: int = 0
    calibration_indices: list[int] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
