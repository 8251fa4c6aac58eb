"""argparse types for the suite's numeric flags: a value that would run nothing, or run for hours on a typo, is
refused when the command line is read, before any data or model is loaded."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


def _number(kind: type, fits: Callable[[Any], bool], rule: str, refusal: str | None = None) -> Callable[[str], Any]:
    """An argparse type: a `kind` that `fits`, else an error saying the `rule` (or `refusal`, whatever is wrong)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{refusal or f'expected {what}'}, got {text!r}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"{refusal or f'must be {rule}'}, got {text}")
        return value

    return parse


def at_least(kind: type, low: float) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` >= `low` (lr 0 or -1 epochs would run, and write a record)."""
    return _number(kind, lambda value: value >= low, f">= {low}")


def above(low: float) -> Callable[[str], float]:
    """An argparse type: a finite float > `low`."""
    return _number(float, lambda value: low < value < math.inf, f"> {low}")


# A seed names records (`-seed3`) and seeds calibration draws: a non-negative integer.
seed = _number(int, lambda value: value >= 0, ">= 0", "a seed is a whole number >= 0")


def target(text: str):
    """A global sparsity target in [0, 1), a library-checked `Sparsity`; torch is imported only here."""
    from fcpts.core.masks import check_target

    try:
        return check_target(float(text))
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
