"""Tests of the procedural stain-shift hospitals (fedpath.data.synthetic_render)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from fedpath.data import synthetic_render as sr
from fedpath.data.synthetic_profiles import RUIFROK_E, RUIFROK_H
from fedpath.data.synthetic_render import (
    CLASS_NAMES,
    make_hospital_profiles,
    render_patches,
)

PROFILES = make_hospital_profiles(4)
LABELS = np.arange(64) % 2


@pytest.fixture(scope="module")
def hospital_images() -> list[np.ndarray]:
    """64 balanced patches per archetype hospital, spread over 4 slides."""
    slides = np.arange(64) // 16
    return [render_patches(LABELS, p, 64, seed=1, slide_ids=slides) for p in PROFILES]


def haematoxylin_od(images: np.ndarray) -> np.ndarray:
    """H optical density (N, H, W) by colour deconvolution with the standard
    Ruifrok-Johnston vectors (the hospital's own vectors are unknown to a reader)."""
    residual = np.cross(RUIFROK_H, RUIFROK_E)
    inverse = np.linalg.inv(np.stack([RUIFROK_H, RUIFROK_E, residual]))
    od = -np.log10(np.clip(images.astype(np.float64), 1, 255) / 255.0)
    return np.einsum("nchw,c->nhw", od, inverse[:, 0])


def green_moments(images: np.ndarray) -> tuple[float, float]:
    """Skewness and excess kurtosis of the green-channel intensity, all pixels.

    Green is where both dyes absorb most (v_H[1] ~ 0.70, v_E[1] ~ 0.99), so its
    intensity is the best single-channel proxy of total stain intensity; all pixels
    are pooled (no tissue mask, whose threshold would itself depend on the
    hospital's tone curve).
    """
    green = images[:, 1].astype(np.float64).ravel()
    return float(scipy.stats.skew(green)), float(scipy.stats.kurtosis(green))


def test_class_names() -> None:
    assert CLASS_NAMES == ("normal", "tumour")


@pytest.mark.parametrize("size", [16, 33, 64])
def test_shape_dtype_range(size: int) -> None:
    images = render_patches(np.array([0, 1, 1]), PROFILES[2], size, seed=5)
    assert images.shape == (3, 3, size, size)
    assert images.dtype == np.uint8
    assert images.flags.c_contiguous
    # Real content: not blank, not saturated everywhere.
    assert 40 < images.mean() < 240
    assert images.std() > 10


def test_empty_labels() -> None:
    images = render_patches(np.zeros(0, dtype=np.int64), PROFILES[0], 32)
    assert images.shape == (0, 3, 32, 32)


def test_deterministic_and_seed_dependent() -> None:
    slides = np.array([0, 0, 1, 1, 2, 2])
    labels = np.array([0, 1, 0, 1, 0, 1])
    a = render_patches(labels, PROFILES[1], 40, seed=7, slide_ids=slides)
    b = render_patches(labels, PROFILES[1], 40, seed=7, slide_ids=slides)
    c = render_patches(labels, PROFILES[1], 40, seed=8, slide_ids=slides)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    # Same seed, another hospital: different tissue, not only different colour.
    d = render_patches(labels, PROFILES[2], 40, seed=7, slide_ids=slides)
    assert not np.array_equal(a, d)


def test_chunk_and_thread_independent(monkeypatch: pytest.MonkeyPatch) -> None:
    labels = np.arange(23) % 2
    slides = np.arange(23) // 6
    reference = render_patches(labels, PROFILES[3], 32, seed=2, slide_ids=slides)
    for chunk_pixels, workers in [(1, 1), (5 * 32 * 32, 2), (10**9, 1)]:
        monkeypatch.setattr(sr, "_CHUNK_PIXELS", chunk_pixels)
        monkeypatch.setattr(sr, "_WORKERS", workers)
        again = render_patches(labels, PROFILES[3], 32, seed=2, slide_ids=slides)
        assert np.array_equal(again, reference)


def test_per_slide_jitter() -> None:
    labels = np.tile([0, 1], 8)
    by_slide = [
        render_patches(labels, PROFILES[2], 32, seed=4, slide_ids=np.full(16, s))
        for s in range(3)
    ]
    means = np.array([im.reshape(16, 3, -1).mean(axis=(0, 2)) for im in by_slide])
    # Same tissue (same seed and patch indices): only the slide's stain differs.
    for i in range(3):
        for j in range(i + 1, 3):
            assert np.abs(means[i] - means[j]).max() > 0.5
    # A slide's jitter depends on its id only, not on the other slides in the call.
    mixed = render_patches(
        labels, PROFILES[2], 32, seed=4, slide_ids=np.repeat([0, 5], 8)
    )
    assert np.array_equal(mixed[:8], by_slide[0][:8])


def test_hospitals_differ_in_higher_moments(hospital_images: list[np.ndarray]) -> None:
    moments = np.array([green_moments(im) for im in hospital_images])
    skew, kurt = moments[:, 0], moments[:, 1]
    assert skew.max() > 0.2, moments
    assert skew.min() < -0.2, moments
    assert kurt.max() - kurt.min() > 0.5, moments
    # The designed archetypes: 0 right-skewed, 2 platykurtic, 3 left-skewed+peaked.
    assert skew[0] > 0.2 and kurt[2] < -0.2 and skew[3] < -0.2 and kurt[3] > 0.2


def test_tumour_nuclei_larger_and_denser(hospital_images: list[np.ndarray]) -> None:
    tumour = LABELS == 1
    for images in hospital_images:
        h_od = haematoxylin_od(images)
        # Per-hospital threshold: the hospitals' H scales differ on purpose.
        nuclear = h_od > np.quantile(h_od, 0.85)
        fraction = nuclear.mean(axis=(1, 2))
        assert fraction[tumour].mean() > 1.5 * fraction[~tumour].mean()
        # Hyperchromasia: nuclear pixels of tumour are darker in H on average.
        assert (
            h_od[tumour][nuclear[tumour]].mean()
            > h_od[~tumour][nuclear[~tumour]].mean()
        )


def test_label_only_acts_through_morphology(monkeypatch: pytest.MonkeyPatch) -> None:
    # With equal atypia distributions the classes must render byte-identically:
    # nothing but the morphology (atypia) depends on the label.
    monkeypatch.setattr(sr, "_ATYPIA_MEAN", (0.5, 0.5))
    zeros = render_patches(np.zeros(6, dtype=int), PROFILES[0], 32, seed=3)
    ones = render_patches(np.ones(6, dtype=int), PROFILES[0], 32, seed=3)
    assert np.array_equal(zeros, ones)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"image_size": 15}, "image_size"),
        ({"image_size": 513}, "image_size"),
        ({"image_size": 64.0}, "image_size"),
        ({"image_size": True}, "image_size"),
        ({"labels": np.array([[0, 1]])}, "labels"),
        ({"labels": np.array([0.0, 1.0])}, "labels"),
        ({"labels": np.array([0, 2])}, "labels"),
        ({"labels": np.array([-1, 0])}, "labels"),
        ({"slide_ids": np.array([0])}, "slide_ids"),
        ({"slide_ids": np.array([0.5, 1.0])}, "slide_ids"),
        ({"slide_ids": np.array([0, -1])}, "slide_ids"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_inputs(kwargs: dict[str, object], argument: str) -> None:
    call: dict[str, object] = {"labels": np.array([0, 1]), "profile": PROFILES[0]}
    call.update(kwargs)
    with pytest.raises(ValueError, match=argument):
        render_patches(**call)  # type: ignore[arg-type]
