"""Linear probing (FedAD Section 5.5) on synthetic features, checked against sklearn."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedpath.config import ConfigError
from fedpath.evaluation.probe import linear_probe


def blobs(
    n: int, classes: int = 2, shift: float = 2.0, seed: int = 0, dim: int = 6
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    x = rng.normal(size=(n, dim)) * 3.0 + 10.0  # unstandardized on purpose
    x[:, 0] += shift * 3.0 * y
    return x, y


def test_binary_probe_reports_every_metric_as_json() -> None:
    tx, ty = blobs(80, seed=0)
    vx, vy = blobs(40, seed=1)
    out = linear_probe(tx, ty, vx, vy, folds=5, cs=(0.01, 1.0, 100.0))
    json.dumps(out, allow_nan=False)
    assert out["f1"] > 0.8 and out["auroc"] > 0.9
    assert out["folds"] == 5 and out["C"] in (0.01, 1.0, 100.0)
    assert (out["n_train"], out["n_test"]) == (80, 40)
    assert np.array(out["confusion"]).sum() == 40
    assert out["roc"]["fpr"][0] == 0.0 and out["roc"]["tpr"][-1] == 1.0
    assert set(out["cv_f1"]) == {"0.01", "1.0", "100.0"}
    assert out["C"] == max((0.01, 1.0, 100.0), key=lambda c: out["cv_f1"][repr(c)])


def test_matches_a_direct_sklearn_fit() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score, precision_score, recall_score, roc_auc_score
    from sklearn.preprocessing import StandardScaler

    tx, ty = blobs(60, shift=0.7, seed=2)
    vx, vy = blobs(50, shift=0.7, seed=3)
    out = linear_probe(tx, ty, vx, vy, cs=(0.1,), max_iter=100)
    scaler = StandardScaler().fit(tx)
    clf = LogisticRegression(C=0.1, max_iter=100).fit(scaler.transform(tx), ty)
    pred = clf.predict(scaler.transform(vx))
    prob = clf.predict_proba(scaler.transform(vx))[:, 1]
    assert out["f1"] == pytest.approx(f1_score(vy, pred))
    assert out["precision"] == pytest.approx(precision_score(vy, pred))
    assert out["recall"] == pytest.approx(recall_score(vy, pred))
    assert out["auroc"] == pytest.approx(roc_auc_score(vy, prob))


def test_multiclass_is_macro_without_roc_curve() -> None:
    tx, ty = blobs(90, classes=3, seed=4)
    vx, vy = blobs(45, classes=3, seed=5)
    out = linear_probe(tx, ty, vx, vy)
    assert np.array(out["confusion"]).shape == (3, 3)
    assert 0.0 <= out["f1"] <= 1.0 and out["auroc"] is not None
    assert "roc" not in out


def test_one_class_train_split_names_the_domain() -> None:
    tx, _ = blobs(20)
    vx, vy = blobs(10)
    with pytest.raises(ConfigError, match="hospital_3.*only class"):
        linear_probe(tx, np.zeros(20, int), vx, vy, where="domain 'hospital_3'")


def test_few_samples_per_class_reduce_the_folds() -> None:
    tx, ty = blobs(7)  # 4 of class 0, 3 of class 1
    vx, vy = blobs(10, seed=1)
    out = linear_probe(tx, ty, vx, vy, folds=5)
    assert out["folds"] == 3 and "reduced from 5 to 3" in out["folds_note"]
    single = linear_probe(tx[:3], np.array([0, 0, 1]), vx, vy, folds=5)
    assert single["folds"] == 0 and "single sample" in single["folds_note"]


def test_bad_shapes_are_reported() -> None:
    tx, ty = blobs(20)
    with pytest.raises(ValueError, match="dimensions"):
        linear_probe(tx, ty, tx[:, :3], ty)
    with pytest.raises(ConfigError, match="test split is empty"):
        linear_probe(tx, ty, tx[:0], ty[:0])
