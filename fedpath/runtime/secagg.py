"""Secure aggregation (SecAgg+) for the weight-averaging algorithms: the settings.

Bonawitz et al., "Practical Secure Aggregation for Privacy-Preserving Machine
Learning" (CCS 2017) and Bell et al., "Secure Single-Server Aggregation with
(Poly)Logarithmic Overhead" (CCS 2020, SecAgg+), as implemented by Flower 1.42's
``SecAggPlusWorkflow`` and ``secaggplus_mod``. The coordinator learns the sum of
the clients' quantized, weighted uploads and nothing else about any one of them;
the protocol and its message flow are :mod:`fedpath.runtime.flower.secagg`.

Which algorithms it can carry, and how it weights each upload, is what each
algorithm declares (``Wire.secagg``, :mod:`fedpath.wire`). This module imports
neither Flower nor PyTorch: the node guard (:mod:`fedpath.runtime.guard`) and
``fedpath flower run`` check settings with it.

Quantization (Flower's, per client k with example count n_k): the weight
a_k = n_k / W (W: ``secagg-max-weight``) is itself quantized to
dq_k = round(a_k Q) / Q, every entry x of the upload becomes
stochastic_round((dq_k x + C) Q / (2C)), an integer in [0, Q]
(C: ``secagg-clipping-range``, Q: ``secagg-quantization-range``), and the masked
sum is taken modulo M (``secagg-modulus-range``). The coordinator divides the
unmasked sum by D = sum_k dq_k, so the result is the dq-weighted mean, with an
error per entry of at most :func:`error_bound`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fedpath.config import ConfigError
from fedpath.wire import declared, declaring, describe

if TYPE_CHECKING:
    from fedpath.config import ExperimentConfig

MODES = ("none", "secaggplus")

#: Run-config keys (``[tool.flwr.app.config]``) and their defaults.
RC_MODE = "secure-aggregation"
RC_SHARES = "secagg-num-shares"
RC_THRESHOLD = "secagg-reconstruction-threshold"
RC_CLIPPING = "secagg-clipping-range"
RC_QUANTIZATION = "secagg-quantization-range"
RC_MODULUS = "secagg-modulus-range"
RC_MAX_WEIGHT = "secagg-max-weight"


@dataclass(frozen=True)
class SecAggSettings:
    """SecAgg+ parameters of a Flower run (``secure-aggregation = "secaggplus"``).

    ``num_shares``: a float in (0, 1] is the share of the round's clients each
    client's secrets are split among (1.0: all of them), an int >= 3 a count;
    ``reconstruction_threshold``: shares needed to rebuild a secret, as a share
    of ``num_shares`` (float) or a count (int, at least 2): a round survives
    dropouts as long as every client keeps that many live neighbours, and the
    coordinator must collude with ``threshold - 1`` clients to unmask anyone.
    ``clipping_range`` (C), ``quantization_range`` (Q), ``modulus_range`` (M):
    module docstring. ``max_weight`` (W): the largest example count a client may
    upload; 0 (the default) sets it to the largest training split of the
    coordinator's client roster, so dq_k <= 1 and D >= 1.
    """

    num_shares: float | int = 1.0
    reconstruction_threshold: float | int = 0.67
    clipping_range: float = 8.0
    quantization_range: int = 2**22
    modulus_range: int = 2**32
    max_weight: float = 0.0

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> SecAggSettings | None:
        """The settings of run config ``rc`` (None: secure aggregation is off);
        errors name the run-config key."""
        mode = rc.get(RC_MODE, "none") or "none"
        if mode not in MODES:
            raise ConfigError(
                f"Flower run config {RC_MODE!r}: expected one of {list(MODES)}, "
                f"got {mode!r}"
            )
        if mode == "none":
            return None
        d = cls()
        out = cls(
            num_shares=_share(_number(rc, RC_SHARES, d.num_shares)),
            reconstruction_threshold=_share(
                _number(rc, RC_THRESHOLD, d.reconstruction_threshold)
            ),
            clipping_range=float(_number(rc, RC_CLIPPING, d.clipping_range)),
            quantization_range=_integer(rc, RC_QUANTIZATION, d.quantization_range),
            modulus_range=_integer(rc, RC_MODULUS, d.modulus_range),
            max_weight=float(_number(rc, RC_MAX_WEIGHT, d.max_weight)),
        )
        out.check()
        return out

    def check(self) -> None:
        """Refuse values Flower's workflow would refuse or overflow with."""
        s, t = self.num_shares, self.reconstruction_threshold
        if isinstance(s, float) and not 0 < s <= 1:
            raise _bad(RC_SHARES, "a share of the clients in (0, 1] or a count >= 3", s)
        if isinstance(s, int) and s < 3:
            raise _bad(RC_SHARES, "a share of the clients in (0, 1] or a count >= 3", s)
        if isinstance(t, float) and not 0 < t <= 1:
            raise _bad(RC_THRESHOLD, "a share of num-shares in (0, 1] or a count", t)
        if isinstance(t, int) and (t < 2 or (isinstance(s, int) and t >= s)):
            raise _bad(RC_THRESHOLD, f"a count in [2, {RC_SHARES})", t)
        if self.clipping_range <= 0:
            raise _bad(RC_CLIPPING, "> 0", self.clipping_range)
        if self.quantization_range < 2:
            raise _bad(RC_QUANTIZATION, "an integer >= 2", self.quantization_range)
        m = self.modulus_range
        if m & (m - 1) or m <= self.quantization_range or m > 2**32:
            raise _bad(
                RC_MODULUS,
                f"a power of 2 above {RC_QUANTIZATION} "
                f"({self.quantization_range}) and at most 2**32",
                m,
            )
        if self.max_weight < 0:
            raise _bad(RC_MAX_WEIGHT, ">= 0 (0: the largest client)", self.max_weight)

    def check_clients(self, clients: int) -> None:
        """Refuse a round whose modular sum could wrap around."""
        if clients * self.quantization_range >= self.modulus_range:
            raise ConfigError(
                f"Flower run config {RC_MODULUS!r}: {clients} clients x "
                f"{RC_QUANTIZATION}={self.quantization_range} reach the modulus "
                f"{self.modulus_range}; the sum would wrap around (lower "
                f"{RC_QUANTIZATION})"
            )


