"""ATSA: FedAD's server-side adaptive teacher-student alignment curriculum.

FedAD Section 4.4. After aggregation the server measures the instability of the
global extractor (Eq. 5)

    Delta_{t+1} = ||vec(theta_{t+1}) - vec(theta_t)||_2 / (||vec(theta_t)||_2 + eps)

and moves the alignment weight towards a target that is lambda_min when the model
is unstable and lambda_max when it has settled (Eq. 6)

    lambda_{t+1} = alpha * lambda_t
                   + (1 - alpha) * [lambda_min + (lambda_max - lambda_min)
                                    * exp(-k * Delta_{t+1})]

Algorithm 1 starts from lambda_0 = lambda_min, so the first round always uses
lambda_min. The paper's Table 3 values are not in the text; the defaults here
(lambda in [0.1, 1.0], alpha = 0.8, k = 20) reproduce its Figure 9-11 story:
Delta ~ 0.2 keeps lambda near 0.1, Delta ~ 0.05 gives a target of ~0.43, and
Delta -> 0 drives lambda to lambda_max.

:class:`ATSA` is a small pure object: :meth:`step` folds one Delta in,
:meth:`state` / :meth:`load_state` round-trip it through a checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from fedpath.config import ConfigError


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
    """The Eq. 6 controller; ``value`` is the lambda to send in the next round."""

    lambda_min: float = 0.1
    lambda_max: float = 1.0
    alpha: float = 0.8
    k: float = 20.0
    eps: float = 1e-8
    value: float = field(default=-1.0)
    steps: int = 0
    last_delta: float = float("nan")

    def __post_init__(self) -> None:
        check_atsa_bounds(
            self.lambda_min, self.lambda_max, self.alpha, self.k, self.eps
        )
        if self.value < 0:
            self.value = self.lambda_min  # Algorithm 1, line 3

    def target(self, delta: float) -> float:
        """The bracket of Eq. 6: lambda_min + (lambda_max - lambda_min) e^(-k Delta)."""
        return self.lambda_min + (self.lambda_max - self.lambda_min) * math.exp(
            -self.k * delta
        )

    def step(self, delta: float) -> float:
        """Fold in Delta_{t+1}; return (and store) lambda_{t+1}."""
        if not (math.isfinite(delta) and delta >= 0):
            raise ValueError(
                f"ATSA instability must be a finite number >= 0, got {delta}"
            )
        self.value = self.alpha * self.value + (1 - self.alpha) * self.target(delta)
        self.steps += 1
        self.last_delta = float(delta)
        return self.value

    def state(self) -> dict[str, float | int]:
        return {
            "atsa_lambda": float(self.value),
            "atsa_steps": int(self.steps),
            "atsa_last_delta": float(self.last_delta),
        }

    def load_state(self, state: Mapping[str, object]) -> None:
        self.value = float(state["atsa_lambda"])  # type: ignore[arg-type]
        self.steps = int(state["atsa_steps"])  # type: ignore[call-overload]
        self.last_delta = float(state["atsa_last_delta"])  # type: ignore[arg-type]
