"""ATSA (FedAD Eq. 5-6): hand-computed values, state round trip, bad bounds."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fedpath.config import ConfigError
from fedpath.ssl.atsa import ATSA, instability
from tests.ssl_helpers import ssl_cfg


def test_instability_eq5_by_hand() -> None:
    old = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]]), "skip": np.ones(3)}
    new = {"a": np.array([3.0, 1.0]), "b": np.array([[6.0]]), "skip": np.zeros(3)}
    # ||(0, 1, 2)|| / (||(3, 0, 4)|| + eps) = sqrt(5) / 5
    got = instability(new, old, ["a", "b"], eps=1e-8)
    assert got == pytest.approx(math.sqrt(5) / (5 + 1e-8), rel=1e-12)


def test_lambda_eq6_by_hand() -> None:
    atsa = ATSA(lambda_min=0.1, lambda_max=1.0, alpha=0.8, k=20.0)
    assert atsa.value == 0.1  # Algorithm 1, line 3: lambda_0 = lambda_min
    # target(0.2) = 0.1 + 0.9 * e^-4 = 0.116484075...; 0.8 * 0.1 + 0.2 * target
    assert atsa.step(0.2) == pytest.approx(0.08 + 0.2 * 0.1164840750, abs=1e-9)
    lam1 = atsa.value
    # Delta = 0: target = lambda_max = 1.0
    assert atsa.step(0.0) == pytest.approx(0.8 * lam1 + 0.2 * 1.0, abs=1e-12)
    for _ in range(200):
        atsa.step(0.0)
    assert atsa.value == pytest.approx(1.0, abs=1e-9)
    high = ATSA(0.1, 1.0, 0.0, 20.0)
    assert high.step(10.0) == pytest.approx(0.1, abs=1e-9)  # unstable -> lambda_min


def test_state_round_trip() -> None:
    a = ATSA()
    a.step(0.05)
    a.step(0.01)
    b = ATSA()
    b.load_state(a.state())
    assert (b.value, b.steps, b.last_delta) == (a.value, a.steps, a.last_delta)
    assert b.step(0.02) == a.step(0.02)


def test_reversed_bounds_name_the_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lambda_min.*lambda_max"):
        ATSA(lambda_min=0.9, lambda_max=0.1)
    with pytest.raises(ConfigError, match=r"algorithm\.params\.lambda_min"):
        ssl_cfg(
            tmp_path,
            "fedad",
            "algorithm.params.lambda_min=0.9",
            "algorithm.params.lambda_max=0.2",
        )
    with pytest.raises(ConfigError, match=r"algorithm\.params\.alpha"):
        ssl_cfg(tmp_path, "fedad", "algorithm.params.alpha=1.5")
    with pytest.raises(ValueError, match="instability"):
        ATSA().step(float("nan"))
