"""Temperature scaling and operating points, checked against their formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import log_softmax, softmax

from fedpath.evaluation.calibration import (
    T_MAX,
    T_MIN,
    apply_temperature,
    fit_temperature,
    nll,
    threshold_for_sensitivity,
    threshold_metrics,
)


def logits_with_temperature(
    n: int, classes: int, true_t: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Logits z and labels drawn from softmax(z / true_t): the model's
    probabilities softmax(z) are miscalibrated by exactly true_t."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 3, (n, classes))
    p_true = softmax(z / true_t, axis=1)
    y = np.array([rng.choice(classes, p=row) for row in p_true])
    return z, y


def test_temperature_one_is_the_identity() -> None:
    z, _ = logits_with_temperature(50, 3, 1.0, 0)
    p = softmax(z, axis=1)
    assert np.array_equal(apply_temperature(p, 1.0), p)  # bit for bit
    # and the formula itself is the identity at T = 1 (up to rounding)
    np.testing.assert_allclose(apply_temperature(p, 1.0 + 1e-15), p, atol=1e-12)


@pytest.mark.parametrize("t", [0.3, 2.5])
def test_scaling_probabilities_equals_scaling_logits(t: float) -> None:
    z, _ = logits_with_temperature(40, 4, 1.0, 1)
    p = softmax(z, axis=1)
    np.testing.assert_allclose(apply_temperature(p, t), softmax(z / t, axis=1))
    # a temperature never changes the argmax
    assert np.array_equal(apply_temperature(p, t).argmax(1), p.argmax(1))


@pytest.mark.parametrize("true_t", [0.5, 2.0])
def test_fit_recovers_the_temperature_and_lowers_the_nll(true_t: float) -> None:
    z, y = logits_with_temperature(4000, 3, true_t, 2)
    p = softmax(z, axis=1)
    t = fit_temperature(y, p)
    assert t == pytest.approx(true_t, rel=0.1)
    assert nll(y, apply_temperature(p, t)) < nll(y, p)


def test_fit_is_the_minimum_of_the_nll_over_a_grid() -> None:
    """Against an independent computation: scipy's log_softmax on a dense grid."""
    z, y = logits_with_temperature(300, 2, 1.7, 3)
    p = softmax(z, axis=1)
    grid = np.exp(np.linspace(math.log(T_MIN), math.log(T_MAX), 20001))
    losses = [-np.mean(log_softmax(z / g, axis=1)[np.arange(len(y)), y]) for g in grid]
    best = grid[int(np.argmin(losses))]
    assert fit_temperature(y, p) == pytest.approx(best, rel=1e-3)
    assert nll(y, apply_temperature(p, fit_temperature(y, p))) <= min(losses) + 1e-9


def test_separable_data_hits_the_lower_bound() -> None:
    y = np.array([0, 1, 0, 1])
    p = np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4], [0.1, 0.9]])
    assert fit_temperature(y, p) == pytest.approx(T_MIN)


def test_nll_by_hand_and_bad_temperatures() -> None:
    p = np.array([[0.5, 0.5], [0.2, 0.8]])
    assert nll(np.array([0, 1]), p) == pytest.approx(
        -(math.log(0.5) + math.log(0.8)) / 2
    )
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="temperature"):
            apply_temperature(p, bad)


def test_threshold_meets_the_sensitivity_with_the_highest_specificity() -> None:
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 500)
    scores = np.clip(rng.normal(0.35 + 0.3 * y, 0.2), 0, 1)
    for target in (0.5, 0.8, 0.9, 0.95, 1.0):
        t = threshold_for_sensitivity(y, scores, target)
        sens = np.mean(scores[y == 1] >= t)
        assert sens >= target
        # the next larger score of a positive would miss the target
        higher = scores[(y == 1) & (scores > t)]
        if higher.size:
            assert np.mean(scores[y == 1] >= higher.min()) < target


def test_threshold_by_hand() -> None:
    y = np.array([1, 1, 1, 1, 0, 0])
    s = np.array([0.9, 0.8, 0.4, 0.3, 0.5, 0.1])
    assert threshold_for_sensitivity(y, s, 0.5) == 0.8  # 2 of 4 positives
    assert threshold_for_sensitivity(y, s, 0.75) == 0.4  # 3 of 4
    assert threshold_for_sensitivity(y, s, 0.76) == 0.3  # 4 of 4
    m = threshold_metrics(y, np.stack([1 - s, s], axis=1), 0.4)
    assert (m["sensitivity"], m["specificity"]) == (0.75, 0.5)
    assert m["threshold"] == 0.4 and m["n"] == 6
    assert m["recall"] == m["sensitivity"]
    # 0.9 * 10 positives must need 9 of them, not 10 (float noise in 0.9 * 10)
    ten = np.arange(10) / 10
    assert threshold_for_sensitivity(np.ones(10, int), ten, 0.9) == 0.1


def test_threshold_needs_positives_and_binary_labels() -> None:
    with pytest.raises(ValueError, match="positive"):
        threshold_for_sensitivity(np.zeros(3, int), np.ones(3), 0.9)
    with pytest.raises(ValueError, match="binary"):
        threshold_for_sensitivity(np.array([0, 2]), np.ones(2), 0.9)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        threshold_for_sensitivity(np.array([0, 1]), np.ones(2), 0.0)
    with pytest.raises(ValueError, match="two classes"):
        threshold_metrics(np.array([0, 1, 2]), np.eye(3), 0.5)
