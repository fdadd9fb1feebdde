"""Per-group metrics and the worst group (fedpath.evaluation.groups)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpath.evaluation.groups import per_group_metrics, worst_group
from fedpath.evaluation.metrics import (
    classification_metrics,
)
from tests.evaluation.metric_cases import random_case


def test_per_group_metrics_and_worst_group() -> None:
    rng = np.random.default_rng(3)
    y, probs = random_case(rng, 3, ties=False, n=60)
    groups = np.array([10, 2, 7] * 20)
    result = per_group_metrics(y, probs, groups)
    assert list(result) == ["10", "2", "7"]  # sorted by name (string order)
    for name in result:
        mask = groups == int(name)
        assert result[name] == classification_metrics(y[mask], probs[mask])
    # string and integer group ids with the same str() are the same group
    mixed = np.array(["10", 2, 7] * 20, dtype=object)
    assert per_group_metrics(y, probs, mixed) == result

    name, value = worst_group(result, "accuracy")
    accuracies = {g: m["accuracy"] for g, m in result.items()}
    assert value == min(accuracies.values())
    assert accuracies[name] == value


def test_worst_group_ignores_nan_and_rejects_bad_input() -> None:
    per_group = {
        "a": {"auroc": math.nan, "accuracy": 0.5},
        "b": {"auroc": 0.8, "accuracy": 0.9},
        "c": {"auroc": 0.7, "accuracy": 0.4},
    }
    assert worst_group(per_group, "auroc") == ("c", 0.7)
    assert worst_group(per_group, "accuracy") == ("c", 0.4)
    with pytest.raises(ValueError, match="NaN for every group"):
        worst_group({"a": {"auroc": math.nan}}, "auroc")
    with pytest.raises(ValueError, match="per_group is empty"):
        worst_group({}, "auroc")
    with pytest.raises(ValueError, match="'f2' missing for group 'a'"):
        worst_group(per_group, "f2")


def test_per_group_single_class_group_has_nan_auroc() -> None:
    y = np.array([0, 1, 1, 1])
    probs = np.array([[0.6, 0.4], [0.3, 0.7], [0.4, 0.6], [0.8, 0.2]])
    result = per_group_metrics(y, probs, np.array(["x", "x", "y", "y"]))
    assert result["x"]["auroc"] == 1.0
    assert math.isnan(result["y"]["auroc"])
    assert worst_group(result, "auroc") == ("x", 1.0)
