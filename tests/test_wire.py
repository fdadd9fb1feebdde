"""Wire facts: a declaration is checked when it is made, travels through JSON
unchanged, and is answered from the catalog without PyTorch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedpath.wire import Wire, WireError, declared, declaring, describe

ROOT = Path(__file__).resolve().parents[1]


def test_a_declaration_is_checked_when_made() -> None:
    with pytest.raises(WireError, match="stage kinds"):
        Wire("x", {"fit": "gradients"})
    with pytest.raises(WireError, match="at least one stage"):
        Wire("x", {})
    with pytest.raises(WireError, match="secagg='sum'"):
        Wire("x", {"fit": "weights"}, secagg="sum")
    with pytest.raises(WireError, match="one 'fit' stage that uploads weights"):
        Wire("x", {"stats": "statistics", "fit": "weights"}, secagg="examples")
    with pytest.raises(WireError, match="one 'fit' stage"):
        Wire("x", {"fit": "metrics"}, dp_clip=True)
    with pytest.raises(WireError, match=r"caps \['max_cookies'\]"):
        Wire("x", {"fit": "weights"}, caps={"c": "max_cookies"})


def test_json_round_trip_and_privacy() -> None:
    wire = Wire(
        "images", {"upload": "raw data", "fit": "weights"}, caps={"a": "max_tokens"}
    )
    assert Wire.from_json(json.loads(json.dumps(wire.to_json()))) == wire
    assert not wire.private and Wire("w", {"fit": "weights"}).private


def test_lookups_of_the_built_ins() -> None:
    fedavg = declared("fedavg")
    assert fedavg is not None and fedavg.secagg == "examples" and fedavg.private
    assert declared("no_such_algorithm") is None
    assert declaring(lambda w: w.dp_clip) == ["dp_fedavg"]
    assert describe("fedhe", "?") == "per-class mean bag logits"
    assert describe("no_such_algorithm", "?") == "?"


def test_the_guard_decides_without_torch() -> None:
    code = """
import json, sys
from fedpath.runtime.guard import audit_policy
from fedpath.runtime.rules import NodePolicy
from fedpath.runtime.secagg import carried
from fedpath.wire import declared
print(json.dumps({
    "served": NodePolicy().serves("fedstain"),
    "raw": audit_policy("pooled_mil").allow_non_private,
    "carried": carried(),
    "clip": declared("dp_fedavg").dp_clip,
    "torch": "torch" in sys.modules,
}))
"""
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == {
        "served": True,
        "raw": ["pooled_mil"],
        "carried": [
            "dp_fedavg",
            "fedavg",
            "fedavg_mil",
            "fedbn",
            "fedprox",
            "fedprox_mil",
            "strap",
        ],
        "clip": True,
        "torch": False,
    }
