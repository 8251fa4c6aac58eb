"""nn.MultiheadAttention as modules every method can prune: `attention_as_linear` swaps each for `LinearAttention`, the
same computation with its bare `in_proj_weight` and its `out_proj` called as nn.Linear modules; `attention_as_mha`
swaps back."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


class LinearAttention(nn.Module):
    """Self-attention computed as nn.MultiheadAttention computes it, its projections called as Linear modules:
    `in_proj` (q, k and v stacked, as in `in_proj_weight`) and `out_proj`. Same call and outputs."""

    def __init__(self, mha: nn.MultiheadAttention):
        super().__init__()
        present = {  # the variants whose projections are not one stacked Linear: an error, not silently another model
            "separate kdim/vdim projections": not mha._qkv_same_embed_dim,
            "add_bias_kv": mha.bias_k is not None,
            "add_zero_attn": mha.add_zero_attn,
        }
        unsupported = [what for what, there in present.items() if there]
        if unsupported:
            raise ValueError(
                f"nn.MultiheadAttention with {', '.join(unsupported)} has no LinearAttention form; leave it out with "
                "fcpts.attention_as_linear(model, filter_fn=lambda module, name: ...) (its weights then stay dense)"
            )
        self.embed_dim, self.num_heads = mha.embed_dim, mha.num_heads
        self.dropout, self.batch_first = mha.dropout, mha.batch_first
        weight = mha.in_proj_weight
        self.in_proj = nn.Linear(
            self.embed_dim, 3 * self.embed_dim, bias=mha.in_proj_bias is not None, device="meta", dtype=weight.dtype
        )
        self.in_proj.weight = weight  # the same Parameters: nothing is copied, an optimiser's references hold
        if mha.in_proj_bias is not None:
            self.in_proj.bias = mha.in_proj_bias
        self.out_proj = mha.out_proj

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not (query is key and key is value):
            raise ValueError(
                "LinearAttention computes self-attention (query, key and value the same tensor); keep "
                "nn.MultiheadAttention for cross-attention (fcpts.attention_as_linear(model, filter_fn=...))"
            )
        if is_causal and attn_mask is None:
            raise RuntimeError("is_causal=True needs the causal attn_mask, as nn.MultiheadAttention does")
        x = query if self.batch_first or query.dim() == 2 else query.transpose(0, 1)
        unbatched = x.dim() == 2
        if unbatched:
            x = x.unsqueeze(0)
        batch, length, _ = x.shape
        q, k, v = self.in_proj(x).unflatten(-1, (3, self.num_heads, -1)).permute(2, 0, 3, 1, 4)
        mask = _additive_mask(attn_mask, key_padding_mask, batch, self.num_heads, length, q.dtype)
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights:  # the weights returned are those applied: after dropout, as nn.MultiheadAttention's
            scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
            attention = torch.softmax(scores if mask is None else scores + mask, dim=-1)
            attention = F.dropout(attention, dropout) if dropout > 0 else attention
            weights = attention.mean(dim=1) if average_attn_weights else attention
            out = attention @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        out = self.out_proj(out.transpose(1, 2).reshape(batch, length, self.embed_dim))
        if unbatched:
            return out.squeeze(0), None if weights is None else weights.squeeze(0)
        return (out if self.batch_first else out.transpose(0, 1)), weights

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, dropout={self.dropout}, batch_first={self.batch_first}"


def _additive_mask(
    attn_mask: torch.Tensor | None,
    key_padding_mask: torch.Tensor | None,
    batch: int,
    heads: int,
    length: int,
    dtype: torch.dtype,
) -> torch.Tensor | None:
    """attn_mask ((L, L) or (batch * heads, L, L)) and key_padding_mask ((batch, L)) as one float mask added to
    the scores, (batch or 1, heads or 1, L, L); a boolean True, as in nn.MultiheadAttention, is not attended."""

    def additive(m: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(m, dtype=dtype).masked_fill_(m, float("-inf")) if m.dtype == torch.bool else m.to(dtype)

    mask = None
    if attn_mask is not None:
        mask = additive(attn_mask)
        mask = mask.view(batch, heads, length, length) if mask.dim() == 3 else mask.view(1, 1, length, length)
    if key_padding_mask is not None:
        padding = additive(key_padding_mask).view(-1, 1, 1, length)
        mask = padding if mask is None else mask + padding
    return mask


def attention_as_linear(model: nn.Module, filter_fn: Callable[[nn.Module, str], bool] | None = None) -> nn.Module:
    """Swap every nn.MultiheadAttention of `model` that `filter_fn` keeps for a `LinearAttention` holding the same
    Parameters (`<attention>.in_proj`, `.out_proj`), in place; returns `model` (a new one where it is one itself)."""
    chosen = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.MultiheadAttention) and (filter_fn is None or filter_fn(module, name))
    ]
    swaps = [(name, LinearAttention(module).train(module.training)) for name, module in chosen]  # all checked first
    for name, linear in swaps:
        model = _swap(model, name, linear)
    return model


def attention_as_mha(model: nn.Module) -> nn.Module:
    """Swap every `LinearAttention` of `model` back for an nn.MultiheadAttention holding its Parameters (sparse
    weights stay sparse), in place; returns `model` (a new module where `model` itself is one)."""
    for name, module in list(model.named_modules()):
        if isinstance(module, LinearAttention):
            weight = module.in_proj.weight
            if not isinstance(weight, nn.Parameter):
                raise TypeError(
                    f"{name}.in_proj's weight is parametrized (a mask still on it): swap back after the method "
                    "has returned the model, whose weights are plain"
                )
            mha = nn.MultiheadAttention(
                module.embed_dim,
                module.num_heads,
                dropout=module.dropout,
                bias=module.in_proj.bias is not None,
                batch_first=module.batch_first,
                device="meta",
                dtype=weight.dtype,
            )
            mha.in_proj_weight = weight
            if module.in_proj.bias is not None:
                mha.in_proj_bias = module.in_proj.bias
            mha.out_proj = module.out_proj
            model = _swap(model, name, mha.train(module.training))
    return model


def _swap(model: nn.Module, name: str, new: nn.Module) -> nn.Module:
    """`model` with its submodule `name` replaced by `new` (`new` itself where `name` is the model)."""
    if not name:
        return new
    model.set_submodule(name, new)
    return model
