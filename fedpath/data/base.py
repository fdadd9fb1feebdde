"""The data contract: hospitals (domains), classes, per-domain train/test splits.

Every dataset, synthetic or read from disk, is a :class:`DomainDataset`: a set of
samples with ``(domain, slide, label)`` metadata and a fixed train/test assignment.
A :class:`Split` is a view of some of those samples; training code only ever sees
splits, so the runtime is identical for in-memory tensors and for PNGs on disk.
"""

from __future__ import annotations

import hashlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from fedpath.errors import DataError
from fedpath.registry import DATASETS  # noqa: F401  (its home for users)

Part = Literal["train", "test", "all"]


class ImageStore(ABC):
    """Where the pixels live. ``load`` returns uint8 tensors of shape (B, 3, H, W)."""

    image_size: int
    #: "images"; "bags" for slides as bags of embeddings (:mod:`fedpath.data.bags`);
    #: "features" for images encoded once by a frozen encoder
    #: (:mod:`fedpath.data.features`)
    kind: str = "images"

    @abstractmethod
    def load(self, indices: np.ndarray) -> torch.Tensor: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @property
    def in_memory(self) -> bool:
        return False

    #: stored versions of every sample (8: the dihedral views of cached features)
    views: int = 1
    #: (N, C) float32 target distributions per stored sample, from annotator
    #: agreement (``data.params.agreement``; :mod:`fedpath.losses.soft_targets`);
    #: None: the labels only
    soft_targets: np.ndarray | None = None

    def model_input(self, batch: torch.Tensor) -> torch.Tensor:
        """A loaded batch as a model takes it: images as float in [0, 1]."""
        return batch.float().div_(255.0)

    def pick_views(self, batch: torch.Tensor, views: torch.Tensor) -> torch.Tensor:
        """View ``views[i]`` of sample ``i`` of a loaded batch (``views > 1``)."""
        raise DataError(f"{type(self).__name__} holds one version of each sample")

    def holding(self, batch: torch.Tensor) -> ImageStore:
        """A store of this kind holding ``batch`` (loaded from a store like this
        one; e.g. a pooled upload)."""
        return TensorStore(batch)

    def fingerprint(self) -> str:
        """A digest of what the store holds (keys caches of its encoded images)."""
        raise DataError(
            f"{type(self).__name__} has no fingerprint: its encoded images cannot "
            "be cached (train.cache_features)"
        )


class TensorStore(ImageStore):
    """All images in one uint8 tensor (synthetic hospitals, cached small datasets)."""

    def __init__(self, images: torch.Tensor) -> None:
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
            raise DataError(
                f"TensorStore expects uint8 images of shape (N, 3, H, W), got "
                f"{images.dtype} {tuple(images.shape)}"
            )
        if images.shape[2] != images.shape[3]:
            raise DataError(f"images must be square, got {tuple(images.shape[2:])}")
        self.images = images
        self.image_size = int(images.shape[2])

    def load(self, indices: np.ndarray) -> torch.Tensor:
        return self.images[torch.from_numpy(np.asarray(indices, dtype=np.int64))]

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def fingerprint(self) -> str:
        """sha256 of the pixels (and their shape)."""
        h = hashlib.sha256(repr(tuple(self.images.shape)).encode())
        h.update(self.images.contiguous().numpy().tobytes())
        return h.hexdigest()

    @property
    def in_memory(self) -> bool:
        return True


@dataclass(frozen=True)
class Split:
    """Some samples of a dataset: positions into a store plus their metadata."""

    store: ImageStore
    indices: np.ndarray  # int64 positions into ``store``
    labels: np.ndarray  # int64 class indices
    domains: np.ndarray  # str domain (hospital/scanner) per sample
    slides: np.ndarray  # str slide/patient id per sample

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def subset(self, positions: np.ndarray | Sequence[int]) -> Split:
        pos = np.asarray(positions, dtype=np.int64)
        return Split(
            self.store,
            self.indices[pos],
            self.labels[pos],
            self.domains[pos],
            self.slides[pos],
        )

    def load(self, positions: np.ndarray) -> torch.Tensor:
        """uint8 images (B, 3, H, W) of the samples at ``positions`` of this split
        (float embeddings (B, D) for a store of kind ``features``)."""
        return self.store.load(self.indices[np.asarray(positions, dtype=np.int64)])

    def class_counts(self, num_classes: int) -> np.ndarray:
        return np.bincount(self.labels, minlength=num_classes)

    def batches(
        self,
        batch_size: int,
        shuffle: bool = False,
        seed: int | list[int] = 0,
        drop_last: bool = False,
        balanced: bool = False,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, np.ndarray]]:
        """Yield ``(uint8 images, int64 labels, positions)`` batches.

        Shuffling draws from a generator seeded by ``seed`` alone, so an epoch's
        order depends only on (seed), never on what ran before: resume is exact.
        ``balanced`` (with ``shuffle``): an epoch is ``len(self)`` draws with
        replacement, each class equally likely (``train.sampling: balanced``).
        """
        n = len(self)
        rng = np.random.default_rng(seed)
        if shuffle and balanced and n:
            counts = np.bincount(self.labels)
            p = 1.0 / counts[self.labels]
            order = rng.choice(n, size=n, replace=True, p=p / p.sum())
        else:
            order = rng.permutation(n) if shuffle else np.arange(n)
        stop = n - n % batch_size if drop_last and n >= batch_size else n
        labels = torch.from_numpy(self.labels)
        for start in range(0, stop, batch_size):
            pos = order[start : start + batch_size]
            yield self.load(pos), labels[torch.from_numpy(pos)], pos

    @staticmethod
    def concat(splits: Sequence[Split]) -> Split:
        if not splits:
            raise DataError("cannot concatenate zero splits")
        store = splits[0].store
        if any(s.store is not store for s in splits):
            raise DataError("splits of different stores cannot be concatenated")
        return Split(
            store,
            np.concatenate([s.indices for s in splits]),
            np.concatenate([s.labels for s in splits]),
            np.concatenate([s.domains for s in splits]),
            np.concatenate([s.slides for s in splits]),
        )


