"""The image task: patch classifiers (:class:`~fedpath.models.backbones.FedModel`).

Its loop, :meth:`ImageTask.fit`, is the one local loop of every image algorithm,
supervised (FedAvg, FedProx, FedStain...) or self-supervised (FedAD, MOON...):
the algorithm passes ``loss(model, x, y) -> {"loss": tensor, **scalars}`` with
``x`` the batch's images in [0, 1] and ``y`` its labels (ignored by the
self-supervised methods).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedpath.config import ConfigError, ExperimentConfig, TrainConfig
from fedpath.data.base import DomainDataset, Split
from fedpath.losses import soft_targets
from fedpath.models.backbones import FedModel, build_model
from fedpath.models.pretrained import check_image_size, encoder_info, rebuild_params
from fedpath.models.tta import dihedral_views
from fedpath.tasks.base import EpochCallback, Task, make_optimizer, schedule, step
from fedpath.tasks.finetune import (
    augment_generator,
    param_groups,
    set_train_mode,
    train_input,
)

#: ``loss(model, images in [0, 1], labels) -> {"loss": tensor, **scalars}``
LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], Mapping[str, Any]]


def _soft_targets(data: Split, train: TrainConfig) -> np.ndarray | None:
    """The store's soft labels when ``train.soft_labels`` asks for them."""
    if train.soft_labels == "none":
        return None
    soft = data.store.soft_targets
    if soft is None:
        raise ConfigError(
            "config key 'train.soft_labels': 'agreement' needs the annotators' "
            "agreement with each label (data.params.agreement: a manifest column); "
            "this client's data has none"
        )
    return soft


def fit_images(
    model: nn.Module,
    data: Split,
    loss_fn: LossFn,
    train: TrainConfig,
    *,
    round_idx: int,
    seed: int,
    device: torch.device,
    on_epoch: EpochCallback | None = None,
    opt_params: Any = None,
    num_classes: int | None = None,
) -> dict[str, float]:
    """Train ``model`` on ``data`` for ``train.local_epochs``; mean scalars.

    ``round_idx`` is 1-based; with ``seed`` it fixes the shuffling of every epoch
    and the position in the learning-rate schedule, so a resumed run repeats the
    uninterrupted one exactly. A trailing batch of one sample is skipped
    (BatchNorm cannot train on it).
    """
    cfg = train
    model.to(device)
    set_train_mode(model, cfg)
    opt = make_optimizer(
        opt_params if opt_params is not None else param_groups(model, cfg), cfg
    )
    gen = augment_generator(seed) if cfg.augment != "none" else None
    bs = cfg.batch_size
    steps_per_epoch = max(1, math.ceil(len(data) / bs))
    total_steps = cfg.rounds * cfg.local_epochs * steps_per_epoch
    sums: dict[str, float] = {}
    n_seen = 0
    soft = _soft_targets(data, cfg)
    mix = np.random.default_rng([seed, 0x313])  # MixUp's draws (train.mixup)
    balanced = cfg.sampling == "balanced"
    for epoch in range(cfg.local_epochs):
        for i, (xb, yb, pos) in enumerate(
            data.batches(bs, shuffle=True, seed=[seed, epoch], balanced=balanced)
        ):
            if xb.shape[0] < 2 and len(data) >= 2:
                continue
            at = ((round_idx - 1) * cfg.local_epochs + epoch) * steps_per_epoch + i
            schedule(opt, cfg, at / max(1, total_steps - 1))
            xb = xb.to(device, non_blocking=True)
            x = (
                data.store.model_input(xb)
                if gen is None
                else train_input(data.store, xb, cfg.augment, gen)
            )
            y = yb.to(device, non_blocking=True)
            targets = None
            if soft is not None:
                targets = torch.from_numpy(soft[data.indices[pos]]).to(device)
            if cfg.mixup > 0:
                if targets is None:
                    if num_classes is None:
                        raise ValueError("train.mixup needs fit_images(num_classes=)")
                    targets = F.one_hot(y, num_classes).float()
                perm = torch.from_numpy(mix.permutation(x.shape[0])).to(device)
                lam = float(mix.beta(cfg.mixup, cfg.mixup))
                x, targets = soft_targets.mixup(x, targets, lam, perm)
            with soft_targets.using(targets):
                out = loss_fn(model, x, y)
            loss = out["loss"]
            step(
                opt, loss, model, cfg, f"round {round_idx}, epoch {epoch + 1}, step {i}"
            )
            b = x.shape[0]
            n_seen += b
            for k, v in out.items():
                val = float(v.detach()) if isinstance(v, torch.Tensor) else float(v)
                sums[k] = sums.get(k, 0.0) + val * b
        if on_epoch is not None:
            on_epoch(epoch + 1, cfg.local_epochs)
    return {k: v / max(n_seen, 1) for k, v in sums.items()}


