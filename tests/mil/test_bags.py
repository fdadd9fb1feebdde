"""Slide bags: containers, CLAM readers (and their errors), synthetic hospitals."""

from __future__ import annotations

import csv
from functools import partial
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_score

from fedpath.data.base import DataError
from fedpath.mil.bags import (
    BagDataset,
    SlideBag,
    load_clam_bags,
    read_bag_file,
    synthetic_bags,
)


def _bag(sid: str, n: int = 5, d: int = 4, label: int = 0, dom: str = "a") -> SlideBag:
    return SlideBag(sid, torch.randn(n, d), label, dom)


def test_slide_bag_validates_shapes() -> None:
    with pytest.raises(DataError, match="'s1'"):
        SlideBag("s1", torch.zeros(0, 4), 0, "a")
    with pytest.raises(DataError, match="coords"):
        SlideBag("s1", torch.zeros(3, 4), 0, "a", coords=torch.zeros(2, 2))
    b = _bag("s", n=7, d=3)
    assert (b.num_patches, b.dim) == (7, 3)


def test_dataset_checks_dims_labels_and_ids() -> None:
    with pytest.raises(DataError, match="'y'.*dimension 5"):
        BagDataset([_bag("x"), _bag("y", d=5)], ["n", "t"], "test")
    with pytest.raises(DataError, match="label 2"):
        BagDataset([_bag("x", label=2)], ["n", "t"], "test")
    with pytest.raises(DataError, match="twice"):
        BagDataset([_bag("x"), _bag("x")], ["n", "t"], "test")


def test_split_is_stratified_disjoint_and_seeded() -> None:
    bags = [_bag(f"{d}{i}", label=i % 2, dom=d) for d in "ab" for i in range(10)]
    ds = BagDataset(bags, ["n", "t"], "test")
    assert ds.domains == ["a", "b"] and ds.dim == 4
    assert ds.counts() == {"a": {"n": 5, "t": 5}, "b": {"n": 5, "t": 5}}
    assert [b.slide_id for b in ds.by_domain("b")] == [f"b{i}" for i in range(10)]
    train, test = ds.train_test_split(0.2, seed=3)
    ids_tr = {b.slide_id for b in train}
    ids_te = {b.slide_id for b in test}
    assert not ids_tr & ids_te and len(ids_tr | ids_te) == 20
    assert test.counts() == {"a": {"n": 1, "t": 1}, "b": {"n": 1, "t": 1}}
    again = ds.train_test_split(0.2, seed=3)[1]
    assert [b.slide_id for b in again] == [b.slide_id for b in test]
    other = ds.train_test_split(0.2, seed=4)[1]
    assert [b.slide_id for b in other] != [b.slide_id for b in test]


def _write_h5(path: Path, feats: np.ndarray, coords: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as fh:
        fh.create_dataset("features", data=feats)
        if coords:
            fh.create_dataset("coords", data=np.arange(2 * len(feats)).reshape(-1, 2))


def _write_csv(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["slide_id", "label", "domain"])
        w.writerows(rows)
    return path


def test_clam_slide_csv_bad_input_names_the_file_never_its_content(
    tmp_path: Path,
) -> None:
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"slide_id,label,domain\ns1,tum\xe9ur,h0\n")
    with pytest.raises(DataError, match=r"latin.csv': not UTF-8 text \(byte 0xe9 at"):
        load_clam_bags(tmp_path, latin, embedding_space="x")
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(DataError) as err:
        load_clam_bags(tmp_path, passwd, embedding_space="x")
    assert "lacking domain, label, slide_id" in str(err.value)
    assert "root:" not in str(err.value)
    short = _write_csv(tmp_path / "short.csv", [])
    short.write_text(short.read_text() + "s2\n")  # a row without label or domain
    with pytest.raises(DataError, match=r"short.csv:2: slide 's2' has label ''"):
        load_clam_bags(tmp_path, short, embedding_space="x", classes=["a"])
    up = _write_csv(tmp_path / "up.csv", [("../secret", "a", "h0")])
    with pytest.raises(DataError, match=r"up.csv:2: slide_id must be a non-empty"):
        load_clam_bags(tmp_path, up, embedding_space="x")


def test_bag_files_of_the_wrong_kind_are_data_errors(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "str.h5", "w") as fh:
        fh.create_dataset("features", data=np.array([[b"a", b"b"]]))
    with pytest.raises(DataError, match=r"str.h5: unreadable bag file"):
        read_bag_file(tmp_path / "str.h5")
    import os

    os.mkfifo(tmp_path / "pipe.pt")  # torch.load would block on it
    with pytest.raises(DataError, match=r"pipe.pt' is not a regular file"):
        read_bag_file(tmp_path / "pipe.pt")
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(DataError, match=r"empty.pt: unreadable bag file"):
        read_bag_file(tmp_path / "empty.pt")


