"""Synthetic stain-shift hospitals: the embedded dataset of the demo and the tests.

Each hospital renders the same kind of procedural tissue (see
:mod:`fedpath.data.synthetic_render`) through its own Beer-Lambert stain vectors,
stain concentrations and nonlinear scanner tone curve; the class (normal vs tumour)
is morphological only. Patches are grouped into slides (per-slide stain jitter) and
the train/test split is by slide.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from fedpath.data.base import DATASETS, DomainDataset, TensorStore, assign_test_split
from fedpath.data.synthetic_render import (
    CLASS_NAMES,
    make_hospital_profiles,
    render_patches,
)
from fedpath.params.data import SyntheticParams


@DATASETS.register("synthetic", params=SyntheticParams)
def synthetic_hospitals(
    params: SyntheticParams, root: str | None = None
) -> DomainDataset:
    """Procedural H&E hospitals with stain/scanner shift (no files needed)."""
    return _build(params)


@lru_cache(maxsize=4)
def _build(p: SyntheticParams) -> DomainDataset:
    # Cached: the demo runs dozens of experiments on one federation; rendering it
    # once per process keeps generation a negligible part of the run.
    profiles = make_hospital_profiles(p.num_hospitals, p.seed)
    rng = np.random.default_rng([p.seed, 1])
    images, labels, domains, slides = [], [], [], []
    n = p.samples_per_hospital
    for h, profile in enumerate(profiles):
        n_tumour = round(p.tumour_fraction * n)
        y = rng.permutation(np.r_[np.zeros(n - n_tumour, int), np.ones(n_tumour, int)])
        slide = rng.integers(0, p.slides_per_hospital, n)
        images.append(
            render_patches(
                y, profile, p.image_size, seed=p.seed * 1000 + h, slide_ids=slide
            )
        )
        labels.append(y)
        domains.append(np.full(n, profile.name))
        slides.append(np.array([f"{profile.name}/slide{s:02d}" for s in slide]))
    dom = np.concatenate(domains)
    sl = np.concatenate(slides)
    is_test = assign_test_split(dom, sl, p.test_fraction, seed=p.seed)
    store = TensorStore(torch.from_numpy(np.concatenate(images)))
    return DomainDataset(
        "synthetic",
        store,
        CLASS_NAMES,
        np.concatenate(labels),
        dom,
        sl,
        is_test,
        [pr.name for pr in profiles],
    )
