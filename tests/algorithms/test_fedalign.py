"""FedAlign (fedpath.algorithms.fedalign): selective transfer (cluster shares,
variance-weighted draws), chained views and the feature-MSE term by hand.

The full loss formula, shared with FedCCRL, is in ``test_fedccrl.py``.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from fedpath.algorithms.fedalign import FedAlignClient, selective_transfer
from fedpath.algorithms.names import POOL
from fedpath.algorithms.views import forward_views
from fedpath.config import load_config
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import halves
from tests.conftest import tiny_overrides


def test_draws_within_a_cluster_follow_the_entries_variance() -> None:
    rng = np.random.default_rng(0)
    flat = np.full((30, 3, 2), 0.4)  # zero variance across the 6 statistics
    varied = rng.uniform(0, 1, (30, 3, 2))
    stats = np.concatenate([flat, varied])
    for seed in range(3):
        keep = selective_transfer(stats, 1, 0.25, np.random.default_rng(seed))
        assert len(keep) == round(0.25 * 60)  # one cluster: the whole share
        assert list(keep) == sorted(set(keep))
        assert bool((keep >= 30).all())  # never a zero-variance entry


def test_every_cluster_gets_at_least_one_entry() -> None:
    rng = np.random.default_rng(1)
    centres = (0.0, 5.0, 10.0)
    sizes = (50, 45, 5)
    stats = np.concatenate(
        [rng.normal(c, 0.1, (n, 3, 2)) for c, n in zip(centres, sizes, strict=True)]
    )
    keep = selective_transfer(stats, 3, 0.02, np.random.default_rng(0))
    # round(0.02 * 100) = 2 in total, but each of the 3 clusters still gets one
    assert len(keep) == 3
    bounds = np.cumsum((0, *sizes))
    assert [
        int(((keep >= a) & (keep < b)).sum()) for a, b in itertools.pairwise(bounds)
    ] == [
        1,
        1,
        1,
    ]


def fedalign_client(tmp_path: Path) -> FedAlignClient:
    over = ["algorithm.name=fedalign", "algorithm.params.augmix=geometric"]
    client = halves(load_config(None, tiny_overrides(tmp_path, *over))).client()
    assert isinstance(client, FedAlignClient)
    return client


def test_mixstyle_draws_from_a_selection_of_the_received_pool(
    tmp_path: Path,
) -> None:
    client = fedalign_client(tmp_path)
    rng = np.random.default_rng(2)
    pool = rng.uniform(0.1, 0.9, (40, 3, 2)).astype(np.float32)
    client.begin(
        client.ctx.build_model(), Payload({POOL: {"mean_std": pool}}), ClientState()
    )
    chosen = client.ms_pool.stats.numpy()
    assert 0 < len(chosen) < len(pool)
    rows = {r.tobytes() for r in pool}
    assert all(r.tobytes() in rows for r in chosen)
    assert len({r.tobytes() for r in chosen}) == len(chosen)


def test_views_are_chained_and_the_mse_term_is_their_feature_distance(
    tmp_path: Path,
) -> None:
    client = fedalign_client(tmp_path)
    model = client.ctx.build_model().eval()  # the same features in both passes
    client.begin(model, Payload(), ClientState())
    data = client.ctx.data
    x = data.load(np.arange(6)).float() / 255
    y = torch.from_numpy(data.labels[:6]).long()
    client.generator.manual_seed(3)
    x0, v1, v2 = client.views(x)
    client.generator.manual_seed(3)
    w1 = client.augment(x)
    assert x0 is x
    torch.testing.assert_close(v1, w1)
    torch.testing.assert_close(v2, client.augment(w1))  # v2 = AugMix(MixStyle(v1))
    client.generator.manual_seed(3)
    out = client.loss(model, x, y)
    with torch.no_grad():
        zs = forward_views(model, [x0, v1, v2]).zs
    mse = 0.5 * (F.mse_loss(zs[1], zs[0]) + F.mse_loss(zs[2], zs[0]))
    torch.testing.assert_close(out["mse"], mse)
    assert float(out["mse"]) > 0


def test_selective_transfer_is_cluster_proportional() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(0, 0.01, (90, 3, 2))
    b = rng.normal(5, 0.01, (10, 3, 2))
    stats = np.concatenate([a, b])
    keep = selective_transfer(stats, 2, 0.5, np.random.default_rng(1))
    assert len(set(keep)) == len(keep)
    in_b = np.sum(keep >= 90)
    assert 3 <= in_b <= 7 and 40 <= np.sum(keep < 90) <= 50  # ~45 / ~5 of 50
    # one entry still works (k clipped to the pool size)
    assert list(selective_transfer(stats[:1], 7, 0.5, np.random.default_rng(0))) == [0]
