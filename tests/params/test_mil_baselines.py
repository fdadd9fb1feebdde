"""The other slide-bag baselines' params: HistoFS averages weights, so without
``spaces: adapt`` it refuses per-client architectures and spaces."""

from __future__ import annotations

import pytest

from fedpath.params.mil_baselines import DESAParams, HistoFSParams
from fedpath.schema import ConfigError


def test_histofs_needs_one_space_unless_it_adapts() -> None:
    with pytest.raises(ConfigError, match="HistoFS averages the MIL weights"):
        HistoFSParams(models={"hospital_0": "transmil"})
    with pytest.raises(ConfigError, match="no per-client feature extractors"):
        HistoFSParams(features={"hospital_0": {"project": 4}})
    adapt = HistoFSParams(spaces="adapt", models={"hospital_0": "transmil"})
    assert adapt.adapt and adapt.models == {"hospital_0": "transmil"}


def test_desa_constraints_name_the_key() -> None:
    assert DESAParams().tokens == 100
    with pytest.raises(ConfigError, match="'algorithm.params.tokens'"):
        DESAParams(tokens=1)
