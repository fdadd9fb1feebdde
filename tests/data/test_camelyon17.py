"""The Camelyon17-WILDS layout and its official split (fedpath.data.camelyon17)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpath.config import load_config
from fedpath.data.base import DataError
from fedpath.runtime.experiment import load_dataset
from tests.fixtures import write_wilds_tree


def test_camelyon17_layout_and_official_split(tmp_path: Path) -> None:
    base = write_wilds_tree(tmp_path)
    for root in (tmp_path, base):  # the folder or its parent
        ds = load_dataset(
            load_config(None, ["data.name=camelyon17", f"data.root={root}"]).data
        )
        assert ds.domains == [f"hospital_{i}" for i in range(5)]
        assert ds.classes == ["normal", "tumor"]
    x = ds.split("hospital_3", "all").load(np.arange(2))
    assert tuple(x.shape) == (2, 3, 96, 96)
    wilds = load_dataset(
        load_config(
            None,
            ["data.name=camelyon17", f"data.root={base}", "data.params.split=wilds"],
        ).data
    )
    assert len(wilds.split("hospital_0", "test")) == 2  # rows with split == 1
    meta = base / "metadata.csv"
    text = meta.read_text().replace("tumor", "tumour", 1)
    meta.write_text(text)
    with pytest.raises(DataError, match=r"lacks columns \['tumor'\]"):
        load_dataset(
            load_config(None, ["data.name=camelyon17", f"data.root={base}"]).data
        )
