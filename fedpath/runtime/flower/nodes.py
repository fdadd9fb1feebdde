"""The coordinator's view of the nodes: run settings, node discovery, message I/O.

:class:`FlowerSettings` are the run-config knobs of a Flower run;
:class:`NodeDirectory` asks every connected node which fedpath client it serves
(the ``hello`` query) and keeps the map client -> node; :func:`send_and_receive`
pushes a stage's messages and pulls the replies with a short poll interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedpath.config import ConfigError
from fedpath.runtime.flower import (
    HELLO_MESSAGE,
    META,
    PROTOCOL,
    RC_ON_FAILURE,
    RC_REPLY_TIMEOUT,
    RC_RESUME,
    RC_WAIT_NODES,
)
from fedpath.runtime.flower.records import RecordError, header_int, header_str

log = logging.getLogger("fedpath")


@dataclass(frozen=True)
class FlowerSettings:
    """How the coordinator talks to the nodes (the Flower run config)."""

    resume: bool = False
    reply_timeout: float = 600.0
    wait_nodes: float = 120.0
    on_failure: Literal["continue", "stop"] = "continue"

    @classmethod
    def from_run_config(cls, rc: Mapping[str, Any]) -> FlowerSettings:
        """Read and check the settings; errors name the run-config key."""

        def number(key: str, default: float) -> float:
            value = rc.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"Flower run config {key!r}: expected seconds")
            if value <= 0:
                raise ConfigError(
                    f"Flower run config {key!r}: expected > 0, got {value}"
                )
            return float(value)

        on_failure = rc.get(RC_ON_FAILURE, "continue")
        if on_failure not in ("continue", "stop"):
            raise ConfigError(
                f"Flower run config {RC_ON_FAILURE!r}: expected 'continue' or 'stop', "
                f"got {on_failure!r}"
            )
        return cls(
            resume=bool(rc.get(RC_RESUME, False)),
            reply_timeout=number(RC_REPLY_TIMEOUT, cls.reply_timeout),
            wait_nodes=number(RC_WAIT_NODES, cls.wait_nodes),
            on_failure=on_failure,
        )


class NodeDirectory:
    """Which node serves which client: asked once per node (``query.hello``)."""

    def __init__(self, grid: Grid, timeout: float) -> None:
        self.grid = grid
        # a hello needs no data or model: a node silent this long is not there
        # (asked again at the next refresh, until the SuperLink drops it)
        self.timeout = min(timeout, 60.0)
        self.client_of: dict[int, str] = {}
        self.unusable: set[int] = set()

    def refresh(self) -> dict[str, int]:
        """Ask new nodes who they are; return client id -> node id of live nodes."""
        live = set(self.grid.get_node_ids())
        new = sorted(live - set(self.client_of) - self.unusable)
        if new:
            messages = [
                Message(
                    RecordDict({META: ConfigRecord({"protocol": PROTOCOL})}),
                    dst_node_id=node,
                    message_type=HELLO_MESSAGE,
                )
                for node in new
            ]
            ids, replies = send_and_receive(self.grid, messages, self.timeout)
            node_of = {
                i: m.metadata.dst_node_id for i, m in zip(ids, messages, strict=True)
            }
            for reply in replies:
                node = node_of.get(
                    reply.metadata.reply_to_message_id, reply.metadata.src_node_id
                )
                if reply.has_error():
                    log.error("node %d cannot serve: %s", node, reply.error.reason)
                    self.unusable.add(node)
                    continue
                try:
                    meta = reply.content.config_records[META]
                    protocol = header_int(meta, "protocol")
                    client = header_str(meta, "client")
                except (KeyError, RecordError) as err:
                    log.error("node %d: unreadable hello reply: %s", node, err)
                    self.unusable.add(node)
                    continue
                if protocol != PROTOCOL:
                    log.error(
                        "node %d speaks fedpath protocol %s (fedpath %s), the "
                        "coordinator %d; ignored",
                        node,
                        protocol,
                        meta.get("fedpath"),
                        PROTOCOL,
                    )
                    self.unusable.add(node)
                    continue
                self.client_of[node] = client
                log.info("node %d serves client %s", node, client)
        out: dict[str, int] = {}
        for node in sorted(live & set(self.client_of)):
            cid = self.client_of[node]
            if cid in out:
                log.error(
                    "nodes %d and %d both serve client %s; using %d",
                    out[cid],
                    node,
                    cid,
                    out[cid],
                )
                continue
            out[cid] = node
        return out


def send_and_receive(
    grid: Grid, messages: list[Message], timeout: float, poll: float = 0.2
) -> tuple[list[str], list[Message]]:
    """``grid.send_and_receive`` with a short poll interval.

    Flower's own waits 3 s between pulls, which adds up to 3 s to every stage;
    here the replies are pulled every ``poll`` seconds (one small HTTP request to
    the SuperLink each time) until all arrived or ``timeout`` passed.
    """
    ids = list(grid.push_messages(messages))
    pending = set(ids)
    deadline = time.monotonic() + timeout
    replies: list[Message] = []
    while pending:
        got = list(grid.pull_messages(pending))
        replies.extend(got)
        pending -= {m.metadata.reply_to_message_id for m in got}
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    return ids, replies


def record_bytes(records: RecordDict) -> int:
    """Bytes of a message's records as Flower counts them (arrays dominate)."""
    return int(sum(r.count_bytes() for r in records.values()))
