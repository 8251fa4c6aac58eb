"""The options a record's method ran with against today's defaults: what a re-run pins, whether two records ran one
setup, which defaults changed since a record was made."""

from __future__ import annotations

import json
from typing import Any

from fcpts.core.loop import NOT_IDENTITY
from fcpts.methods import get_method

# Options a re-run sets itself: those that change no result, its seed, and a layer filter (a function).
NOT_PINNED = {*NOT_IDENTITY, "seed", "filter_fn"}


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def todays_options(method: str) -> dict[str, Any]:
    """The method's default options today, as a record stores them."""
    return _json(get_method(method).make_options().to_dict())


def made_with(record: dict) -> dict[str, Any]:
    """The record's options; one it lacks ran as its profile set it, else as `DEFAULTS_BEFORE` says, else today's."""
    method = get_method(record["method"])
    budget = record.get("budget") or {}
    profile = (record.get("profile") or {}).get("methods", {}).get(record["method"], {}).get("options") or {}
    by_budget = {k: budget[k] for k in method.granted if k in budget}
    return {**method.options.DEFAULTS_BEFORE, **by_budget, **profile, **record.get("method_options", {})}


def pinned_options(record: dict) -> dict[str, Any]:
    """The record's options that today's defaults would not give, but for its profile's budget."""
    today = todays_options(record["method"])
    by_budget = set(get_method(record["method"]).granted)
    return {
        k: v
        for k, v in made_with(record).items()
        if k in today and k not in NOT_PINNED | by_budget and _json(v) != today[k]
    }


def effective_options(record: dict, today: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the record's run did, option by option: `today`'s defaults where it is silent, "auto" resolved."""
    today = todays_options(record["method"]) if today is None else today
    values = get_method(record["method"]).options.effective({**today, **made_with(record)}, record["target_sparsity"])
    return {k: _json(values[k]) for k in today if k not in NOT_PINNED}


def same_setup(a: dict, b: dict) -> bool:
    """Whether two records of a cell ran the same profile and options (their seeds may differ)."""
    return a["profile"]["name"] == b["profile"]["name"] and effective_options(a) == effective_options(b)


def earlier_defaults(record: dict) -> dict[str, Any]:
    """Options the record ran with a default changed since, e.g. {"ramp": 0.5}, but for what its profile sets."""
    method = get_method(record["method"])
    by_profile = set(record["profile"].get("methods", {}).get(record["method"], {}).get("options", {}))
    by_profile |= set(record.get("budget", {}))
    defaults = todays_options(record["method"])
    today = method.options.effective(defaults, record["target_sparsity"])
    ran = effective_options(record, defaults)
    recorded = record.get("method_options", {})
    return {k: v for k, v in ran.items() if k in recorded and k not in by_profile and v != _json(today[k])}
