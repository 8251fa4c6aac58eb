"""ImageNet in the standard folder layout, `<dir>/{train,val}/<wnid>/*.JPEG`, `<dir>` = `<data-root>/imagenet` or the
data root. Class index = the wnid's position in `classes.txt` (`<wnid>[\\t<name>]` per line), else among the
sorted wnids of `train/`: labels stay right when `val/` holds only some classes.
"""

from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import Dataset

from tasks.grid.data import ENV_DATA_ROOT, DataNotFoundError

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png"}
IMAGENET_DATA = "ImageNet (imagenet/ or the folder itself with train/<wnid>/ and val/<wnid>/)"


def imagenet_dir(root: Path) -> Path:
    for candidate in (root / "imagenet", root):
        if (candidate / "val").is_dir() or (candidate / "train").is_dir():
            return candidate
    raise DataNotFoundError(
        f"no ImageNet under {root}: expected {root / 'imagenet'}/ or {root}/ with train/<wnid>/ and "
        f"val/<wnid>/ image folders. Pass --data-root DIR (or set {ENV_DATA_ROOT}) to your ImageNet folder; "
        "val/ must be sorted into class folders (e.g. with the common valprep.sh)."
    )


def class_index(folder: Path) -> dict[str, int]:
    listing = folder / "classes.txt"
    if listing.is_file():
        wnids = [line.split("\t")[0].strip() for line in listing.read_text().splitlines() if line.strip()]
    else:
        train = folder / "train"
        wnids = sorted(p.name for p in train.iterdir() if p.is_dir()) if train.is_dir() else []
    if len(wnids) != 1000:
        raise DataNotFoundError(
            f"cannot number ImageNet's classes from {folder}: found {len(wnids)} wnids (in classes.txt or "
            "train/), need 1,000. Add a classes.txt listing the 1,000 wnids in sorted order."
        )
    return {w: i for i, w in enumerate(wnids)}


def list_split(folder: Path, split: str) -> list[tuple[Path, int]]:
    """Sorted (path, class index) pairs of one split."""
    split_dir = folder / split
    if not split_dir.is_dir():
        raise DataNotFoundError(f"ImageNet {split} split not found: {split_dir}/ does not exist")
    index = class_index(folder)
    samples = []
    for class_dir in sorted(p for p in split_dir.iterdir() if p.is_dir()):
        if class_dir.name not in index:
            raise DataNotFoundError(f"{class_dir} is not an ImageNet class folder (unknown wnid {class_dir.name!r})")
        samples += [
            (f, index[class_dir.name]) for f in sorted(class_dir.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES
        ]
    if not samples:
        raise DataNotFoundError(f"no images in {split_dir}/<wnid>/ (looked for {sorted(IMAGE_SUFFIXES)})")
    return samples


class ImageFiles(Dataset):
    """Images of `samples` through `transform`; yields (tensor, label). Decoded files stay cached
    (calibration sets are small and re-read every epoch)."""

    def __init__(self, samples: list[tuple[Path, int]], transform, cache: bool = False):
        self.samples, self.transform, self.cache = samples, transform, cache
        self._decoded: dict[int, Image.Image] = {}

    def __len__(self) -> int:
        return len(self.samples)

    def image(self, i: int) -> Image.Image:
        if i in self._decoded:
            return self._decoded[i]
        path = self.samples[i][0]
        try:
            with Image.open(path) as im:
                img = im.convert("RGB")
        except OSError as e:
            raise ValueError(f"cannot read image {path}: {e}") from e
        if self.cache:
            self._decoded[i] = img
        return img

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.image(i)), self.samples[i][1]
