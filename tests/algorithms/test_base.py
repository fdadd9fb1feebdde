"""Registering an algorithm: its wire facts are required and checked at
registration, and every registered algorithm's facts are what the catalog
records (the node guard reads them from there without loading PyTorch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from fedpath import catalog
from fedpath.algorithms.base import ALGORITHMS, register_algorithm
from fedpath.algorithms.fedavg import FedAvgServer, WeightsClient
from fedpath.schema import Checked
from fedpath.wire import Wire, WireError


@dataclass(frozen=True)
class KnobParams(Checked):
    config_section = "algorithm.params"

    knob: float = 0.5


def _register(**kwargs: Any) -> None:
    try:
        register_algorithm("toy_base", WeightsClient, FedAvgServer, **kwargs)
    finally:
        ALGORITHMS.unregister("toy_base")


def test_registering_without_wire_facts_fails_at_registration() -> None:
    with pytest.raises(TypeError, match="wire"):
        _register(params=KnobParams)
    with pytest.raises(WireError, match=r"'toy_base': .* must declare what"):
        _register(params=KnobParams, wire={"fit": "weights"})
    assert "toy_base" not in ALGORITHMS


def test_caps_must_bind_params_the_algorithm_has() -> None:
    wire = Wire("weights", {"fit": "weights"}, caps={"tokens": "max_tokens"})
    with pytest.raises(WireError, match=r"caps bind params \['tokens'\]"):
        _register(params=KnobParams, wire=wire)
    with pytest.raises(WireError, match=r"params class None does not have"):
        _register(wire=wire)


def test_registration_records_the_facts_on_the_spec_and_the_entry() -> None:
    wire = Wire("knobs", {"fit": "weights"}, caps={"knob": "max_upload_ratio"})
    spec = register_algorithm(
        "toy_base", WeightsClient, FedAvgServer, KnobParams, wire=wire
    )
    try:
        assert spec.wire is wire
        assert ALGORITHMS.facts("toy_base") == wire.to_json()
        assert ALGORITHMS.get("toy_base") is spec
    finally:
        ALGORITHMS.unregister("toy_base")


def test_every_algorithm_declares_the_facts_the_catalog_records() -> None:
    shipped = catalog.load()["algorithms"]
    entries = ALGORITHMS.entries()
    assert {e.name for e in entries} == set(shipped)
    for e in entries:
        assert e.facts == e.obj.wire.to_json(), e.name
        assert shipped[e.name]["facts"] == e.facts, (
            f"{e.name}: catalog.json is stale (python -m fedpath.catalog --write)"
        )
