"""A detector from the user's mmdet config, through mmengine's registry, with its checkpoint, what a record says
about both (names, hashes, versions), and the detector as the methods see it (`HeadOutputView`).

The view keeps the suite's SSD contract (`DistillView`): forward(x) returns T * log p(class | anchor) per anchor,
flattened (a sigmoid head's Bernoulli per anchor and class as its two log-probabilities); the raw head outputs pass
through the identities `class_logits` and `box_regression` for FCPTS's block MSE. Every Conv2d and Linear is
prunable, head included, as in the suite's SSD task.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mmcv
import mmdet
import mmengine
import torch
import torch.nn.functional as F
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import init_default_scope
from mmengine.runner import load_checkpoint
from torch import nn

from fcpts.core.io import file_sha256
from fcpts.core.masks import PRUNABLE_TYPES, layer_weight, prunable_layers
from fcpts.methods.fcpts import default_blocks
from tasks.grid.paths import DataNotFoundError, repo_relative
from tasks.grid.weights import read_state_dict, state_dict_misfit
from tasks.voc.ssd import reconstruction_names


def load_config(path: str | Path) -> Config:
    """The config file with its `_base_` files (`mmdet::` names resolve to the installed mmdet's configs)."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"mmdet config {path} does not exist")
    cfg = Config.fromfile(str(path))
    init_default_scope(cfg.get("default_scope", "mmdet"))
    return cfg


def mmdet_identity(path: str | Path, cfg: Config) -> dict:
    """What a record says of the detector's making: the OpenMMLab versions, the config's name, file hash, and the
    hash of the resolved config (its `_base_` files included)."""
    resolved = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
    config = {
        "name": Path(path).stem,
        "path": repo_relative(path),
        "sha256": file_sha256(path),
        "resolved_sha256": hashlib.sha256(resolved.encode()).hexdigest(),
    }
    return {"mmdet": mmdet.__version__, "mmengine": mmengine.__version__, "mmcv": mmcv.__version__, "config": config}


def build_detector(cfg: Config) -> nn.Module:
    """The config's model, built by mmdet's registry: a single-stage detector with a dense head (the methods
    distil its raw outputs, which a two-stage detector only has per proposal)."""
    from mmdet.registry import MODELS

    with quiet_mmengine():
        detector = MODELS.build(cfg.model)
    if not (hasattr(detector, "extract_feat") and hasattr(detector, "bbox_head")):
        raise ValueError(
            f"{type(detector).__name__} is not a single-stage detector with a dense bbox_head "
            "(e.g. SSD, RetinaNet): the distillation view needs the head's per-anchor outputs"
        )
    allow_ssd_predict(detector)
    return detector


def allow_ssd_predict(detector: nn.Module) -> None:
    """mmdet 3.3.0's SSDHead has no `loss_cls` (its loss is hand-written) but the shared `predict` reads
    `loss_cls.custom_cls_channels`; upstream's fix is unreleased (mmdet issues 11063/11305, PR 11524)."""
    head: Any = detector.bbox_head
    if not hasattr(head, "loss_cls"):
        head.loss_cls = types.SimpleNamespace(custom_cls_channels=False)


@contextmanager
def quiet_mmengine(level: int = logging.WARNING):
    """mmengine's INFO lines (every initialised parameter, every key of a checkpoint) go nowhere."""
    logger = MMLogger.get_current_instance()
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)


