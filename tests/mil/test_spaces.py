"""Per-client embedding spaces: :mod:`fedpath.mil.spaces`."""

from __future__ import annotations

import math
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from fedpath.errors import DataError
from fedpath.mil.bags import SlideBag
from fedpath.mil.spaces import FeatureSet
from fedpath.params.mil_train import FeatureSetParams


def _bags(n: int = 3, dim: int = 6) -> list[SlideBag]:
    gen = torch.Generator().manual_seed(1)
    return [
        SlideBag(f"s{i}", torch.randn(4 + i, dim, generator=gen), i % 2, f"h{i}")
        for i in range(n)
    ]


def test_a_projection_is_a_seeded_random_linear_map_scaled_by_sqrt_dim() -> None:
    bags = _bags()
    space = FeatureSet(FeatureSetParams(project=4, seed=3), base_dim=6)
    assert (space.name, space.dim, space.root, space.encoder) == (
        "project4-s3",
        4,
        None,
        {},
    )
    # the map, computed independently: N(0, 1) entries / sqrt(6), drawn in float64
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(6, 4, generator=gen, dtype=torch.float64).numpy() / math.sqrt(6)
    out = space.bags(bags)
    for b, o in zip(bags, out, strict=True):
        assert (o.slide_id, o.label, o.domain) == (b.slide_id, b.label, b.domain)
        assert o.features.shape == (b.features.shape[0], 4)
        expected = b.features.double().numpy() @ w
        np.testing.assert_allclose(o.features.numpy(), expected, rtol=1e-5, atol=1e-6)
    again = FeatureSet(FeatureSetParams(project=4, seed=3), base_dim=6).bags(bags)
    assert all(
        torch.equal(a.features, o.features) for a, o in zip(again, out, strict=True)
    )
    other = FeatureSet(FeatureSetParams(project=4, seed=4), base_dim=6).bags(bags)
    assert not torch.equal(other[0].features, out[0].features)


def test_a_nonlinear_projection_is_tanh_of_the_linear_one() -> None:
    bags = _bags()
    linear = FeatureSet(FeatureSetParams(project=5), 6).bags(bags)
    p = FeatureSetParams(project=5, nonlinear=True, embedding_space="scanner-b")
    space = FeatureSet(p, 6)
    assert space.name == "scanner-b"
    for lin, out in zip(linear, space.bags(bags), strict=True):
        assert torch.allclose(out.features, torch.tanh(lin.features))


def test_each_slide_is_embedded_once() -> None:
    space = FeatureSet(FeatureSetParams(project=2), 6)
    bags = _bags()
    first = space.bags(bags)
    again = space.bags(bags[::-1])[::-1]
    assert all(a is b for a, b in zip(again, first, strict=True))


def _write(root: Path, kind: str, slide: str, feats: np.ndarray, **attrs: str) -> None:
    folder = root / f"{kind}_files"
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "pt":
        torch.save(torch.from_numpy(feats), folder / f"{slide}.pt")
        return
    with h5py.File(folder / f"{slide}.h5", "w") as fh:
        fh.create_dataset("features", data=feats)
        fh.attrs.update(attrs)


def test_a_folder_space_reads_each_slide_from_its_own_bag_file(tmp_path: Path) -> None:
    root = tmp_path / "uni"
    rng = np.random.default_rng(0)
    feats = {
        f"s{i}": rng.standard_normal((2 + i, 3)).astype(np.float32) for i in range(3)
    }
    for slide, f in feats.items():
        _write(root, "h5", slide, f, backbone="uni")
    _write(root, "pt", "s0", np.zeros((2, 3), np.float32))  # h5 preferred
    space = FeatureSet(FeatureSetParams(root=str(root)), base_dim=6)
    assert (space.name, space.dim, space.root) == ("uni", 3, str(root))
    assert space.encoder == {"backbone": "uni", "read_from": "s0.h5"}
    out = space.bags(_bags())
    for b in out:
        assert np.array_equal(b.features.numpy(), feats[b.slide_id])
    pt = FeatureSet(FeatureSetParams(root=str(root), prefer="pt"), base_dim=6)
    assert pt.encoder == {}  # a .pt records no encoder
    s0, s1 = pt.bags(_bags(2))
    assert not s0.features.any()  # the .pt, preferred now
    assert np.array_equal(s1.features.numpy(), feats["s1"])  # falls back to h5


def test_a_folder_space_names_what_is_missing_or_mixed(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="holds no bag files"):
        FeatureSet(FeatureSetParams(root=str(empty)), base_dim=6)
    root = tmp_path / "mixed"
    _write(root, "pt", "s0", np.ones((2, 3), np.float32))
    _write(root, "pt", "s1", np.ones((2, 5), np.float32))
    space = FeatureSet(FeatureSetParams(root=str(root)), base_dim=6)
    with pytest.raises(DataError, match="D=5, but embedding space 'mixed' has D=3"):
        space.bags(_bags(2))
    with pytest.raises(DataError, match="slide 's2' has no bag file"):
        space.bags(_bags(3)[2:])
