"""The one local training loop. Algorithms supply a loss; only this loop steps.

An algorithm's loss function returns ``{"loss": tensor, **scalars}`` (house rule 2);
this loop owns the optimizer, the learning-rate schedule, gradient clipping and the
bookkeeping, so FedAvg, FedProx, FedStain... differ only in what they compute.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from fedpath.config import TrainConfig
from fedpath.data.base import Split

LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], Mapping[str, Any]]


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
    """Learning rate at ``progress`` in [0, 1] of the whole federation's training."""
    progress = min(max(progress, 0.0), 1.0)
    if cfg.schedule == "constant":
        return cfg.lr
    end = cfg.lr_end if cfg.lr_end is not None else 0.0
    if cfg.schedule == "linear":
        return cfg.lr + (end - cfg.lr) * progress
    return end + 0.5 * (cfg.lr - end) * (1.0 + math.cos(math.pi * progress))


def train_local(
    model: nn.Module,
    data: Split,
    cfg: TrainConfig,
    loss_fn: LossFn,
    *,
    round_idx: int,
    seed: int,
    device: torch.device,
    opt_params: Any = None,
    on_epoch: Callable[[int, int], None] | None = None,
) -> dict[str, float]:
    """Train ``model`` on ``data`` for ``cfg.local_epochs``; return mean scalars.

    ``round_idx`` is 1-based; with ``seed`` it fixes the shuffling of every epoch
    and the position in the learning-rate schedule, so a resumed run repeats the
    uninterrupted one exactly. A trailing batch of one sample is skipped (BatchNorm
    cannot train on it).
    """
    model.to(device).train()
    opt = make_optimizer(
        opt_params if opt_params is not None else model.parameters(), cfg
    )
    bs = cfg.batch_size
    steps_per_epoch = max(1, math.ceil(len(data) / bs))
    total_steps = cfg.rounds * cfg.local_epochs * steps_per_epoch
    sums: dict[str, float] = {}
    n_seen = 0
    for epoch in range(cfg.local_epochs):
        for i, (xb, yb, _) in enumerate(
            data.batches(bs, shuffle=True, seed=[seed, epoch])
        ):
            if xb.shape[0] < 2 and len(data) >= 2:
                continue
            step = ((round_idx - 1) * cfg.local_epochs + epoch) * steps_per_epoch + i
            lr = lr_at(cfg, step / max(1, total_steps - 1))
            for group in opt.param_groups:
                group["lr"] = lr
            x = xb.to(device, non_blocking=True).float().div_(255.0)
            y = yb.to(device, non_blocking=True)
            out = loss_fn(model, x, y)
            loss = out["loss"]
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"local loss became {loss.item()} at round {round_idx}, epoch "
                    f"{epoch + 1}, step {i}; lower train.lr or enable train.grad_clip"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
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
    model: nn.Module, data: Split, batch_size: int, device: torch.device
) -> torch.Tensor:
    """Softmax class probabilities (N, C) of ``model`` on ``data``, in order."""
    model.to(device).eval()
    chunks = []
    for xb, _, _ in data.batches(batch_size, shuffle=False):
        logits = model(xb.to(device).float().div_(255.0))
        chunks.append(torch.softmax(logits.float(), dim=1).cpu())
    if not chunks:
        return torch.empty(0, getattr(model, "num_classes", 0))
    return torch.cat(chunks)


def predict_split(
    model: nn.Module, data: Split, batch_size: int, device: torch.device
) -> np.ndarray:
    """Class probabilities (N, C) as float64 numpy, for images or slide bags."""
    if data.store.kind == "bags":
        from fedpath.data.bags import split_bags
        from fedpath.mil.models import MILModel
        from fedpath.mil.train import evaluate_mil

        if not isinstance(model, MILModel):
            raise TypeError(f"slide bags need a MIL model, got {type(model).__name__}")
        return evaluate_mil(model.to(device), split_bags(data))[0]
    return predict_probs(model, data, batch_size, device).double().numpy()


@torch.no_grad()
def encode_split(
    model: nn.Module, data: Split, batch_size: int, device: torch.device
) -> np.ndarray:
    """Encoder features (N, F) of a :class:`FedModel` on ``data`` in eval mode."""
    model.to(device).eval()
    encode = getattr(model, "encode", None)
    if encode is None:
        raise TypeError(f"{type(model).__name__} has no encoder to probe")
    chunks = [
        encode(xb.to(device).float().div_(255.0)).flatten(1).double().cpu()
        for xb, _, _ in data.batches(batch_size, shuffle=False)
    ]
    if not chunks:
        return np.zeros((0, 0))
    return torch.cat(chunks).numpy()
