"""What the report tests read back: a page's table cells and final.json's means."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np


def expected_means(root: Path, metric: str) -> dict[tuple[str, str], float]:
    """(method, target) -> mean over seeds x 100 of final.json's target metric."""
    vals: dict[tuple[str, str], list[float]] = {}
    for f in root.rglob("final.json"):
        rec = json.loads(f.read_text())
        v = rec["evaluation"]["target"][metric]
        vals.setdefault((rec["method"], rec["target"]), []).append(100 * v)
    return {k: float(np.mean(v)) for k, v in vals.items()}


def table_cells(html: str, metric: str) -> dict[tuple[str, str], float]:
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
