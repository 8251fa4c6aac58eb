"""The paper's two PASCAL VOC detectors, pytorch-ssd's MobileNetV1-SSD (`mb1-ssd`) and MobileNetV2-SSD-Lite
(`mb2-ssd-lite`), in its state-dict layout so that its released checkpoints load unchanged; their priors, box
coding and post-processing (torchvision's ops), the MultiBox training loss, and the one-tensor view that the
distillation methods reconstruct. The network returns raw (class_logits (B, A, C), box_regression (B, A, 4)).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.detection._utils import BoxCoder
from torchvision.ops import batched_nms, box_convert, box_iou

VOC_CLASSES = (
    "BACKGROUND",
    *"aeroplane bicycle bird boat bottle bus car cat chair cow diningtable dog horse motorbike person".split(),
    *"pottedplant sheep sofa train tvmonitor".split(),
)


def _conv_bn(inp: int, oup: int, stride: int, act=nn.ReLU) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(inp, oup, 3, stride, 1, bias=False), nn.BatchNorm2d(oup), act(inplace=True))


def _conv_dw(inp: int, oup: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False),
        nn.BatchNorm2d(inp),
        nn.ReLU(inplace=True),
        nn.Conv2d(inp, oup, 1, 1, 0, bias=False),
        nn.BatchNorm2d(oup),
        nn.ReLU(inplace=True),
    )


class InvertedResidual(nn.Module):
    """MobileNetV2 block, pytorch-ssd's layout: `conv` = [pw, BN, ReLU6,] dw, BN, ReLU6, pw-linear, BN."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: float):
        super().__init__()
        hidden = round(inp * expand_ratio)
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers += [nn.Conv2d(inp, hidden, 1, 1, 0, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True)]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


def separable_conv(inp: int, oup: int) -> nn.Sequential:
    """SSD-Lite header (pytorch-ssd's SeperableConv2d): 3x3 depthwise (with bias), BN, ReLU6, 1x1 conv."""
    return nn.Sequential(
        nn.Conv2d(inp, inp, 3, padding=1, groups=inp), nn.BatchNorm2d(inp), nn.ReLU6(), nn.Conv2d(inp, oup, 1)
    )


def _through(layers: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """x through each layer (a slice of a Sequential would be a module torch.fx cannot trace: POT's BN folding)."""
    for layer in layers:
        x = layer(x)
    return x


class SSD(nn.Module):
    """Backbone `base_net`, `extras`, one classification and one regression header per feature map. The headers
    read the backbone at `sources`, (index, split): the output of base_net[:index], or with a split inside
    base_net[index] after that many modules of its `conv` (pytorch-ssd's GraphPath)."""

    def __init__(
        self,
        num_classes: int,
        base_net: nn.Sequential,
        sources: Sequence[tuple[int, int]],
        extras: nn.ModuleList,
        classification_headers: nn.ModuleList,
        regression_headers: nn.ModuleList,
        arch: str = "",
    ):
        super().__init__()
        self.num_classes, self.arch = num_classes, arch
        self.sources = tuple(sources)
        self.base_net = base_net
        self.extras = extras
        self.classification_headers = classification_headers
        self.regression_headers = regression_headers

    def feature_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        feats, start = [], 0
        for index, split in self.sources:
            x = _through(self.base_net[start:index], x)
            start = index
            if split:  # tap inside a block that has no residual connection (pytorch-ssd)
                block = cast(nn.Sequential, self.base_net[index].conv)
                feats.append(_through(block[:split], x))
                x = _through(block[split:], feats[-1])
                start += 1
            else:
                feats.append(x)
        x = _through(self.base_net[start:], x)
        for layer in self.extras:
            x = layer(x)
            feats.append(x)
        return feats

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        confidences, locations = [], []
        for feat, cls_head, reg_head in zip(self.feature_maps(x), self.classification_headers, self.regression_headers):
            confidences.append(cls_head(feat).permute(0, 2, 3, 1).reshape(feat.shape[0], -1, self.num_classes))
            locations.append(reg_head(feat).permute(0, 2, 3, 1).reshape(feat.shape[0], -1, 4))
        return torch.cat(confidences, 1), torch.cat(locations, 1)


def create_mb1_ssd(num_classes: int = 21) -> SSD:
    """pytorch-ssd `create_mobilenetv1_ssd`: base_net is MobileNetV1's 14 conv stages (`MobileNetV1(1001).model`),
    sources after base_net[11] (512 ch, stride 16) and [13]."""
    extras = nn.ModuleList(
        [
            nn.Sequential(nn.Conv2d(i, m, 1), nn.ReLU(), nn.Conv2d(m, o, 3, stride=2, padding=1), nn.ReLU())
            for i, m, o in [(1024, 256, 512), (512, 128, 256), (256, 128, 256), (256, 128, 256)]
        ]
    )
    chans = [512, 1024, 512, 256, 256, 256]
    cls = nn.ModuleList([nn.Conv2d(c, 6 * num_classes, 3, padding=1) for c in chans])
    reg = nn.ModuleList([nn.Conv2d(c, 6 * 4, 3, padding=1) for c in chans])
    stages = (
        [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)]
        + [(512, 512, 1)] * 5
        + [(512, 1024, 2), (1024, 1024, 1)]
    )
    base_net = nn.Sequential(_conv_bn(3, 32, 2), *[_conv_dw(i, o, s) for i, o, s in stages])
    return SSD(num_classes, base_net, [(12, 0), (14, 0)], extras, cls, reg, arch="mb1-ssd")


