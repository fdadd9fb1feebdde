"""Lazy package exports: a name is imported from its module on first use.

``fedpath.mil`` and ``fedpath.ssl`` export their building blocks this way, so
importing one of their light modules (the command-line parts) does not load
PyTorch through the package's ``__init__``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__``: ``name`` from ``package.<exports[name]>``."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(import_module(f"{package}.{exports[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
