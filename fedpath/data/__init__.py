"""Datasets: one registered dataset per file; domains are hospitals or scanners."""

from fedpath.data import bags, camelyon17, manifest, synthetic  # noqa: F401  (registration)
from fedpath.data.base import DATASETS, DomainDataset, Split

__all__ = ["DATASETS", "DomainDataset", "Split"]
