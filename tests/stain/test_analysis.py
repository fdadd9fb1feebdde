from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fedpath.cli import main
from fedpath.config import load_config
from fedpath.runtime.experiment import load_dataset
from fedpath.stain.analysis import analyse, channel_values, write_report
from tests.conftest import tiny_overrides


def test_analysis_numbers_match_scipy_and_report_is_written(tmp_path: Path) -> None:
    ds = load_dataset(load_config(None, tiny_overrides(tmp_path)).data)
    rows, samples = analyse(ds, "g", images=20, pixels=5000)
    assert [r.domain for r in rows] == ds.domains
    for r in rows:
        v = samples[r.domain]
        assert v.size == r.pixels == 5000 and r.images == 20
        assert r.skewness == pytest.approx(stats.skew(v))
        assert r.excess_kurtosis == pytest.approx(stats.kurtosis(v))  # Fisher
        assert np.isfinite([r.image_skewness_mean, r.image_kurtosis_mean]).all()
    # the hospitals differ in shape, not only in mean and spread
    skews = [r.skewness for r in rows]
    assert max(skews) - min(skews) > 0.3
    png, table = write_report(rows, samples, tmp_path, "t", "g")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    read = list(csv.DictReader(table.open()))
    assert [r["domain"] for r in read] == ds.domains
    assert float(read[0]["skewness"]) == pytest.approx(rows[0].skewness, rel=1e-4)


def test_channels_and_cli(tmp_path: Path) -> None:
    import torch

    x = torch.rand(2, 3, 8, 8)
    gray = channel_values(x, "gray")
    torch.testing.assert_close(
        gray, (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).flatten(1)
    )
    for ch in ("r", "L", "H", "E"):
        assert channel_values(x, ch).shape == (2, 64)
    with pytest.raises(ValueError, match="channel must be one of"):
        channel_values(x, "Q")
    over = [o for o in tiny_overrides(tmp_path) if o.startswith("data.")]
    assert main(["stain-report", *over, "--out", str(tmp_path), "--images", "8"]) == 0
    assert (tmp_path / "stain_distribution.png").is_file()
