"""fedpath report's page (fedpath.report.build): its tables equal final.json, its
figures are drawn, FedAD's and FedHD's sections are there."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from fedpath.report import write_report


def _expected(root: Path, metric: str) -> dict[tuple[str, str], float]:
    """(method, target) -> mean over seeds x 100 of final.json's target metric."""
    vals: dict[tuple[str, str], list[float]] = {}
    for f in root.rglob("final.json"):
        rec = json.loads(f.read_text())
        v = rec["evaluation"]["target"][metric]
        vals.setdefault((rec["method"], rec["target"]), []).append(100 * v)
    return {k: float(np.mean(v)) for k, v in vals.items()}


def _cells(html: str, metric: str) -> dict[tuple[str, str], float]:
    table = re.search(
        rf'<table class="results" data-metric="{metric}">(.*?)</table>', html, re.S
    )
    assert table is not None, f"no {metric} table"
    return {
        (m, c): float(v)
        for m, c, v in re.findall(
            r'data-method="([^"]+)" data-column="([^"]+)" data-mean="([^"]+)"',
            table.group(1),
        )
    }


def test_report_tables_equal_final_json(suite_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    info = write_report([suite_dir], out)
    html = out.read_text()
    for metric in ("balanced_accuracy", "auroc"):
        cells = _cells(html, metric)
        want = _expected(suite_dir, metric)
        for key, value in want.items():
            assert cells[key] == pytest.approx(value, abs=1e-9), key
        for method in ("fedavg", "fedstain"):  # Avg = mean of the per-seed means
            avg = np.mean([want[(method, t)] for t in ("hospital_0", "hospital_1")])
            assert cells[(method, "Avg")] == pytest.approx(avg, abs=1e-9)
    # the best of a column is marked; the worst domain is named
    assert 'class="num best"' in html and "Worst domain" in html
    assert {"curves", "stain", "augment", "tsne", "gradcam"} <= set(info.figures)
    assert not info.skipped, info.skipped
    assert "fedstain" in html and "resolved config of fedstain" in html
    assert "http://" not in html and "https://" not in html  # nothing to fetch


def test_report_of_fedad_and_fedhd_runs(other_dirs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "other.html"
    info = write_report(other_dirs, out)
    html = out.read_text()
    assert "clients x methods" in html  # FedHD's per-client table
    assert re.search(r'data-method="fedhd" data-column="hospital_0/c0"', html)
    assert "ATSA" in html and "fedad" in info.figures  # FedAD's figure
    assert "probe_roc" in info.figures and "probe confusion matrix, fedad" in html
    assert not [s for s in info.skipped if "stain" in s]  # bags: no image figures
