"""argparse types for the suite's numeric flags: a value that would run nothing, or run for hours on a typo, is
refused when the command line is read, before any data or model is loaded."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any


def at_least(kind: type, low: float) -> Callable[[str], Any]:
    """An argparse type: a number of `kind` >= `low` (lr 0 or -1 epochs would run, and write a record)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'a whole number' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if not value >= low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        return value

    return parse


def above(low: float) -> Callable[[str], float]:
    """An argparse type: a finite float > `low`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not (low < value < math.inf):
            raise argparse.ArgumentTypeError(f"must be > {low}, got {text}")
        return value

    return parse


def seed(text: str) -> int:
    """A seed names records (`-seed3`) and seeds calibration draws: a non-negative integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a seed is a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed is a whole number >= 0, got {value}")
    return value


def target(text: str):
    """A global sparsity target in [0, 1), a library-checked `Sparsity`; torch is imported only here."""
    from fcpts.core.masks import check_target

    try:
        return check_target(float(text))
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
