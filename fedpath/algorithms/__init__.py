"""Federated algorithms, one per file, each a client half plus a server half."""

from fedpath.algorithms import fedavg, fedbn, fedprox  # noqa: F401  (registration)
from fedpath.algorithms.base import ALGORITHMS, AlgorithmSpec

__all__ = ["ALGORITHMS", "AlgorithmSpec"]
