"""Procedural cartoon H&E patches, rendered through per-hospital stain/scanner models.

Physics
-------
Bright-field microscopy obeys the Beer-Lambert law: light of channel ``c`` crossing
a section holding stain concentrations ``C_H`` (haematoxylin) and ``C_E`` (eosin)
leaves with transmittance ``T_c = 10 ** -OD_c`` where the optical density is linear
in the concentrations, ``OD_c = C_H * v_H[c] + C_E * v_E[c] + OD_glass[c]``.
``v_H`` and ``v_E`` are the unit OD vectors of the dyes; Ruifrok & Johnston (2001)
measured ``v_H ~ [0.65, 0.70, 0.29]`` (absorbs red+green: blue/purple nuclei) and
``v_E ~ [0.07, 0.99, 0.11]`` (absorbs green: pink). Colour deconvolution and most
stain-normalisation methods invert exactly this model, so a synthetic benchmark
built on it gives them a fair, physically meaningful target.

Pipeline
--------
1. **Morphology** (identical for every hospital; :mod:`.synthetic_tissue`):
   concentration maps are drawn from a per-patch "atypia" score whose
   class-conditional distributions overlap. Normal tissue has small, sparse, round,
   uniform nuclei on a regular jittered lattice; tumour has larger, crowded,
   pleomorphic (size/eccentricity/contour variation), hyperchromatic (higher
   ``C_H``) nuclei with coarser chromatin. Eosin comes from fibrous stroma and the
   cytoplasm around nuclei; smooth noise carves white lumina. The label reaches the
   pixels *only* through these shapes.
2. **Staining** (per hospital, jittered per slide): concentrations are scaled by the
   hospital's ``h_scale`` / ``e_scale`` and mixed with its own stain vectors.
3. **Scanning** (per hospital): optical blur, shot-like noise, then a non-linear
   per-channel tone curve (gamma, logistic contrast, black/white points). The tone
   curve reshapes the histogram, so hospitals differ in skewness and kurtosis of
   their stain intensities, not only in mean and variance. Measured on the green
   channel (where both dyes absorb most) over all pixels of 64 patches, the four
   archetypes give skewness / excess kurtosis of about +0.4/+0.4, -1.2/+0.5,
   -0.3/-0.8 and -0.75/+1.1 (see benchmarks/calibrate_synthetic_shift.py).

Determinism: every patch draws from its own ``numpy`` generator seeded by
``(seed, crc32(hospital name), patch index)`` and every slide from
``(seed, crc32(hospital name), slide id)``; all array work is element-wise or
per-row (no BLAS, no multi-threaded reductions), so results do not depend on
chunking or thread counts. Patch ``i`` depends on its index in ``labels``, so a
dataset is fixed by rendering each hospital in one call. Including the hospital
name means two hospitals rendered with the same seed show different tissue, not
the same tissue recoloured.
"""

from __future__ import annotations

import os
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fedpath.data.synthetic_profiles import HospitalProfile, make_hospital_profiles
from fedpath.data.synthetic_tissue import blur, concentrations, draw_chunk

__all__ = ["CLASS_NAMES", "HospitalProfile", "make_hospital_profiles", "render_patches"]

CLASS_NAMES: tuple[str, ...] = ("normal", "tumour")

_MIN_SIZE, _MAX_SIZE = 16, 512
#: Pixels per processing chunk (tests shrink it to check chunk independence).
_CHUNK_PIXELS = 48 * 64 * 64
#: Threads rendering chunks concurrently (tests set 1 to check thread independence).
_WORKERS = min(2, os.cpu_count() or 1)
_LN10 = float(np.log(10.0))
_LUT_SIZE = 1 << 14
#: Class-conditional atypia: mean per class, with a shared std (``_ATYPIA_STD`` of
#: :mod:`.synthetic_tissue`). Their overlap sets the Bayes error of the task
#: (~5-10 %), keeping it learnable but not trivial. The label enters the
#: rendering here and nowhere else.
_ATYPIA_MEAN = (0.2, 0.78)
_F = np.float32


def _scan(
    c_h: np.ndarray,
    c_e: np.ndarray,
    stains: np.ndarray,
    glass: np.ndarray,
    noise: np.ndarray,
    profile: HospitalProfile,
    levels: list[np.ndarray],
) -> np.ndarray:
    """Beer-Lambert absorption, scanner optics and tone curve -> uint8 (n, 3, s, s).

    ``stains`` is (n, 2, 3): the per-patch H and E OD vectors already multiplied by
    the hospital, slide and patch concentration scales.
    """
    od = (
        c_h[:, None] * stains[:, 0, :, None, None].astype(_F)
        + c_e[:, None] * stains[:, 1, :, None, None].astype(_F)
        + glass[:, :, None, None].astype(_F)
    )
    trans = blur(np.exp(-_F(_LN10) * od), profile.blur_sigma)
    trans = trans + _F(profile.noise_std) * np.sqrt(trans) * noise
    # The tone curve is a fixed function of transmittance per channel: tabulate it
    # (2^14 levels, far finer than the 8-bit output) instead of evaluating powers
    # and exponentials per pixel (``levels`` from _tone_lut).
    idx = (np.clip(trans, 0, 1) * _F(_LUT_SIZE - 1) + _F(0.5)).astype(np.intp)
    return np.stack([levels[c][idx[:, c]] for c in range(3)], axis=1)


