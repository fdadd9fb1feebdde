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
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedpath.config import ConfigError
from fedpath.runtime.flower import (
    HELLO_MESSAGE,
    META,
    PROTOCOL,
    RC_ON_FAILURE,
    RC_REGISTRY,
    RC_REPLY_TIMEOUT,
    RC_RESUME,
    RC_SELF_DECLARED,
    RC_WAIT_NODES,
)
from fedpath.runtime.flower.records import RecordError, header_int, header_str
from fedpath.runtime.secagg import SecAggSettings

log = logging.getLogger("fedpath")


@dataclass(frozen=True)
class FlowerSettings:
    """How the coordinator talks to the nodes (the Flower run config)."""

    resume: bool = False
    reply_timeout: float = 600.0
    wait_nodes: float = 120.0
    on_failure: Literal["continue", "stop"] = "continue"
    #: client id -> public key (OpenSSH line) that must sign the node's hello;
    #: None: client ids are self-declared (:mod:`.identity`)
    registry: Mapping[str, str] | None = field(default=None, compare=False)
    #: the run config allows self-declared ids (``allow-self-declared-ids``);
    #: :meth:`check_client_ids` refuses a run with neither this nor a registry
    self_declared: bool = False
    #: SecAgg+ on the fit stage (run config ``secure-aggregation``); None: off
    secagg: SecAggSettings | None = None

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
        registry = _registry(rc)
        self_declared = rc.get(RC_SELF_DECLARED, False)
        if not isinstance(self_declared, bool):
            raise ConfigError(
                f"Flower run config {RC_SELF_DECLARED!r}: expected true or false"
            )
        return cls(
            resume=bool(rc.get(RC_RESUME, False)),
            reply_timeout=number(RC_REPLY_TIMEOUT, cls.reply_timeout),
            wait_nodes=number(RC_WAIT_NODES, cls.wait_nodes),
            on_failure=on_failure,
            registry=registry,
            self_declared=self_declared,
            secagg=SecAggSettings.from_run_config(rc),
        )

    def check_client_ids(self) -> None:
        """Refuse a run whose client ids nothing binds to node keys, unless the
        run config opted in to self-declared ids."""
        if self.registry is None and not self.self_declared:
            raise ConfigError(
                f"Flower run config: no {RC_REGISTRY!r} (client id -> node public "
                "key), so any node could claim any hospital's client id; start the "
                "run with `fedpath flower run --registry clients.yaml`, or set "
                f"{RC_SELF_DECLARED!r} (--allow-self-declared-ids) to accept the "
                "ids the nodes declare"
            )


def _registry(rc: Mapping[str, Any]) -> dict[str, str] | None:
    """The run config's client registry (client id -> OpenSSH public key line),
    None if it has none; a ConfigError naming the key if it is not one."""
    text = rc.get(RC_REGISTRY)
    if not text:
        return None
    where = f"Flower run config {RC_REGISTRY!r}"
    try:
        raw = yaml.safe_load(str(text))
    except yaml.YAMLError:
        raw = None  # the text is keys: say what was expected, not where it broke
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{where}: expected a mapping 'client id: public key'")
    for cid, key in raw.items():
        if not isinstance(cid, str) or not cid or not isinstance(key, str):
            raise ConfigError(
                f"{where}: expected client ids (text) mapped to public keys "
                f"(text), got {type(cid).__name__} -> {type(key).__name__}"
            )
    return dict(raw)