def load_weights(detector: nn.Module, path: str | Path, model: str | None = None) -> dict:
    """Load a checkpoint strictly and weights-only; returns what a record keeps about it."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(
            f"checkpoint {path} does not exist: pass --weights FILE (an mmdet checkpoint for this config)"
        )
    try:
        with quiet_mmengine(logging.ERROR):
            checkpoint = load_checkpoint(detector, str(path), map_location="cpu", strict=True, logger="silent")
    except pickle.UnpicklingError as e:
        raise ValueError(
            f"{path} holds more than weights (torch loads checkpoints weights-only): a Runner's full checkpoint "
            "with its optimiser and message hub? Pass the weights tasks.voc.mmdet.train exports "
            "(results/weights/<dataset>/mmdet-<config>.pth) or another state-dict checkpoint"
        ) from e
    except RuntimeError:  # strict loading: keys or shapes that are not the model's
        misfit = state_dict_misfit(detector.state_dict(), read_state_dict(path)[0])
        raise ValueError(
            f"checkpoint {path} does not fit the model {model or type(detector).__name__}: {misfit}; "
            "pass the checkpoint trained with this config (--weights)"
        ) from None
    meta = checkpoint.get("meta", {}) if isinstance(checkpoint, dict) else {}
    return {
        "path": str(path),
        "sha256": file_sha256(path),
        "epoch": meta.get("epoch"),
        "iter": meta.get("iter"),
        "classes": list(meta.get("dataset_meta", {}).get("classes", [])) or None,
    }


class HeadOutputView(nn.Module):
    """A single-stage mmdet detector whose forward returns per-anchor class log-probabilities at T."""

    detector: Any  # an mmdet detector: its bbox_head and extract_feat are beyond what torch's Module types say

    def __init__(self, detector: nn.Module, temperature: float = 4.0):
        super().__init__()
        self.detector = detector
        self.temperature = temperature
        head = self.detector.bbox_head
        self.sigmoid = bool(getattr(head, "use_sigmoid_cls", False))
        self.class_channels = int(head.cls_out_channels)
        self.class_logits = nn.Identity()
        self.box_regression = nn.Identity()

    def head_outputs(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(class logits (B, anchors, C), box regression (B, anchors, code)), mmdet's anchor order."""
        outputs = self.detector.bbox_head(self.detector.extract_feat(x))
        cls_scores, bbox_preds = outputs[0], outputs[1]
        logits = torch.cat([_per_anchor(c, self.class_channels) for c in cls_scores], 1)
        code = bbox_preds[0].shape[1] * self.class_channels // cls_scores[0].shape[1]
        boxes = torch.cat([_per_anchor(b, code) for b in bbox_preds], 1)
        return logits, boxes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits, boxes = self.head_outputs(x)
        logits = self.class_logits(logits)
        self.box_regression(boxes)  # seen by forward hooks (FCPTS's MSE), not part of the output
        t = self.temperature
        if self.sigmoid:
            log_p = torch.stack([F.logsigmoid(logits / t), F.logsigmoid(-logits / t)], -1)
        else:
            log_p = F.log_softmax(logits / t, dim=-1)
        return (t * log_p).flatten(1)


def _per_anchor(x: torch.Tensor, channels: int) -> torch.Tensor:
    """(B, A * channels, H, W) -> (B, H * W * A, channels), as mmdet's heads flatten them."""
    return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, channels)


def reconstruction_blocks(view: HeadOutputView, kind: str = "mse-blocks") -> list[str]:
    """Module names for FCPTS's block MSE (`block_names`): the suite's SSD choices on an mmdet detector."""
    stems = [  # stages outside the backbone's Sequentials (MobileNetV2's conv1, conv2)
        f"detector.backbone.{n}"
        for n, m in view.detector.backbone.named_children()
        if not isinstance(m, (nn.Sequential, nn.ModuleList)) and any(isinstance(c, PRUNABLE_TYPES) for c in m.modules())
    ]
    blocks = [n for n in default_blocks(view) if n.startswith(("detector.backbone.", "detector.neck."))]
    return reconstruction_names(kind, ["box_regression"], ["class_logits"], stems + blocks)


def check_layers_reach_outputs(view: HeadOutputView, size: int = 64) -> None:
    """Refuse a detector whose pruned layers do not all feed the distilled outputs (FCOS's centerness: masks chosen
    and never learned), found by one backward on a zero image."""
    layers = prunable_layers(view)
    mode, frozen = view.training, [m.weight for m in layers.values() if not m.weight.requires_grad]
    try:
        view.eval()
        for weight in frozen:  # a frozen backbone stage is pruned too: asked as every other layer
            weight.requires_grad_(True)
        with torch.enable_grad():
            logits, boxes = view.head_outputs(torch.zeros(1, 3, size, size))
            reached = torch.autograd.grad(
                logits.sum() + boxes.sum(), [layer_weight(m) for m in layers.values()], allow_unused=True
            )
    finally:
        view.train(mode)
        for weight in frozen:
            weight.requires_grad_(False)
    unreached = [name for (name, _), grad in zip(layers.items(), reached) if grad is None]
    if unreached:
        raise ValueError(
            f"{type(view.detector).__name__}: {', '.join(unreached)} feed no output the methods distil (class "
            "logits, box regression), so they would be pruned and never reconstructed; detectors with other head "
            "outputs (FCOS's centerness) are not supported"
        )


def pruned_layers(view: HeadOutputView) -> dict:
    """What a record says about which layers were pruned."""
    layers = prunable_layers(view)
    return {
        "rule": "every Conv2d and Linear of the detector (backbone, neck, head; the head's last classification and "
        "regression convs included), as the suite's SSD task",
        "n_layers": len(layers),
        "n_weights": sum(layer_weight(m).numel() for m in layers.values()),
        "excluded": [],
    }
