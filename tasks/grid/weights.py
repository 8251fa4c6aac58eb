"""Dense weights files: reading a state dict with errors that name the file, loading it, and where a CIFAR model's
pretrained weights are looked for (a driver, deploy and the figures read the same files)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from fcpts.core.io import file_sha256
from tasks.grid.paths import RESULTS_DIR, DataNotFoundError


def read_state_dict(path: str | Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(state dict, the checkpoint's other numbers and strings), `module.` prefixes stripped; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"weights file {path} does not exist; pass --weights PATH to a state dict")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)  # tensors and numbers only: never runs code
    except Exception as e:  # pickle/zip errors differ by corruption kind
        raise ValueError(
            f"weights file {path} is corrupt or not a PyTorch checkpoint ({type(e).__name__}: {load_error_reason(e)})"
        ) from e
    state = ckpt.get("state_dict", ckpt.get("model", ckpt)) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"weights file {path} holds no state dict (found {type(ckpt).__name__})")
    meta = {k: v for k, v in ckpt.items() if k != "state_dict" and isinstance(v, (int, float, str))}
    state = {k.removeprefix("module."): v for k, v in state.items()}
    check_no_pruning_masks(state, path)
    return state, meta


def load_error_reason(error: Exception) -> str:
    """The gist of a torch.load error on one line."""
    text = str(error)
    if "WeightsUnpickler error:" in text:
        text = text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation", 1)[0]
    text = " ".join(text.split())
    return text if len(text) <= 200 else text[:200] + "..."


def check_no_pruning_masks(state: dict[str, torch.Tensor], path: str | Path) -> None:
    """A state dict saved with torch.nn.utils.prune on (`*_orig`, `*_mask`): an error naming the fix."""
    bases = (k.removesuffix("_orig") for k in state if k.endswith("_orig"))
    pruned = [base for base in bases if base + "_mask" in state]
    if pruned:
        shown = ", ".join(pruned[:3]) + (", ..." if len(pruned) > 3 else "")
        raise ValueError(
            f"weights file {path} was saved with torch.nn.utils.prune still on the model: {len(pruned)} tensor(s) "
            f"({shown}) are stored as *_orig and *_mask; call torch.nn.utils.prune.remove(module, 'weight') on each "
            "pruned layer, then save its state_dict (its zeros stay in the weight)"
        )


def load_checkpoint(model: nn.Module, path: str | Path, by_position: bool = False) -> dict:
    """Load a weights file into `model` (`by_position`: matched by position); returns its path, sha256 and metadata."""
    path = Path(path)
    state, meta = read_state_dict(path)
    if by_position and set(state) != set(model.state_dict()):
        state = map_state_dict(model, state, f"weights file {path}")
    try:
        model.load_state_dict(state)
    except RuntimeError as e:  # say which entries differ, not torch's list of every entry
        misfit = state_dict_misfit(model.state_dict(), state) or str(e)
        raise ValueError(f"weights file {path} does not fit {type(model).__name__}: {misfit}") from e
    return {"path": str(path), "sha256": file_sha256(path), **meta}


def map_state_dict(model: nn.Module, state: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """Match a foreign state dict to `model` by position, checking every shape."""
    ours = model.state_dict()
    if len(ours) != len(state):
        raise ValueError(f"{source}: {len(state)} tensors, the model has {len(ours)}; not the same architecture")
    mapped = {}
    for (k, v), (k_src, v_src) in zip(ours.items(), state.items()):
        if v.shape != v_src.shape:
            raise ValueError(f"{source}: {k_src} {tuple(v_src.shape)} does not fit {k} {tuple(v.shape)}")
        mapped[k] = v_src
    return mapped


def state_dict_misfit(expected: dict[str, torch.Tensor], found: dict[str, torch.Tensor], show: int = 3) -> str:
    """How a state dict differs from the model's, in one line (torch's error lists every key)."""

    def some(keys: list[str]) -> str:
        return ", ".join(keys[:show]) + (", ..." if len(keys) > show else "")

    missing = [k for k in expected if k not in found and not k.endswith("num_batches_tracked")]  # torch fills those
    unexpected = [k for k in found if k not in expected]
    reshaped = [
        f"{k} {tuple(found[k].shape)} for {tuple(v.shape)}"
        for k, v in expected.items()
        if k in found and found[k].shape != v.shape
    ]
    parts = [
        f"{len(keys)} {what} ({some(keys)})"
        for what, keys in (("missing", missing), ("unexpected", unexpected), ("of another shape", reshaped))
        if keys
    ]
    return "; ".join(parts)


def default_cifar_weights(data_root: Path, dataset: str, model: str) -> Path:
    """Pretrained CIFAR weights: <data-root>/weights/<dataset>/<model>.th, then results/weights/."""
    candidates = [
        data_root / "weights" / dataset / f"{model}.th",
        RESULTS_DIR / "weights" / dataset / f"{model}.th",
    ]
    for c in candidates:
        if c.is_file():
            return c
    raise DataNotFoundError(
        f"no pretrained {model} for {dataset}: looked for {', '.join(map(str, candidates))}. "
        "Pass --weights PATH to a checkpoint of this model."
    )
