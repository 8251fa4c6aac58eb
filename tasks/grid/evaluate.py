"""Classification metrics: top-1 / top-5 accuracy in percent."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.utils.data import DataLoader

from fcpts.core.batch_workers import default_workers


@torch.inference_mode()
def classify_batches(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    """Top-1/top-5 (%) of `model` in eval mode over (normalised inputs, labels) batches."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    top1 = top5 = n = 0
    for x, y in batches:
        logits = model(x.to(device, non_blocking=True))  # from pinned memory: overlaps the previous batch
        target = torch.as_tensor(y, device=device).view(-1, 1)
        pred = logits.topk(min(5, logits.shape[1]), dim=1).indices
        top1 += (pred[:, :1] == target).sum().item()
        top5 += (pred == target).any(dim=1).sum().item()
        n += len(target)
    model.train(was_training)
    return {"top1": 100.0 * top1 / n, "top5": 100.0 * top5 / n, "n_images": n}


def classify(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 500) -> dict[str, float]:
    """Top-1/top-5 (%) on in-memory inputs `x` with labels `y`."""
    return classify_batches(
        model, ((x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, len(x), batch_size))
    )


def _one_thread(_worker_id: int) -> None:
    torch.set_num_threads(1)  # workers decode images; torch's own threads in each would only contend


def evaluation_loader(dataset, batch_size: int, workers: int | None, device: torch.device) -> DataLoader:
    """The dataset in order, `workers` processes (None: min(8, CPUs)) preparing batches, pinned for a GPU."""
    workers = default_workers() if workers is None else workers
    return DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        worker_init_fn=_one_thread if workers else None,
    )


def classify_dataset(model: nn.Module, dataset, batch_size: int = 50, workers: int | None = None) -> dict[str, float]:
    """Top-1/top-5 (%) streamed from a dataset of (image, label): any validation-set size fits in memory."""
    device = next(model.parameters()).device
    return classify_batches(model, evaluation_loader(dataset, batch_size, workers, device))
