"""Vision transformers loaded from local pathology foundation-model checkpoints.

The architecture is timm's ``VisionTransformer`` (Dosovitskiy et al., ICLR 2021),
built with ``pretrained=False``: weights come **only** from the file named by
``model.params.checkpoint``, never from a hub. Registered encoders:

* ``vit_l16_uni`` -- UNI (Chen et al., Nat. Med. 2024): ViT-L/16 at 224 px with
  LayerScale (``init_values=1e-5``), published as a timm state_dict.
* ``vit_b16_phikon`` -- Phikon (Filiot et al., 2023): ViT-B/16 at 224 px,
  published as a Hugging Face ``ViTModel`` (LayerNorm eps 1e-12).

Either entry reads either key layout (:mod:`fedpath.models.vit_keys`); depth,
width and patch size are params so tests can write tiny checkpoints.

In fedpath's ``Encoder(stem, stages, out_dim)`` form the stem is the patch
embedding plus class token and position embedding (resampled bicubically, as
timm's ``dynamic_img_size`` does, when the image is not ``img_size``); the
transformer blocks are split into ``num_stages`` consecutive stages; the output
is the class token after the final LayerNorm (``pool="cls"``, as UNI and Phikon
use it) or the mean of the patch tokens (``pool="mean"``). Feature hooks and
feature maps see the patch tokens as a ``(B, D, H/p, W/p)`` map (the layout
feature-level MixStyle expects); the class token passes the hook unchanged.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from fedpath.config import ConfigError
from fedpath.models.backbones import (
    BACKBONES,
    IMAGENET_MEAN,
    IMAGENET_STD,
    FeatureHook,
    FedModel,
)
from fedpath.models.pretrained import (
    EncoderSpec,
    PretrainedEncoder,
    load_checked,
    read_state_file,
    require,
    verify_sha256,
)
from fedpath.models.vit_keys import checkpoint_to_encoder
from fedpath.params.models import PhikonParams, UNIParams, ViTParams


class PatchStem(nn.Module):
    """Patch embedding, class token and (resampled) absolute position embedding."""

    def __init__(self, vit: Any) -> None:
        super().__init__()
        self.patch_embed = vit.patch_embed
        self.cls_token = vit.cls_token
        self.pos_embed = vit.pos_embed
        self.norm_pre = vit.norm_pre
        self.grid: tuple[int, int] = tuple(vit.patch_embed.grid_size)

    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """Tokens ``(B, 1 + h*w, D)`` and the patch grid ``(h, w)``."""
        x = self.patch_embed(x)  # (B, h, w, D): built with dynamic_img_size
        b, h, w, d = x.shape
        pos = self.pos_embed
        if (h, w) != self.grid:
            from timm.layers import resample_abs_pos_embed  # timm: built us

            pos = resample_abs_pos_embed(pos, new_size=(h, w), old_size=self.grid)
        tokens = torch.cat([self.cls_token.expand(b, -1, -1), x.reshape(b, -1, d)], 1)
        return self.norm_pre(tokens + pos), (h, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(x)[0]


class ViTEncoder(PretrainedEncoder):
    """h for a ViT: stem -> stages of blocks -> final norm -> CLS or mean pooling."""

    def __init__(
        self,
        stem: PatchStem,
        stages: list[nn.Module],
        norm: nn.Module,
        out_dim: int,
        pool: Literal["cls", "mean"],
        spec: EncoderSpec,
    ) -> None:
        super().__init__(stem, stages, out_dim, spec)
        self.norm = norm
        self.pool_kind = pool

    def forward(
        self,
        x: torch.Tensor,
        hook: FeatureHook | None = None,
        maps: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        assert isinstance(self.stem, PatchStem)
        tokens, (h, w) = self.stem.embed(x)
        for i, stage in enumerate(self.stages):
            tokens = stage(tokens)
            if hook is None and maps is None:
                continue
            b, _, d = tokens.shape
            grid = tokens[:, 1:].transpose(1, 2).reshape(b, d, h, w)
            if hook is not None:
                grid = hook(i, grid)
                patches = grid.flatten(2).transpose(1, 2)
                tokens = torch.cat([tokens[:, :1], patches], 1)
            if maps is not None:
                maps.append(grid)
        tokens = self.norm(tokens)
        return tokens[:, 0] if self.pool_kind == "cls" else tokens[:, 1:].mean(1)


def stage_sizes(depth: int, num_stages: int) -> list[int]:
    """Blocks per stage: as even as possible, earlier stages get the remainder."""
    base, extra = divmod(depth, num_stages)
    return [base + (s < extra) for s in range(num_stages)]


def vit_encoder(name: str, params: ViTParams) -> ViTEncoder:
    """Randomly initialized timm ViT in fedpath's encoder form (never downloads)."""
    vt = require("timm.models.vision_transformer", "timm", name)
    vit = vt.VisionTransformer(
        img_size=params.img_size,
        patch_size=params.patch_size,
        embed_dim=params.embed_dim,
        depth=params.depth,
        num_heads=params.num_heads,
        mlp_ratio=params.mlp_ratio,
        init_values=params.init_values,
        norm_layer=partial(nn.LayerNorm, eps=params.ln_eps),
        num_classes=0,
        dynamic_img_size=True,
    )
    blocks = list(vit.blocks)
    stages: list[nn.Module] = []
    for size in stage_sizes(params.depth, params.num_stages):
        stages.append(nn.Sequential(*blocks[:size]))
        blocks = blocks[size:]
    spec = EncoderSpec(
        backbone=name,
        input_size=params.img_size,
        min_image_size=params.patch_size,
        min_reason=f"one {params.patch_size}x{params.patch_size} patch",
    )
    return ViTEncoder(
        PatchStem(vit), stages, vit.norm, params.embed_dim, params.pool, spec
    )


