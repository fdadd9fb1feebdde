"""H&E-like patches, statistics pools and generators shared by the stain tests."""

from __future__ import annotations

from functools import cache

import numpy as np
import torch

from fedpath.data.synthetic_render import make_hospital_profiles, render_patches
from fedpath.stain import (
    StatPool,
    channel_moments,
)


@cache
def _patches() -> torch.Tensor:
    """24 H&E-like 32x32 patches from three synthetic hospitals."""
    profiles = make_hospital_profiles(3, seed=0)
    labels = np.arange(8) % 2
    arr = np.concatenate([render_patches(labels, p, 32, seed=2) for p in profiles])
    return torch.from_numpy(arr).float() / 255.0


def images() -> torch.Tensor:
    """8 patches to augment (hospital 0)."""
    return _patches()[:8].clone()


def pool(space: str = "lab", kind: str = "moments") -> StatPool:
    """Statistics of the other hospitals' 16 patches."""
    return StatPool.from_images(_patches()[8:], space, kind)  # type: ignore[arg-type]


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def non_gaussian(seed: int = 0, shape: tuple[int, ...] = (3, 4, 16, 16)) -> np.ndarray:
    """Gamma-, beta- and lognormal-distributed channels (skewed, heavy/light tails)."""
    rng = np.random.default_rng(seed)
    x = np.empty(shape)
    x[:, 0] = rng.gamma(2.0, size=x[:, 0].shape)
    x[:, 1] = rng.beta(0.5, 0.5, size=x[:, 1].shape)
    x[:, 2] = rng.beta(5.0, 1.5, size=x[:, 2].shape)
    x[:, 3:] = rng.lognormal(0.0, 0.6, size=x[:, 3:].shape)
    return x


def standardized(x: torch.Tensor) -> torch.Tensor:
    m = channel_moments(x)
    return (x - m.mean[..., None, None]) / m.std[..., None, None]
