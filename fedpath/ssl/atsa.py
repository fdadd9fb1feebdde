"""ATSA: FedAD's server-side adaptive teacher-student alignment curriculum.

FedAD Section 4.4. After aggregation the server measures the instability of the
global extractor (Eq. 5)

    Delta_{t+1} = ||vec(theta_{t+1}) - vec(theta_t)||_2 / (||vec(theta_t)||_2 + eps)

and moves the alignment weight towards a target that is lambda_min when the model
is unstable and lambda_max when it has settled (Eq. 6)

    lambda_{t+1} = alpha * lambda_t
                   + (1 - alpha) * [lambda_min + (lambda_max - lambda_min)
                                    * exp(-k * D_{t+1})]

Algorithm 1 starts from lambda_0 = lambda_min, so the first round always uses
lambda_min. The paper's Table 3 values are not in the text; the defaults here
(lambda in [0.1, 1.0], alpha = 0.8, k = 20) reproduce its Figure 9-11 story:
Delta ~ 0.2 keeps lambda near 0.1, Delta ~ 0.05 gives a target of ~0.43, and
Delta -> 0 drives lambda to lambda_max.

What D is (``scale``):

* ``"literal"`` (the default: the paper as written): D_t = Delta_t. The
  thresholds then hold only where Delta has the paper's size (~0.2 at the
  start, Figure 9); a smaller model, learning rate or local budget gives a
  smaller Delta (at CPU scale
  0.003-0.025), for which exp(-k Delta) ~ 1 every round: lambda just ramps to
  lambda_max and the "unstable phase" never occurs.
* ``"relative"`` (fedpath's option for models of another scale,
  docs/fidelity/fedad.md): the instability relative to the run's own start,
  expressed in the paper's units,

      Delta_ref,t = mean(Delta_1, ..., Delta_min(t, W))      (W = ``warmup``)
      D_t         = anchor * Delta_t / (Delta_ref,t + eps)    (anchor = 0.2)

  The reference is the mean Delta of the first W rounds (the running mean of the
  rounds so far during those W rounds, frozen after them), and ``anchor`` is the
  paper's initial instability (Figure 9: ~0.195), so D starts at ~0.2 whatever
  the scale, a Delta that has fallen to a quarter of its start is D = 0.05 (the
  paper's "stability achieved"), and a spike back to the starting level pulls the
  target to lambda_min again. Where Delta_ref = anchor (the paper's scale) the two
  modes coincide. The first round's D is ``anchor`` exactly.

A frozen warm-up mean rather than a running maximum: a spike stays a spike
(a running max would absorb it into the reference and make every later round
look more stable), and the reference is a fixed, reportable number.

:class:`ATSA` is a small pure object: :meth:`step` folds one Delta in,
:meth:`state` / :meth:`load_state` round-trip it through a checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from fedpath.config import ConfigError

#: what Eq. 6 is fed: the raw Delta ("literal") or Delta relative to its start
AtsaScale = Literal["relative", "literal"]
SCALES: tuple[str, ...] = ("relative", "literal")


def check_atsa_bounds(
    lambda_min: float,
    lambda_max: float,
    alpha: float,
    k: float,
    eps: float = 1e-8,
    where: str = "algorithm.params",
) -> None:
    """Raise :class:`ConfigError` naming the option if a bound is invalid."""
    for name, value in (("lambda_min", lambda_min), ("lambda_max", lambda_max)):
        if not (math.isfinite(value) and value >= 0):
            raise ConfigError(
                f"config key '{where}.{name}': expected a number >= 0, got {value!r}"
            )
    if lambda_min > lambda_max:
        raise ConfigError(
            f"config key '{where}.lambda_min': lambda_min={lambda_min} is greater "
            f"than '{where}.lambda_max'={lambda_max}; the ATSA bounds are reversed "
            "(Eq. 6 needs lambda_min <= lambda_max)"
        )
    if not (0.0 <= alpha < 1.0):
        raise ConfigError(
            f"config key '{where}.alpha': expected a smoothing factor in [0, 1), "
            f"got {alpha!r}"
        )
    if not (math.isfinite(k) and k >= 0):
        raise ConfigError(f"config key '{where}.k': expected a number >= 0, got {k!r}")
    if not (math.isfinite(eps) and eps > 0):
        raise ConfigError(
            f"config key '{where}.eps': expected a number > 0, got {eps!r}"
        )


def check_atsa_scale(
    scale: str, warmup: int, anchor: float, where: str = "algorithm.params"
) -> None:
    """Raise :class:`ConfigError` naming the option if the scale settings are bad."""
    if scale not in SCALES:
        raise ConfigError(
            f"config key '{where}.atsa_scale': expected one of "
            f"{', '.join(map(repr, SCALES))}, got {scale!r}"
        )
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
        raise ConfigError(
            f"config key '{where}.atsa_warmup': expected an integer >= 1, "
            f"got {warmup!r}"
        )
    if not (math.isfinite(anchor) and anchor > 0):
        raise ConfigError(
            f"config key '{where}.atsa_anchor': expected a number > 0, got {anchor!r}"
        )


def instability(
    new: Mapping[str, np.ndarray],
    old: Mapping[str, np.ndarray],
    keys: Iterable[str],
    eps: float = 1e-8,
) -> float:
    """Eq. 5 over the named entries ``keys`` (float64 accumulation)."""
    num = 0.0
    den = 0.0
    for k in keys:
        a = np.asarray(old[k], dtype=np.float64)
        b = np.asarray(new[k], dtype=np.float64)
        num += float(np.sum((b - a) ** 2))
        den += float(np.sum(a**2))
    return math.sqrt(num) / (math.sqrt(den) + eps)


@dataclass
class ATSA:
    """The Eq. 6 controller; ``value`` is the lambda to send in the next round.

    ``scale``, ``warmup`` and ``anchor`` choose what Eq. 6 is fed (module
    docstring). After each :meth:`step`: ``last_delta`` is the raw Delta,
    ``last_norm`` the D that Eq. 6 used, ``last_target`` its bracket and
    :attr:`reference` Delta_ref (tracked in both modes, used in ``relative``).
    """

    lambda_min: float = 0.1
    lambda_max: float = 1.0
    alpha: float = 0.8
    k: float = 20.0
    eps: float = 1e-8
    scale: AtsaScale = "literal"
    warmup: int = 3
    anchor: float = 0.2
    value: float = field(default=-1.0)
    steps: int = 0
    last_delta: float = float("nan")
    last_norm: float = float("nan")
    last_target: float = float("nan")
    ref_sum: float = 0.0
    ref_count: int = 0

    def __post_init__(self) -> None:
        check_atsa_bounds(
            self.lambda_min, self.lambda_max, self.alpha, self.k, self.eps
        )
        check_atsa_scale(self.scale, self.warmup, self.anchor)
        if self.value < 0:
            self.value = self.lambda_min  # Algorithm 1, line 3

    @property
    def reference(self) -> float:
        """Delta_ref: mean Delta of the first ``warmup`` steps (nan before any)."""
        return self.ref_sum / self.ref_count if self.ref_count else float("nan")

    def target(self, delta: float) -> float:
        """The bracket of Eq. 6: lambda_min + (lambda_max - lambda_min) e^(-k D)."""
        return self.lambda_min + (self.lambda_max - self.lambda_min) * math.exp(
            -self.k * delta
        )

    def normalize(self, delta: float) -> float:
        """D for a raw Delta under the current reference: ``anchor * Delta /
        (Delta_ref + eps)`` in ``relative`` mode, Delta itself in ``literal``."""
        if self.scale == "literal":
            return float(delta)
        return self.anchor * float(delta) / (self.reference + self.eps)

    def step(self, delta: float) -> float:
        """Fold in Delta_{t+1}; return (and store) lambda_{t+1}."""
        if not (math.isfinite(delta) and delta >= 0):
            raise ValueError(
                f"ATSA instability must be a finite number >= 0, got {delta}"
            )
        if self.ref_count < self.warmup:  # the reference includes this round
            self.ref_sum += float(delta)
            self.ref_count += 1
        self.last_norm = self.normalize(delta)
        self.last_target = self.target(self.last_norm)
        self.value = self.alpha * self.value + (1 - self.alpha) * self.last_target
        self.steps += 1
        self.last_delta = float(delta)
        return self.value

    def state(self) -> dict[str, float | int]:
        return {
            "atsa_lambda": float(self.value),
            "atsa_steps": int(self.steps),
            "atsa_last_delta": float(self.last_delta),
            "atsa_ref_sum": float(self.ref_sum),
            "atsa_ref_count": int(self.ref_count),
        }

    def load_state(self, state: Mapping[str, object]) -> None:
        """Restore :meth:`state`. A checkpoint from before the reference existed
        has none: the reference is then re-estimated from the next rounds."""
        self.value = float(state["atsa_lambda"])  # type: ignore[arg-type]
        self.steps = int(state["atsa_steps"])  # type: ignore[call-overload]
        self.last_delta = float(state["atsa_last_delta"])  # type: ignore[arg-type]
        self.ref_sum = float(state.get("atsa_ref_sum", 0.0))  # type: ignore[arg-type]
        self.ref_count = int(state.get("atsa_ref_count", 0))  # type: ignore[call-overload]
