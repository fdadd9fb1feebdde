"""The one-machine runtime: every client in-process, deterministic, resumable.

One :class:`InProcessRun` is one leave-one-domain-out fold with one seed. Per round:
sample clients -> for each stage of the algorithm: configure -> client halves ->
aggregate -> evaluate the global model on the unseen target (and the sources' test
splits; with ``partition.validation``, the sources' validation slides:
:mod:`fedpath.runtime.selection`) -> append to ``results.jsonl`` -> checkpoint.
Client halves are created fresh for every call and their models freed, so 100
clients never means 100 live models; what a client keeps lives in its small
:class:`ClientState`.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from fedpath import __version__
from fedpath.algorithms.base import ClientAlgorithm, ProtocolError, derive_seed
from fedpath.config import ConfigError, ExperimentConfig
from fedpath.data.base import DomainDataset
from fedpath.data.partition import ClientData, LodoFold, make_clients
from fedpath.runtime.averaging import RoundAverage
from fedpath.runtime.context import RunContext
from fedpath.runtime.evaluate import (
    eval_splits,
    evaluate_classifier,
    evaluate_probe,
    summarize_clients,
)
from fedpath.runtime.persistence import (  # noqa: F401  (re-exported names)
    CHECKPOINT,
    FINAL,
    MODEL,
    RESULTS,
    TRAFFIC,
    Checkpoint,
    ResumeError,
    check_same_config,
    checkpoint_bytes,
    load_checkpoint,
    save_checkpoint,
    save_final,
    write_checkpoint,
)
from fedpath.runtime.selection import (
    Selector,
    ValidationPredictions,
    exported_decision,
    validation_metrics,
    validation_predictions,
)
from fedpath.runtime.tracking import NO_TRACKING, Tracker, open_tracker
from fedpath.types import ArrayDict, ClientState, Payload
from fedpath.utils.io import append_jsonl, atomic_write_text
from fedpath.utils.progress import Reporter

log = logging.getLogger("fedpath")

#: the folder of the clients' own models (``evaluation.protocol: local``)
CLIENT_MODELS = "models"


@dataclass
class RoundTimes:
    clients: float = 0.0
    server: float = 0.0
    evaluation: float = 0.0
    checkpoint: float = 0.0


class InProcessRun:
    """One fold x seed of an experiment, run with every client in this process."""

    #: ``runtime.tracking``'s tracker while :meth:`run` runs (none outside it)
    tracker: Tracker = NO_TRACKING

    def __init__(
        self,
        cfg: ExperimentConfig,
        dataset: DomainDataset,
        fold: LodoFold,
        seed: int,
        run_dir: Path,
        reporter: Reporter | None = None,
    ) -> None:
        self.cfg = cfg
        self.dataset = dataset
        self.fold = fold
        self.seed = seed
        self.run_dir = run_dir
        self.reporter = reporter or Reporter()
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
        initial: nn.Module = self.task.initial_model()
        self.eval_model = initial
        self.server = self.run_ctx.server_half(
            initial_weights={
                k: v.detach().cpu().numpy().copy()
                for k, v in initial.state_dict().items()
            },
            clients=self.clients,
            seed=seed,
        )
        self.eval_splits = eval_splits(cfg, dataset, fold)
        self._last_eval: dict[str, Any] = {}
        #: training-domain validation (None: partition.validation is 0)
        self.selector = (
            Selector(cfg, self.task, self.clients)
            if cfg.partition.validation > 0
            else None
        )
        #: weight averaging across rounds (None: evaluation.swa_from is 0)
        swa = cfg.evaluation.swa_from
        self.averager = RoundAverage(swa) if swa > 0 else None

    # ------------------------------------------------------------------ set-up

    def client_half(
        self, cid: str, rnd: int, progress: bool = False
    ) -> ClientAlgorithm[Any]:
        """A fresh client half of ``cid`` for round ``rnd``."""
        on_epoch = self.reporter.epoch if progress else None
        return self.run_ctx.client_half(
            self.by_id[cid], round=rnd, seed=self.seed, on_epoch=on_epoch
        )

    def sample_clients(self, rnd: int) -> list[str]:
        ids = [c.client_id for c in self.clients]
        t = self.cfg.train
        k = t.clients_per_round or max(1, round(t.client_fraction * len(ids)))
        if k > len(ids):
            raise ConfigError(
                f"config key 'train.clients_per_round': {k} exceeds the {len(ids)} "
                f"clients of this federation"
            )
        if t.min_replies > k:
            raise ConfigError(
                f"config key 'train.min_replies': {t.min_replies}, but a round "
                f"samples {k} of this federation's {len(ids)} clients; at most {k}"
            )
        if k == len(ids):
            return ids
        rng = np.random.default_rng(derive_seed(self.seed, rnd, "sample"))
        return sorted(rng.choice(ids, size=k, replace=False).tolist())

    def labels(self) -> dict[str, Any]:
        return {
            "method": self.cfg.method,
            "target": self.fold.target,
            "seed": self.seed,
        }

    # ------------------------------------------------------------------ rounds

    def run(self, resume: bool = False) -> dict[str, Any]:
        """Run (or continue) all rounds; return the final evaluation record."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for stale in self.run_dir.glob(".*.tmp"):  # a write killed mid-way
            stale.unlink(missing_ok=True)
        start = 1
        if resume:
            done = self.run_dir / FINAL
            if done.is_file():
                record = dict(json.loads(done.read_text()))
                check_same_config(self.run_dir, record, self.cfg)
                self.reporter.skip_run(self._label(), self.cfg.train.rounds)
                return record
            start = self._restore() + 1
        else:  # a fresh run: nothing of an earlier one may stay beside it
            for name in (RESULTS, CHECKPOINT, FINAL, MODEL, TRAFFIC):
                (self.run_dir / name).unlink(missing_ok=True)
            for stale in (self.run_dir / CLIENT_MODELS).glob("*.fpm"):
                stale.unlink()
        atomic_write_text(self.run_dir / "config.yaml", self.cfg.to_yaml())
        # logs the rounds after the checkpoint only (runtime.tracking)
        self.tracker = open_tracker(self.cfg, self.run_dir, self.labels(), start)
        finished = False
        try:
            rounds = self.cfg.train.rounds
            self.reporter.start_run(self._label(), rounds, done=start - 1)
            final: dict[str, Any] = self._last_eval
            for rnd in range(start, rounds + 1):
                final = self.run_round(rnd)
            last = self.server.global_weights()
            if self.selector is not None and last is not None:  # the selected round
                target = self.eval_splits[("target", self.fold.target)]
                load, model = self._load_eval_weights, self.eval_model
                final = final | self.selector.final(
                    self.task, model, load, last, target, self.validation_predictions
                )
            if self.averager is not None and last is not None:
                final = final | self._averaged(last)
            if self.cfg.evaluation.adapt_bn and last is not None:
                final = self._adapted(final, last)
            record = {
                **self.labels(),
                "round": rounds,
                "fedpath": __version__,
                "config_hash": self.cfg.hash(),
                "evaluation": final,
            }
            self._save_final(record)
            finished = True
        finally:
            self.tracker.close(finished)
            self.tracker = NO_TRACKING
        self.reporter.end_run()
        return record

    def _label(self) -> str:
        return f"{self.cfg.method} -> {self.fold.target} (seed {self.seed})"

    def run_round(self, rnd: int) -> dict[str, Any]:
        """One round: every stage (configure -> clients -> aggregate), then
        evaluation, the round's records and the checkpoint.

        Deployments override :meth:`begin_round` and :meth:`exchange` only.
        """
        times = RoundTimes()
        self.begin_round(rnd)
        sampled = self.sample_clients(rnd)
        self.reporter.start_round(rnd, len(sampled) * len(self.server.stages(rnd)))
        logs: dict[str, Any] = {}
        extras: dict[str, int] = {}
        up = down = 0
        for stage in self.server.stages(rnd):
            t0 = time.perf_counter()
            messages = self.server.configure(stage, rnd, sampled)
            times.server += time.perf_counter() - t0
            t0 = time.perf_counter()
            replies, info = self.exchange(stage, rnd, messages)
            times.clients += time.perf_counter() - t0
            self._audit(stage, rnd, messages, replies, info["sent"])
            down += sum(messages[c].nbytes() for c in info.pop("sent"))
            up += sum(p.nbytes() for p in replies.values())
            for k, v in info.items():
                extras[k] = extras.get(k, 0) + int(v)
            if len(replies) < self.cfg.train.min_replies:
                raise RuntimeError(
                    f"round {rnd} stage {stage!r}: {len(replies)} replies, fewer than "
                    f"train.min_replies={self.cfg.train.min_replies}"
                )
            t0 = time.perf_counter()
            logs.update(
                {
                    f"{stage}/{k}": v
                    for k, v in self.server.aggregate(stage, rnd, replies).items()
                }
            )
            times.server += time.perf_counter() - t0
        if self.averager is not None:
            weights = self.server.global_weights()
            if weights is not None:
                self.averager.update(rnd, weights)
        evaluation: dict[str, Any] = {}
        t0 = time.perf_counter()
        if rnd % self.cfg.train.eval_every == 0 or rnd == self.cfg.train.rounds:
            evaluation = self._evaluate(rnd)
            self._last_eval = evaluation
        times.evaluation = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._append(
            "round",
            rnd,
            {
                "clients": len(sampled),
                "bytes_up": up,
                "bytes_down": down,
                **extras,
                **logs,
            },
        )
        # the round's records go out before its checkpoint: a crash in between
        # resumes from the previous checkpoint and drops this round's records,
        # so no record of a checkpointed round can be lost
        blob = self._checkpoint_bytes(rnd) if self.cfg.runtime.checkpoint else None
        times.checkpoint = time.perf_counter() - t0
        self._append(
            "timing",
            rnd,
            {
                "client_s": times.clients,
                "server_s": times.server,
                "eval_s": times.evaluation,
                "checkpoint_s": times.checkpoint,
            },
        )
        if blob is not None:
            write_checkpoint(self.run_dir, blob)
        self.tracker.commit(rnd)  # the round is checkpointed: log it, once
        target = evaluation.get("target", {})
        summary = f"acc {target['accuracy']:.3f}" if "accuracy" in target else ""
        log.info("%s round %d done %s", self._label(), rnd, summary)
        self.reporter.end_round(summary)
        return evaluation

    def begin_round(self, rnd: int) -> None:
        """Hook before a round's client sampling (Flower: find the live nodes)."""

    def exchange(
        self, stage: str, rnd: int, messages: Mapping[str, Payload]
    ) -> tuple[dict[str, Payload], dict[str, Any]]:
        """Deliver one stage's payloads and collect the replies.

        Returns the replies and ``info``: ``sent`` (the clients messaged) plus
        integer counters that go into the round record (Flower: wire bytes,
        failures). In-process every client answers, in a fixed order.
        """
        replies = {
            cid: self._call_client(cid, stage, rnd, messages[cid])
            for cid in sorted(messages)
        }
        return replies, {"sent": sorted(messages)}

    def _call_client(self, cid: str, stage: str, rnd: int, payload: Payload) -> Payload:
        self.reporter.start_client(cid, self.cfg.train.local_epochs)
        half = self.client_half(cid, rnd, progress=True)
        reply = half.handle(stage, payload, self.states[cid])
        self.reporter.end_client()
        return reply

    # ------------------------------------------------------------------ evaluation

    def _evaluate(self, rnd: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.cfg.evaluation.protocol == "local":
            out.update(self._evaluate_clients(rnd))
        weights = self.server.global_weights()
        if weights is None or not self.eval_splits:
            return out
        self._load_eval_weights(weights)

        def record(kind: str, domain: str, metrics: Mapping[str, Any]) -> None:
            self._eval_record(rnd, kind, domain, metrics)

        if self.cfg.evaluation.protocol == "linear_probe":
            seed = derive_seed(self.seed, "probe")
            out["target"] = evaluate_probe(
                self.task, self.eval_model, self.eval_splits, self.cfg, seed, record
            )
            return out
        out.update(
            evaluate_classifier(self.task, self.eval_model, self.eval_splits, record)
        )
        if self.selector is not None:
            per_client = self.validation_metrics(rnd, weights)
            val = self.selector.score(rnd, per_client, weights, record)
            out["validation"] = val
            summary = {"validation": val["value"], **self.selector.summary()}
            self._append("selection", rnd, summary)
        return out

    def _eval_record(
        self, rnd: int, kind: str, domain: str, metrics: Mapping[str, Any]
    ) -> None:
        self._append("eval", rnd, {"split": kind, "domain": domain, **metrics})

    def _audit(
        self,
        stage: str,
        rnd: int,
        messages: Mapping[str, Payload],
        replies: Mapping[str, Payload],
        sent: list[str],
    ) -> None:
        """What each client received and sent this stage, into ``traffic.jsonl``
        (``fedpath audit``), and the check that no reply is image-shaped unless
        the algorithm is a pooled, non-private one (the node policy's reply
        check, :func:`fedpath.deploy.policy.check_reply`, with no caps)."""
        from fedpath.deploy.policy import (
            NON_PRIVATE,
            NodePolicy,
            check_reply,
            manifest,
        )

        name = self.cfg.algorithm.name
        policy = NodePolicy(
            allow_non_private=(name,) if name in NON_PRIVATE else (),
            max_tokens=2**62,
        )
        size = getattr(self.dataset, "image_size", None)
        for cid in sorted(set(sent) | set(replies)):
            down = messages.get(cid)
            up = replies.get(cid)
            if up is not None:
                check_reply(policy, self.cfg, stage, up, size)
            record = {
                "round": rnd,
                "stage": stage,
                "client": cid,
                "received": manifest(down) if down is not None else [],
                "sent": manifest(up) if up is not None else None,
            }
            append_jsonl(self.run_dir / TRAFFIC, record)

    def _append(self, kind: str, rnd: int, fields: Mapping[str, Any]) -> None:
        """One ``results.jsonl`` line: the run's labels, ``kind``, ``round``."""
        record = {**self.labels(), "kind": kind, "round": rnd, **fields}
        append_jsonl(self.run_dir / RESULTS, record)
        self.tracker.add(record)

    def _evaluate_clients(self, rnd: int) -> dict[str, Any]:
        """Every client evaluates its deployed model on its own test split; one
        ``split: client`` record per client with metrics, and their summary."""
        per_client = {
            cid: dict(metrics)
            for cid, metrics in self.client_metrics(rnd).items()
            if metrics
        }
        for cid, metrics in per_client.items():
            self._eval_record(rnd, "client", cid, metrics)
        return summarize_clients(per_client)

    def client_metrics(self, rnd: int) -> dict[str, Mapping[str, Any]]:
        """Hook: each client's metrics on its own test split, in client order
        (Flower: an evaluation stage on the nodes)."""
        out: dict[str, Mapping[str, Any]] = {}
        for cid in sorted(self.by_id):
            out[cid] = self.client_half(cid, rnd).evaluate(
                self.server.evaluate_payload(cid), self.states[cid]
            )
        return out

    def validation_metrics(
        self, rnd: int, weights: ArrayDict
    ) -> dict[str, Mapping[str, Any]]:
        """Hook: each source client's metrics of the global ``weights`` on its
        validation slides (already in :attr:`eval_model`; Flower: a
        ``fedpath.validate`` stage on the nodes)."""
        assert self.selector is not None
        splits = self.selector.splits
        return dict(validation_metrics(self.task, self.eval_model, splits))

    def validation_predictions(self, weights: ArrayDict) -> ValidationPredictions:
        """Hook: the pooled validation predictions of ``weights``, client by
        client (Flower: from the nodes whose policy shares them)."""
        assert self.selector is not None
        self._load_eval_weights(weights)
        return validation_predictions(self.task, self.eval_model, self.selector.splits)

    def _adapted(self, final: dict[str, Any], last: ArrayDict) -> dict[str, Any]:
        """``evaluation.adapt_bn``: the target metrics of the last (and of the
        selected) weights with BatchNorm statistics re-estimated on the target's
        unlabelled images (:mod:`fedpath.tasks.adapt`), as ``adapted`` blocks."""
        from fedpath.tasks.adapt import adaptation_split

        t = self.fold.target
        target = self.eval_splits[("target", t)]
        images, on = adaptation_split(self.dataset, t, self.cfg.lodo.eval_split)

        def block(weights: ArrayDict) -> dict[str, Any]:
            self._load_eval_weights(weights)
            model = copy.deepcopy(self.eval_model)
            n = self.task.adapt(model, images)
            return {"on": on, "n": n, "target": self.task.evaluate(model, target)}

        out = {**final, "adapted": block(last)}
        if self.selector is not None and self.selector.best is not None:
            selected = dict(out.get("selected", {}))
            selected["adapted"] = block(self.selector.best.weights)
            out["selected"] = selected
        averaged = self.averager.weights(last) if self.averager else None
        if averaged is not None:
            out["averaged"] = {**out["averaged"], "adapted": block(averaged)}
        self._load_eval_weights(last)
        return out

    def _averaged(self, last: ArrayDict) -> dict[str, Any]:
        """``evaluation.swa_from``: the ``averaged`` block, the target metrics of
        the mean of the global weights (and, with validation, its own temperature
        and operating point)."""
        assert self.averager is not None
        weights = self.averager.weights(last)
        if weights is None:
            return {}
        target = self.eval_splits[("target", self.fold.target)]
        self._load_eval_weights(weights)
        block: dict[str, Any] = {
            "rounds": self.averager.rounds,
            "target": self.task.evaluate(self.eval_model, target),
        }
        if self.selector is not None:
            val = self.validation_predictions(weights)
            self._load_eval_weights(weights)
            block.update(self.selector.decide(self.task, self.eval_model, target, val))
        self._load_eval_weights(last)
        return {"averaged": block}

    def _load_eval_weights(self, weights: ArrayDict) -> None:
        own = self.eval_model.state_dict()
        self.eval_model.load_state_dict(
            {**own, **{k: torch.from_numpy(v) for k, v in weights.items() if k in own}}
        )

    # ------------------------------------------------------------------ persistence

    def _checkpoint_bytes(self, rnd: int) -> bytes:
        """The state after round ``rnd``, serialized (written after the records)."""
        selected = self.selector.state() if self.selector is not None else None
        averaged = self.averager.state() if self.averager is not None else None
        ckpt = Checkpoint(
            rnd, self.server.state(), self.states, self._last_eval, selected, averaged
        )
        return checkpoint_bytes(ckpt, self.cfg.hash(), self.fold.target, self.seed)

    def _restore(self) -> int:
        """Load the checkpoint if any; return the last completed round (0: none)."""
        ckpt = load_checkpoint(self.run_dir, self.cfg.hash())
        if ckpt is None:
            return 0
        self.server.load_state(ckpt.server)
        self.states = ckpt.clients
        self._last_eval = ckpt.last_eval
        if self.selector is not None:
            self.selector.load_state(ckpt.selected)
        if self.averager is not None:
            self.averager.load_state(ckpt.averaged)
        return ckpt.round

    def _save_final(self, record: Mapping[str, Any]) -> None:
        weights = self.server.global_weights()
        which, rnd = self.cfg.runtime.export, self.cfg.train.rounds
        if which == "selected" and self.selector and self.selector.best:
            weights, rnd = self.selector.best.weights, self.selector.best.round
        if which == "averaged" and self.averager and weights is not None:
            weights = self.averager.weights(weights)
        if weights is not None and self.cfg.runtime.export_model:
            self._load_eval_weights(weights)
            # the task says whether its models export (MIL models: not yet)
            self.task.export(
                self.run_dir / MODEL,
                self.eval_model,
                {
                    "config_hash": self.cfg.hash(),
                    "method": self.cfg.method,
                    "trained_on": list(self.fold.sources),
                    "held_out": self.fold.target,
                    "seed": self.seed,
                    "data": {
                        "name": self.cfg.data.name,
                        "root": self.cfg.data.root,
                        "params": dict(self.cfg.data.params),
                    },
                    "round": rnd,
                    "selection": which,
                    **exported_decision(record["evaluation"], which),
                },
            )
        if self.cfg.evaluation.protocol == "local" and self.cfg.runtime.export_model:
            self._export_clients()
        save_final(self.run_dir, record)

    def _export_clients(self) -> None:
        """Every client's deployed model as ``models/<client>.fpm``, when the task
        exports client models (its ``export_client``: the slide-bag task,
        :mod:`fedpath.mil.export`). Clients without a model here are skipped
        (over Flower the client states live on the nodes)."""
        export = getattr(self.task, "export_client", None)
        if export is None:
            return
        rounds = self.cfg.train.rounds
        written: dict[Path, str] = {}
        for cid in sorted(self.states):
            half = self.client_half(cid, rounds)
            try:
                model = half.deployed_model(
                    self.server.evaluate_payload(cid), self.states[cid]
                )
            except ProtocolError as err:
                log.warning("client %s: no model to export (%s)", cid, err)
                continue
            path = export(
                self.run_dir / CLIENT_MODELS,
                cid,
                model,
                {
                    "domain": self.by_id[cid].domain,
                    "architecture": str(
                        self.states[cid].scalars.get("architecture", "")
                    ),
                    "config_hash": self.cfg.hash(),
                    "method": self.cfg.method,
                    "federation": list(self.fold.sources),
                    "seed": self.seed,
                    "round": rounds,
                    "data": {
                        "name": self.cfg.data.name,
                        "root": self.cfg.data.root,
                        "params": dict(self.cfg.data.params),
                    },
                },
            )
            if path in written:
                raise RuntimeError(
                    f"clients {written[path]!r} and {cid!r} map to one model file "
                    f"{path}; rename one of them"
                )
            written[path] = cid
