"""Server-side aggregation over named ``state_dict`` entries.

FedAvg (McMahan et al. 2017): theta = sum_i n_i theta_i / sum_i n_i, entry by entry.
BatchNorm buffers need an explicit rule, because they are statistics, not
parameters:

* ``average`` (FedAvg / FedCCRL): running_mean and running_var are averaged with
  the same weights as the parameters.
* ``pooled``: running_var becomes the variance of the pooled data implied by the
  clients' moments, sum_i w_i (var_i + mean_i^2) - mean^2 (plain averaging ignores
  the spread of the client means, which is exactly the stain shift between sites).

Integer buffers (``num_batches_tracked``) take the maximum.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

import numpy as np

from fedpath.types import ArrayDict

BufferPolicy = Literal["average", "pooled"]


def weighted_average(
    states: Sequence[ArrayDict],
    weights: Sequence[float],
    keys: Collection[str] | None = None,
    bn_buffers: BufferPolicy = "average",
) -> ArrayDict:
    """Weighted average of ``states`` over ``keys`` (default: all of states[0])."""
    if not states:
        raise ValueError("weighted_average: no client states to aggregate")
    if len(states) != len(weights):
        raise ValueError(
            f"weighted_average: {len(states)} states but {len(weights)} weights"
        )
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(
            f"weighted_average: weights must be >= 0 with a positive sum, "
            f"got {list(weights)}"
        )
    w = w / w.sum()
    names = list(states[0]) if keys is None else list(keys)
    for i, s in enumerate(states):
        missing = [k for k in names if k not in s]
        if missing:
            raise ValueError(
                f"weighted_average: client {i} lacks entries {missing[:5]}"
            )
    out: ArrayDict = {}
    for k in names:
        ref = states[0][k]
        if not np.issubdtype(ref.dtype, np.floating):
            out[k] = np.asarray(np.max(np.stack([s[k] for s in states]), axis=0))
            continue
        acc = np.zeros(ref.shape, dtype=np.float64)
        for wi, s in zip(w, states, strict=True):
            if s[k].shape != ref.shape:
                raise ValueError(
                    f"weighted_average: entry {k!r} has shape {s[k].shape}, "
                    f"expected {ref.shape}"
                )
            acc += wi * s[k]
        out[k] = acc.astype(ref.dtype)
    if bn_buffers == "pooled":
        for k in names:
            if not k.endswith("running_var"):
                continue
            mean_key = k[: -len("running_var")] + "running_mean"
            if mean_key not in out:
                continue
            second = sum(
                wi * (s[k].astype(np.float64) + s[mean_key].astype(np.float64) ** 2)
                for wi, s in zip(w, states, strict=True)
            )
            pooled = second - out[mean_key].astype(np.float64) ** 2
            out[k] = np.maximum(pooled, 0.0).astype(states[0][k].dtype)
    elif bn_buffers != "average":
        raise ValueError(
            f"bn_buffers: expected 'average' or 'pooled', got {bn_buffers!r}"
        )
    return out
