r"""The adversarial term of FedHD's decoder branch, at CPU scale.

FedHD trains its visual branch (a FastGAN generator) on ``L_GAN + lambda_rec *
L_rec``; :func:`fedpath.mil.decoder_train.train_decoder` adds the ``L_GAN`` half when it
is given :class:`AdversarialOptions`. The pieces here:

- :class:`PatchDiscriminator`: a few strided 4x4 convolutions with spectral norm
  and LeakyReLU(0.2), halving the side down to <= 4 px, then a spectrally
  normalised linear layer to one logit per image. It sees images mapped to
  ``[-1, 1]``. With ``recon=True`` it is FastGAN's reconstruction-regularised
  ("self-supervised") discriminator, reduced: a small up-sampling decoder reads
  the first feature map of side <= 8 and must reproduce the real image at 4x that
  side (area-downsampled), scored by L1; the discriminator minimises that next to
  its hinge loss, so its features have to describe the image and not merely
  separate the few real patches from the fakes.
- :func:`d_hinge_loss` and :func:`g_hinge_loss`: the hinge loss (FastGAN's, from
  Lim & Ye 2017 / Miyato et al. 2018), ``L_D = E[relu(1 - D(x))] + E[relu(1 +
  D(g(z)))]`` and ``L_G = -E[D(g(z))]``.
- :func:`diff_augment`: DiffAugment-style random horizontal flip and translation
  (reflect-padded, up to 1/8 of the side), applied to real and fake images alike
  before the discriminator, as FastGAN does to train on few images.
- :func:`discriminator_step` and :func:`generator_loss`: one optimiser step of
  the discriminator, and the generator's loss ``L_G + lambda_rec * L_rec``;
  :class:`Adversary` holds the discriminator's side of a training run.

Differences from the paper and FastGAN, on purpose (CPU, minutes, 32-64 px):
the generator is :class:`~fedpath.mil.decoder.PatchDecoder` (conditioned on the
embedding; no skip-layer excitation, GroupNorm instead of BatchNorm + GLU, no
noise input); the discriminator is unconditional, has 3-4 plain strided blocks
instead of FastGAN's residual down-blocks, one logit per image, one
reconstruction decoder (FastGAN: two, on an 8x8 map and a random 8x8 crop of a
16x16 map) scored by L1 instead of LPIPS; augmentation is flip + translation only
(FastGAN's DiffAugment also uses colour and cutout, which would fight the stain
colour that the pictures are meant to show). The paper gives no ``lambda_rec``,
discriminator or schedule; the defaults below are ours (lambda_rec = 100 and
d_lr = 1e-3 beat 5 or 20 and 2e-4 in ``benchmarks/bench_decoder_gan.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import spectral_norm

from fedpath.mil.decoder import reconstruction_loss

#: The discriminator stops halving the side once it is <= this.
D_MIN_SIDE = 4
#: Its reconstruction head reads the first feature map of side <= this.
D_RECON_SIDE = 8


@dataclass(frozen=True)
class AdversarialOptions:
    """Settings of the ``L_GAN`` term (see the module docstring).

    Attributes
    ----------
    lambda_rec : float
        Weight of ``L_rec`` in the generator's loss ``L_G + lambda_rec * L_rec``
        (>= 0; 0 is a pure GAN that may ignore the embedding).
    d_lr : float
        Adam learning rate of the discriminator (betas 0.5, 0.999), constant.
    d_width : int
        Channels of the discriminator's first block (doubled per block, <= 256).
    d_recon : bool
        FastGAN's reconstruction-regularised discriminator (L1 on the real image).
    augment : bool
        Random flip + translation of real and fake images before the
        discriminator (DiffAugment).
    """

    lambda_rec: float = 100.0
    d_lr: float = 1e-3
    d_width: int = 32
    d_recon: bool = True
    augment: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lambda_rec) and self.lambda_rec >= 0):
            raise ValueError(
                f"lambda_rec: expected a number >= 0, got {self.lambda_rec}"
            )
        if not (math.isfinite(self.d_lr) and self.d_lr > 0):
            raise ValueError(f"d_lr: expected a number > 0, got {self.d_lr}")
        if self.d_width < 1:
            raise ValueError(f"d_width: expected an integer >= 1, got {self.d_width}")


class PatchDiscriminator(nn.Module):
    """Spectrally normalised strided-conv critic of ``H x H`` RGB patches in [0, 1].

    Parameters
    ----------
    image_size : int
        ``H`` (>= 4).
    width : int
        Channels of the first block; doubled per block up to 256.
    recon : bool
        Add the reconstruction head (:meth:`forward` with ``reconstruct=True``).
    """

    def __init__(self, image_size: int, width: int = 32, recon: bool = True) -> None:
        super().__init__()
        if image_size < D_MIN_SIDE or width < 1:
            raise ValueError(
                f"need image_size >= {D_MIN_SIDE}, width >= 1; got {image_size}, "
                f"{width}"
            )
        self.image_size = image_size
        blocks: list[nn.Module] = []
        c_in, c, side = 3, width, image_size
        self.recon_at: int | None = None
        recon_c = 0
        while side > D_MIN_SIDE or not blocks:
            blocks.append(
                nn.Sequential(
                    spectral_norm(nn.Conv2d(c_in, c, 4, stride=2, padding=1)),
                    nn.LeakyReLU(0.2, inplace=True),
                )
            )
            side = side // 2
            if self.recon_at is None and side <= D_RECON_SIDE:
                self.recon_at, recon_c = len(blocks) - 1, c
            c_in, c = c, min(256, c * 2)
        self.blocks = nn.ModuleList(blocks)
        self.side = side
        self.logit = spectral_norm(nn.Linear(c_in * side * side, 1))
        self.recon_head: nn.Module | None = None
        if recon:
            if self.recon_at is None:  # tiny inputs: read the last map
                self.recon_at, recon_c = len(blocks) - 1, c_in
            mid = max(8, recon_c // 2)
            self.recon_head = nn.Sequential(
                nn.Upsample(scale_factor=2, mode="nearest"),
                nn.Conv2d(recon_c, mid, 3, padding=1),
                nn.LeakyReLU(0.2, inplace=True),
                nn.Upsample(scale_factor=2, mode="nearest"),
                nn.Conv2d(mid, 3, 3, padding=1),
                nn.Sigmoid(),
            )

    def forward(
        self, x: Tensor, reconstruct: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Logits ``(B,)`` of images ``(B, 3, H, H)`` in [0, 1], and with
        ``reconstruct`` the head's image ``(B, 3, 4s, 4s)`` in [0, 1] (else None)."""
        h = x * 2.0 - 1.0
        rec: Tensor | None = None
        for i, block in enumerate(self.blocks):
            h = block(h)
            if reconstruct and i == self.recon_at and self.recon_head is not None:
                rec = self.recon_head(h)
        return self.logit(h.flatten(1)).squeeze(1), rec


