"""What a hospital scoring a model needs beyond the summary metrics.

``fedpath evaluate`` at a site that never took part reports, besides the metrics of
:mod:`fedpath.evaluation.metrics`:

* per-class ``sensitivity`` and ``specificity`` (:func:`per_class_rates`), one class
  against the rest of a confusion matrix (rows true, columns predicted): for class
  ``c``, ``TP`` = ``cm[c, c]``, ``FN`` = the rest of row ``c``, ``FP`` = the rest of
  column ``c``, ``TN`` = everything else; sensitivity (the class's recall) is
  ``TP / (TP + FN)``, specificity ``TN / (TN + FP)``, ``nan`` where the denominator
  is 0 (no image of the class / of the other classes);
* percentile-bootstrap confidence intervals of the balanced accuracy and the AUROC
  (:func:`bootstrap_ci`): a site evaluates on a few hundred images, and the reader
  must see how far the numbers could move on another few hundred.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpath.evaluation.metrics import _auroc, confusion_matrix, validate_inputs

__all__ = ["CI_LEVEL", "bootstrap_ci", "per_class_rates"]

#: the coverage of the bootstrap intervals (percentiles 2.5 and 97.5)
CI_LEVEL = 0.95
#: resampled labels held in memory at once (resamples x images), bounding memory
_CHUNK = 2_000_000


def per_class_rates(cm: np.ndarray, classes: Sequence[str]) -> dict[str, Any]:
    """Per class of ``classes``: ``n`` (its true count), ``sensitivity`` and
    ``specificity`` one-vs-rest from the confusion matrix ``cm`` (rows true,
    columns predicted; see the module docstring for the formulas)."""
    counts = np.asarray(cm, dtype=np.float64)
    if counts.ndim != 2 or counts.shape != (len(classes), len(classes)):
        raise ValueError(
            f"confusion matrix of shape {counts.shape} does not fit {len(classes)} "
            "classes"
        )
    total = counts.sum()
    tp = np.diag(counts)
    fn = counts.sum(axis=1) - tp
    fp = counts.sum(axis=0) - tp
    tn = total - tp - fn - fp

    def ratio(num: float, den: float) -> float:
        return float(num / den) if den > 0 else float("nan")

    return {
        c: {
            "n": int(tp[i] + fn[i]),
            "sensitivity": ratio(tp[i], tp[i] + fn[i]),
            "specificity": ratio(tn[i], tn[i] + fp[i]),
        }
        for i, c in enumerate(classes)
    }


def _balanced_accuracies(
    y: np.ndarray, pred: np.ndarray, idx: np.ndarray, num_classes: int
) -> np.ndarray:
    """The balanced accuracy (mean recall over the classes present) of each row
    of resampled positions ``idx`` (resamples x images), vectorised."""
    yb, pb = y[idx], pred[idx]
    recalls = np.full((idx.shape[0], num_classes), np.nan)
    for c in range(num_classes):
        support = (yb == c).sum(axis=1)
        hits = ((yb == c) & (pb == c)).sum(axis=1)
        present = support > 0
        recalls[present, c] = hits[present] / support[present]
    # every resample holds at least one image, so at least one class is present
    return np.asarray(np.nanmean(recalls, axis=1), dtype=np.float64)


def bootstrap_ci(
    y_true: np.ndarray,
    probs: np.ndarray,
    y_pred: np.ndarray | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Percentile-bootstrap :data:`CI_LEVEL` intervals of ``balanced_accuracy``
    and ``auroc``.

    Each of ``resamples`` resamples draws ``N`` images with replacement (from a
    generator seeded by ``seed`` alone: the same seed gives identical intervals),
    recomputes both metrics exactly as :func:`~fedpath.evaluation.metrics.
    classification_metrics` does (``y_pred``: the hard predictions, default the
    argmax of ``probs``), and the interval is their 2.5th and 97.5th percentiles.
    A resample with a single class has no AUROC and is left out of its interval
    (``auroc_resamples`` counts those used); with none, the AUROC interval is
    ``nan``.

    Returns ``{"resamples", "seed", "level", "balanced_accuracy": [low, high],
    "auroc": [low, high], "auroc_resamples"}``.
    """
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"resamples must be an integer >= 1, got {resamples!r}")
    y, p = validate_inputs(y_true, probs)
    c = p.shape[1]
    pred = (
        np.argmax(p, axis=1).astype(np.int64)
        if y_pred is None
        else np.asarray(y_pred, dtype=np.int64)
    )
    if pred.shape != y.shape:
        raise ValueError(f"y_pred has {pred.size} entries but y_true has {y.size}")
    confusion_matrix(y, pred, c)  # validates the predictions' range
    n = y.size
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    step = max(1, _CHUNK // n)
    balanced = np.concatenate(
        [
            _balanced_accuracies(y, pred, idx[s : s + step], c)
            for s in range(0, resamples, step)
        ]
    )
    aucs = np.array([_auroc(y[row], p[row]) for row in idx])
    aucs = aucs[np.isfinite(aucs)]
    low, high = 100 * (1 - CI_LEVEL) / 2, 100 * (1 + CI_LEVEL) / 2

    def interval(values: np.ndarray) -> list[float]:
        if values.size == 0:
            return [float("nan"), float("nan")]
        lo, hi = np.percentile(values, [low, high])
        return [float(lo), float(hi)]

    return {
        "resamples": resamples,
        "seed": seed,
        "level": CI_LEVEL,
        "balanced_accuracy": interval(balanced),
        "auroc": interval(aucs),
        "auroc_resamples": int(aucs.size),
    }
