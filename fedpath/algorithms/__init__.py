"""Federated algorithms, one per file, each a client half plus a server half."""

from fedpath.algorithms import (  # noqa: F401  (registration)
    fedalign,
    fedavg,
    fedbn,
    fedccrl,
    fedprox,
    fedstain,
    strap,
)
from fedpath.algorithms.base import ALGORITHMS, AlgorithmSpec

__all__ = ["ALGORITHMS", "AlgorithmSpec"]
