"""A site's slide bags for a MIL model (:mod:`fedpath.inference.bags`)."""

from __future__ import annotations

import csv
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from fedpath.config import DataConfig
from fedpath.data.base import DataError
from fedpath.inference.bags import BagReader, bag_dataset, open_bag_files
from fedpath.loading import load_mil_model
from fedpath.mil.export import LoadedMILModel
from tests.inference.conftest import DIM, mil_model_file, write_bags


def _labels(path: Path, rows: list[list[str]], header: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_the_reader_checks_dimension_skips_and_warns_of_another_encoder(
    tmp_path: Path,
) -> None:
    model = load_mil_model(
        mil_model_file(tmp_path / "m.fpm", encoder={"backbone": "uni"})
    )
    good = write_bags(tmp_path, {"a": 1})[0]
    wrong = write_bags(tmp_path, {"b": 1}, dim=DIM + 1)[0]
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"no tensor")
    h5 = tmp_path / "other.h5"
    with h5py.File(h5, "w") as fh:
        fh.create_dataset("features", data=np.zeros((3, DIM), np.float32))
        fh.attrs["backbone"] = "resnet50_trunc"
    reader = BagReader(model, skip_bad=True)
    feats, coords = reader.read(good) or (None, None)
    assert feats is not None and feats.shape[1] == DIM and coords is None
    assert reader.read(broken) is None and reader.skipped == [str(broken)]
    with pytest.raises(DataError, match=rf"b0.pt.*dimension {DIM + 1}.*expects {DIM}"):
        reader.read(wrong)
    assert reader.read(h5) is not None and reader.read(h5) is not None
    assert reader.warnings == [  # once, however many bags say so
        "bags made by another encoder than the model's (backbone: model 'uni', "
        "bags 'resnet50_trunc')"
    ]
    with pytest.raises(DataError, match="--skip-bad"):
        BagReader(model, skip_bad=False).read(broken)


def test_a_labels_csv_finds_bags_by_path_or_clams_layout(
    mil_model: LoadedMILModel, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    (site / "pt_files").mkdir(parents=True)
    torch.save(torch.randn(4, DIM), site / "pt_files" / "s1.pt")
    write_bags(site / "elsewhere", {"x": 1})
    labels = _labels(
        site / "slides.csv",
        [["s1", "Normal", ""], ["sx0", "TUMOUR", "h9"]],
        ["slide_id", "label", "domain"],
    )
    with pytest.raises(DataError, match=r"slides.csv:3: slide 'sx0' has no bag file"):
        open_bag_files(labels, str(labels), mil_model, False, {})
    _labels(
        labels,
        [["s1", "Normal", "", ""], ["sx0", "TUMOUR", "h9", "elsewhere/x/sx0.pt"]],
        ["slide_id", "label", "domain", "path"],
    )
    ds, names, warnings = open_bag_files(site, str(site), mil_model, False, {})
    assert names == {"Normal": "normal", "TUMOUR": "tumour"} and warnings == []
    assert ds.name == "bags_csv" and sorted(ds.domains) == ["h9", "site"]
    assert ds.labels.tolist() == [0, 1]
    with pytest.raises(DataError, match="needs the columns slide_id"):
        open_bag_files(
            _labels(tmp_path / "bad.csv", [["a"]], ["x"]), "bad", mil_model, False, {}
        )


def test_class_folders_of_bags_and_a_features_folder_without_labels(
    mil_model: LoadedMILModel, tmp_path: Path
) -> None:
    write_bags(tmp_path / "site", {"normal": 2, "Tumour": 1})
    ds, names, _ = open_bag_files(tmp_path / "site", "site", mil_model, False, {})
    assert ds.name == "bag_folders" and names == {"Tumour": "tumour"}
    assert ds.labels.tolist() == [1, 0, 0] and ds.domains == ["site"]  # Tumour/ first
    write_bags(tmp_path / "features", {"h5_files": 1})
    with pytest.raises(DataError, match="is a features folder.*add slides.csv"):
        open_bag_files(tmp_path / "features", "f", mil_model, False, {})
    (tmp_path / "bare").mkdir()
    with pytest.raises(DataError, match="holds no class folders"):
        open_bag_files(tmp_path / "bare", "bare", mil_model, False, {})
    (tmp_path / "junk" / "normal").mkdir(parents=True)
    (tmp_path / "junk" / "normal" / "a.pt").write_bytes(b"x")
    with pytest.raises(DataError, match="every bag file of 'junk' was unreadable"):
        open_bag_files(tmp_path / "junk", "junk", mil_model, True, {})


def test_a_registered_dataset_of_the_models_dimension_only(
    mil_model: LoadedMILModel,
) -> None:
    small = {"num_hospitals": 2, "slides_per_hospital": 4}
    ds = bag_dataset(
        "synthetic_bags",
        DataConfig(name="synthetic_bags", params={**small, "dim": DIM}),
        mil_model,
    )
    assert ds.kind == "bags"
    with pytest.raises(DataError, match="bag has feature dimension 6.*expects 4"):
        bag_dataset(
            "synthetic_bags",
            DataConfig(name="synthetic_bags", params={**small, "dim": 6}),
            mil_model,
        )
    images = DataConfig(name="synthetic", params={"num_hospitals": 2})
    with pytest.raises(DataError, match="holds images.*is a MIL model"):
        bag_dataset("synthetic", images, mil_model)
