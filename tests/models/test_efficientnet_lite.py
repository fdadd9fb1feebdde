"""EfficientNet-Lite building blocks (fedpath.models.efficientnet_lite).

The whole network against the reference package is tested in
``test_pretrained.py``; these check the pieces against their definitions.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fedpath.models.efficientnet_lite import VARIANTS, SamePadConv2d, round_filters


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
