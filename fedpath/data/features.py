"""Images encoded once by a frozen encoder: the store of the frozen-feature path.

With ``train.cache_features`` every image of a dataset is encoded once by the
configured (frozen, pretrained) encoder, and training, evaluation and the linear
probe read the embeddings instead of the pixels (:mod:`fedpath.tasks.features`).
The embeddings are cached on disk, one HDF5 file per (dataset contents, encoder
weights, input size), in the spirit of CLAM's ``h5_files``: dataset
``features`` (N x D float32), with the key's parts as attributes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedpath.data.base import DataError, DomainDataset, ImageStore

#: the HDF5 dataset of the embeddings and the file format's version
FEATURES = "features"
FORMAT = 1


class FeatureStore(ImageStore):
    """float32 embeddings (N, D), or feature maps (N, C, h, w), of images of
    ``image_size`` px, in dataset order; with ``views`` 8, those of the 8
    dihedral transforms of every image, (N, 8, ...), view 0 the image itself."""

    kind = "features"

    def __init__(self, features: torch.Tensor, image_size: int, views: int = 1) -> None:
        if features.ndim < 2 + (views > 1) or not features.is_floating_point():
            raise DataError(
                f"FeatureStore expects float embeddings (N, D) or feature maps "
                f"(N, C, h, w), got "
                f"{features.dtype} {tuple(features.shape)}"
            )
        if views > 1 and features.shape[1] != views:
            raise DataError(
                f"FeatureStore with {views} views expects (N, {views}, ...), got "
                f"{tuple(features.shape)}"
            )
        self.features = features.float().contiguous()
        self.image_size = image_size
        self.views = views

    @property
    def dim(self) -> int:
        """Channels (or embedding size) of one view."""
        return int(self.features.shape[2 if self.views > 1 else 1])

    def load(self, indices: np.ndarray) -> torch.Tensor:
        return self.features[torch.from_numpy(np.asarray(indices, dtype=np.int64))]

    def __len__(self) -> int:
        return int(self.features.shape[0])

    @property
    def in_memory(self) -> bool:
        return True

    def model_input(self, batch: torch.Tensor) -> torch.Tensor:
        """The unaugmented version (view 0: the identity) of each sample."""
        return (batch[:, 0] if self.views > 1 else batch).float()

    def pick_views(self, batch: torch.Tensor, views: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(batch.shape[0], device=batch.device)
        return batch[rows, views.to(batch.device)].float()

    def holding(self, batch: torch.Tensor) -> ImageStore:
        return FeatureStore(batch, self.image_size, self.views)


def with_store(dataset: DomainDataset, store: ImageStore) -> DomainDataset:
    """``dataset`` with its samples in ``store`` (same order, metadata and split)."""
    if len(store) != len(dataset.store):
        raise DataError(
            f"dataset {dataset.name!r}: the new store holds {len(store)} samples, "
            f"the dataset {len(dataset.store)}"
        )
    store.soft_targets = dataset.store.soft_targets
    out = DomainDataset(
        dataset.name,
        store,
        dataset.classes,
        dataset.labels,
        dataset.domain_of,
        dataset.slide_of,
        dataset.is_test,
        dataset.domains,
    )
    out.skipped = list(dataset.skipped)
    return out


def read_features(path: Path, key: str) -> np.ndarray | None:
    """The cached embeddings of ``key`` at ``path``; None if absent or incomplete
    (a file of another key or format is refused: the cache is keyed by name)."""
    import h5py

    if not path.is_file():
        return None
    try:
        with h5py.File(path, "r") as fh:
            if FEATURES not in fh or int(fh.attrs.get("format", 0)) != FORMAT:
                return None
            if str(fh.attrs.get("key", "")) != key:
                raise DataError(
                    f"feature cache {str(path)!r} holds another dataset or encoder "
                    f"(key {fh.attrs.get('key')!r}, expected {key!r}); delete it"
                )
            feats = np.asarray(fh[FEATURES][:], dtype=np.float32)
    except DataError:
        raise
    except (OSError, ValueError, TypeError, KeyError):
        # a torn or foreign file (ValueError/TypeError: attributes or data of
        # another type): encode again and replace it
        return None
    if not np.isfinite(feats).all():
        raise DataError(
            f"feature cache {str(path)!r} holds NaN or infinite embeddings (the "
            "encoder diverged on some images?); delete it and check the encoder"
        )
    return feats


def write_features(
    path: Path, key: str, features: np.ndarray, attrs: dict[str, Any]
) -> None:
    """Write the embeddings under a temporary name and rename when complete."""
    from fedpath.wsi import atomic_h5

    with atomic_h5(path) as fh:
        fh.create_dataset(FEATURES, data=np.asarray(features, dtype=np.float32))
        fh.attrs["format"] = FORMAT
        fh.attrs["key"] = key
        for k, v in attrs.items():
            fh.attrs[k] = v
