"""Linear probing of frozen features on an unseen domain (FedAD Section 5.5).

The protocol of the FedAD paper, steps (1)-(5): features of the target domain's
labelled train split from the frozen extractor; K-fold (5) stratified
cross-validation of an L2 logistic regression (L-BFGS, 100 iterations) over a
grid of the inverse regularization strength C, selected by the mean validation F1;
retraining on the whole train split with the chosen C; one evaluation on the
target's test split. Features are standardized with statistics of the train split
(inside each CV fold, of the fold's training part), so no test information leaks.

The paper fixes "a small L2 penalty of 1e-4" and also says the CV selects "the
best hyperparameter". Both readings are here:

* ``l2=None`` (the default): C is selected over ``cs`` by CV F1;
* ``l2=<float>`` (the paper's fixed penalty, ``evaluation.probe_l2: 1e-4``): no
  CV; the logistic regression minimizes the **per-sample mean** log-loss plus
  (l2 / 2) ||w||^2. scikit-learn minimizes C * sum_i log-loss_i + ||w||^2 / 2, so
  dividing by C * n gives the same minimizer with

      C = 1 / (n * l2)        (n: the number of training samples)

  (for the paper's 1e-4 and ~300 probe images, C ~ 33). Read with a *summed*
  loss instead, 1e-4 would be C = 1 / 1e-4 = 1e4, independent of n; put that in
  ``cs`` to get it.

Every result carries ``l2`` = 1 / (n_train * C), the per-sample penalty of the
final fit in the first convention, and ``selection`` ("cv" or "fixed_l2").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedpath.config import ConfigError
from fedpath.evaluation.metrics import (
    confusion_matrix,
    metrics_with_confusion,
    per_class_scores,
    roc_curve,
)


def _check_inputs(
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    where: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    tx, ty = np.asarray(train_x, np.float64), np.asarray(train_y)
    vx, vy = np.asarray(test_x, np.float64), np.asarray(test_y)
    for name, x, y in (("train", tx, ty), ("test", vx, vy)):
        if x.ndim != 2 or y.ndim != 1 or len(x) != len(y):
            raise ValueError(
                f"linear probe on {where}: {name} features must be (N, F) and labels "
                f"(N,), got {x.shape} and {y.shape}"
            )
        if len(x) == 0:
            raise ConfigError(f"linear probe on {where}: the {name} split is empty")
        if not np.isfinite(x).all():
            raise ValueError(
                f"linear probe on {where}: {name} features hold NaN or infinite values"
            )
    if tx.shape[1] != vx.shape[1]:
        raise ValueError(
            f"linear probe on {where}: train features have {tx.shape[1]} dimensions, "
            f"test features {vx.shape[1]}"
        )
    return tx, ty, vx, vy


def _cv_f1(y: np.ndarray, pred: np.ndarray, num_classes: int) -> float:
    """The CV criterion: F1 of the positive class for two classes, else macro-F1
    over the classes of both splits (the probe's ``f1`` / ``macro_f1``)."""
    f1 = per_class_scores(confusion_matrix(y, pred, num_classes))[2]
    return float(f1[1]) if num_classes == 2 else float(np.mean(f1))


def l2_to_c(l2: float, n: int) -> float:
    """scikit-learn's C for a per-sample L2 penalty ``l2`` on ``n`` samples.

    The mean log-loss + (l2 / 2) ||w||^2 has the minimizer of scikit-learn's
    C * sum log-loss + ||w||^2 / 2 with C = 1 / (n * l2).
    """
    if not (math.isfinite(l2) and l2 > 0):
        raise ConfigError(f"probe L2 penalty must be a number > 0, got {l2!r}")
    if n < 1:
        raise ValueError(f"probe L2 penalty: need at least one sample, got n={n}")
    return 1.0 / (n * l2)


def fit_probe_model(x: np.ndarray, y: np.ndarray, c: float, max_iter: int) -> Any:
    """The probe's model: standardization (statistics of ``x``) + L2 logistic
    regression with inverse strength ``c`` (L-BFGS, ``max_iter`` iterations)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(
        StandardScaler(),
        LogisticRegression(C=c, solver="lbfgs", max_iter=max_iter),
    )
    return model.fit(x, y)


def linear_probe(
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    *,
    folds: int = 5,
    max_iter: int = 100,
    cs: Sequence[float] = (0.01, 0.1, 1.0, 10.0, 100.0),
    l2: float | None = None,
    seed: int = 0,
    where: str = "probe target",
) -> dict[str, Any]:
    """Fit a CV-tuned (or fixed-penalty) logistic regression on train features,
    evaluate on test.

    Parameters
    ----------
    train_x, test_x : np.ndarray
        ``(N, F)`` frozen features of the target domain's train / test split.
    train_y, test_y : np.ndarray
        ``(N,)`` class labels.
    folds : int
        Stratified CV folds for choosing C (FedAD: 5). Reduced to the size of the
        rarest train class when that is smaller (reported in ``folds``); with a
        class of one sample no CV is possible and the middle of ``cs`` is used.
    max_iter : int
        L-BFGS iterations (FedAD: 100).
    cs : sequence of float
        Candidate inverse L2 strengths C (unused with ``l2``).
    l2 : float or None
        None: choose C over ``cs`` by CV. A number > 0: the paper's fixed L2
        penalty on the per-sample mean loss, fitted once with
        C = 1 / (n_train * l2) (:func:`l2_to_c`), no CV (``folds`` is then 0).
    seed : int
        Fold shuffling.
    where : str
        What is probed (the domain), named in errors.

    Returns
    -------
    dict
        The metrics of :func:`fedpath.evaluation.metrics.metrics_with_confusion`
        over ``classes`` (the sorted classes of both splits; for two classes
        ``f1``, ``precision``, ``recall`` of the positive, last one besides the
        ``macro_*`` means; ``auroc`` ``nan`` when undefined; ``confusion`` in
        ``classes`` order), then ``C``, ``cv_f1`` (mean CV F1 per candidate, the
        positive-class F1 for two classes, else macro-F1), ``folds``,
        ``n_train``, ``n_test``, ``n``, ``classes``, ``converged``, ``l2``
        (1 / (n_train * C)), ``selection`` ("cv" or "fixed_l2") and, for two
        classes, ``roc`` ({"fpr", "tpr"}, empty when one class is absent).

    Raises
    ------
    ConfigError
        If the train split holds a single class (or either split is empty),
        naming ``where``; or if ``l2`` is not a number > 0.
    """
    from sklearn.exceptions import ConvergenceWarning

    tx, ty, vx, vy = _check_inputs(train_x, train_y, test_x, test_y, where)
    _check_settings(ty, folds, cs, l2, where)
    labels = sorted(set(ty.tolist()) | set(vy.tolist()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        if l2 is not None:
            note = f"no cross-validation: fixed L2 penalty {l2!r} (C = 1 / (n * l2))"
            choice = _Choice(l2_to_c(float(l2), len(ty)), {}, 0, note)
        else:
            choice = _choose_c(tx, ty, labels, folds, cs, max_iter, seed)
        model = fit_probe_model(tx, ty, choice.c, max_iter)
        n_warn = sum(issubclass(w.category, ConvergenceWarning) for w in caught)
    y_test, proba, pred = _predict(model, vx, vy, labels)
    # the model's own predictions, which its argmax of proba could contradict
    # at a rounding tie
    out = metrics_with_confusion(y_test, proba, pred)
    out.update(
        {
            "C": float(choice.c),
            "cv_f1": choice.cv_f1,
            "folds": choice.folds,
            "n_train": len(ty),
            "n_test": len(vy),
            "n": len(vy),
            "classes": [
                int(c) if isinstance(c, np.integer | int) else str(c) for c in labels
            ],
            "converged": n_warn == 0,
            "l2": 1.0 / (len(ty) * float(choice.c)),
            "selection": "cv" if l2 is None else "fixed_l2",
        }
    )
    if choice.note:
        out["folds_note"] = choice.note
    if len(labels) == 2:
        out["roc"] = _roc(y_test, proba)
    return out


def _check_settings(
    ty: np.ndarray, folds: int, cs: Sequence[float], l2: float | None, where: str
) -> None:
    """Refuse a single-class train split and a bad ``l2``, ``cs`` or ``folds``."""
    train_classes = np.unique(ty)
    if len(train_classes) < 2:
        raise ConfigError(
            f"linear probe on {where}: its train split holds only class "
            f"{train_classes[0]!r} ({len(ty)} samples); a probe needs at least two "
            "classes (choose another lodo target or data split)"
        )
    if l2 is not None and not (
        isinstance(l2, int | float) and math.isfinite(l2) and l2 > 0
    ):
        raise ConfigError(
            f"linear probe on {where}: l2 must be a number > 0, got {l2!r}"
        )
    if l2 is None and (not cs or any(not (c > 0) for c in cs)):
        raise ConfigError(f"linear probe on {where}: cs must be positive, got {cs}")
    if l2 is None and folds < 2:
        raise ConfigError(f"linear probe on {where}: folds must be >= 2, got {folds}")


@dataclass(frozen=True)
class _Choice:
    """The chosen C with how it was chosen (the probe's ``C``, ``cv_f1``,
    ``folds`` and ``folds_note``; an empty note is not reported)."""

    c: float
    cv_f1: dict[str, float]
    folds: int
    note: str


def _indices(values: np.ndarray, labels: list[Any]) -> np.ndarray:
    """Class values -> positions in ``labels`` (the metrics' class indices)."""
    index = {c: i for i, c in enumerate(labels)}
    return np.array([index[v] for v in values.tolist()], dtype=np.int64)


def _choose_c(
    tx: np.ndarray,
    ty: np.ndarray,
    labels: list[Any],
    folds: int,
    cs: Sequence[float],
    max_iter: int,
    seed: int,
) -> _Choice:
    """C over ``cs`` by stratified CV F1 (first of ties); with fewer folds when
    the rarest train class is smaller, and the middle of ``cs`` (no CV) when a
    class has a single sample."""
    from sklearn.model_selection import StratifiedKFold

    counts = np.unique(ty, return_counts=True)[1]
    used = min(folds, int(counts.min()))
    if used < 2:
        note = "no cross-validation: a train class has a single sample"
        return _Choice(sorted(cs)[len(cs) // 2], {}, 0, note)
    note = ""
    if used < folds:
        note = (
            f"reduced from {folds} to {used} folds: the rarest train class "
            f"has {int(counts.min())} samples"
        )
    rs = int(seed) % (2**32)
    splitter = StratifiedKFold(n_splits=used, shuffle=True, random_state=rs)
    splits = list(splitter.split(tx, ty))
    cv_f1: dict[str, float] = {}
    for c in cs:
        scores = []
        for tr, va in splits:
            pred = fit_probe_model(tx[tr], ty[tr], c, max_iter).predict(tx[va])
            scores.append(
                _cv_f1(_indices(ty[va], labels), _indices(pred, labels), len(labels))
            )
        cv_f1[repr(float(c))] = float(np.mean(scores))
    best = max(cs, key=lambda c: cv_f1[repr(float(c))])  # first of ties
    return _Choice(best, cv_f1, used, note)


def _predict(
    model: Any, vx: np.ndarray, vy: np.ndarray, labels: list[Any]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Test labels, probabilities over ``labels`` (0 for a class the model never
    saw) and predictions, all as class indices into ``labels``."""
    pred = model.predict(vx)
    proba_known = model.predict_proba(vx)
    proba = np.zeros((len(vx), len(labels)))
    for j, c in enumerate(model.classes_):
        proba[:, labels.index(c)] = proba_known[:, j]
    return _indices(vy, labels), proba, _indices(pred, labels)


def _roc(y_test: np.ndarray, proba: np.ndarray) -> dict[str, list[float]]:
    """The two-class ROC curve of the positive (index 1); empty when the test
    split lacks one of the classes."""
    positive = y_test == 1
    if positive.any() and not positive.all():
        fpr, tpr, _ = roc_curve(positive, proba[:, 1], drop_intermediate=True)
        return {"fpr": fpr.tolist(), "tpr": tpr.tolist()}
    return {"fpr": [], "tpr": []}
