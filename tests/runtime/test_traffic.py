"""The run's traffic audit: :mod:`fedpath.runtime.traffic`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpath.config import ConfigError, load_config
from fedpath.runtime.traffic import TrafficAudit
from fedpath.types import Payload
from fedpath.utils.io import read_jsonl
from tests.conftest import tiny_overrides


def test_one_line_per_client_with_the_shapes_never_the_values(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path))
    audit = TrafficAudit(tmp_path, cfg, 32)
    down = Payload({"weights": {"w": np.zeros((4, 3), np.float32)}})
    up = Payload({"weights": {"w": np.ones((4, 3), np.float32)}}, {"loss": 0.5})
    # b was sent a message and did not answer; a answered
    audit.record("fit", 2, {"a": down, "b": down}, {"a": up}, ["b", "a"])
    rows = list(read_jsonl(tmp_path / "traffic.jsonl"))
    entry = [["weights", "w", "float32", [4, 3], 48]]
    assert rows == [
        {"round": 2, "stage": "fit", "client": "a", "received": entry, "sent": entry},
        {"round": 2, "stage": "fit", "client": "b", "received": entry, "sent": None},
    ]


def test_an_image_shaped_reply_stops_a_private_algorithm(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path, "algorithm.name=fedavg"))
    audit = TrafficAudit(tmp_path, cfg, 32)
    images = Payload({"pool": {"x": np.zeros((2, 32, 32, 3), np.float32)}})
    with pytest.raises(ConfigError, match="image"):
        audit.record("fit", 1, {}, {"a": images}, [])
    assert not (tmp_path / "traffic.jsonl").exists()
