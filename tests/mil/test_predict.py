"""Predictions of a MIL model on slide bags (:mod:`fedpath.mil.predict`)."""

from __future__ import annotations

import numpy as np

from fedpath.mil.predict import evaluate_mil
from tests.mil_helpers import C, small_mil, toy_bags


def test_evaluate_mil_probabilities_and_mode() -> None:
    model = small_mil("abmil")
    model.train()
    probs, labels = evaluate_mil(model, toy_bags(5))
    assert probs.shape == (5, C) and np.allclose(probs.sum(1), 1.0)
    assert labels.tolist() == [b.label for b in toy_bags(5)]
    assert model.training  # the caller's mode is restored