def create_mb2_ssd_lite(num_classes: int = 21) -> SSD:
    """pytorch-ssd `create_mobilenetv2_ssd_lite` (width 1.0): base_net is MobileNetV2's `features` (conv_bn, 17
    inverted residuals, 1x1 conv to 1280: 19 modules), sources inside base_net[14] after its expansion (576 ch,
    stride 16) and after base_net[18] (1280 ch); inverted-residual extras; depthwise-separable headers except the
    last (1x1 conv)."""
    layers = [(1280, 512, 0.2), (512, 256, 0.25), (256, 256, 0.5), (256, 64, 0.25)]
    extras = nn.ModuleList([InvertedResidual(i, o, 2, expand) for i, o, expand in layers])
    chans = [576, 1280, 512, 256, 256]
    cls = nn.ModuleList([separable_conv(c, 6 * num_classes) for c in chans] + [nn.Conv2d(64, 6 * num_classes, 1)])
    reg = nn.ModuleList([separable_conv(c, 6 * 4) for c in chans] + [nn.Conv2d(64, 6 * 4, 1)])
    setting = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]
    base_net: list[nn.Module] = [_conv_bn(3, 32, 2, nn.ReLU6)]
    inp = 32
    for t, c, n, s in setting:
        for i in range(n):
            base_net.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
            inp = c
    base_net.append(
        nn.Sequential(nn.Conv2d(inp, 1280, 1, 1, 0, bias=False), nn.BatchNorm2d(1280), nn.ReLU6(inplace=True))
    )
    return SSD(num_classes, nn.Sequential(*base_net), [(14, 3), (19, 0)], extras, cls, reg, arch="mb2-ssd-lite")


ARCHITECTURES = {"mb1-ssd": create_mb1_ssd, "mb2-ssd-lite": create_mb2_ssd_lite}
# pytorch-ssd's released VOC checkpoints and their published VOC07 mAP (the paper's dense numbers).
RELEASED = {"mb1-ssd": ("mobilenet-v1-ssd-mp-0_675.pth", 67.7), "mb2-ssd-lite": ("mb2-ssd-lite-mp-0_686.pth", 68.6)}


