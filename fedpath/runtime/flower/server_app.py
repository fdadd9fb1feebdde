"""The ServerApp: the coordinator runs the server half of an algorithm over a Grid.

:class:`FlowerRun` *is* an :class:`~fedpath.runtime.inprocess.InProcessRun` (same
initial weights, client roster, client sampling, evaluation on the held-out domain,
``results.jsonl``, checkpoint and exact resume, ``final.json`` and ``model.fpm``);
only :meth:`FlowerRun.run_round` differs, because the client halves run on the
SuperNodes: for every stage of ``server.stages(rnd)``, ``server.configure`` gives one
payload per sampled client, each travels as one ``train`` Message to the node that
serves the client, ``grid.send_and_receive`` waits up to ``reply-timeout`` seconds,
and the replies go to ``server.aggregate`` exactly as in-process.

A client that fails (error reply, no reply in time, a reply that is not a payload)
is logged with its node id, recorded in ``results.jsonl`` (``kind: failure``) and
left out of that stage; the round goes on while ``train.min_replies`` replies
remain (``on-failure = "continue"``) or the run stops at the first failure
(``on-failure = "stop"``).

Run-config keys (``[tool.flwr.app.config]``, set by ``fedpath flower run``):
``fedpath-config`` (the resolved experiment YAML), ``resume``, ``reply-timeout``
(seconds per stage), ``wait-nodes`` (seconds to wait at start for a node per
client of the roster), ``on-failure``.

Client state: each node keeps its :class:`~fedpath.types.ClientState` in
``context.state`` for the duration of the Flower run. A coordinator checkpoint
holds the server state only; resuming starts a new Flower run, so a node restores
its client state (FedBN's local normalization layers) only if it keeps it on its
own disk (node config ``state-dir``, :mod:`fedpath.deploy.node_state`); otherwise
that state restarts from the global model, whereas in-process resume restores it.

Secure aggregation (run config ``secure-aggregation = "secaggplus"``): the fit
stage of the weight-averaging algorithms runs through Flower's SecAgg+ workflow
(:mod:`.secagg`); every surviving client's reply is then the unmasked aggregate
with weight 1, so the server half averages exactly that, and a client that
dropped out is missing as from any stage.

Training-domain validation (``partition.validation`` > 0): the validation
slides stay on the nodes. Every evaluation round each source node scores the
global weights on its own validation slides (stage ``fedpath.validate``, metrics
only) and the coordinator selects the round from their mean, as in-process. At
the end the temperature and the operating point are fitted on the validation
predictions (class probabilities and labels) of the nodes whose policy has
``share_validation_predictions: true``; the others are named in the
``calibrated`` block's ``left_out`` (no node shares: no calibration,
``calibration_skipped``). With every node sharing, the run equals the
in-process one exactly.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message
from flwr.serverapp import Grid, ServerApp

from fedpath.algorithms.names import FIT, WEIGHTS
from fedpath.config import ConfigError, ExperimentConfig
from fedpath.data.base import DomainDataset
from fedpath.data.partition import LodoFold
from fedpath.runtime.experiment import load_dataset, plan_runs, run_dir_for
from fedpath.runtime.flower import (
    EVALUATE_STAGE,
    META,
    PROTOCOL,
    STAGE_MESSAGE,
    VALIDATE_STAGE,
)
from fedpath.runtime.flower.client_app import experiment_from_run_config
from fedpath.runtime.flower.nodes import (
    FlowerSettings,
    NodeDirectory,
    record_bytes,
    send_and_receive,
)
from fedpath.runtime.flower.records import (
    RecordError,
    payload_to_records,
    records_to_payload,
)
from fedpath.runtime.flower.secagg_server import SecureFit
from fedpath.runtime.inprocess import RESULTS, InProcessRun
from fedpath.runtime.selection import (
    REFUSED,
    VALIDATE_METRICS,
    VALIDATE_PREDICTIONS,
    VALIDATION,
    ValidationPredictions,
)
from fedpath.tasks import prepare_dataset
from fedpath.types import ArrayDict, Payload
from fedpath.utils.io import append_jsonl
from fedpath.utils.progress import Reporter

log = logging.getLogger("fedpath")


class FlowerRun(InProcessRun):
    """One fold x seed whose client halves run on Flower SuperNodes."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        dataset: DomainDataset,
        fold: LodoFold,
        seed: int,
        run_dir: Path,
        grid: Grid,
        settings: FlowerSettings,
        directory: NodeDirectory | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        super().__init__(cfg, dataset, fold, seed, run_dir, reporter)
        self.grid = grid
        self.settings = settings
        self.directory = directory or NodeDirectory(
            grid, settings.reply_timeout, settings.registry
        )
        self.states = {}  # client states live in each node's context.state
        self.nodes: dict[str, int] = {}
        self._waited = False
        self.secure = self._secure_fit() if settings.secagg is not None else None

    def _secure_fit(self) -> SecureFit:
        """Check that SecAgg+ can carry this run; its driver."""
        from fedpath.runtime.secagg import RC_MAX_WEIGHT, RC_MODE, check_algorithm

        s = self.settings.secagg
        assert s is not None
        weighting = check_algorithm(self.cfg)
        t = self.cfg.train
        n = len(self.clients)
        k = min(n, t.clients_per_round or max(1, round(t.client_fraction * n)))
        if k < 2:
            raise ConfigError(
                f"Flower run config {RC_MODE!r}: SecAgg+ needs at least 2 clients "
                f"per round, this run samples {k} of {n} (train.clients_per_round, "
                "train.client_fraction)"
            )
        s.check_clients(k)
        weight = s.max_weight
        if weighting == "equal":
            weight = 1.0
        elif weight == 0:  # the largest training split of the roster
            weight = float(max(len(c.train) for c in self.clients))
        log.info(
            "secure aggregation: SecAgg+ on the fit stage (clipping range %g, "
            "quantization range %d, modulus %d, %s %g)",
            s.clipping_range,
            s.quantization_range,
            s.modulus_range,
            RC_MAX_WEIGHT,
            weight,
        )
        return SecureFit(self, s, weight)

    # ------------------------------------------------------------------ nodes

    def discover(self) -> dict[str, int]:
        """Map the roster's clients to live nodes (waiting at first for all of them)."""
        roster = set(self.by_id)
        deadline = time.monotonic() + (
            0.0 if self._waited else self.settings.wait_nodes
        )
        while True:
            found = self.directory.refresh()
            nodes = {c: n for c, n in found.items() if c in roster}
            if roster <= set(nodes) or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        if not self._waited:
            self._waited = True
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
                    self.fold.target,
                )
        self.nodes = nodes
        return nodes

    # ------------------------------------------------------------------ rounds

    def begin_round(self, rnd: int) -> None:
        self.discover()

    def exchange(
        self, stage: str, rnd: int, messages: Mapping[str, Payload]
    ) -> tuple[dict[str, Payload], dict[str, Any]]:
        """Send one stage's payloads, collect the replies that arrive in time."""
        if self.secure is not None and stage == FIT:
            return self.secure.exchange(rnd, messages)
        out: list[Message] = []
        sent: list[str] = []
        wire_down = 0
        for cid in sorted(messages):
            node = self.nodes.get(cid)
            if node is None:
                self._failure(rnd, stage, cid, None, "no node serves this client")
                continue
            content = payload_to_records(messages[cid], pack=True)
            content[META] = self._header(stage, rnd, cid)
            wire_down += record_bytes(content)
            out.append(Message(content, dst_node_id=node, message_type=STAGE_MESSAGE))
            sent.append(cid)
        received: dict[str, Payload] = {}
        failed: set[str] = set()
        wire_up = 0
        if out:
            ids, replies = send_and_receive(self.grid, out, self.settings.reply_timeout)
            # attribute replies by the message they answer: an error reply may come
            # from the SuperLink (e.g. for a node that went offline), not the node
            client_of = dict(zip(ids, sent, strict=True))
            for reply in replies:
                cid = client_of.get(reply.metadata.reply_to_message_id, "?")
                node = self.nodes.get(cid)
                if reply.has_error():
                    failed.add(cid)
                    reason = reply.error.reason or f"error code {reply.error.code}"
                    self._failure(rnd, stage, cid, node, reason)
                    continue
                try:
                    wire_up += record_bytes(reply.content)
                    received[cid] = records_to_payload(reply.content)
                except (RecordError, KeyError) as err:
                    failed.add(cid)
                    self._failure(rnd, stage, cid, node, f"unreadable reply: {err}")
        for cid in sent:
            if cid not in received and cid not in failed:
                self._failure(
                    rnd,
                    stage,
                    cid,
                    self.nodes[cid],
                    f"no reply within reply-timeout={self.settings.reply_timeout:g} s",
                )
        ordered = {cid: received[cid] for cid in sorted(received)}
        return ordered, {
            "sent": sent,
            "wire_bytes_up": wire_up,
            "wire_bytes_down": wire_down,
            "failed": len(messages) - len(ordered),
        }

    def client_metrics(self, rnd: int) -> dict[str, Mapping[str, Any]]:
        """``evaluation.protocol: local``: every node evaluates its client's deployed
        model on its own test split (stage :data:`EVALUATE_STAGE`); only the metrics
        come back. A client that fails is logged and missing from the summary."""
        messages = {cid: self.server.evaluate_payload(cid) for cid in self.by_id}
        replies, _ = self.exchange(EVALUATE_STAGE, rnd, messages)
        return {cid: reply.scalars for cid, reply in replies.items()}

    def _validate(self, rnd: int, weights: ArrayDict, mode: str) -> dict[str, Payload]:
        """One ``fedpath.validate`` stage to every source client with validation
        slides; their replies (recorded in ``traffic.jsonl`` as any stage's)."""
        assert self.selector is not None
        self.discover()
        messages = {
            cid: Payload({WEIGHTS: weights}, {"mode": mode})
            for cid in self.selector.splits
        }
        replies, info = self.exchange(VALIDATE_STAGE, rnd, messages)
        self._audit(VALIDATE_STAGE, rnd, messages, replies, info["sent"])
        return replies

    def validation_metrics(
        self, rnd: int, weights: ArrayDict
    ) -> dict[str, Mapping[str, Any]]:
        """Each node's metrics of ``weights`` on its validation slides."""
        replies = self._validate(rnd, weights, VALIDATE_METRICS)
        return {c: r.scalars for c, r in replies.items() if REFUSED not in r.scalars}

    def validation_predictions(self, weights: ArrayDict) -> ValidationPredictions:
        """The validation predictions of the nodes that share them."""
        assert self.selector is not None
        replies = self._validate(self.cfg.train.rounds, weights, VALIDATE_PREDICTIONS)
        per: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        left_out: dict[str, str] = {}
        for cid in self.selector.splits:
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
        return ValidationPredictions.pool(list(self.selector.splits), per, left_out)

    def _header(self, stage: str, rnd: int, cid: str) -> ConfigRecord:
        return ConfigRecord(
            {
                "protocol": PROTOCOL,
                "stage": stage,
                "round": rnd,
                "client": cid,
                "seed": self.seed,
                "target": self.fold.target,
                "sources": list(self.fold.sources),
                "classes": [str(c) for c in self.dataset.classes],
            }
        )

    def _failure(
        self, rnd: int, stage: str, cid: str, node: int | None, reason: str
    ) -> None:
        where = f"node {node}" if node is not None else "no node"
        log.error(
            "round %d stage %r: client %s (%s) failed: %s",
            rnd,
            stage,
            cid,
            where,
            reason,
        )
        append_jsonl(
            self.run_dir / RESULTS,
            {
                **self.labels(),
                "kind": "failure",
                "round": rnd,
                "stage": stage,
                "client": cid,
                "node": node,
                "reason": reason,
            },
        )
        if self.settings.on_failure == "stop":
            raise RuntimeError(
                f"round {rnd} stage {stage!r}: client {cid} ({where}) failed: {reason} "
                "(on-failure=stop; continue later with resume)"
            )


