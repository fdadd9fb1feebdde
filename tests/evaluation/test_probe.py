"""Linear probing (FedAD Section 5.5) on synthetic features, checked against sklearn."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedpath.config import ConfigError, load_config
from fedpath.evaluation.probe import fit_probe_model, l2_to_c, linear_probe


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
    json.dumps(out, allow_nan=False)  # defined metrics: strict JSON
    assert out["f1"] > 0.8 and out["auroc"] > 0.9
    assert out["folds"] == 5 and out["C"] in (0.01, 1.0, 100.0)
    assert (out["n_train"], out["n_test"]) == (80, 40)
    assert np.array(out["confusion"]).sum() == 40
    assert out["roc"]["fpr"][0] == 0.0 and out["roc"]["tpr"][-1] == 1.0
    assert set(out["cv_f1"]) == {"0.01", "1.0", "100.0"}
    assert out["C"] == max((0.01, 1.0, 100.0), key=lambda c: out["cv_f1"][repr(c)])


def sklearn_fit(
    tx: np.ndarray, ty: np.ndarray, vx: np.ndarray, c: float
) -> tuple[np.ndarray, np.ndarray]:
    """Test predictions and probabilities of the probe's model fitted directly."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(tx)
    clf = LogisticRegression(C=c, max_iter=100).fit(scaler.transform(tx), ty)
    return clf.predict(scaler.transform(vx)), clf.predict_proba(scaler.transform(vx))


def test_binary_matches_a_direct_sklearn_fit() -> None:
    from sklearn import metrics as skm

    tx, ty = blobs(60, shift=0.7, seed=2)
    vx, vy = blobs(50, shift=0.7, seed=3)
    out = linear_probe(tx, ty, vx, vy, cs=(0.1,), max_iter=100)
    pred, prob = sklearn_fit(tx, ty, vx, 0.1)
    # counts-based scores: the same numbers to the last bit as scikit-learn's
    assert out["f1"] == skm.f1_score(vy, pred)
    assert out["precision"] == skm.precision_score(vy, pred)
    assert out["recall"] == skm.recall_score(vy, pred)
    assert out["accuracy"] == skm.accuracy_score(vy, pred)
    assert out["balanced_accuracy"] == skm.balanced_accuracy_score(vy, pred)
    assert out["macro_f1"] == skm.f1_score(vy, pred, average="macro")
    assert out["confusion"] == skm.confusion_matrix(vy, pred).tolist()
    assert out["mcc"] == pytest.approx(skm.matthews_corrcoef(vy, pred), abs=1e-12)
    assert out["auroc"] == pytest.approx(skm.roc_auc_score(vy, prob[:, 1]), abs=1e-12)
    fpr, tpr, _ = skm.roc_curve(vy, prob[:, 1])
    assert out["roc"] == {"fpr": fpr.tolist(), "tpr": tpr.tolist()}


def test_cv_f1_is_sklearn_f1_of_the_folds() -> None:
    from sklearn.metrics import f1_score
    from sklearn.model_selection import StratifiedKFold

    tx, ty = blobs(40, shift=0.5, seed=6)
    vx, vy = blobs(20, shift=0.5, seed=7)
    out = linear_probe(tx, ty, vx, vy, folds=3, cs=(0.1, 1.0), seed=4)
    splits = list(StratifiedKFold(3, shuffle=True, random_state=4).split(tx, ty))
    for c in (0.1, 1.0):
        scores = [
            f1_score(ty[va], sklearn_fit(tx[tr], ty[tr], tx[va], c)[0], zero_division=0)
            for tr, va in splits
        ]
        assert out["cv_f1"][repr(c)] == float(np.mean(scores))


def test_multiclass_is_macro_without_roc_curve() -> None:
    from sklearn import metrics as skm

    tx, ty = blobs(90, classes=3, seed=4)
    vx, vy = blobs(45, classes=3, seed=5)
    out = linear_probe(tx, ty, vx, vy, cs=(1.0,))
    pred, _ = sklearn_fit(tx, ty, vx, 1.0)
    assert np.array(out["confusion"]).shape == (3, 3)
    assert "f1" not in out and "roc" not in out  # no positive class
    for name, score in (
        ("macro_f1", skm.f1_score),
        ("macro_precision", skm.precision_score),
        ("macro_recall", skm.recall_score),
    ):
        assert out[name] == score(vy, pred, average="macro", zero_division=0), name
    assert 0.0 <= out["macro_f1"] <= 1.0 and not math.isnan(out["auroc"])


def test_single_class_test_split_has_nan_auroc_and_string_labels() -> None:
    tx, ty = blobs(40, seed=8)
    vx, _ = blobs(10, seed=9)
    names = np.array(["normal", "tumour"])
    out = linear_probe(tx, names[ty], vx, np.full(10, "tumour"), cs=(1.0,))
    assert out["classes"] == ["normal", "tumour"]
    assert math.isnan(out["auroc"])  # the one marker of an undefined value
    assert out["roc"] == {"fpr": [], "tpr": []}
    assert sum(out["confusion"][0]) == 0 and sum(out["confusion"][1]) == 10
    assert out["recall"] == out["accuracy"]  # every test image is a positive


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


