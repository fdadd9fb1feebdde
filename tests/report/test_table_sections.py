"""The report's tables of one experiment (fedpath.report.table_sections): one per
metric the runs have, rows in the experiment's method order, calibration and F1
folded, and a note where no run has finished."""

from __future__ import annotations

import json
import re
from pathlib import Path

from fedpath.report.builder import Builder, ReportInfo
from fedpath.report.runs import Experiment, find_experiments
from fedpath.report.table_sections import FOLDED_METRICS, TABLE_METRICS, tables


def _builder(tmp_path: Path) -> Builder:
    return Builder(per_domain=5, seed=0, figures=False, info=ReportInfo(tmp_path))


def test_no_finished_run_is_a_note(tmp_path: Path) -> None:
    b = _builder(tmp_path)
    tables(b, Experiment(tmp_path))
    assert b.body == ['<p class="note">No finished run yet: no table.</p>']


def test_one_table_per_metric_in_method_order(suite_dir: Path, tmp_path: Path) -> None:
    (exp,) = find_experiments([suite_dir])
    final = json.loads(next(suite_dir.rglob("final.json")).read_text())
    have = [m for m in TABLE_METRICS if m in final["evaluation"]["target"]]
    b = _builder(tmp_path)
    tables(b, exp)
    html = "".join(b.body)
    shown = re.findall(r'<table class="results" data-metric="([^"]+)"', html)
    assert shown[: len(have)] == have
    for metric in have:
        table = re.search(rf'data-metric="{metric}">(.*?)</table>', html, re.S)
        assert table is not None
        body = table.group(1).split("<tbody>", 1)[1]
        rows = re.findall(r"<tr><th>([^<]+)</th>", body)
        assert rows == exp.methods == ["fedavg", "fedstain"]
        heading = f"{metric}{'' if metric == 'ece' else ' (%)'} at the unseen domain"
        if metric in FOLDED_METRICS:  # folded under a summary, not a heading
            assert f"<details><summary>{heading}</summary>" in html
        else:
            assert f"<h3>{heading}</h3>" in html
    assert b.info.figures == [] and b.info.skipped == []


def test_a_consortium_run_is_tabulated_on_its_validation_slides(
    tmp_path: Path,
) -> None:
    """A consortium run (lodo.targets: none, docs/ship.md) has no unseen domain:
    its tables are the hospitals' validation figures (before: the report
    stopped, no run had target metrics)."""
    from fedpath.config import load_config
    from fedpath.runtime.experiment import run_experiment
    from tests.conftest import tiny_overrides

    cfg = load_config(
        None,
        tiny_overrides(
            tmp_path / "runs",
            "lodo.targets=none",
            "partition.validation=0.3",
            "train.rounds=1",
        ),
    )
    run_experiment(cfg)
    (exp,) = find_experiments([tmp_path / "runs"])
    b = _builder(tmp_path)
    tables(b, exp)
    html = "".join(b.body)
    assert "balanced_accuracy (%) on the hospitals&#x27; validation slides" in html
    assert "(consortium)" in html
