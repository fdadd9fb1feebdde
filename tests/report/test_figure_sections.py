"""The report's figures of one experiment (fedpath.report.figure_sections): the
curves are drawn from the runs, and FedAD's probe figures only where runs
recorded a probe."""

from __future__ import annotations

from pathlib import Path

from fedpath.report.builder import Builder, ReportInfo
from fedpath.report.figure_sections import curves, fedad
from fedpath.report.runs import find_experiments


def test_curves_and_no_probe_figures_for_a_classifier_suite(
    suite_dir: Path, tmp_path: Path
) -> None:
    (exp,) = find_experiments([suite_dir])
    b = Builder(per_domain=5, seed=0, figures=True, info=ReportInfo(tmp_path))
    curves(b, exp)
    assert b.info.figures == ["curves"]
    assert (
        b.body[0].startswith("<h3>per-round curves") and "data:image/png" in b.body[0]
    )
    fedad(b, exp)  # no run holds a probe's ROC or confusion matrix
    assert "probe_roc" not in b.info.figures
    assert not any("probe confusion matrix" in block for block in b.body)
