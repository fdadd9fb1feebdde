"""An image model file is refused at load, naming the bad header field or tensor."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from PIL import Image

from fedpath.artifact import ArtifactError, ModelMeta, save_model
from fedpath.cli import main
from fedpath.loading import load_model
from tests.fixtures import rewrite_header


def _small(tmp_path: Path, nan: bool = False) -> Path:
    """A small image model file (a tiny CNN, two classes, 16 px)."""
    from fedpath.config import ModelConfig
    from fedpath.models.backbones import build_model

    torch.manual_seed(0)
    net = build_model(ModelConfig(backbone="small_cnn", params={"widths": [4]}), 2)
    if nan:  # what a diverged run would have exported
        with torch.no_grad():
            next(iter(net.parameters())).fill_(float("nan"))
    meta = ModelMeta("small_cnn", {"widths": [4]}, ["a", "b"], 16, [0.5] * 3, [0.2] * 3)
    return save_model(tmp_path / ("nan.fpm" if nan else "small.fpm"), net, meta)


def _set(key: str, value: object) -> Callable[[dict], None]:
    def edit(head: dict) -> None:
        if value is _DROP:
            head.pop(key)
        else:
            head[key] = value

    return edit


_DROP = object()


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("image_size", -5, "'image_size': expected a positive integer"),
        ("image_size", 0, "'image_size': expected a positive integer"),
        ("image_size", "32", "'image_size': expected an integer"),
        ("image_size", _DROP, "has no 'image_size' field"),
        ("backbone", _DROP, "has no 'backbone' field"),
        ("backbone", ["small_cnn"], "'backbone': expected a string"),
        ("backbone_params", [4], "'backbone_params': expected a mapping"),
        ("class_names", ["a", "a"], "'class_names': expected a non-empty list of u"),
        ("class_names", "ab", "'class_names': expected a list"),
        ("mean", [0.5, 0.5], r"'mean': expected 3 finite numbers"),
        ("std", [0.2, 0.0, 0.2], r"'std': expected 3 finite numbers > 0"),
        ("threshold", 1.5, r"'threshold': expected a number in \[0, 1\] or null"),
        ("temperature", "hot", "'temperature': expected a number"),
        ("input_size", -1, "'input_size': expected a positive integer"),
        ("tta", 3, "'tta': expected a string"),
        ("kind", 7, "holds a model of kind 7"),
    ],
)
def test_every_header_field_is_checked_at_load(
    tmp_path: Path, key: str, value: object, said: str
) -> None:
    bad = rewrite_header(_small(tmp_path), tmp_path / "bad.fpm", _set(key, value))
    with pytest.raises(ArtifactError, match=f"bad.fpm'.*{said}"):
        load_model(bad)


def test_a_mil_header_of_the_wrong_types_names_the_field(tmp_path: Path) -> None:
    def mil(head: dict) -> None:
        head.update(kind="mil", architecture="abmil", architecture_params={})
        head.update(in_dim="512", embedding_space="x")

    bad = rewrite_header(_small(tmp_path), tmp_path / "mil.fpm", mil)
    with pytest.raises(ArtifactError, match="mil.fpm'.*'in_dim': expected an int"):
        load_model(bad)


def test_a_model_with_non_finite_weights_is_refused_by_predict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _small(tmp_path, nan=True)
    with pytest.raises(ArtifactError, match="nan.fpm': tensor '.*' holds non-finite"):
        load_model(path)
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.new("RGB", (16, 16), (200, 100, 150)).save(folder / "x.png")
    out = tmp_path / "pred.csv"
    assert main(["predict", str(path), str(folder), "--out", str(out), "-q"]) == 2
    assert "holds non-finite values" in capsys.readouterr().err
    assert not out.exists()  # no `nan` probabilities written
