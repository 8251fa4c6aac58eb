"""The CIFAR task's calibration images and their augmentation (the readers are shared: tasks/grid/cifar_data.py)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from tasks.grid.cifar_data import CIFAR_MEAN, CIFAR_STD


class CifarCalibration(Dataset):
    """Calibration images (labels dropped), `augment=True`: pad-4 random crop and flip (the checkpoints' recipe);
    "resized-crop": random resized crop (0.08-1) and flip, METHOD.md's weak augmentation of the released code."""

    def __init__(self, x_uint8: np.ndarray, augment: bool | str = True):
        import torchvision.transforms.v2 as T

        self.images = torch.as_tensor(np.asarray(x_uint8)).permute(0, 3, 1, 2).contiguous()
        if augment not in (True, False, "resized-crop"):
            raise ValueError(f"augment must be True, False or 'resized-crop', got {augment!r}")
        crop = T.RandomResizedCrop(32, antialias=True) if augment == "resized-crop" else T.RandomCrop(32, padding=4)
        steps = [crop, T.RandomHorizontalFlip()] if augment else []
        self.transform = T.Compose(steps + [T.ToDtype(torch.float32, scale=True), T.Normalize(CIFAR_MEAN, CIFAR_STD)])

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(self.images[i])
