"""ATSA (FedAD Eq. 5-6): hand-computed values, the relative and literal scales on a
CPU-scale Delta trace, state round trip, bad bounds."""

from __future__ import annotations

import itertools
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
    atsa = ATSA(lambda_min=0.1, lambda_max=1.0, alpha=0.8, k=20.0, scale="literal")
    assert atsa.value == 0.1  # Algorithm 1, line 3: lambda_0 = lambda_min
    # target(0.2) = 0.1 + 0.9 * e^-4 = 0.116484075...; 0.8 * 0.1 + 0.2 * target
    assert atsa.step(0.2) == pytest.approx(0.08 + 0.2 * 0.1164840750, abs=1e-9)
    lam1 = atsa.value
    # Delta = 0: target = lambda_max = 1.0
    assert atsa.step(0.0) == pytest.approx(0.8 * lam1 + 0.2 * 1.0, abs=1e-12)
    for _ in range(200):
        atsa.step(0.0)
    assert atsa.value == pytest.approx(1.0, abs=1e-9)
    high = ATSA(0.1, 1.0, 0.0, 20.0, scale="literal")
    assert high.step(10.0) == pytest.approx(0.1, abs=1e-9)  # unstable -> lambda_min


def test_relative_scale_eq6_by_hand() -> None:
    """D_t = anchor * Delta_t / (Delta_ref,t + eps), Delta_ref the mean of the first
    ``warmup`` Deltas (the running mean while fewer have been seen)."""
    eps = 1e-8
    atsa = ATSA(0.1, 1.0, 0.8, 20.0, eps, scale="relative", warmup=2, anchor=0.2)
    lam = 0.1
    for delta, ref in ((0.01, 0.01), (0.006, 0.008), (0.002, 0.008), (0.016, 0.008)):
        want_norm = 0.2 * delta / (ref + eps)
        want_target = 0.1 + 0.9 * math.exp(-20.0 * want_norm)
        lam = 0.8 * lam + 0.2 * want_target
        assert atsa.step(delta) == pytest.approx(lam, abs=1e-12)
        assert atsa.reference == pytest.approx(ref, rel=1e-12)
        assert atsa.last_norm == pytest.approx(want_norm, rel=1e-12)
        assert atsa.last_target == pytest.approx(want_target, rel=1e-12)
        assert atsa.last_delta == delta
    # the first round's D is the anchor itself (up to eps), whatever Delta's scale
    for first in (1e-4, 0.03, 5.0):
        one = ATSA(scale="relative", anchor=0.2)
        one.step(first)
        assert one.last_norm == pytest.approx(0.2 * first / (first + eps), rel=1e-12)
        assert one.last_norm == pytest.approx(0.2, rel=1e-3)


def test_relative_equals_literal_at_the_papers_scale() -> None:
    """Where Delta_ref = anchor (Delta ~ 0.2 at the start, the paper's Figure 9) the
    two scales feed Eq. 6 the same D and give the same lambdas."""
    trace = [0.2, 0.2, 0.2, 0.15, 0.1, 0.05, 0.02, 0.3, 0.05]
    rel = ATSA(scale="relative", warmup=3, anchor=0.2)
    lit = ATSA(scale="literal")
    for d in trace:
        assert rel.step(d) == pytest.approx(lit.step(d), rel=1e-6)


#: a CPU-scale Delta trace: 0.01 settling to 0.004, a spike to 0.03, settling again
CPU_TRACE = [0.010, 0.009, 0.008, 0.007, 0.006, 0.005, 0.004, 0.004]
SPIKE = len(CPU_TRACE)
CPU_TRACE += [0.030, 0.012, 0.006, 0.004, 0.004]


def lambdas(atsa: ATSA, trace: list[float]) -> tuple[list[float], list[float]]:
    """lambda before the first step, then after each; and Eq. 6's target per step."""
    lam, targets = [atsa.value], []
    for d in trace:
        lam.append(atsa.step(d))
        targets.append(atsa.last_target)
    return lam, targets


def test_relative_scale_responds_to_instability_at_cpu_scale() -> None:
    lam, target = lambdas(ATSA(scale="relative"), CPU_TRACE)
    # settling phase: every step raises lambda (the target is above it)
    settling = lam[: SPIKE + 1]
    assert all(b > a for a, b in itertools.pairwise(settling))
    # the spike (3x the warm-up mean) is the paper's unstable phase: the target
    # falls to lambda_min and lambda drops
    assert target[SPIKE] == pytest.approx(0.1, abs=1e-3)
    assert target[SPIKE] < target[SPIKE - 1]
    assert lam[SPIKE + 1] < lam[SPIKE]
    # once Delta settles again lambda rises again
    assert lam[-1] > lam[-2] > lam[-3]


def test_literal_scale_does_not_see_instability_at_cpu_scale() -> None:
    """The paper's constants read Delta <= 0.03 as "stable": lambda ramps from the
    first (most unstable) round, and the spike never brings the target near
    lambda_min, so the unstable phase does not occur."""
    lam, target = lambdas(ATSA(scale="literal"), CPU_TRACE)
    mid = (0.1 + 1.0) / 2
    assert min(target) > mid  # every target, the spike's included
    assert lam[SPIKE] > mid  # lambda is past half-way before the spike
    relative, rel_target = lambdas(ATSA(scale="relative"), CPU_TRACE)
    assert target[SPIKE] - 0.1 > 5 * (rel_target[SPIKE] - 0.1)
    assert relative[SPIKE] < mid  # the relative scale holds lambda low meanwhile


def test_state_round_trip() -> None:
    a = ATSA()
    a.step(0.05)
    a.step(0.01)
    b = ATSA()
    b.load_state(a.state())
    assert (b.value, b.steps, b.last_delta) == (a.value, a.steps, a.last_delta)
    assert (b.ref_sum, b.ref_count) == (a.ref_sum, a.ref_count)
    assert b.step(0.02) == a.step(0.02)
    # a checkpoint from before the reference existed: re-estimated from now on
    old = {k: v for k, v in a.state().items() if not k.startswith("atsa_ref")}
    c = ATSA()
    c.load_state(old)
    assert c.ref_count == 0 and c.value == a.value
    c.step(0.03)
    assert c.reference == pytest.approx(0.03)


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


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("algorithm.params.atsa_scale=absolute", "atsa_scale"),
        ("algorithm.params.atsa_warmup=0", "atsa_warmup"),
        ("algorithm.params.atsa_anchor=0.0", "atsa_anchor"),
    ],
)
def test_bad_scale_options_name_the_key(
    tmp_path: Path, override: str, key: str
) -> None:
    with pytest.raises(ConfigError, match=rf"algorithm\.params\.{key}"):
        ssl_cfg(tmp_path, "fedad", override)
    kwargs = {"atsa_scale": "scale", "atsa_warmup": "warmup", "atsa_anchor": "anchor"}
    bad = {"scale": "absolute", "warmup": 0, "anchor": 0.0}[kwargs[key]]
    with pytest.raises(ConfigError, match=rf"algorithm\.params\.{key}"):
        ATSA(**{kwargs[key]: bad})  # type: ignore[arg-type]
