"""What an algorithm sends: the wire facts every algorithm declares where it is
registered (``register_algorithm(..., wire=Wire(...))``).

A hospital's node decides what it serves from these facts alone (the node guard,
:mod:`fedpath.runtime.guard`), as do secure aggregation
(:mod:`fedpath.runtime.secagg`: which algorithms it can carry and how it weights
their uploads) and client-level DP on the node
(:mod:`fedpath.runtime.flower.central_dp`: whose ``fit`` replies are clipped).
No list of algorithm names is kept anywhere else: a new algorithm declares its
facts next to its params, and registering one without them fails at once.

The facts travel in ``fedpath/catalog.json`` beside each algorithm's params
class, so :func:`declared` answers without importing PyTorch or the plugins
(the node checks its policy before it loads anything). This module imports
neither.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fedpath.errors import FedpathError
from fedpath.registry import ALGORITHMS

# ------------------------------------------------------------------ kinds
# What a stage's reply carries, as a hospital would classify it.
#: model weights (all or a shared part of the model)
WEIGHTS = "weights"
#: summaries of local data: stain or feature statistics, amplitude spectra,
#: pseudo styles, per-class logits
STATISTICS = "statistics"
#: synthetic data distilled or sampled from local data (no real sample)
SYNTHETIC = "synthetic data"
#: metrics and counts only
METRICS = "metrics"
#: real data: images, labels or real embeddings (the non-private upper bounds)
RAW = "raw data"
KINDS = (WEIGHTS, STATISTICS, SYNTHETIC, METRICS, RAW)

#: How SecAgg+ combines the uploads of an algorithm it can carry: "examples"
#: (FedAvg's n_k, summed securely with the weights) or "equal" (an unweighted
#: mean, DP-FedAvg's clipped updates).
SECAGG_WEIGHTINGS = ("examples", "equal")

#: The node policy's caps a param may be bound by. ``max_*`` caps refuse a
#: larger value, ``min_*`` caps a smaller one (:mod:`fedpath.runtime.guard`).
CAPS = ("max_upload_ratio", "min_stats_noise", "max_tokens", "max_dp_clip")


class WireError(FedpathError, ValueError):
    """A wire declaration that is missing or contradicts itself."""


@dataclass(frozen=True)
class Wire:
    """The wire facts of one algorithm.

    Parameters
    ----------
    sends
        What its clients send up besides scalars, in a hospital's words (the
        node's refusals and log lines quote it).
    stages
        Stage name -> kind (:data:`KINDS`) of what that stage's reply carries.
    secagg
        ``None``: SecAgg+ cannot carry it; else how the secure sum weights each
        upload (:data:`SECAGG_WEIGHTINGS`). Only an algorithm whose one stage
        is ``fit`` uploading one group of weights that its server half only
        averages qualifies.
    dp_clip
        The node clips every ``fit`` reply to ``algorithm.params.clip``
        (client-level DP; the params then also carry ``noise_multiplier``).
    caps
        Param name -> the node policy cap (:data:`CAPS`) that bounds it, e.g.
        ``{"upload_ratio": "max_upload_ratio"}``.
    """

    sends: str
    stages: Mapping[str, str]
    secagg: str | None = None
    dp_clip: bool = False
    caps: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.sends or not self.stages:
            raise WireError("a Wire names what is sent and at least one stage")
        bad = {s: k for s, k in self.stages.items() if k not in KINDS}
        if bad:
            raise WireError(f"stage kinds {bad}: expected one of {list(KINDS)}")
        if self.secagg is not None and self.secagg not in SECAGG_WEIGHTINGS:
            raise WireError(
                f"secagg={self.secagg!r}: expected None or one of "
                f"{list(SECAGG_WEIGHTINGS)}"
            )
        if (self.secagg is not None or self.dp_clip) and dict(self.stages) != {
            "fit": WEIGHTS
        }:
            raise WireError(
                "secagg and dp_clip apply to one 'fit' stage that uploads weights, "
                f"not to stages {dict(self.stages)}"
            )
        unknown = sorted(set(self.caps.values()) - set(CAPS))
        if unknown:
            raise WireError(f"caps {unknown}: expected caps among {list(CAPS)}")

    @property
    def private(self) -> bool:
        """No stage uploads raw data (the node serves it without an opt-in)."""
        return RAW not in self.stages.values()

    def to_json(self) -> dict[str, Any]:
        """The facts as ``catalog.json`` records them."""
        return {
            "sends": self.sends,
            "stages": dict(self.stages),
            "secagg": self.secagg,
            "dp_clip": self.dp_clip,
            "caps": dict(self.caps),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Wire:
        return cls(**raw)


def declared(name: str) -> Wire | None:
    """The wire facts of algorithm ``name`` (None: not registered, or registered
    without facts by a plugin that bypassed :func:`register_algorithm`).

    Answers from the catalog while the plugins are not loaded (no PyTorch).
    """
    if name not in ALGORITHMS:
        return None
    facts = ALGORITHMS.facts(name)
    return None if facts is None else Wire.from_json(facts)


def declaring(pred: Callable[[Wire], bool]) -> list[str]:
    """The registered algorithms whose facts satisfy ``pred``, sorted (for
    messages that say which ones would be served)."""
    out = []
    for name in ALGORITHMS.names():
        wire = declared(name)
        if wire is not None and pred(wire):
            out.append(name)
    return out


def describe(name: str, unknown: str) -> str:
    """What ``name`` sends (``unknown`` when it declares nothing)."""
    wire = declared(name)
    return unknown if wire is None else wire.sends
