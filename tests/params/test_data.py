"""The datasets' params: ranges and cross-field rules name the ``data.params``
key."""

from __future__ import annotations

import pytest

from fedpath.params.data import (
    Camelyon17Params,
    ClamBagsParams,
    FileDatasetParams,
    SyntheticBagsParams,
)
from fedpath.schema import ConfigError


def test_bag_counts_and_file_datasets() -> None:
    with pytest.raises(ConfigError, match="min_patches <= max_patches"):
        SyntheticBagsParams(min_patches=500, max_patches=400)
    with pytest.raises(ConfigError, match="'data.params.image_size'.*\\[16, 1024\\]"):
        FileDatasetParams(image_size=8)
    with pytest.raises(ConfigError, match="'data.params.test_fraction'"):
        Camelyon17Params(test_fraction=1.0)
    assert Camelyon17Params().image_size == 96
    for zoom in (0.5, 9.0, float("nan")):
        with pytest.raises(ConfigError, match=r"'data.params.zoom'.*\[1, 8\]"):
            FileDatasetParams(zoom=zoom)
    assert FileDatasetParams(zoom=2).zoom == 2 and Camelyon17Params().zoom == 1.0
    with pytest.raises(ConfigError, match="'h5' or 'pt'"):
        ClamBagsParams(prefer="zip")
