"""Batched EM: padded slides fit as if alone, and the returned pieces agree."""

from __future__ import annotations

import torch

from fedpath.mil.gmm_em import EMSettings, run_em


def blobs(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    centres = 4 * torch.randn(3, 2, generator=gen, dtype=torch.float64)
    z = torch.randint(3, (n,), generator=gen)
    return centres[z] + 0.3 * torch.randn(n, 2, generator=gen, dtype=torch.float64)


def batch(xs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-padded ``(S, N, D)`` and its mask of valid rows."""
    n = max(len(x) for x in xs)
    out = torch.zeros(len(xs), n, xs[0].shape[1], dtype=xs[0].dtype)
    mask = torch.zeros(len(xs), n, dtype=torch.bool)
    for i, x in enumerate(xs):
        out[i, : len(x)], mask[i, : len(x)] = x, True
    return out, mask


def test_a_padded_slide_fits_as_if_it_were_alone() -> None:
    xs = [blobs(120, 0), blobs(60, 1)]
    opt = EMSettings("full", 20, 1e-6, 1e-4, 5)
    x, mask = batch(xs)
    gens = [torch.Generator().manual_seed(s) for s in (3, 4)]
    together = run_em(x, mask, 3, opt, gens, None)
    for i, xi in enumerate(xs):
        alone = run_em(xi[None], torch.ones(1, len(xi), dtype=torch.bool), 3, opt,
                       [torch.Generator().manual_seed(3 + i)], None)  # fmt: skip
        w, mu, cov, resp, ll, n_iter, done = alone
        assert torch.allclose(together[0][i], w[0], atol=1e-10)
        assert torch.allclose(together[1][i], mu[0], atol=1e-8)
        assert torch.allclose(together[2][i], cov[0], atol=1e-8)
        assert torch.allclose(together[3][i, : len(xi)], resp[0], atol=1e-8)
        assert abs(float(together[4][i]) - float(ll[0])) < 1e-10
        assert int(together[5][i]) == int(n_iter[0]) and bool(done[0])
    # padding rows get no responsibility; valid rows sum to one
    resp = together[3]
    assert float(resp[1, 60:].abs().sum()) == 0.0
    assert torch.allclose(resp[0].sum(-1), torch.ones(120, dtype=torch.float64))
    assert torch.allclose(together[0].sum(-1), torch.ones(2, dtype=torch.float64))


def test_given_initial_means_are_used_and_separated_blobs_are_found() -> None:
    x = blobs(300, 2)
    init = torch.stack([x[0], x[1], x[2]])[None]
    opt = EMSettings("diag", 50, 1e-8, 1e-6, 0)
    w, mu, _, resp, _, _, done = run_em(
        x[None], torch.ones(1, 300, dtype=torch.bool), 3, opt,
        [torch.Generator().manual_seed(0)], init,
    )  # fmt: skip
    assert bool(done[0])
    hard = resp[0].argmax(-1)
    for m in range(3):  # each component's mean is the mean of its points
        mine = x[hard == m]
        if len(mine):
            assert torch.allclose(mu[0, m], mine.mean(0), atol=1e-3)
    assert torch.allclose(w[0], resp[0].sum(0) / 300, atol=1e-6)