def test_load_clam_layouts(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    _write_h5(tmp_path / "h5_files" / "s1.h5", rng.normal(size=(6, 8)).astype("f4"))
    (tmp_path / "pt_files").mkdir()
    pt = torch.randn(4, 8)
    torch.save(pt, tmp_path / "pt_files" / "s2.pt")
    rows = [("s1", "tumor", "h0"), ("s2", "normal", "h1")]
    ds = load_clam_bags(
        tmp_path, _write_csv(tmp_path / "d.csv", rows), embedding_space="r50"
    )
    assert ds.classes == ["normal", "tumor"] and ds.embedding_space == "r50"
    assert [b.label for b in ds] == [1, 0] and ds.domains == ["h0", "h1"]
    assert ds[0].coords is not None and ds[0].coords.shape == (6, 2)
    assert ds[1].coords is None and torch.equal(ds[1].features, pt)
    torch.save(torch.randn(6, 8), tmp_path / "pt_files" / "s1.pt")
    ds_pt = load_clam_bags(
        tmp_path, tmp_path / "d.csv", embedding_space="r50", prefer="pt"
    )
    assert ds_pt[0].coords is None  # the .pt file was preferred


def test_loader_errors_name_the_file_or_slide(tmp_path: Path) -> None:
    csv_path = _write_csv(tmp_path / "d.csv", [("s1", "tumor", "h0")])
    with pytest.raises(DataError, match=r"'s1' has no bag file"):
        load_clam_bags(tmp_path, csv_path, embedding_space="x")
    h5 = tmp_path / "h5_files" / "s1.h5"
    h5.parent.mkdir()
    with h5py.File(h5, "w") as fh:
        fh.create_dataset("feats", data=np.zeros((3, 2)))
    with pytest.raises(DataError, match=r"s1\.h5: no 'features'"):
        load_clam_bags(tmp_path, csv_path, embedding_space="x")
    bad = np.ones((3, 2), dtype="f4")
    bad[1, 0] = np.nan
    _write_h5(h5, bad)
    with pytest.raises(DataError, match=r"s1\.h5: 1 patch embedding"):
        load_clam_bags(tmp_path, csv_path, embedding_space="x")
    _write_h5(h5, np.ones((3, 2), dtype="f4"))
    with pytest.raises(DataError, match=r"d\.csv:2: slide 's1' has label 'tumor'"):
        load_clam_bags(tmp_path, csv_path, embedding_space="x", classes=["a", "b"])
    _write_h5(tmp_path / "h5_files" / "s2.h5", np.ones((3, 5), dtype="f4"))
    rows = [("s1", "tumor", "h0"), ("s2", "tumor", "h0")]
    csv2 = _write_csv(tmp_path / "d2.csv", rows)
    with pytest.raises(DataError, match=r"s2\.h5: slide 's2' has D=5"):
        load_clam_bags(tmp_path, csv2, embedding_space="x")
    with pytest.raises(DataError, match="needs columns"):
        load_clam_bags(
            tmp_path, _write_csv(tmp_path / "e.csv", []), embedding_space="x"
        )
    torch.save({"features": torch.ones(2, 2)}, tmp_path / "odd.pt")
    with pytest.raises(DataError, match=r"odd\.pt: expected a tensor"):
        read_bag_file(tmp_path / "odd.pt")


def test_synthetic_bags_are_deterministic_and_balanced() -> None:
    make = partial(
        synthetic_bags, num_domains=2, slides_per_domain=6, dim=16, patches=(50, 60)
    )
    a, b = make(), make()
    assert all(torch.equal(x.features, y.features) for x, y in zip(a, b, strict=True))
    c = make(seed=1)
    assert not torch.equal(a[0].features, c[0].features)
    assert a.counts() == {f"hospital_{d}": {"normal": 3, "tumour": 3} for d in range(2)}
    assert all(50 <= bag.num_patches <= 60 and bag.dim == 16 for bag in a)
    assert a.embedding_space == "synthetic"
    for bag in a:
        rare = a.meta["rare_masks"][bag.slide_id]
        assert bool(rare.any()) == (bag.label == 1)


def test_synthetic_signal_is_rare_patches_not_the_slide_mean() -> None:
    ds = synthetic_bags(num_domains=2, slides_per_domain=40, dim=32, seed=0)
    y = np.array([b.label for b in ds])
    # rare patches: a few per cent of a positive slide
    fractions = [
        float(ds.meta["rare_masks"][b.slide_id].float().mean()) for b in ds if b.label
    ]
    assert min(fractions) >= 0.01 and max(fractions) <= 0.05
    # a linear probe on slide means is near chance ...
    means = np.stack([b.features.mean(0).numpy() for b in ds])
    cv = StratifiedKFold(5, shuffle=True, random_state=0)
    probe = cross_val_score(LogisticRegression(max_iter=3000), means, y, cv=cv)
    assert probe.mean() < 0.7
    # ... while counting patches near the rare centre separates the classes
    near = []
    for b in ds:
        dist = (b.features - ds.meta["rare_centre"][b.domain]).norm(dim=1)
        near.append(int((dist < 0.5 * dist.median()).sum()))
    assert all((n > 0) == bool(label) for n, label in zip(near, y, strict=True))
    # and hospitals differ: the mean embedding moves between domains
    dom_means = [
        torch.cat([b.features for b in ds.by_domain(d)]).mean(0) for d in ds.domains
    ]
    assert float((dom_means[0] - dom_means[1]).norm()) > 1.0
