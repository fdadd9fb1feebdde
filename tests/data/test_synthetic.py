"""The registered ``synthetic`` dataset (fedpath.data.synthetic): stain-shift
hospitals with an exact tumour share, split by slide."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from fedpath.data.synthetic import synthetic_hospitals
from fedpath.data.synthetic_render import CLASS_NAMES
from fedpath.params.data import SyntheticParams

TINY = SyntheticParams(
    num_hospitals=2, samples_per_hospital=8, image_size=16, slides_per_hospital=2
)


def test_hospitals_classes_and_exact_tumour_share() -> None:
    ds = synthetic_hospitals(TINY, None)
    assert ds.domains == ["hospital_0", "hospital_1"]
    assert ds.classes == list(CLASS_NAMES)
    for dom in ds.domains:
        part = ds.split(dom, "all")
        assert len(part) == 8
        assert int(part.labels.sum()) == round(0.5 * 8)  # tumour_fraction 0.5
        assert all(s.startswith(f"{dom}/slide") for s in part.slides)
        x = part.load(np.arange(len(part)))
        assert x.dtype == torch.uint8 and tuple(x.shape) == (8, 3, 16, 16)


def test_split_is_by_slide() -> None:
    ds = synthetic_hospitals(TINY, None)
    for dom in ds.domains:
        train, test = ds.split(dom, "train"), ds.split(dom, "test")
        assert not set(train.slides) & set(test.slides)
        assert len(train) + len(test) == 8


def test_cached_and_seeded() -> None:
    assert synthetic_hospitals(TINY, None) is synthetic_hospitals(TINY, None)
    a = synthetic_hospitals(TINY, None).split("hospital_0", "all").load(np.arange(8))
    other = dataclasses.replace(TINY, seed=1)
    b = synthetic_hospitals(other, None).split("hospital_0", "all").load(np.arange(8))
    assert not torch.equal(a, b)
