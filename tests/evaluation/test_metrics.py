"""Tests for fedpath.evaluation.metrics, checked against scikit-learn."""

from __future__ import annotations

import ast
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn import metrics as skm

from fedpath.evaluation import metrics as fm
from fedpath.evaluation.groups import per_group_metrics
from fedpath.evaluation.metrics import (
    BINARY_METRIC_NAMES,
    METRIC_NAMES,
    classification_metrics,
    confusion_matrix,
    expected_calibration_error,
    metrics_with_confusion,
    roc_curve,
)
from tests.evaluation.metric_cases import random_case

#: computed from counts like scikit-learn does: equal to the last bit
EXACT = {"accuracy", "balanced_accuracy", "macro_f1", "macro_precision"}
EXACT |= {"macro_recall", *BINARY_METRIC_NAMES}


def names_for(num_classes: int) -> tuple[str, ...]:
    """The higher-is-better keys (``ece`` follows them)."""
    return METRIC_NAMES + (BINARY_METRIC_NAMES if num_classes == 2 else ())


def reference_ece(y: np.ndarray, probs: np.ndarray, bins: int = 15) -> float:
    """Guo et al.'s ECE written out sample by sample: bin m holds the confidences
    in ((m-1)/M, m/M]; sum over bins of |B|/N |acc(B) - conf(B)|."""
    conf = [float(max(row)) for row in probs]
    hit = [
        float(int(np.argmax(row)) == int(t)) for row, t in zip(probs, y, strict=True)
    ]
    total = 0.0
    for m in range(1, bins + 1):
        lo, hi = (m - 1) / bins, m / bins
        members = [i for i, c in enumerate(conf) if lo < c <= hi]
        if members:
            acc = sum(hit[i] for i in members) / len(members)
            mean_conf = sum(conf[i] for i in members) / len(members)
            total += len(members) / len(conf) * abs(acc - mean_conf)
    return total


def sklearn_reference(
    y: np.ndarray, probs: np.ndarray, pred: np.ndarray | None = None
) -> dict[str, float]:
    """All metrics computed with scikit-learn, following the documented semantics."""
    num_classes = probs.shape[1]
    pred = np.argmax(probs, axis=1) if pred is None else pred
    present = np.unique(y)
    every = {"labels": list(range(num_classes)), "zero_division": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if present.size < 2:
            auroc = math.nan
        elif num_classes == 2:
            auroc = skm.roc_auc_score(y, probs[:, 1])
        elif present.size == num_classes:
            auroc = skm.roc_auc_score(y, probs, multi_class="ovr", average="macro")
        else:  # sklearn refuses absent classes: average binary OvR AUCs by hand
            auroc = float(
                np.mean([skm.roc_auc_score(y == c, probs[:, c]) for c in present])
            )
        ref = {
            "accuracy": skm.accuracy_score(y, pred),
            "balanced_accuracy": skm.balanced_accuracy_score(y, pred),
            "macro_f1": skm.f1_score(y, pred, average="macro", **every),
            "auroc": auroc,
            "mcc": skm.matthews_corrcoef(y, pred),
            "macro_precision": skm.precision_score(y, pred, average="macro", **every),
            "macro_recall": skm.recall_score(y, pred, average="macro", **every),
        }
        if num_classes == 2:  # the positive class 1, average="binary"
            ref["f1"] = skm.f1_score(y, pred, zero_division=0)
            ref["precision"] = skm.precision_score(y, pred, zero_division=0)
            ref["recall"] = skm.recall_score(y, pred, zero_division=0)
        return ref


def assert_matches_sklearn(
    y: np.ndarray, probs: np.ndarray, pred: np.ndarray | None = None
) -> None:
    ours = classification_metrics(y, probs, pred)
    ref = sklearn_reference(y, probs, pred)
    # ece is appended: every other key and value is what it always was
    assert tuple(ours) == (*names_for(probs.shape[1]), "ece")
    ref["ece"] = reference_ece(y, probs)
    for name in ours:
        assert isinstance(ours[name], float), name
        if math.isnan(ref[name]):
            assert math.isnan(ours[name]), name
        elif name in EXACT:
            assert ours[name] == float(ref[name]), name
        else:
            assert ours[name] == pytest.approx(ref[name], abs=1e-12), name


@pytest.mark.parametrize("num_classes", [2, 3])
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(25))
def test_random_cases_match_sklearn(num_classes: int, ties: bool, seed: int) -> None:
    rng = np.random.default_rng(1000 * seed + 10 * num_classes + int(ties))
    n = int(rng.integers(2, 60))
    y, probs = random_case(rng, num_classes, ties, n)
    assert_matches_sklearn(y, probs)


