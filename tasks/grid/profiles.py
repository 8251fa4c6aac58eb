"""Profiles: how much work a run gets, the same for every method. A profile renamed by an override never shares
records with the one it came from."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from fcpts.core.loop import NOT_IDENTITY
from fcpts.methods import list_methods


def pot_methods() -> tuple[str, ...]:
    """POT's registry entries (one per allocation): one budget for all of them."""
    return tuple(list_methods(family="pot"))


@dataclass
class Profile:
    """How much work a run gets. The same profile gives every method the same budget and data."""

    name: str
    n_calibration: int
    iterations: int
    batch_size: int = 64
    eval_limit: int | None = None  # None: the whole test split
    note: str = ""
    # Per-method deviations, e.g. {"pot-l2norm": {"n_calibration": 10240, "options": {"iterations": 20000}}}.
    methods: dict[str, dict] = field(default_factory=dict)

    def n_calibration_for(self, method: str) -> int:
        return self.methods.get(method, {}).get("n_calibration", self.n_calibration)

    def options_for(self, method: str) -> dict | None:
        return self.methods.get(method, {}).get("options")

    def with_note(self, note: str) -> Profile:
        """The same budget described by `note` (what it is for, how it departs from the paper's protocol)."""
        return replace(self, note=note)

    def with_iterations(self, iterations: int) -> Profile:
        """The same profile with another iteration count, renamed so its records never mix with this one's."""
        return replace(
            self, name=f"{self.name}-it{iterations}", iterations=iterations, note=f"{self.note}; iterations overridden"
        )

    def with_method_options(self, methods: tuple[str, ...], options: dict, suffix: str = "", what: str = "") -> Profile:
        """The same profile with `options` merged into `methods`' own, renamed `<name>-<suffix>` when a `suffix`."""
        entries = dict(self.methods)
        for m in methods:
            entry = entries.get(m, {})
            entries[m] = {**entry, "options": {**entry.get("options", {}), **options}}
        if not suffix:
            return replace(self, methods=entries)
        return replace(self, name=f"{self.name}-{suffix}", methods=entries, note=f"{self.note}; {what}")

    def with_option_pairs(self, methods: tuple[str, ...], pairs: list[str], prefix: str, what: str) -> Profile:
        """`KEY=VALUE` overrides (JSON values where they parse) for `methods`, the profile renamed by those that
        change a result (not `fcpts.core.loop.NOT_IDENTITY`)."""
        options = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ValueError(f"an option override wants KEY=VALUE, got {pair!r}")
            try:
                options[key] = json.loads(value)
            except json.JSONDecodeError:
                options[key] = value
        changing = {k: v for k, v in options.items() if k not in NOT_IDENTITY}
        suffix = prefix + "-".join(f"{k}{v}" for k, v in changing.items()) if changing else ""
        return self.with_method_options(methods, options, suffix, f"{what} {changing}")

    def with_pot_iterations(self, iterations: int) -> Profile:
        """The same profile with another POT per-layer iteration count (both allocations), renamed likewise."""
        what = f"POT iterations per layer overridden to {iterations}"
        return self.with_method_options(pot_methods(), {"iterations": iterations}, f"pot{iterations}", what)


def pot_budget(n_calibration: int, iterations: int) -> dict[str, dict]:
    """Profile.methods entry for both POT allocations: their own image count and iterations per layer."""
    return {m: {"n_calibration": n_calibration, "options": {"iterations": iterations}} for m in pot_methods()}


def paper_profile(split: str = "training") -> Profile:
    """The paper's protocol (METHOD.md); `split` names where calibration images come from."""
    note = (
        f"METHOD.md protocol: training-loop methods 1,024 {split} images x 1,600 iterations of 64; "
        f"POT 10,240 {split} images (capped at the split), up to 20,000 iterations per layer"
    )
    return Profile(
        "paper", n_calibration=1024, iterations=1600, batch_size=64, note=note, methods=pot_budget(10240, 20000)
    )


def cpu_profile(
    name: str,
    n_calibration: int,
    iterations: int,
    batch_size: int,
    pot_iterations: int,
    eval_limit: int | None = None,
    methods: dict[str, dict] | None = None,
) -> Profile:
    """A CPU budget: POT on the training-loop methods' own images, with its own iterations per layer."""
    pot = pot_budget(n_calibration, pot_iterations)
    return Profile(name, n_calibration, iterations, batch_size, eval_limit, methods={**pot, **(methods or {})})


def quick_profile(
    n_calibration: int, iterations: int, batch_size: int, eval_limit: int, pot_iterations: int
) -> Profile:
    """Every task's `quick` profile: a few images and steps to prove the pipeline runs, never a result."""
    return cpu_profile("quick", n_calibration, iterations, batch_size, pot_iterations, eval_limit).with_note(
        "smoke test only; not a result"
    )


def profile_table(*profiles: Profile) -> dict[str, Profile]:
    """A task's profiles by name, in the order given (each profile already carries its name)."""
    table = {p.name: p for p in profiles}
    if len(table) != len(profiles):
        raise ValueError(f"two profiles share a name: {[p.name for p in profiles]}")
    return table
