"""The CIFAR ResNets (He et al. 2016, Sec. 4.2; parameter names of akamaster/pytorch_resnet_cifar10): option-A
shortcuts, and `resnet20b`...`resnet56b` with option-B shortcuts, the paper's dense models' architecture
(chenyaofo/pytorch-cifar-models; trained here by `python -m tasks.cifar.train`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_BLOCKS = {"resnet20": 3, "resnet32": 5, "resnet44": 7, "resnet56": 9}
# name -> (basic blocks per stage, shortcut option)
CIFAR_MODELS = {**{n: (b, "A") for n, b in _BLOCKS.items()}, **{f"{n}b": (b, "B") for n, b in _BLOCKS.items()}}


class ShortcutA(nn.Module):
    """Option A: subsample by 2 and zero-pad the new channels (no parameters)."""

    def __init__(self, planes: int):
        super().__init__()
        self.pad = planes // 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad))


def shortcut_b(in_planes: int, planes: int, stride: int) -> nn.Module:
    """Option B: a strided 1x1 convolution and BatchNorm project onto the new shape."""
    return nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))


class BasicBlock(nn.Module):
    """conv-BN-ReLU, conv-BN, the shortcut added, ReLU (in place, as torchvision's: one buffer less each)."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1, option: str = "A"):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = ShortcutA(planes) if option == "A" else shortcut_b(in_planes, planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x), inplace=True)


class CifarResNet(nn.Module):
    def __init__(self, blocks_per_stage: int, num_classes: int = 10, option: str = "A"):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        stages, in_planes = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            layers = []
            for i in range(blocks_per_stage):
                layers.append(BasicBlock(in_planes, planes, stride if i == 0 else 1, option))
                in_planes = planes
            stages.append(nn.Sequential(*layers))
        self.layer1, self.layer2, self.layer3 = stages
        self.linear = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


def cifar_resnet(name: str, num_classes: int = 10) -> CifarResNet:
    if name not in CIFAR_MODELS:
        raise ValueError(f"unknown CIFAR model {name!r}; choose one of {sorted(CIFAR_MODELS)}")
    blocks, option = CIFAR_MODELS[name]
    return CifarResNet(blocks, num_classes, option)
