"""``fedpath evaluate``'s report: every metric, undefined ones as n/a, the
bootstrap intervals, per-class rates, the operating point and the confusion
matrix with the class names (the scoring itself: tests/inference)."""

from __future__ import annotations

import io
import math

from rich.console import Console

from fedpath.cli import build_parser
from fedpath.commands.evaluate import _print_metrics


def report(m: dict, classes: list[str], unit: str = "images") -> str:
    buf = io.StringIO()
    _print_metrics(Console(file=buf, width=200), "all", m, classes, unit)
    return buf.getvalue()


METRICS = {
    "n": 5,
    "accuracy": 0.8,
    "balanced_accuracy": 0.75,
    "macro_f1": 0.7,
    "auroc": math.nan,
    "mcc": 0.5,
    "confusion": [[2, 1], [0, 2]],
}


def test_the_report_names_the_classes_and_marks_undefined_metrics() -> None:
    text = report(METRICS, ["normal", "[atypical]"], "slides")
    assert "all: 5 slides" in text
    assert "0.8000" in text and "n/a" in text  # auroc undefined
    assert "rows = true class, columns = predicted class" in text
    assert "[atypical]" in text  # class names are text, not markup
    assert "bootstrap" not in text and "operating point" not in text


def test_the_optional_blocks() -> None:
    m = {
        **METRICS,
        "bootstrap": {
            "level": 0.95,
            "resamples": 100,
            "seed": 3,
            "balanced_accuracy": [0.6, 0.9],
            "auroc": [math.nan, math.nan],
        },
        "temperature": 1.5,
        "per_class": {
            "a": {"n": 3, "sensitivity": 0.6667, "specificity": 1.0},
            "b": {"n": 2, "sensitivity": 1.0, "specificity": math.nan},
        },
        "operating_point": {
            "threshold": 0.3,
            "sensitivity": 1.0,
            "specificity": 0.5,
            "accuracy": 0.8,
            "balanced_accuracy": 0.75,
            "mcc": 0.6,
        },
    }
    text = report(m, ["a", "b"])
    assert "95% bootstrap CI (100 resamples of the images, seed 3)" in text
    assert "balanced_accuracy 0.6000-0.9000, auroc n/a (one class)" in text
    assert "temperature 1.5000" in text
    assert "sensitivity (recall) = TP/(TP+FN)" in text and "0.6667" in text
    assert "operating point p >= 0.3000" in text


def test_options_and_defaults() -> None:
    args = build_parser().parse_args(["evaluate", "m.fpm", "data.csv", "k=v"])
    assert (args.split, args.bootstrap, args.seed) == ("all", 1000, 0)
    assert args.overrides == ["k=v"] and not args.per_domain


def test_expected_line_of_a_damaged_estimate_says_na_instead_of_failing() -> None:
    from fedpath.commands.evaluate import expected_line

    good = {"mean": 0.6, "min": 0.5, "max": 0.7, "hospitals": 4}
    assert expected_line(good, {"balanced_accuracy": 0.75}) == (
        "balanced_accuracy measured here 0.7500; expected at a new site from "
        "leave-one-hospital-out: 0.6000 [0.5000, 0.7000] over 4 hospitals"
    )
    # the header's dict is typed as a dict only: its values may be anything
    bad = expected_line({"mean": "x", "min": None}, {})
    assert "n/a [n/a, n/a] over ? hospitals" in bad


def test_expected_point_puts_the_held_out_hospitals_beside_this_one() -> None:
    from fedpath.commands.evaluate import expected_line, expected_point

    def spread(mean: float, lo: float, hi: float) -> dict[str, float]:
        return {"mean": mean, "min": lo, "max": hi}

    point = {
        "target_sensitivity": 0.9,
        "sensitivity": spread(0.8, 0.7, 0.95),
        "specificity": spread(0.6, 0.5, 0.65),
    }
    # header-like dicts: the operating point is added to them below
    expected: dict[str, object] = {"mean": 0.6, "min": 0.5, "max": 0.7, "hospitals": 4}
    here: dict[str, object] = {"balanced_accuracy": 0.75}
    assert expected_point(expected) == ""  # an estimate without a point
    assert "\n" not in expected_line(expected, here)
    expected["operating_point"] = point
    assert expected_point(expected) == (
        "at the operating point (0.9000 sensitivity on validation): sensitivity "
        "expected 0.8000 [0.7000, 0.9500]; specificity expected 0.6000 "
        "[0.5000, 0.6500]"
    )
    here["operating_point"] = {"sensitivity": 0.85, "specificity": 0.55}
    second = expected_line(expected, here).splitlines()[1]
    assert "sensitivity measured here 0.8500, expected 0.8000" in second
    assert "specificity measured here 0.5500, expected 0.6000" in second
    broken = {"operating_point": {"sensitivity": {"mean": "x"}}}
    assert "n/a sensitivity on validation): sensitivity expected n/a" in (
        expected_point(broken)
    )
