"""The methods: one module each, registering itself; every module of this package is imported here.

Adding a method is one module (with its `register(Method(...))`) and its test; nothing else lists methods.
"""

from __future__ import annotations

import importlib
import pkgutil

from .registry import METHODS, Method, get_method, label, register, training_methods

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["METHODS", "Method", "get_method", "label", "register", "training_methods"]
