"""Synthetic slides that do not copy real patches: FedHD's distance guard.

Distillation moves synthetic tokens toward the real slide's mixture; on small
bags a token can end up on top of a real patch embedding (1e-3 relative
distance was measured on 6-patch bags), and sharing it then shares that patch's
embedding. Before a client uploads its synthetic slides:

1. real slides with fewer than ``min_patches`` patches are not distilled at all
   (too small to hide: their tokens would be the patches);
2. every token closer than ``min_distance x d_ref`` to any of the client's real
   patch embeddings is pushed away from its nearest real patch, along the line
   through both, to exactly that distance (up to 25 passes, since a push can land
   near another patch; a token still too close after them is dropped, and a
   slide left without tokens is not shared). ``d_ref`` is the median distance
   from a real patch to the nearest other patch of its own slide: the spacing
   of real data, so 0.5 keeps
   every shared token at least half a typical patch-to-patch gap from any real
   patch;
3. the nearest-neighbour distance ratio (token to nearest real patch, over
   ``d_ref``) is reported per client (minimum and median), so a run shows how
   close its synthetic data came.

This is an empirical guard, not a differential-privacy guarantee.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from fedpath.mil.bags import SlideBag


def reference_spacing(real: Sequence[SlideBag]) -> float:
    """Median distance from a real patch to the nearest other patch of its slide."""
    gaps: list[torch.Tensor] = []
    for bag in real:
        x = bag.features.float()
        if len(x) < 2:
            continue
        d = torch.cdist(x, x)
        d.fill_diagonal_(float("inf"))
        gaps.append(d.min(1).values)
    if not gaps:
        return 0.0
    return float(torch.cat(gaps).median())


def _nearest(
    tokens: torch.Tensor, real: torch.Tensor, chunk: int = 4096
) -> tuple[torch.Tensor, torch.Tensor]:
    """Distance to, and index of, each token's nearest row of ``real``."""
    best = torch.full((len(tokens),), float("inf"))
    arg = torch.zeros(len(tokens), dtype=torch.long)
    for s in range(0, len(real), chunk):
        d = torch.cdist(tokens, real[s : s + chunk])
        v, i = d.min(1)
        better = v < best
        best[better], arg[better] = v[better], i[better] + s
    return best, arg


def guard_tokens(
    synthetic: Sequence[SlideBag],
    real: Sequence[SlideBag],
    min_distance: float,
    seed: int,
    passes: int = 25,
) -> tuple[list[SlideBag], dict[str, float]]:
    """``synthetic`` with every token at least ``min_distance x d_ref`` from every
    real patch embedding of ``real``, and the distance-ratio report."""
    ref = reference_spacing(real)
    pooled = torch.cat([b.features.float() for b in real])
    gen = torch.Generator().manual_seed(seed)
    out: list[SlideBag] = []
    ratios: list[torch.Tensor] = []
    moved = dropped = 0
    for bag in synthetic:
        t = bag.features.float().clone()
        if ref > 0 and min_distance > 0:
            floor = min_distance * ref
            for _ in range(passes):
                dist, idx = _nearest(t, pooled)
                close = dist < floor
                if not close.any():
                    break
                moved += int(close.sum())
                anchor = pooled[idx[close]]
                step = t[close] - anchor
                norm = step.norm(dim=1, keepdim=True)
                random = torch.randn(step.shape, generator=gen)
                step = torch.where(norm > 1e-12, step, random)
                step = step / step.norm(dim=1, keepdim=True)
                t[close] = anchor + step * floor * 1.0001
        dist, _ = _nearest(t, pooled)
        if ref > 0 and min_distance > 0:  # still too close after the passes: drop
            keep = dist >= min_distance * ref
            dropped += int((~keep).sum())
            t, dist = t[keep], dist[keep]
            if not len(t):
                continue
        ratios.append(dist / ref if ref > 0 else dist)
        out.append(replace(bag, features=t.to(bag.features.dtype)))
    r = torch.cat(ratios) if ratios else torch.zeros(0)
    report = {
        "nn_ratio_min": float(r.min()) if len(r) else float("nan"),
        "nn_ratio_median": float(r.median()) if len(r) else float("nan"),
        "tokens_moved": float(moved),
        "tokens_dropped": float(dropped),
        "d_ref": ref,
    }
    return out, report
