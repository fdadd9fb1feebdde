"""Colour spaces for stain statistics: RGB, CIE L*a*b* and H&E-DAB optical density.

RandStainNA (Shen et al., MICCAI 2022) and FedStain's RandStain (Sec. III-C, Eq. 1)
match per-channel statistics in a perceptual or stain space rather than in RGB;
this module provides the two spaces they use, as batched, differentiable torch
maps on ``(B, 3, H, W)`` float tensors with RGB in ``[0, 1]``.

Scales
------
* ``"rgb"``: the identity (values in ``[0, 1]``).
* ``"lab"``: CIE L*a*b* under D65 with sRGB companding (IEC 61966-2-1). ``L`` is in
  ``[0, 100]``, ``a`` and ``b`` roughly in ``[-110, 110]``. The reference white is the
  sum of the rows of the sRGB->XYZ matrix (the D65 white of that matrix), so pure
  white maps to exactly ``(100, 0, 0)``. Note that RandStainNA's yaml files use
  OpenCV's 8-bit LAB (``L * 255 / 100``, ``a + 128``, ``b + 128``); statistics are not
  interchangeable between the two scales.
* ``"hed"``: Ruifrok & Johnston (2001) colour deconvolution with scikit-image's
  ``rgb2hed`` convention: optical density ``OD = log(max(rgb, 1e-6)) / log(1e-6)``
  (so ``OD`` is in ``[0, 1]``), then ``hed = OD @ inv(M)`` with the rows of ``M`` the
  haematoxylin, eosin and DAB OD vectors ``[0.65, 0.70, 0.29]``,
  ``[0.07, 0.99, 0.11]``, ``[0.27, 0.57, 0.78]`` (unnormalised, as in scikit-image).
  Unlike ``skimage.color.separate_stains`` (>= 0.19) negative concentrations are
  *not* clipped to 0, which keeps the map exactly invertible; the clip only matters
  for colours outside the cone spanned by the three stain vectors.

``from_space`` always returns RGB clamped to ``[0, 1]``, so any statistic edit done in
LAB/HED space yields a valid image.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

__all__ = ["COLOR_SPACES", "ColorSpace", "check_space", "from_space", "to_space"]

ColorSpace = Literal["rgb", "lab", "hed"]
COLOR_SPACES: tuple[str, ...] = get_args(ColorSpace)

# sRGB (linear) -> XYZ, D65, IEC 61966-2-1 primaries.
_RGB_TO_XYZ = (
    (0.4124564, 0.3575761, 0.1804375),
    (0.2126729, 0.7151522, 0.0721750),
    (0.0193339, 0.1191920, 0.9503041),
)
# Rows: OD vectors of haematoxylin, eosin, DAB (scikit-image ``rgb_from_hed``).
_HED_TO_RGB_OD = (
    (0.65, 0.70, 0.29),
    (0.07, 0.99, 0.11),
    (0.27, 0.57, 0.78),
)
_OD_FLOOR = 1e-6
_LOG_FLOOR = math.log(_OD_FLOOR)  # OD is normalised by this so that OD(1e-6) = 1
_DELTA = 6.0 / 29.0  # CIE LAB linear-segment threshold of f(t)

_MATRIX_CACHE: dict[tuple[str, torch.dtype, torch.device], Tensor] = {}


def _matrix(name: str, dtype: torch.dtype, device: torch.device) -> Tensor:
    """Cached conversion matrices; inverses computed in float64 then cast."""
    key = (name, dtype, device)
    if key not in _MATRIX_CACHE:
        rgb_xyz = torch.tensor(_RGB_TO_XYZ, dtype=torch.float64)
        od_hed = torch.tensor(_HED_TO_RGB_OD, dtype=torch.float64)
        mats = {
            "rgb2xyz": rgb_xyz,
            "xyz2rgb": torch.linalg.inv(rgb_xyz),
            "white": rgb_xyz.sum(dim=1),
            "hed2od": od_hed,
            "od2hed": torch.linalg.inv(od_hed),
        }
        for k, v in mats.items():
            _MATRIX_CACHE[(k, dtype, device)] = v.to(dtype=dtype, device=device)
    return _MATRIX_CACHE[key]


def check_space(space: object) -> ColorSpace:
    """Validate a colour-space name; raise ValueError listing the valid ones."""
    if space not in COLOR_SPACES:
        raise ValueError(
            f"unknown colour space {space!r}; expected one of {COLOR_SPACES}"
        )
    return space  # type: ignore[return-value]


def _check_image(x: Tensor, name: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"{name} must have shape (B, 3, H, W), got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {x.dtype}")


def _channel_matmul(matrix: Tensor, x: Tensor) -> Tensor:
    """``out[:, i] = sum_j matrix[i, j] * x[:, j]`` over the channel axis."""
    return torch.einsum("ij,bjhw->bihw", matrix, x)


def _srgb_to_linear(c: Tensor) -> Tensor:
    # clamp_min inside the power branch keeps the unused branch free of NaN
    # (torch.where evaluates both), which also keeps gradients finite.
    curve = ((c.clamp_min(0.04045) + 0.055) / 1.055) ** 2.4
    return torch.where(c > 0.04045, curve, c / 12.92)


def _linear_to_srgb(c: Tensor) -> Tensor:
    curve = 1.055 * c.clamp_min(0.0031308) ** (1.0 / 2.4) - 0.055
    return torch.where(c > 0.0031308, curve, 12.92 * c)


def _lab_f(t: Tensor) -> Tensor:
    cube_root = t.clamp_min(_DELTA**3) ** (1.0 / 3.0)
    return torch.where(t > _DELTA**3, cube_root, t / (3 * _DELTA**2) + 4.0 / 29.0)


def _lab_f_inv(f: Tensor) -> Tensor:
    return torch.where(f > _DELTA, f**3, 3 * _DELTA**2 * (f - 4.0 / 29.0))


def _rgb_to_lab(x: Tensor) -> Tensor:
    xyz = _channel_matmul(_matrix("rgb2xyz", x.dtype, x.device), _srgb_to_linear(x))
    white = _matrix("white", x.dtype, x.device).view(1, 3, 1, 1)
    f = _lab_f(xyz / white)
    fx, fy, fz = f[:, 0], f[:, 1], f[:, 2]
    return torch.stack((116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)), dim=1)


def _lab_to_rgb(y: Tensor) -> Tensor:
    fy = (y[:, 0] + 16.0) / 116.0
    f = torch.stack((fy + y[:, 1] / 500.0, fy, fy - y[:, 2] / 200.0), dim=1)
    white = _matrix("white", y.dtype, y.device).view(1, 3, 1, 1)
    lin = _channel_matmul(_matrix("xyz2rgb", y.dtype, y.device), _lab_f_inv(f) * white)
    # Out-of-gamut LAB values give negative linear RGB; the final clamp handles them.
    return _linear_to_srgb(lin)


def _rgb_to_hed(x: Tensor) -> Tensor:
    od = torch.log(x.clamp_min(_OD_FLOOR)) / _LOG_FLOOR
    # Row-vector convention of scikit-image: hed = od @ inv(M), i.e. inv(M)^T @ od.
    return _channel_matmul(_matrix("od2hed", x.dtype, x.device).T, od)


def _hed_to_rgb(y: Tensor) -> Tensor:
    od = _channel_matmul(_matrix("hed2od", y.dtype, y.device).T, y)
    # exp of a large positive OD underflows to 0 and of a large negative one gives
    # inf; both are finite after the caller's clamp to [0, 1].
    return torch.exp(od * _LOG_FLOOR)


def to_space(x: Tensor, space: ColorSpace) -> Tensor:
    """Convert RGB images in ``[0, 1]`` to ``space``.

    Parameters
    ----------
    x : Tensor
        Float tensor ``(B, 3, H, W)``, RGB in ``[0, 1]``.
    space : {"rgb", "lab", "hed"}
        Target space (scales in the module docstring). ``"rgb"`` returns ``x``
        itself (no copy).

    Returns
    -------
    Tensor
        ``(B, 3, H, W)`` tensor of the same dtype: ``(L, a, b)`` or ``(H, E, D)``.
    """
    _check_image(x, "x")
    space = check_space(space)
    if space == "rgb":
        return x
    if space == "lab":
        return _rgb_to_lab(x)
    return _rgb_to_hed(x)


def from_space(y: Tensor, space: ColorSpace) -> Tensor:
    """Convert ``(B, 3, H, W)`` values in ``space`` back to RGB clamped to ``[0, 1]``.

    The inverse of :func:`to_space` for in-gamut values; values edited outside the
    gamut (e.g. by a statistics transfer) are clamped after conversion, never NaN.
    """
    _check_image(y, "y")
    space = check_space(space)
    if space == "rgb":
        rgb = y
    elif space == "lab":
        rgb = _lab_to_rgb(y)
    else:
        rgb = _hed_to_rgb(y)
    # nan_to_num guards inf - inf style corner cases of extreme edited values.
    return torch.nan_to_num(rgb, nan=0.0, posinf=1.0, neginf=0.0).clamp(0.0, 1.0)
