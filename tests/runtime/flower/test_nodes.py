"""The coordinator's run settings are checked and name the run-config key (the
node directory itself runs in tests/runtime/test_flower_loopback.py and
tests/runtime/flower/test_identity.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

from fedpath.config import ConfigError
from fedpath.runtime.flower import (
    RC_ON_FAILURE,
    RC_REGISTRY,
    RC_REPLY_TIMEOUT,
    RC_RESUME,
    RC_WAIT_NODES,
)
from fedpath.runtime.flower.nodes import FlowerSettings


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="'on-failure'"):
        FlowerSettings.from_run_config({RC_ON_FAILURE: "retry"})
    with pytest.raises(ConfigError, match="'reply-timeout': expected > 0"):
        FlowerSettings.from_run_config({RC_REPLY_TIMEOUT: 0})
    s = FlowerSettings.from_run_config(
        {RC_RESUME: True, RC_WAIT_NODES: 5, RC_REPLY_TIMEOUT: 1.5}
    )
    assert s.resume and s.wait_nodes == 5.0 and s.reply_timeout == 1.5


def test_the_registry_travels_as_a_yaml_mapping() -> None:
    assert FlowerSettings.from_run_config({}).registry is None
    s = FlowerSettings.from_run_config({RC_REGISTRY: "h/c0: ecdsa-sha2 AAA\n"})
    assert s.registry == {"h/c0": "ecdsa-sha2 AAA"}
    with pytest.raises(ConfigError, match="'client-registry': expected a mapping"):
        FlowerSettings.from_run_config({RC_REGISTRY: "- just a list"})
