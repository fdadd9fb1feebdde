"""The one loader of model files of every kind: :mod:`fedpath.loading`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest

from fedpath.artifact import LoadedModel, ModelMeta
from fedpath.config import ModelConfig
from fedpath.ensemble import LoadedEnsemble, save_ensemble
from fedpath.errors import ArtifactError
from fedpath.loading import KINDS, load_mil_model, load_model
from fedpath.mil.export import LoadedMILModel
from fedpath.model_file import read_container, write_container
from fedpath.models.backbones import build_model
from tests.inference.conftest import image_model_file, member, mil_model_file


def test_each_kind_of_file_loads_as_its_own_model(tmp_path: Path) -> None:
    image = load_model(image_model_file(tmp_path / "image.fpm"))
    mil = load_model(mil_model_file(tmp_path / "mil.fpm"))
    members = [member(tmp_path / f"{i}.fpm", i) for i in range(2)]
    save_ensemble(tmp_path / "ens.fpm", members)
    ens = load_model(tmp_path / "ens.fpm")
    assert type(image) is LoadedModel and type(mil) is LoadedMILModel
    assert type(ens) is LoadedEnsemble
    assert sorted(KINDS) == ["ensemble", "image", "mil"]
    assert load_mil_model(tmp_path / "mil.fpm").meta == mil.meta


def test_an_unknown_kind_or_the_wrong_kind_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    net = build_model(ModelConfig(backbone="small_cnn", params={"widths": [4]}), 2)
    head = asdict(
        ModelMeta("small_cnn", {"widths": [4]}, ["a", "b"], 16, [0.5] * 3, [0.2] * 3)
    )
    write_container(tmp_path / "new.fpm", {**head, "kind": "hologram"}, net)
    assert read_container(tmp_path / "new.fpm")[0]["kind"] == "hologram"
    with pytest.raises(
        ArtifactError, match=r"new.fpm' holds a model of kind 'hologram'"
    ):
        load_model(tmp_path / "new.fpm")
    image = image_model_file(tmp_path / "image.fpm")
    with pytest.raises(
        ArtifactError, match=r"image.fpm' holds an image model, not a MIL"
    ):
        load_mil_model(image)
