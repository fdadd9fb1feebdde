"""A node finds its client in its own data, split exactly as in-process, and
refuses data that cannot give that split."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flwr")

from fedpath.config import DataConfig
from fedpath.data.base import DomainDataset
from fedpath.data.partition import make_clients
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.flower import node_data
from fedpath.runtime.flower.node_context import NodeError
from fedpath.runtime.flower.node_data import find_client, node_dataset
from tests.flower_helpers import config

SOURCES = ["hospital_0", "hospital_1"]


def test_the_nodes_client_is_the_in_process_split(tmp_path: Path) -> None:
    cfg = config(tmp_path, "partition.clients_per_domain=2")
    dataset = load_dataset(cfg.data)
    expected = {
        c.client_id: c for c in make_clients(dataset, SOURCES, cfg.partition, 0)
    }
    got = find_client(dataset, SOURCES, cfg, 0, "hospital_1/c1")
    assert got.client_id == "hospital_1/c1"
    assert list(got.train.indices) == list(expected["hospital_1/c1"].train.indices)
    with pytest.raises(NodeError, match="hospital_1/c7: not a client of this fold"):
        find_client(dataset, SOURCES, cfg, 0, "hospital_1/c7")
    with pytest.raises(NodeError, match="none of the federation's sources"):
        find_client(dataset, ["elsewhere"], cfg, 0, "elsewhere/c0")
    # a source the node lacks: its position changes the Dirichlet split
    with pytest.raises(NodeError, match="needs every source domain's labels"):
        find_client(dataset, [*SOURCES, "elsewhere"], cfg, 0, "hospital_1/c1")


def test_datasets_are_built_once_per_data_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedpath.runtime.experiment as experiment

    built: list[str] = []

    def counted(data: DataConfig) -> DomainDataset:
        built.append(repr(data))
        return load_dataset(data)

    monkeypatch.setattr(experiment, "load_dataset", counted)
    monkeypatch.setattr(node_data, "_DATASETS", {})
    a, b = config(tmp_path), config(tmp_path, "data.params.image_size=24")
    first = node_dataset(a)
    assert node_dataset(a).classes == first.classes and len(built) == 1
    node_dataset(b)
    node_dataset(a)
    assert len(built) == 2  # two data configs kept (_DATASETS_KEPT)
    node_dataset(config(tmp_path, "data.params.image_size=16"))
    assert len(node_data._DATASETS) == 2 and len(built) == 3
