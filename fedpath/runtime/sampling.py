"""Which clients take part in a round (``train.clients_per_round``,
``train.client_fraction``).

One home for the count, so the run's sampling and SecAgg+'s check of the round
size (:mod:`fedpath.runtime.flower.transport`) agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from fedpath.algorithms.base import derive_seed
from fedpath.errors import ConfigError

if TYPE_CHECKING:
    from fedpath.config_sections import TrainConfig


def clients_per_round(train: TrainConfig, n: int) -> int:
    """How many of ``n`` clients a round samples (unchecked: may exceed ``n``)."""
    return train.clients_per_round or max(1, round(train.client_fraction * n))


def sample_clients(
    train: TrainConfig, ids: Sequence[str], seed: int, rnd: int
) -> list[str]:
    """The clients of round ``rnd``: all of ``ids`` or a seeded sample (sorted).

    Raises
    ------
    ConfigError
        When the round would sample more clients than the federation has, or
        needs more replies (``train.min_replies``) than it samples.
    """
    k = clients_per_round(train, len(ids))
    if k > len(ids):
        raise ConfigError(
            f"config key 'train.clients_per_round': {k} exceeds the {len(ids)} "
            f"clients of this federation"
        )
    if train.min_replies > k:
        raise ConfigError(
            f"config key 'train.min_replies': {train.min_replies}, but a round "
            f"samples {k} of this federation's {len(ids)} clients; at most {k}"
        )
    if k == len(ids):
        return list(ids)
    rng = np.random.default_rng(derive_seed(seed, rnd, "sample"))
    return sorted(rng.choice(list(ids), size=k, replace=False).tolist())
