"""The one-machine runtime: every client in-process, deterministic, resumable.

An :class:`InProcessRun` is the round loop (:class:`fedpath.runtime.loop.Run`)
over :class:`LocalTransport`: every client half runs in this process, one after
another in client order, so a run is reproducible bit for bit and a resumed run
equals an uninterrupted one. Training-domain validation is scored by the
coordinator itself on the sources' validation slides
(:mod:`fedpath.runtime.selection`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedpath.config import ExperimentConfig
from fedpath.data.base import DomainDataset
from fedpath.data.partition import LodoFold
from fedpath.runtime.divergence import local_loss_diverged
from fedpath.runtime.loop import Run
from fedpath.runtime.selection import (
    ValidationPredictions,
    validation_metrics,
    validation_predictions,
)
from fedpath.runtime.transport import Exchanged
from fedpath.types import ArrayDict, Payload
from fedpath.utils.progress import Reporter


class InProcessRun(Run):
    """One fold x seed of an experiment, run with every client in this process."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        dataset: DomainDataset,
        fold: LodoFold,
        seed: int,
        run_dir: Path,
        reporter: Reporter | None = None,
        config_hash: str | None = None,
    ) -> None:
        super().__init__(
            cfg,
            dataset,
            fold,
            seed,
            run_dir,
            reporter,
            transport=LocalTransport,
            config_hash=config_hash,
        )

    def _call_client(self, cid: str, stage: str, rnd: int, payload: Payload) -> Payload:
        """Client ``cid``'s half answers one stage (with progress per epoch)."""
        self.reporter.start_client(cid, self.cfg.train.local_epochs)
        half = self.client_half(cid, rnd, progress=True)
        try:
            reply = half.handle(stage, payload, self.states[cid])
        except FloatingPointError as err:  # the local loop's non-finite loss
            raise local_loss_diverged(self.cfg.train, rnd, cid, err) from None
        self.reporter.end_client()
        return reply


class LocalTransport:
    """Every client of an :class:`InProcessRun` answers, in client order, here."""

    keeps_client_states = True

    def __init__(self, run: Run) -> None:
        assert isinstance(run, InProcessRun)
        self.run = run

    def begin_round(self, rnd: int) -> None:
        """Every client is always reachable."""

    def exchange(
        self, stage: str, rnd: int, messages: Mapping[str, Payload]
    ) -> Exchanged:
        """Every client in ``messages`` answers (``info``: ``sent`` only)."""
        replies = {
            cid: self.run._call_client(cid, stage, rnd, messages[cid])
            for cid in sorted(messages)
        }
        return replies, {"sent": sorted(messages)}

    def client_metrics(self, rnd: int) -> dict[str, Mapping[str, Any]]:
        """Each client's half evaluates its deployed model on its test split."""
        run = self.run
        return {
            cid: run.client_half(cid, rnd).evaluate(
                run.server.evaluate_payload(cid), run.states[cid]
            )
            for cid in sorted(run.by_id)
        }

    def validation_metrics(
        self, rnd: int, weights: ArrayDict
    ) -> dict[str, Mapping[str, Any]]:
        """The coordinator scores ``weights`` (already in the evaluation model)
        on each client's validation slides."""
        ev = self.run.evaluator
        assert ev.selector is not None
        return dict(validation_metrics(ev.task, ev.model.module, ev.selector.splits))

    def validation_predictions(self, weights: ArrayDict) -> ValidationPredictions:
        """The coordinator's validation predictions of ``weights``."""
        ev = self.run.evaluator
        assert ev.selector is not None
        ev.model.load(weights)
        return validation_predictions(ev.task, ev.model.module, ev.selector.splits)
