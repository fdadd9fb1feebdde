"""A training task: what it means to train and judge a model on one kind of data.

A task owns building the model, the one local loop of its data kind (optimizer,
learning-rate schedule, epochs, gradient clipping, class weights, progress),
prediction and evaluation. Algorithms receive it through their context and only
define their loss and their payloads (house rule 2: only the task's loop calls
``backward`` and steps the optimizer). There is one task per data kind
(:data:`TASKS`), chosen by the dataset, so neither the runtime nor an algorithm
tests which kind of data it has.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from torch import nn

from fedpath.config import ConfigError, ExperimentConfig, TrainConfig
from fedpath.data.base import DomainDataset, Split
from fedpath.evaluation.metrics import classification_metrics

if TYPE_CHECKING:
    from fedpath.tasks.bags import BagTask
    from fedpath.tasks.images import ImageTask

#: ``on_epoch(epoch, total)`` after each local epoch (1-based): progress bars
EpochCallback = Callable[[int, int], None]


class TaskMismatch(ConfigError):
    """An algorithm written for one kind of data, run on another."""


def make_optimizer(params: Any, cfg: TrainConfig) -> torch.optim.Optimizer:
    """Adam, AdamW or SGD (with momentum) as configured."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(
        params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )


def lr_at(cfg: TrainConfig, progress: float) -> float:
    """Learning rate at ``progress`` in [0, 1] of the whole federation's training:
    a linear warm-up from 0 over the first ``warmup`` of it, then the schedule."""
    progress = min(max(progress, 0.0), 1.0)
    ramp = min(1.0, progress / cfg.warmup) if cfg.warmup > 0 else 1.0
    if cfg.schedule == "constant":
        return ramp * cfg.lr
    end = cfg.lr_end if cfg.lr_end is not None else 0.0
    if cfg.schedule == "linear":
        return ramp * (cfg.lr + (end - cfg.lr) * progress)
    return ramp * (end + 0.5 * (cfg.lr - end) * (1.0 + math.cos(math.pi * progress)))


def schedule(opt: torch.optim.Optimizer, cfg: TrainConfig, progress: float) -> None:
    """Set every parameter group's learning rate to :func:`lr_at` ``progress``
    (times the group's ``lr_scale``: the encoder's ``train.encoder_lr_scale``)."""
    lr = lr_at(cfg, progress)
    for group in opt.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)


def step(
    opt: torch.optim.Optimizer,
    loss: torch.Tensor,
    model: nn.Module,
    cfg: TrainConfig,
    where: str,
) -> None:
    """One optimizer step, the only ``backward`` of every local loop; a non-finite
    loss stops training with an error naming ``where`` it happened."""
    if not torch.isfinite(loss):
        raise FloatingPointError(
            f"local loss became {loss.item()} at {where}; lower train.lr or enable "
            "train.grad_clip"
        )
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if cfg.grad_clip is not None:
        nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()


def resolve_device(name: str) -> torch.device:
    """``runtime.device`` as a torch device; a GPU that is not there is an error
    at the start of the run, not a crash in its first round."""
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
            raise ConfigError(
                f"config key 'runtime.device': {name!r}, but no CUDA GPU is usable "
                f"here (this torch is a {build} build); use runtime.device=cpu"
            )
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise ConfigError(
                f"config key 'runtime.device': {name!r}, but this machine has "
                f"{count} CUDA device(s) (cuda:0 to cuda:{count - 1})"
            )
    return device


class Task(ABC):
    """Model building, local training, prediction and evaluation for one data kind.

    Built once per run (and once per config on a Flower node) from the experiment
    config and the dataset; stateless afterwards, so every client of a run shares
    it.
    """

    #: the data kind (``DomainDataset.kind``) this task trains on
    kind: ClassVar[str]

    def __init__(self, cfg: ExperimentConfig, dataset: DomainDataset) -> None:
        self.cfg = cfg
        self.train = cfg.train
        self.dataset_name = dataset.name
        self.classes = list(dataset.classes)
        self.num_classes = dataset.num_classes
        self.device = resolve_device(cfg.runtime.device)
        #: the encoder's autocast dtype (``runtime.precision``), None: float32
        self.autocast = torch.bfloat16 if cfg.runtime.precision == "bf16" else None

    # ------------------------------------------------------------------ models

    @abstractmethod
    def build_model(self, name: str | None = None) -> nn.Module:
        """The configured model (``name=None``) or another registered one by name
        (FedHD clients may each choose their architecture)."""

    def initial_model(self) -> nn.Module:
        """The model a run starts from (its global weights before round 1),
        drawn from the caller's seeded torch RNG."""
        return self.build_model()

    # ------------------------------------------------------------------ judging

    @abstractmethod
    def predict(self, model: nn.Module, split: Split) -> np.ndarray:
        """Class probabilities (N, C), float64, in the split's order (eval mode)."""

    def evaluate(self, model: nn.Module, split: Split) -> dict[str, Any]:
        """Classification metrics of ``model`` on ``split`` plus its size ``n``."""
        metrics: dict[str, Any] = dict(
            classification_metrics(split.labels, self.predict(model, split))
        )
        metrics["n"] = len(split)
        return metrics

    def adapt(self, model: nn.Module, split: Split) -> int:
        """Re-estimate ``model``'s BatchNorm statistics on ``split``'s unlabelled
        inputs in place (:mod:`fedpath.tasks.adapt`); returns how many it saw."""
        raise ConfigError(
            f"config key 'evaluation.adapt_bn': dataset {self.dataset_name!r} "
            f"holds {self.kind}; BatchNorm adaptation is for image models only"
        )

    def encode(self, model: nn.Module, split: Split) -> np.ndarray:
        """Encoder features (N, F) for the linear probe."""
        raise ConfigError(
            f"evaluation.protocol 'linear_probe' needs an image dataset (an encoder "
            f"to freeze); dataset {self.dataset_name!r} holds {self.kind}"
        )

    def export(
        self, path: Path, model: nn.Module, provenance: Mapping[str, Any]
    ) -> bool:
        """Write ``model`` as a self-describing file (``provenance``: the run's
        :class:`~fedpath.artifact.ModelMeta` fields); False: not exportable yet."""
        return False

    # ------------------------------------------------------------------ losses

    def class_weight(self, labels: np.ndarray) -> torch.Tensor | None:
        """Per-class loss weights n / (C * n_c) from the given training labels when
        ``train.class_weights`` is ``balanced`` (absent classes: 0); else None."""
        if self.train.class_weights != "balanced":
            return None
        counts = np.bincount(labels, minlength=self.num_classes)
        n = float(counts.sum())
        w = np.where(counts > 0, n / (self.num_classes * np.maximum(counts, 1)), 0.0)
        return torch.as_tensor(w, dtype=torch.float32, device=self.device)

    # ------------------------------------------------------------------ narrowing

    def images(self) -> ImageTask:
        """This task as an image task (an image algorithm's view of it)."""
        raise TaskMismatch(self._mismatch("images"))

    def bags(self) -> BagTask:
        """This task as a slide-bag task (a MIL algorithm's view of it)."""
        raise TaskMismatch(self._mismatch("bags"))

    def _mismatch(self, wanted: str) -> str:
        return (
            f"config key 'algorithm.name': {self.cfg.algorithm.name!r} trains on "
            f"{wanted}, but dataset {self.dataset_name!r} holds {self.kind}"
        )
