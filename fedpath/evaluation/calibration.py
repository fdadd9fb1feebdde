"""Calibration and operating points, fitted on source validation data only.

Pure NumPy/SciPy functions over labels and class probabilities:

* **Temperature scaling** (Guo et al., 2017, Sec. 4.2): one scalar ``T > 0``
  divides the logits, ``q = softmax(z / T)``; ``T`` minimizes the mean negative
  log-likelihood of the validation labels. The tasks hand over probabilities,
  so the logits are recovered as ``z = log p`` (softmax is invariant to the
  constant ``logsumexp(z)`` that this drops; probabilities below the float32
  ``tiny`` are clipped there, where the float32 softmax had already lost them).
  The NLL is convex in ``1/T``, hence unimodal in ``log T``: a bounded Brent
  search over ``log T`` in ``[log 0.01, log 100]`` (SciPy's
  ``minimize_scalar(method="bounded")``, ``xatol=1e-8``) finds its minimum.
  ``T = 1`` is the identity; temperature scaling never changes the argmax.
* **An operating point** for two classes: the threshold ``t`` on the positive
  class's probability (predict positive iff ``p >= t``) that reaches a target
  sensitivity on the validation data: the ``k``-th largest positive score with
  ``k = ceil(s * P)`` (``P`` positives), the largest such threshold, i.e. the
  one with the highest specificity among those that meet the sensitivity.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedpath.evaluation.metrics import classification_metrics, validate_inputs

#: Bounds of the temperature search.
T_MIN, T_MAX = 0.01, 100.0
#: Smallest probability whose log is taken (the float32 softmax's resolution).
TINY = float(np.finfo(np.float32).tiny)


def nll(y_true: np.ndarray, probs: np.ndarray) -> float:
    """Mean negative log-likelihood ``-mean(log p[i, y_i])`` (clipped at TINY)."""
    y, p = validate_inputs(y_true, probs)
    return float(-np.mean(np.log(np.maximum(p[np.arange(y.size), y], TINY))))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    shifted = z - z.max(axis=1, keepdims=True)
    return np.asarray(
        shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True)), np.float64
    )


def _check_temperature(temperature: float) -> float:
    t = float(temperature)
    if not math.isfinite(t) or t <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature}")
    return t


def apply_temperature(probs: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(log p / T)`` row by row; ``T == 1`` returns ``probs`` unchanged
    (a float64 copy)."""
    t = _check_temperature(temperature)
    p = np.array(probs, dtype=np.float64)
    if t == 1.0:
        return p
    return np.asarray(np.exp(_log_softmax(np.log(np.maximum(p, TINY)) / t)))


def fit_temperature(y_true: np.ndarray, probs: np.ndarray) -> float:
    """The temperature in ``[T_MIN, T_MAX]`` that minimizes the validation NLL
    (module docstring)."""
    from scipy.optimize import minimize_scalar

    y, p = validate_inputs(y_true, probs)
    z = np.log(np.maximum(p, TINY))
    rows = np.arange(y.size)

    def loss(log_t: float) -> float:
        return float(-np.mean(_log_softmax(z / math.exp(log_t))[rows, y]))

    res = minimize_scalar(
        loss,
        bounds=(math.log(T_MIN), math.log(T_MAX)),
        method="bounded",
        options={"xatol": 1e-8},
    )
    best = float(res.x)
    # the bounded search never evaluates its bounds or T = 1: compare with them
    for log_t in (math.log(T_MIN), 0.0, math.log(T_MAX)):
        if loss(log_t) < loss(best):
            best = log_t
    return math.exp(best)


def threshold_for_sensitivity(
    y_true: np.ndarray, scores: np.ndarray, sensitivity: float
) -> float:
    """The largest threshold ``t`` with ``mean(scores[y == 1] >= t) >= sensitivity``.

    Raises
    ------
    ValueError
        If ``sensitivity`` is not in (0, 1], the labels are not 0/1, or there is
        no positive sample.
    """
    if not 0.0 < sensitivity <= 1.0:
        raise ValueError(f"sensitivity must lie in (0, 1], got {sensitivity}")
    y = np.asarray(y_true)
    s = np.asarray(scores, dtype=np.float64)
    if y.shape != s.shape or y.ndim != 1:
        raise ValueError(f"labels {y.shape} and scores {s.shape} must be equal 1-D")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("an operating point needs binary labels (0/1)")
    positive = np.sort(s[y == 1])[::-1]
    if positive.size == 0:
        raise ValueError("an operating point needs at least one positive sample")
    # round away float noise such as 0.9 * 10 = 9.000000000000002
    k = max(1, math.ceil(round(sensitivity * positive.size, 9)))
    return float(positive[k - 1])


def threshold_metrics(
    y_true: np.ndarray, probs: np.ndarray, threshold: float
) -> dict[str, Any]:
    """Every metric of :func:`classification_metrics` for the decision
    ``positive iff probs[:, 1] >= threshold``, plus ``threshold``,
    ``sensitivity`` and ``specificity`` (``nan`` without positives/negatives)
    and ``n``."""
    y, p = validate_inputs(y_true, probs)
    if p.shape[1] != 2:
        raise ValueError(f"a threshold needs two classes, got {p.shape[1]}")
    pred = (p[:, 1] >= threshold).astype(np.int64)
    out: dict[str, Any] = {
        "threshold": float(threshold),
        **classification_metrics(y, p, pred),
    }
    pos, neg = y == 1, y == 0
    out["sensitivity"] = float(np.mean(pred[pos] == 1)) if pos.any() else math.nan
    out["specificity"] = float(np.mean(pred[neg] == 0)) if neg.any() else math.nan
    out["n"] = int(y.size)
    return out
