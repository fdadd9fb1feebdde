r"""The slide-bag task: whole slides as bags of patch embeddings, MIL models.

Its loop, :func:`fit_bags`, is the one local loop of every MIL algorithm (FedHD,
FedAvg/FedProx-MIL, local and pooled training). One bag per step (batch size 1,
as CLAM and TransMIL), shuffled every epoch; the optimizer, learning rate,
weight decay, schedule, gradient clipping and epochs are ``train.*`` like every
other method (``train.batch_size`` does not apply). FedHD's curriculum is two
streams: a client's real slides every epoch, and the other clients' synthetic
slides from epoch ``synthetic_from`` on, interleaved in one shuffled stream, so
an epoch's loss is the sum of both terms over its bags:

.. math:: \mathcal L_{local} = \mathcal L_{real} + \mathcal L_{syn}\cdot
          \mathbb I(t \ge t_0)

The algorithm passes ``loss(model, features, label, synthetic)`` and chooses
what each stream costs (cross-entropy plus the model's auxiliary loss on real
slides; FedHD's generalised cross-entropy on synthetic ones). A synthetic bag of
another embedding space (``SlideBag.space``) first passes through that space's
input adapter of the model (:class:`fedpath.mil.adapters.AdaptedMIL`), inside
the graph, so the loss sees bags of the model's own space and the adapters
train with it.

Clients with their own feature extractor (``algorithm.params.features``) read
the dataset's slides in their space (:class:`fedpath.mil.spaces.FeatureSet`):
the task resolves a split's bags in the space of the model it evaluates
(``MILModel.embedding_space``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from fedpath.config import ConfigError, TrainConfig
from fedpath.data.bags import BagStore, split_bags
from fedpath.data.base import Split
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel, mil_builder
from fedpath.mil.predict import evaluate_mil
from fedpath.mil.spaces import FeatureSet
from fedpath.params.mil_train import MILTrainParams
from fedpath.tasks import base

#: ``loss(model, features (N, D), label (1,), synthetic) -> {"loss": tensor, ...}``
BagLoss = Callable[[MILModel, Tensor, Tensor, bool], Mapping[str, Any]]


def _source_dim(model: MILModel, bag: SlideBag) -> int:
    """The dimension ``model`` expects of ``bag`` (its adapter's, for a bag of a
    foreign space)."""
    if bag.space is None:
        return model.in_dim
    source_dim = getattr(model, "source_dim", None)
    if source_dim is None:
        raise ValueError(
            f"slide {bag.slide_id!r} is of embedding space {bag.space!r}, but the "
            f"model has no input adapters (algorithm.params.spaces: adapt)"
        )
    return int(source_dim(bag.space))


def bag_inputs(model: MILModel, bag: SlideBag, device: torch.device) -> Tensor:
    """The bag's features in the model's space (through its adapter if foreign)."""
    x = bag.features.to(device)
    if bag.space is None:
        return x
    out: Tensor = model.adapt(x, bag.space)  # type: ignore[operator]
    return out


def check_bags(model: MILModel, bags: Sequence[SlideBag], what: str) -> None:
    """Every bag lives in the model's embedding space (or one it has an adapter
    for) and label range."""
    for b in bags:
        if b.dim != _source_dim(model, b):
            raise ValueError(
                f"{what} slide {b.slide_id!r} has D={b.dim}, the model expects "
                f"{_source_dim(model, b)} (a different embedding space?)"
            )
        if not 0 <= b.label < model.num_classes:
            raise ValueError(
                f"{what} slide {b.slide_id!r} has label {b.label}, the model has "
                f"{model.num_classes} classes"
            )


def fit_bags(
    model: MILModel,
    real: Sequence[SlideBag],
    loss_fn: BagLoss,
    train: TrainConfig,
    *,
    synthetic: Sequence[SlideBag] = (),
    synthetic_from: int = 0,
    epochs: int | None = None,
    seed: int = 0,
    round_idx: int = 1,
    on_epoch: base.EpochCallback | None = None,
) -> list[dict[str, float]]:
    """Train ``model`` in place on ``real`` (and, from epoch ``synthetic_from``,
    ``synthetic``) bags; per-epoch scalars (module docstring).

    Every scalar the loss returns is averaged over the bags that returned it
    (``loss`` over all bags, ``loss_real`` over the real ones...), and
    ``synthetic_bags`` counts the synthetic bags of the epoch. Shuffling, dropout
    and ACMIL's masking draw from a generator forked from ``seed``; the caller's
    global RNG state is restored afterwards and the model left in eval mode.
    ``epochs`` defaults to ``train.local_epochs``; ``round_idx`` (1-based) places
    the epochs in the learning-rate schedule over ``train.rounds``.
    """
    if not real:
        raise ValueError("MIL training needs at least one real bag")
    check_bags(model, real, "real")
    check_bags(model, synthetic, "synthetic")
    epochs = epochs or train.local_epochs
    opt = base.make_optimizer(model.parameters(), train)
    device = next(model.parameters()).device
    total = max(1, train.rounds * epochs - 1)
    history: list[dict[str, float]] = []
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        model.train()
        for epoch in range(epochs):
            base.schedule(opt, train, ((round_idx - 1) * epochs + epoch) / total)
            pool: list[tuple[SlideBag, bool]] = [(b, False) for b in real]
            if synthetic and epoch >= synthetic_from:
                pool += [(b, True) for b in synthetic]
            sums: dict[str, float] = {}
            counts: dict[str, int] = {}
            for i in torch.randperm(len(pool)).tolist():
                bag, is_synthetic = pool[i]
                label = torch.tensor([bag.label], device=device)
                out = loss_fn(
                    model, bag_inputs(model, bag, device), label, is_synthetic
                )
                loss = out["loss"]
                base.step(
                    opt,
                    loss,
                    model,
                    train,
                    f"epoch {epoch + 1}, slide {bag.slide_id!r}",
                )
                for k, v in out.items():
                    val = float(v.detach()) if isinstance(v, Tensor) else float(v)
                    sums[k] = sums.get(k, 0.0) + val
                    counts[k] = counts.get(k, 0) + 1
            stats = {k: sums[k] / counts[k] for k in sums}
            stats["synthetic_bags"] = float(len(pool) - len(real))
            history.append(stats)
            if on_epoch is not None:
                on_epoch(epoch + 1, epochs)
    model.eval()
    return history


class BagTask(base.Task):
    """Train, predict and evaluate MIL models on slide bags."""

    kind: ClassVar[str] = "bags"

    def __init__(self, cfg: Any, dataset: Any) -> None:
        super().__init__(cfg, dataset)
        store = dataset.store
        assert isinstance(store, BagStore)
        self.embedding_space = store.embedding_space
        self.dim = store.dim
        model = cfg.model
        self._build = mil_builder(
            model.backbone, model.params, store.dim, dataset.num_classes
        )
        self._features, self.spaces = self._feature_sets(cfg)

    def _feature_sets(
        self, cfg: Any
    ) -> tuple[dict[str, FeatureSet], dict[str, FeatureSet]]:
        """``algorithm.params.features`` opened: by client/domain key, by space."""
        raw = dict(cfg.algorithm.params.get("features") or {})
        if not raw:
            return {}, {}
        parsed = MILTrainParams(features=raw).feature_sets()
        by_key: dict[str, FeatureSet] = {}
        by_space: dict[str, FeatureSet] = {}
        for key, p in parsed.items():
            fs = FeatureSet(p, self.dim)
            known = by_space.get(fs.name)
            if fs.name == self.embedding_space or (known and known.params != p):
                raise ConfigError(
                    f"config key 'algorithm.params.features.{key}': embedding space "
                    f"{fs.name!r} is already the "
                    f"{'dataset' if known is None else 'name of another feature set'}"
                    "'s; give it another embedding_space"
                )
            by_space.setdefault(fs.name, fs)
            by_key[key] = by_space[fs.name]
        return by_key, by_space

    def bags(self) -> BagTask:
        return self

    def build_model(
        self, name: str | None = None, space: str | None = None
    ) -> MILModel:
        """The model ``name`` (None: the configured one) for bags of ``space``
        (None: the dataset's; else a client's feature set by its name)."""
        if space is None or space == self.embedding_space:
            return self._build(name, None)
        model = self._build(name, self._space(space).dim)
        model.embedding_space = space
        return model

    def _space(self, space: str) -> FeatureSet:
        if space not in self.spaces:
            raise ConfigError(
                f"embedding space {space!r} is not a feature set of "
                f"algorithm.params.features (known: {sorted(self.spaces)})"
            )
        return self.spaces[space]

    def feature_set(self, client: str, domain: str) -> FeatureSet | None:
        """The client's own feature set (keyed by client id, else domain)."""
        return self._features.get(client, self._features.get(domain))

    def client_space(self, client: str, domain: str) -> tuple[str, int]:
        """(embedding space name, dimension) of the client's bags."""
        fs = self.feature_set(client, domain)
        return (self.embedding_space, self.dim) if fs is None else (fs.name, fs.dim)

    def slides(self, split: Split, space: str | None = None) -> list[SlideBag]:
        """The bags of a split, in order, in ``space`` (None: the dataset's)."""
        bags = split_bags(split)
        if space is None or space == self.embedding_space:
            return bags
        return self._space(space).bags(bags)

    def client_slides(self, split: Split, client: str, domain: str) -> list[SlideBag]:
        """The bags of a client's split in the client's own embedding space."""
        return self.slides(split, self.client_space(client, domain)[0])

    def fit(
        self,
        model: MILModel,
        real: Sequence[SlideBag],
        loss_fn: BagLoss,
        *,
        seed: int,
        synthetic: Sequence[SlideBag] = (),
        synthetic_from: int = 0,
        epochs: int | None = None,
        round_idx: int = 1,
        on_epoch: base.EpochCallback | None = None,
    ) -> dict[str, float]:
        """:func:`fit_bags` with this run's ``train`` config; the last epoch's
        scalars."""
        model.to(self.device)
        history = fit_bags(
            model,
            real,
            loss_fn,
            self.train,
            synthetic=synthetic,
            synthetic_from=synthetic_from,
            epochs=epochs,
            seed=seed,
            round_idx=round_idx,
            on_epoch=on_epoch,
        )
        return history[-1]

    def predict(self, model: nn.Module, split: Split) -> np.ndarray:
        if not isinstance(model, MILModel):
            raise TypeError(f"slide bags need a MIL model, got {type(model).__name__}")
        bags = self.slides(split, model.embedding_space)
        return evaluate_mil(model.to(self.device), bags)[0]

    def export_client(
        self,
        directory: Path,
        client_id: str,
        model: nn.Module,
        provenance: Mapping[str, Any],
    ) -> Path:
        """Write a client's deployed MIL model as ``directory/<client>.fpm``
        (``kind: mil``, :mod:`fedpath.mil.export`) and return its path: what a run
        with ``evaluation.protocol: local`` leaves for each client to use at its
        hospital. ``provenance``: the run's and client's facts
        (:func:`fedpath.mil.export.export_client_model`). The global model of a
        MIL run (:meth:`export`, ``model.fpm``) is not exported yet."""
        from fedpath.mil.export import client_file, export_client_model

        if not isinstance(model, MILModel):
            raise TypeError(f"slide bags need a MIL model, got {type(model).__name__}")
        space, encoder = self.embedding_space, None
        facts = {**provenance, "client": client_id}
        if model.embedding_space not in (None, self.embedding_space):
            fs = self._space(model.embedding_space)
            space, encoder = fs.name, fs.encoder
            if fs.root is not None:  # `fedpath evaluate` reads the client's bags
                facts["data"] = {**dict(facts.get("data") or {}), "root": fs.root}
        return export_client_model(
            client_file(directory, client_id),
            model.cpu(),
            self.cfg,
            classes=self.classes,
            embedding_space=space,
            provenance=facts,
            encoder=encoder,
        )
