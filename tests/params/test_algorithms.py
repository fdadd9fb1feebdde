"""The image algorithms' params: field constraints and cross-field rules fail at
construction naming the ``algorithm.params`` key; derived layouts follow the
chosen statistics."""

from __future__ import annotations

import pytest

from fedpath.params.algorithms import (
    DPFedAvgParams,
    FedADParams,
    FedAlignParams,
    FedStainParams,
)
from fedpath.schema import ConfigError


def test_field_constraints_name_the_key() -> None:
    with pytest.raises(ConfigError, match="'algorithm.params.clip': expected"):
        DPFedAvgParams(clip=0.0)
    with pytest.raises(ConfigError, match="'algorithm.params.upload_ratio'"):
        FedStainParams(upload_ratio=1.5)


def test_fedstain_cross_field_rules() -> None:
    with pytest.raises(ConfigError, match="'moments' or 'skew_kurt' when mixstyle"):
        FedStainParams(mixstyle_mode="paper", statistics="mean_std")
    with pytest.raises(ConfigError, match="'moments' or 'mean_std' when randstain"):
        FedStainParams(randstain_reading="paper", statistics="skew_kurt")
    with pytest.raises(ConfigError, match="null .unset. when mixstyle_level"):
        FedStainParams(mixstyle_layers=[0])
    with pytest.raises(ConfigError, match="distinct encoder stage indices"):
        FedStainParams(mixstyle_level="features", mixstyle_layers=[1, 1])


def test_fedstain_layouts() -> None:
    # the paper's S_i, K_i by default (issue 39); all four moments on request
    assert FedStainParams().stat_layout() == {"skew_kurt": (3, 2)}
    assert FedStainParams(statistics="moments").stat_layout() == {"moments": (3, 4)}
    assert FedStainParams(statistics="mean_std").stat_layout() == {"mean_std": (3, 2)}
    assert FedStainParams().feature_layers() == ()
    assert FedStainParams(mixstyle_level="features").feature_layers() == (0, 1)
    assert FedAlignParams().stats_noise == 0.0  # a FedCCRL params: same caps


def test_fedad_checks_the_atsa_bounds() -> None:
    FedADParams()
    with pytest.raises(ConfigError):
        FedADParams(lambda_min=2.0, lambda_max=1.0)