@pytest.mark.parametrize("seed", range(10))
def test_class_absent_from_y_true(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y, probs = random_case(rng, 3, ties=seed % 2 == 0, n=40)
    y = np.where(y == 2, 0, y)  # class 2 never occurs, but may be predicted
    probs[:5, 2] += 5.0
    probs /= probs.sum(axis=1, keepdims=True)
    assert_matches_sklearn(y, probs)
    # with an absent class, balanced accuracy averages over classes 0 and 1 only
    pred = probs.argmax(axis=1)
    recalls = [np.mean(pred[y == c] == c) for c in (0, 1)]
    got = classification_metrics(y, probs)["balanced_accuracy"]
    assert got == pytest.approx(np.mean(recalls))


@pytest.mark.parametrize("num_classes", [2, 3, 4])
def test_perfect_predictions(num_classes: int) -> None:
    y = np.tile(np.arange(num_classes), 5)
    probs = np.eye(num_classes)[y] * 0.9 + 0.1 / num_classes
    result = classification_metrics(y, probs)
    assert {k: result[k] for k in names_for(num_classes)} == pytest.approx(
        {name: 1.0 for name in names_for(num_classes)}
    )
    # every answer right at confidence 0.9 + 0.1/C: over-cautious by 0.1 - 0.1/C
    assert result["ece"] == pytest.approx(0.1 - 0.1 / num_classes)
    assert_matches_sklearn(y, probs)


@pytest.mark.parametrize("num_classes", [2, 3])
def test_constant_predictions(num_classes: int) -> None:
    y = np.array([0, 1, 1, 0, 1, *range(num_classes)])
    probs = np.full((y.size, num_classes), 1.0 / num_classes)
    result = classification_metrics(y, probs)
    assert result["auroc"] == pytest.approx(0.5)  # all scores tied
    assert result["mcc"] == 0.0  # undefined -> 0
    assert_matches_sklearn(y, probs)


def test_inverted_scores_give_zero_auroc() -> None:
    y = np.array([0, 0, 1, 1])
    probs = np.array([[0.1, 0.9], [0.2, 0.8], [0.7, 0.3], [0.9, 0.1]])
    result = classification_metrics(y, probs)
    assert result["auroc"] == 0.0
    assert result["mcc"] == pytest.approx(-1.0)
    assert_matches_sklearn(y, probs)


@pytest.mark.parametrize("num_classes", [2, 3])
@pytest.mark.parametrize("label", [0, 1])
def test_single_class_gives_nan_auroc(num_classes: int, label: int) -> None:
    rng = np.random.default_rng(label)
    y = np.full(7, label)
    probs = rng.dirichlet(np.ones(num_classes), size=7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning, no exception
        result = classification_metrics(y, probs)
    assert math.isnan(result["auroc"])
    assert_matches_sklearn(y, probs)


def test_single_sample() -> None:
    result = classification_metrics(np.array([1]), np.array([[0.2, 0.8]]))
    assert result["accuracy"] == 1.0
    assert math.isnan(result["auroc"])
    assert_matches_sklearn(np.array([1]), np.array([[0.2, 0.8]]))


@pytest.mark.parametrize("num_classes", [2, 3])
@pytest.mark.parametrize("seed", range(5))
def test_given_predictions_replace_the_argmax(num_classes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    y, probs = random_case(rng, num_classes, ties=False, n=40)
    pred = rng.integers(0, num_classes, size=40)  # a decision rule of its own
    assert_matches_sklearn(y, probs, pred)
    # the AUROC ranks the probabilities, whatever the hard predictions
    assert (
        classification_metrics(y, probs, pred)["auroc"]
        == classification_metrics(y, probs)["auroc"]
    )
    report = metrics_with_confusion(y, probs, pred)
    every = list(range(num_classes))
    assert report["confusion"] == skm.confusion_matrix(y, pred, labels=every).tolist()
    assert metrics_with_confusion(y, probs)["confusion"] == (
        skm.confusion_matrix(y, probs.argmax(1), labels=every).tolist()
    )
    with pytest.raises(ValueError, match="y_pred"):
        classification_metrics(y, probs, np.full(40, num_classes))


def test_binary_scores_are_those_of_class_one() -> None:
    # 3 positives: 2 found, 1 false alarm; the negative class scores differently
    y = np.array([1, 1, 1, 0, 0, 0, 0])
    probs = np.array([[0.2, 0.8]] * 2 + [[0.9, 0.1]] + [[0.3, 0.7]] + [[0.8, 0.2]] * 3)
    m = classification_metrics(y, probs)
    assert (m["precision"], m["recall"]) == (2 / 3, 2 / 3)
    assert m["f1"] == 2 * 2 / (3 + 3)
    neg_f1 = 2 * 3 / (4 + 4)
    assert m["macro_f1"] == (m["f1"] + neg_f1) / 2
    assert "f1" not in classification_metrics(np.arange(3), np.eye(3))


def test_accepts_bool_and_integral_float_labels() -> None:
    probs = [[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    ref = classification_metrics(np.array([0, 1, 1]), np.array(probs))
    assert classification_metrics(np.array([False, True, True]), np.array(probs)) == (
        ref
    )
    assert classification_metrics(np.array([0.0, 1.0, 1.0]), np.array(probs)) == ref


@pytest.mark.parametrize("seed", range(10))
def test_confusion_matrix_matches_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    num_classes = int(rng.integers(1, 6))
    y_true = rng.integers(0, num_classes, size=int(rng.integers(1, 50)))
    y_pred = rng.integers(0, num_classes, size=y_true.size)
    ours = confusion_matrix(y_true, y_pred, num_classes)
    ref = skm.confusion_matrix(y_true, y_pred, labels=list(range(num_classes)))
    assert ours.dtype == np.int64
    assert ours.shape == (num_classes, num_classes)
    np.testing.assert_array_equal(ours, ref)


def test_confusion_matrix_orientation() -> None:
    cm = confusion_matrix(np.array([0, 0, 1]), np.array([1, 1, 1]), 3)
    np.testing.assert_array_equal(cm, [[0, 2, 0], [0, 1, 0], [0, 0, 0]])


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_roc_curve_matches_sklearn(ties: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 40))
    y = rng.integers(0, 2, size=n)
    y[:2] = [0, 1]
    scores = rng.integers(0, 4, size=n) / 3 if ties else rng.normal(size=n)
    for drop in (False, True):
        fpr, tpr, thr = roc_curve(y, scores, drop_intermediate=drop)
        ref_fpr, ref_tpr, ref_thr = skm.roc_curve(y, scores, drop_intermediate=drop)
        # the same points to the last bit (the probe reports the dropped form)
        np.testing.assert_array_equal(fpr, ref_fpr)
        np.testing.assert_array_equal(tpr, ref_tpr)
        np.testing.assert_array_equal(thr, ref_thr)


def test_roc_curve_without_negatives_is_nan_fpr() -> None:
    fpr, tpr, thr = roc_curve(np.array([1, 1]), np.array([0.3, 0.6]))
    assert np.all(np.isnan(fpr))
    np.testing.assert_allclose(tpr, [0.0, 0.5, 1.0])
    np.testing.assert_array_equal(thr, [np.inf, 0.6, 0.3])


GOOD_Y = np.array([0, 1, 1])
GOOD_P = np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])


@pytest.mark.parametrize(
    ("y_true", "probs", "match"),
    [
        (GOOD_Y, GOOD_P[:, 0], "probs must be a 2-D"),
        (GOOD_Y, GOOD_P[:, :1], "probs must have C >= 2"),
        (np.zeros(0, int), np.zeros((0, 2)), "probs must contain at least one"),
        (GOOD_Y, np.array([[0.5, 0.5], [np.nan, 1.0], [1.0, 0.0]]), "probs .*finite"),
        (GOOD_Y, np.array([[0.5, 0.5], [np.inf, 0.0], [1.0, 0.0]]), "probs .*finite"),
        (GOOD_Y, np.array([["a", "b"]] * 3), "probs must be numeric"),
        (GOOD_Y[:2], GOOD_P, "y_true has 2 samples but probs has 3"),
        (GOOD_Y[:, None], GOOD_P, "y_true must be a 1-D"),
        (np.array([0, 2, 1]), GOOD_P, r"y_true must contain labels in \[0, 2\)"),
        (np.array([0, -1, 1]), GOOD_P, r"y_true must contain labels in \[0, 2\)"),
        (np.array([0.0, 0.5, 1.0]), GOOD_P, "y_true must contain integer"),
        (np.array(["0", "1", "1"]), GOOD_P, "y_true must contain integer"),
    ],
)
def test_classification_metrics_rejects_bad_input(
    y_true: np.ndarray, probs: np.ndarray, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        classification_metrics(y_true, probs)


def test_other_functions_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="num_classes must be >= 1"):
        confusion_matrix(GOOD_Y, GOOD_Y, 0)
    with pytest.raises(ValueError, match="y_pred must contain labels"):
        confusion_matrix(GOOD_Y, np.array([0, 3, 1]), 2)
    with pytest.raises(ValueError, match="y_true and y_pred must have the same"):
        confusion_matrix(GOOD_Y, GOOD_Y[:2], 2)
    with pytest.raises(ValueError, match="y_true_binary must contain labels"):
        roc_curve(np.array([0, 2]), np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="scores has 1 entries"):
        roc_curve(np.array([0, 1]), np.array([0.1]))
    with pytest.raises(ValueError, match="scores must contain only finite"):
        roc_curve(np.array([0, 1]), np.array([0.1, np.nan]))
    with pytest.raises(ValueError, match="groups must be a 1-D array with 3"):
        per_group_metrics(GOOD_Y, GOOD_P, np.array(["a", "b"]))


def test_module_does_not_import_sklearn() -> None:
    tree = ast.parse(Path(fm.__file__).read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert "sklearn" not in imported
    assert imported <= {"__future__", "numpy", "typing"}


def test_ece_by_hand() -> None:
    """Five samples, worked out on paper with 15 bins of width 1/15."""
    y = np.array([0, 1, 1, 0, 1])
    probs = np.array(
        [
            [0.95, 0.05],  # conf 0.95, bin (14/15, 1]: right
            [0.96, 0.04],  # conf 0.96, same bin: wrong
            [0.40, 0.60],  # conf 0.60 = 9/15 exactly: bin (8/15, 9/15], right
            [0.55, 0.45],  # conf 0.55, bin (8/15, 9/15]: right
            [0.30, 0.70],  # conf 0.70, bin (10/15, 11/15]: right
        ]
    )
    # bin 15: acc 1/2, conf 0.955 -> 2/5 * 0.455
    # bin 9:  acc 1,   conf 0.575 -> 2/5 * 0.425
    # bin 11: acc 1,   conf 0.70  -> 1/5 * 0.30
    expected = 0.4 * 0.455 + 0.4 * 0.425 + 0.2 * 0.30
    assert expected_calibration_error(y, probs) == pytest.approx(expected, abs=1e-12)
    assert classification_metrics(y, probs)["ece"] == pytest.approx(expected)
    # an edge confidence belongs to the bin it closes: 0.6 alone is in bin 9
    one = np.array([[0.4, 0.6]])
    assert expected_calibration_error(np.array([1]), one) == pytest.approx(0.4)
    assert expected_calibration_error(np.array([1]), one, bins=1) == pytest.approx(0.4)
    # the threshold decision of y_pred leaves ece (a property of probs) alone
    pred = np.array([1, 1, 1, 1, 1])
    assert (
        classification_metrics(y, probs, pred)["ece"]
        == (classification_metrics(y, probs)["ece"])
    )
    with pytest.raises(ValueError, match="bins"):
        expected_calibration_error(y, probs, bins=0)


@pytest.mark.parametrize("seed", range(10))
def test_ece_matches_the_sample_by_sample_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y, probs = random_case(rng, 2 + seed % 3, ties=seed % 2 == 0, n=80)
    assert expected_calibration_error(y, probs) == pytest.approx(
        reference_ece(y, probs), abs=1e-12
    )


def test_non_finite_probabilities_have_their_own_error() -> None:
    """The run loop tells a diverged model (NaN probabilities) from any other bad
    input by this class; it stays a ValueError for every other caller."""
    probs = np.array([[0.5, 0.5], [np.nan, np.nan], [1.0, 0.0]])
    with pytest.raises(fm.NonFiniteProbabilities) as err:
        fm.classification_metrics(np.array([0, 1, 0]), probs)
    assert isinstance(err.value, ValueError)
    with pytest.raises(ValueError) as other:  # a shape error is not this one
        fm.classification_metrics(np.array([0, 1]), np.ones((2, 1)))
    assert not isinstance(other.value, fm.NonFiniteProbabilities)
