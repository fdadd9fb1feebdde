"""DP-FedAvg: clipped client updates, equal-weight mean plus Gaussian noise of
std z * C / m, client-level epsilon from Opacus's RDP accountant, and BatchNorm
statistics refused unless frozen."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("opacus")

from fedpath.algorithms.dp_fedavg import clip_update, epsilon
from fedpath.config import ConfigError
from fedpath.types import ArrayDict
from fedpath.utils.io import read_jsonl
from tests.fixtures import make_run, spy_calls
from tests.runtime.conftest import global_weights

GROUP = ["algorithm.name=dp_fedavg", "model.params.norm=group", "train.rounds=1"]


def test_clip_update_scales_to_the_clip_norm() -> None:
    old: ArrayDict = {"w": np.zeros(4, np.float32), "n": np.array(3, np.int64)}
    new: ArrayDict = {
        "w": np.array([3.0, 4.0, 0.0, 0.0], np.float32),
        "n": np.array(5, np.int64),
    }
    out, norm = clip_update(new, old, 1.0)
    assert norm == pytest.approx(5.0)
    np.testing.assert_allclose(out["w"], [0.6, 0.8, 0, 0], rtol=1e-6)
    assert out["n"] == 5 and out["w"].dtype == np.float32  # integers as sent
    same, _ = clip_update(new, old, 10.0)  # inside the ball: unchanged
    np.testing.assert_allclose(same["w"], new["w"])


def test_epsilon_is_opacus_rdp_and_grows_with_rounds() -> None:
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    for _ in range(5):
        acc.step(noise_multiplier=1.1, sample_rate=0.5)
    assert epsilon(1.1, 0.5, 5, 1e-5) == pytest.approx(acc.get_epsilon(1e-5))
    assert epsilon(1.1, 0.5, 10, 1e-5) > epsilon(1.1, 0.5, 5, 1e-5)
    assert epsilon(2.0, 0.5, 5, 1e-5) < epsilon(1.1, 0.5, 5, 1e-5)
    assert math.isinf(epsilon(0.0, 0.5, 5, 1e-5))


def test_server_mean_is_equal_weighted_and_noised_by_z_c_over_m(tmp_path: Path) -> None:
    # no noise, no clipping: exactly the equal-weight mean of the uploads
    run = make_run(tmp_path / "a", *GROUP, "algorithm.params.noise_multiplier=0",
                   "algorithm.params.clip=1e9")  # fmt: skip
    calls = spy_calls(run)
    old = dict(global_weights(run))
    run.run()
    ups = [reply.arrays["weights"] for _, s, _, _, reply in calls if s == "fit"]
    new = global_weights(run)
    for k, v in old.items():
        if v.dtype.kind == "f":
            mean = np.mean([u[k].astype(np.float64) for u in ups], axis=0)
            np.testing.assert_allclose(new[k], mean, rtol=1e-5, atol=1e-6)
    # noise: the global model minus the mean of the clipped uploads has std z*C/m
    z, c = 2.0, 0.05
    run = make_run(tmp_path / "b", *GROUP, f"algorithm.params.noise_multiplier={z}",
                   f"algorithm.params.clip={c}")  # fmt: skip
    calls = spy_calls(run)
    run.run()
    ups = [reply.arrays["weights"] for _, s, _, _, reply in calls if s == "fit"]
    sent = next(m.arrays["weights"] for _, s, _, m, _ in calls if s == "fit")
    for u in ups:  # every upload inside the clip ball
        _, norm = clip_update(u, sent, c)
        assert norm <= c * (1 + 1e-4)
    new = global_weights(run)
    resid = np.concatenate(
        [
            (new[k] - np.mean([u[k] for u in ups], axis=0)).ravel()
            for k, v in sent.items()
            if v.dtype.kind == "f"
        ]
    )
    assert resid.std() == pytest.approx(z * c / len(ups), rel=0.05)
    rows = list(read_jsonl(tmp_path / "b" / "run" / "results.jsonl"))
    rnd = next(r for r in rows if r["kind"] == "round")
    q = len(ups) / len(run.clients)
    assert rnd["fit/epsilon"] == pytest.approx(epsilon(z, q, 1, 1e-5))
    assert rnd["fit/noise_std"] == pytest.approx(z * c / len(ups))


def test_batchnorm_statistics_must_be_frozen(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'train.bn': 'train', but dp_fedavg"):
        make_run(tmp_path / "a", "algorithm.name=dp_fedavg", "train.rounds=1")
    run = make_run(tmp_path / "b", "algorithm.name=dp_fedavg", "train.rounds=1",
                   "train.bn=frozen")  # fmt: skip
    run.run()  # frozen statistics are not data-dependent: allowed


@pytest.mark.usefixtures("task_identity")
def test_over_flower_equals_in_process(tmp_path: Path) -> None:
    pytest.importorskip("flwr")
    from tests.flower_helpers import (
        assert_same_run,
        config,
        in_process,
        nodes_for,
        run_over_grid,
    )

    extra = ["algorithm.name=dp_fedavg", "model.params.norm=group"]
    cfg = config(tmp_path / "flower", *extra)
    run_over_grid(cfg, nodes_for("hospital_0/c0", "hospital_1/c0"))
    assert_same_run(cfg, in_process(tmp_path, *extra))  # the same noise, bit for bit
