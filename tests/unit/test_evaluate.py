"""Evaluation reads its data with worker processes by default, and they do not change the results."""

import torch
from torch import nn
from torch.utils.data import TensorDataset

from tasks.grid.evaluate import classify_dataset, default_workers, evaluation_loader


def test_workers_give_the_results_of_the_main_process():
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(37, 6, generator=g), torch.randint(0, 7, (37,), generator=g))
    torch.manual_seed(0)
    model = nn.Linear(6, 7)
    alone = classify_dataset(model, data, batch_size=8, workers=0)
    assert classify_dataset(model, data, batch_size=8, workers=2) == alone
    assert classify_dataset(model, data, batch_size=8) == alone  # the default: workers
    assert alone["n_images"] == 37 and 0 < alone["top5"] <= 100


def test_default_is_min_8_cpus_and_pinned_memory_for_a_gpu_only():
    data = TensorDataset(torch.zeros(4, 2))
    assert 1 <= default_workers() <= 8
    on_cpu = evaluation_loader(data, 2, None, torch.device("cpu"))
    assert on_cpu.num_workers == default_workers() and not on_cpu.pin_memory
    assert evaluation_loader(data, 2, 0, torch.device("cuda")).pin_memory
