"""Stores, splits and the per-domain test split by slide (fedpath.data.base)."""

from __future__ import annotations

import csv
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.data.base import (
    DataError,
    DomainDataset,
    Split,
    TensorStore,
    assign_test_split,
)
from fedpath.runtime.experiment import load_dataset
from tests.data.helpers import small_manifest_config, toy_dataset
from tests.fixtures import write_manifest_tree


def test_a_single_slide_domain_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_manifest_tree(tmp_path)
    rows = list(csv.DictReader(path.open()))
    for r in rows:
        if r["domain"] == "site1":
            r["slide"] = "only"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with caplog.at_level(logging.WARNING, logger="fedpath"):
        load_dataset(small_manifest_config(tmp_path).data)
    assert "domain 'site1' has a single slide (site1/only)" in caplog.text


def test_test_split_is_by_slide_and_per_domain() -> None:
    ds = toy_dataset()
    for d in ds.domains:
        train, test = ds.split(d, "train"), ds.split(d, "test")
        assert len(train) + len(test) == len(ds.split(d, "all")) == 20
        assert len(test) > 0 and len(train) > 0
        assert not set(train.slides) & set(test.slides)
        assert set(train.domains) == {d}


def test_dataset_validates_metadata() -> None:
    import torch

    with pytest.raises(DataError, match="labels has 2 entries but the store holds 3"):
        DomainDataset(
            "bad",
            TensorStore(torch.zeros(3, 3, 8, 8, dtype=torch.uint8)),
            ["a"],
            np.zeros(2, int),
            np.zeros(3),
            np.zeros(3),
            np.zeros(3),
        )
    ds = toy_dataset()
    with pytest.raises(DataError, match="no domain 'zz'; domains: d0, d1, d2"):
        ds.split("zz")


def test_tensor_store_checks_images_and_fingerprints_pixels() -> None:
    images = torch.arange(2 * 3 * 4 * 4, dtype=torch.uint8).reshape(2, 3, 4, 4)
    store = TensorStore(images)
    assert store.image_size == 4 and len(store) == 2 and store.in_memory
    assert torch.equal(store.load(np.array([1])), images[1:])
    assert store.fingerprint() == TensorStore(images.clone()).fingerprint()
    changed = images.clone()
    changed[0, 0, 0, 0] += 1
    assert store.fingerprint() != TensorStore(changed).fingerprint()
    # float in [0, 1] for the model; no second version of a sample to pick
    assert torch.equal(store.model_input(images)[1], images[1].float() / 255)
    with pytest.raises(DataError, match="one version of each sample"):
        store.pick_views(images, torch.zeros(2, dtype=torch.long))
    with pytest.raises(DataError, match=r"uint8 images of shape \(N, 3, H, W\)"):
        TensorStore(images.float())
    with pytest.raises(DataError, match="must be square"):
        TensorStore(torch.zeros(1, 3, 4, 5, dtype=torch.uint8))


def test_split_batches_subset_and_concat() -> None:
    ds = toy_dataset(per_domain=10, domains=2)
    part = ds.split("d0", "all")
    seen = [pos.tolist() for _, _, pos in part.batches(4)]
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [len(p) for _, _, p in part.batches(4, drop_last=True)] == [4, 4]
    shuffled = [p for _, _, p in part.batches(4, shuffle=True, seed=5)]
    order = np.random.default_rng(5).permutation(10)  # the seed alone decides
    assert np.array_equal(np.concatenate(shuffled), order)
    x, y, pos = next(part.batches(3, shuffle=True, seed=5))
    assert torch.equal(y, torch.from_numpy(part.labels[pos]))
    assert torch.equal(x, part.load(pos))
    sub = part.subset([9, 0])
    assert sub.indices.tolist() == [part.indices[9], part.indices[0]]
    assert np.array_equal(sub.class_counts(3), np.bincount(sub.labels, minlength=3))
    both = Split.concat([part, ds.split("d1", "all")])
    assert len(both) == 20 and set(both.domains) == {"d0", "d1"}
    with pytest.raises(DataError, match="zero splits"):
        Split.concat([])
    with pytest.raises(DataError, match="different stores"):
        Split.concat([part, toy_dataset().split("d0", "all")])


def test_counts_per_domain_class_and_part() -> None:
    ds = toy_dataset(per_domain=10, domains=2, slides_per_domain=5)
    rows = ds.counts()
    assert [r["domain"] for r in rows] == ["d0", "d1"]
    for r in rows:
        d = ds.split(r["domain"], "all")
        assert r["slides"] == 5
        assert r["train/a"] + r["train/b"] + r["test/a"] + r["test/b"] == len(d)
        test = ds.split(r["domain"], "test")
        assert r["test/b"] == int(test.labels.sum())


def test_assign_test_split_fraction_and_edge_cases() -> None:
    domains = np.repeat(["x", "y"], 20)
    slides = np.array([f"s{i // 2}" for i in range(40)])  # 10 slides per domain
    is_test = assign_test_split(domains, slides, 0.3, seed=1)
    for d in ("x", "y"):
        assert is_test[domains == d].sum() == 6  # 3 slides of 2 crops: exactly 30 %
    for s in set(slides):  # whole slides on one side
        assert len(set(is_test[slides == s])) == 1
    assert not assign_test_split(domains, slides, 0.0, seed=1).any()
    two = assign_test_split(np.array(["x"] * 3), np.array(["a", "a", "b"]), 0.01, 0)
    assert two.any() and not two.all()  # at least one test and one train slide
    with pytest.raises(DataError, match=r"test_fraction must lie in \[0, 1\)"):
        assign_test_split(domains, slides, 1.0, seed=0)


def test_balanced_batches_draw_every_class_alike_and_repeat_by_seed() -> None:
    labels = np.array([0] * 90 + [1] * 10)
    split = Split(
        TensorStore(torch.zeros(100, 3, 4, 4, dtype=torch.uint8)),
        np.arange(100),
        labels,
        np.array(["d"] * 100),
        np.array(["s"] * 100),
    )
    drawn = [
        np.concatenate(
            [p for _, _, p in split.batches(16, True, [s, 0], balanced=True)]
        )
        for s in range(20)
    ]
    assert all(len(d) == 100 for d in drawn)  # an epoch is len(split) draws
    share = np.mean(np.concatenate([labels[d] for d in drawn]))
    assert share == pytest.approx(0.5, abs=0.05)  # not the data's 0.1
    again = np.concatenate(
        [p for _, _, p in split.batches(16, True, [0, 0], balanced=True)]
    )
    np.testing.assert_array_equal(again, drawn[0])
    plain = np.concatenate(
        [p for _, _, p in split.batches(16, False, 0, balanced=True)]
    )
    np.testing.assert_array_equal(plain, np.arange(100))  # no shuffle: in order
