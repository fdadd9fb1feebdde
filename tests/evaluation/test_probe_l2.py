"""The probe's fixed L2 penalty (FedAD's "L2 penalty of 1e-4"): C = 1 / (n * l2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpath.config import ConfigError, load_config
from fedpath.evaluation.probe import fit_probe_model, l2_to_c, linear_probe


def blobs(n: int, seed: int, dim: int = 5) -> tuple[np.ndarray, np.ndarray]:
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
    x, y = blobs(120, seed=0)
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
    tx, ty = blobs(90, seed=1)
    vx, vy = blobs(40, seed=2)
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
    tx, ty = blobs(90, seed=3)
    vx, vy = blobs(40, seed=4)
    weak = fit_probe_model(tx, ty, l2_to_c(1e-4, len(ty)), 1000)[-1].coef_
    strong = fit_probe_model(tx, ty, l2_to_c(1.0, len(ty)), 1000)[-1].coef_
    assert np.linalg.norm(strong) < 0.5 * np.linalg.norm(weak)
    cv = linear_probe(tx, ty, vx, vy, cs=(0.1, 1.0))
    assert cv["selection"] == "cv" and set(cv["cv_f1"]) == {"0.1", "1.0"}
    assert cv["l2"] == pytest.approx(1 / (len(ty) * cv["C"]))


@pytest.mark.parametrize("bad", [0.0, -1e-4, float("nan"), float("inf")])
def test_bad_l2_is_an_error(bad: float) -> None:
    tx, ty = blobs(20, seed=5)
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
