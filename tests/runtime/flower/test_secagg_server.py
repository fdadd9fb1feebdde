"""The coordinator's half of SecAgg+: :mod:`fedpath.runtime.flower.secagg_server`.

Its pieces with fakes of the messenger and the grid (no Flower process); the
whole protocol over a real federation is in ``test_flower_processes_secagg.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common import Code, FitRes, Parameters, Status, ndarrays_to_parameters
from flwr.common.secure_aggregation.secaggplus_constants import (
    RECORD_KEY_CONFIGS,
    Key,
    Stage,
)

from fedpath.config import ConfigError, ExperimentConfig, load_config
from fedpath.data.partition import ClientData
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.flower import META, STAGE_MESSAGE
from fedpath.runtime.flower.messenger import Delivery, Messenger
from fedpath.runtime.flower.nodes import record_bytes
from fedpath.runtime.flower.records import SCALARS, RecordError
from fedpath.runtime.flower.secagg import INDEX, STAGE_PREFIX
from fedpath.runtime.flower.secagg_server import (
    SecureFit,
    _node,
    _SumStrategy,
    _WorkflowGrid,
)
from fedpath.runtime.secagg import SecAggSettings
from fedpath.types import Payload
from tests.conftest import tiny_overrides

# messages built outside a Flower process need a run and node identity
pytestmark = pytest.mark.usefixtures("task_identity")


class FakeMessenger:
    """Records what the workflow's grid sends; every node answers."""

    def __init__(self, replies: dict[int, RecordDict] | None = None) -> None:
        self.grid = object()
        self.replies = replies or {}
        self.sent: list[tuple[str, list[Message], list[str]]] = []
        self.timed_out: list[tuple[str, list[tuple[str, int]]]] = []
        self.nodes = {"c0": 10, "c1": 11}

    def header(self, stage: str, rnd: int, cid: str) -> ConfigRecord:
        return ConfigRecord({"stage": stage, "round": rnd, "client": cid})

    def address(
        self, stage: str, rnd: int, messages: dict[str, Payload]
    ) -> list[tuple[str, int, RecordDict]]:
        return [(c, self.nodes[c], RecordDict()) for c in sorted(messages)]

    def deliver(
        self, rnd: int, stage: str, out: list[Message], clients: list[str], read: Any
    ) -> Delivery:
        self.sent.append((stage, out, clients))
        got = []
        for cid, msg in zip(clients, out, strict=True):
            node = msg.metadata.dst_node_id
            if node in self.replies:
                reply = Message(self.replies[node], reply_to=_stamped(msg))
                read(cid, reply)
                got.append(reply)
        missing = [
            (c, m.metadata.dst_node_id)
            for c, m in zip(clients, out, strict=True)
            if m.metadata.dst_node_id not in self.replies
        ]
        return Delivery(got, {}, missing, 5 * len(got))

    def timeouts(self, rnd: int, stage: str, missing: list[tuple[str, int]]) -> None:
        self.timed_out.append((stage, list(missing)))


def _stamped(msg: Message) -> Message:
    msg.metadata.__dict__["_message_id"] = f"m{msg.metadata.dst_node_id}"
    return msg


def _index(names: list[str], shapes: list[str], dtypes: list[str]) -> ConfigRecord:
    return ConfigRecord({"names": names, "shapes": shapes, "dtypes": dtypes})


def _masked(index: ConfigRecord | None, **scalars: Any) -> RecordDict:
    content = RecordDict({SCALARS: ConfigRecord(scalars)})
    if index is not None:
        content[INDEX] = index
    return content


def _grid(messenger: FakeMessenger, rnd: int = 3) -> _WorkflowGrid:
    contents = {10: RecordDict({"fit": ConfigRecord({"x": 1})}), 11: RecordDict()}
    return _WorkflowGrid(
        cast(Messenger, messenger), rnd, contents, {10: "c0", 11: "c1"}
    )


def test_the_unmasked_mean_gets_the_clients_names_shapes_and_dtypes() -> None:
    grid = _grid(FakeMessenger())
    grid.index = _index(
        ["w", "b", "s"], ["2,3", "3", ""], ["float32", "float16", "int64"]
    )
    agg = [np.arange(6, dtype=np.float64), np.ones(3) / 3, np.array([4.0])]
    out = grid.arrays(agg)
    assert list(out) == ["w", "b", "s"]
    assert out["w"].dtype == np.float32 and out["w"].shape == (2, 3)
    assert np.array_equal(out["w"], np.arange(6).reshape(2, 3))
    assert out["b"].dtype == np.float16 and np.allclose(out["b"], 1 / 3, atol=1e-3)
    assert out["s"].shape == () and out["s"] == 4
    with pytest.raises(RecordError, match="round 3: 2 aggregated arrays for 3"):
        grid.arrays(agg[:2])


def test_every_masked_vector_must_hold_the_same_entries() -> None:
    grid = _grid(FakeMessenger())
    index = _index(["w"], ["2"], ["float32"])
    grid._contribution("c0", _masked(index, num_examples=4, loss=0.5))
    grid._contribution("c1", _masked(_index(["w"], ["2"], ["float32"])))
    assert grid.scalars == {"c0": {"num_examples": 4, "loss": 0.5}, "c1": {}}
    with pytest.raises(RecordError, match="client c1's masked vector does not hold"):
        grid._contribution("c1", _masked(_index(["v"], ["2"], ["float32"])))
    with pytest.raises(RecordError, match="round 3: client c0"):
        grid._contribution("c0", _masked(None))


