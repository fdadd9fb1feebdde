"""Stopping a run whose training diverged, at the round where it happened.

A learning rate far too high makes the loss and then the weights overflow to
infinity or NaN. Nothing downstream can make sense of them (the evaluation's
probabilities are NaN, a checkpoint of NaN weights resumes into NaN), so the
round loop checks, after each stage, the loss every client reported and the
aggregated global model, before the round is evaluated, recorded or
checkpointed: the run stops with a :class:`~fedpath.errors.RunError` naming the
round, the client, the value and the setting to change, and the records and
checkpoint of the rounds before it stay as they were.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from fedpath.config_sections import TrainConfig
from fedpath.errors import RunError
from fedpath.types import ArrayDict, Payload


def is_loss_key(key: str) -> bool:
    """``key`` is a training loss a client reports (``loss``, ``ce_loss``...)."""
    return key == "loss" or key.endswith("_loss")


def diverged(train: TrainConfig, rnd: int, what: str) -> RunError:
    """The error of a run whose training diverged in round ``rnd``: ``what``
    was seen, the setting to change, and what is kept."""
    kept = (
        f"the records and checkpoint of rounds 1-{rnd - 1} are kept"
        if rnd > 1
        else "no round had completed"
    )
    return RunError(
        f"round {rnd}: {what}: the training diverged; lower train.lr (now "
        f"{train.lr:g}) or set train.grad_clip, then run again ({kept})"
    )


def local_loss_diverged(
    train: TrainConfig, rnd: int, cid: str, err: FloatingPointError
) -> RunError:
    """:func:`diverged` for the local loop's non-finite loss (the
    ``FloatingPointError`` of ``tasks.base.step``) at client ``cid``: the one line
    both the in-process run and a Flower node send, so a diverged run reads the
    same in both."""
    return diverged(train, rnd, f"client {cid}: {str(err).partition(';')[0]}")


def check_replies(
    train: TrainConfig, stage: str, rnd: int, replies: Mapping[str, Payload]
) -> None:
    """Fail when a client reported a non-finite training loss in ``stage``."""
    for cid, payload in replies.items():
        for key, value in payload.scalars.items():
            if (
                is_loss_key(key)
                and isinstance(value, int | float)
                and not math.isfinite(value)
            ):
                raise diverged(
                    train,
                    rnd,
                    f"client {cid} reported the training loss {key!r} "
                    f"= {value} (stage {stage!r})",
                )


def non_finite(weights: ArrayDict) -> list[str]:
    """The names of the floating-point arrays of ``weights`` that hold a NaN or
    an infinity."""
    return [
        name
        for name, array in weights.items()
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all()
    ]


def check_global(
    train: TrainConfig,
    rnd: int,
    weights: ArrayDict | None,
    replies: Mapping[str, Payload],
) -> None:
    """Fail when the aggregated global model of round ``rnd`` is not finite,
    naming the clients whose replies were not finite either."""
    bad = non_finite(weights) if weights is not None else []
    if not bad:
        return
    clients = [
        cid
        for cid, payload in replies.items()
        if any(non_finite(group) for group in payload.arrays.values())
    ]
    who = f" (sent by client {', '.join(clients)})" if clients else ""
    raise diverged(
        train,
        rnd,
        f"the aggregated model has non-finite weights in {len(bad)} arrays, "
        f"first {bad[0]!r}{who}",
    )