class DomainDataset:
    """Samples with (domain, slide, label) metadata and a train/test assignment.

    Subclasses (or factories) build the store and the metadata arrays; everything
    else (splits per domain, counts, descriptions) is shared.
    """

    def __init__(
        self,
        name: str,
        store: ImageStore,
        classes: Sequence[str],
        labels: np.ndarray,
        domains: np.ndarray,
        slides: np.ndarray,
        is_test: np.ndarray,
        domain_order: Sequence[str] | None = None,
    ) -> None:
        n = len(store)
        for field_name, arr in (
            ("labels", labels),
            ("domains", domains),
            ("slides", slides),
            ("is_test", is_test),
        ):
            if len(arr) != n:
                raise DataError(
                    f"dataset {name!r}: {field_name} has {len(arr)} entries but the "
                    f"store holds {n} images"
                )
        labels = np.asarray(labels, dtype=np.int64)
        if n and (labels.min() < 0 or labels.max() >= len(classes)):
            raise DataError(
                f"dataset {name!r}: labels must lie in [0, {len(classes)}), "
                f"got range [{labels.min()}, {labels.max()}]"
            )
        self.name = name
        self.store = store
        self.classes = list(classes)
        self.labels = labels
        self.domain_of = np.asarray(domains).astype(str)
        self.slide_of = np.asarray(slides).astype(str)
        self.is_test = np.asarray(is_test, dtype=bool)
        #: descriptions of input rows skipped with skip_bad (counted, never silent)
        self.skipped: list[str] = []
        present = list(dict.fromkeys(self.domain_of.tolist()))
        self.domains = list(domain_order) if domain_order is not None else present
        missing = set(present) - set(self.domains)
        if missing:
            raise DataError(f"dataset {name!r}: domains {sorted(missing)} not in order")

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def image_size(self) -> int:
        return self.store.image_size

    @property
    def kind(self) -> str:
        """``"images"`` or ``"bags"`` (slides as bags of patch embeddings)."""
        return self.store.kind

    def check_domain(self, domain: str) -> None:
        if domain not in self.domains:
            raise DataError(
                f"dataset {self.name!r} has no domain {domain!r}; domains: "
                f"{', '.join(self.domains)}"
            )

    def split(self, domain: str, part: Part = "train") -> Split:
        """The ``part`` of ``domain``'s samples."""
        self.check_domain(domain)
        mask = self.domain_of == domain
        if part == "train":
            mask &= ~self.is_test
        elif part == "test":
            mask &= self.is_test
        elif part != "all":
            raise DataError(f"part must be 'train', 'test' or 'all', got {part!r}")
        idx = np.flatnonzero(mask)
        return Split(
            self.store, idx, self.labels[idx], self.domain_of[idx], self.slide_of[idx]
        )

    def counts(self) -> list[dict[str, Any]]:
        """Per-domain sample counts by class and part (for ``fedpath data``)."""
        rows = []
        for d in self.domains:
            m = self.domain_of == d
            row: dict[str, Any] = {"domain": d, "slides": len(set(self.slide_of[m]))}
            for part, pm in (("train", ~self.is_test), ("test", self.is_test)):
                for ci, cname in enumerate(self.classes):
                    row[f"{part}/{cname}"] = int(np.sum(m & pm & (self.labels == ci)))
            rows.append(row)
        return rows


def assign_test_split(
    domains: np.ndarray, groups: np.ndarray, test_fraction: float, seed: int
) -> np.ndarray:
    """Mark about ``test_fraction`` of each domain as test, whole groups at a time.

    ``groups`` are slides (or patients): all crops of one slide land on the same side,
    so the test split never shares a slide with training. Each domain with at least
    two groups gets at least one test group and one train group.
    """
    if not 0.0 <= test_fraction < 1.0:
        raise DataError(f"test_fraction must lie in [0, 1), got {test_fraction}")
    rng = np.random.default_rng(seed)
    is_test = np.zeros(len(domains), dtype=bool)
    if test_fraction == 0:
        return is_test
    for d in dict.fromkeys(np.asarray(domains).tolist()):
        in_d = np.asarray(domains) == d
        uniq, inverse = np.unique(np.asarray(groups)[in_d], return_inverse=True)
        sizes = np.bincount(inverse)
        order = rng.permutation(len(uniq))
        target = test_fraction * in_d.sum()
        chosen = np.zeros(len(uniq), dtype=bool)
        total = 0
        for g in order:
            if chosen.sum() >= len(uniq) - 1:
                break
            # take a slide only if it brings the test size closer to the target
            if abs(total + sizes[g] - target) < abs(total - target):
                chosen[g] = True
                total += sizes[g]
        if len(uniq) >= 2 and not chosen.any():
            chosen[order[0]] = True
        if len(uniq) == 1:
            logging.getLogger("fedpath").warning(
                "domain %r has a single slide (%s): all of it trains, so it has no "
                "test split and no source evaluation; give it more slides or "
                "per-image slide ids to evaluate it",
                d,
                uniq[0],
            )
        is_test[np.flatnonzero(in_d)] = chosen[inverse]
    return is_test