def _protocol_message(node: int, stage: str) -> Message:
    configs = ConfigRecord({Key.STAGE: stage})
    return Message(
        RecordDict({RECORD_KEY_CONFIGS: configs}),
        dst_node_id=node,
        message_type="query",
    )


def test_the_masked_vectors_stage_sends_the_fit_content_and_reads_replies() -> None:
    index = _index(["w"], ["1"], ["float32"])
    messenger = FakeMessenger({10: _masked(index, num_examples=2)})
    grid = _grid(messenger)
    stage = Stage.COLLECT_MASKED_VECTORS
    got = grid.send_and_receive([_protocol_message(n, stage) for n in (10, 11)])
    ((name, out, clients),) = messenger.sent
    assert name == "fit" and clients == ["c0", "c1"]
    assert [m.metadata.message_type for m in out] == [STAGE_MESSAGE] * 2
    assert dict(out[0].content.config_records["fit"]) == {"x": 1}  # fedpath's own
    assert out[0].content.config_records[RECORD_KEY_CONFIGS][Key.STAGE] == stage
    assert grid.down == sum(record_bytes(m.content) for m in out)
    assert len(got) == 1 and grid.received[stage] == got and grid.up == 5
    assert grid.scalars == {"c0": {"num_examples": 2}}  # the contributors
    assert messenger.timed_out == [("fit", [("c1", 11)])]


def test_the_other_stages_send_a_fedpath_header_only() -> None:
    messenger = FakeMessenger({10: RecordDict(), 11: RecordDict()})
    grid = _grid(messenger, rnd=2)
    grid.send_and_receive([_protocol_message(n, Stage.SHARE_KEYS) for n in (11, 10)])
    ((name, out, clients),) = messenger.sent
    assert name == STAGE_PREFIX + Stage.SHARE_KEYS and clients == ["c1", "c0"]
    header = out[0].content.config_records[META]
    assert dict(header) == {"stage": name, "round": 2, "client": "c1"}
    assert "fit" not in out[1].content.config_records
    assert grid.scalars == {}  # no masked vectors read in this stage
    assert messenger.timed_out == [(name, [])]


def test_the_stand_in_strategy_selects_the_nodes_and_keeps_the_sum() -> None:
    strategy = _SumStrategy(cast(Any, object()), [4, 9])
    pairs = strategy.configure_fit(1, Parameters([], ""), cast(Any, None))
    assert [p.node_id for p, _ in pairs] == [4, 9]
    assert all(ins.parameters.tensors == [] for _, ins in pairs)
    strategy.aggregate_fit(1, [], [])
    assert strategy.aggregate is None  # nothing unmasked: the round halts
    arrays = [np.arange(3.0), np.ones((2, 2))]
    fit = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), 1, {})
    strategy.aggregate_fit(1, [(pairs[0][0], fit)], [])
    assert strategy.aggregate is not None
    assert all(
        np.array_equal(a, b) for a, b in zip(strategy.aggregate, arrays, strict=True)
    )
    assert strategy.configure_evaluate() == [] and strategy.evaluate() is None


def test_timeouts_are_reported_in_node_order() -> None:
    assert sorted([("c2", 30), ("c9", 5)], key=_node) == [("c9", 5), ("c2", 30)]


def _cfg(tmp_path: Path, *extra: str) -> tuple[ExperimentConfig, list[ClientData]]:
    cfg = load_config(None, tiny_overrides(tmp_path, *extra))
    ds = load_dataset(cfg.data)
    sizes = {d: len(ds.split(d, "train")) for d in ds.domains}
    clients = [ClientData(d, d, ds.split(d, "train")) for d in sorted(sizes)]
    return cfg, clients


def test_for_run_sets_the_largest_weight_by_the_algorithm_weighting(
    tmp_path: Path,
) -> None:
    cfg, clients = _cfg(tmp_path)
    m = cast(Messenger, FakeMessenger())
    fit = SecureFit.for_run(cfg, clients, SecAggSettings(), m)
    assert fit.max_weight == max(len(c.train) for c in clients)
    assert fit.rounds == cfg.train.rounds and fit.messenger is m
    fixed = SecureFit.for_run(cfg, clients, SecAggSettings(max_weight=500.0), m)
    assert fixed.max_weight == 500.0
    dp, _ = _cfg(tmp_path, "algorithm.name=dp_fedavg")
    assert SecureFit.for_run(dp, clients, SecAggSettings(), m).max_weight == 1.0


def test_for_run_refuses_what_secagg_cannot_carry(tmp_path: Path) -> None:
    m = cast(Messenger, FakeMessenger())
    cfg, clients = _cfg(tmp_path, "train.clients_per_round=1")
    with pytest.raises(ConfigError, match="at least 2 clients per round.*1 of 3"):
        SecureFit.for_run(cfg, clients, SecAggSettings(), m)
    cfg, clients = _cfg(tmp_path)
    wraps = SecAggSettings(quantization_range=2**31)
    with pytest.raises(ConfigError, match="the sum would wrap around"):
        SecureFit.for_run(cfg, clients, wraps, m)
    moon, _ = _cfg(tmp_path, "algorithm.name=moon")
    with pytest.raises(ConfigError, match="which a sum cannot carry"):
        SecureFit.for_run(moon, clients, SecAggSettings(), m)


def test_a_round_with_one_masked_vector_halts_naming_why(tmp_path: Path) -> None:
    messenger = FakeMessenger()
    fit = SecureFit(cast(Messenger, messenger), SecAggSettings(), 10.0, 2)
    with pytest.raises(RuntimeError, match="halted with 0 of 1 clients' masked"):
        fit.exchange(1, {"c0": Payload({}, {})})
    assert messenger.sent == []  # the workflow never started
