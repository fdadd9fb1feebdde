"""The frozen-feature fast path (``train.cache_features``): encode once, train heads.

With a frozen encoder (``train.trainable: classifier``), or frozen first stages
(``train.trainable: last_stages``), and no pixel augmentation, the frozen part
computes the same output for an image in every round and at every client, so
computing it again each epoch is wasted work. :func:`prepare_dataset` runs the
frozen part once over every image (in eval mode: its BatchNorm statistics stay
those it was trained with) and caches the result on disk
(:mod:`fedpath.data.features`): the pooled embedding, or the feature maps that
enter the first trained stage. :class:`FeatureTask` then trains, evaluates and
probes the rest, a :class:`TailModel` (the trained stages, pooling and the
classifier), on them. The methods that only classify their inputs (``fedavg``,
``fedprox``, ``fedbn``, ``central_supervised``: ``features=True`` at
registration) run unchanged; those that transform pixels are refused. Only the
trained part travels between clients and server, and ``model.fpm`` is the full
image model (the frozen part and the trained one), so ``fedpath predict`` reads
images as for any run.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.config import ConfigError, ExperimentConfig
from fedpath.data.base import DomainDataset
from fedpath.data.features import (
    FeatureStore,
    read_features,
    with_store,
    write_features,
)
from fedpath.models.backbones import FedModel, autocast_scope
from fedpath.models.pretrained import state_digest
from fedpath.tasks.finetune import DIHEDRAL, dihedral
from fedpath.tasks.images import ImageTask
from fedpath.utils.progress import Reporter

#: subfolder of ``output_dir`` holding the cache when ``runtime.feature_cache`` is null
CACHE_DIR = "feature_cache"


#: the most a cache may hold in memory (N x per-image floats x 4 bytes)
MAX_CACHE_BYTES = 4 * 2**30


class _Stages(nn.Module):
    """The trained encoder stages under their FedModel names (``stages.<i>``)."""

    def __init__(self, stages: Mapping[str, nn.Module]) -> None:
        super().__init__()
        self.stages = nn.ModuleDict(dict(stages))


class TailModel(nn.Module):
    """The trained part of a model whose first encoder stages are frozen.

    ``cut`` is the first trained stage: the input is the cached output of the
    frozen stages (feature maps), run through ``encoder.stages[cut:]``, pooled
    and classified; with ``cut`` equal to the number of stages (a frozen
    encoder) the input is the pooled embedding and only the classifier is
    left. Its state_dict entries (``encoder.stages.<i>.*``, ``classifier.*``)
    are those of the :class:`FedModel` it completes, so the trained part is
    loaded back into the full model by name.
    """

    def __init__(self, full: FedModel, cut: int) -> None:
        super().__init__()
        n = len(full.encoder.stages)
        self.encoder = _Stages({str(i): full.encoder.stages[i] for i in range(cut, n)})
        self.classifier = full.classifier
        self.num_classes = full.num_classes
        self.cut = cut
        self.autocast = full.autocast

    @property
    def feature_dim(self) -> int:
        return int(self.classifier.in_features)

    def encode(self, m: torch.Tensor) -> torch.Tensor:
        """The pooled embedding ``h(x)`` from the frozen part's cached output."""
        stages = list(self.encoder.stages.values())
        if not stages:
            return m
        m = m.contiguous(memory_format=torch.channels_last)
        with autocast_scope(m, self.autocast):
            for stage in stages:
                m = stage(m)
        return torch.flatten(F.adaptive_avg_pool2d(m, 1), 1).float()

    def forward(self, m: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.encode(m))


def cut_stage(cfg: ExperimentConfig, model: FedModel) -> int:
    """The first trained encoder stage (``len(stages)``: only the classifier)."""
    n = len(model.encoder.stages)
    if cfg.train.trainable == "classifier":
        return n
    if cfg.train.trainable_stages > n:
        raise ConfigError(
            f"config key 'train.trainable_stages': {cfg.train.trainable_stages} is "
            f"more than the {n} stages of the encoder of {cfg.model.backbone!r}"
        )
    return n - cfg.train.trainable_stages


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


