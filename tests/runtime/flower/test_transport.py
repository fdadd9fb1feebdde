"""The Flower transport's node discovery: :mod:`fedpath.runtime.flower.transport`
(its stages over a grid: tests/runtime/test_flower_loopback.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from fedpath.config import load_config
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.flower.nodes import FlowerSettings
from fedpath.runtime.flower.transport import FlowerTransport
from fedpath.runtime.loop import Run
from tests.conftest import tiny_overrides


class Directory:
    """Nodes that serve fixed clients (the policies that refused, the ids that
    several nodes claimed)."""

    def __init__(
        self,
        found: dict[str, int],
        refused: dict[int, str],
        contested: dict[str, list[int]] | None = None,
    ) -> None:
        self.found, self.refused = found, refused
        self.contested = contested or {}

    def refresh(self) -> dict[str, int]:
        return dict(self.found)


def flower_run(tmp_path: Path, directory: Directory) -> Run:
    cfg = load_config(None, tiny_overrides(tmp_path, "lodo.targets=[hospital_0]"))
    ds = load_dataset(cfg.data)
    settings = FlowerSettings(wait_nodes=0.0)

    def transport(run: Run) -> FlowerTransport:
        return FlowerTransport(run, None, settings, directory)  # type: ignore[arg-type]

    fold = lodo_plan(ds, ["hospital_0"])[0]
    return Run(cfg, ds, fold, 0, tmp_path / "run", transport=transport)


def test_the_roster_is_mapped_to_its_live_nodes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    found = {"hospital_1/c0": 11, "hospital_0/c0": 10}  # the target's node: not ours
    run = flower_run(tmp_path, Directory(found, {}))
    transport = run.transport
    assert isinstance(transport, FlowerTransport)
    assert run.states == {}  # the client states live on the nodes
    with caplog.at_level("INFO", logger="fedpath"):
        nodes = transport.discover()
    assert nodes == {"hospital_1/c0": 11}
    assert transport.messenger.nodes == nodes
    missing = ["hospital_1/c1", "hospital_2/c0", "hospital_2/c1"]
    assert f"no node serves clients {missing} (yet)" in caplog.text
    assert "nodes of clients ['hospital_0/c0'] are not in this fold" in caplog.text


def test_a_run_every_node_refuses_stops_with_their_reasons(tmp_path: Path) -> None:
    run = flower_run(tmp_path, Directory({}, {12: "max_rounds 1 < 2"}))
    assert isinstance(run.transport, FlowerTransport)
    with pytest.raises(RuntimeError, match="node policies refuse it: max_rounds"):
        run.transport.discover()


def test_a_client_id_claimed_by_two_nodes_stops_the_run(tmp_path: Path) -> None:
    """Neither node is used; the run stops rather than go on without that
    client (it used to finish without it, exit 0)."""
    found = {"hospital_1/c0": 11, "hospital_2/c0": 12, "hospital_2/c1": 14}
    contested = {"hospital_1/c1": [13, 15]}
    run = flower_run(tmp_path, Directory(found, {}, contested))
    assert isinstance(run.transport, FlowerTransport)
    with pytest.raises(
        RuntimeError, match=r"the run stops: .*client hospital_1/c1 by nodes \[13, 15\]"
    ):
        run.transport.discover()
    # a contested id that a live node serves already: the later claim was
    # refused, the genuine node goes on
    found["hospital_1/c1"] = 13
    assert run.transport.discover()["hospital_1/c1"] == 13


def test_the_run_records_how_its_client_ids_were_bound(tmp_path: Path) -> None:
    run = flower_run(tmp_path, Directory({}, {}))
    assert isinstance(run.transport, FlowerTransport)
    run.run_dir.mkdir(parents=True)
    run.transport.begin_round(3)  # a resumed run's first round
    run.transport.begin_round(4)  # recorded once per Flower run
    lines = [json.loads(x) for x in (run.run_dir / "results.jsonl").open()]
    assert lines == [
        {**run.labels(), "kind": "identity", "round": 3, "client_ids": "self-declared"}
    ]
