"""Random (labels, probabilities) cases shared by the metric tests."""

from __future__ import annotations

import numpy as np


def random_case(
    rng: np.random.Generator, num_classes: int, ties: bool, n: int
) -> tuple[np.ndarray, np.ndarray]:
    y = rng.integers(0, num_classes, size=n)
    if ties:  # few distinct values -> many tied scores and tied argmaxes
        weights = rng.integers(1, 4, size=(n, num_classes)).astype(float)
    else:
        weights = rng.dirichlet(np.ones(num_classes), size=n) + 1e-3
    return y, weights / weights.sum(axis=1, keepdims=True)
