"""Classification metrics for slide/patch-level evaluation, in pure NumPy.

The one home of fedpath's metrics: the classifier evaluation, ``fedpath evaluate``
and the linear probe (:mod:`fedpath.evaluation.probe`) all report these keys.
Every function is vectorised NumPy and reproduces the corresponding
scikit-learn metric (scikit-learn is only the reference of the test-suite):

* ``accuracy`` -- fraction of predictions equal to the label.
* ``balanced_accuracy`` -- mean per-class recall over the classes *present* in
  ``y_true`` (``sklearn.metrics.balanced_accuracy_score``).
* ``macro_f1``, ``macro_precision``, ``macro_recall`` -- unweighted means over
  all ``C`` classes with ``zero_division=0``
  (``f1_score(average="macro", labels=range(C))`` and likewise), for any ``C``.
* ``auroc`` -- binary ROC AUC of ``probs[:, 1]`` (ties handled by the
  trapezoidal rule, as ``roc_auc_score``); for ``C > 2`` the macro one-vs-rest
  AUC over the classes present in ``y_true``. Undefined (fewer than two classes
  present): ``nan``, never an exception.
* ``mcc`` -- multiclass Matthews correlation coefficient (Gorodkin's R_K),
  ``0.0`` when undefined (``matthews_corrcoef``).
* ``f1``, ``precision``, ``recall`` -- only for ``C == 2``: the scores of the
  positive class 1 (``average="binary"``; the F1 of FedAD's probe tables).
  ``macro_f1`` also averages in the negative class.
* ``ece`` -- expected calibration error (Guo et al., 2017, Eq. 3) over
  :data:`ECE_BINS` equal-width bins of the max-probability ``conf``: bin ``m``
  holds ``(m-1)/M < conf <= m/M`` and ECE is ``sum_m |B_m|/N |acc(B_m) -
  conf(B_m)|`` with the argmax predictions; the last key, *lower* is better.

All other metrics are "higher is better". ``nan`` is the one marker of an undefined
value inside Python (readers of older files also map a JSON ``null`` to it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "BINARY_METRIC_NAMES",
    "ECE_BINS",
    "METRIC_NAMES",
    "NonFiniteProbabilities",
    "classification_metrics",
    "confusion_matrix",
    "expected_calibration_error",
    "metrics_with_confusion",
    "per_class_scores",
    "roc_curve",
    "validate_inputs",
]

#: Keys of :func:`classification_metrics` for any number of classes, in order.
METRIC_NAMES: tuple[str, ...] = (
    "accuracy",
    "balanced_accuracy",
    "macro_f1",
    "auroc",
    "mcc",
    "macro_precision",
    "macro_recall",
)
#: Keys added for two classes: scores of the positive class 1.
BINARY_METRIC_NAMES: tuple[str, ...] = ("f1", "precision", "recall")
#: Equal-width max-probability bins of ``ece`` (the usual 15).
ECE_BINS = 15

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


# --------------------------------------------------------------------------- #
# input validation
# --------------------------------------------------------------------------- #
def _as_labels(values: object, name: str, num_classes: int | None = None) -> IntArray:
    """Convert ``values`` to a 1-D ``int64`` label vector, validating it.

    Integer and boolean arrays are accepted as-is; floating arrays are accepted
    only if every entry is a finite whole number.
    """
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must contain at least one sample (N >= 1)")
    if arr.dtype == np.bool_ or np.issubdtype(arr.dtype, np.integer):
        labels = arr.astype(np.int64)
    elif np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name} must contain integer class labels")
        labels = arr.astype(np.int64)
    else:
        raise ValueError(
            f"{name} must contain integer class labels, got dtype {arr.dtype}"
        )
    if num_classes is not None and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(
            f"{name} must contain labels in [0, {num_classes}), got values in "
            f"[{labels.min()}, {labels.max()}]"
        )
    return labels


class NonFiniteProbabilities(ValueError):
    """Probabilities holding a NaN or an infinity: the model that gave them
    diverged (its weights overflowed)."""


def _as_probs(probs: object) -> FloatArray:
    """Validate a ``(N, C)`` probability matrix with ``C >= 2`` and finite entries."""
    arr = np.asarray(probs)
    if arr.ndim != 2:
        raise ValueError(f"probs must be a 2-D array (N, C), got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise ValueError(f"probs must be numeric, got dtype {arr.dtype}")
    if arr.shape[0] < 1:
        raise ValueError("probs must contain at least one sample (N >= 1)")
    if arr.shape[1] < 2:
        raise ValueError(f"probs must have C >= 2 columns, got {arr.shape[1]}")
    out = arr.astype(np.float64)
    if not np.all(np.isfinite(out)):
        raise NonFiniteProbabilities("probs must contain only finite values")
    return out


def validate_inputs(y_true: object, probs: object) -> tuple[IntArray, FloatArray]:
    """Labels (N,) and class probabilities (N, C) as arrays; a clear ValueError
    when their shapes, values or lengths do not fit."""
    p = _as_probs(probs)
    y = _as_labels(y_true, "y_true", num_classes=p.shape[1])
    if y.shape[0] != p.shape[0]:
        raise ValueError(
            f"y_true has {y.shape[0]} samples but probs has {p.shape[0]} rows"
        )
    return y, p


# --------------------------------------------------------------------------- #
# building blocks
# --------------------------------------------------------------------------- #
def confusion_matrix(
    y_true: np.ndarray, y_pred: np.ndarray, num_classes: int
) -> np.ndarray:
    """Confusion matrix with true classes as rows and predictions as columns.

    Parameters
    ----------
    y_true, y_pred : np.ndarray
        1-D integer label vectors of equal length with values in
        ``[0, num_classes)``.
    num_classes : int
        Number of classes ``C`` (>= 1).

    Returns
    -------
    np.ndarray
        ``(C, C)`` ``int64`` matrix; entry ``[i, j]`` counts samples of true class
        ``i`` predicted as ``j``.

    Raises
    ------
    ValueError
        On shape mismatch, empty inputs or labels out of range.
    """
    if isinstance(num_classes, bool) or not isinstance(num_classes, int | np.integer):
        raise ValueError(f"num_classes must be an int, got {type(num_classes)!r}")
    c = int(num_classes)
    if c < 1:
        raise ValueError(f"num_classes must be >= 1, got {c}")
    t = _as_labels(y_true, "y_true", num_classes=c)
    p = _as_labels(y_pred, "y_pred", num_classes=c)
    if t.shape != p.shape:
        raise ValueError(
            f"y_true and y_pred must have the same length, got {t.size} and {p.size}"
        )
    counts = np.bincount(t * c + p, minlength=c * c)
    return counts.reshape(c, c).astype(np.int64)


def roc_curve(
    y_true_binary: np.ndarray, scores: np.ndarray, drop_intermediate: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Receiver operating characteristic curve.

    Equivalent to ``sklearn.metrics.roc_curve(y, s, drop_intermediate=...)``:
    one point per distinct score (tied scores collapse into a single point),
    preceded by the origin with threshold ``+inf``.

    Parameters
    ----------
    y_true_binary : np.ndarray
        1-D array of ``0``/``1`` (or boolean) labels; ``1`` is the positive class.
    scores : np.ndarray
        1-D array of finite scores, higher means more likely positive.
    drop_intermediate : bool
        Drop the points collinear with their neighbours (scikit-learn's rule:
        no corner in the second differences of the counts), which leaves the
        plotted curve unchanged; the probe reports its ROC curve that way.

    Returns
    -------
    fpr, tpr, thresholds : np.ndarray
        False/true positive rates (non-decreasing) and the decreasing thresholds
        at which they are reached (``thresholds[0] == inf``). If there are no
        negatives (positives), ``fpr`` (``tpr``) is all ``nan``, as in sklearn.

    Raises
    ------
    ValueError
        If the labels are not binary, the scores are not finite or the lengths
        differ.
    """
    y = _as_labels(y_true_binary, "y_true_binary", num_classes=2)
    s = np.asarray(scores)
    if s.ndim != 1:
        raise ValueError(f"scores must be a 1-D array, got shape {s.shape}")
    if not np.issubdtype(s.dtype, np.number) and s.dtype != np.bool_:
        raise ValueError(f"scores must be numeric, got dtype {s.dtype}")
    if s.shape != y.shape:
        raise ValueError(f"scores has {s.size} entries but y_true_binary has {y.size}")
    s = s.astype(np.float64)
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must contain only finite values")

    order = np.argsort(s, kind="stable")[::-1]
    s_sorted = s[order]
    y_sorted = y[order]
    last_of_run = np.r_[np.flatnonzero(np.diff(s_sorted)), s_sorted.size - 1]
    tps = np.cumsum(y_sorted)[last_of_run].astype(np.float64)
    fps = (last_of_run + 1).astype(np.float64) - tps
    thresholds = s_sorted[last_of_run]
    if drop_intermediate and fps.size > 2:
        corner = np.logical_or(np.diff(fps, 2), np.diff(tps, 2))
        keep = np.flatnonzero(np.r_[True, corner, True])
        tps, fps, thresholds = tps[keep], fps[keep], thresholds[keep]
    tps = np.r_[0.0, tps]
    fps = np.r_[0.0, fps]
    thresholds = np.r_[np.inf, thresholds]
    fpr = fps / fps[-1] if fps[-1] > 0 else np.full_like(fps, np.nan)
    tpr = tps / tps[-1] if tps[-1] > 0 else np.full_like(tps, np.nan)
    return fpr, tpr, thresholds


