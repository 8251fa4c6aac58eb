"""Classification metrics: top-1 / top-5 accuracy in percent."""
from __future__ import annotations

import torch
from torch import nn


@torch.inference_mode()
def classify(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 500) -> dict[str, float]:
    """Top-1/top-5 (%) of `model` in eval mode on normalised inputs `x` with labels `y`."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    top1 = top5 = 0
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size].to(device))
        target = torch.as_tensor(y[i : i + batch_size], device=device).view(-1, 1)
        k = min(5, logits.shape[1])
        pred = logits.topk(k, dim=1).indices
        top1 += (pred[:, :1] == target).sum().item()
        top5 += (pred == target).any(dim=1).sum().item()
    model.train(was_training)
    n = len(x)
    return {"top1": 100.0 * top1 / n, "top5": 100.0 * top5 / n, "n_images": n}