def run_federation(
    grid: Grid,
    cfg: ExperimentConfig,
    settings: FlowerSettings,
    reporter: Reporter | None = None,
) -> list[dict[str, Any]]:
    """Every fold x seed of ``cfg`` over the grid (as ``run_experiment`` in-process)."""
    import torch

    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    dataset = prepare_dataset(cfg, load_dataset(cfg.data), reporter)
    directory = NodeDirectory(grid, settings.reply_timeout, settings.registry)
    records = []
    plan = plan_runs(cfg, dataset)
    if reporter is not None:
        reporter.start_runs(len(plan))
    for fold, seed in plan:
        run = FlowerRun(
            cfg,
            dataset,
            fold,
            seed,
            run_dir_for(cfg, fold.target, seed),
            grid,
            settings,
            directory,
            reporter,
        )
        records.append(run.run(resume=settings.resume))
    return records


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point of ``flwr run``: the experiment in the run config, over the grid."""
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s fedpath: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    settings = FlowerSettings.from_run_config(context.run_config)
    cfg = experiment_from_run_config(context.run_config)
    log.info(
        "experiment %s, algorithm %s, %d round(s); reply-timeout %g s, on-failure %s",
        cfg.name,
        cfg.algorithm.name,
        cfg.train.rounds,
        settings.reply_timeout,
        settings.on_failure,
    )
    for record in run_federation(grid, cfg, settings):
        target = record.get("evaluation", {}).get("target", {})
        log.info(
            "finished %s -> %s seed %s: target accuracy %s",
            record["method"],
            record["target"],
            record["seed"],
            target.get("accuracy"),
        )
