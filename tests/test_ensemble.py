"""Ensembles of image models as one model file: :mod:`fedpath.ensemble`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.artifact import LoadedModel
from fedpath.ensemble import EnsembleMeta, LoadedEnsemble, make_ensemble, save_ensemble
from fedpath.errors import ArtifactError
from fedpath.loading import load_model
from tests.inference.conftest import CLASSES, SIZE, member, mil_model_file


def _image_model(path: Path) -> LoadedModel:
    model = load_model(path)
    assert isinstance(model, LoadedModel)
    return model


def _images(n: int = 6) -> torch.Tensor:
    return torch.rand(n, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))


def test_the_ensembles_probability_is_the_mean_of_its_members(tmp_path: Path) -> None:
    # members as their own files apply them: a temperature, dihedral views
    paths = [
        member(tmp_path / "a.fpm", 0),
        member(tmp_path / "b.fpm", 1, temperature=2.5),
        member(tmp_path / "c.fpm", 2, tta="dihedral", temperature=0.7),
    ]
    x = _images()
    alone = [_image_model(p).predict_proba(x) for p in paths]
    assert not np.allclose(alone[0], alone[1])  # the members differ
    out = save_ensemble(tmp_path / "ens.fpm", paths)
    ens = load_model(tmp_path / "ens.fpm")
    assert isinstance(ens, LoadedEnsemble) and isinstance(ens, LoadedModel)
    assert isinstance(ens.meta, EnsembleMeta)
    np.testing.assert_allclose(ens.predict_proba(x), np.mean(alone, 0), atol=1e-6)
    assert ens.kind == "ensemble" and ens.meta.kind == "ensemble"
    assert ens.meta.backbone == "ensemble" and ens.meta.threshold is None
    assert ens.meta.trained_on == ["site_0", "site_1", "site_2"]
    assert [m["seed"] for m in out.members] == [0, 1, 2]
    assert [m["file"] for m in ens.meta.members] == ["a.fpm", "b.fpm", "c.fpm"]
    assert len(ens.meta.members[0]["file_sha256"]) == 64
    assert ens.class_names == CLASSES and ens.image_size == SIZE
    assert ens.meta.bn_fixed == []  # every member trained all of its layers


def test_an_ensemble_keeps_its_members_frozen_batchnorm_layers(tmp_path: Path) -> None:
    # members whose first stage was frozen in training: AdaBN of the ensemble
    # (fedpath adapt-bn) must leave those layers in every member
    paths = [
        member(tmp_path / f"{i}.fpm", i, bn_fixed=["encoder.stages.0.1"])
        for i in (0, 1)
    ]
    save_ensemble(tmp_path / "ens.fpm", paths)
    ens = load_model(tmp_path / "ens.fpm")
    assert isinstance(ens, LoadedEnsemble)
    assert ens.meta.bn_fixed == [
        "members.0.encoder.stages.0.1",
        "members.1.encoder.stages.0.1",
    ]
    names = {
        n for n, m in ens.model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)
    }
    assert set(ens.meta.bn_fixed) <= names


def test_an_ensembles_operating_point_decides_on_the_mean(tmp_path: Path) -> None:
    paths = [member(tmp_path / f"{i}.fpm", i, threshold=0.9) for i in range(2)]
    save_ensemble(tmp_path / "ens.fpm", paths, threshold=0.3)
    ens = load_model(tmp_path / "ens.fpm")
    assert isinstance(ens, LoadedEnsemble)
    probs = ens.predict_proba(_images(20))
    assert ens.meta.threshold == 0.3  # the members' 0.9 is not carried over
    np.testing.assert_array_equal(ens.decide(probs), (probs[:, 1] >= 0.3).astype(int))


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"class_names": ["tumour", "normal"]}, "class names (and their order)"),
        ({"class_names": ["a", "b", "c"]}, "class names (and their order)"),
        ({"image_size": SIZE * 2}, "input size image_size=32"),
        ({"mean": [0.4, 0.5, 0.5]}, "colour normalization (mean)"),
        ({"std": [0.3, 0.2, 0.2]}, "colour normalization (std)"),
        ({"zoom": 2.0}, "centre zoom (data.params.zoom) zoom=2.0"),
    ],
)
def test_members_that_disagree_on_the_input_are_refused_naming_the_field(
    tmp_path: Path, change: dict[str, object], words: str
) -> None:
    a = member(tmp_path / "a.fpm", 0)
    b = member(tmp_path / "b.fpm", 1, **change)
    with pytest.raises(ArtifactError) as err:
        make_ensemble([a, b])
    text = str(err.value)
    assert f"ensemble member 2 ('{b}') has {words}" in text
    assert f"member 1 ('{a}')" in text


def test_what_cannot_be_an_ensemble_is_refused_naming_why(tmp_path: Path) -> None:
    a, b = member(tmp_path / "a.fpm", 0), member(tmp_path / "b.fpm", 1)
    with pytest.raises(ArtifactError, match="two or more member model files, got 1"):
        make_ensemble([a])
    mil = mil_model_file(tmp_path / "mil.fpm")
    with pytest.raises(ArtifactError, match=r"mil.fpm' holds a mil model \(slide"):
        make_ensemble([a, mil])
    save_ensemble(tmp_path / "ens.fpm", [a, b])
    with pytest.raises(ArtifactError, match="ens.fpm' holds an ensemble"):
        make_ensemble([a, tmp_path / "ens.fpm"])
    with pytest.raises(ArtifactError, match="is one of the members"):
        save_ensemble(b, [a, b])
    three = [
        member(tmp_path / f"t{i}.fpm", i, class_names=["x", "y", "z"]) for i in (0, 1)
    ]
    with pytest.raises(ArtifactError, match=r"--threshold: .* the members have 3"):
        make_ensemble(three, threshold=0.5)


def test_an_ensemble_file_that_lost_its_members_is_refused(tmp_path: Path) -> None:
    from dataclasses import asdict

    from fedpath.model_file import write_container

    meta, net = make_ensemble(
        [member(tmp_path / "a.fpm", 0), member(tmp_path / "b.fpm", 1)]
    )
    head = {**asdict(meta), "members": meta.members[:1]}
    write_container(tmp_path / "bad.fpm", head, net)
    with pytest.raises(ArtifactError, match="'members' must list two or more"):
        load_model(tmp_path / "bad.fpm")
    head = {**asdict(meta), "members": [meta.members[0], {"backbone": 3}]}
    write_container(tmp_path / "bad.fpm", head, net)
    with pytest.raises(ArtifactError, match="bad.fpm, member 2"):
        load_model(tmp_path / "bad.fpm")
