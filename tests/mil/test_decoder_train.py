"""Training FedHD's decoder: the reconstruction-only loop and the adversarial one."""

from __future__ import annotations

import math

import pytest
import torch

from fedpath.mil.decoder import (
    PatchDecoder,
    reconstruction_error,
    reconstruction_loss,
    render,
)
from fedpath.mil.decoder_gan import AdversarialOptions
from fedpath.mil.decoder_train import train_decoder
from tests.mil_helpers import pairs


def test_training_reduces_reconstruction_loss() -> None:
    z, x = pairs()
    untrained, _ = train_decoder(z, x, epochs=0, seed=0, width=16)
    dec, hist = train_decoder(z, x, epochs=12, lr=5e-3, seed=0, batch_size=16, width=16)
    assert len(hist) == 12 and hist[-1] < hist[0]
    assert reconstruction_error(dec, z, x) < 0.6 * reconstruction_error(untrained, z, x)


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
    rng = torch.random.get_rng_state()
    gan, hist = train_decoder(
        z, x, epochs=2, seed=5, batch_size=8, width=16, adversarial=opts
    )
    assert torch.equal(torch.random.get_rng_state(), rng)
    again, hist2 = train_decoder(
        z, x, epochs=2, seed=5, batch_size=8, width=16, adversarial=opts
    )
    assert len(hist) == 2 and hist == hist2
    assert torch.equal(render(gan, z), render(again, z))
    assert not torch.equal(render(gan, z), render(default, z))
