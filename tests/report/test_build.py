"""fedpath report's page (fedpath.report.build): its tables equal final.json, its
figures are drawn, FedAD's and FedHD's sections are there."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fedpath.report import write_report
from tests.report_helpers import expected_means, table_cells


def test_report_tables_equal_final_json(suite_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    info = write_report([suite_dir], out)
    html = out.read_text()
    for metric in ("balanced_accuracy", "auroc"):
        cells = table_cells(html, metric)
        want = expected_means(suite_dir, metric)
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
