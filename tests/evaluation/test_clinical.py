"""Clinical rates and bootstrap intervals (fedpath.evaluation.clinical)."""

from __future__ import annotations

import numpy as np
import pytest

from fedpath.evaluation.clinical import bootstrap_ci, per_class_rates
from fedpath.evaluation.metrics import classification_metrics


def test_per_class_sensitivity_and_specificity_by_hand() -> None:
    cm = np.array([[5, 1, 0], [2, 3, 1], [0, 0, 4]])  # rows true, 16 images
    got = per_class_rates(cm, ["a", "b", "c"])
    # a: TP 5, FN 1, FP 2, TN 16-5-1-2 = 8; b: 3, 3, 1, 9; c: 4, 0, 1, 11
    assert got["a"] == {"n": 6, "sensitivity": 5 / 6, "specificity": 8 / 10}
    assert got["b"] == {"n": 6, "sensitivity": 3 / 6, "specificity": 9 / 10}
    assert got["c"] == {"n": 4, "sensitivity": 4 / 4, "specificity": 11 / 12}
    absent = per_class_rates(np.array([[3, 1], [0, 0]]), ["x", "y"])
    assert np.isnan(absent["y"]["sensitivity"]) and absent["y"]["n"] == 0
    assert absent["y"]["specificity"] == 3 / 4 and np.isnan(absent["x"]["specificity"])
    with pytest.raises(ValueError, match="does not fit 3 classes"):
        per_class_rates(np.eye(2), ["a", "b", "c"])


def test_bootstrap_matches_a_plain_resampling_loop() -> None:
    rng = np.random.default_rng(3)
    y = rng.integers(0, 3, 80)
    logits = rng.normal(size=(80, 3)) + 1.5 * np.eye(3)[y]
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    ci = bootstrap_ci(y, probs, resamples=300, seed=7)
    # the reference: the same draws, every metric recomputed from scratch
    idx = np.random.default_rng(7).integers(0, 80, size=(300, 80))
    ref = [classification_metrics(y[i], probs[i]) for i in idx]
    ba = np.percentile([m["balanced_accuracy"] for m in ref], [2.5, 97.5])
    au = [m["auroc"] for m in ref if np.isfinite(m["auroc"])]
    np.testing.assert_allclose(ci["balanced_accuracy"], ba, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ci["auroc"], np.percentile(au, [2.5, 97.5]), atol=1e-12)
    assert ci["auroc_resamples"] == len(au) == 300
    point = classification_metrics(y, probs)
    for k in ("balanced_accuracy", "auroc"):
        assert ci[k][0] <= point[k] <= ci[k][1], k
    assert bootstrap_ci(y, probs, resamples=300, seed=7) == ci
    assert bootstrap_ci(y, probs, resamples=300, seed=8) != ci
    # one class only: no AUROC in any resample
    one = bootstrap_ci(np.zeros(5, dtype=int), probs[:5], resamples=20)
    assert np.isnan(one["auroc"]).all() and one["auroc_resamples"] == 0
    with pytest.raises(ValueError, match="resamples must be an integer >= 1"):
        bootstrap_ci(y, probs, resamples=0)
