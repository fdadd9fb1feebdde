r"""HistoFS's operations on patch embeddings: styles, W2 k-means, AdaIN, authenticity.

The formulas of :mod:`fedpath.algorithms.histofs` (HistoFS, Raswa et al., CVPR
2025), on tensors only. A patch's *style* is ``(mu, sigma)``, the mean and
population standard deviation of its embedding over the feature dimension.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

EPS = 1e-5


def patch_styles(features: Tensor) -> Tensor:
    """``(N, 2)``: mean and (population) std over the feature dimension."""
    f = features.float()
    return torch.stack([f.mean(1), f.std(1, unbiased=False)], dim=1)


def w2_kmeans(
    styles: Tensor, k: int, iters: int = 50, seed: int = 0
) -> tuple[Tensor, Tensor]:
    """k-means of 1-D Gaussians ``(mu, sigma)`` under W2 (Euclidean in the
    ``(mu, sigma)`` plane, whose barycentre is the mean). k-means++ seeding from
    ``seed``; at most ``iters`` Lloyd steps; an empty cluster keeps its centre.
    Returns the ``(min(k, N), 2)`` centres and the ``(N,)`` assignment."""
    x = styles.double()
    n = len(x)
    k = min(k, n)
    gen = torch.Generator().manual_seed(seed)
    first = int(torch.randint(n, (1,), generator=gen))
    centres = [x[first]]
    for _ in range(1, k):
        d2 = torch.cdist(x, torch.stack(centres)).min(1).values ** 2
        if float(d2.sum()) <= 0:  # all points already on a centre
            idx = int(torch.randint(n, (1,), generator=gen))
        else:
            idx = int(torch.multinomial(d2 / d2.sum(), 1, generator=gen))
        centres.append(x[idx])
    c = torch.stack(centres)
    assign = torch.cdist(x, c).argmin(1)
    for _ in range(iters):
        for j in range(k):
            members = x[assign == j]
            if len(members):
                c[j] = members.mean(0)
        new = torch.cdist(x, c).argmin(1)
        if torch.equal(new, assign):
            break
        assign = new
    return c.float(), assign


def pseudo_bag_styles(features: Tensor, k: int, iters: int, seed: int) -> Tensor:
    """The ``(min(k, N), 2)`` pseudo styles of one bag."""
    return w2_kmeans(patch_styles(features), k, iters, seed)[0]


def adain(features: Tensor, style: Tensor) -> Tensor:
    """Restyle every patch embedding (row) to ``style = (mu, sigma)``."""
    mu = features.mean(1, keepdim=True)
    sd = features.std(1, unbiased=False, keepdim=True)
    return (features - mu) / (sd + EPS) * style[1] + style[0]


def style_moments(styles: Tensor) -> Tensor:
    """``(2, 2)``: the mean (row 0) and population std (row 1) over ``styles``
    of each coordinate ``(mu, sigma)``."""
    x = styles.double()
    return torch.stack([x.mean(0), x.std(0, unbiased=False)]).float()


def map_styles(styles: Tensor, source: Tensor, target: Tensor) -> Tensor:
    """``styles`` of a space with :func:`style_moments` ``source`` mapped into a
    space with ``target``: each coordinate z-scored, then rescaled (module
    docstring); sigma kept >= 1e-5."""
    z = (styles.float() - source[0]) / source[1].clamp_min(EPS)
    out = z * target[1] + target[0]
    return torch.stack([out[:, 0], out[:, 1].clamp_min(EPS)], dim=1)


def authenticity(a_orig: Tensor, a_aug: Tensor, lam: float = 0.4) -> Tensor:
    """``a = 1 - lam cos(A_orig, A_aug)``: cosine over patches, mean over the
    ``(K, N)`` attention's branches."""
    cos = F.cosine_similarity(a_orig, a_aug, dim=-1).mean()
    return 1.0 - lam * cos


__all__ = [
    "EPS",
    "adain",
    "authenticity",
    "map_styles",
    "patch_styles",
    "pseudo_bag_styles",
    "style_moments",
    "w2_kmeans",
]
