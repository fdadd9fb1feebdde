"""The frozen-feature store and its on-disk cache (fedpath.data.features)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from fedpath.data.base import DataError
from fedpath.data.features import (
    FORMAT,
    FeatureStore,
    read_features,
    with_store,
    write_features,
)
from tests.data.helpers import toy_dataset


def test_store_of_embeddings_and_of_views() -> None:
    flat = FeatureStore(torch.arange(12.0).reshape(4, 3), image_size=32)
    assert len(flat) == 4 and flat.dim == 3 and flat.in_memory
    batch = flat.load(np.array([2, 0]))
    assert torch.equal(batch, torch.tensor([[6.0, 7.0, 8.0], [0.0, 1.0, 2.0]]))
    assert torch.equal(flat.model_input(batch), batch)
    views = torch.arange(4 * 8 * 5, dtype=torch.float64).reshape(4, 8, 5)
    store = FeatureStore(views, image_size=32, views=8)
    assert store.dim == 5 and store.features.dtype == torch.float32
    batch = store.load(np.arange(4))
    assert torch.equal(store.model_input(batch), batch[:, 0])  # view 0: the image
    picked = store.pick_views(batch, torch.tensor([0, 3, 7, 1]))
    assert torch.equal(
        picked, torch.stack([batch[i, v] for i, v in enumerate([0, 3, 7, 1])])
    )
    held = store.holding(batch[:2])
    assert isinstance(held, FeatureStore) and held.views == 8 and len(held) == 2


@pytest.mark.parametrize(
    ("features", "views", "message"),
    [
        (torch.zeros(4, dtype=torch.float32), 1, r"\(N, D\)"),
        (torch.zeros(4, 3, dtype=torch.int64), 1, "float embeddings"),
        (torch.zeros(4, 3), 8, "float embeddings"),
        (torch.zeros(4, 2, 3), 8, r"8 views expects \(N, 8, ...\)"),
    ],
)
def test_store_refuses_what_is_not_embeddings(
    features: torch.Tensor, views: int, message: str
) -> None:
    with pytest.raises(DataError, match=message):
        FeatureStore(features, 32, views)


def test_with_store_keeps_metadata_and_checks_the_length() -> None:
    ds = toy_dataset(per_domain=4, domains=2, slides_per_domain=2)
    ds.skipped = ["row 3: unreadable"]
    store = FeatureStore(torch.randn(8, 5), ds.image_size)
    out = with_store(ds, store)
    assert out.store is store and out.domains == ds.domains
    assert np.array_equal(out.labels, ds.labels)
    assert np.array_equal(out.is_test, ds.is_test)
    assert out.skipped == ds.skipped and out.skipped is not ds.skipped
    with pytest.raises(DataError, match="new store holds 3 samples, the dataset 8"):
        with_store(ds, FeatureStore(torch.randn(3, 5), 16))


def test_cache_round_trip_and_refusals(tmp_path: Path) -> None:
    path = tmp_path / "cache.h5"
    assert read_features(path, "k") is None  # absent
    feats = np.arange(6, dtype=np.float64).reshape(2, 3)
    write_features(path, "k", feats, {"encoder": "toy"})
    got = read_features(path, "k")
    assert got is not None and got.dtype == np.float32
    np.testing.assert_array_equal(got, feats)
    with h5py.File(path) as fh:
        assert fh.attrs["format"] == FORMAT and fh.attrs["encoder"] == "toy"
    with pytest.raises(DataError, match="holds another dataset or encoder"):
        read_features(path, "other")
    with h5py.File(path, "a") as fh:
        fh.attrs["format"] = FORMAT + 1  # an older or newer layout: encode again
    assert read_features(path, "k") is None
    torn = tmp_path / "torn.h5"
    torn.write_bytes(b"not hdf5")
    assert read_features(torn, "k") is None
    with h5py.File(tmp_path / "empty.h5", "w") as fh:
        fh.attrs["key"] = "k"
    assert read_features(tmp_path / "empty.h5", "k") is None  # no dataset in it


def test_a_feature_cache_of_the_wrong_kind_or_with_nan_is_not_used(
    tmp_path: Path,
) -> None:
    odd = tmp_path / "odd.h5"
    with h5py.File(odd, "w") as fh:  # strings where numbers belong
        fh.create_dataset("features", data=np.array([b"a", b"b"]))
        fh.attrs["format"] = "one"
    assert read_features(odd, "k") is None  # encoded again, not a traceback
    nan = tmp_path / "nan.h5"
    feats = np.ones((3, 4), np.float32)
    feats[1, 2] = np.nan
    write_features(nan, "k", feats, {})
    with pytest.raises(DataError, match=r"nan.h5' holds NaN or infinite"):
        read_features(nan, "k")
