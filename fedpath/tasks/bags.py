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
slides; FedHD's generalised cross-entropy on synthetic ones).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from fedpath.config import TrainConfig
from fedpath.data.bags import BagStore, split_bags
from fedpath.data.base import Split
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import MILModel, mil_builder
from fedpath.mil.predict import evaluate_mil
from fedpath.tasks import base

#: ``loss(model, features (N, D), label (1,), synthetic) -> {"loss": tensor, ...}``
BagLoss = Callable[[MILModel, Tensor, Tensor, bool], Mapping[str, Any]]


def check_bags(model: MILModel, bags: Sequence[SlideBag], what: str) -> None:
    """Every bag lives in the model's embedding space and label range."""
    for b in bags:
        if b.dim != model.in_dim:
            raise ValueError(
                f"{what} slide {b.slide_id!r} has D={b.dim}, the model expects "
                f"{model.in_dim} (a different embedding space?)"
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
                out = loss_fn(model, bag.features.to(device), label, is_synthetic)
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

    def bags(self) -> BagTask:
        return self

    def build_model(self, name: str | None = None) -> MILModel:
        return self._build(name)

    def slides(self, split: Split) -> list[SlideBag]:
        """The bags of a split, in order."""
        return split_bags(split)

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
        return evaluate_mil(model.to(self.device), split_bags(split))[0]

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
        return export_client_model(
            client_file(directory, client_id),
            model.cpu(),
            self.cfg,
            classes=self.classes,
            embedding_space=self.embedding_space,
            provenance={**provenance, "client": client_id},
        )