def read_checkpoint(params: ViTParams) -> tuple[Path, str, dict[str, torch.Tensor]]:
    """The checkpoint's path, SHA-256 (checked if given) and state_dict."""
    assert params.checkpoint is not None
    path = Path(params.checkpoint).expanduser()
    option = "model.params.checkpoint"
    if not path.is_file():
        raise ConfigError(f"{option}: file {str(path)!r} does not exist")
    # hash first: a wrong file fails on its digest before it is unpickled
    sha = verify_sha256(path, params.sha256, "model.params.sha256")
    return path, sha, read_state_file(path, option)


def _vit(name: str, params: ViTParams, num_classes: int) -> FedModel:
    # the file is checked before the (for ViT-L, seconds-long) random init
    checkpoint = read_checkpoint(params) if params.pretrained else None
    encoder = vit_encoder(name, params)
    if checkpoint is not None:
        path, sha, state = checkpoint
        sizes = [len(list(stage.children())) for stage in encoder.stages]
        mapped, layout = checkpoint_to_encoder(state, sizes)
        option = f"model.params.checkpoint ({layout} layout)"
        load_checked(encoder, mapped, option, path, name)
        encoder.record_weights(f"checkpoint {path.resolve()}", sha, params.licence)
    return FedModel(
        encoder,
        num_classes,
        mean=params.mean or IMAGENET_MEAN,
        std=params.std or IMAGENET_STD,
    )


#: registry name -> (params, ``fedpath list`` line)
VITS: dict[str, tuple[type[ViTParams], str]] = {
    "vit_l16_uni": (
        UNIParams,
        "UNI ViT-L/16 from a local checkpoint (1024-d CLS features, 224 px).",
    ),
    "vit_b16_phikon": (
        PhikonParams,
        "Phikon ViT-B/16 from a local checkpoint (768-d CLS features, 224 px).",
    ),
}
for _name, (_params, _doc) in VITS.items():
    BACKBONES.register(_name, params=_params, doc=_doc)(partial(_vit, _name))
