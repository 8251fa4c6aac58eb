"""A model's output as the one tensor of logits the methods distil: during a run a forward hook takes a tensor as it
is, else the 'logits' or 'out' entry, a `.logits` field or a tuple's first element; else `output_fn` must say.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

OutputFn = Callable[[Any], torch.Tensor]
LOGIT_KEYS = ("logits", "out")


def default_output(output: Any) -> torch.Tensor:
    """The logits in a model's output: a tensor, the 'logits'/'out' entry of a dict, a `.logits` field (named
    tuples with auxiliary heads, Hugging Face outputs), or the first element of a tuple or list."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        for key in LOGIT_KEYS:
            if isinstance(output.get(key), torch.Tensor):
                return output[key]
    elif isinstance(getattr(output, "logits", None), torch.Tensor):
        return output.logits
    elif isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise TypeError(
        f"the model returns {_describe(output)}, and the methods distil one tensor of logits: pass "
        "output_fn=lambda out: ... returning that tensor (e.g. output_fn=lambda out: out['my_head'])"
    )


def _describe(output: Any) -> str:
    if isinstance(output, Mapping):
        return f"a {type(output).__name__} with keys {list(output)}"
    if isinstance(output, (tuple, list)):
        return f"a {type(output).__name__} of {[type(o).__name__ for o in output]}"
    return f"a {type(output).__name__}"


@contextlib.contextmanager
def tensor_outputs(model: nn.Module, output_fn: OutputFn | None = None) -> Iterator[None]:
    """While inside, `model(x)` (and every copy made of it, such as the frozen teacher) returns
    `output_fn(output)` (default: `default_output`)."""
    adapt = output_fn or default_output

    def hook(_module: nn.Module, _args: Any, output: Any) -> torch.Tensor:
        out = output if output_fn is None and isinstance(output, torch.Tensor) else adapt(output)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"output_fn must return the tensor of logits to distil, got {_describe(out)}")
        return out

    handle = model.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()