def create_ssd(arch: str, num_classes: int = 21) -> SSD:
    """The detector with pytorch-ssd's `init`: Xavier-uniform conv weights (biases as PyTorch initialises them)."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown detector {arch!r}; choose from {', '.join(ARCHITECTURES)}")
    model = ARCHITECTURES[arch](num_classes)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.xavier_uniform_(m.weight)
    return model


def load_ssd_weights(model: SSD, path: str | Path) -> dict:
    """Load a pytorch-ssd checkpoint (a plain state dict; also {"state_dict": ...} or "module."-prefixed
    keys). Strict: a wrong architecture or class count is an error that names the keys. Returns what a record keeps."""
    from fcpts.core.io import file_sha256
    from tasks.grid.weights import read_state_dict, state_dict_misfit  # a file that is no checkpoint: named

    path = Path(path)
    state, _ = read_state_dict(path)
    misfit = state_dict_misfit(model.state_dict(), state)
    if misfit:
        raise ValueError(f"weights file {path} does not fit {model.arch} with {model.num_classes} classes: {misfit}")
    model.load_state_dict(state, strict=False)  # num_batches_tracked may be absent in old files
    return {"path": str(path), "n_tensors": len(state), "sha256": file_sha256(path)}


@dataclass(frozen=True)
class PriorSpec:
    feature_map_size: int
    shrinkage: float  # image pixels per feature-map cell (pytorch-ssd's name)
    min_size: float  # box sizes in input pixels
    max_size: float
    aspect_ratios: tuple[int, ...] = (2, 3)


_VOC300_SIZES = (60, 105, 150, 195, 240, 285, 330)
VOC300_SPECS = tuple(  # pytorch-ssd's 6 feature maps and their shrinkage at 300 px: 3,000 priors
    PriorSpec(n, shrinkage, _VOC300_SIZES[i], _VOC300_SIZES[i + 1])
    for i, (n, shrinkage) in enumerate(zip((19, 10, 5, 3, 2, 1), (16, 32, 64, 100, 150, 300)))
)


@dataclass(frozen=True)
class SSDConfig:
    """pytorch-ssd's `mobilenetv1_ssd_config` (used by both detectors) plus the evaluation settings: box coding
    by torchvision's BoxCoder with weights 1 / variances; per class the 200 best priors above 0.01, class-wise
    NMS at IoU 0.45, boxes scaled back to the original image's pixels (not clipped)."""

    image_size: int = 300
    specs: tuple[PriorSpec, ...] = VOC300_SPECS
    image_mean: float = 127.0
    image_std: float = 128.0
    center_variance: float = 0.1
    size_variance: float = 0.2
    nms_iou: float = 0.45
    score_threshold: float = 0.01  # pytorch-ssd Predictor's filter_threshold
    candidate_size: int = 200  # per class, before NMS
    max_detections: int | None = None  # per image after NMS; pytorch-ssd keeps all (top_k=-1)
    match_iou: float = 0.5  # training: prior <-> ground-truth matching

    @classmethod
    def for_size(cls, image_size: int, feature_map_sizes: Sequence[int]) -> SSDConfig:
        """pytorch-ssd's priors at another input size: box sizes scaled by image_size/300, one prior grid
        per feature map (shrinkage = image_size / map size). At 300 it is the published configuration."""
        if image_size == 300 and tuple(feature_map_sizes) == tuple(s.feature_map_size for s in VOC300_SPECS):
            return cls()
        scale = image_size / 300
        specs = tuple(
            PriorSpec(int(n), image_size / n, _VOC300_SIZES[i] * scale, _VOC300_SIZES[i + 1] * scale)
            for i, n in enumerate(feature_map_sizes)
        )
        return cls(image_size=image_size, specs=specs)

    @classmethod
    @torch.no_grad()
    def for_model(cls, model: SSD, image_size: int) -> SSDConfig:
        """`for_size` at the model's feature-map sizes, read off one eval-mode forward (train mode moves BN)."""
        was = model.training
        x = torch.zeros(1, 3, image_size, image_size, device=next(model.parameters()).device)
        sizes = [f.shape[-1] for f in model.eval().feature_maps(x)]
        model.train(was)
        return cls.for_size(image_size, sizes)

    def priors(self) -> torch.Tensor:
        """(A, 4) priors (cx, cy, w, h) relative to the image, clamped to [0, 1], pytorch-ssd's order:
        per feature map, rows then columns, per cell: min square, sqrt(min*max) square, then per aspect
        ratio r the min box widened and heightened by sqrt(r)."""
        out = []
        for s in self.specs:
            scale = self.image_size / s.shrinkage
            small, big = s.min_size / self.image_size, math.sqrt(s.min_size * s.max_size) / self.image_size
            for j, i in itertools.product(range(s.feature_map_size), repeat=2):
                cx, cy = (i + 0.5) / scale, (j + 0.5) / scale
                out += [[cx, cy, small, small], [cx, cy, big, big]]
                for ratio in s.aspect_ratios:
                    r = math.sqrt(ratio)
                    out += [[cx, cy, small * r, small / r], [cx, cy, small / r, small * r]]
        return torch.tensor(out, dtype=torch.float32).clamp_(0.0, 1.0)

    def box_coder(self) -> BoxCoder:
        return BoxCoder(
            weights=(1 / self.center_variance, 1 / self.center_variance, 1 / self.size_variance, 1 / self.size_variance)
        )


