"""Slide-bag datasets (fedpath.data.bags): one sample per slide, split by slide."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpath.data.bags import (
    BagStore,
    clam_bag_hospitals,
    from_bag_dataset,
    split_bags,
    synthetic_bag_hospitals,
)
from fedpath.data.base import DataError, TensorStore
from fedpath.mil.bags import BagDataset, SlideBag
from fedpath.params.data import ClamBagsParams, SyntheticBagsParams
from tests.data.helpers import toy_dataset


def bag_data(per_domain: int = 4) -> BagDataset:
    """Two hospitals of ``per_domain`` slides, alternating labels, 3 patches each."""
    bags = [
        SlideBag(f"{d}/s{i}", torch.full((3, 2), float(i)), i % 2, d)
        for d in ("h0", "h1")
        for i in range(per_domain)
    ]
    return BagDataset(bags, ["neg", "pos"], "toy-space", ["h0", "h1"])


def test_a_bag_dataset_has_one_sample_per_slide() -> None:
    ds = from_bag_dataset("toy", bag_data(), 0.5, seed=0)
    assert ds.kind == "bags" and ds.domains == ["h0", "h1"]
    assert ds.classes == ["neg", "pos"]
    all_h0 = ds.split("h0", "all")
    assert len(all_h0) == 4
    bags = split_bags(all_h0)
    assert [b.slide_id for b in bags] == [f"h0/s{i}" for i in range(4)]
    assert [b.label for b in bags] == list(all_h0.labels)


def test_the_test_split_is_by_slide_with_every_class_on_both_sides() -> None:
    ds = from_bag_dataset("toy", bag_data(per_domain=8), 0.25, seed=3)
    for dom in ds.domains:
        train, test = ds.split(dom, "train"), ds.split(dom, "test")
        assert len(train) + len(test) == 8
        assert not set(train.slides) & set(test.slides)
        # 4 slides per (hospital, label): round(4 * 0.25) = 1 of each to test
        assert sorted(test.labels.tolist()) == [0, 1]
    again = from_bag_dataset("toy", bag_data(per_domain=8), 0.25, seed=3)
    assert np.array_equal(
        again.split("h0", "test").indices, ds.split("h0", "test").indices
    )


def test_no_test_fraction_keeps_every_slide_for_training() -> None:
    ds = from_bag_dataset("toy", bag_data(), 0.0, seed=0)
    assert all(len(ds.split(d, "test")) == 0 for d in ds.domains)


def test_bags_are_not_images() -> None:
    store = BagStore(bag_data().bags, "toy-space")
    assert store.dim == 2 and store.image_size == 0 and len(store) == 8
    with pytest.raises(DataError, match="holds slide bags .* not images"):
        store.load(np.arange(2))
    assert BagStore([], "empty").dim == 0
    with pytest.raises(DataError, match="holds images, not slide bags"):
        split_bags(toy_dataset().split("d0", "all"))
    assert isinstance(toy_dataset().split("d0", "all").store, TensorStore)


def test_synthetic_bags_registered_dataset() -> None:
    p = SyntheticBagsParams(
        num_hospitals=2, slides_per_hospital=4, dim=3, min_patches=2, max_patches=3
    )
    ds = synthetic_bag_hospitals(p, None)
    assert ds.kind == "bags" and len(ds.domains) == 2
    assert sum(len(ds.split(d, "all")) for d in ds.domains) == 8
    bag = split_bags(ds.split(ds.domains[0], "all"))[0]
    assert bag.dim == 3 and 2 <= bag.num_patches <= 3
    assert synthetic_bag_hospitals(p, None) is ds  # cached: built once per params


def test_clam_bags_needs_a_root() -> None:
    with pytest.raises(DataError, match="needs data.root"):
        clam_bag_hospitals(ClamBagsParams(), None)
