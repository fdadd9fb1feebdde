"""Procedural tissue of the synthetic H&E patches: random draws to H and E maps.

The morphology half of :mod:`fedpath.data.synthetic_render`, identical for every
hospital: per-patch scalars (atypia, lumen and stroma thresholds, fibres), nuclei
on a jittered lattice whose spacing, size, shape and chromatin follow the atypia,
value-noise fields, and their rasterisation into haematoxylin and eosin
concentration maps. The label reaches these maps only through the atypia's mean.

Every patch draws from its own generator and all array work is element-wise or
per-row, so a chunk's maps do not depend on how patches are grouped in chunks.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.ndimage import gaussian_filter1d
from scipy.special import ndtri

#: Shared std of the class-conditional atypia (the class means are
#: ``synthetic_render._ATYPIA_MEAN``): their overlap sets the Bayes error.
_ATYPIA_STD = 0.17
#: Spacings (pixels) of the value-noise lattices: lumina, cellularity, stroma.
_SP_LUMEN, _SP_CELL, _SP_STROMA = 16.0, 12.0, 9.0
#: Nuclei per 64 x 64 pixels: base + slope * atypia.
_PER_64 = (10.0, 24.0)
#: Std of a unit-variance white-noise field after a sigma=0.8 Gaussian blur
#: (1 / (2 sigma sqrt(pi))), used to give the chromatin texture unit variance.
_TEX_SIGMA, _TEX_NORM = 0.8, 1.0 / (2 * 0.8 * np.sqrt(np.pi))
_F = np.float32


class Chunk(NamedTuple):
    """Random draws of one chunk of patches (nuclei are flattened over patches)."""

    scalars: np.ndarray  # (n, 10) per-patch scalars, see _patch_scalars
    lumen: np.ndarray  # (n, c, c) coarse lattices
    cell: np.ndarray
    stroma: np.ndarray
    warp: np.ndarray
    fine: np.ndarray  # (n, 4, s, s): chromatin texture + RGB sensor noise
    nuclei: np.ndarray  # (m, 15) nucleus parameters, column 0 = patch index


def _lattice(size: int, spacing: float) -> int:
    return int((size - 1) / spacing) + 2


def _candidate_side(size: int) -> int:
    """Side of the candidate-nucleus lattice at the densest (atypia = 1) spacing."""
    return int(size / (64.0 / np.sqrt(_PER_64[0] + _PER_64[1]))) + 3


def _normal(u: np.ndarray) -> np.ndarray:
    """Standard normals from uniforms by the inverse CDF (element-wise, exact)."""
    return np.asarray(ndtri(np.clip(u, 1e-12, 1.0 - 1e-12)))


def _patch_scalars(u: np.ndarray, atypia_mean: np.ndarray) -> np.ndarray:
    """Map per-patch uniforms (n, 10) to the patch's morphology/stain scalars."""
    z = _normal(u)
    return np.column_stack(
        [
            np.clip(atypia_mean + _ATYPIA_STD * z[:, 0], 0.0, 1.0),  # atypia
            1.35 + 0.25 * z[:, 1],  # lumen threshold (lattice-noise std units)
            -0.45 + 0.35 * z[:, 2],  # cellularity threshold: stroma-only areas
            np.pi * u[:, 3],  # fibre orientation
            4.0 + 3.0 * u[:, 4],  # fibre wavelength (px)
            2 * np.pi * u[:, 5],  # fibre phase
            0.05 * z[:, 6],  # patch-level log H jitter (staining unevenness)
            0.05 * z[:, 7],  # patch-level log E jitter
            u[:, 8],  # nucleus-lattice offsets (fraction of the spacing)
            u[:, 9],
        ]
    )


def _nuclei(u: np.ndarray, sc: np.ndarray, size: int) -> np.ndarray:
    """Nucleus parameters (m, 15) from candidate uniforms (n, k, 12) and scalars.

    Nuclei sit on a jittered lattice whose spacing, jitter, size spread, elongation,
    contour irregularity and chromatin density all grow with atypia: regular, small
    and pale (normal) to crowded, disorganised, pleomorphic and dark (tumour).
    """
    side = _candidate_side(size)
    a = sc[:, 0, None]
    spacing = 64.0 / np.sqrt(_PER_64[0] + _PER_64[1] * a)
    row, col = np.divmod(np.arange(side * side), side)
    jitter = (0.22 + 0.4 * a) * spacing
    cx = (sc[:, 8, None] + col - 1) * spacing + jitter * (2 * u[..., 0] - 1)
    cy = (sc[:, 9, None] + row - 1) * spacing + jitter * (2 * u[..., 1] - 1)
    z = _normal(u[..., [2, 3, 5, 6, 7, 11]])
    radius = (2.4 + 2.3 * a) * np.exp((0.05 + 0.22 * a) * z[..., 0])
    radius = np.clip(radius, 1.5, 8.0)
    ratio = np.clip(1.0 - np.abs((0.05 + 0.25 * a) * z[..., 1]), 0.45, 1.0)
    theta = np.pi * u[..., 4]
    harm = np.clip(np.abs((0.015 + 0.09 * a)[..., None] * z[..., 2:5]), 0, 0.15)
    phase = 2 * np.pi * u[..., 8:11]
    density = (0.55 + 0.55 * a) * np.exp((0.05 + 0.15 * a) * z[..., 5])
    # Nuclei centred just outside the patch still reach into it.
    lo, hi = -10.0, size + 10.0
    valid = (cx > lo) & (cx < hi) & (cy > lo) & (cy < hi)
    patch = np.broadcast_to(np.arange(len(sc))[:, None], cx.shape)
    # Contour harmonics a cos(k phi + p) stored as A cos(k phi) + B sin(k phi).
    coeff = np.stack([harm * np.cos(phase), -harm * np.sin(phase)], axis=-1)
    columns = [
        patch, cx, cy, radius / np.sqrt(ratio), radius * np.sqrt(ratio),
        np.cos(theta), np.sin(theta), *coeff.reshape(*cx.shape, 6).transpose(2, 0, 1),
        harm.sum(-1), density,
    ]  # fmt: skip
    return np.stack([c[valid] for c in columns], axis=1)


