"""The round loop of one run, the same for every runtime.

One :class:`Run` is one leave-one-domain-out fold with one seed. Per round: the
transport finds the clients that can answer -> sample clients -> for each stage
of the algorithm: configure -> the transport delivers the payloads to the client
halves and collects their replies (audited: :mod:`fedpath.runtime.traffic`) ->
aggregate; then the pieces, each with one job: evaluation
(:mod:`fedpath.runtime.evaluator`) -> the round's records
(:mod:`fedpath.runtime.results`) -> checkpoint (:mod:`fedpath.runtime.persistence`)
-> tracking (:mod:`fedpath.runtime.tracking`). At the end: the final evaluation
blocks, the exported models (:mod:`fedpath.runtime.export`) and ``final.json``.

How payloads travel is the :class:`~fedpath.runtime.transport.Transport`'s
business only: in-process (:mod:`fedpath.runtime.inprocess`) or over Flower
(:mod:`fedpath.runtime.flower.transport`). Client halves are created fresh for
every call and their models freed, so 100 clients never means 100 live models;
what a client keeps lives in its small :class:`ClientState`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedpath.algorithms.base import ClientAlgorithm, derive_seed
from fedpath.config import ExperimentConfig
from fedpath.data.base import DomainDataset
from fedpath.data.partition import ClientData, LodoFold, make_clients
from fedpath.runtime import persistence
from fedpath.runtime.context import RunContext
from fedpath.runtime.divergence import check_global, check_replies
from fedpath.runtime.environment import environment
from fedpath.runtime.evaluator import Evaluator
from fedpath.runtime.export import export_clients, export_global
from fedpath.runtime.persistence import Checkpoint, checkpoint_bytes, load_checkpoint
from fedpath.runtime.results import RunLog
from fedpath.runtime.sampling import sample_clients
from fedpath.runtime.tracking import NO_TRACKING, open_tracker
from fedpath.runtime.traffic import TrafficAudit
from fedpath.runtime.transport import Transport
from fedpath.types import ClientState, Payload
from fedpath.utils.io import atomic_write_text
from fedpath.utils.progress import Reporter
from fedpath.version import __version__

log = logging.getLogger("fedpath")


@dataclass
class RoundTimes:
    """Seconds a round spent on each part (its ``kind: timing`` record)."""

    clients: float = 0.0
    server: float = 0.0
    evaluation: float = 0.0
    checkpoint: float = 0.0

    def fields(self) -> dict[str, float]:
        return {
            "client_s": self.clients,
            "server_s": self.server,
            "eval_s": self.evaluation,
            "checkpoint_s": self.checkpoint,
        }


class Run:
    """One fold x seed of an experiment over a transport (module docstring).

    Parameters
    ----------
    transport
        Builds the run's transport from the run (after everything else of it).
    config_hash
        ``cfg.hash()``, when the caller has it already (computed otherwise).
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        dataset: DomainDataset,
        fold: LodoFold,
        seed: int,
        run_dir: Path,
        reporter: Reporter | None = None,
        *,
        transport: Callable[[Run], Transport],
        config_hash: str | None = None,
    ) -> None:
        self.cfg, self.dataset, self.fold, self.seed = cfg, dataset, fold, seed
        self.run_dir = run_dir
        self.reporter = reporter or Reporter()
        self.config_hash = config_hash or cfg.hash()
        self.run_ctx = RunContext.build(cfg, dataset)
        self.task = self.run_ctx.task
        self.clients: list[ClientData] = make_clients(
            dataset, fold.sources, cfg.partition, seed
        )
        self.by_id = {c.client_id: c for c in self.clients}
        self.states: dict[str, ClientState] = {
            c.client_id: ClientState() for c in self.clients
        }
        torch.manual_seed(derive_seed(seed, "init"))
        initial = self.task.initial_model()
        self.server = self.run_ctx.server_half(
            initial_weights={
                k: v.detach().cpu().numpy().copy()
                for k, v in initial.state_dict().items()
            },
            clients=self.clients,
            seed=seed,
        )
        self.evaluator = Evaluator(
            cfg, dataset, fold, seed, self.task, initial, self.clients
        )
        self.log = RunLog(run_dir, self.labels())
        self.traffic = TrafficAudit(run_dir, cfg, getattr(dataset, "image_size", None))
        self.transport = transport(self)
        if not self.transport.keeps_client_states:
            self.states = {}

    def client_half(
        self, cid: str, rnd: int, progress: bool = False
    ) -> ClientAlgorithm[Any]:
        """A fresh client half of ``cid`` for round ``rnd``."""
        on_epoch = self.reporter.epoch if progress else None
        return self.run_ctx.client_half(
            self.by_id[cid], round=rnd, seed=self.seed, on_epoch=on_epoch
        )

    def sample_clients(self, rnd: int) -> list[str]:
        """The clients of round ``rnd`` (:mod:`fedpath.runtime.sampling`)."""
        ids = [c.client_id for c in self.clients]
        return sample_clients(self.cfg.train, ids, self.seed, rnd)

    def labels(self) -> dict[str, Any]:
        """What every record of this run is labelled with."""
        return {
            "method": self.cfg.method,
            "target": self.fold.target,
            "seed": self.seed,
        }

    def label(self) -> str:
        """The run's name in progress lines and logs."""
        return f"{self.cfg.method} -> {self.fold.target} (seed {self.seed})"

    # ------------------------------------------------------------------ rounds

    def run(self, resume: bool = False) -> dict[str, Any]:
        """Run (or continue) all rounds; return the final evaluation record."""
        persistence.open_run_dir(self.run_dir, fresh=not resume)
        start = 1
        if resume:
            done = persistence.finished_record(self.run_dir, self.cfg, self.config_hash)
            if done is not None:
                self.reporter.skip_run(self.label(), self.cfg.train.rounds)
                return done
            start = self._restore() + 1
        atomic_write_text(self.run_dir / "config.yaml", self.cfg.to_yaml())
        # logs the rounds after the checkpoint only (runtime.tracking)
        self.log.tracker = open_tracker(
            self.cfg, self.run_dir, self.labels(), start, self.config_hash
        )
        finished = False
        try:
            rounds = self.cfg.train.rounds
            self.reporter.start_run(self.label(), rounds, done=start - 1)
            final: dict[str, Any] = self.evaluator.last
            for rnd in range(start, rounds + 1):
                final = self.run_round(rnd)
            last = self.server.global_weights()
            record = {
                **self.labels(),
                "round": rounds,
                "fedpath": __version__,
                "environment": environment(),
                "config_hash": self.config_hash,
                "evaluation": self.evaluator.final(final, last, self.transport),
            }
            kept = rounds if self.cfg.runtime.checkpoint else 0  # on a full disk
            with persistence.disk_full(self.run_dir, kept):
                self._finish(record)
            finished = True
        finally:
            self.log.tracker.close(finished)
            self.log.tracker = NO_TRACKING
        self.reporter.end_run()
        return record

    def run_round(self, rnd: int) -> dict[str, Any]:
        """One round: every stage (configure -> clients -> aggregate), then
        evaluation, the round's records and the checkpoint; returns the round's
        evaluation (empty: not an evaluation round)."""
        times = RoundTimes()
        self.transport.begin_round(rnd)
        sampled = self.sample_clients(rnd)
        self.reporter.start_round(rnd, len(sampled) * len(self.server.stages(rnd)))
        fields = self._stages(rnd, sampled, times)
        if self.evaluator.averager is not None:
            self.evaluator.add_round(rnd, self.server.global_weights())
        evaluation: dict[str, Any] = {}
        t0 = time.perf_counter()
        if self.evaluator.due(rnd):
            evaluation = self.evaluate(rnd)
        times.evaluation = time.perf_counter() - t0
        t0 = time.perf_counter()
        results = self.run_dir / persistence.RESULTS
        kept = rnd - 1 if self.cfg.runtime.checkpoint else 0  # on a full disk
        with persistence.disk_full(results, kept):
            self.log.append("round", rnd, fields)
        # the round's records go out before its checkpoint: a crash in between
        # resumes from the previous checkpoint and drops this round's records,
        # so no record of a checkpointed round can be lost
        blob = self._checkpoint_bytes(rnd) if self.cfg.runtime.checkpoint else None
        times.checkpoint = time.perf_counter() - t0
        with persistence.disk_full(results, kept):
            self.log.append("timing", rnd, times.fields())
        if blob is not None:
            with persistence.disk_full(self.run_dir / persistence.CHECKPOINT, kept):
                persistence.write_checkpoint(self.run_dir, blob)
        self.log.tracker.commit(rnd)  # the round is checkpointed: log it, once
        target = evaluation.get("target", {})
        summary = f"acc {target['accuracy']:.3f}" if "accuracy" in target else ""
        log.info("%s round %d done %s", self.label(), rnd, summary)
        self.reporter.end_round(summary)
        return evaluation

    def _stages(
        self, rnd: int, sampled: list[str], times: RoundTimes
    ) -> dict[str, Any]:
        """Every stage of round ``rnd`` over the transport; the round record's
        fields (traffic, the transport's counters, the server's logs)."""
        logs: dict[str, Any] = {}
        extras: dict[str, int] = {}
        up = down = 0
        replies: dict[str, Payload] = {}
        for stage in self.server.stages(rnd):
            t0 = time.perf_counter()
            messages = self.server.configure(stage, rnd, sampled)
            times.server += time.perf_counter() - t0
            t0 = time.perf_counter()
            replies, info = self.transport.exchange(stage, rnd, messages)
            times.clients += time.perf_counter() - t0
            self.traffic.record(stage, rnd, messages, replies, info["sent"])
            down += sum(messages[c].nbytes() for c in info.pop("sent"))
            up += sum(p.nbytes() for p in replies.values())
            for k, v in info.items():
                extras[k] = extras.get(k, 0) + int(v)
            if len(replies) < self.cfg.train.min_replies:
                raise RuntimeError(
                    f"round {rnd} stage {stage!r}: {len(replies)} replies, fewer than "
                    f"train.min_replies={self.cfg.train.min_replies}"
                )
            check_replies(self.cfg.train, stage, rnd, replies)
            t0 = time.perf_counter()
            aggregated = self.server.aggregate(stage, rnd, replies)
            logs.update({f"{stage}/{k}": v for k, v in aggregated.items()})
            times.server += time.perf_counter() - t0
        # before anything of this round is evaluated, recorded or checkpointed
        check_global(self.cfg.train, rnd, self.server.global_weights(), replies)
        return {
            "clients": len(sampled),
            "bytes_up": up,
            "bytes_down": down,
            **extras,
            **logs,
        }

    def evaluate(self, rnd: int) -> dict[str, Any]:
        """Round ``rnd``'s evaluation (its records appended)."""
        weights = self.server.global_weights()
        return self.evaluator.evaluate(rnd, weights, self.transport, self.log)

    # ------------------------------------------------------------------ persistence

    def _checkpoint_bytes(self, rnd: int) -> bytes:
        """The state after round ``rnd``, serialized (written after the records)."""
        ev = self.evaluator
        selected = ev.selector.state() if ev.selector is not None else None
        averaged = ev.averager.state() if ev.averager is not None else None
        ckpt = Checkpoint(
            rnd, self.server.state(), self.states, ev.last, selected, averaged
        )
        return checkpoint_bytes(ckpt, self.config_hash, self.fold.target, self.seed)

    def _restore(self) -> int:
        """Load the checkpoint if any; return the last completed round (0: none)."""
        ckpt = load_checkpoint(self.run_dir, self.config_hash, self.cfg)
        if ckpt is None:
            return 0
        self.server.load_state(ckpt.server)
        self.states = ckpt.clients
        ev = self.evaluator
        ev.last = ckpt.last_eval
        if ev.selector is not None:
            ev.selector.load_state(ckpt.selected)
        if ev.averager is not None:
            ev.averager.load_state(ckpt.averaged)
        return ckpt.round

    def _finish(self, record: dict[str, Any]) -> None:
        """The exported models (``runtime.export_model``), then ``final.json``."""
        if self.cfg.runtime.export_model:
            args = (self.run_dir, self.cfg, self.config_hash, self.fold, self.seed)
            last = self.server.global_weights()
            export_global(*args, self.evaluator, last, record["evaluation"])
            if self.cfg.evaluation.protocol == "local":
                export_clients(
                    *args,
                    self.evaluator,
                    self.server,
                    self.by_id,
                    self.states,
                    self.client_half,
                )
        persistence.save_final(self.run_dir, record)
