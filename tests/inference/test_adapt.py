"""``fedpath adapt-bn``'s model file (:mod:`fedpath.inference.adapt`)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from fedpath.artifact import LoadedModel
from fedpath.data.base import DataError
from fedpath.errors import ArtifactError
from fedpath.inference.adapt import adapt_model_file
from fedpath.loading import load_model
from fedpath.mil.export import LoadedMILModel
from tests.inference.conftest import write_images


def test_only_the_batchnorm_statistics_change_and_are_recorded(
    image_model: LoadedModel, tmp_path: Path
) -> None:
    write_images(tmp_path / "site", {"any": 5})
    out = tmp_path / "adapted.fpm"
    info = adapt_model_file(image_model, tmp_path / "site", out, batch_size=2)
    # batches of 2: the fifth image alone has no batch variance to use
    assert info == {"images": 4, "skipped": [], "kept": 0}  # no frozen stages
    adapted = load_model(out)
    assert isinstance(adapted, LoadedModel)
    record = adapted.meta.adapted_bn
    assert record["images"] == 4 and record["folder"] == "site"
    assert image_model.path is not None
    want = hashlib.sha256(image_model.path.read_bytes()).hexdigest()
    assert record["from_sha256"] == want
    before, after = image_model.model.state_dict(), adapted.model.state_dict()
    stats = [k for k in before if k.endswith(("running_mean", "running_var"))]
    assert stats and all(not torch.equal(before[k], after[k]) for k in stats)
    weights = [k for k in before if k.endswith(("weight", "bias"))]
    assert all(torch.equal(before[k], after[k]) for k in weights)


def test_the_model_itself_and_mil_models_are_refused(
    image_model: LoadedModel, mil_model: LoadedMILModel, tmp_path: Path
) -> None:
    assert image_model.path is not None
    with pytest.raises(DataError, match="is the model file itself"):
        adapt_model_file(image_model, tmp_path, image_model.path)
    with pytest.raises(ArtifactError, match="holds a mil model.*for image models"):
        adapt_model_file(mil_model, tmp_path, tmp_path / "x.fpm")
