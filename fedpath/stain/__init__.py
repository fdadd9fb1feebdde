"""Stain statistics and stain/style augmentations (FedStain Sec. III-C, III-D).

Conventions: images are float tensors ``(B, 3, H, W)`` with RGB in ``[0, 1]``; every
random function takes an explicit :class:`torch.Generator` (the global RNG is never
used); everything is vectorized over the batch and NaN-free, including on constant
(all-white) images.

* :mod:`~fedpath.stain.color` -- RGB <-> CIE LAB / HED colour spaces.
* :mod:`~fedpath.stain.moments` -- per-channel moments and FedStain Table V pairs.
* :mod:`~fedpath.stain.shape` -- monotone skewness/kurtosis matching (its budget:
  :class:`~fedpath.stain.shape.ShapeFit`), restyling.
* :mod:`~fedpath.stain.pool` -- the pool of exchanged statistics and its template draws.
* :mod:`~fedpath.stain.randstain` -- Level-1 RandStain (Eq. 1).
* :mod:`~fedpath.stain.mixstyle` -- MixStyle with higher-order statistics (Alg. 1).
* :mod:`~fedpath.stain.augmix` -- geometric AugMix (Level 2 morphology).
"""

from fedpath.stain.augmix import AUGMIX_OPS, augmix, random_affine_matrices
from fedpath.stain.color import COLOR_SPACES, ColorSpace, from_space, to_space
from fedpath.stain.mixstyle import mixstyle, mixstyle_features
from fedpath.stain.moments import (
    STAT_KINDS,
    STAT_NAMES,
    Moments,
    StatKind,
    channel_moments,
    image_statistics,
)
from fedpath.stain.pool import StatPool
from fedpath.stain.randstain import randstain, randstain_in_space
from fedpath.stain.shape import (
    ACCURATE_FIT,
    ShapeFit,
    fit_sinh_arcsinh,
    match_shape,
    restyle,
    sinh_arcsinh,
)

__all__ = [
    "ACCURATE_FIT",
    "AUGMIX_OPS",
    "COLOR_SPACES",
    "STAT_KINDS",
    "STAT_NAMES",
    "ColorSpace",
    "Moments",
    "ShapeFit",
    "StatKind",
    "StatPool",
    "augmix",
    "channel_moments",
    "fit_sinh_arcsinh",
    "from_space",
    "image_statistics",
    "match_shape",
    "mixstyle",
    "mixstyle_features",
    "random_affine_matrices",
    "randstain",
    "randstain_in_space",
    "restyle",
    "sinh_arcsinh",
    "to_space",
]
