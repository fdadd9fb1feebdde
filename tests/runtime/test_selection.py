"""The selection rule of training-domain validation (the runs:
test_inprocess_selection)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from fedpath.runtime.selection import (
    Selected,
    ValidationPredictions,
    better,
    exported_decision,
    mean_defined,
    validation_reply,
)
from fedpath.types import Payload


def test_better_keeps_the_earlier_round_on_ties_and_never_picks_nan() -> None:
    best = Selected(2, 0.7, {"w": np.zeros(1)})
    assert better(0.5, None) and better(math.nan, None)  # the first round counts
    assert better(0.71, best)
    assert not better(0.7, best)  # a tie keeps the earlier round
    assert not better(0.69, best)
    assert not better(math.nan, best)
    assert better(0.1, Selected(1, math.nan, {}))


def test_mean_over_clients_skips_undefined_scores() -> None:
    assert mean_defined([0.5, math.nan, 0.7]) == 0.6
    assert math.isnan(mean_defined([math.nan]))


def test_exported_decision_follows_the_exported_weights() -> None:
    evaluation = {
        "calibrated": {"temperature": 1.5},
        "operating_point": {"threshold": 0.3, "target_sensitivity": 0.9},
        "selected": {"calibrated": {"temperature": 0.8}},
    }
    assert exported_decision(evaluation, "last") == {
        "temperature": 1.5,
        "threshold": 0.3,
        "target_sensitivity": 0.9,
    }
    assert exported_decision(evaluation, "selected") == {
        "temperature": 0.8,
        "threshold": None,
        "target_sensitivity": None,
    }
    assert exported_decision({"target": {}}, "last") == {}


def test_validation_predictions_pool_in_client_order_and_name_who_is_missing() -> None:
    a = (np.array([0, 1]), np.array([[0.9, 0.1], [0.2, 0.8]]))
    b = (np.array([1]), np.array([[0.4, 0.6]]))
    pooled = ValidationPredictions.pool(["a", "b", "c"], {"b": b, "a": a}, {"c": "x"})
    assert pooled.clients == ["a", "b"] and pooled.left_out == {"c": "x"}
    assert pooled.labels.tolist() == [0, 1, 1]
    assert np.array_equal(pooled.probs, np.concatenate([a[1], b[1]]))
    empty = ValidationPredictions.pool(["a"], {}, {"a": "refused"})
    assert empty.clients == [] and empty.labels.size == 0


def test_a_validate_message_with_an_unknown_mode_is_refused() -> None:
    task: Any = None  # neither answer needs the task: no model is built
    with pytest.raises(ValueError, match="mode 'everything'"):
        validation_reply(task, 0, None, Payload({}, {"mode": "everything"}), True)
    reply = validation_reply(task, 0, None, Payload({}, {"mode": "metrics"}), True)
    assert "no validation slides" in str(reply.scalars["refused"])