def cache_key(
    dataset: DomainDataset, encoder_digest: str, model: FedModel, cut: int, views: int
) -> str:
    """What the cached outputs depend on: the images, the encoder, its input,
    where it is cut, how many views of each image."""
    parts = {
        "format": 1,
        "cut": cut,
        "views": views,
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
#: (dataset, what the cache depends on) -> (dataset, prepared dataset), the last few
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
    t = cfg.train
    what = (cfg.model, t.trainable, t.trainable_stages, t.augment, cfg.runtime)
    memo = (id(dataset), repr((what, cache_dir(cfg))))
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
    cut = cut_stage(cfg, model)
    views = DIHEDRAL if cfg.train.augment == "dihedral" else 1
    reporter = reporter or Reporter()
    key = cache_key(dataset, digest, model, cut, views)
    if key not in _ENCODED:
        where = "" if cut == len(model.encoder.stages) else f"_stage{cut}"
        where += "_dihedral" if views > 1 else ""
        name = f"{dataset.name}_{cfg.model.backbone}{where}_{key[:16]}.h5"
        path = cache_dir(cfg) / name
        cached = _complete(path, key, dataset)
        if cached is None:
            with encoding_lock(path, reporter):  # a suite's other workers wait
                # written by another worker while this one waited?
                cached = _complete(path, key, dataset)
                if cached is None:
                    t0 = time.perf_counter()
                    cached = encode_all(task, model, dataset, cut, views, reporter)
                    attrs = {
                        "dataset": dataset.name,
                        "backbone": cfg.model.backbone,
                        "encoder_sha256": digest,
                        "image_size": dataset.image_size,
                        "first_trained_stage": cut,
                        "views": views,
                        "seconds": time.perf_counter() - t0,
                    }
                    write_features(path, key, cached, attrs)
                    reporter.log(
                        f"encoded {len(cached)} images with {cfg.model.backbone} "
                        f"in {time.perf_counter() - t0:.0f} s: {path}"
                    )
        _ENCODED[key] = torch.from_numpy(cached)
    store = FeatureStore(_ENCODED[key], dataset.image_size, views)
    return with_store(dataset, store)


def _complete(path: Path, key: str, dataset: DomainDataset) -> np.ndarray | None:
    """The cached array of ``key`` at ``path`` when it holds one row per image of
    ``dataset``; None when absent or written for a different image list."""
    cached = read_features(path, key)
    return cached if cached is not None and len(cached) == len(dataset.store) else None


@contextmanager
def encoding_lock(path: Path, reporter: Reporter) -> Iterator[None]:
    """Hold ``<path>.lock`` (an advisory ``flock``, released when its holder
    exits or dies) while the cache file ``path`` is encoded, so that a suite's
    workers wanting the same file encode it once: the others wait, then read
    it. Without ``fcntl`` (Windows) nothing is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            reporter.log(f"waiting for another process to encode {path.name}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@torch.no_grad()
def encode_all(
    task: ImageTask,
    model: FedModel,
    dataset: DomainDataset,
    cut: int,
    views: int,
    reporter: Reporter,
) -> np.ndarray:
    """The frozen part's output for every image of ``dataset`` in store order,
    float32, in eval mode: the embeddings (N, D) when the whole encoder is
    frozen (as :func:`~fedpath.tasks.images.encode_images`), else the feature
    maps (N, C, h, w) that enter stage ``cut``; with ``views`` 8, those of the
    8 dihedral views of each image, (N, 8, ...)."""
    store = dataset.store
    n, bs = len(store), task.train.eval_batch_size
    model.to(task.device).eval()
    whole = cut == len(model.encoder.stages)

    def frozen_part(idx: np.ndarray) -> np.ndarray:
        x = store.model_input(store.load(idx).to(task.device))
        outs = []
        for k in range(views):
            xk = dihedral(x, k) if views > 1 else x
            out = model.encode(xk).flatten(1) if whole else model.trunk(xk, cut)
            outs.append(out.float().cpu().numpy())
        return np.stack(outs, axis=1) if views > 1 else outs[0]

    if n:
        per_image = frozen_part(np.arange(1)).nbytes
        if per_image * n > MAX_CACHE_BYTES:
            raise ConfigError(
                f"config key 'train.trainable_stages': caching what enters stage "
                f"{cut} of {task.cfg.model.backbone!r} would hold {n} x "
                f"{per_image // 4} floats ({per_image * n / 2**30:.1f} GiB, more "
                f"than {MAX_CACHE_BYTES / 2**30:.0f}); train fewer stages or set "
                "train.cache_features: false"
            )
    what = ("features" if whole else f"stage-{cut} input maps") + (
        f" x {views} views" if views > 1 else ""
    )
    reporter.start_job("encode", f"{dataset.name}: {task.cfg.model.backbone} {what}", n)
    chunks = []
    for start in range(0, n, bs):
        idx = np.arange(start, min(n, start + bs), dtype=np.int64)
        chunks.append(frozen_part(idx))
        reporter.advance_job(len(idx))
    return (
        np.concatenate(chunks)
        if chunks
        else np.zeros((0, model.feature_dim), np.float32)
    )


class FeatureTask(ImageTask):
    """Train and judge the trained part of a partly frozen model on the cached
    output of its frozen part (the image task's loop, on cached tensors instead
    of pixels)."""

    kind: ClassVar[str] = FeatureStore.kind

    def __init__(self, cfg: ExperimentConfig, dataset: DomainDataset) -> None:
        super().__init__(cfg, dataset)
        assert isinstance(dataset.store, FeatureStore)
        # the frozen part's weights, built once; prepare_dataset checked that
        # they do not depend on the seed (the caller's RNG is left untouched)
        with torch.random.fork_rng(devices=[]):
            self.template = ImageTask.build_model(self)
        self.cut = cut_stage(cfg, self.template)
        self._tail = TailModel(self.template, self.cut)
        # the loop trains all there is (the frozen part stayed behind); self.train
        # stays the run's, so algorithms see what the user configured
        self.loop_train = dataclasses.replace(
            cfg.train, trainable="all", cache_features=False
        )

    def build_model(self, name: str | None = None) -> TailModel:  # type: ignore[override]
        if name is not None and name != self.cfg.model.backbone:
            raise ConfigError(
                f"train.cache_features trains the last part of "
                f"{self.cfg.model.backbone!r}; another architecture ({name!r}) has "
                "other features"
            )
        return copy.deepcopy(self._tail)

    def initial_model(self) -> TailModel:
        """The start the pixel path would have: the full model is drawn from
        the same RNG and its trained part kept, so a run on cached outputs
        repeats the partly frozen run on pixels (up to float rounding)."""
        return TailModel(ImageTask.build_model(self), self.cut)

    def full_model(self, tail: nn.Module) -> FedModel:
        """The image model that ``tail`` completes: the frozen part + ``tail``."""
        model = copy.deepcopy(self.template)
        own = model.state_dict()
        unknown = sorted(set(tail.state_dict()) - set(own))
        if unknown:
            raise ValueError(f"entries the full model lacks: {unknown[:5]}")
        model.load_state_dict({**own, **tail.state_dict()})
        return model

    def export(
        self, path: Path, model: nn.Module, provenance: Mapping[str, Any]
    ) -> bool:
        """``model.fpm`` of the full image model (frozen part + trained part)."""
        return super().export(path, self.full_model(model), provenance)
