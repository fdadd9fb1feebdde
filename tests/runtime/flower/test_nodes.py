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
    RC_SELF_DECLARED,
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
    s.check_client_ids()  # a registry: nothing to refuse
    with pytest.raises(ConfigError, match="'client-registry': expected a mapping"):
        FlowerSettings.from_run_config({RC_REGISTRY: "- just a list"})
    for bad in ("{a: [1, 2]", "1: key", "h/c0: [k]"):  # bad YAML, an int id, a list
        with pytest.raises(ConfigError, match="'client-registry': expected"):
            FlowerSettings.from_run_config({RC_REGISTRY: bad})


def test_client_ids_need_a_registry_or_the_explicit_opt_out() -> None:
    with pytest.raises(ConfigError, match="no 'client-registry'"):
        FlowerSettings.from_run_config({}).check_client_ids()
    with pytest.raises(ConfigError, match="no 'client-registry'"):
        FlowerSettings().check_client_ids()
    s = FlowerSettings.from_run_config({RC_SELF_DECLARED: True})
    assert s.self_declared and s.registry is None
    s.check_client_ids()
    with pytest.raises(ConfigError, match="'allow-self-declared-ids': expected"):
        FlowerSettings.from_run_config({RC_SELF_DECLARED: "yes"})
