"""FCPTS's methods (FCPTS, its fixed-rate ablation, FCPTS+): one module each, registering itself; every module
of this package is imported here. The re-implemented baselines live in the top-level `baselines` package and
register into the same registry (`registry.py` imports them on first use).

Adding a method is one module (with its `register(Method(...))`) and its test; nothing else lists methods.
"""

from __future__ import annotations

import importlib
import pkgutil

from .registry import (
    METHODS,
    NOT_IN_PAPER,
    PAPER_BASELINE,
    PAPER_METHOD,
    Method,
    get_method,
    label,
    list_methods,
    register,
    training_methods,
    unregister,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "METHODS",
    "NOT_IN_PAPER",
    "PAPER_BASELINE",
    "PAPER_METHOD",
    "Method",
    "get_method",
    "label",
    "list_methods",
    "register",
    "training_methods",
    "unregister",
]
