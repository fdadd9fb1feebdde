"""The backbones' params: widths and the ViT checkpoint rules name the
``model.params`` key."""

from __future__ import annotations

import pytest

from fedpath.params.models import SmallCNNParams, ViTParams
from fedpath.schema import ConfigError


def test_small_cnn_widths() -> None:
    assert SmallCNNParams(widths=[8, 16]).widths == [8, 16]
    with pytest.raises(ConfigError, match="'model.params.widths'"):
        SmallCNNParams(widths=[])


def test_vit_checkpoint_and_shape_rules() -> None:
    with pytest.raises(ConfigError, match="loads its weights only from a local file"):
        ViTParams()
    with pytest.raises(ConfigError, match="given with model.params.pretrained=false"):
        ViTParams(pretrained=False, checkpoint="x.bin")
    with pytest.raises(ConfigError, match="'model.params.sha256'"):
        ViTParams(checkpoint="x.bin", sha256="abc")
    with pytest.raises(ConfigError, match="a multiple of num_heads 12"):
        ViTParams(pretrained=False, embed_dim=100)
    with pytest.raises(ConfigError, match=r"'model.params.std'"):
        ViTParams(pretrained=False, std=[1.0, 0.0, 1.0])
    assert ViTParams(pretrained=False, num_stages=12).num_stages == 12
