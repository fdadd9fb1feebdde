"""FedHD's optional decoder branch: training, rendering, the grid and the command."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from fedpath.config import ConfigError
from fedpath.data.base import DataError
from fedpath.mil.decoder import (
    ROW_TITLES,
    PatchDecoder,
    grid_shape,
    reconstruction_error,
    reconstruction_loss,
    render,
    save_grid,
    spread,
    train_decoder,
)
from fedpath.mil.decoder_gan import (
    AdversarialOptions,
    PatchDiscriminator,
    d_hinge_loss,
    diff_augment,
    discriminator_step,
    g_hinge_loss,
    generator_loss,
)
from fedpath.mil.render_cli import register


def pairs(
    n: int = 48, dim: int = 8, size: int = 16
) -> tuple[torch.Tensor, torch.Tensor]:
    """Patches whose colour and brightness are a linear function of the embedding."""
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(n, dim, generator=gen)
    colour = torch.sigmoid(z[:, :3])[:, :, None, None]
    ramp = torch.linspace(0.5, 1.0, size)[None, None, None, :]
    x = (colour * ramp).expand(n, 3, size, size) * 255
    return z, x.round().to(torch.uint8)


def test_training_reduces_reconstruction_loss() -> None:
    z, x = pairs()
    untrained, _ = train_decoder(z, x, epochs=0, seed=0, width=16)
    dec, hist = train_decoder(z, x, epochs=12, lr=5e-3, seed=0, batch_size=16, width=16)
    assert len(hist) == 12 and hist[-1] < hist[0]
    assert reconstruction_error(dec, z, x) < 0.6 * reconstruction_error(untrained, z, x)


def test_render_shape_dtype_range_and_odd_size() -> None:
    z, x = pairs(n=10, size=16)
    dec, _ = train_decoder(z, x, epochs=1, seed=0, width=16)
    out = render(dec, z)
    assert out.dtype == torch.uint8 and out.shape == (10, 3, 16, 16)
    assert int(out.min()) >= 0 and int(out.max()) <= 255
    # sizes that are not 4 * 2^k are resized to the patch size
    odd = PatchDecoder(8, 24, width=16).eval()
    assert render(odd, z).shape == (10, 3, 24, 24)


def test_deterministic_in_seed_and_global_rng_untouched() -> None:
    z, x = pairs(n=20)
    state = torch.random.get_rng_state()
    a, ha = train_decoder(z, x, epochs=2, seed=3, batch_size=8, width=16)
    assert torch.equal(torch.random.get_rng_state(), state)
    b, hb = train_decoder(z, x, epochs=2, seed=3, batch_size=8, width=16)
    c, _ = train_decoder(z, x, epochs=2, seed=4, batch_size=8, width=16)
    assert ha == hb
    assert torch.equal(render(a, z), render(b, z))
    assert not torch.equal(render(a, z), render(c, z))


def test_bad_inputs_name_the_argument() -> None:
    z, x = pairs(n=10)
    with pytest.raises(ValueError, match="N = 9"):
        train_decoder(z[:9], x, epochs=1)
    with pytest.raises(ValueError, match="patches: expected a uint8"):
        train_decoder(z, x.float(), epochs=1)
    with pytest.raises(ValueError, match="patches: expected shape"):
        train_decoder(z, x[:, :1], epochs=1)
    with pytest.raises(ValueError, match="embeddings: expected an"):
        train_decoder(z[0], x, epochs=1)
    with pytest.raises(ValueError, match="embeddings: contains NaN"):
        train_decoder(torch.full_like(z, float("nan")), x, epochs=1)
    with pytest.raises(ValueError, match="epochs"):
        train_decoder(z, x, epochs=-1)
    dec, _ = train_decoder(z, x, epochs=0, width=16)
    with pytest.raises(ValueError, match="D = 5.*D = 8"):
        render(dec, torch.zeros(3, 5))
    with pytest.raises(ValueError, match="pseudo_synthetic"):
        save_grid(x, x, x.float(), Path("never.png"))
    with pytest.raises(ValueError, match="path: expected a .png"):
        save_grid(x, x, x, Path("grid.jpg"))


def test_grid_png_has_expected_size(tmp_path: Path) -> None:
    _, x = pairs(n=6, size=16)
    out = save_grid(x, x[:4], x[:5], tmp_path / "sub" / "grid.png", columns=5)
    with Image.open(out) as im:
        assert im.format == "PNG" and im.mode == "RGB"
        assert im.size == grid_shape(5, 16)
    assert grid_shape(5, 16)[1] > 3 * 64 and len(ROW_TITLES) == 3
    assert not list((tmp_path / "sub").glob("*.tmp"))
    assert spread(10, 3) == [0, 4, 9] and spread(2, 5) == [0, 1]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["fedhd-render", *argv])


TINY = [
    "data.params.num_hospitals=2",
    "data.params.samples_per_hospital=40",
    "data.params.image_size=16",
    "data.params.slides_per_hospital=2",
    "model.params.widths=[8,16]",
    "train.batch_size=16",
    "runtime.threads=null",
]


def test_cli_handler_writes_png(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "render.png"
    args = parse(
        "--out", str(out), "--domain", "hospital_1", "--train-epochs", "1",
        "--components", "2", "--tokens", "6", "--iters", "5",
        "--decoder-epochs", "2", "--decoder-width", "16", "--columns", "4", "-q",
        *TINY,
    )  # fmt: skip
    assert args.fedhd_render_handler(args) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    with Image.open(out) as im:
        assert im.size == grid_shape(4, 16)


def test_cli_bad_input(tmp_path: Path) -> None:
    png = str(tmp_path / "x.png")
    args = parse("--out", png, "--domain", "nowhere", "-q", *TINY)
    with pytest.raises(DataError, match="nowhere"):
        args.fedhd_render_handler(args)
    args = parse("--out", str(tmp_path / "x.jpg"), "-q", *TINY)
    with pytest.raises(ConfigError, match="--out"):
        args.fedhd_render_handler(args)
    args = parse("--out", png, "--slide", "slide99", "--train-epochs", "0", "-q", *TINY)
    with pytest.raises(DataError, match="slide99"):
        args.fedhd_render_handler(args)
    assert not (tmp_path / "x.png").exists()


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


def reference_train(
    z: torch.Tensor, x8: torch.Tensor, epochs: int, lr: float, seed: int, bs: int
) -> PatchDecoder:
    """The reconstruction-only loop as it was before the adversarial option."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        dec = PatchDecoder(z.shape[1], int(x8.shape[2]), 16)
    dec.set_input_stats(z)
    target = x8.float().div_(255.0)
    opt = torch.optim.Adam(dec.parameters(), lr=lr)
    n = z.shape[0]
    steps = max(1, epochs * math.ceil(n / bs))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * t / steps))
    )
    gen = torch.Generator().manual_seed(seed)
    dec.train()
    for _ in range(epochs):
        order = torch.randperm(n, generator=gen)
        for start in range(0, n, bs):
            idx = order[start : start + bs]
            loss = reconstruction_loss(dec(z[idx]), target[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return dec.eval()


def test_default_is_the_reconstruction_only_loop_and_gan_changes_it() -> None:
    z, x = pairs(n=20)
    ref = reference_train(z, x, 2, 2e-3, 5, 8).state_dict()
    default, _ = train_decoder(z, x, epochs=2, seed=5, batch_size=8, width=16)
    off, _ = train_decoder(
        z, x, epochs=2, seed=5, batch_size=8, width=16, adversarial=None
    )
    for dec in (default, off):
        state = dec.state_dict()
        assert state.keys() == ref.keys()
        assert all(torch.equal(state[k], ref[k]) for k in ref)
    opts = AdversarialOptions(d_width=8)
    state = torch.random.get_rng_state()
    gan, hist = train_decoder(
        z, x, epochs=2, seed=5, batch_size=8, width=16, adversarial=opts
    )
    assert torch.equal(torch.random.get_rng_state(), state)
    again, hist2 = train_decoder(
        z, x, epochs=2, seed=5, batch_size=8, width=16, adversarial=opts
    )
    assert len(hist) == 2 and hist == hist2
    assert torch.equal(render(gan, z), render(again, z))
    assert not torch.equal(render(gan, z), render(default, z))


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


def test_cli_adversarial_flags_are_validated(tmp_path: Path) -> None:
    png = str(tmp_path / "x.png")
    args = parse("--out", png, "-q", *TINY)
    assert not args.adversarial and args.lambda_rec is None and args.d_lr is None
    bad = [
        (("--adversarial", "--lambda-rec", "-1"), "--lambda-rec: expected a number"),
        (("--adversarial", "--d-lr", "0"), "--d-lr: expected a number > 0"),
        (("--lambda-rec", "5"), "--lambda-rec: only used with --adversarial"),
        (("--d-lr", "1e-4"), "--d-lr: only used with --adversarial"),
    ]
    for flags, message in bad:
        args = parse("--out", png, *flags, "-q", *TINY)
        with pytest.raises(ConfigError, match=message):
            args.fedhd_render_handler(args)
    assert not (tmp_path / "x.png").exists()


def test_cli_adversarial_writes_png(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("FEDPATH_QUIET", raising=False)  # CI sets it: no status line
    out = tmp_path / "gan.png"
    args = parse(
        "--out", str(out), "--train-epochs", "1", "--components", "2",
        "--tokens", "4", "--iters", "2", "--decoder-epochs", "1",
        "--decoder-width", "16", "--columns", "3", "--adversarial",
        "--lambda-rec", "3", "--d-lr", "1e-4", *TINY,
    )  # fmt: skip
    assert args.fedhd_render_handler(args) == 0
    assert "L_GAN + 3 L_rec" in capsys.readouterr().out
    with Image.open(out) as im:
        assert im.size == grid_shape(3, 16)
