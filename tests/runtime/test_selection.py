"""The selection rule of training-domain validation (the runs: test_inprocess)."""

from __future__ import annotations

import math

import numpy as np

from fedpath.runtime.selection import Selected, better, exported_decision, mean_defined


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
