"""Hospital (scanner + staining protocol) profiles for the synthetic H&E renderer.

A hospital is modelled by everything that happens to a tissue section *after* its
morphology is fixed:

* **Staining.** Each lab's haematoxylin and eosin batches have slightly different
  absorption spectra, so its unit optical-density (OD) vectors are rotations of the
  standard Ruifrok-Johnston H&E vectors (Ruifrok & Johnston, 2001); its protocol
  (staining time, dye concentration) scales the amount of H and E bound to tissue.
* **Scanning.** Each scanner maps transmitted light to pixel values through its own
  non-linear, per-channel tone curve (gamma, S-shaped contrast, black/white points)
  and adds optical blur and sensor noise.

The tone curve is what gives each hospital a different *shape* of intensity
histogram (skewness, kurtosis), not only a different mean and spread, as observed
between Camelyon17 centres (FedStain). See :mod:`fedpath.data.synthetic_render`.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "RUIFROK_E",
    "RUIFROK_H",
    "HospitalProfile",
    "SlideStain",
    "make_hospital_profiles",
]

Triple = tuple[float, float, float]

#: Standard (Ruifrok-Johnston) unit OD vectors of haematoxylin and eosin, RGB order.
RUIFROK_H = np.array([0.650, 0.704, 0.286]) / np.linalg.norm([0.650, 0.704, 0.286])
RUIFROK_E = np.array([0.072, 0.990, 0.105]) / np.linalg.norm([0.072, 0.990, 0.105])


class SlideStain(NamedTuple):
    """Stain of one slide: the hospital's stain with that slide's random jitter."""

    stain_matrix: np.ndarray  # (2, 3) unit OD vectors of H and E
    h_scale: float  # haematoxylin concentration multiplier (hospital x slide)
    e_scale: float  # eosin concentration multiplier (hospital x slide)
    background_od: np.ndarray  # (3,) glass + mounting medium OD


@dataclass(frozen=True)
class HospitalProfile:
    """How one hospital stains and scans a section.

    Attributes
    ----------
    name : str
        Identifier, e.g. ``"hospital_0"``; it also keys the hospital's random streams.
    stain_matrix : np.ndarray
        Shape (2, 3), rows are the unit OD vectors (RGB) of H and of E. Stored as a
        read-only float64 copy, rows re-normalised to unit length.
    h_scale, e_scale : float
        Multipliers of the haematoxylin / eosin concentrations (protocol strength).
    background_od : tuple of float
        OD of glass + mounting medium per RGB channel (tints the white background).
    gamma : tuple of float
        Per-channel exponent applied to the transmittance; > 1 darkens mid-tones
        (piles pixels up at the dark end), < 1 brightens them.
    contrast : tuple of float
        Per-channel slope of the logistic S-curve (0 = linear). A steep S-curve
        pushes mid-tones apart and flattens the histogram (negative kurtosis).
    midpoint : tuple of float
        Per-channel pivot of the S-curve, in units of ``T ** gamma`` (0..1).
    black_point, white_point : float
        Output level (0..1) that zero and full transmittance map to.
    blur_sigma : float
        Gaussian std (pixels) of the scanner's optical point-spread function.
    noise_std : float
        Std of the shot-like sensor noise at full transmittance (0..1 units).
    slide_jitter : float
        Relative std of the per-slide variation of stain amounts and vectors.
    """

    name: str
    stain_matrix: np.ndarray
    h_scale: float
    e_scale: float
    background_od: Triple = (0.02, 0.025, 0.02)
    gamma: Triple = (1.0, 1.0, 1.0)
    contrast: Triple = (0.0, 0.0, 0.0)
    midpoint: Triple = (0.5, 0.5, 0.5)
    black_point: float = 0.0
    white_point: float = 1.0
    blur_sigma: float = 0.5
    noise_std: float = 0.01
    slide_jitter: float = 0.06

    def __post_init__(self) -> None:
        matrix = np.array(self.stain_matrix, dtype=np.float64)
        if matrix.shape != (2, 3) or not np.all(np.isfinite(matrix)):
            raise ValueError(
                f"stain_matrix must be a finite (2, 3) array, got shape {matrix.shape}"
            )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if np.any(matrix < 0) or np.any(norms <= 0):
            raise ValueError("stain_matrix rows must be non-negative, non-zero vectors")
        matrix = matrix / norms
        matrix.setflags(write=False)
        object.__setattr__(self, "stain_matrix", matrix)
        for name in ("h_scale", "e_scale", "blur_sigma", "noise_std", "slide_jitter"):
            value = float(getattr(self, name))
            minimum_ok = value > 0 if name.endswith("scale") else value >= 0
            if not (np.isfinite(value) and minimum_ok):
                raise ValueError(f"{name} must be finite and >= 0 (> 0 for scales)")
            object.__setattr__(self, name, value)
        for name in ("background_od", "gamma", "contrast", "midpoint"):
            triple = tuple(float(v) for v in getattr(self, name))
            if len(triple) != 3 or not all(np.isfinite(triple)):
                raise ValueError(f"{name} must hold 3 finite floats, got {triple}")
            object.__setattr__(self, name, triple)
        if min(self.gamma) <= 0 or min(self.contrast) < 0:
            raise ValueError("gamma must be > 0 and contrast >= 0 in every channel")
        if not 0.0 <= self.black_point < self.white_point <= 1.0:
            raise ValueError("need 0 <= black_point < white_point <= 1")

    def tone_curve(self, transmittance: np.ndarray) -> np.ndarray:
        """Scanner response: transmittance (..., 3) in [0, 1] -> output in [0, 1].

        ``y = black + (white - black) * S(T ** gamma)`` per channel, with ``S`` a
        logistic S-curve (slope ``contrast``, pivot ``midpoint``) rescaled to map
        [0, 1] onto [0, 1]. Being non-linear, it changes the *shape* of the
        intensity histogram (skewness, kurtosis), which a linear gain cannot.
        """
        t = np.clip(np.asarray(transmittance, dtype=np.float64), 0.0, 1.0)
        y = t ** np.asarray(self.gamma)
        k, m = np.asarray(self.contrast), np.asarray(self.midpoint)
        lo, hi = 1 / (1 + np.exp(k * m)), 1 / (1 + np.exp(-k * (1 - m)))
        curved = (1 / (1 + np.exp(-k * (y - m))) - lo) / np.where(k > 1e-3, hi - lo, 1)
        y = np.where(k > 1e-3, curved, y)
        span = self.white_point - self.black_point
        return np.asarray(np.clip(self.black_point + span * y, 0.0, 1.0))

    def slide_stain(self, slide_id: int, seed: int) -> SlideStain:
        """The stain of one slide, jittered deterministically from (seed, name, id).

        Staining batches and section thickness vary from slide to slide, so each
        slide gets log-normal H and E multipliers (std ``slide_jitter``), slightly
        perturbed stain vectors (hue) and glass OD.
        """
        key = zlib.crc32(self.name.encode("utf-8"))
        rng = np.random.default_rng([seed, key, 2, slide_id])
        j = self.slide_jitter
        h_mult, e_mult = np.exp(rng.normal(0.0, j, 2))
        noise = rng.normal(0.0, j / 2, (2, 3))
        matrix = np.clip(self.stain_matrix + noise, 1e-3, None)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        glass = np.asarray(self.background_od) * np.exp(rng.normal(0.0, 2 * j, 3))
        return SlideStain(
            matrix, float(h_mult * self.h_scale), float(e_mult * self.e_scale), glass
        )

    # Arrays make the generated __eq__/__hash__ unusable; compare field values.
    def _key(self) -> tuple[Any, ...]:
        return tuple(
            self.stain_matrix.tobytes()
            if f.name == "stain_matrix"
            else getattr(self, f.name)
            for f in fields(self)
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HospitalProfile):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def _rotated(vector: np.ndarray, toward: np.ndarray, angle_deg: float) -> np.ndarray:
    """Rotate a unit vector in the plane it spans with ``toward`` (a hue shift)."""
    ortho = toward - vector * float(vector @ toward)
    ortho /= np.linalg.norm(ortho)
    angle = np.deg2rad(angle_deg)
    out = np.cos(angle) * vector + np.sin(angle) * ortho
    return np.clip(out, 1e-3, None) / np.linalg.norm(np.clip(out, 1e-3, None))


# Hue-rotation targets (OD directions). Absorbing more red makes haematoxylin look
# bluer; absorbing more blue makes eosin look more orange-red. Negative angles go
# the other way: redder-purple haematoxylin, more magenta eosin.
_H_BLUER = np.array([0.95, 0.3, 0.05])
_E_ORANGER = np.array([0.05, 0.75, 0.65])


def _profile(name: str, h_rot: float, e_rot: float, **kwargs: Any) -> HospitalProfile:
    matrix = np.stack(
        [_rotated(RUIFROK_H, _H_BLUER, h_rot), _rotated(RUIFROK_E, _E_ORANGER, e_rot)]
    )
    return HospitalProfile(name=name, stain_matrix=matrix, **kwargs)


def _archetypes() -> list[HospitalProfile]:
    """Designed hospitals spanning the histogram shapes seen across Camelyon17."""
    # fmt: off
    return [
        # Dark, haematoxylin-heavy stain with reddish-purple nuclei; a gamma > 1
        # scanner piles pixels up at the dark end, long bright tail: right-skewed.
        _profile(
            "hospital_0", h_rot=-15.0, e_rot=10.0, h_scale=1.15, e_scale=1.15,
            background_od=(0.03, 0.04, 0.03), gamma=(1.3, 1.4, 1.25),
            contrast=(1.0, 1.0, 1.0), midpoint=(0.5, 0.5, 0.5),
            black_point=0.0, white_point=0.96, blur_sigma=0.55, noise_std=0.012,
        ),
        # Blue nuclei, orange eosin, soft focus; a contrasty S-curve that crushes
        # the darks: left-skewed with a heavy dark shoulder.
        _profile(
            "hospital_1", h_rot=22.0, e_rot=20.0, h_scale=0.85, e_scale=0.8,
            background_od=(0.015, 0.02, 0.02), gamma=(1.0, 1.0, 1.0),
            contrast=(9.0, 9.0, 9.0), midpoint=(0.62, 0.55, 0.6),
            black_point=0.02, white_point=1.0, blur_sigma=1.1, noise_std=0.01,
        ),
        # Reference Ruifrok-Johnston stain; a steep S-curve pivoting on the stroma
        # tones spreads them over the whole range: flat, platykurtic histogram.
        _profile(
            "hospital_2", h_rot=0.0, e_rot=0.0, h_scale=1.0, e_scale=1.0,
            background_od=(0.02, 0.025, 0.02), gamma=(1.0, 1.0, 1.0),
            contrast=(10.0, 10.0, 10.0), midpoint=(0.55, 0.55, 0.55),
            black_point=0.01, white_point=0.99, blur_sigma=0.5, noise_std=0.01,
        ),
        # Bright, washed-out scanner (gamma < 1, raised black point): values crowd
        # near white with a long dark tail, left-skewed and peaked; bluish nuclei.
        _profile(
            "hospital_3", h_rot=12.0, e_rot=8.0, h_scale=1.05, e_scale=1.1,
            background_od=(0.01, 0.015, 0.01), gamma=(0.75, 0.7, 0.82),
            contrast=(0.5, 0.5, 0.5), midpoint=(0.5, 0.5, 0.5),
            black_point=0.04, white_point=1.0, blur_sigma=0.9, noise_std=0.008,
        ),
    ]
    # fmt: on


def _random_profile(index: int, seed: int) -> HospitalProfile:
    """A hospital drawn from the ranges the archetypes span (seeded by its index)."""
    rng = np.random.default_rng([seed, 0x5EED, index])
    gamma = rng.uniform(0.7, 1.4) * rng.uniform(0.93, 1.07, size=3)
    # Either a gentle (near-linear) or a steep S-curve scanner, as in the archetypes.
    contrast = rng.uniform(0.0, 2.0) if rng.random() < 0.5 else rng.uniform(8, 12)
    return _profile(
        f"hospital_{index}",
        h_rot=float(rng.uniform(-15, 22)),
        e_rot=float(rng.uniform(-10, 20)),
        h_scale=float(rng.uniform(0.85, 1.15)),
        e_scale=float(rng.uniform(0.8, 1.15)),
        background_od=tuple(rng.uniform(0.01, 0.04, size=3)),
        gamma=tuple(gamma),
        contrast=(contrast,) * 3,
        # Pivot near the stroma tone (T ~ 0.6 before gamma), like the archetypes,
        # so a steep curve spreads the tissue instead of bleaching or crushing it.
        midpoint=tuple(0.6**gamma * rng.uniform(0.9, 1.05, size=3)),
        black_point=float(rng.uniform(0.0, 0.05)),
        white_point=float(rng.uniform(0.95, 1.0)),
        blur_sigma=float(rng.uniform(0.45, 1.1)),
        noise_std=float(rng.uniform(0.006, 0.014)),
    )


def make_hospital_profiles(num_hospitals: int, seed: int = 0) -> list[HospitalProfile]:
    """Build ``num_hospitals`` hospital profiles.

    The first (up to four) are fixed, designed archetypes that span the histogram
    shapes seen across Camelyon17 centres (green-channel intensity, 64 patches):

    * ``hospital_0``: dark, purple, gamma > 1 scanner; right-skewed (~ +0.4).
    * ``hospital_1``: blue H / orange E, soft focus, S-curve crushing the darks;
      strongly left-skewed (~ -1.2) with a heavy dark shoulder.
    * ``hospital_2``: reference stain, S-curve pivoting on the stroma tones;
      platykurtic (excess kurtosis ~ -0.8).
    * ``hospital_3``: bright, washed-out gamma < 1 scanner; left-skewed (~ -0.75)
      and peaked (excess kurtosis ~ +1.1).

    They do not depend on ``seed``, so a benchmark's domains stay the same across
    experiment seeds. Further hospitals are random
    draws from the same parameter ranges, seeded by ``(seed, index)``, so that
    ``make_hospital_profiles(n + k, s)[:n] == make_hospital_profiles(n, s)``.

    Parameters
    ----------
    num_hospitals : int
        Number of hospitals, >= 1.
    seed : int
        Seed of the random (non-archetype) hospitals, >= 0.

    Returns
    -------
    list of HospitalProfile
    """
    if isinstance(num_hospitals, bool) or not isinstance(
        num_hospitals, int | np.integer
    ):
        raise ValueError(f"num_hospitals must be an int >= 1, got {num_hospitals!r}")
    if num_hospitals < 1:
        raise ValueError(f"num_hospitals must be >= 1, got {num_hospitals}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    archetypes = _archetypes()
    return [
        archetypes[i] if i < len(archetypes) else _random_profile(i, int(seed))
        for i in range(int(num_hospitals))
    ]