class NodeDirectory:
    """Which node serves which client: asked once per node (``query.hello``).

    A claim is accepted once and kept while its node is live. With a
    ``registry`` (client id -> public key) the node must sign the hello's
    challenge with the key registered for the id it claims; a claim of an id
    that a live node already serves is refused, and two new nodes claiming one
    id in the same round of hellos are both refused (neither can be told
    genuine). Every refusal is logged naming the node and the id.
    """

    def __init__(
        self, grid: Grid, timeout: float, registry: Mapping[str, str] | None = None
    ) -> None:
        self.grid = grid
        # a hello needs no data or model: a node silent this long is not there
        # (asked again at the next refresh, until the SuperLink drops it)
        self.timeout = min(timeout, 60.0)
        self.registry = registry
        self.client_of: dict[int, str] = {}
        self.unusable: set[int] = set()
        #: node -> the reason its node policy gave for refusing this run
        self.refused: dict[int, str] = {}
        #: client id -> the nodes that claimed it at once (none of them is used)
        self.contested: dict[str, list[int]] = {}
        if registry is None:
            log.warning(
                "client ids are self-declared by the nodes "
                "(allow-self-declared-ids): any node may claim any client id; "
                "start runs with --registry to bind each client id to its node's key"
            )

    def refresh(self) -> dict[str, int]:
        """Ask new nodes who they are; return client id -> node id of live nodes."""
        from fedpath.runtime.flower.identity import challenge

        live = set(self.grid.get_node_ids())
        new = sorted(live - set(self.client_of) - self.unusable)
        if new:
            nonces = {node: challenge() for node in new}
            messages = [
                Message(
                    RecordDict(
                        {
                            META: ConfigRecord(
                                {"protocol": PROTOCOL, "challenge": nonces[node]}
                            )
                        }
                    ),
                    dst_node_id=node,
                    message_type=HELLO_MESSAGE,
                )
                for node in new
            ]
            ids, replies = send_and_receive(self.grid, messages, self.timeout)
            node_of = {
                i: m.metadata.dst_node_id for i, m in zip(ids, messages, strict=True)
            }
            claims: dict[int, str] = {}
            for reply in replies:
                node = node_of.get(
                    reply.metadata.reply_to_message_id, reply.metadata.src_node_id
                )
                client = self._claim(node, reply, nonces.get(node, ""))
                if client is None:
                    self.unusable.add(node)
                else:
                    claims[node] = client
            self._accept(claims, live)
        return {
            cid: node for node, cid in sorted(self.client_of.items()) if node in live
        }

    def _claim(self, node: int, reply: Message, nonce: str) -> str | None:
        """The client id a hello reply validly claims, or None (logged)."""
        if reply.has_error():
            reason = reply.error.reason or ""
            log.error("node %d cannot serve: %s", node, reason)
            if "PolicyError" in reason:
                self.refused[node] = reason
            return None
        try:
            meta = reply.content.config_records[META]
            protocol = header_int(meta, "protocol")
            client = header_str(meta, "client")
        except (KeyError, RecordError) as err:
            log.error("node %d: unreadable hello reply: %s", node, err)
            return None
        if protocol != PROTOCOL:
            log.error(
                "node %d speaks fedpath protocol %s (fedpath %s), the "
                "coordinator %d; ignored",
                node,
                protocol,
                meta.get("fedpath"),
                PROTOCOL,
            )
            return None
        if self.registry is not None:
            from fedpath.runtime.flower.identity import verify_hello

            if client not in self.registry:
                log.error(
                    "node %d claims client %s, which the client registry does not "
                    "list; refused",
                    node,
                    client,
                )
                return None
            signature = str(meta.get("signature", ""))
            if not verify_hello(self.registry[client], nonce, client, signature):
                log.error(
                    "node %d claims client %s but did not sign with the key "
                    "registered for it; refused",
                    node,
                    client,
                )
                return None
        return client

    def _accept(self, claims: dict[int, str], live: set[int]) -> None:
        """Record new claims; refuse ids served already or claimed twice."""
        served = {cid: n for n, cid in self.client_of.items() if n in live}
        for node, client in sorted(claims.items()):
            rivals = sorted(n for n, c in claims.items() if c == client and n != node)
            if client in served:
                log.error(
                    "node %d claims client %s, which node %d already serves; refused",
                    node,
                    client,
                    served[client],
                )
                self.unusable.add(node)
            elif rivals:
                log.error(
                    "nodes %s all claim client %s; none is used",
                    [node, *rivals],
                    client,
                )
                self.unusable.add(node)
                self.contested[client] = sorted([node, *rivals])
            else:
                self.client_of[node] = client
                log.info("node %d serves client %s", node, client)


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
    return int(sum(_count_bytes(r) for r in records.values()))


def _count_bytes(record: Any) -> int:
    # Flower 1.42's ConfigRecord.count_bytes fails on an empty list value (the
    # SecAgg+ unmask stage sends one when no client dropped)
    if isinstance(record, ConfigRecord) and any(v == [] for v in record.values()):
        record = ConfigRecord({k: v for k, v in record.items() if v != []})
    return int(record.count_bytes())
