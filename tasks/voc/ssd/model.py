"""The two detectors' networks, built with pytorch-ssd's module layout so that its released VOC
checkpoints load unchanged: the paper's dense models are those files, not something we retrain.

    mb1-ssd       MobileNetV1 backbone + SSD head (3x3 conv headers)          published VOC07 mAP 67.5-67.7
    mb2-ssd-lite  MobileNetV2 backbone + SSD-Lite head (depthwise-separable)  published VOC07 mAP 68.6

Key names and shapes follow pytorch-ssd (`base_net.{i}`, `extras.{i}`, `classification_headers.{i}`,
`regression_headers.{i}`), so its released checkpoints (`mobilenet-v1-ssd-mp-0_675.pth`,
`mb2-ssd-lite-mp-0_686.pth`, plain state dicts) load with `load_ssd_weights`. The network's forward
returns raw `(class_logits (B, A, C), box_regression (B, A, 4))`, A priors in pytorch-ssd's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

VOC_CLASSES = (
    "BACKGROUND",
    "aeroplane",
    "bicycle",
    "bird",
    "boat",
    "bottle",
    "bus",
    "car",
    "cat",
    "chair",
    "cow",
    "diningtable",
    "dog",
    "horse",
    "motorbike",
    "person",
    "pottedplant",
    "sheep",
    "sofa",
    "train",
    "tvmonitor",
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


def mobilenet_v1_features() -> nn.Sequential:
    """MobileNetV1's 14 conv stages (`MobileNetV1(1001).model` in pytorch-ssd)."""
    cfg = (
        [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)]
        + [(512, 512, 1)] * 5
        + [(512, 1024, 2), (1024, 1024, 1)]
    )
    return nn.Sequential(_conv_bn(3, 32, 2), *[_conv_dw(i, o, s) for i, o, s in cfg])


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


def mobilenet_v2_features() -> nn.Sequential:
    """MobileNetV2 (width 1.0) `features`: conv_bn, 17 inverted residuals, 1x1 conv to 1280 (19 modules)."""
    setting = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]
    layers: list[nn.Module] = [_conv_bn(3, 32, 2, nn.ReLU6)]
    inp = 32
    for t, c, n, s in setting:
        for i in range(n):
            layers.append(InvertedResidual(inp, c, s if i == 0 else 1, t))
            inp = c
    layers.append(
        nn.Sequential(nn.Conv2d(inp, 1280, 1, 1, 0, bias=False), nn.BatchNorm2d(1280), nn.ReLU6(inplace=True))
    )
    return nn.Sequential(*layers)


def separable_conv(inp: int, oup: int) -> nn.Sequential:
    """SSD-Lite header (pytorch-ssd's SeperableConv2d): 3x3 depthwise (with bias), BN, ReLU6, 1x1 conv."""
    return nn.Sequential(
        nn.Conv2d(inp, inp, 3, padding=1, groups=inp), nn.BatchNorm2d(inp), nn.ReLU6(), nn.Conv2d(inp, oup, 1)
    )


@dataclass(frozen=True)
class Source:
    """Where a header reads the backbone: the output of base_net[:index], or inside base_net[index] after
    `sub_split` modules of its `sub` Sequential (pytorch-ssd's GraphPath)."""

    index: int
    sub: str | None = None
    sub_split: int = 0