def d_hinge_loss(real_logits: Tensor, fake_logits: Tensor) -> Tensor:
    """Discriminator hinge loss ``E[relu(1 - D(x))] + E[relu(1 + D(g(z)))]``."""
    return F.relu(1.0 - real_logits).mean() + F.relu(1.0 + fake_logits).mean()


def g_hinge_loss(fake_logits: Tensor) -> Tensor:
    """Generator hinge loss ``-E[D(g(z))]``."""
    return -fake_logits.mean()


def diff_augment(x: Tensor, gen: torch.Generator) -> Tensor:
    """Random horizontal flip and translation (<= H/8, reflect padding) per image.

    Differentiable in ``x`` (flips and crops only); the randomness comes from
    ``gen`` alone, so the global RNG is untouched.
    """
    b, _, h, w = x.shape
    flip = torch.rand(b, generator=gen) < 0.5
    x = torch.where(flip[:, None, None, None], x.flip(3), x)
    pad = h // 8
    if pad == 0:
        return x
    padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    off = torch.randint(0, 2 * pad + 1, (b, 2), generator=gen).tolist()
    return torch.stack(
        [padded[i, :, dy : dy + h, dx : dx + w] for i, (dy, dx) in enumerate(off)]
    )


def _view(x: Tensor, opts: AdversarialOptions, gen: torch.Generator) -> Tensor:
    return diff_augment(x, gen) if opts.augment else x


def discriminator_step(
    disc: PatchDiscriminator,
    opt: torch.optim.Optimizer,
    real: Tensor,
    fake: Tensor,
    opts: AdversarialOptions,
    gen: torch.Generator,
) -> float:
    """One Adam step of the discriminator on a batch; returns its loss.

    The loss is :func:`d_hinge_loss` plus, with ``opts.d_recon``, the L1 error of
    its reconstruction of the (augmented) real images at the head's side.
    ``fake`` is detached here.
    """
    view = _view(real, opts, gen)
    real_logits, rec = disc(view, reconstruct=opts.d_recon)
    fake_logits, _ = disc(_view(fake.detach(), opts, gen))
    loss = d_hinge_loss(real_logits, fake_logits)
    if rec is not None:
        small = F.interpolate(view, size=rec.shape[-2:], mode="area")
        loss = loss + F.l1_loss(rec, small)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


def generator_loss(
    disc: PatchDiscriminator,
    fake: Tensor,
    real: Tensor,
    opts: AdversarialOptions,
    gen: torch.Generator,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(L_G + lambda_rec * L_rec, L_G, L_rec)`` of a batch of fakes; the
    discriminator's parameters receive no gradient."""
    disc.requires_grad_(False)
    try:
        adv = g_hinge_loss(disc(_view(fake, opts, gen))[0])
    finally:
        disc.requires_grad_(True)
    rec = reconstruction_loss(fake, real)
    return adv + opts.lambda_rec * rec, adv, rec


class Adversary:
    """The discriminator side of :func:`fedpath.mil.decoder_train.train_decoder`
    with ``adversarial``: the discriminator (initialised from ``seed + 1``), its
    optimiser, and the augmentation's generator (``seed + 2``)."""

    def __init__(self, opts: AdversarialOptions, image_size: int, seed: int) -> None:
        self.opts = opts
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            self.disc = PatchDiscriminator(image_size, opts.d_width, opts.d_recon)
        self.opt = torch.optim.Adam(
            self.disc.parameters(), lr=opts.d_lr, betas=(0.5, 0.999)
        )
        self.gen = torch.Generator().manual_seed(seed + 2)

    def losses(self, fake: Tensor, real: Tensor) -> tuple[Tensor, Tensor]:
        """Step the discriminator on ``(real, fake)``; return the generator's
        ``(L_G + lambda_rec * L_rec, L_rec)``."""
        discriminator_step(self.disc, self.opt, real, fake, self.opts, self.gen)
        total, _, rec = generator_loss(self.disc, fake, real, self.opts, self.gen)
        return total, rec


__all__ = [
    "AdversarialOptions",
    "Adversary",
    "PatchDiscriminator",
    "d_hinge_loss",
    "diff_augment",
    "discriminator_step",
    "g_hinge_loss",
    "generator_loss",
]
