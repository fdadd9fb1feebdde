"""The metrics of a model file on a site's data (:mod:`fedpath.inference.scoring`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.artifact import LoadedModel
from fedpath.data.bags import split_bags
from fedpath.errors import ConfigError, DataError
from fedpath.evaluation.metrics import confusion_matrix, metrics_with_confusion
from fedpath.inference.opening import open_data
from fedpath.inference.scoring import evaluate
from fedpath.loading import load_model
from fedpath.mil.export import LoadedMILModel
from tests.inference.conftest import image_model_file, write_bags, write_images


def _site(root: Path) -> Path:
    write_images(root, {"a/normal": 4, "a/tumour": 3, "b/normal": 2, "b/tumour": 5})
    return root


def test_an_image_models_metrics_are_those_of_its_probabilities(
    image_model: LoadedModel, tmp_path: Path
) -> None:
    ds = open_data(str(_site(tmp_path / "site")), image_model).dataset
    got = evaluate(image_model, ds, per_domain=True, bootstrap=20, seed=3)
    data = ds.split("a", "all"), ds.split("b", "all")
    images = torch.cat([d.load(np.arange(len(d))) for d in data])
    labels = np.concatenate([d.labels for d in data])
    probs = image_model.predict_proba(images)
    want = metrics_with_confusion(labels, probs)
    assert got["n"] == 14 and got["classes"] == ["normal", "tumour"]
    assert got["split"] == "all" and got["confusion"] == want["confusion"]
    assert got["accuracy"] == pytest.approx(want["accuracy"], abs=1e-12)
    assert got["bootstrap"]["resamples"] == 20 and got["bootstrap"]["seed"] == 3
    assert got["per_class"]["tumour"]["n"] == 8
    assert set(got["per_domain"]) == {"a", "b"} and got["per_domain"]["b"]["n"] == 7
    assert "temperature" not in got and "operating_point" not in got


def test_a_files_temperature_and_threshold_make_their_blocks(tmp_path: Path) -> None:
    model = load_model(
        image_model_file(tmp_path / "m.fpm", temperature=2.0, threshold=0.3)
    )
    assert isinstance(model, LoadedModel)
    ds = open_data(str(_site(tmp_path / "site")), model).dataset
    got = evaluate(model, ds, ["b"], bootstrap=0)
    assert got["n"] == 7 and got["temperature"] == 2.0 and "bootstrap" not in got
    split = ds.split("b", "all")
    probs = model.predict_proba(split.load(np.arange(len(split))))
    decided = (probs[:, 1] >= 0.3).astype(np.int64)
    op = got["operating_point"]
    assert op["threshold"] == 0.3
    assert op["confusion"] == confusion_matrix(split.labels, decided, 2).tolist()


def test_a_mil_model_scores_one_slide_per_bag(
    mil_model: LoadedMILModel, tmp_path: Path
) -> None:
    write_bags(tmp_path / "bags", {"normal": 2, "tumour": 2})
    ds = open_data(str(tmp_path / "bags"), mil_model).dataset
    got = evaluate(mil_model, ds, bootstrap=0)
    split = ds.split("bags", "all")
    probs = mil_model.predict_proba(split_bags(split))
    want = metrics_with_confusion(split.labels, probs)
    assert got["n"] == 4 and got["confusion"] == want["confusion"]
    assert got["auroc"] == pytest.approx(want["auroc"], abs=1e-12)
    with pytest.raises(DataError, match="has no test slides in bags"):
        evaluate(mil_model, ds, split="test")


def test_bad_options_are_named(image_model: LoadedModel, tmp_path: Path) -> None:
    ds = open_data(str(_site(tmp_path / "site")), image_model).dataset
    with pytest.raises(ConfigError, match="--bootstrap: expected 0"):
        evaluate(image_model, ds, bootstrap=-1)
    with pytest.raises(ConfigError, match="--split: expected one of"):
        evaluate(image_model, ds, split="val")
