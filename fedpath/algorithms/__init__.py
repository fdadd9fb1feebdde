"""Federated algorithms, one per file, each a client half plus a server half."""

from fedpath.algorithms import (  # noqa: F401  (registration)
    desa,
    dp_fedavg,
    fedalign,
    fedavg,
    fedavg_mil,
    fedbn,
    fedccrl,
    feddgm,
    fedhd,
    fedhe,
    fedprox,
    fedstain,
    histofs,
    local_mil,
    pooled_mil,
    strap,
)
from fedpath.algorithms.base import ALGORITHMS, AlgorithmSpec

__all__ = ["ALGORITHMS", "AlgorithmSpec"]
from fedpath.algorithms import (  # noqa: F401  (registration: self-supervised)
    central,
    elcfs,
    fedad,
    fedavg_ssl,
    feddis,
    fedprox_ssl,
    moon,
)
