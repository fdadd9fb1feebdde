"""Test-time BatchNorm adaptation (AdaBN): a model's normalization statistics
re-estimated on a new site's *unlabelled* images.

A scanner or stain protocol the federation never saw shifts the activations of
every layer; a BatchNorm layer then normalizes them with the sources' running
mean and variance, and the shift reaches the classifier (on AMi-Br the
unseen-scanner models call most mitoses atypical). AdaBN (Li et al., "Adaptive
batch normalization for practical domain adaptation", Pattern Recognition 80,
2018) replaces each BatchNorm layer's running statistics by those of the new
site's images and keeps every learnt weight (the affine scale and shift
included). No label is read and nothing is trained: it needs only images the
site already holds, which makes it usable at a hospital that never took part.

:func:`adapt_batchnorm` does it on batches of model inputs: every BatchNorm
layer's running statistics (except those of the frozen first stages of a partly
fine-tuned model, whose statistics training kept fixed too: ``keep``) are reset
and re-estimated in one pass under ``torch.no_grad`` with the cumulative
average of PyTorch (``momentum=None``: the running mean is the mean of the
per-batch means, the running variance the mean of the per-batch unbiased
variances), with every other module in eval mode (dropout and stochastic depth
stay off). The layers' momentum and eval mode are restored afterwards.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Literal

import torch
from torch import nn

from fedpath.data.base import DomainDataset, Split


def batchnorm_layers(
    model: nn.Module, keep: Collection[str] = ()
) -> list[nn.modules.batchnorm._BatchNorm]:
    """The BatchNorm layers of ``model`` that keep running statistics, except
    those named (``model.named_modules()``) in ``keep``."""
    return [
        m
        for name, m in model.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
        and m.track_running_stats
        and name not in keep
    ]


@torch.no_grad()
def adapt_batchnorm(
    model: nn.Module, inputs: Iterable[torch.Tensor], keep: Collection[str] = ()
) -> int:
    """Re-estimate the running statistics of every BatchNorm layer of ``model``
    not named in ``keep`` on ``inputs`` (batches of model inputs); returns the
    number of inputs seen. ``keep``: the layers whose statistics training kept
    fixed (:func:`fedpath.tasks.finetune.fixed_batchnorm`, a model file's
    ``bn_fixed``).

    Raises ``ValueError`` when the model has no BatchNorm layer with running
    statistics outside ``keep`` or when ``inputs`` is empty (the statistics
    would be reset to nothing)."""
    layers = batchnorm_layers(model, keep)
    if not layers:
        raise ValueError(
            f"{type(model).__name__} has no BatchNorm layer with running "
            "statistics"
            + (" outside its frozen stages" if keep else "")
            + ": there is nothing to adapt"
        )
    saved = [
        (m.momentum, m.running_mean, m.running_var, m.num_batches_tracked)
        for m in layers
    ]
    model.eval()
    for m in layers:
        # fresh buffers: the saved ones come back intact if nothing is seen
        assert m.running_mean is not None and m.running_var is not None
        m.running_mean = m.running_mean.clone()
        m.running_var = m.running_var.clone()
        if m.num_batches_tracked is not None:
            m.num_batches_tracked = m.num_batches_tracked.clone()
        m.reset_running_stats()
        m.momentum = None
        m.train()
    seen = 0
    try:
        for x in inputs:
            if x.shape[0] < 2:  # the unbiased variance of one sample is undefined
                continue
            model(x)
            seen += int(x.shape[0])
    finally:
        for m, (momentum, *_) in zip(layers, saved, strict=True):
            m.momentum = momentum
            m.eval()
    if seen == 0:
        for m, (_, mean, var, count) in zip(layers, saved, strict=True):
            m.running_mean, m.running_var, m.num_batches_tracked = mean, var, count
        raise ValueError(
            "no batch of two or more images to adapt the BatchNorm statistics on"
        )
    return seen


def split_inputs(
    data: Split, batch_size: int, device: torch.device
) -> Iterable[torch.Tensor]:
    """The model inputs of ``data`` in order, ``batch_size`` at a time (every
    cached view of a feature store that holds several)."""
    views = int(getattr(data.store, "views", 1))
    for xb, _, _ in data.batches(batch_size, shuffle=False):
        xb = xb.to(device)
        if views > 1 and data.store.kind != "images":
            yield torch.cat([xb[:, v].float() for v in range(views)])
        else:
            yield data.store.model_input(xb)


def adapt_on_split(
    model: nn.Module,
    data: Split,
    batch_size: int,
    device: torch.device,
    keep: Collection[str] = (),
) -> int:
    """:func:`adapt_batchnorm` of ``model`` (moved to ``device``) on ``data``'s
    images, leaving the layers named in ``keep``; their labels are never read."""
    model.to(device)
    return adapt_batchnorm(model, split_inputs(data, batch_size, device), keep)


def adaptation_split(
    dataset: DomainDataset, target: str, eval_split: Literal["all", "test"]
) -> tuple[Split, str]:
    """The unlabelled images of held-out domain ``target`` that a run adapts on
    (``evaluation.adapt_bn``) and their description: with ``lodo.eval_split:
    test`` its train split (disjoint from the scored images), else the scored
    images themselves (transductive)."""
    if eval_split == "test":
        return dataset.split(target, "train"), "target train split"
    return dataset.split(target, eval_split), "the evaluated target images"
