"""A layer's inputs over the calibration batches, layer after layer in forward order, for a layer-wise method (OBS):
inside a chain of nn.Sequential units the current unit's inputs are kept and run on, instead of a forward from the
image for every layer (the same computation)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn


class StopForward(Exception):
    """Raised by a hook that has what it needs from a forward."""


def sequential_units(model: nn.Module) -> dict[str, tuple[str, int]]:
    """{unit name: (chain name, position)} for the children of every outermost nn.Sequential of the model,
    nested Sequentials flattened into their parent's chain (their last unit feeds the next unit)."""
    units: dict[str, tuple[str, int]] = {}

    def flatten(name: str, seq: nn.Module) -> list[str]:
        out: list[str] = []
        for child_name, child in seq.named_children():
            full = f"{name}.{child_name}" if name else child_name
            out += flatten(full, child) if isinstance(child, nn.Sequential) else [full]
        return out

    def walk(name: str, module: nn.Module) -> None:
        if isinstance(module, nn.Sequential):
            for pos, unit in enumerate(flatten(name, module)):
                units[unit] = (name, pos)
            return
        for child_name, child in module.named_children():
            walk(f"{name}.{child_name}" if name else child_name, child)

    walk("", model)
    return units


def unit_of(layer: str, units: dict[str, tuple[str, int]]) -> str | None:
    """The chain unit holding `layer` (the layer itself where it is a unit), or None."""
    parts = layer.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in units:
            return candidate
    return None


def forward_order(model: nn.Module, layers: dict[str, nn.Module], sample: torch.Tensor, method: str) -> list[str]:
    """The names of `layers` in the order a forward of `sample` (eval, no gradients) first reaches them; a layer it
    never calls (its parent applies the weight itself) is an error naming the ways round."""
    called: list[str] = []
    modes = {m: m.training for m in model.modules()}
    try:
        with torch.no_grad(), contextlib.ExitStack() as hooks:
            for n, m in layers.items():
                hooks.enter_context(
                    m.register_forward_pre_hook(lambda _m, _i, n=n: called.append(n) if n not in called else None)
                )
            model.eval()(sample)
    finally:
        for m, training in modes.items():
            m.training = training
    missing = [n for n in layers if n not in called]
    if not missing:
        return called
    attention = {name for name, m in model.named_modules() if isinstance(m, nn.MultiheadAttention)}
    swap = any(n.rpartition(".")[0] in attention and n.endswith("out_proj") for n in missing)
    ways = [
        "keep them dense (exclude=[...])",
        "use a method that trains the whole model (fcpts, fcpts-plus, str, probmask): it masks a weight wherever it "
        "is read",
    ]
    if swap:
        ways.insert(0, "swap nn.MultiheadAttention for Linear layers it calls first: fcpts.attention_as_linear(model)")
    raise ValueError(
        f"{method} reads each layer's inputs from the layer's own forward, and a forward of {type(model).__name__} "
        f"never calls {len(missing)} of its layers (e.g. {missing[:3]}): their parent applies their weights itself; "
        + "; or ".join(ways)
    )


def input_of(net: nn.Module, name: str, x) -> torch.Tensor:
    """The input the submodule `name` of `net` receives when `net` runs on x; the forward stops there."""
    captured = []

    def hook(_module, args):
        captured.append(args[0])
        raise StopForward

    with net.get_submodule(name).register_forward_pre_hook(hook), contextlib.suppress(StopForward):
        net(x)
    if not captured:
        raise RuntimeError(f"a forward of {type(net).__name__} never reaches {name!r}")
    return captured[0]


def _fresh(x):
    """A copy a unit may change in place (an inplace ReLU first) without touching the kept inputs."""
    return x.clone() if isinstance(x, torch.Tensor) else x


class LayerInputs:
    """Called with a layer's name (in forward order), yields batch by batch that layer's input in each of `nets`.
    `reuse=False`, or a unit whose kept inputs over `planned_batches` would exceed `max_bytes`: from the image."""

    def __init__(
        self,
        nets: list[nn.Module],
        batch: Callable[[int], torch.Tensor],
        n_batches: int,
        reuse=True,
        max_bytes: float = float("inf"),
        planned_batches: float | None = None,
    ):
        self.nets, self.batch, self.n_batches, self.max_bytes = nets, batch, n_batches, max_bytes
        self.planned_batches = n_batches if planned_batches is None else planned_batches  # what keeping is sized for
        self.units = sequential_units(nets[0]) if reuse else {}
        self.unit: str | None = None
        self.kept: list[list] = []  # [batch][net]: the inputs of self.unit
        self.broken: set[str] = set()  # chains whose units do not feed each other directly

    @torch.no_grad()
    def __call__(self, layer: str) -> Iterator[list[torch.Tensor]]:
        unit = unit_of(layer, self.units)
        if unit is None or not self._move_to(unit):
            self.unit, self.kept = None, []
            for b in range(self.n_batches):
                x = self.batch(b)
                yield [input_of(net, layer, x) for net in self.nets]
            return
        for kept in self.kept:
            if layer == unit:
                yield [_fresh(x) for x in kept]
            else:
                inside = layer[len(unit) + 1 :]
                yield [input_of(net.get_submodule(unit), inside, _fresh(x)) for net, x in zip(self.nets, kept)]

    def _too_large(self, first: list) -> bool:
        """Whether keeping inputs like the first batch's for every planned batch would exceed max_bytes."""
        size = sum(x.numel() * x.element_size() for x in first if isinstance(x, torch.Tensor))
        return size * self.planned_batches > self.max_bytes

    def _move_to(self, unit: str) -> bool:
        """Keep the inputs of `unit` for every batch; False (nothing kept) where they would exceed max_bytes."""
        chain, pos = self.units[unit]
        here = self.units.get(self.unit) if self.unit is not None else None
        if here is not None and here[0] == chain and here[1] <= pos and chain not in self.broken:
            between = [u for u, (c, p) in self.units.items() if c == chain and here[1] <= p < pos]
            for b, kept in enumerate(self.kept):
                for i, net in enumerate(self.nets):
                    for u in between:
                        kept[i] = net.get_submodule(u)(kept[i])
                if b == 0 and self._too_large(kept):
                    self.unit, self.kept = None, []
                    return False
            if self._chains_as_assumed(unit):
                self.unit = unit
                return True
            self.broken.add(chain)  # the model's forward does more between the units: from the image
        self.unit, self.kept = None, []
        first = [input_of(net, unit, self.batch(0)) for net in self.nets]
        if self._too_large(first):
            return False
        self.kept = [first]
        for b in range(1, self.n_batches):
            x = self.batch(b)
            self.kept.append([input_of(net, unit, x) for net in self.nets])
        self.unit = unit
        return True

    def _chains_as_assumed(self, unit: str) -> bool:
        """Whether the first batch's input of `unit`, reached through the units before it, is a forward's."""
        reached = self.kept[0][0]
        direct = input_of(self.nets[0], unit, self.batch(0))
        if not isinstance(reached, torch.Tensor) or not isinstance(direct, torch.Tensor):
            return False
        return reached.shape == direct.shape and torch.allclose(reached, direct, rtol=1e-4, atol=1e-5)