def _tone_lut(profile: HospitalProfile) -> list[np.ndarray]:
    """Per-channel uint8 tables of the scanner tone curve over transmittance 0..1."""
    table = profile.tone_curve(np.linspace(0.0, 1.0, _LUT_SIZE)[:, None])
    return [np.floor(table[:, c] * 255 + 0.5).astype(np.uint8) for c in range(3)]


def _check_int(value: object, name: str, lo: int, hi: int | None) -> int:
    bounds = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
    error = ValueError(f"{name} must be an int {bounds}, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise error
    if value < lo or (hi is not None and value > hi):
        raise error
    return int(value)


def _as_int_array(value: object, name: str) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(
            f"{name} must be a 1-D integer array, got dtype {arr.dtype} "
            f"and shape {arr.shape}"
        )
    return arr.astype(np.int64)


def render_patches(
    labels: np.ndarray,
    profile: HospitalProfile,
    image_size: int = 64,
    seed: int = 0,
    slide_ids: np.ndarray | None = None,
) -> np.ndarray:
    """Render H&E patches of the given classes as scanned by one hospital.

    Parameters
    ----------
    labels : np.ndarray
        Int array (N,) with values in {0, 1} (see :data:`CLASS_NAMES`).
    profile : HospitalProfile
        Stain and scanner model (see :func:`make_hospital_profiles`).
    image_size : int
        Side of the square patches in pixels, in [16, 512]. Nuclear size is in
        pixels (fixed magnification), so larger patches show more cells.
    seed : int
        Seed (>= 0) of morphology, per-slide jitter and noise.
    slide_ids : np.ndarray, optional
        Int array (N,) of non-negative slide ids; patches of one slide share the
        slide's stain jitter (drawn from ``(seed, hospital, slide id)``). ``None``
        puts every patch on slide 0.

    Returns
    -------
    np.ndarray
        uint8 array (N, 3, image_size, image_size), RGB, channels first. The same
        arguments always give byte-identical output.
    """
    if not isinstance(profile, HospitalProfile):
        raise TypeError(f"profile must be a HospitalProfile, got {type(profile)!r}")
    size = _check_int(image_size, "image_size", _MIN_SIZE, _MAX_SIZE)
    seed = _check_int(seed, "seed", 0, None)
    labs = _as_int_array(labels, "labels")
    if labs.size and (labs.min() < 0 or labs.max() > 1):
        raise ValueError(f"labels must take values in {{0, 1}}, got {np.unique(labs)}")
    if slide_ids is None:
        slides = np.zeros_like(labs)
    else:
        slides = _as_int_array(slide_ids, "slide_ids")
        if slides.shape != labs.shape:
            raise ValueError(
                f"slide_ids must have the same length as labels ({len(labs)}), "
                f"got {len(slides)}"
            )
        if slides.size and slides.min() < 0:
            raise ValueError("slide_ids must be non-negative")
    key = zlib.crc32(profile.name.encode("utf-8"))
    per_slide = {
        sid: profile.slide_stain(sid, seed) for sid in np.unique(slides).tolist()
    }
    out = np.empty((len(labs), 3, size, size), dtype=np.uint8)
    lut = _tone_lut(profile)
    atypia_mean = np.asarray(_ATYPIA_MEAN)[labs]

    def render_chunk(start: int) -> None:
        stop = min(start + chunk, len(labs))
        ch = draw_chunk(atypia_mean[start:stop], start, size, seed, key)
        c_h, c_e = concentrations(ch, size)
        info = [per_slide[int(s)] for s in slides[start:stop]]
        scale = np.exp(ch.scalars[:, 6:8]) * [[i.h_scale, i.e_scale] for i in info]
        stains = np.stack([i.stain_matrix for i in info]) * scale[:, :, None]
        glass = np.stack([i.background_od for i in info])
        out[start:stop] = _scan(c_h, c_e, stains, glass, ch.fine[:, 1:], profile, lut)

    chunk = max(1, _CHUNK_PIXELS // (size * size))
    starts = range(0, len(labs), chunk)
    workers = min(_WORKERS, len(starts))
    # Chunks are independent and write disjoint slices, so running them on threads
    # (numpy/scipy release the GIL in their kernels) cannot change the result.
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(render_chunk, starts))
    else:
        for start in starts:
            render_chunk(start)
    return out