@torch.no_grad()
def predict_probs(
    model: nn.Module,
    data: Split,
    batch_size: int,
    device: torch.device,
    tta: str = "none",
) -> torch.Tensor:
    """Softmax class probabilities (N, C) of ``model`` on ``data``, in order.

    ``tta="dihedral"``: the mean softmax over the 8 dihedral views of each image
    (:func:`dihedral_views`), or over the cached views of a feature store that
    holds several (``train.augment: dihedral``).
    """
    model.to(device).eval()
    views = int(getattr(data.store, "views", 1))
    chunks = []
    for xb, _, _ in data.batches(batch_size, shuffle=False):
        xb = xb.to(device)
        if tta == "none":
            inputs = [data.store.model_input(xb)]
        elif data.store.kind == "images":
            inputs = dihedral_views(data.store.model_input(xb))
        elif views > 1:
            inputs = [xb[:, v].float() for v in range(views)]
        else:
            raise ValueError(
                f"tta {tta!r}: this {data.store.kind} store holds one view of each "
                "sample (cache it with train.augment: dihedral)"
            )
        probs = [torch.softmax(model(x).float(), dim=1) for x in inputs]
        chunks.append(torch.stack(probs).mean(0).cpu())
    if not chunks:
        return torch.empty(0, getattr(model, "num_classes", 0))
    return torch.cat(chunks)


@torch.no_grad()
def encode_images(
    model: nn.Module, data: Split, batch_size: int, device: torch.device
) -> np.ndarray:
    """Encoder features (N, F) of a :class:`FedModel` on ``data`` in eval mode."""
    model.to(device).eval()
    encode = getattr(model, "encode", None)
    if encode is None:
        raise TypeError(f"{type(model).__name__} has no encoder to probe")
    chunks = [
        encode(data.store.model_input(xb.to(device))).flatten(1).double().cpu()
        for xb, _, _ in data.batches(batch_size, shuffle=False)
    ]
    if not chunks:
        return np.zeros((0, 0))
    return torch.cat(chunks).numpy()


class ImageTask(Task):
    """Train, predict and evaluate image classifiers on patches."""

    kind: ClassVar[str] = "images"

    def __init__(self, cfg: ExperimentConfig, dataset: DomainDataset) -> None:
        super().__init__(cfg, dataset)
        self.image_size = dataset.image_size
        #: the train config of the local loop (the run's ``train``; the
        #: frozen-feature task trains all of what it is left with)
        self.loop_train = self.train

    def images(self) -> ImageTask:
        return self

    def build_model(self, name: str | None = None) -> FedModel:
        """The configured backbone, or the registered backbone ``name`` with its
        default parameters."""
        cfg = self.cfg.model
        if name is not None and name != cfg.backbone:
            cfg = type(cfg)(backbone=name)
        model = build_model(cfg, self.num_classes)
        check_image_size(model, self.image_size, "data.params.image_size")
        model.autocast = self.autocast
        return model

    def fit(
        self,
        model: nn.Module,
        data: Split,
        loss_fn: LossFn,
        *,
        round_idx: int,
        seed: int,
        on_epoch: EpochCallback | None = None,
        opt_params: Any = None,
    ) -> dict[str, float]:
        """:func:`fit_images` with this run's loop config and device."""
        return fit_images(
            model,
            data,
            loss_fn,
            self.loop_train,
            round_idx=round_idx,
            seed=seed,
            device=self.device,
            on_epoch=on_epoch,
            opt_params=opt_params,
            num_classes=self.num_classes,
        )

    def predict(self, model: nn.Module, split: Split) -> np.ndarray:
        bs, tta = self.train.eval_batch_size, self.cfg.evaluation.tta
        return predict_probs(model, split, bs, self.device, tta).double().numpy()

    def adapt(self, model: nn.Module, split: Split) -> int:
        from fedpath.tasks.adapt import adapt_on_split
        from fedpath.tasks.finetune import fixed_batchnorm

        keep = fixed_batchnorm(model, self.cfg.train)  # the frozen stages' stay
        try:
            return adapt_on_split(
                model, split, self.train.eval_batch_size, self.device, keep
            )
        except ValueError as err:
            raise ConfigError(f"config key 'evaluation.adapt_bn': {err}") from None

    def encode(self, model: nn.Module, split: Split) -> np.ndarray:
        return encode_images(model, split, self.train.eval_batch_size, self.device)

    def export(
        self, path: Path, model: nn.Module, provenance: Mapping[str, Any]
    ) -> bool:
        """Write ``model.fpm``: the backbone recipe, classes, input size and
        colour normalization, plus ``provenance`` (:class:`ModelMeta` fields)."""
        from fedpath.artifact import ModelMeta, save_model
        from fedpath.tasks.finetune import fixed_batchnorm

        assert isinstance(model, FedModel)
        cfg = self.cfg.model
        meta = ModelMeta(
            backbone=cfg.backbone,
            # rebuilt from these on another machine: without the local checkpoint
            # or the weights package (the trained weights are in the file)
            backbone_params=rebuild_params(model, cfg.params),
            class_names=list(self.classes),
            image_size=self.image_size,
            zoom=float(self.cfg.data.params.get("zoom", 1.0)),
            mean=model.mean.flatten().tolist(),
            std=model.std.flatten().tolist(),
            **encoder_info(model),
            tta=self.cfg.evaluation.tta,
            bn_fixed=fixed_batchnorm(model, self.cfg.train),
            **provenance,
        )
        save_model(path, model, meta)
        return True
