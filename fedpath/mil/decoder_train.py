"""Training FedHD's decoder: one client's (embedding, patch) pairs to a decoder.

:func:`train_decoder` fits a :class:`~fedpath.mil.decoder.PatchDecoder`; by
default on the reconstruction loss alone (``L_rec``, blurred mean-like
pseudo-patches), with ``adversarial=AdversarialOptions(...)`` on the paper's
``L_GAN + lambda_rec * L_rec`` against the discriminator of
:mod:`fedpath.mil.decoder_gan`. The generator and its rendering live in
:mod:`fedpath.mil.decoder`; this module sits above both, so neither imports the
other's training loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from fedpath.mil.decoder import (
    PatchDecoder,
    check_embeddings,
    check_patches,
    reconstruction_loss,
)
from fedpath.mil.decoder_gan import AdversarialOptions, Adversary

#: ``on_epoch(done, total, mean_loss)``: progress of :func:`train_decoder`
EpochCallback = Callable[[int, int, float], None]


def train_decoder(
    embeddings: Tensor,
    patches: Tensor,
    epochs: int = 30,
    lr: float = 2e-3,
    seed: int = 0,
    batch_size: int = 32,
    on_epoch: EpochCallback | None = None,
    *,
    width: int = 64,
    adversarial: AdversarialOptions | None = None,
) -> tuple[PatchDecoder, list[float]]:
    """Train a :class:`PatchDecoder` on one client's (embedding, patch) pairs.

    Parameters
    ----------
    embeddings : Tensor
        ``(N, D)`` float patch embeddings (e.g. :meth:`FedModel.encode`).
    patches : Tensor
        ``(N, 3, H, H)`` uint8 patches, row ``i`` the source of embedding ``i``.
    epochs, lr, seed, batch_size : int, float, int, int
        Adam with a cosine-decayed learning rate; ``epochs = 0`` returns the
        initialised decoder (input statistics set). Deterministic in ``seed``
        (initialisation and shuffling), and the global RNG is left untouched.
    on_epoch : callable, optional
        ``on_epoch(done, total, mean_loss)`` after every epoch (progress bars).
    width : int
        Channels of the decoder's first feature map.
    adversarial : AdversarialOptions, optional
        Add FedHD's ``L_GAN``: per batch, one step of a
        :class:`~fedpath.mil.decoder_gan.PatchDiscriminator` (initialised from
        ``seed + 1``, its augmentation drawn from ``seed + 2``), then one step of
        the decoder on ``L_G + lambda_rec * L_rec``. ``None`` (default): the
        reconstruction-only loop, unchanged (same weights for the same seed).

    Returns
    -------
    decoder : PatchDecoder
        In eval mode, on the CPU.
    history : list of float
        Mean ``L_rec`` per epoch (the unweighted reconstruction term, also with
        ``adversarial``, so that runs compare).

    Raises
    ------
    ValueError
        Naming the argument: not (N, D) float ``embeddings``, non-uint8 or
        non-square ``patches``, different N, or bad ``epochs``/``lr``/
        ``batch_size``.
    """
    z = check_embeddings(embeddings)
    x8 = check_patches(patches)
    if z.shape[0] != x8.shape[0]:
        raise ValueError(
            f"embeddings has N = {z.shape[0]} rows but patches has N = "
            f"{x8.shape[0]}; they must be pairs"
        )
    if epochs < 0 or lr <= 0 or batch_size < 1:
        raise ValueError(
            f"need epochs >= 0, lr > 0, batch_size >= 1; got epochs={epochs}, "
            f"lr={lr}, batch_size={batch_size}"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        decoder = PatchDecoder(z.shape[1], int(x8.shape[2]), width)
    decoder.set_input_stats(z)
    target = x8.float().div_(255.0)
    opt = torch.optim.Adam(decoder.parameters(), lr=lr)
    n = z.shape[0]
    steps = max(1, epochs * math.ceil(n / batch_size))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t / steps))
    )
    gen = torch.Generator().manual_seed(seed)
    gan = None if adversarial is None else Adversary(adversarial, x8.shape[2], seed)
    history: list[float] = []
    decoder.train()
    for epoch in range(epochs):
        order = torch.randperm(n, generator=gen)
        total = 0.0
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            if gan is None:
                loss = rec = reconstruction_loss(decoder(z[idx]), target[idx])
            else:
                loss, rec = gan.losses(decoder(z[idx]), target[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += float(rec.detach()) * len(idx)
        history.append(total / n)
        if on_epoch is not None:
            on_epoch(epoch + 1, epochs, history[-1])
    return decoder.eval(), history


__all__ = ["EpochCallback", "train_decoder"]
