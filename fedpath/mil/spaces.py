"""Per-client embedding spaces: a hospital's slides as its own extractor embeds them.

A slide-bag dataset fixes the slides (ids, labels, domains, train/test split);
``algorithm.params.features`` (:class:`~fedpath.params.mil_train.
FeatureSetParams`, per client or domain) says which feature extractor's bags a
client reads them in. A :class:`FeatureSet` maps a dataset bag to the same
slide in its space:

- a folder (``root``) in CLAM's layout, one bag file per slide id, e.g. what
  ``fedpath features`` wrote with another encoder (the real setting);
- ``project: d``: a fixed random linear map of the dataset's bags to ``d``
  dimensions (optionally through ``tanh``), seeded: the same latent slide
  structure seen through another "extractor" (synthetic experiments and tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedpath.errors import DataError
from fedpath.mil.bags import SlideBag, read_bag_file
from fedpath.params.mil_train import FeatureSetParams


class FeatureSet:
    """One embedding space of the dataset's slides (module docstring).

    ``name`` is the declared space, ``dim`` its dimension, ``encoder`` the
    encoder facts its first ``.h5`` records (for the exported model; {} if none)
    and ``root`` its folder (None for a projection).
    """

    def __init__(self, p: FeatureSetParams, base_dim: int) -> None:
        self.params = p
        self._cache: dict[str, SlideBag] = {}
        self.encoder: dict[str, Any] = {}
        self.root: str | None = None
        self._proj: Tensor | None = None
        if p.root is not None:
            root = Path(p.root)  # relative: to the working directory, as data.root
            self.root = str(root)
            self.name = p.embedding_space or root.resolve().name
            first = self._files_any(root)
            feats, _ = read_bag_file(first)
            self.dim = int(feats.shape[1])
            from fedpath.mil.export import bag_file_encoder

            enc = bag_file_encoder(first)
            self.encoder = {**enc, "read_from": first.name} if enc else {}
        else:
            gen = torch.Generator().manual_seed(p.seed)
            w = torch.randn(base_dim, p.project, generator=gen, dtype=torch.float64)
            self._proj = (w / math.sqrt(base_dim)).float()
            self.name = p.embedding_space or f"project{p.project}-s{p.seed}"
            self.dim = p.project

    def _files_any(self, root: Path) -> Path:
        order = ["h5", "pt"] if self.params.prefer == "h5" else ["pt", "h5"]
        for kind in order:
            found = sorted((root / f"{kind}_files").glob(f"*.{kind}"))
            if found:
                return found[0]
        raise DataError(
            f"algorithm.params.features: {str(root)!r} holds no bag files "
            "(h5_files/<slide_id>.h5 or pt_files/<slide_id>.pt)"
        )

    def _features(self, bag: SlideBag) -> Tensor:
        if self._proj is not None:
            out = bag.features.float() @ self._proj
            return torch.tanh(out) if self.params.nonlinear else out
        assert self.root is not None
        order = ["h5", "pt"] if self.params.prefer == "h5" else ["pt", "h5"]
        root = Path(self.root)
        files = [root / f"{k}_files" / f"{bag.slide_id}.{k}" for k in order]
        path = next((f for f in files if f.is_file()), None)
        if path is None:
            raise DataError(
                f"embedding space {self.name!r}: slide {bag.slide_id!r} has no bag "
                f"file (looked for {', '.join(map(str, files))})"
            )
        feats, _ = read_bag_file(path)
        if feats.shape[1] != self.dim:
            raise DataError(
                f"{path}: D={feats.shape[1]}, but embedding space {self.name!r} has "
                f"D={self.dim}; one extractor per folder"
            )
        return feats

    def bags(self, bags: Sequence[SlideBag]) -> list[SlideBag]:
        """The same slides (id, label, domain) in this space, in order."""
        out = []
        for b in bags:
            if b.slide_id not in self._cache:
                self._cache[b.slide_id] = SlideBag(
                    b.slide_id, self._features(b), b.label, b.domain
                )
            out.append(self._cache[b.slide_id])
        return out


__all__ = ["FeatureSet"]
