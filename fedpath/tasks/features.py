"""The frozen-feature fast path (``train.cache_features``): encode once, train heads.

With a frozen encoder (``train.trainable: classifier``) and no pixel
augmentation, a model's encoder computes the same embedding of an image in every
round and at every client, so computing it again each epoch is wasted work.
:func:`prepare_dataset` encodes every image once with the configured encoder (in
eval mode: its BatchNorm statistics stay those it was trained with) and caches
the embeddings on disk (:mod:`fedpath.data.features`); :class:`FeatureTask`
then trains, evaluates and probes the linear classifier on them. The methods
that only classify their inputs (``fedavg``, ``fedprox``, ``central_supervised``:
``features=True`` at registration) run unchanged; those that transform pixels
are refused. Only the classifier travels between clients and server, and
``model.fpm`` is the full image model (the encoder and the trained classifier),
so ``fedpath predict`` reads images as for any run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from fedpath.config import ConfigError, ExperimentConfig
from fedpath.data.base import DomainDataset
from fedpath.data.features import FeatureStore, read_features, with_store
from fedpath.models.backbones import FedModel
from fedpath.models.pretrained import state_digest
from fedpath.tasks.images import ImageTask
from fedpath.utils.progress import Reporter

#: subfolder of ``output_dir`` holding the cache when ``runtime.feature_cache`` is null
CACHE_DIR = "feature_cache"


class HeadModel(nn.Module):
    """The trained part of a frozen-encoder model: its linear classifier ``g``.

    Its input is the embedding ``h(x)``; its state_dict entries
    (``classifier.weight``, ``classifier.bias``) are those of the
    :class:`FedModel` it completes.
    """

    def __init__(self, feature_dim: int, num_classes: int) -> None:
        super().__init__()
        self.classifier = nn.Linear(feature_dim, num_classes)
        self.num_classes = num_classes

    @property
    def feature_dim(self) -> int:
        return int(self.classifier.in_features)

    def encode(self, z: torch.Tensor) -> torch.Tensor:
        return z

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.classifier(z)


def frozen_encoder(task: ImageTask) -> tuple[FedModel, str]:
    """The configured model whose encoder is cached, and its encoder's digest.

    Refused when the encoder's weights depend on the random seed (no
    pretrained weights, no ``model.weights``): its embeddings would differ from
    run to run, and the run would not be the frozen-encoder model it claims.
    """
    digests = []
    for s in (0, 1):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(s)
            model = ImageTask.build_model(task)
        digests.append(state_digest(model.encoder))
    if digests[0] != digests[1]:
        raise ConfigError(
            f"config key 'train.cache_features': the encoder of model.backbone "
            f"{task.cfg.model.backbone!r} is randomly initialized (its weights "
            "change with the seed); cache the features of a pretrained encoder "
            "(model.params.pretrained: true, or model.weights: a local file)"
        )
    return model, digests[0]


def cache_key(dataset: DomainDataset, encoder_digest: str, model: FedModel) -> str:
    """What the embeddings depend on: the images, the encoder, its input."""
    parts = {
        "format": 1,
        "images": dataset.store.fingerprint(),
        "image_size": dataset.image_size,
        "encoder": encoder_digest,
        "mean": model.mean.flatten().tolist(),
        "std": model.std.flatten().tolist(),
        "autocast": str(model.autocast),  # bf16 features differ from float32 ones
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def cache_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.runtime.feature_cache or Path(cfg.output_dir) / CACHE_DIR)


#: embeddings encoded by this process, by cache key (a suite's methods share them)
_ENCODED: dict[str, torch.Tensor] = {}
#: (dataset, encoder config) -> (dataset, prepared dataset), the last few
_PREPARED: dict[tuple[int, str], tuple[DomainDataset, DomainDataset]] = {}
_KEPT = 2


def prepare_dataset(
    cfg: ExperimentConfig, dataset: DomainDataset, reporter: Reporter | None = None
) -> DomainDataset:
    """The dataset a run trains on: ``dataset`` itself, or with
    ``train.cache_features`` its images encoded once (read from the cache when
    the same images were encoded by the same encoder before)."""
    if not cfg.train.cache_features or dataset.kind == FeatureStore.kind:
        return dataset
    memo = (id(dataset), repr((cfg.model, cache_dir(cfg))))
    if memo not in _PREPARED:
        while len(_PREPARED) >= _KEPT:
            del _PREPARED[next(iter(_PREPARED))]
        _PREPARED[memo] = (dataset, _encoded(cfg, dataset, reporter))
    return _PREPARED[memo][1]


def _encoded(
    cfg: ExperimentConfig, dataset: DomainDataset, reporter: Reporter | None
) -> DomainDataset:
    task = ImageTask(cfg, dataset)
    model, digest = frozen_encoder(task)
    key = cache_key(dataset, digest, model)
    if key not in _ENCODED:
        path = cache_dir(cfg) / f"{dataset.name}_{cfg.model.backbone}_{key[:16]}.h5"
        cached = read_features(path, key)
        if cached is None or cached.shape[0] != len(dataset.store):
            t0 = time.perf_counter()
            cached = encode_all(task, model, dataset, reporter or Reporter())
            from fedpath.data.features import write_features

            write_features(
                path,
                key,
                cached,
                {
                    "dataset": dataset.name,
                    "backbone": cfg.model.backbone,
                    "encoder_sha256": digest,
                    "image_size": dataset.image_size,
                    "seconds": time.perf_counter() - t0,
                },
            )
            (reporter or Reporter()).log(
                f"encoded {len(cached)} images with {cfg.model.backbone} in "
                f"{time.perf_counter() - t0:.0f} s: {path}"
            )
        _ENCODED[key] = torch.from_numpy(cached)
    return with_store(dataset, FeatureStore(_ENCODED[key], dataset.image_size))


@torch.no_grad()
def encode_all(
    task: ImageTask, model: FedModel, dataset: DomainDataset, reporter: Reporter
) -> np.ndarray:
    """Embeddings (N, D) float32 of every image of ``dataset`` in store order, by
    the encoder in eval mode (as :func:`~fedpath.tasks.images.encode_images`)."""
    store = dataset.store
    n, bs = len(store), task.train.eval_batch_size
    model.to(task.device).eval()
    reporter.start_job(
        "encode", f"{dataset.name}: {task.cfg.model.backbone} features", n
    )
    chunks = []
    for start in range(0, n, bs):
        idx = np.arange(start, min(n, start + bs), dtype=np.int64)
        x = store.model_input(store.load(idx).to(task.device))
        chunks.append(model.encode(x).flatten(1).float().cpu().numpy())
        reporter.advance_job(len(idx))
    dim = model.feature_dim
    return np.concatenate(chunks) if chunks else np.zeros((0, dim), np.float32)


class FeatureTask(ImageTask):
    """Train and judge the linear classifier of a frozen encoder on its cached
    embeddings (the image task's loop, on embeddings instead of pixels)."""

    kind: ClassVar[str] = FeatureStore.kind

    def __init__(self, cfg: ExperimentConfig, dataset: DomainDataset) -> None:
        super().__init__(cfg, dataset)
        assert isinstance(dataset.store, FeatureStore)
        self.feature_dim = dataset.store.dim
        # the loop trains all there is: the classifier (the encoder stayed behind)
        self.train = dataclasses.replace(
            cfg.train, trainable="all", cache_features=False
        )

    def build_model(self, name: str | None = None) -> HeadModel:  # type: ignore[override]
        if name is not None and name != self.cfg.model.backbone:
            raise ConfigError(
                f"train.cache_features trains the classifier of "
                f"{self.cfg.model.backbone!r}; another architecture ({name!r}) has "
                "other features"
            )
        return HeadModel(self.feature_dim, self.num_classes)

    def initial_model(self) -> HeadModel:
        """The classifier the pixel path would start from: the full model is
        drawn from the same RNG and its classifier kept, so a run on cached
        features repeats the frozen-encoder run on pixels (up to float noise)."""
        full = ImageTask.build_model(self)
        head = self.build_model()
        head.classifier.load_state_dict(full.classifier.state_dict())
        return head

    def full_model(self, head: nn.Module) -> FedModel:
        """The image model that ``head`` completes: the frozen encoder + ``head``."""
        model, _ = frozen_encoder(self)
        model.classifier.load_state_dict(
            {k.removeprefix("classifier."): v for k, v in head.state_dict().items()}
        )
        return model

    def export(
        self, path: Path, model: nn.Module, provenance: Mapping[str, Any]
    ) -> bool:
        """``model.fpm`` of the full image model (encoder + trained classifier)."""
        return super().export(path, self.full_model(model), provenance)
