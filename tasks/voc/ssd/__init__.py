"""The paper's two PASCAL VOC detectors (pytorch-ssd's MobileNetV1-SSD and MobileNetV2-SSD-Lite), in one
package so that the grid, training and tests import them from one place while each concern stays small:

    model     the networks in pytorch-ssd's state-dict layout, and loading its released checkpoints
    boxes     priors, box coding and post-processing (pytorch-ssd's configuration, torchvision's ops)
    loss      the MultiBox training loss
    distill   the one-tensor view of a detector that FCPTS and the other distillation methods reconstruct
"""

from tasks.voc.ssd.boxes import PriorSpec, SSDConfig, decode_boxes, encode_targets, postprocess
from tasks.voc.ssd.distill import RECONSTRUCTIONS, DistillView, reconstruction_blocks
from tasks.voc.ssd.loss import MultiboxLoss
from tasks.voc.ssd.model import (
    ARCHITECTURES,
    RELEASED,
    SSD,
    VOC_CLASSES,
    create_ssd,
    load_ssd_weights,
)

__all__ = [
    "ARCHITECTURES",
    "RECONSTRUCTIONS",
    "RELEASED",
    "SSD",
    "VOC_CLASSES",
    "DistillView",
    "MultiboxLoss",
    "PriorSpec",
    "SSDConfig",
    "create_ssd",
    "decode_boxes",
    "encode_targets",
    "load_ssd_weights",
    "postprocess",
    "reconstruction_blocks",
]