class SSD(nn.Module):
    """Backbone `base_net`, `extras`, one classification and one regression header per feature map."""

    def __init__(
        self,
        num_classes: int,
        base_net: nn.Sequential,
        sources: Sequence[Source],
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
        for src in self.sources:
            for layer in self.base_net[start : src.index]:
                x = layer(x)
            start = src.index
            if src.sub is not None:  # tap inside a block that has no residual connection (pytorch-ssd)
                sub = getattr(self.base_net[src.index], src.sub)
                for layer in sub[: src.sub_split]:
                    x = layer(x)
                feats.append(x)
                for layer in sub[src.sub_split :]:
                    x = layer(x)
                start = src.index + 1
            else:
                feats.append(x)
        for layer in self.base_net[start:]:
            x = layer(x)
        for layer in self.extras:
            x = layer(x)
            feats.append(x)
        return feats

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        confidences, locations = [], []
        for feat, cls_head, reg_head in zip(self.feature_maps(x), self.classification_headers, self.regression_headers):
            c = cls_head(feat).permute(0, 2, 3, 1)
            confidences.append(c.reshape(c.shape[0], -1, self.num_classes))
            r = reg_head(feat).permute(0, 2, 3, 1)
            locations.append(r.reshape(r.shape[0], -1, 4))
        return torch.cat(confidences, 1), torch.cat(locations, 1)

    @torch.no_grad()
    def feature_map_sizes(self, image_size: int) -> list[int]:
        was = self.training
        self.eval()
        p = next(self.parameters())
        sizes = [f.shape[-1] for f in self.feature_maps(torch.zeros(1, 3, image_size, image_size, device=p.device))]
        self.train(was)
        return sizes


def create_mb1_ssd(num_classes: int = 21) -> SSD:
    """pytorch-ssd `create_mobilenetv1_ssd`: sources after base_net[11] (512 ch, stride 16) and [13]."""
    extras = nn.ModuleList(
        [
            nn.Sequential(nn.Conv2d(i, m, 1), nn.ReLU(), nn.Conv2d(m, o, 3, stride=2, padding=1), nn.ReLU())
            for i, m, o in [(1024, 256, 512), (512, 128, 256), (256, 128, 256), (256, 128, 256)]
        ]
    )
    chans = [512, 1024, 512, 256, 256, 256]
    cls = nn.ModuleList([nn.Conv2d(c, 6 * num_classes, 3, padding=1) for c in chans])
    reg = nn.ModuleList([nn.Conv2d(c, 6 * 4, 3, padding=1) for c in chans])
    return SSD(num_classes, mobilenet_v1_features(), [Source(12), Source(14)], extras, cls, reg, arch="mb1-ssd")


def create_mb2_ssd_lite(num_classes: int = 21) -> SSD:
    """pytorch-ssd `create_mobilenetv2_ssd_lite` (width 1.0): sources inside base_net[14] after its
    expansion (576 ch, stride 16) and after base_net[18] (1280 ch); inverted-residual extras;
    depthwise-separable headers except the last (1x1 conv)."""
    extras = nn.ModuleList(
        [
            InvertedResidual(1280, 512, 2, 0.2),
            InvertedResidual(512, 256, 2, 0.25),
            InvertedResidual(256, 256, 2, 0.5),
            InvertedResidual(256, 64, 2, 0.25),
        ]
    )
    chans = [576, 1280, 512, 256, 256]
    cls = nn.ModuleList([separable_conv(c, 6 * num_classes) for c in chans] + [nn.Conv2d(64, 6 * num_classes, 1)])
    reg = nn.ModuleList([separable_conv(c, 6 * 4) for c in chans] + [nn.Conv2d(64, 6 * 4, 1)])
    return SSD(
        num_classes, mobilenet_v2_features(), [Source(14, "conv", 3), Source(19)], extras, cls, reg, arch="mb2-ssd-lite"
    )


ARCHITECTURES = {"mb1-ssd": create_mb1_ssd, "mb2-ssd-lite": create_mb2_ssd_lite}
# pytorch-ssd's released VOC checkpoints and their published VOC07 mAP (the paper's dense numbers).
RELEASED = {"mb1-ssd": ("mobilenet-v1-ssd-mp-0_675.pth", 67.7), "mb2-ssd-lite": ("mb2-ssd-lite-mp-0_686.pth", 68.6)}


def create_ssd(arch: str, num_classes: int = 21) -> SSD:
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown detector {arch!r}; choose from {', '.join(ARCHITECTURES)}")
    model = ARCHITECTURES[arch](num_classes)
    init_ssd(model)
    return model


def init_ssd(model: nn.Module) -> None:
    """pytorch-ssd's `init`: Xavier-uniform conv weights (biases as PyTorch initialises them)."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.xavier_uniform_(m.weight)


def load_ssd_weights(model: SSD, path: str | Path) -> dict:
    """Load a pytorch-ssd checkpoint (a plain state dict; also {"state_dict": ...} or "module."-prefixed
    keys). Strict: a wrong architecture or class count is an error that names the keys."""
    from tasks.grid.weights import read_state_dict, state_dict_misfit  # a file that is no checkpoint: named

    path = Path(path)
    state, _ = read_state_dict(path)
    misfit = state_dict_misfit(model.state_dict(), state)
    if misfit:
        raise ValueError(f"weights file {path} does not fit {model.arch} with {model.num_classes} classes: {misfit}")
    model.load_state_dict(state, strict=False)  # num_batches_tracked may be absent in old files
    return {"path": str(path), "n_tensors": len(state)}
