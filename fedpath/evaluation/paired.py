"""Paired comparisons of two methods over (held-out domain, seed) units.

Two methods run on the same folds with the same seeds meet the same held-out
hospital and the same data draw, so the fair question is not whether their
mean ± std intervals overlap but whether the *difference within each unit* is
consistently away from zero (DomainBed and WILDS report it this way). For every
unit present for both methods this module takes ``d = method - baseline``
(percentage points by default) and gives:

- the mean difference with a percentile-bootstrap 95% confidence interval
  (resampling units; seeded, so a rerun prints the same interval);
- a paired test of "no difference": the exact sign-flip permutation test of the
  mean difference when units are few (``n <= EXACT_MAX``, all ``2**n`` sign
  patterns), Wilcoxon's signed-rank test (scipy) otherwise;
- how many units each side wins;
- a verdict in words: ``better`` or ``worse`` when the interval excludes zero
  and the test rejects at ``alpha``, otherwise "not separated at this power",
  with the interval's half-width and about how many more units would resolve a
  difference of a given size (normal approximation: the half-width shrinks as
  ``1.96 * sd / sqrt(n)``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from fedpath.evaluation.tables import LOWER_IS_BETTER, ResultRow

__all__ = [
    "EXACT_MAX",
    "Comparison",
    "bootstrap_ci",
    "compare",
    "compare_all",
    "mixed_environments",
    "paired_differences",
    "sign_flip_p",
    "to_markdown",
    "units_for_half_width",
]

#: up to this many units the permutation test enumerates every sign pattern
EXACT_MAX = 16
#: the smallest difference (points) the power statement is about when none is
#: asked for: resolving an observed 0.03 would take millions of units, which says
#: nothing a reader can use
MIN_EFFECT = 1.0
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Comparison:
    """One method against the baseline on one metric (differences in points)."""

    method: str
    baseline: str
    metric: str
    units: tuple[tuple[str, int], ...]
    diffs: tuple[float, ...]
    mean: float
    ci: tuple[float, float]
    p_value: float
    test: str
    wins: int
    losses: int
    ties: int
    verdict: str
    level: float = 0.95
    #: pairs whose two runs recorded different environments (or only one did):
    #: their difference also holds the environment's effect
    mixed: int = 0

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def half_width(self) -> float:
        return (self.ci[1] - self.ci[0]) / 2

    def line(self) -> str:
        """The comparison as one sentence (the demo's and the table's line)."""
        lo, hi = self.ci
        return (
            f"{self.method} vs {self.baseline} ({self.metric}, {self.n} paired "
            f"units): {self.mean:+.2f} points [{lo:+.2f}, {hi:+.2f}], "
            f"p = {self.p_value:.3g} ({self.test}), wins {self.wins}-{self.losses}"
            f"{f' ({self.ties} ties)' if self.ties else ''}: {self.verdict}"
            f"{self.mixed_note()}"
        )

    def mixed_note(self) -> str:
        """``"; N of the M pairs join two environments"`` when some do."""
        if not self.mixed:
            return ""
        return (
            f"; {self.mixed} of the {self.n} pairs join runs from different "
            "environments (software or arithmetic), which adds their effect"
        )


def paired_differences(
    rows: Iterable[ResultRow],
    method: str,
    baseline: str,
    metric: str,
    scale: float = 100.0,
) -> tuple[list[tuple[str, int]], np.ndarray]:
    """Units ``(target, seed)`` that both methods have, and ``method - baseline``.

    A unit missing for either method, or with a non-finite value, is left out
    (it cannot be paired). Raises ``ValueError`` naming the method when no unit
    pairs.
    """
    values: dict[str, dict[tuple[str, int], float]] = {method: {}, baseline: {}}
    for row in rows:
        if row.method in values:
            v = row.metrics.get(metric)
            if v is not None and math.isfinite(float(v)):
                values[row.method][(row.target, row.seed)] = float(v) * scale
    units = sorted(set(values[method]) & set(values[baseline]))
    if not units:
        raise ValueError(
            f"no (held-out domain, seed) unit has {metric!r} for both {method!r} "
            f"({len(values[method])} units) and the baseline {baseline!r} "
            f"({len(values[baseline])} units)"
        )
    diffs = np.array([values[method][u] - values[baseline][u] for u in units])
    return units, diffs


def mixed_environments(
    rows: Iterable[ResultRow],
    method: str,
    baseline: str,
    units: Sequence[tuple[str, int]],
) -> int:
    """How many of ``units`` pair a run of ``method`` and one of ``baseline``
    whose recorded environments differ (one recorded and one not counts)."""
    env: dict[tuple[str, str, int], str] = {
        (r.method, r.target, r.seed): r.environment
        for r in rows
        if r.method in (method, baseline)
    }
    return sum(env[(method, *u)] != env[(baseline, *u)] for u in units)


def bootstrap_ci(
    diffs: Sequence[float] | np.ndarray,
    level: float = 0.95,
    n_boot: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of the mean of ``diffs`` (units resampled)."""
    d = np.asarray(diffs, dtype=float)
    if d.size == 1:
        return float(d[0]), float(d[0])
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def sign_flip_p(diffs: Sequence[float] | np.ndarray) -> float:
    """Exact two-sided p of the paired permutation (sign-flip) test of the mean.

    Under "no difference" each unit's sign is a fair coin; the p-value is the
    share of the ``2**n`` sign patterns whose mean is at least as far from zero
    as the observed one.
    """
    d = np.asarray(diffs, dtype=float)
    if d.size > EXACT_MAX:
        raise ValueError(f"exact sign flips enumerate at most {EXACT_MAX} units")
    observed = abs(d.mean())
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
    means = np.abs(signs @ d) / d.size
    return float(np.mean(means >= observed - 1e-12 * max(1.0, observed)))