def _binary_auc(y_binary: IntArray, scores: FloatArray) -> float:
    """Trapezoidal ROC AUC; ``nan`` unless both classes are present."""
    n_pos = int(y_binary.sum())
    if n_pos == 0 or n_pos == y_binary.size:
        return float("nan")
    fpr, tpr, _ = roc_curve(y_binary, scores)
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1])) / 2.0)


def _auroc(y: IntArray, p: FloatArray) -> float:
    num_classes = p.shape[1]
    if num_classes == 2:
        return _binary_auc(y, p[:, 1])
    present = np.unique(y)
    if present.size < 2:
        return float("nan")
    aucs = [_binary_auc((y == c).astype(np.int64), p[:, c]) for c in present]
    return float(np.mean(aucs))


def expected_calibration_error(
    y_true: np.ndarray, probs: np.ndarray, bins: int = ECE_BINS
) -> float:
    """ECE of the argmax predictions over ``bins`` equal-width bins of the
    max-probability (module docstring); validated like every metric."""
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins!r}")
    y, p = validate_inputs(y_true, probs)
    return _ece(y, p, bins)


def _ece(y: IntArray, p: FloatArray, bins: int) -> float:
    conf = p.max(axis=1)
    correct = (np.argmax(p, axis=1) == y).astype(np.float64)
    # the interior edges m/M, correctly rounded; side="left": a confidence on
    # an edge falls in the bin that it closes
    which = np.searchsorted(np.arange(1, bins) / bins, conf, side="left")
    # sum over bins of |sum (correct - conf)| / N = sum |B|/N |acc(B) - conf(B)|
    gap = np.bincount(which, weights=correct - conf, minlength=bins)
    return float(np.abs(gap).sum() / y.size)


