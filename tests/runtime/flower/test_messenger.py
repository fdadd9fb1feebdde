"""The coordinator's messages: :mod:`fedpath.runtime.flower.messenger`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Error, Message, RecordDict

from fedpath.runtime.flower import META, PROTOCOL
from fedpath.runtime.flower.messenger import Fold, Messenger
from fedpath.runtime.flower.nodes import FlowerSettings
from fedpath.runtime.results import RunLog
from fedpath.types import Payload
from fedpath.utils.io import read_jsonl
from tests.flower_helpers import OfflineGrid

FOLD = Fold(7, "hospital_0", ("hospital_1", "hospital_2"), ("a", "b"))


# messages built outside a Flower process need a run and node identity
pytestmark = pytest.mark.usefixtures("task_identity")


class Scripted(OfflineGrid):
    """Each node answers as scripted: ``ok`` (echo), ``error`` or ``silent``."""

    def __init__(self, script: dict[int, str]) -> None:
        self.script = script
        self.replies: dict[str, Message] = {}
        self.pushed: list[Message] = []

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = []
        for i, msg in enumerate(messages):
            msg.metadata.__dict__["_message_id"] = f"m{len(self.pushed)}-{i}"
            self.pushed.append(msg)
            ids.append(msg.metadata.message_id)
            how = self.script[msg.metadata.dst_node_id]
            if how == "ok":
                reply = Message(RecordDict(dict(msg.content.items())), reply_to=msg)
            elif how == "error":
                reply = Message(Error(7, "the node broke"), reply_to=msg)
            else:
                continue
            self.replies[msg.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def get_node_ids(self) -> list[int]:
        return sorted(self.script)


def messenger(tmp_path: Path, script: dict[int, str], **opts: Any) -> Messenger:
    settings = FlowerSettings(**{"reply_timeout": 0.2, **opts})
    m = Messenger(Scripted(script), settings, RunLog(tmp_path, {"seed": 7}), FOLD)
    m.nodes = {"c1": 1, "c2": 2, "c3": 3}
    return m


def test_payloads_go_to_their_clients_nodes_with_the_header(tmp_path: Path) -> None:
    m = messenger(tmp_path, {1: "ok"})
    payloads = {"c9": Payload({}, {"x": 1}), "c1": Payload({}, {"x": 2})}
    ((cid, node, content),) = m.address("fit", 3, payloads)
    assert (cid, node) == ("c1", 1)
    assert dict(content[META]) == {
        "protocol": PROTOCOL,
        "stage": "fit",
        "round": 3,
        "client": "c1",
        "seed": 7,
        "target": "hospital_0",
        "sources": ["hospital_1", "hospital_2"],
        "classes": ["a", "b"],
    }
    # the client without a node is a recorded failure
    (failure,) = read_jsonl(tmp_path / "results.jsonl")
    assert failure["client"] == "c9" and failure["node"] is None
    assert failure["reason"] == "no node serves this client"


def test_errors_unusable_and_missing_replies_are_failures(tmp_path: Path) -> None:
    m = messenger(tmp_path, {1: "ok", 2: "error", 3: "silent"})
    header = RecordDict({META: ConfigRecord({"x": 1})})
    out = [Message(header, dst_node_id=n, message_type="train") for n in (1, 2, 3)]
    got = m.deliver(2, "fit", out, ["c1", "c2", "c3"], lambda cid, reply: None)
    assert sorted(got.replies) == ["c1"]
    assert len(got.all) == 2 and got.wire_up > 0
    assert got.missing == [("c3", 3)]
    m.timeouts(2, "fit", got.missing)
    rows = list(read_jsonl(tmp_path / "results.jsonl"))
    assert [(r["client"], r["node"], r["round"]) for r in rows] == [
        ("c2", 2, 2),
        ("c3", 3, 2),
    ]
    assert rows[0]["reason"] == "the node broke"
    assert rows[1]["reason"] == "no reply within reply-timeout=0.2 s"
    # a reply the caller cannot use is a failure too
    got = m.deliver(3, "fit", out[:1], ["c1"], lambda cid, reply: "unreadable reply")
    assert got.replies == {} and got.missing == []
    assert list(read_jsonl(tmp_path / "results.jsonl"))[-1]["reason"] == (
        "unreadable reply"
    )


def test_on_failure_stop_stops_at_the_first(tmp_path: Path) -> None:
    m = messenger(tmp_path, {}, on_failure="stop")
    with pytest.raises(RuntimeError, match="client c4 .no node. failed"):
        m.address("fit", 1, {"c4": Payload({}, {})})