def _paired_test(diffs: np.ndarray) -> tuple[float, str]:
    if not np.any(diffs):
        return 1.0, "no test: every unit's difference is zero"
    if diffs.size <= EXACT_MAX:
        return sign_flip_p(diffs), "sign-flip permutation"
    return float(stats.wilcoxon(diffs).pvalue), "Wilcoxon signed-rank"


def units_for_half_width(sd: float, half_width: float) -> int:
    """Units at which a normal 95% interval of the mean is ``+-half_width``."""
    if half_width <= 0 or not math.isfinite(sd):
        return 0
    return math.ceil((Z95 * sd / half_width) ** 2)


def _verdict(
    d: np.ndarray,
    ci: tuple[float, float],
    p: float,
    alpha: float,
    lower_better: bool,
    effect: float | None,
) -> str:
    lo, hi = ci
    if (lo > 0 or hi < 0) and p < alpha:
        return "better" if (lo > 0) != lower_better else "worse"
    half = (hi - lo) / 2
    observed = abs(float(d.mean()))
    target = abs(effect) if effect else max(observed, MIN_EFFECT)
    sd = float(d.std(ddof=1)) if d.size > 1 else math.nan
    head = f"not separated at this power: the interval is +-{half:.2f} points"
    if not target or not math.isfinite(sd):
        return head
    more = units_for_half_width(sd, target) - d.size
    if more <= 0:  # already resolved: the interval bounds the difference
        if lo > 0 or hi < 0:
            return (
                f"{head}; it excludes 0, but the paired test does not reject with "
                f"{d.size} units (p = {p:.3g})"
            )
        bound = abs(max(-lo, hi))  # abs: no "-0.00" when every unit ties
        return f"{head}, so any difference is within {bound:.2f} points of 0"
    units = "unit" if more == 1 else "units"
    tail = f"; about {more} more {units} would resolve a difference of {target:.2f}"
    if not effect and observed < MIN_EFFECT:
        tail += f" (the observed {observed:.2f} is smaller)"
    return head + tail


def compare(
    rows: Iterable[ResultRow],
    method: str,
    baseline: str,
    metric: str,
    *,
    scale: float = 100.0,
    alpha: float = 0.05,
    effect: float | None = None,
    n_boot: int = 10_000,
    seed: int = 0,
) -> Comparison:
    """``method`` against ``baseline`` on ``metric``, paired over units.

    ``effect``: the difference (points) the power statement is about; default
    the observed mean difference. For metrics in :data:`LOWER_IS_BETTER`
    (``ece``) a negative difference is "better".
    """
    rows = list(rows)
    units, d = paired_differences(rows, method, baseline, metric, scale)
    ci = bootstrap_ci(d, n_boot=n_boot, seed=seed)
    p, test = _paired_test(d)
    lower = metric in LOWER_IS_BETTER
    ahead = d < 0 if lower else d > 0
    behind = d > 0 if lower else d < 0
    return Comparison(
        method=method,
        baseline=baseline,
        metric=metric,
        units=tuple(units),
        diffs=tuple(float(x) for x in d),
        mean=float(d.mean()),
        ci=ci,
        p_value=p,
        test=test,
        wins=int(ahead.sum()),
        losses=int(behind.sum()),
        ties=int((d == 0).sum()),
        verdict=_verdict(d, ci, p, alpha, lower, effect),
        mixed=mixed_environments(rows, method, baseline, units),
    )


def compare_all(
    rows: Sequence[ResultRow],
    baseline: str,
    metric: str,
    *,
    effect: float | None = None,
    scale: float = 100.0,
) -> list[Comparison]:
    """Every other method in ``rows`` against ``baseline``, in first-seen order
    (``effect``, ``scale``: as in :func:`compare`)."""
    methods = list(dict.fromkeys(r.method for r in rows))
    if baseline not in methods:
        raise ValueError(
            f"baseline {baseline!r} has no runs here; methods: {', '.join(methods)}"
        )
    return [
        compare(rows, m, baseline, metric, scale=scale, effect=effect)
        for m in methods
        if m != baseline
    ]


def to_markdown(comparisons: Sequence[Comparison]) -> str:
    """The comparisons as a Markdown table, one row per method."""
    if not comparisons:
        return ""
    first = comparisons[0]
    head = (
        f"| Method | {first.metric}: diff. to {first.baseline} (points) | 95% CI "
        "| p (test) | Units | Wins-losses | Verdict |"
    )
    lines = [head, "|---|---:|---|---|---:|---:|---|"]
    for c in comparisons:
        lines.append(
            f"| {c.method} | {c.mean:+.2f} | [{c.ci[0]:+.2f}, {c.ci[1]:+.2f}] "
            f"| {c.p_value:.3g} ({c.test}) | {c.n} | {c.wins}-{c.losses} "
            f"| {c.verdict} |"
        )
    return "\n".join(lines)