def error_bound(
    counts: Sequence[float],
    max_weight: float,
    clipping_range: float,
    quantization_range: int,
    max_abs: float | None = None,
) -> float:
    """Largest difference, per entry, between SecAgg+'s aggregate and the plain
    example-weighted mean of the same uploads (float32 entries).

    With m clients of counts n_k, W = ``max_weight``, Q and C as above,
    dq_k = round(n_k Q / W) / Q and D = sum_k dq_k:

    - stochastic rounding moves each client's integer by less than one step of
      2C/Q, so the unmasked sum is off by less than m 2C/Q, and the mean by
      less than 2 m C / (Q D);
    - the weights are dq_k instead of n_k / W (|dq_k - n_k / W| <= 1/(2Q)),
      which moves a mean of entries bounded by C by at most m C / (Q D);
    - both results are rounded to float32 (at most 2**-23 of the largest
      magnitude ``max_abs``, C if not given, between them).

    Total: 3 m C / (Q D) + 2**-23 max_abs. For equal counts (D = m when W is
    the largest count) and the defaults C = 8, Q = 2**22: 5.7e-6 + 9.5e-7.
    For equal weights (DP-FedAvg) pass counts of 1 and ``max_weight`` 1.
    """
    m = len(counts)
    q = quantization_range
    d = sum(round(n * q / max_weight) / q for n in counts)
    if m == 0 or d <= 0:
        raise ValueError("error_bound: no client with a positive weight")
    c = clipping_range
    return 3 * m * c / (q * d) + 2.0**-23 * (c if max_abs is None else max_abs)


def carried() -> list[str]:
    """The algorithms whose fit stage SecAgg+ can carry (they declare how their
    uploads are weighted, ``Wire.secagg``), sorted."""
    return declaring(lambda wire: wire.secagg is not None)


def check_algorithm(cfg: ExperimentConfig, where: str = RC_MODE) -> str:
    """The weighting of ``cfg``'s algorithm under SecAgg+ (its declared
    ``Wire.secagg``: "examples" or "equal"); a ConfigError naming ``where`` (the
    run-config key) for algorithms it cannot carry."""
    name = cfg.algorithm.name
    wire = declared(name)
    if wire is None or wire.secagg is None:
        what = describe(name, "something other than one group of weights")
        raise ConfigError(
            f"Flower run config {where!r}: 'secaggplus' sums the weights of the "
            f"weight-averaging algorithms ({', '.join(carried())}); "
            f"algorithm {name!r} uploads {what}, which a sum cannot carry; run it "
            f'with {where} = "none"'
        )
    params = cfg.algorithm.params or {}
    if params.get("bn_buffers") == "pooled":
        raise ConfigError(
            f"Flower run config {where!r}: algorithm.params.bn_buffers='pooled' "
            "needs every client's own BatchNorm moments, which secure aggregation "
            "hides; use bn_buffers=average"
        )
    return wire.secagg


def _number(rc: Mapping[str, Any], key: str, default: float | int) -> float | int:
    value = rc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(key, "a number", value)
    return value


def _share(value: float | int) -> float | int:
    """A count given as a float (``3.0`` from the command line) is a count."""
    if isinstance(value, float) and value > 1 and value.is_integer():
        return int(value)
    return value


def _integer(rc: Mapping[str, Any], key: str, default: int) -> int:
    value = rc.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(key, "an integer", value)
    return value


def _bad(key: str, expected: str, got: object) -> ConfigError:
    return ConfigError(f"Flower run config {key!r}: expected {expected}, got {got!r}")


__all__ = [
    "SecAggSettings",
    "carried",
    "check_algorithm",
    "error_bound",
]
