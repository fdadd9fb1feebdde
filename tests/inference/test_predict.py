"""CSV predictions of a model file (:mod:`fedpath.inference.predict`)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.artifact import LoadedModel
from fedpath.data.base import DataError
from fedpath.data.files import load_image
from fedpath.inference.predict import predict_bags, predict_files
from fedpath.mil.export import LoadedMILModel
from tests.inference.conftest import DIM, SIZE, write_bags, write_images


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as fh:
        return list(csv.reader(fh))


def test_one_row_per_image_with_its_probabilities(
    image_model: LoadedModel, tmp_path: Path
) -> None:
    files = write_images(tmp_path / "site", {"x": 3, "y/z": 2})
    (tmp_path / "site" / "x" / "bad.png").write_bytes(b"")
    steps: list[tuple[int, int]] = []
    info = predict_files(
        image_model,
        tmp_path / "site",
        tmp_path / "p.csv",
        4,
        True,
        lambda *a: steps.append(a),
    )
    assert info == {"images": 5, "skipped": [str(tmp_path / "site" / "x" / "bad.png")]}
    assert steps == [(4, 6), (6, 6)]
    rows = _rows(tmp_path / "p.csv")
    assert rows[0] == ["path", "predicted", "prob_normal", "prob_tumour"]
    assert [r[0] for r in rows[1:]] == [str(f) for f in files]
    x = torch.from_numpy(np.stack([load_image(f, SIZE) for f in files]))
    probs = image_model.predict_proba(x)
    for row, p in zip(rows[1:], probs, strict=True):
        assert [float(v) for v in row[2:]] == pytest.approx(p.tolist(), abs=1e-6)
        assert row[1] == image_model.class_names[int(p.argmax())]
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no images"):
        predict_files(image_model, tmp_path / "empty", tmp_path / "q.csv")


def test_one_row_per_bag_at_full_precision(
    mil_model: LoadedMILModel, tmp_path: Path
) -> None:
    bags = write_bags(tmp_path / "site", {"a": 2})
    info = predict_bags(mil_model, tmp_path / "site", tmp_path / "p.csv")
    assert info == {"slides": 2, "skipped": [], "warnings": []}
    rows = _rows(tmp_path / "p.csv")
    assert rows[0] == ["slide", "path", "predicted", "prob_normal", "prob_tumour"]
    probs = mil_model.predict_proba([torch.load(b) for b in bags])
    for row, bag, p in zip(rows[1:], bags, probs, strict=True):
        assert row[:2] == [bag.stem, str(bag)]
        assert [float(v) for v in row[3:]] == p.tolist()  # repr: the same floats
    one = predict_bags(mil_model, bags[0], tmp_path / "one.csv")
    assert one["slides"] == 1
    png = write_images(tmp_path, {"img": 1})[0]
    with pytest.raises(DataError, match="is not a bag file"):
        predict_bags(mil_model, png, tmp_path / "x.csv")
    with pytest.raises(DataError, match="no bag files"):
        predict_bags(mil_model, tmp_path / "img", tmp_path / "x.csv")
    wrong = write_bags(tmp_path / "wrong", {"a": 1}, dim=DIM + 2)[0]
    with pytest.raises(DataError, match=f"expects {DIM}"):
        predict_bags(mil_model, wrong, tmp_path / "x.csv")
    assert not (tmp_path / "x.csv").exists()
