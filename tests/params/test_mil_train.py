"""The slide-bag algorithms' training params: per-client feature sets are
checked under their full key, and weight averaging refuses per-client
architectures or spaces."""

from __future__ import annotations

import pytest

from fedpath.params.mil_train import (
    FeatureSetParams,
    FedAvgMILParams,
    FedHDParams,
    FedProxMILParams,
    MILTrainParams,
)
from fedpath.schema import ConfigError


def test_a_feature_set_is_a_folder_or_a_projection() -> None:
    assert FeatureSetParams(project=8).project == 8
    with pytest.raises(ConfigError, match="exactly one of root"):
        FeatureSetParams()
    with pytest.raises(ConfigError, match="exactly one of root"):
        FeatureSetParams(root="bags", project=8)


def test_feature_sets_are_checked_under_their_key() -> None:
    p = MILTrainParams(features={"hospital_0": {"project": 4}})
    assert p.feature_sets() == {"hospital_0": FeatureSetParams(project=4)}
    with pytest.raises(
        ConfigError, match=r"'algorithm.params.features.hospital_0.project'"
    ):
        MILTrainParams(features={"hospital_0": {"project": -1}})
    with pytest.raises(ConfigError, match="model_params"):
        MILTrainParams(model_params={"transmil": {"hidden": 8}})


def test_weight_averaging_needs_one_architecture_and_space() -> None:
    with pytest.raises(ConfigError, match="no per-client architectures"):
        FedAvgMILParams(models={"hospital_0": "transmil"})
    with pytest.raises(ConfigError, match="no per-client feature extractors"):
        FedAvgMILParams(features={"hospital_0": {"project": 4}})
    assert FedProxMILParams().mu == 0.01 and FedAvgMILParams().mu == 0.0
    # FedHD federates clients of other extractors by default (issue 39)
    assert FedHDParams().adapt and not FedHDParams(spaces="same").adapt
