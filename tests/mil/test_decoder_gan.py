"""The adversarial term of FedHD's decoder: hinge losses, steps, augmentation."""

from __future__ import annotations

import pytest
import torch

from fedpath.mil.decoder import PatchDecoder, reconstruction_loss
from fedpath.mil.decoder_gan import (
    AdversarialOptions,
    Adversary,
    PatchDiscriminator,
    d_hinge_loss,
    diff_augment,
    discriminator_step,
    g_hinge_loss,
    generator_loss,
)
from tests.mil_helpers import pairs


def test_hinge_losses_match_hand_computed_values() -> None:
    real = torch.tensor([2.0, 0.5, -1.0])
    fake = torch.tensor([-2.0, 0.0, 1.5], requires_grad=True)
    # relu(1 - real) = [0, 0.5, 2], relu(1 + fake) = [0, 1, 2.5]: (2.5 + 3.5) / 3
    assert float(d_hinge_loss(real, fake.detach())) == pytest.approx(2.0)
    # -mean(fake) = -(-0.5 / 3); d/d fake = -1/3 each
    g = g_hinge_loss(fake)
    assert float(g.detach()) == pytest.approx(0.5 / 3)
    g.backward()
    assert fake.grad is not None
    assert torch.allclose(fake.grad, torch.full((3,), -1 / 3))
    # beyond the margin the discriminator's loss is zero
    assert float(d_hinge_loss(torch.tensor([1.0, 3.0]), torch.tensor([-1.0]))) == 0.0


def players(
    recon: bool = False,
) -> tuple[PatchDecoder, PatchDiscriminator, torch.Tensor, torch.Tensor]:
    """A decoder, a discriminator and one batch of (embedding, real image in [0, 1])."""
    z, x = pairs(n=8, size=16)
    torch.manual_seed(0)
    dec = PatchDecoder(8, 16, width=16)
    dec.set_input_stats(z)
    # eval: spectral norm's power iteration stays put, so losses compare exactly
    disc = PatchDiscriminator(16, width=8, recon=recon).eval()
    return dec, disc, z, x.float() / 255.0


def test_one_step_lowers_each_players_adversarial_loss() -> None:
    dec, disc, z, real = players()
    opts = AdversarialOptions(lambda_rec=0.0, augment=False, d_recon=False)
    gen = torch.Generator().manual_seed(0)
    fake = dec(z).detach()

    def d_loss() -> float:
        with torch.no_grad():
            return float(d_hinge_loss(disc(real)[0], disc(fake)[0]))

    before = d_loss()
    d_opt = torch.optim.Adam(disc.parameters(), lr=1e-3, betas=(0.5, 0.999))
    reported = discriminator_step(disc, d_opt, real, fake, opts, gen)
    assert reported == pytest.approx(before, rel=1e-5)
    assert d_loss() < before

    g_opt = torch.optim.Adam(dec.parameters(), lr=1e-3)
    total, adv, _ = generator_loss(disc, dec(z), real, opts, gen)
    assert total.item() == pytest.approx(adv.item())  # lambda_rec = 0
    g_opt.zero_grad()
    disc.zero_grad(set_to_none=True)
    total.backward()
    # the discriminator is left trainable and gets no gradient from the G step
    assert all(p.grad is None for p in disc.parameters())
    assert all(p.requires_grad for p in disc.parameters())
    g_opt.step()
    with torch.no_grad():
        after = float(g_hinge_loss(disc(dec(z))[0]))
    assert after < adv.item()


def test_generator_loss_weights_reconstruction_and_d_recon_term() -> None:
    dec, disc, z, real = players(recon=True)
    gen = torch.Generator().manual_seed(0)
    opts = AdversarialOptions(lambda_rec=7.0, augment=False)
    total, adv, rec = generator_loss(disc, dec(z), real, opts, gen)
    assert total.item() == pytest.approx(adv.item() + 7.0 * rec.item(), rel=1e-6)
    assert rec.item() == pytest.approx(reconstruction_loss(dec(z), real).item())
    logits, image = disc(real, reconstruct=True)
    assert logits.shape == (8,) and image is not None
    assert image.shape == (8, 3, 32, 32)  # 4x the 8x8 map it reads
    # with the reconstruction head, the reported D loss adds its L1 error
    fake = dec(z).detach()
    with torch.no_grad():
        small = torch.nn.functional.interpolate(real, size=(32, 32), mode="area")
        hinge = float(d_hinge_loss(logits, disc(fake)[0]))
        l1 = float(torch.nn.functional.l1_loss(image, small))
    d_opt = torch.optim.SGD(disc.parameters(), lr=0.0)
    assert discriminator_step(disc, d_opt, real, fake, opts, gen) == pytest.approx(
        hinge + l1, rel=1e-5
    )


def test_diff_augment_flips_and_shifts_from_its_generator() -> None:
    x = torch.rand(6, 3, 16, 16, requires_grad=True)
    state = torch.random.get_rng_state()
    a = diff_augment(x, torch.Generator().manual_seed(1))
    b = diff_augment(x, torch.Generator().manual_seed(1))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert a.shape == x.shape and torch.equal(a, b)
    assert not torch.equal(a, x)
    a.sum().backward()
    assert x.grad is not None and bool(x.grad.abs().sum() > 0)


def test_adversarial_options_name_the_bad_field() -> None:
    with pytest.raises(ValueError, match="lambda_rec: expected a number >= 0"):
        AdversarialOptions(lambda_rec=-0.5)
    with pytest.raises(ValueError, match="lambda_rec"):
        AdversarialOptions(lambda_rec=float("nan"))
    with pytest.raises(ValueError, match="d_lr"):
        AdversarialOptions(d_lr=0.0)
    with pytest.raises(ValueError, match="d_width"):
        AdversarialOptions(d_width=0)
    assert AdversarialOptions(lambda_rec=0.0).lambda_rec == 0.0


def test_adversary_steps_the_discriminator_then_scores_the_generator() -> None:
    """``Adversary.losses`` is one :func:`discriminator_step` then
    :func:`generator_loss` with a discriminator seeded from ``seed + 1`` and
    augmentation from ``seed + 2``; the global RNG is left alone."""
    z, x = pairs(n=8, size=16)
    torch.manual_seed(0)
    dec = PatchDecoder(8, 16, width=16)
    dec.set_input_stats(z)
    real, opts = x.float() / 255.0, AdversarialOptions(d_width=8, lambda_rec=3.0)
    state = torch.random.get_rng_state()
    adversary = Adversary(opts, 16, seed=4)
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(5)
    disc = PatchDiscriminator(16, opts.d_width, opts.d_recon)
    opt = torch.optim.Adam(disc.parameters(), lr=opts.d_lr, betas=(0.5, 0.999))
    gen = torch.Generator().manual_seed(6)
    fake = dec(z)
    total, rec = adversary.losses(fake, real)
    discriminator_step(disc, opt, real, fake, opts, gen)
    want, _, want_rec = generator_loss(disc, fake, real, opts, gen)
    assert torch.equal(total, want) and torch.equal(rec, want_rec)
    assert rec.item() == pytest.approx(reconstruction_loss(fake, real).item())
    for a, b in zip(adversary.disc.parameters(), disc.parameters(), strict=True):
        assert torch.equal(a, b)
