"""A detector from the user's mmdet config, through mmengine's registry, with its checkpoint; and what a record
says about both (names, hashes, versions)."""

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
from mmengine.config import Config
from mmengine.logging import MMLogger
from mmengine.registry import init_default_scope
from mmengine.runner import load_checkpoint
from torch import nn

from fcpts.core.io import file_sha256
from tasks.grid.data import DataNotFoundError
from tasks.grid.paths import repo_relative


def load_config(path: str | Path) -> Config:
    """The config file with its `_base_` files (`mmdet::` names resolve to the installed mmdet's configs)."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"mmdet config {path} does not exist")
    cfg = Config.fromfile(str(path))
    init_default_scope(cfg.get("default_scope", "mmdet"))
    return cfg


def config_identity(path: str | Path, cfg: Config) -> dict:
    """Name, file hash, and the hash of the resolved config (its `_base_` files included)."""
    resolved = json.dumps(cfg.to_dict(), sort_keys=True, default=str)
    return {
        "name": Path(path).stem,
        "path": repo_relative(path),
        "sha256": file_sha256(path),
        "resolved_sha256": hashlib.sha256(resolved.encode()).hexdigest(),
    }


def versions() -> dict[str, str]:
    return {"mmdet": mmdet.__version__, "mmengine": mmengine.__version__, "mmcv": mmcv.__version__}


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


def _mismatch(message: str) -> str:
    """mmengine's strict-load message as one line: each kind of mismatch, counted, with its first keys."""
    parts = []
    shapes = [line.removeprefix("size mismatch for ").split(":")[0] for line in message.splitlines()
              if line.startswith("size mismatch for ")]  # fmt: skip
    for what, keys in (
        ("of another shape", shapes),
        *(
            (what, line.split(": ", 1)[1].split(", "))
            for line in message.splitlines()
            for prefix, what in (("missing keys in source", "missing"), ("unexpected key in source", "unexpected"))
            if line.startswith(prefix) and ": " in line
        ),
    ):
        if keys:
            parts.append(f"{len(keys)} {what} ({', '.join(keys[:2])}{', ...' if len(keys) > 2 else ''})")
    return "; ".join(parts) or " ".join(message.split())[:300]


def load_weights(detector: nn.Module, path: str | Path, model: str | None = None) -> dict:
    """Load a checkpoint strictly and weights-only; returns what a record keeps about it."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"checkpoint {path} does not exist")
    try:
        with quiet_mmengine(logging.ERROR):
            checkpoint = load_checkpoint(detector, str(path), map_location="cpu", strict=True, logger="silent")
    except pickle.UnpicklingError as e:
        raise ValueError(
            f"{path} holds more than weights (torch loads checkpoints weights-only): a Runner's full checkpoint "
            "with its optimiser and message hub? Pass the weights tasks.voc.mmdet.train exports "
            "(results/weights/<dataset>/mmdet-<config>.pth) or another state-dict checkpoint"
        ) from e
    except RuntimeError as e:  # strict loading: keys or shapes that are not the model's
        raise ValueError(
            f"checkpoint {path} does not fit the model {model or type(detector).__name__}: {_mismatch(str(e))}; "
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
