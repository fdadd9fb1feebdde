from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

from fedpath.config import ConfigError, ModelConfig, load_config
from fedpath.models.backbones import NORM_TYPES, build_model, keys_of_modules


@pytest.mark.parametrize(
    ("backbone", "dim"), [("small_cnn", 128), ("resnet18", 512), ("resnet50", 2048)]
)
def test_encoder_classifier_split(backbone: str, dim: int) -> None:
    torch.manual_seed(0)
    model = build_model(
        load_config(None, [f"model.backbone={backbone}"]).model, 3
    ).eval()
    x = torch.rand(2, 3, 64, 64)
    z = model.encode(x)
    assert z.shape == (2, dim) == (2, model.feature_dim)
    logits = model(x)
    assert logits.shape == (2, 3)
    torch.testing.assert_close(logits, model.classifier(z))  # f = g o h
    maps = model.feature_maps(x)
    assert len(maps) == len(model.encoder.stages)
    assert maps[-1].shape[1] == dim


def test_feature_hook_rewrites_intermediate_maps() -> None:
    model = build_model(ModelConfig(params={"widths": [8, 16, 32]}), 2).eval()
    x = torch.rand(4, 3, 32, 32)
    seen: list[int] = []

    def hook(i: int, f: torch.Tensor) -> torch.Tensor:
        seen.append(i)
        return torch.zeros_like(f) if i == 2 else f

    out = model(x, hook)
    assert seen == [0, 1, 2]
    # last stage zeroed -> features are zero -> logits equal the classifier bias
    torch.testing.assert_close(out, model.classifier.bias.expand(4, 2))


def test_norm_keys_by_type_include_downsample_bn() -> None:
    model = build_model(ModelConfig(backbone="resnet18"), 2)
    keys = keys_of_modules(model, NORM_TYPES)
    assert "encoder.stages.1.0.downsample.1.running_mean" in keys
    assert "encoder.stem.1.weight" in keys
    assert not any("conv" in k for k in keys)


def test_pretrained_weights_from_local_torchvision_file(tmp_path: Path) -> None:
    tv = torchvision.models.resnet18(weights=None)
    path = tmp_path / "r18.pth"
    torch.save(tv.state_dict(), path)
    model = build_model(ModelConfig(backbone="resnet18", weights=str(path)), 2)
    stem, last_stage = model.encoder.stem, model.encoder.stages[3]
    assert isinstance(stem, nn.Sequential) and isinstance(last_stage, nn.Sequential)
    torch.testing.assert_close(stem[0].weight, tv.conv1.weight)
    bn2 = last_stage[1].bn2
    assert isinstance(bn2, nn.BatchNorm2d)
    torch.testing.assert_close(bn2.running_var, tv.layer4[1].bn2.running_var)


def test_pretrained_weights_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match="model.weights: file '.*missing.pth' does not exist"
    ):
        build_model(
            ModelConfig(backbone="resnet18", weights=str(tmp_path / "missing.pth")), 2
        )
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="cannot read '.*junk.pth'"):
        build_model(ModelConfig(backbone="resnet18", weights=str(junk)), 2)
    r50 = tmp_path / "r50.pth"
    torch.save(torchvision.models.resnet50(weights=None).state_dict(), r50)
    with pytest.raises(ConfigError, match="does not fit backbone"):
        build_model(ModelConfig(backbone="resnet18", weights=str(r50)), 2)


@pytest.mark.parametrize("norm", ["batch", "group", "instance", "none"])
def test_small_cnn_norms(norm: str) -> None:
    model = build_model(ModelConfig(params={"widths": [8, 16], "norm": norm}), 2)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 2)
    has_norm = bool(keys_of_modules(model, NORM_TYPES))
    assert has_norm == (norm != "none")
