"""The ImageNet models the suite knows, as data (library, architecture, the paper's dense numbers, stand-ins,
preprocessing): apart from the factory because the tables read it too."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    library: str  # "torchvision" | "timm"
    arch: str  # the library's model name
    paper_dense: str = ""  # the paper's dense top-1/top-5, for the tables' headers
    substitute: bool = False  # a stand-in, not one of the paper's models
    mean: tuple[float, ...] | None = None  # overrides of the library's preprocessing
    std: tuple[float, ...] | None = None
    interpolation: str | None = None


MODELS: dict[str, ModelSpec] = {
    "resnet18": ModelSpec("torchvision", "resnet18", "70.88/90.45"),
    "resnet50": ModelSpec("torchvision", "resnet50", "77.89/93.76"),
    "mobilenet_v2": ModelSpec("torchvision", "mobilenet_v2", "72.85/91.61"),
    "regnetx_200mf": ModelSpec("timm", "regnetx_002", "68.41/89.11"),
    "regnetx_400mf": ModelSpec("timm", "regnetx_004", "71.84/90.55"),
    "vit_base": ModelSpec("timm", "vit_base_patch16_224", "75.68/92.94"),
    "vit_large": ModelSpec("timm", "vit_large_patch16_224", "79.29/94.78"),
    # (x - 0.498) / 0.502 on [0,1] RGB, resize 256 + centre crop 224: the package's documented input.
    "efficientnet_lite0": ModelSpec(
        "timm", "tf_efficientnet_lite0", substitute=True, mean=(0.498,) * 3, std=(0.502,) * 3, interpolation="bilinear"
    ),
}
PAPER_CNNS = ["resnet18", "resnet50", "regnetx_200mf", "regnetx_400mf", "mobilenet_v2"]  # Table 3
PAPER_VITS = ["vit_base", "vit_large"]  # Table 4


def get_spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ValueError(f"unknown ImageNet model {name!r}; choose from {', '.join(MODELS)}")
    return MODELS[name]