def draw_chunk(
    atypia_mean: np.ndarray, start: int, size: int, seed: int, key: int
) -> Chunk:
    """Draw every random quantity of a chunk; patch i uses its own generator.

    ``atypia_mean`` (n,) is each patch's class-conditional mean atypia, ``start``
    the index of the chunk's first patch and ``key`` the hospital's.
    """
    n, k = len(atypia_mean), _candidate_side(size) ** 2
    u_sc = np.empty((n, 10))
    grids = [
        np.empty((n, _lattice(size, sp), _lattice(size, sp)), _F)
        for sp in (_SP_LUMEN, _SP_CELL, _SP_STROMA, _SP_STROMA)
    ]
    fine = np.empty((n, 4, size, size), np.uint8)
    u_nuc = np.empty((n, k, 12))
    for i in range(n):
        rng = np.random.default_rng([seed, key, 1, start + i])
        rng.random(out=u_sc[i])
        for grid in grids:
            rng.standard_normal(dtype=_F, out=grid[i])
        # Raw random bytes (uniform noise, standardised below) are ~30x cheaper to
        # draw than Gaussians and indistinguishable once blurred (chromatin
        # texture) or quantised to uint8 (sensor noise).
        fine[i].flat = np.frombuffer(rng.bytes(fine[i].size), np.uint8)
        rng.random(out=u_nuc[i])
    scalars = _patch_scalars(u_sc, atypia_mean)
    # Discrete uniform on 0..255: mean 127.5, std sqrt((256^2 - 1) / 12).
    noise = (fine.astype(_F) - _F(127.5)) / _F(np.sqrt((256**2 - 1) / 12))
    lumen, cell, stroma, warp = grids
    return Chunk(
        scalars, lumen, cell, stroma, warp, noise, _nuclei(u_nuc, scalars, size)
    )


def _value_noise(grid: np.ndarray, size: int, spacing: float) -> np.ndarray:
    """Smoothstep-interpolate lattices (n, c, c) to (n, size, size) fields."""
    pos = np.arange(size, dtype=np.float64) / spacing
    i0 = pos.astype(np.int64)
    t = pos - i0
    w = (t * t * (3.0 - 2.0 * t)).astype(_F)
    rows = grid[:, i0, :] * (1 - w)[:, None] + grid[:, i0 + 1, :] * w[:, None]
    return rows[:, :, i0] * (1 - w) + rows[:, :, i0 + 1] * w


def blur(x: np.ndarray, sigma: float) -> np.ndarray:
    if sigma <= 0:
        return x
    x = gaussian_filter1d(x, sigma, axis=-1, mode="reflect")
    return gaussian_filter1d(x, sigma, axis=-2, mode="reflect")


