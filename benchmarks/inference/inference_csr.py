"""Sparse kernels for torch itself, so Table 7 (`benchmarks.inference.inference`) can say whether torch's CSR
matmul (MKL on CPU) turns sparsity into speed where a sparse GEMM applies without im2col: Linear and
plain 1x1 convs."""

from __future__ import annotations

import warnings
from typing import cast

import torch
from torch import nn

from fcpts.core.masks import layer_weight, prunable_layers


class CSRLinear(nn.Module):
    """y = x W^T + b with W as a CSR matrix (torch.sparse, MKL on CPU)."""

    def __init__(self, layer: nn.Linear):
        super().__init__()
        self.weight = layer.weight.detach().to_sparse_csr()
        self.bias = None if layer.bias is None else layer.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (self.weight @ x.t()).t()
        return y if self.bias is None else y + self.bias


class CSRConv1x1(nn.Module):
    """A 1x1, ungrouped, unpadded conv as CSR W (out, in) @ X (in, N*H*W)."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        self.stride = conv.stride
        self.weight = conv.weight.detach().flatten(1).to_sparse_csr()
        self.bias = None if conv.bias is None else conv.bias.detach().view(1, -1, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride[0], :: self.stride[1]]
        n, c, h, w = x.shape
        y = (self.weight @ x.transpose(0, 1).reshape(c, n * h * w)).view(-1, n, h, w).transpose(0, 1)
        return y if self.bias is None else y + self.bias


def csr_applies(m: nn.Module) -> bool:
    return isinstance(m, nn.Linear) or (
        isinstance(m, nn.Conv2d)
        and m.kernel_size == (1, 1)
        and m.groups == 1
        and m.padding == (0, 0)
        and m.dilation == (1, 1)
    )


def to_torch_csr(model: nn.Module) -> tuple[nn.Module, float]:
    """A copy with every Linear and plain 1x1 Conv2d on CSR weights; also the share of weights moved."""
    import copy

    model = copy.deepcopy(model)
    moved = total = 0
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
    for name, m in list(prunable_layers(model).items()):
        total += layer_weight(m).numel()
        if not csr_applies(m):
            continue
        moved += layer_weight(m).numel()
        model.set_submodule(name, CSRLinear(m) if isinstance(m, nn.Linear) else CSRConv1x1(cast(nn.Conv2d, m)))
    return model, moved / total
