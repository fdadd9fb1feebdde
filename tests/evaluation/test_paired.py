"""Paired comparisons: formulas against scipy and an independent computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedpath.evaluation.paired import (
    EXACT_MAX,
    MIN_EFFECT,
    bootstrap_ci,
    compare,
    compare_all,
    paired_differences,
    sign_flip_p,
    to_markdown,
    units_for_half_width,
)
from fedpath.evaluation.tables import ResultRow


def _rows(
    method: str, values: dict[tuple[str, int], float], key: str = "acc"
) -> list[ResultRow]:
    return [ResultRow(method, t, s, {key: v}) for (t, s), v in values.items()]


def test_paired_differences_keep_only_units_both_have() -> None:
    a = _rows("a", {("h0", 0): 0.8, ("h0", 1): 0.7, ("h1", 0): float("nan")})
    b = _rows("b", {("h0", 0): 0.6, ("h0", 1): 0.75, ("h1", 0): 0.5, ("h2", 0): 0.1})
    units, d = paired_differences(a + b, "a", "b", "acc")
    assert units == [("h0", 0), ("h0", 1)]
    np.testing.assert_allclose(d, [20.0, -5.0])


def test_paired_differences_name_what_is_missing() -> None:
    rows = _rows("a", {("h0", 0): 0.8}) + _rows("b", {("h1", 0): 0.6})
    with pytest.raises(ValueError, match="'a' .1 units. and the baseline 'b'"):
        paired_differences(rows, "a", "b", "acc")


@pytest.mark.parametrize("seed", range(4))
def test_sign_flip_p_equals_scipy_exact_permutation(seed: int) -> None:
    d = np.random.default_rng(seed).normal(0.5, 1.0, size=7)
    ref = stats.permutation_test(
        (d,), np.mean, permutation_type="samples", n_resamples=np.inf
    ).pvalue
    assert sign_flip_p(d) == pytest.approx(ref, abs=1e-12)


def test_sign_flip_refuses_too_many_units() -> None:
    with pytest.raises(ValueError, match=str(EXACT_MAX)):
        sign_flip_p(np.ones(EXACT_MAX + 1))


def test_bootstrap_ci_matches_scipy_percentile_bootstrap() -> None:
    d = np.random.default_rng(3).normal(2.0, 3.0, size=12)
    lo, hi = bootstrap_ci(d, n_boot=40_000)
    ref = stats.bootstrap(
        (d,), np.mean, method="percentile", n_resamples=40_000, random_state=1
    ).confidence_interval
    assert lo == pytest.approx(ref.low, abs=0.05)
    assert hi == pytest.approx(ref.high, abs=0.05)
    assert bootstrap_ci(d) == bootstrap_ci(d)  # seeded: a rerun prints the same


def test_units_for_half_width_formula() -> None:
    n = units_for_half_width(sd=4.0, half_width=1.0)
    assert 1.959963984540054 * 4.0 / math.sqrt(n) <= 1.0
    assert 1.959963984540054 * 4.0 / math.sqrt(n - 1) > 1.0
    assert units_for_half_width(4.0, 0.0) == 0


def test_clear_difference_is_better_with_wilcoxon_for_many_units() -> None:
    rng = np.random.default_rng(0)
    base = {(f"h{i % 4}", i // 4): 0.6 + 0.01 * rng.normal() for i in range(20)}
    meth = {u: v + 0.05 + 0.01 * rng.normal() for u, v in base.items()}
    c = compare(_rows("m", meth) + _rows("b", base), "m", "b", "acc")
    assert c.verdict == "better"
    assert c.test == "Wilcoxon signed-rank"
    assert c.p_value == pytest.approx(stats.wilcoxon(np.array(c.diffs)).pvalue)
    assert (c.wins, c.losses, c.n) == (20, 0, 20)
    assert c.ci[0] > 0 and c.mean == pytest.approx(np.mean(c.diffs))


def test_worse_and_lower_is_better_metrics() -> None:
    base = {("h0", s): 0.10 for s in range(6)}
    meth = {("h0", s): 0.05 + 0.001 * s for s in range(6)}
    rows = _rows("m", meth, "ece") + _rows("b", base, "ece")
    c = compare(rows, "m", "b", "ece")
    assert c.mean < 0 and c.verdict == "better" and c.wins == 6
    c2 = compare(rows, "b", "m", "ece")
    assert c2.verdict == "worse" and c2.losses == 6


def test_noisy_difference_is_not_separated_and_says_how_many_more() -> None:
    base = {("h0", 0): 0.60, ("h1", 0): 0.70, ("h0", 1): 0.65, ("h1", 1): 0.62}
    meth = {("h0", 0): 0.64, ("h1", 0): 0.66, ("h0", 1): 0.67, ("h1", 1): 0.61}
    c = compare(_rows("m", meth) + _rows("b", base), "m", "b", "acc")
    assert c.verdict.startswith("not separated at this power: the interval is +-")
    sd = float(np.std(c.diffs, ddof=1))
    more = units_for_half_width(sd, max(abs(c.mean), MIN_EFFECT)) - 4
    assert f"about {more} more units would resolve a difference of" in c.verdict
    assert "points [" in c.line() and "sign-flip permutation" in c.line()


def test_one_more_unit_is_said_in_the_singular() -> None:
    # 12 units whose spread (sd 1.80 points) a 13th would bring to +-1 point
    step = 0.018 / math.sqrt(12 / 11)
    base = {(f"h{u % 4}", u // 4): 0.60 for u in range(12)}
    meth = {k: 0.60 + 0.0005 + (step if u % 2 else -step) for u, k in enumerate(base)}
    c = compare(_rows("m", meth) + _rows("b", base), "m", "b", "acc")
    assert units_for_half_width(float(np.std(c.diffs, ddof=1)), MIN_EFFECT) == 13
    assert "; about 1 more unit would resolve a difference of 1.00" in c.verdict


def test_a_difference_inside_a_narrow_interval_says_it_is_small() -> None:
    # 20 units agreeing within a fraction of a point: 1 point is already resolved
    base = {(f"h{i}", 0): 0.60 + 0.01 * i for i in range(20)}
    meth = {
        k: v + (0.001 if i % 2 else -0.002) for i, (k, v) in enumerate(base.items())
    }
    c = compare(_rows("m", meth) + _rows("b", base), "m", "b", "acc")
    assert c.verdict.startswith("not separated at this power: the interval is +-")
    lo, hi = c.ci
    assert c.verdict.endswith(
        f", so any difference is within {max(-lo, hi):.2f} points of 0"
    )
    assert "more units" not in c.verdict


def test_units_that_all_tie_are_within_zero_points_not_minus_zero() -> None:
    base = {(f"h{i}", 0): 0.5 for i in range(6)}
    c = compare(_rows("m", base) + _rows("b", base), "m", "b", "acc")
    assert c.ci == (0.0, 0.0) and c.mean == 0.0
    assert c.verdict.endswith("so any difference is within 0.00 points of 0")


def test_an_interval_off_zero_without_a_significant_test_says_so() -> None:
    # 4 units all below: the bootstrap interval excludes 0, the exact sign-flip
    # test cannot reject with 4 units (its smallest p is 0.125)
    base = {(f"h{i}", 0): 0.60 for i in range(4)}
    meth = {k: v - 0.02 - 0.002 * i for i, (k, v) in enumerate(base.items())}
    c = compare(_rows("m", meth) + _rows("b", base), "m", "b", "acc")
    assert c.ci[1] < 0 and c.p_value >= 0.05
    assert c.verdict.endswith("it excludes 0, but the paired test does not reject "
                              f"with 4 units (p = {c.p_value:.3g})")  # fmt: skip


def test_a_tiny_difference_is_asked_about_one_point_not_itself() -> None:
    # resolving an observed 0.1 points would take thousands of units: the power
    # statement is about MIN_EFFECT (1 point) and says the observed is smaller
    base = {("h0", s): 0.60 + 0.01 * s for s in range(4)}
    meth = {("h0", s): 0.60 + 0.01 * s + (0.03 if s % 2 else -0.028) for s in range(4)}
    c = compare(_rows("m", meth) + _rows("b", base), "m", "b", "acc")
    sd = float(np.std(c.diffs, ddof=1))
    assert abs(c.mean) < 1.0
    more = units_for_half_width(sd, 1.0) - 4
    assert f"about {more} more units would resolve a difference of 1.00" in c.verdict
    assert f"(the observed {abs(c.mean):.2f} is smaller)" in c.verdict


def test_compare_all_and_unknown_baseline() -> None:
    rows = (
        _rows("a", {("h0", 0): 0.5})
        + _rows("b", {("h0", 0): 0.6})
        + _rows("c", {("h0", 0): 0.7})
    )
    assert [c.method for c in compare_all(rows, "b", "acc")] == ["a", "c"]
    with pytest.raises(ValueError, match="baseline 'z' has no runs"):
        compare_all(rows, "z", "acc")


def test_markdown_table_has_a_row_per_method_with_its_interval() -> None:
    rows = _rows("a", {("h0", 0): 0.5, ("h1", 0): 0.55}) + _rows(
        "b", {("h0", 0): 0.6, ("h1", 0): 0.6}
    )
    comps = compare_all(rows, "b", "acc")
    text = to_markdown(comps)
    lines = text.splitlines()
    assert lines[0].startswith("| Method | acc: diff. to b (points) | 95% CI")
    assert lines[2].startswith("| a | -7.50 | [-10.00, -5.00] |")
    assert "| 2 | 0-2 |" in lines[2]
    assert to_markdown([]) == ""


def test_pairs_across_two_environments_are_counted_and_said() -> None:
    from fedpath.evaluation.paired import mixed_environments

    rows = [
        ResultRow("a", "h0", 0, {"m": 0.7}, "torch 2.14.1"),
        ResultRow("b", "h0", 0, {"m": 0.6}, "torch 2.14.1"),
        ResultRow("a", "h1", 0, {"m": 0.8}, "torch 2.14.1"),
        ResultRow("b", "h1", 0, {"m": 0.6}, "torch 2.15.0"),
        ResultRow("a", "h2", 0, {"m": 0.9}, ""),  # recorded none
        ResultRow("b", "h2", 0, {"m": 0.6}, "torch 2.14.1"),
        ResultRow("c", "h2", 0, {"m": 0.6}, "torch 2.15.0"),  # another method
    ]
    units = [("h0", 0), ("h1", 0), ("h2", 0)]
    assert mixed_environments(rows, "a", "b", units) == 2
    c = compare(rows, "a", "b", "m")
    assert c.mixed == 2
    assert c.line().endswith(
        "; 2 of the 3 pairs join runs from different environments (software or "
        "arithmetic), which adds their effect"
    )
    same = compare(rows[:2], "a", "b", "m")
    assert same.mixed == 0 and "environments" not in same.line()
