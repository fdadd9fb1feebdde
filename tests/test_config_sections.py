"""The sections of an experiment config, checked on their own
(:mod:`fedpath.config_sections`; their rules across sections: tests/test_config.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from fedpath.config import load_config
from fedpath.config_sections import (
    EvalConfig,
    LodoConfig,
    PartitionConfig,
    RuntimeConfig,
    TrainConfig,
)
from fedpath.schema import ConfigError


def test_declared_constraints_name_the_sections_key() -> None:
    assert PartitionConfig().alpha == 0.5
    with pytest.raises(ConfigError, match="'partition.alpha': expected a number > 0"):
        PartitionConfig(alpha=0)
    with pytest.raises(ConfigError, match="'partition.validation'"):
        PartitionConfig(validation=0.5)  # half-open: [0, 0.5)
    with pytest.raises(ConfigError, match="'evaluation.swa_from'"):
        EvalConfig(swa_from=-1)


def test_the_evaluation_sections_own_rules() -> None:
    assert EvalConfig().probe_train == []
    with pytest.raises(ConfigError, match="'evaluation.probe_train': expected"):
        EvalConfig(probe_train=["a"])  # the classifier has no probe to train
    with pytest.raises(ConfigError, match="'evaluation.probe_train': 'a' listed"):
        EvalConfig(protocol="linear_probe", probe_train=["a", "b", "a"])
    on = EvalConfig(protocol="linear_probe", probe_train=["a", "b"])
    on.check_lodo(LodoConfig(targets=["c"]))
    with pytest.raises(ConfigError, match="'evaluation.probe_train'.*'none'"):
        on.check_lodo(LodoConfig(targets="none"))
    EvalConfig(protocol="linear_probe").check_lodo(LodoConfig(targets="none"))


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:0", "cuda:12"])
def test_a_runtime_device_is_cpu_or_a_cuda_device(device: str) -> None:
    assert RuntimeConfig(device=device).device == device


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cuda:-1", "mps"])
def test_other_devices_are_refused(device: str) -> None:
    with pytest.raises(ConfigError, match="'runtime.device': expected 'cpu', 'cuda'"):
        RuntimeConfig(device=device)


def test_the_training_sections_own_rules() -> None:
    with pytest.raises(ConfigError, match="'train.lr_end': expected a number when"):
        TrainConfig(schedule="linear")
    assert TrainConfig(schedule="linear", lr_end=0.0).lr_end == 0.0
    with pytest.raises(ConfigError, match="'train.trainable': expected 'classifier'"):
        TrainConfig(cache_features=True)
    with pytest.raises(ConfigError, match="'train.augment': expected 'none' or"):
        TrainConfig(
            cache_features=True, trainable="classifier", augment="dihedral_jitter"
        )


@pytest.mark.parametrize("backend", ["tensorboard", "mlflow"])
def test_a_missing_package_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == backend else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    path = tmp_path / "cfg.yaml"
    path.write_text(f"runtime:\n  tracking: {backend}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"config key 'runtime.tracking': {backend!r} needs the {backend!r} package, "
        f"which is not installed: pip install 'fedpath[{backend}]' "
        f"(or runtime.tracking=none) (in {path})"
    )
    assert load_config(path, ["runtime.tracking=none"]).runtime.tracking == "none"
