"""dp_fedavg's clip, noise std and accountants against Flower's central-DP math."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("opacus")

from flwr.supercore import differential_privacy as flwr_dp
from flwr.supercore.privacy_accounting import rdp_accountant

import fedpath.algorithms.dp_fedavg as dp
from fedpath.config import ConfigError
from fedpath.runtime.flower import central_dp
from fedpath.utils.io import read_jsonl
from tests.runtime.flower.conftest import DP


def _random_model(seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    shapes = [(16, 3, 3, 3), (16,), (2, 64), (2,)]
    old = [rng.normal(0, 0.1, s).astype(np.float32) for s in shapes]
    new = [o + rng.normal(0, 0.05, o.shape).astype(np.float32) for o in old]
    return new, old


# ------------------------------------------------------------------ the math


@pytest.mark.parametrize("clip", [0.01, 0.3, 100.0])
def test_clip_update_is_flowers_compute_clip_model_update_bit_for_bit(
    clip: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    new, old = _random_model(0)
    names = ["conv.weight", "conv.bias", "fc.weight", "fc.bias"]
    ref = list(new)
    flwr_dp.compute_clip_model_update(ref, old, clip)
    out, norm = dp.clip_update(
        dict(zip(names, new, strict=True)), dict(zip(names, old, strict=True)), clip
    )
    for k, r in zip(names, ref, strict=True):
        assert out[k].dtype == r.dtype and np.array_equal(out[k], r), k
    assert norm == pytest.approx(
        flwr_dp.get_norm([n - o for n, o in zip(new, old, strict=True)])
    )
    # without Flower: the same operations, the same bits
    monkeypatch.setitem(sys.modules, "flwr.supercore.differential_privacy", None)
    again, _ = dp.clip_update(
        dict(zip(names, new, strict=True)), dict(zip(names, old, strict=True)), clip
    )
    assert all(np.array_equal(again[k], out[k]) for k in names)
    assert dp.noise_std(1.3, clip, 3) == flwr_dp.compute_stdv(1.3, clip, 3)


def test_noise_std_is_flowers_compute_stdv() -> None:
    for z, c, m in [(1.0, 1.0, 3), (0.7, 0.05, 6), (0.0, 2.0, 1)]:
        assert dp.noise_std(z, c, m) == flwr_dp.compute_stdv(z, c, m)


def test_zero_update_passes_unchanged() -> None:
    old = {"w": np.ones(3, np.float32)}
    out, norm = dp.clip_update(dict(old), old, 1.0)  # Flower's clip divides by 0
    assert norm == 0.0 and np.array_equal(out["w"], old["w"])


def test_the_node_marker_is_the_client_halfs() -> None:
    assert central_dp.NODE_CLIPS == dp.NODE_CLIPS


# --------------------------------------------------------------- accountants


class _GaussianEvent:
    def __init__(self, sigma: float) -> None:
        self.sigma = sigma


class _StubRdp:
    """dp-accounting's ``RdpAccountant`` for plain Gaussian events, through
    Opacus's RDP formulas: checks what fedpath hands Flower's accountant."""

    events: ClassVar[list[tuple[float, int]]] = []

    def __init__(self, orders: Any = None, neighboring_relation: Any = None) -> None:
        from opacus.accountants import RDPAccountant

        self.orders = orders or RDPAccountant.DEFAULT_ALPHAS
        self.history: list[tuple[float, float, int]] = []

    def supports(self, event: Any) -> bool:
        return isinstance(event, _GaussianEvent)

    def compose(self, event: _GaussianEvent, count: int) -> None:
        _StubRdp.events.append((event.sigma, count))
        self.history.append((event.sigma, 1.0, count))

    def get_epsilon(self, delta: float) -> float:
        from opacus.accountants import RDPAccountant

        acc = RDPAccountant()
        acc.history = list(self.history)
        return float(acc.get_epsilon(delta, alphas=list(self.orders)))


@pytest.fixture
def stub_dp_accounting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    backend = (
        types.SimpleNamespace(GaussianDpEvent=_GaussianEvent),
        types.SimpleNamespace(
            NeighboringRelation=types.SimpleNamespace(ADD_OR_REMOVE_ONE="add/remove")
        ),
        types.SimpleNamespace(RdpAccountant=_StubRdp),
    )
    monkeypatch.setattr(rdp_accountant, "_load_dp_accounting", lambda: backend)
    _StubRdp.events = []
    return _StubRdp.events


def test_flower_accountant_gets_the_gaussian_without_amplification(
    stub_dp_accounting: list[tuple[float, int]],
) -> None:
    eps = dp.epsilon_flower(1.0, 3, 3, 10, 1e-5)
    assert stub_dp_accounting == [(1.0, 10)]  # z, rounds; no sampling event
    assert eps == pytest.approx(dp.epsilon(1.0, 1.0, 10, 1e-5), rel=1e-12)
    # sampling 2 of 4 is not amplified: Opacus's Poisson bound is smaller
    assert dp.epsilon_flower(1.0, 2, 4, 10, 1e-5) == pytest.approx(eps)
    assert dp.epsilon(1.0, 0.5, 10, 1e-5) < eps
    assert math.isinf(dp.epsilon_flower(0.0, 3, 3, 10, 1e-5))


def test_a_run_can_account_with_flowers_accountant(
    tmp_path: Path, stub_dp_accounting: list[tuple[float, int]]
) -> None:
    from tests.fixtures import make_run

    run = make_run(
        tmp_path, *DP, "train.rounds=1", "algorithm.params.accountant=flower"
    )
    run.run()
    rnd = next(r for r in read_jsonl(tmp_path / "run" / "results.jsonl")
               if r["kind"] == "round")  # fmt: skip
    n = len(run.clients)
    assert rnd["fit/epsilon"] == pytest.approx(dp.epsilon_flower(1.0, n, n, 1, 1e-5))


def test_flower_accountant_without_its_backend_is_a_config_error(
    tmp_path: Path,
) -> None:
    try:
        import dp_accounting  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("dp-accounting is installed")
    from tests.fixtures import make_run

    with pytest.raises(ConfigError, match=r"'algorithm.params.accountant': 'flower'"):
        make_run(tmp_path, *DP, "algorithm.params.accountant=flower")


@pytest.mark.parametrize(
    ("z", "sampled", "population", "rounds"),
    [(1.0, 3, 3, 10), (0.5, 6, 6, 6), (2.0, 4, 4, 50)],
)
def test_flower_and_opacus_accountants_agree_at_full_participation(
    z: float, sampled: int, population: int, rounds: int
) -> None:
    pytest.importorskip("dp_accounting")
    flwr_eps = dp.epsilon_flower(z, sampled, population, rounds, 1e-5)
    assert flwr_eps == pytest.approx(dp.epsilon(z, 1.0, rounds, 1e-5), rel=1e-3)
