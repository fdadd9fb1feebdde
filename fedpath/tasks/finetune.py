"""Which parameters an image model trains locally, at what learning rate, and the
generic batch augmentation (``train.trainable``, ``encoder_lr_scale``, ``bn``,
``augment``; see :class:`fedpath.config.TrainConfig`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from fedpath.config import ConfigError, TrainConfig
from fedpath.data.base import ImageStore
from fedpath.models.backbones import Encoder


def _encoder(model: nn.Module) -> Encoder | None:
    found = [m for m in model.modules() if isinstance(m, Encoder)]
    return found[0] if len(found) == 1 else None


def frozen_parameters(model: nn.Module, cfg: TrainConfig) -> set[int]:
    """ids of the parameters ``train.trainable`` keeps fixed during local training."""
    if cfg.trainable == "all":
        return set()
    enc = _encoder(model)
    if enc is None:
        raise ConfigError(
            f"config key 'train.trainable': {cfg.trainable!r} needs a model with one "
            f"image encoder, {type(model).__name__} has none"
        )
    frozen = {id(p) for p in enc.parameters()}
    if cfg.trainable == "last_stages":
        stages = list(enc.stages)
        if cfg.trainable_stages > len(stages):
            raise ConfigError(
                f"config key 'train.trainable_stages': {cfg.trainable_stages} is more "
                f"than the {len(stages)} stages of the encoder"
            )
        for stage in stages[-cfg.trainable_stages :]:
            frozen -= {id(p) for p in stage.parameters()}
    return frozen


def fixed_batchnorm(model: nn.Module, cfg: TrainConfig) -> list[str]:
    """The names of ``model``'s BatchNorm layers inside the encoder part that
    ``train.trainable`` freezes: training kept their statistics fixed
    (:func:`set_train_mode`), so AdaBN (:mod:`fedpath.tasks.adapt`) leaves them
    too. [] when everything trains, or for a model without an encoder (the
    cached path's tail holds only trained layers)."""
    if cfg.trainable == "all" or _encoder(model) is None:
        return []
    frozen = frozen_parameters(model, cfg)
    return [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
        and any(id(p) in frozen for p in m.parameters())
    ]


def param_groups(model: nn.Module, cfg: TrainConfig) -> list[dict[str, Any]]:
    """Optimizer parameter groups: the trainable encoder parameters at
    ``lr * encoder_lr_scale``, everything else (classifier, heads) at ``lr``;
    frozen parameters get ``requires_grad = False`` and no group."""
    frozen = frozen_parameters(model, cfg)
    enc = _encoder(model)
    in_encoder = {id(p) for p in enc.parameters()} if enc is not None else set()
    encoder_params, other = [], []
    for p in model.parameters():
        if id(p) in frozen:
            p.requires_grad_(False)
        elif id(p) in in_encoder:
            encoder_params.append(p)
        else:
            other.append(p)
    groups: list[dict[str, Any]] = []
    if encoder_params:
        groups.append({"params": encoder_params, "lr_scale": cfg.encoder_lr_scale})
    if other:
        groups.append({"params": other, "lr_scale": 1.0})
    if not groups:
        raise ConfigError("config key 'train.trainable': nothing left to train")
    return groups


def set_train_mode(model: nn.Module, cfg: TrainConfig) -> None:
    """``model.train()``, except BatchNorm layers in eval mode when their
    statistics stay fixed (``train.bn: frozen``, or inside a frozen encoder)."""
    model.train()
    frozen = frozen_parameters(model, cfg)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and (
            cfg.bn == "frozen" or any(id(p) in frozen for p in m.parameters())
        ):
            m.eval()


#: the symmetries of the square: 4 rotations, each with and without a flip
DIHEDRAL = 8


def dihedral(x: torch.Tensor, k: int) -> torch.Tensor:
    """Symmetry ``k`` in [0, 8) of images (..., H, W): a horizontal flip when
    ``k >= 4``, then ``k % 4`` quarter turns."""
    if k >= 4:
        x = x.flip(-1)
    return torch.rot90(x, k % 4, dims=(-2, -1))


def train_input(
    store: ImageStore, batch: torch.Tensor, kind: str, generator: torch.Generator
) -> torch.Tensor:
    """A training batch as the model takes it, with ``train.augment``.

    A store that holds the 8 dihedral views of every image (cached features of
    ``augment: dihedral``) picks one view per image with the same draw that
    :func:`augment_batch` makes, so training on the cached views is training on
    the transformed pixels.
    """
    if store.views > 1:
        if kind != "dihedral":
            raise ConfigError(
                f"config key 'train.augment': {kind!r} on cached dihedral views; "
                "expected 'dihedral'"
            )
        t = torch.randint(0, store.views, (batch.shape[0],), generator=generator)
        return store.pick_views(batch, t)
    return augment_batch(store.model_input(batch), kind, generator)


def augment_batch(
    x: torch.Tensor, kind: str, generator: torch.Generator
) -> torch.Tensor:
    """``train.augment`` on a batch of images in [0, 1] (N, 3, H, W).

    ``dihedral``: each image gets one of the 8 symmetries of the square (a flip
    and a multiple of 90 degrees, uniformly); ``dihedral_jitter`` adds a brightness
    and a contrast factor and a saturation mix, each uniform in [0.9, 1.1].
    """
    if kind == "none":
        return x
    n = x.shape[0]
    t = torch.randint(0, DIHEDRAL, (n,), generator=generator).tolist()
    out = torch.empty_like(x)
    for k in range(DIHEDRAL):
        idx = [i for i, v in enumerate(t) if v == k]
        if idx:
            out[idx] = dihedral(x[idx], k)
    if kind == "dihedral_jitter":
        f = 0.9 + 0.2 * torch.rand((3, n, 1, 1, 1), generator=generator)
        f = f.to(x)
        mean = out.mean(dim=(1, 2, 3), keepdim=True)
        out = (out - mean) * f[1] + mean  # contrast
        gray = out.mean(dim=1, keepdim=True)
        out = (out - gray) * f[2] + gray  # saturation
        out = (out * f[0]).clamp_(0.0, 1.0)  # brightness
    return out


def augment_generator(seed: int) -> torch.Generator:
    """The augmentation draws of one local training (seeded by its shuffle seed)."""
    ss = np.random.SeedSequence([seed, 0xA06])
    return torch.Generator().manual_seed(int(ss.generate_state(1, np.uint64)[0] >> 1))
