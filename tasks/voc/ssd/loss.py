"""SSD's training loss, kept apart from the networks because only training (not the PTS grid) needs it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass
class MultiboxLoss:
    """SSD's loss (pytorch-ssd MultiboxLoss): cross-entropy on the positives and the hardest negatives
    (ranked by background loss, `neg_pos_ratio` negatives per positive, per image) plus smooth L1 on the
    positives' box offsets, both summed and divided by the number of positives."""

    neg_pos_ratio: int = 3
    stats: dict = field(default_factory=dict)

    def __call__(
        self, logits: torch.Tensor, regression: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        num_classes = logits.shape[-1]
        with torch.no_grad():
            bg_loss = -F.log_softmax(logits, dim=-1)[..., 0]
            pos = labels > 0
            num_neg = pos.sum(1, keepdim=True) * self.neg_pos_ratio
            bg_loss.masked_fill_(pos, -math.inf)
            rank = bg_loss.argsort(1, descending=True).argsort(1)
            mask = pos | (rank < num_neg)
        num_pos = max(1, int(pos.sum()))
        cls = F.cross_entropy(logits[mask].reshape(-1, num_classes), labels[mask], reduction="sum") / num_pos
        loc = F.smooth_l1_loss(regression[pos], targets[pos], reduction="sum") / num_pos
        return loc, cls
