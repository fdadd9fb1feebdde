"""Which clients take part in a round: :mod:`fedpath.runtime.sampling`."""

from __future__ import annotations

import pytest

from fedpath.config_sections import TrainConfig
from fedpath.errors import ConfigError
from fedpath.runtime.sampling import clients_per_round, sample_clients

IDS = ["a/c0", "a/c1", "b/c0", "b/c1"]


def test_every_client_by_default_in_roster_order() -> None:
    assert sample_clients(TrainConfig(), IDS, 0, 1) == IDS


def test_a_seeded_sample_per_round() -> None:
    t = TrainConfig(clients_per_round=2)
    picks = [tuple(sample_clients(t, IDS, 0, r)) for r in range(1, 8)]
    assert all(len(set(p)) == 2 and list(p) == sorted(p) for p in picks)
    assert len(set(picks)) > 1  # different clients in different rounds
    assert picks == [tuple(sample_clients(t, IDS, 0, r)) for r in range(1, 8)]
    others = [tuple(sample_clients(t, IDS, 1, r)) for r in range(1, 8)]
    assert others != picks  # the seed decides


def test_the_fraction_rounds_and_takes_at_least_one() -> None:
    assert clients_per_round(TrainConfig(client_fraction=0.5), 4) == 2
    assert clients_per_round(TrainConfig(client_fraction=0.1), 4) == 1
    assert clients_per_round(TrainConfig(clients_per_round=3), 4) == 3
    assert len(sample_clients(TrainConfig(client_fraction=0.5), IDS, 0, 1)) == 2


def test_impossible_rounds_name_the_key() -> None:
    with pytest.raises(ConfigError, match="train.clients_per_round"):
        sample_clients(TrainConfig(clients_per_round=5), IDS, 0, 1)
    with pytest.raises(ConfigError, match="train.min_replies"):
        sample_clients(TrainConfig(clients_per_round=2, min_replies=3), IDS, 0, 1)