def overlapping_blobs(n: int, seed: int, dim: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Two overlapping, unstandardized classes (the penalty matters)."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = rng.normal(size=(n, dim)) * 2.0 + 5.0
    x[:, 0] += 1.5 * y
    x[:, 1] -= 0.8 * y
    return x, y


def direct_fit(x: np.ndarray, y: np.ndarray, c: float) -> tuple[object, object]:
    """StandardScaler + scikit-learn's LogisticRegression(C=c), fitted by hand."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(x)
    clf = LogisticRegression(C=c, solver="lbfgs", max_iter=1000)
    return scaler, clf.fit(scaler.transform(x), y)


def test_l2_to_c_is_the_per_sample_mean_convention() -> None:
    assert l2_to_c(1e-4, 300) == pytest.approx(1 / 0.03)
    # the minimizer of mean log-loss + l2/2 ||w||^2 is sklearn's with that C:
    # its gradient vanishes at sklearn's solution
    x, y = overlapping_blobs(120, seed=0)
    scaler, clf = direct_fit(x, y, l2_to_c(0.05, len(y)))
    z = scaler.transform(x)  # type: ignore[attr-defined]
    w, b = clf.coef_[0], clf.intercept_[0]  # type: ignore[attr-defined]
    p = 1 / (1 + np.exp(-(z @ w + b)))
    grad_w = z.T @ (p - y) / len(y) + 0.05 * w
    grad_b = float(np.mean(p - y))  # the intercept is not penalized
    assert np.abs(grad_w).max() < 1e-4 and abs(grad_b) < 1e-4
    with pytest.raises(ConfigError, match="penalty"):
        l2_to_c(0.0, 10)


@pytest.mark.parametrize("l2", [1e-4, 0.1])
def test_fixed_l2_probe_matches_sklearn_with_c_over_n(l2: float) -> None:
    tx, ty = overlapping_blobs(90, seed=1)
    vx, vy = overlapping_blobs(40, seed=2)
    n = len(ty)
    out = linear_probe(tx, ty, vx, vy, l2=l2, max_iter=1000, folds=5)
    assert out["C"] == pytest.approx(1 / (n * l2), rel=1e-12)
    assert out["l2"] == pytest.approx(l2, rel=1e-12)
    assert out["selection"] == "fixed_l2"
    assert out["cv_f1"] == {} and out["folds"] == 0  # no cross-validation
    model = fit_probe_model(tx, ty, out["C"], max_iter=1000)
    scaler, clf = direct_fit(tx, ty, 1 / (n * l2))
    np.testing.assert_allclose(model[-1].coef_, clf.coef_, rtol=1e-6, atol=1e-8)  # type: ignore[attr-defined]
    np.testing.assert_allclose(
        model[-1].intercept_,
        clf.intercept_,  # type: ignore[attr-defined]
        rtol=1e-6,
        atol=1e-8,
    )
    # and the reported metrics are that model's on the test split
    from sklearn.metrics import roc_auc_score

    proba = clf.predict_proba(scaler.transform(vx))  # type: ignore[attr-defined]
    want_acc = float(np.mean(np.argmax(proba, axis=1) == vy))
    assert out["accuracy"] == pytest.approx(want_acc)
    assert out["auroc"] == pytest.approx(roc_auc_score(vy, proba[:, 1]), abs=1e-9)


def test_penalty_changes_the_fit_and_cv_is_the_default() -> None:
    tx, ty = overlapping_blobs(90, seed=3)
    vx, vy = overlapping_blobs(40, seed=4)
    weak = fit_probe_model(tx, ty, l2_to_c(1e-4, len(ty)), 1000)[-1].coef_
    strong = fit_probe_model(tx, ty, l2_to_c(1.0, len(ty)), 1000)[-1].coef_
    assert np.linalg.norm(strong) < 0.5 * np.linalg.norm(weak)
    cv = linear_probe(tx, ty, vx, vy, cs=(0.1, 1.0))
    assert cv["selection"] == "cv" and set(cv["cv_f1"]) == {"0.1", "1.0"}
    assert cv["l2"] == pytest.approx(1 / (len(ty) * cv["C"]))


@pytest.mark.parametrize("bad", [0.0, -1e-4, float("nan"), float("inf")])
def test_bad_l2_is_an_error(bad: float) -> None:
    tx, ty = overlapping_blobs(20, seed=5)
    with pytest.raises(ConfigError, match="l2"):
        linear_probe(tx, ty, tx, ty, l2=bad)


@pytest.mark.parametrize("bad", ["0.0", "-0.0001"])
def test_bad_probe_l2_is_a_config_error_naming_the_key(
    tmp_path: Path, bad: str
) -> None:
    with pytest.raises(ConfigError, match=r"evaluation\.probe_l2.*> 0"):
        load_config(None, [f"output_dir={tmp_path}", f"evaluation.probe_l2={bad}"])
    ok = load_config(None, [f"output_dir={tmp_path}", "evaluation.probe_l2=1e-4"])
    assert ok.evaluation.probe_l2 == pytest.approx(1e-4)
    default = load_config(None, [f"output_dir={tmp_path}"])
    assert default.evaluation.probe_l2 is None  # today's CV over probe_cs


def test_a_fedad_run_with_probe_l2_probes_with_the_fixed_penalty(
    tmp_path: Path,
) -> None:
    import json

    from fedpath.runtime.experiment import run_dir_for, run_experiment
    from tests.ssl_helpers import ssl_cfg

    for l2, selection in ((None, "cv"), (1e-4, "fixed_l2")):
        out = tmp_path / str(l2)
        value = "null" if l2 is None else l2
        probe = ("evaluation.protocol=linear_probe", f"evaluation.probe_l2={value}")
        cfg = ssl_cfg(out, "fedad", *probe)
        run_experiment(cfg)
        final = json.loads(
            (run_dir_for(cfg, "hospital_2", 0) / "final.json").read_text()
        )["evaluation"]["target"]
        assert final["selection"] == selection
        if l2 is not None:
            assert final["l2"] == pytest.approx(l2)
