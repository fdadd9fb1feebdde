"""The one data opener for model files of either kind
(:mod:`fedpath.inference.opening`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.artifact import LoadedModel
from fedpath.errors import ConfigError, DataError
from fedpath.inference.opening import check_split, open_data
from fedpath.loading import load_model
from fedpath.mil.export import LoadedMILModel
from tests.inference.conftest import (
    DIM,
    SIZE,
    image_model_file,
    mil_model_file,
    write_bags,
    write_images,
)

RUN_PARAMS = {"num_hospitals": 2, "samples_per_hospital": 8, "image_size": 32}
RUN_DATA = {"name": "synthetic", "root": None, "params": RUN_PARAMS}


def test_the_model_kind_picks_images_or_bags(
    image_model: LoadedModel, mil_model: LoadedMILModel, tmp_path: Path
) -> None:
    write_images(tmp_path / "images", {"normal": 2, "tumour": 1})
    write_bags(tmp_path / "bags", {"normal": 1, "TUMOUR": 2})
    opened = open_data(str(tmp_path / "images"), image_model)
    assert opened.dataset.kind == "images" and opened.domains is None
    assert opened.settings is None and opened.renamed == {}
    opened = open_data(
        str(tmp_path / "bags"), mil_model, class_map={"TUMOUR": "tumour"}
    )
    assert opened.dataset.kind == "bags" and opened.renamed == {"TUMOUR": "tumour"}
    assert len(opened.dataset.split("bags", "all")) == 3


def test_files_have_no_split_and_the_errors_name_the_kinds_files(
    image_model: LoadedModel, mil_model: LoadedMILModel, tmp_path: Path
) -> None:
    (tmp_path / "site").mkdir()
    with pytest.raises(ConfigError, match="folder or manifest.*every image is scored"):
        open_data(str(tmp_path / "site"), image_model, split="test")
    with pytest.raises(ConfigError, match="folder or labels CSV.*every slide is"):
        open_data(str(tmp_path / "site"), mil_model, split="train")
    with pytest.raises(ConfigError, match="--split: expected one of all, test, train"):
        open_data(str(tmp_path / "site"), mil_model, split="val")
    with pytest.raises(ConfigError, match="got 'x'"):
        check_split("x")
    text = tmp_path / "notes.txt"
    text.write_text("x")
    with pytest.raises(DataError, match="expected a manifest .csv file or a folder"):
        open_data(str(text), image_model)
    with pytest.raises(DataError, match="expected a labels .csv file or a folder"):
        open_data(str(text), mil_model)


def test_a_registered_dataset_is_rebuilt_with_the_runs_settings(
    tmp_path: Path,
) -> None:
    model = load_model(image_model_file(tmp_path / "m.fpm", data=RUN_DATA))
    opened = open_data("synthetic:hospital_1", model)
    assert opened.domains == ["hospital_1"]
    assert (
        opened.settings is not None and opened.settings["source"] == "the model's run"
    )
    # the run's params, at the model's input size
    assert opened.settings["params"] == {**RUN_PARAMS, "image_size": SIZE}
    over = open_data("synthetic", model, overrides=["data.params.num_hospitals=3"])
    assert over.settings is not None and over.domains is None
    assert over.settings["params"]["num_hospitals"] == 3
    assert over.settings["source"] == (
        "the model's run, with data.params.num_hospitals"
    )
    with pytest.raises(DataError, match="no domain .hospital_7.; domains: hospital_0"):
        open_data("synthetic:hospital_7", model)
    bare = load_model(image_model_file(tmp_path / "bare.fpm"))
    opened = open_data("synthetic", bare, overrides=["data.params.num_hospitals=2"])
    assert opened.settings is not None
    assert "records no data settings" in opened.settings["source"]


def test_a_registered_bag_dataset_for_a_mil_model(tmp_path: Path) -> None:
    data = {"name": "synthetic_bags", "params": {"dim": DIM, "num_hospitals": 2}}
    model = load_model(mil_model_file(tmp_path / "m.fpm", data=data))
    opened = open_data("synthetic_bags:hospital_0", model)
    assert opened.dataset.kind == "bags" and opened.domains == ["hospital_0"]
    assert opened.settings is not None and opened.settings["params"]["dim"] == DIM
    with pytest.raises(DataError, match="holds images.*is a MIL model"):
        open_data("synthetic", model)