def decode_boxes(regression: torch.Tensor, priors_cxcywh: torch.Tensor, config: SSDConfig) -> torch.Tensor:
    """(..., A, 4) regressions -> (..., A, 4) corner-form boxes relative to the image."""
    anchors = box_convert(priors_cxcywh.to(regression), "cxcywh", "xyxy")
    anchors = anchors.repeat(regression.numel() // anchors.numel(), 1)
    return config.box_coder().decode_single(regression.reshape(-1, 4), anchors).reshape(regression.shape)


def encode_targets(
    gt_boxes: torch.Tensor, gt_labels: torch.Tensor, priors_cxcywh: torch.Tensor, config: SSDConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """pytorch-ssd's MatchPrior: each prior takes the ground truth it overlaps most (background, label 0,
    below `match_iou`), each ground truth also claims its best prior; returns (A, 4) regression targets and
    (A,) labels. Boxes are corner-form relative to the image; labels 1..C-1."""
    anchors = box_convert(priors_cxcywh.to(gt_boxes.device), "cxcywh", "xyxy")
    if len(gt_boxes) == 0:
        return torch.zeros_like(anchors), torch.zeros(len(anchors), dtype=torch.int64, device=anchors.device)
    ious = box_iou(gt_boxes, anchors)  # (G, A)
    best_iou, best_gt = ious.max(0)
    best_prior = ious.argmax(1)
    best_gt[best_prior] = torch.arange(len(gt_boxes), device=best_gt.device)
    best_iou[best_prior] = 2.0
    labels = gt_labels[best_gt].clone()
    labels[best_iou < config.match_iou] = 0
    targets = config.box_coder().encode_single(gt_boxes[best_gt], anchors)
    return targets, labels


@torch.no_grad()
def postprocess(
    class_logits: torch.Tensor,
    regression: torch.Tensor,
    priors: torch.Tensor,
    config: SSDConfig,
    image_sizes: Sequence[Sequence[int]],
) -> list[dict[str, torch.Tensor]]:
    """Detections per image: {"boxes" (K, 4) xyxy in original pixels (0-based), "scores", "labels"}.
    `image_sizes` are the original (height, width)."""
    probs = F.softmax(class_logits.float(), dim=-1)
    boxes_rel = decode_boxes(regression.float(), priors, config)
    out = []
    num_classes = probs.shape[-1]
    k = min(config.candidate_size, probs.shape[1])
    for p, b, (h, w) in zip(probs, boxes_rel, image_sizes):
        top, idx = p[:, 1:].topk(k, dim=0)  # (k, C-1): per class its best priors
        cls = torch.arange(1, num_classes, device=p.device).expand(k, -1)
        keep = top > config.score_threshold
        scores, prior_idx, labels = top[keep], idx[keep], cls[keep]
        boxes = b[prior_idx] * torch.tensor([w, h, w, h], dtype=b.dtype, device=b.device)
        kept = batched_nms(boxes, scores, labels, config.nms_iou)[: config.max_detections]  # None: all
        out.append({"boxes": boxes[kept], "scores": scores[kept], "labels": labels[kept]})
    return out


def multibox_loss(
    logits: torch.Tensor, regression: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor, neg_pos_ratio: int = 3
) -> tuple[torch.Tensor, torch.Tensor]:
    """SSD's loss (pytorch-ssd MultiboxLoss), (box, class): cross-entropy on the positives and the hardest
    negatives (ranked by background loss, `neg_pos_ratio` negatives per positive, per image) plus smooth L1 on the
    positives' box offsets, both summed and divided by the number of positives."""
    with torch.no_grad():
        bg_loss = -F.log_softmax(logits, dim=-1)[..., 0]
        pos = labels > 0
        bg_loss.masked_fill_(pos, -math.inf)
        rank = bg_loss.argsort(1, descending=True).argsort(1)
        mask = pos | (rank < pos.sum(1, keepdim=True) * neg_pos_ratio)
    num_pos = max(1, int(pos.sum()))
    cls = F.cross_entropy(logits[mask].reshape(-1, logits.shape[-1]), labels[mask], reduction="sum") / num_pos
    return F.smooth_l1_loss(regression[pos], targets[pos], reduction="sum") / num_pos, cls


class DistillView(nn.Module):
    """A detector whose forward returns one tensor, T * log_softmax(class_logits / T) per prior, flattened to
    (B, A * C): FCPTS's output KL on it is T^2 x the mean per-prior KL between teacher and student class
    distributions (a softmax over all of (A x C) would be dominated by confident background priors). Box
    offsets are reconstructed by block MSE (`reconstruction_blocks`); layer names inside are `ssd.<name>`."""

    def __init__(self, ssd: SSD, temperature: float = 4.0):
        super().__init__()
        self.ssd = ssd
        self.temperature = temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits, _ = self.ssd(x)
        t = self.temperature
        return (t * F.log_softmax(logits / t, dim=-1)).flatten(1)


RECONSTRUCTIONS = {
    "kl-box": "KL on per-prior class distributions (T=4) + MSE on the box-offset (regression) header outputs",
    "mse-heads": "kl-box + MSE on the class-logit header outputs: MSE on every head output",
    "mse-blocks": "mse-heads + MSE on every backbone block and extra layer output (FCPTS's CIFAR default, "
    "released code's layer loss)",
}


def reconstruction_names(kind: str, boxes: list[str], classes: list[str], blocks: list[str]) -> list[str]:
    """FCPTS's block MSE modules (`block_names`) of a reconstruction kind, for either driver's detector."""
    if kind not in RECONSTRUCTIONS:
        raise ValueError(f"unknown detection reconstruction {kind!r}; choose from {', '.join(RECONSTRUCTIONS)}")
    return boxes + (classes if kind != "kl-box" else []) + (blocks if kind == "mse-blocks" else [])


def reconstruction_blocks(ssd: SSD, kind: str = "mse-blocks") -> list[str]:
    """Module names for FCPTS's block MSE on a DistillView-wrapped detector."""
    parts = ("regression_headers", "classification_headers", "base_net", "extras")
    boxes, classes, base, extras = ([f"ssd.{p}.{i}" for i in range(len(getattr(ssd, p)))] for p in parts)
    return reconstruction_names(kind, boxes, classes, base + extras)
