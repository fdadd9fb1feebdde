"""Classification metrics for slide/patch-level evaluation, in pure NumPy.

Every function here is vectorised NumPy and reproduces the semantics of the
corresponding scikit-learn metric (scikit-learn is used only as a reference in
the test-suite, never imported by the package):

* ``accuracy`` -- fraction of argmax predictions equal to the label.
* ``balanced_accuracy`` -- mean per-class recall over the classes *present* in
  ``y_true`` (``sklearn.metrics.balanced_accuracy_score``).
* ``macro_f1`` -- unweighted mean F1 over all ``C`` classes with
  ``zero_division=0`` (``f1_score(average="macro", labels=range(C))``).
* ``auroc`` -- binary ROC AUC of ``probs[:, 1]`` (ties handled by the
  trapezoidal rule, exactly as ``roc_auc_score``); for ``C > 2`` the macro
  one-vs-rest AUC over the classes present in ``y_true``.  When fewer than two
  classes are present the AUROC is undefined and ``nan`` is returned (no
  exception is raised).
* ``mcc`` -- multiclass Matthews correlation coefficient (Gorodkin's R_K),
  ``0.0`` when undefined (``matthews_corrcoef``).

All metrics are "higher is better".
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "METRIC_NAMES",
    "classification_metrics",
    "confusion_matrix",
    "per_group_metrics",
    "roc_curve",
    "worst_group",
]

METRIC_NAMES: tuple[str, ...] = (
    "accuracy",
    "balanced_accuracy",
    "macro_f1",
    "auroc",
    "mcc",
)

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
        raise ValueError("probs must contain only finite values")
    return out


def _validate(y_true: object, probs: object) -> tuple[IntArray, FloatArray]:
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
    y_true_binary: np.ndarray, scores: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Receiver operating characteristic curve.

    Equivalent to ``sklearn.metrics.roc_curve(y, s, drop_intermediate=False)``:
    one point per distinct score (tied scores collapse into a single point),
    preceded by the origin with threshold ``+inf``.

    Parameters
    ----------
    y_true_binary : np.ndarray
        1-D array of ``0``/``1`` (or boolean) labels; ``1`` is the positive class.
    scores : np.ndarray
        1-D array of finite scores, higher means more likely positive.

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
    tps = np.r_[0.0, tps]
    fps = np.r_[0.0, fps]
    thresholds = np.r_[np.inf, s_sorted[last_of_run]]
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


# --------------------------------------------------------------------------- #
# public metrics
# --------------------------------------------------------------------------- #
def classification_metrics(y_true: np.ndarray, probs: np.ndarray) -> dict[str, float]:
    """Compute all metrics in :data:`METRIC_NAMES` from class probabilities.

    Parameters
    ----------
    y_true : np.ndarray
        ``(N,)`` integer labels in ``[0, C)``.
    probs : np.ndarray
        ``(N, C)`` finite class probabilities, ``C >= 2``. Hard predictions are
        ``argmax`` over the columns (ties go to the lowest class index).

    Returns
    -------
    dict[str, float]
        Keys in the order of :data:`METRIC_NAMES`. ``auroc`` is ``nan`` when
        fewer than two classes occur in ``y_true``; ``mcc`` is ``0.0`` when it
        is undefined (constant labels or predictions).

    Raises
    ------
    ValueError
        If the inputs have inconsistent shapes, are empty, contain labels
        outside ``[0, C)``, or non-finite probabilities.
    """
    y, p = _validate(y_true, probs)
    num_classes = p.shape[1]
    pred = np.argmax(p, axis=1).astype(np.int64)
    cm = confusion_matrix(y, pred, num_classes).astype(np.float64)

    tp = np.diag(cm)
    support = cm.sum(axis=1)  # true count per class
    predicted = cm.sum(axis=0)  # predicted count per class
    n = float(y.size)

    present = support > 0
    balanced = float(np.mean(tp[present] / support[present]))

    f1_denom = 2.0 * tp + (predicted - tp) + (support - tp)
    f1 = np.divide(2.0 * tp, f1_denom, out=np.zeros_like(tp), where=f1_denom > 0)

    correct = float(tp.sum())
    cov_tp = correct * n - float(support @ predicted)
    cov_pp = n * n - float(predicted @ predicted)
    cov_tt = n * n - float(support @ support)
    denom = cov_pp * cov_tt
    mcc = 0.0 if denom == 0.0 else cov_tp / float(np.sqrt(denom))

    return {
        "accuracy": correct / n,
        "balanced_accuracy": balanced,
        "macro_f1": float(np.mean(f1)),
        "auroc": _auroc(y, p),
        "mcc": float(mcc),
    }


def per_group_metrics(
    y_true: np.ndarray, probs: np.ndarray, groups: np.ndarray
) -> dict[str, dict[str, float]]:
    """:func:`classification_metrics` computed separately for each group.

    Parameters
    ----------
    y_true : np.ndarray
        ``(N,)`` integer labels in ``[0, C)``.
    probs : np.ndarray
        ``(N, C)`` class probabilities.
    groups : np.ndarray
        ``(N,)`` group identifiers (e.g. hospital/centre). Values are converted
        with ``str()``, so ``3`` and ``"3"`` denote the same group.

    Returns
    -------
    dict[str, dict[str, float]]
        Metrics per group, keys sorted by group name (string order). The number
        of classes ``C`` is that of ``probs`` for every group.

    Raises
    ------
    ValueError
        On invalid inputs or if ``groups`` is not 1-D with ``N`` entries.
    """
    y, p = _validate(y_true, probs)
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != y.shape[0]:
        raise ValueError(
            f"groups must be a 1-D array with {y.shape[0]} entries, got shape {g.shape}"
        )
    names = g.astype(str)
    unique, inverse = np.unique(names, return_inverse=True)
    inverse = inverse.reshape(-1)
    return {
        str(name): classification_metrics(y[inverse == k], p[inverse == k])
        for k, name in enumerate(unique)
    }


def worst_group(
    per_group: dict[str, dict[str, float]], metric: str
) -> tuple[str, float]:
    """Group with the lowest value of ``metric`` (metrics are higher-is-better).

    Parameters
    ----------
    per_group : dict[str, dict[str, float]]
        Output of :func:`per_group_metrics` (or any mapping of that shape).
    metric : str
        Metric name; must be a key of every group's dictionary.

    Returns
    -------
    tuple[str, float]
        ``(group, value)``. ``nan`` values are ignored; ties go to the group that
        comes first in ``per_group``'s iteration order.

    Raises
    ------
    ValueError
        If ``per_group`` is empty, a group lacks ``metric``, or every value is
        ``nan``.
    """
    if not per_group:
        raise ValueError("per_group is empty: no group to choose from")
    best: tuple[str, float] | None = None
    for name, values in per_group.items():
        if metric not in values:
            raise ValueError(
                f"metric {metric!r} missing for group {name!r}; available: "
                f"{sorted(values)}"
            )
        value = float(values[metric])
        if np.isnan(value):
            continue
        if best is None or value < best[1]:
            best = (name, value)
    if best is None:
        raise ValueError(f"metric {metric!r} is NaN for every group")
    return best
