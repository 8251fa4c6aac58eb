"""FCPTS's methods: one module each, registering itself, every one imported here (the baselines register from the
top-level `baselines` package). Adding a method is one module and its test; nothing else lists methods."""

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
