"""The Flower transport: the round loop's clients are the SuperNodes of a Grid.

The coordinator runs the same round loop as in-process
(:class:`fedpath.runtime.loop.Run`: initial weights, client roster and
sampling, evaluation, ``results.jsonl``, checkpoint and exact resume,
``final.json`` and ``model.fpm``); :class:`FlowerTransport` only moves the
payloads: before each round it maps the roster's clients to the live nodes
(:meth:`FlowerTransport.discover`), and each stage's payloads travel as one
``train`` Message per client to the node that serves it (:mod:`.messenger`);
the replies that arrive within ``reply-timeout`` go to the server half. With
``secure-aggregation = "secaggplus"`` the fit stage goes through SecAgg+
instead (:class:`~.secagg_server.SecureFit`).

Client states live on the nodes (each node's ``context.state``), not in the
run. Training-domain validation: each source node scores the global weights on
its own validation slides (stage ``fedpath.validate``) and sends its
predictions only if its policy shares them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Message
from flwr.serverapp import Grid

from fedpath.algorithms.names import FIT, WEIGHTS
from fedpath.runtime.flower import EVALUATE_STAGE, STAGE_MESSAGE, VALIDATE_STAGE
from fedpath.runtime.flower.messenger import Fold, Messenger
from fedpath.runtime.flower.nodes import FlowerSettings, NodeDirectory, record_bytes
from fedpath.runtime.flower.records import RecordError, records_to_payload
from fedpath.runtime.flower.secagg_server import SecureFit
from fedpath.runtime.loop import Run
from fedpath.runtime.selection import (
    REFUSED,
    VALIDATE_METRICS,
    VALIDATE_PREDICTIONS,
    VALIDATION,
    ValidationPredictions,
)
from fedpath.runtime.transport import Exchanged
from fedpath.types import ArrayDict, Payload
from fedpath.utils.io import append_jsonl

log = logging.getLogger("fedpath")


class FlowerTransport:
    """Reaches a run's clients on the nodes of ``grid`` (module docstring)."""

    keeps_client_states = False

    def __init__(
        self,
        run: Run,
        grid: Grid,
        settings: FlowerSettings,
        directory: NodeDirectory | None = None,
    ) -> None:
        self.run = run
        self.settings = settings
        self.directory = directory or NodeDirectory(
            grid, settings.reply_timeout, settings.registry
        )
        fold = Fold(
            run.seed,
            run.fold.target,
            tuple(run.fold.sources),
            tuple(str(c) for c in run.dataset.classes),
        )
        self.messenger = Messenger(grid, settings, run.log, fold)
        self._waited = False
        self.secure = (
            SecureFit.for_run(run.cfg, run.clients, settings.secagg, self.messenger)
            if settings.secagg is not None
            else None
        )

    # ------------------------------------------------------------------ nodes

    def discover(self) -> dict[str, int]:
        """Map the roster's clients to live nodes (waiting at first for all of them)."""
        roster = set(self.run.by_id)
        deadline = time.monotonic() + (
            0.0 if self._waited else self.settings.wait_nodes
        )
        while True:
            found = self.directory.refresh()
            nodes = {c: n for c, n in found.items() if c in roster}
            contested = sorted(set(self.directory.contested) & (roster - set(nodes)))
            if roster <= set(nodes) or contested or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        if contested:
            # going on would silently leave that hospital out of the run
            claims = "; ".join(
                f"client {c} by nodes {self.directory.contested[c]}" for c in contested
            )
            raise RuntimeError(
                f"the run stops: two or more nodes claim one client id ({claims}), "
                "so none of them is used and the run would go on without that "
                "client; bind client ids to node keys with --registry, or stop the "
                "extra node"
            )
        if not self._waited:
            self._waited = True
            self._first_look(roster, found, nodes)
        self.messenger.nodes = nodes
        return nodes

    def _first_look(
        self, roster: set[str], found: Mapping[str, int], nodes: Mapping[str, int]
    ) -> None:
        """Say which clients have no node, and stop if every node refuses."""
        missing = sorted(roster - set(nodes))
        if not nodes and self.directory.refused:
            reasons = "; ".join(sorted(set(self.directory.refused.values())))
            raise RuntimeError(
                f"no node serves this run: their node policies refuse it: {reasons}"
            )
        if missing:
            log.warning("no node serves clients %s (yet)", missing)
        extra = sorted(set(found) - roster)
        if extra:
            log.info(
                "nodes of clients %s are not in this fold (target %s)",
                extra,
                self.run.fold.target,
            )

    # ------------------------------------------------------------------ stages

    def begin_round(self, rnd: int) -> None:
        if not self._waited:  # the first round of this Flower run
            self._record_identity(rnd)
        self.discover()

    def _record_identity(self, rnd: int) -> None:
        """A ``kind: identity`` line in ``results.jsonl``: how this Flower run
        tells which node serves which client (a registry of node keys, or ids
        the nodes declare, which any node could claim)."""
        registry = self.settings.registry
        record = {
            **self.run.log.labels,
            "kind": "identity",
            "round": rnd,
            "client_ids": "self-declared" if registry is None else "registry",
        }
        append_jsonl(self.run.log.path, record)

    def exchange(
        self, stage: str, rnd: int, messages: Mapping[str, Payload]
    ) -> Exchanged:
        """Send one stage's payloads, collect the replies that arrive in time."""
        if self.secure is not None and stage == FIT:
            return self.secure.exchange(rnd, messages)
        letters = self.messenger.address(stage, rnd, messages)
        out = [
            Message(content, dst_node_id=node, message_type=STAGE_MESSAGE)
            for _, node, content in letters
        ]
        sent = [cid for cid, _, _ in letters]
        wire_down = sum(record_bytes(content) for _, _, content in letters)
        received: dict[str, Payload] = {}

        def read(cid: str, reply: Message) -> str | None:
            try:
                received[cid] = records_to_payload(reply.content)
            except (RecordError, KeyError) as err:
                return f"unreadable reply: {err}"
            return None

        wire_up = 0
        if out:
            got = self.messenger.deliver(rnd, stage, out, sent, read)
            self.messenger.timeouts(rnd, stage, got.missing)
            wire_up = got.wire_up
        ordered = {cid: received[cid] for cid in sorted(received)}
        return ordered, {
            "sent": sent,
            "wire_bytes_up": wire_up,
            "wire_bytes_down": wire_down,
            "failed": len(messages) - len(ordered),
        }

    def client_metrics(self, rnd: int) -> dict[str, Mapping[str, Any]]:
        """``evaluation.protocol: local``: every node evaluates its client's
        deployed model on its own test split (stage :data:`EVALUATE_STAGE`);
        only the metrics come back. A client that fails is left out."""
        server = self.run.server
        messages = {cid: server.evaluate_payload(cid) for cid in self.run.by_id}
        replies, _ = self.exchange(EVALUATE_STAGE, rnd, messages)
        return {cid: reply.scalars for cid, reply in replies.items()}

    # ------------------------------------------------------------------ validation

    def _validate(self, rnd: int, weights: ArrayDict, mode: str) -> dict[str, Payload]:
        """One ``fedpath.validate`` stage to every source client with validation
        slides; their replies (recorded in ``traffic.jsonl`` as any stage's)."""
        selector = self.run.evaluator.selector
        assert selector is not None
        self.discover()
        messages = {
            cid: Payload({WEIGHTS: weights}, {"mode": mode}) for cid in selector.splits
        }
        replies, info = self.exchange(VALIDATE_STAGE, rnd, messages)
        self.run.traffic.record(VALIDATE_STAGE, rnd, messages, replies, info["sent"])
        return replies

    def validation_metrics(
        self, rnd: int, weights: ArrayDict
    ) -> dict[str, Mapping[str, Any]]:
        """Each node's metrics of ``weights`` on its validation slides."""
        replies = self._validate(rnd, weights, VALIDATE_METRICS)
        return {c: r.scalars for c, r in replies.items() if REFUSED not in r.scalars}

    def validation_predictions(self, weights: ArrayDict) -> ValidationPredictions:
        """The validation predictions of the nodes that share them."""
        selector = self.run.evaluator.selector
        assert selector is not None
        rounds = self.run.cfg.train.rounds
        replies = self._validate(rounds, weights, VALIDATE_PREDICTIONS)
        per: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        left_out: dict[str, str] = {}
        for cid in selector.splits:
            reply = replies.get(cid)
            if reply is None:
                left_out[cid] = "no reply (see the run's failure records)"
            elif REFUSED in reply.scalars:
                left_out[cid] = str(reply.scalars[REFUSED])
            else:
                got = reply.arrays.get(VALIDATION, {})
                if "labels" not in got or "probs" not in got:
                    left_out[cid] = "reply without validation labels and probs"
                    continue
                per[cid] = (got["labels"], got["probs"])
        if left_out:
            log.warning("validation predictions left out: %s", left_out)
        return ValidationPredictions.pool(list(selector.splits), per, left_out)