# --------------------------------------------------------------------------- #
# public metrics
# --------------------------------------------------------------------------- #
def per_class_scores(cm: np.ndarray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per-class precision, recall and F1 of a confusion matrix (rows true).

    ``tp / predicted``, ``tp / support`` and ``2 tp / (support + predicted)``,
    each 0 where its denominator is 0 (scikit-learn's ``zero_division=0``; the
    F1 denominator is formed as in ``precision_recall_fscore_support``, so the
    values agree to the last bit).
    """
    counts = np.asarray(cm, dtype=np.float64)
    tp = np.diag(counts)
    support = counts.sum(axis=1)  # true count per class
    predicted = counts.sum(axis=0)  # predicted count per class

    def ratio(num: FloatArray, den: FloatArray) -> FloatArray:
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0)

    return (
        ratio(tp, predicted),
        ratio(tp, support),
        ratio(2.0 * tp, support + predicted),
    )


def classification_metrics(
    y_true: np.ndarray, probs: np.ndarray, y_pred: np.ndarray | None = None
) -> dict[str, float]:
    """Compute every metric of the module docstring from class probabilities.

    Parameters
    ----------
    y_true : np.ndarray
        ``(N,)`` integer labels in ``[0, C)``.
    probs : np.ndarray
        ``(N, C)`` finite class probabilities, ``C >= 2``.
    y_pred : np.ndarray, optional
        ``(N,)`` hard predictions in ``[0, C)``; default ``argmax`` over the
        columns of ``probs`` (ties go to the lowest class index). A model whose
        own decision rule can differ from that argmax passes its predictions.

    Returns
    -------
    dict[str, float]
        :data:`METRIC_NAMES` in that order, then :data:`BINARY_METRIC_NAMES`
        when ``C == 2``, then ``ece`` (of ``probs``, whatever ``y_pred``).
        ``auroc`` is ``nan`` when fewer than two classes occur in ``y_true``;
        ``mcc`` is ``0.0`` when it is undefined (constant labels or predictions).

    Raises
    ------
    ValueError
        If the inputs have inconsistent shapes, are empty, contain labels
        outside ``[0, C)``, or non-finite probabilities.
    """
    y, p = validate_inputs(y_true, probs)
    num_classes = p.shape[1]
    pred = (
        np.argmax(p, axis=1).astype(np.int64)
        if y_pred is None
        else _as_labels(y_pred, "y_pred", num_classes=num_classes)
    )
    cm = confusion_matrix(y, pred, num_classes).astype(np.float64)
    precision, recall, f1 = per_class_scores(cm)

    tp = np.diag(cm)
    support = cm.sum(axis=1)  # true count per class
    predicted = cm.sum(axis=0)  # predicted count per class
    n = float(y.size)

    present = support > 0
    balanced = float(np.mean(tp[present] / support[present]))

    correct = float(tp.sum())
    cov_tp = correct * n - float(support @ predicted)
    cov_pp = n * n - float(predicted @ predicted)
    cov_tt = n * n - float(support @ support)
    denom = cov_pp * cov_tt
    mcc = 0.0 if denom == 0.0 else cov_tp / float(np.sqrt(denom))

    out = {
        "accuracy": correct / n,
        "balanced_accuracy": balanced,
        "macro_f1": float(np.mean(f1)),
        "auroc": _auroc(y, p),
        "mcc": float(mcc),
        "macro_precision": float(np.mean(precision)),
        "macro_recall": float(np.mean(recall)),
    }
    if num_classes == 2:  # the positive class 1 (scikit-learn's average="binary")
        scores = (f1, precision, recall)
        out.update(
            {k: float(v[1]) for k, v in zip(BINARY_METRIC_NAMES, scores, strict=True)}
        )
    out["ece"] = _ece(y, p, ECE_BINS)
    return out


def metrics_with_confusion(
    y_true: np.ndarray, probs: np.ndarray, y_pred: np.ndarray | None = None
) -> dict[str, Any]:
    """:func:`classification_metrics` plus ``confusion``, the ``(C, C)`` confusion
    matrix as nested lists (rows true, columns predicted): an evaluation report.
    """
    out: dict[str, Any] = dict(classification_metrics(y_true, probs, y_pred))
    y, p = validate_inputs(y_true, probs)
    pred = np.argmax(p, axis=1) if y_pred is None else y_pred
    out["confusion"] = confusion_matrix(y, pred, p.shape[1]).tolist()
    return out
