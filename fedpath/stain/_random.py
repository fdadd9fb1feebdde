"""Random draws that take an explicit :class:`torch.Generator` (never the global RNG).

``torch.distributions`` samples Gamma/Beta/Dirichlet variates from the global RNG
only, so the augmentations here draw them from generator-driven normals and
uniforms instead (Marsaglia & Tsang 2000 Gamma sampler, in log space so that the
tiny ``Beta(0.1, 0.1)`` shapes used by MixStyle never underflow to 0/0).

Every draw happens on ``generator.device`` and is then moved to the requested
device, so a CPU generator can drive augmentations of CUDA tensors and the
results do not depend on where the data lives.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "check_generator",
    "rand",
    "randint",
    "randn",
    "sample_beta",
    "sample_dirichlet",
    "sample_log_gamma",
]

_MAX_ROUNDS = 32


def check_generator(generator: object) -> torch.Generator:
    """Return ``generator`` if it is a :class:`torch.Generator`; else TypeError."""
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            "an explicit torch.Generator is required (the global RNG is never used), "
            f"got {type(generator).__name__}"
        )
    return generator


def _to(draws: Tensor, device: torch.device | str | None) -> Tensor:
    """``draws`` (made on the generator's device) moved to ``device`` if given:
    the same generator state gives the same values wherever the data lives."""
    return draws.to(device) if device is not None else draws


def rand(
    shape: tuple[int, ...],
    generator: torch.Generator,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Uniform draws on ``[0, 1)`` of ``shape``."""
    g = generator
    return _to(torch.rand(shape, generator=g, device=g.device, dtype=dtype), device)


def randn(
    shape: tuple[int, ...],
    generator: torch.Generator,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Standard normal draws of ``shape``."""
    g = generator
    return _to(torch.randn(shape, generator=g, device=g.device, dtype=dtype), device)


def randint(
    high: int,
    shape: tuple[int, ...],
    generator: torch.Generator,
    device: torch.device | str | None = None,
) -> Tensor:
    """Integers uniform on ``{0, ..., high - 1}`` of ``shape`` (int64)."""
    g = generator
    return _to(torch.randint(high, shape, generator=g, device=g.device), device)


def sample_log_gamma(concentration: Tensor, generator: torch.Generator) -> Tensor:
    """Log of Gamma(concentration, 1) draws, one per element (float64).

    Marsaglia & Tsang's squeeze/rejection sampler for shapes >= 1, boosted for
    shapes < 1 by ``G(a) = G(a + 1) * U ** (1 / a)``, done in log space. The
    rejection loop runs a fixed maximum number of vectorized rounds; the acceptance
    rate is above 95 % per round, so an element left unaccepted after
    ``_MAX_ROUNDS`` rounds (probability < 1e-40) falls back to the sampler's centre.

    Parameters
    ----------
    concentration : Tensor
        Positive shape parameters, any shape; lives on ``generator.device``.
    generator : torch.Generator
        Source of all randomness.

    Returns
    -------
    Tensor
        float64 tensor of ``log G`` with the shape of ``concentration``.
    """
    a = concentration.to(device=generator.device, dtype=torch.float64)
    if not bool(torch.all(a > 0)):
        raise ValueError("Gamma concentration must be positive")
    boost = a < 1
    a1 = torch.where(boost, a + 1, a)
    d = a1 - 1.0 / 3.0
    c = 1.0 / torch.sqrt(9.0 * d)
    out = torch.log(
        d
    )  # fallback value: the sampler's centre (never reached in practice)
    done = torch.zeros_like(a, dtype=torch.bool)
    shape = tuple(a.shape)
    for _ in range(_MAX_ROUNDS):
        x = randn(shape, generator, dtype=torch.float64)
        u = 1.0 - rand(shape, generator, dtype=torch.float64)  # (0, 1]: log is finite
        v = (1.0 + c * x) ** 3
        log_v = torch.log(v.clamp_min(1e-300))
        accept = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * log_v)
        take = accept & ~done
        out = torch.where(take, torch.log(d) + log_v, out)
        done = done | accept
        if bool(done.all()):
            break
    u_boost = 1.0 - rand(shape, generator, dtype=torch.float64)
    return out + torch.where(boost, torch.log(u_boost) / a, torch.zeros_like(a))


def sample_beta(
    alpha: float,
    beta: float,
    shape: tuple[int, ...],
    generator: torch.Generator,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Beta(alpha, beta) draws of ``shape`` as ``sigmoid(log G_a - log G_b)``.

    The log-space ratio stays exact for tiny shapes (``alpha = 0.1`` puts most mass
    within 1e-5 of 0 or 1), where ``G_a / (G_a + G_b)`` would often be 0/0.
    """
    if not (alpha > 0 and beta > 0 and math.isfinite(alpha) and math.isfinite(beta)):
        raise ValueError(f"Beta parameters must be positive, got ({alpha}, {beta})")
    dev = generator.device
    conc_a = torch.full(shape, float(alpha), dtype=torch.float64, device=dev)
    conc_b = torch.full(shape, float(beta), dtype=torch.float64, device=dev)
    log_a = sample_log_gamma(conc_a, generator)
    log_b = sample_log_gamma(conc_b, generator)
    return _to(torch.sigmoid(log_a - log_b).to(dtype), device)


def sample_dirichlet(
    alpha: float,
    k: int,
    n: int,
    generator: torch.Generator,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``n`` draws of a symmetric Dirichlet(alpha, ..., alpha) over ``k`` weights.

    Returns an ``(n, k)`` tensor whose rows sum to 1 (softmax of log-Gamma draws).
    """
    if not (alpha > 0 and math.isfinite(alpha)):
        raise ValueError(f"Dirichlet alpha must be positive, got {alpha}")
    conc = torch.full(
        (n, k), float(alpha), dtype=torch.float64, device=generator.device
    )
    weights = torch.softmax(sample_log_gamma(conc, generator), dim=1)
    return _to(weights.to(dtype), device)
