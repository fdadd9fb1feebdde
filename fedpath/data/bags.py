"""Slide-bag datasets: whole slides as bags of patch embeddings (the data contract).

A bag dataset is an ordinary :class:`~fedpath.data.base.DomainDataset` whose store
holds :class:`~fedpath.mil.bags.SlideBag` objects instead of images: one sample is
one slide, so partitions, leave-one-domain-out plans, checkpoints and tables work
unchanged. Algorithms that understand bags (FedHD, the MIL baselines) read them
with :meth:`BagStore.bags`; an image algorithm given a bag dataset fails at once
(``dataset.kind``), naming the dataset.

Registered datasets:

- ``synthetic_bags``: hospitals of slides whose label is a rare patch cluster
  (:func:`fedpath.mil.bags.synthetic_bags`), the FedHD demo and tests;
- ``clam_bags``: CLAM's feature layout (``h5_files``/``pt_files``) plus a
  ``slide_id,label,domain`` CSV, as written by ``fedpath features``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedpath.data.base import DATASETS, DataError, DomainDataset, ImageStore, Split
from fedpath.params.data import (  # noqa: F401  (TestFraction: its old home)
    ClamBagsParams,
    SyntheticBagsParams,
    TestFraction,
)

if TYPE_CHECKING:
    from fedpath.mil.bags import BagDataset, SlideBag


class BagStore(ImageStore):
    """Slides (bags of embeddings) in memory; ``image_size`` is 0 (no pixels)."""

    kind = "bags"

    def __init__(self, bags: list[SlideBag], embedding_space: str) -> None:
        self._bags = bags
        self.embedding_space = embedding_space
        self.dim = int(bags[0].dim) if bags else 0
        self.image_size = 0

    def load(self, indices: np.ndarray) -> torch.Tensor:
        raise DataError(
            "this dataset holds slide bags (patch embeddings), not images; use an "
            "algorithm for bags (e.g. fedhd, fedavg_mil)"
        )

    def bags(self, indices: np.ndarray) -> list[SlideBag]:
        return [self._bags[int(i)] for i in np.asarray(indices, dtype=np.int64)]

    def __len__(self) -> int:
        return len(self._bags)


def split_bags(split: Split) -> list[SlideBag]:
    """The slides of a split of a bag dataset, in split order."""
    store = split.store
    if not isinstance(store, BagStore):
        raise DataError("this split holds images, not slide bags")
    return store.bags(split.indices)


def from_bag_dataset(
    name: str, data: BagDataset, test_fraction: float, seed: int
) -> DomainDataset:
    """A :class:`DomainDataset` over a :class:`~fedpath.mil.bags.BagDataset`.

    The test split is drawn per (domain, label) by slide (``BagDataset.
    train_test_split``), so each hospital tests on slides it never trained on.
    """
    bags = list(data.bags)
    if test_fraction > 0:
        _, test = data.train_test_split(test_fraction, seed)
        test_ids = {b.slide_id for b in test.bags}
    else:
        test_ids = set()
    return DomainDataset(
        name,
        BagStore(bags, data.embedding_space),
        data.classes,
        np.array([b.label for b in bags], dtype=np.int64),
        np.array([b.domain for b in bags]),
        np.array([b.slide_id for b in bags]),
        np.array([b.slide_id in test_ids for b in bags]),
        data.domains,
    )


@DATASETS.register("synthetic_bags", params=SyntheticBagsParams)
def synthetic_bag_hospitals(
    params: SyntheticBagsParams, root: str | None = None
) -> DomainDataset:
    """Hospitals of slide bags with a rare diagnostic component (no files needed)."""
    return _synthetic(params)


@lru_cache(maxsize=4)
def _synthetic(p: SyntheticBagsParams) -> DomainDataset:
    from fedpath.mil.bags import synthetic_bags

    data = synthetic_bags(
        p.num_hospitals,
        p.slides_per_hospital,
        p.dim,
        (p.min_patches, p.max_patches),
        p.rare_fraction,
        p.seed,
        domain_shift=p.domain_shift,
        domain_scale=p.domain_scale,
        domain_rotation=p.domain_rotation,
    )
    return from_bag_dataset("synthetic_bags", data, p.test_fraction, p.seed)


@DATASETS.register("clam_bags", params=ClamBagsParams)
def clam_bag_hospitals(
    params: ClamBagsParams, root: str | None = None
) -> DomainDataset:
    """Slide bags from ``h5_files``/``pt_files`` and a slide CSV (CLAM layout)."""
    from fedpath.mil.bags import load_clam_bags

    if root is None:
        raise DataError("dataset 'clam_bags' needs data.root (the features folder)")
    csv = Path(params.csv)
    csv = csv if csv.is_absolute() else Path(root) / csv
    data = load_clam_bags(
        root,
        csv,
        embedding_space=params.embedding_space,
        classes=params.classes,
        prefer="h5" if params.prefer == "h5" else "pt",
    )
    return from_bag_dataset("clam_bags", data, params.test_fraction, params.seed)
