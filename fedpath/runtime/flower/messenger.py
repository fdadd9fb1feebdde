"""The coordinator's messages to the nodes: addressed, headed, sent, and every
failure logged and recorded.

Every message of a run carries a fedpath header (:meth:`Messenger.header`: the
protocol, stage, round, client and the fold) beside its content, and goes to the
node that serves its client. A client whose node is unknown, whose reply is an
error, or who does not reply within ``reply-timeout`` is logged with its node
id and recorded in ``results.jsonl`` (``kind: failure``); the run goes on
(``on-failure = "continue"``) or stops at the first failure (``on-failure =
"stop"``). The plain stages (:mod:`.transport`) and SecAgg+'s fit stage
(:mod:`.secagg_server`) send through the same :class:`Messenger`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedpath.runtime.flower import META, PROTOCOL
from fedpath.runtime.flower.nodes import FlowerSettings, record_bytes, send_and_receive
from fedpath.runtime.flower.records import payload_to_records
from fedpath.runtime.results import RunLog
from fedpath.types import Payload

log = logging.getLogger("fedpath")

#: ``read(client, reply)``: None, or why the reply is not usable (a failure)
Read = Callable[[str, Message], "str | None"]


@dataclass(frozen=True)
class Fold:
    """What every header says about the run: its seed, fold and classes."""

    seed: int
    target: str
    sources: tuple[str, ...]
    classes: tuple[str, ...]


@dataclass
class Delivery:
    """What came back from one send: ``all`` the replies as received, the
    usable ones by client, the ``(client, node)`` that did not answer (in the
    order sent) and the wire bytes of the replies that are not errors."""

    all: list[Message]
    replies: dict[str, Message]
    missing: list[tuple[str, int]]
    wire_up: int


class Messenger:
    """Sends a run's messages over the grid (module docstring).

    ``nodes`` (client -> node id) is the run's current view of the live nodes.
    """

    def __init__(
        self, grid: Grid, settings: FlowerSettings, results: RunLog, fold: Fold
    ) -> None:
        self.grid = grid
        self.settings = settings
        self.results = results
        self.fold = fold
        self.nodes: dict[str, int] = {}

    def header(self, stage: str, rnd: int, cid: str) -> ConfigRecord:
        """The fedpath header of ``cid``'s message of ``stage`` in round ``rnd``."""
        return ConfigRecord(
            {
                "protocol": PROTOCOL,
                "stage": stage,
                "round": rnd,
                "client": cid,
                "seed": self.fold.seed,
                "target": self.fold.target,
                "sources": list(self.fold.sources),
                "classes": list(self.fold.classes),
            }
        )

    def address(
        self, stage: str, rnd: int, messages: Mapping[str, Payload]
    ) -> list[tuple[str, int, RecordDict]]:
        """``(client, node, content)`` of each payload, in client order; a
        client without a node is a failure."""
        out: list[tuple[str, int, RecordDict]] = []
        for cid in sorted(messages):
            node = self.nodes.get(cid)
            if node is None:
                self.failure(rnd, stage, cid, None, "no node serves this client")
                continue
            content = payload_to_records(messages[cid], pack=True)
            content[META] = self.header(stage, rnd, cid)
            out.append((cid, node, content))
        return out

    def deliver(
        self,
        rnd: int,
        stage: str,
        messages: Sequence[Message],
        clients: Sequence[str],
        read: Read,
    ) -> Delivery:
        """Send ``messages`` (to ``clients``, in that order) and wait up to
        ``reply-timeout``. Error replies and the replies ``read`` finds unusable
        are failures; the caller decides about the missing ones
        (:meth:`timeouts`)."""
        ids, got = send_and_receive(
            self.grid, list(messages), self.settings.reply_timeout
        )
        # attribute replies by the message they answer: an error reply may come
        # from the SuperLink (e.g. for a node that went offline), not the node
        sent = [
            (cid, m.metadata.dst_node_id)
            for cid, m in zip(clients, messages, strict=True)
        ]
        target = dict(zip(ids, sent, strict=True))
        answered: set[tuple[str, int]] = set()
        replies: dict[str, Message] = {}
        up = 0
        for reply in got:
            cid, node = target.get(reply.metadata.reply_to_message_id, ("?", -1))
            answered.add((cid, node))
            if reply.has_error():
                reason = reply.error.reason or f"error code {reply.error.code}"
                self.failure(rnd, stage, cid, self.nodes.get(cid, node), reason)
                continue
            up += record_bytes(reply.content)
            problem = read(cid, reply)
            if problem is not None:
                self.failure(rnd, stage, cid, self.nodes.get(cid, node), problem)
                continue
            replies[cid] = reply
        missing = [t for t in sent if t not in answered]
        return Delivery(list(got), replies, missing, up)

    def timeouts(
        self, rnd: int, stage: str, missing: Sequence[tuple[str, int]]
    ) -> None:
        """Each ``(client, node)`` that did not reply in time is a failure."""
        for cid, node in missing:
            self.failure(
                rnd,
                stage,
                cid,
                node,
                f"no reply within reply-timeout={self.settings.reply_timeout:g} s",
            )

    def failure(
        self, rnd: int, stage: str, cid: str, node: int | None, reason: str
    ) -> None:
        """Log and record that ``cid`` failed ``stage``; stop the run if
        ``on-failure = "stop"``."""
        where = f"node {node}" if node is not None else "no node"
        log.error(
            "round %d stage %r: client %s (%s) failed: %s",
            rnd,
            stage,
            cid,
            where,
            reason,
        )
        self.results.failure(rnd, stage, cid, node, reason)
        if self.settings.on_failure == "stop":
            raise RuntimeError(
                f"round {rnd} stage {stage!r}: client {cid} ({where}) failed: {reason} "
                "(on-failure=stop; continue later with resume)"
            )