def _nucleus_window(
    nuc: np.ndarray, half: int, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Evaluate nuclei in (2 half + 1)^2 windows: flat pixel index, coverage, ink."""
    f = [nuc[:, i].astype(_F)[:, None, None] for i in range(15)]
    ix = np.round(nuc[:, 1]).astype(np.int64)[:, None, None]
    iy = np.round(nuc[:, 2]).astype(np.int64)[:, None, None]
    off = np.arange(-half, half + 1)
    px, py = ix + off[None, None, :], iy + off[None, :, None]
    dx, dy = (
        (px - nuc[:, 1, None, None]).astype(_F),
        (py - nuc[:, 2, None, None]).astype(_F),
    )
    # Coordinates in the nucleus frame, scaled so the unperturbed ellipse is r = 1.
    un = dx * (f[5] / f[3]) + dy * (f[6] / f[3])
    vn = dy * (f[5] / f[4]) - dx * (f[6] / f[4])
    r = np.sqrt(un * un + vn * vn) + _F(1e-6)
    # Contour r = 1 + sum_k (A_k cos k phi + B_k sin k phi), k = 2..4, with the
    # harmonics from cos/sin(phi) by angle-addition (cheaper than atan2 + cos).
    c1, s1 = un / r, vn / r
    c2, s2 = c1 * c1 - s1 * s1, 2 * c1 * s1
    c3, s3 = c1 * c2 - s1 * s2, s1 * c2 + c1 * s2
    c4, s4 = c2 * c2 - s2 * s2, 2 * c2 * s2
    bound = 1 + f[7] * c2 + f[8] * s2 + f[9] * c3 + f[10] * s3 + f[11] * c4 + f[12] * s4
    rho = r / bound
    # About one pixel of anti-aliasing ramp, exactly zero beyond it.
    cover = np.clip((1 - rho) * f[4] + _F(0.5), 0, 1)
    # Chromatin marginates along the nuclear membrane: a darker rim.
    rim = np.clip(1 - np.abs(rho - _F(0.8)) * _F(4.0), 0, 1)
    ink = cover * f[14] * (1 + _F(0.3) * rim)
    inside = (px >= 0) & (px < size) & (py >= 0) & (py < size)
    flat = (nuc[:, 0].astype(np.int64)[:, None, None] * size + py) * size + px
    return flat[inside], cover[inside], ink[inside]


def _splat_nuclei(nuc: np.ndarray, n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Rasterise nuclei into (coverage, haematoxylin density) maps of shape (n, s, s).

    Nuclei are grouped by the window half-size their own extent needs, so the work
    follows the actual nuclear sizes. A nucleus's edge ramp is exactly zero outside
    its window, and every pixel sums its contributions in (group, patch, nucleus)
    order, so chunking cannot change a single bit. Overlapping nuclei add up, as
    absorbances do.
    """
    reach = nuc[:, 3] * (1 + 0.5 / nuc[:, 4]) * (1 + nuc[:, 13])
    halves = np.ceil(reach).astype(np.int64) + 1
    parts = [_nucleus_window(nuc[halves == h], int(h), size) for h in np.unique(halves)]
    flat = np.concatenate([p[0] for p in parts] + [np.zeros(0, np.int64)])
    maps = [
        np.bincount(
            flat,
            weights=np.concatenate([p[i] for p in parts] + [np.zeros(0, _F)]),
            minlength=n * size * size,
        )
        .reshape(n, size, size)
        .astype(_F)
        for i in (1, 2)
    ]
    return maps[0], maps[1]


def concentrations(ch: Chunk, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Haematoxylin and eosin concentration maps (n, s, s) of one chunk."""
    n = len(ch.scalars)
    sc = ch.scalars.astype(_F)
    lumen_f = _value_noise(ch.lumen, size, _SP_LUMEN) / _F(0.75)
    tissue = np.clip((sc[:, 1, None, None] - lumen_f) / _F(0.12), 0, 1)
    cell_f = _value_noise(ch.cell, size, _SP_CELL) / _F(0.75)

    # Keep nuclei whose centre lies in tissue and in a cellular area.
    nuc = ch.nuclei
    img = nuc[:, 0].astype(np.int64)
    ix = np.clip(np.round(nuc[:, 1]).astype(np.int64), 0, size - 1)
    iy = np.clip(np.round(nuc[:, 2]).astype(np.int64), 0, size - 1)
    keep = (tissue[img, iy, ix] > 0.5) & (cell_f[img, iy, ix] > sc[img, 2])
    cover, ink = _splat_nuclei(nuc[keep], n, size)

    tex = blur(ch.fine[:, 0], _TEX_SIGMA) / _F(_TEX_NORM)
    atypia = sc[:, 0, None, None]
    # Coarser, clumpier chromatin in atypical nuclei.
    h_nuc = ink * np.clip(1 + (_F(0.15) + _F(0.3) * atypia) * tex, 0.2, None)
    cyto = np.clip(blur(cover, 1.6) * _F(2.2), 0, 1)

    yy, xx = np.meshgrid(
        np.arange(size, dtype=_F), np.arange(size, dtype=_F), indexing="ij"
    )
    ang, lam, ph = sc[:, 3, None, None], sc[:, 4, None, None], sc[:, 5, None, None]
    # Collagen: wavy parallel fibres (a sine grating bent by smooth noise) whose
    # visibility fades in and out, over a grainy eosinophilic ground.
    warp = _value_noise(ch.warp, size, _SP_STROMA)
    bulk = _value_noise(ch.stroma, size, _SP_STROMA)
    along = xx * np.cos(ang) + yy * np.sin(ang)
    wave = np.sin(_F(2 * np.pi) * along / lam + ph + _F(3.0) * warp)
    crest = _F(0.5) + _F(0.5) * wave
    fibre = crest * crest * crest * np.clip(_F(0.6) + _F(0.6) * bulk, 0, 1)
    stroma_e = _F(0.2) * (_F(0.8) + _F(0.9) * fibre + _F(0.12) * tex) + _F(0.04) * bulk
    c_e = tissue * (stroma_e * (1 - cyto) + _F(0.17) * cyto)
    c_h = h_nuc + tissue * (_F(0.03) + _F(0.06) * cyto)
    return c_h, np.maximum(c_e, 0)
