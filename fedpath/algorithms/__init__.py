"""Federated algorithms, one per file, each a client half plus a server half.

Every module of this package is imported here, found with pkgutil rather than
listed, so an algorithm's file registers it (``register_algorithm``) without
an import to add anywhere: adding an algorithm is its module and its test.
"""

import importlib
import pkgutil

from fedpath.algorithms.base import ALGORITHMS, AlgorithmSpec

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["ALGORITHMS", "AlgorithmSpec"]
