"""The run's evaluation piece: every evaluation round, and the blocks at the end.

At an evaluation round (every ``train.eval_every`` rounds and the last) the
:class:`Evaluator` scores the global weights on the held-out target and the
sources' test splits (:mod:`fedpath.runtime.evaluate`; or the linear probe),
collects the clients' own metrics (``evaluation.protocol: local``) and, with
``partition.validation``, the sources' validation metrics that select a round
(:mod:`fedpath.runtime.selection`). After every round it adds the global
weights to the running mean (``evaluation.swa_from``,
:mod:`fedpath.runtime.averaging`). At the end it adds the selected round's,
the averaged weights' and the BatchNorm-adapted (:mod:`fedpath.runtime.adapt_bn`)
blocks. What only the clients can compute comes through the run's
:class:`~fedpath.runtime.transport.Transport`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from fedpath.algorithms.base import derive_seed
from fedpath.config import ExperimentConfig
from fedpath.data.base import DomainDataset, Split
from fedpath.data.partition import ClientData, LodoFold
from fedpath.evaluation.metrics import NonFiniteProbabilities
from fedpath.runtime.adapt_bn import adapted_blocks
from fedpath.runtime.averaging import RoundAverage, averaged_block
from fedpath.runtime.consortium import check_positive_class, expected_estimate
from fedpath.runtime.divergence import diverged
from fedpath.runtime.evaluate import (
    EvalModel,
    eval_splits,
    evaluate_classifier,
    evaluate_probe,
    summarize_clients,
)
from fedpath.runtime.results import RunLog
from fedpath.runtime.selection import Selector
from fedpath.runtime.transport import Transport
from fedpath.tasks import Task
from fedpath.types import ArrayDict


class Evaluator:
    """How one fold x seed is judged (module docstring).

    Parameters
    ----------
    model
        The seeded initial model: the one model the coordinator evaluates in.
    clients
        The run's clients (their validation slides, with ``partition.validation``).
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        dataset: DomainDataset,
        fold: LodoFold,
        seed: int,
        task: Task,
        model: nn.Module,
        clients: Sequence[ClientData],
    ) -> None:
        self.cfg, self.dataset, self.fold, self.seed = cfg, dataset, fold, seed
        self.task = task
        self.model = EvalModel(model)
        self.splits = eval_splits(cfg, dataset, fold)
        #: training-domain validation (None: partition.validation is 0)
        check_positive_class(cfg, task)
        #: the leave-one-out estimate a consortium model carries (checked before
        #: training: a wrong folder fails now, not after the last round)
        self.expected = expected_estimate(cfg)
        self.selector = (
            Selector(cfg, task, clients) if cfg.partition.validation > 0 else None
        )
        #: weight averaging across rounds (None: evaluation.swa_from is 0)
        swa = cfg.evaluation.swa_from
        self.averager = RoundAverage(swa) if swa > 0 else None
        #: the last evaluation round's metrics (checkpointed)
        self.last: dict[str, Any] = {}

    def due(self, rnd: int) -> bool:
        """Whether round ``rnd`` is an evaluation round."""
        t = self.cfg.train
        return rnd % t.eval_every == 0 or rnd == t.rounds

    @property
    def target(self) -> Split | None:
        """The held-out domain's evaluated split (None: consortium mode, nothing
        held out, :mod:`fedpath.runtime.consortium`)."""
        return self.splits.get(("target", self.fold.target))

    # ------------------------------------------------------------------ rounds

    def evaluate(
        self,
        rnd: int,
        weights: ArrayDict | None,
        transport: Transport,
        log: RunLog,
    ) -> dict[str, Any]:
        """Round ``rnd``'s evaluation of the global ``weights``; its records go
        to ``log``, its metrics are returned (and kept as :attr:`last`)."""
        try:
            out = self._round(rnd, weights, transport, log)
        except NonFiniteProbabilities:
            # finite weights so large that the logits overflow: the training
            # diverged (nothing of this round is checkpointed)
            raise diverged(
                self.cfg.train,
                rnd,
                "the model's predictions are not finite (NaN or infinite "
                "probabilities)",
            ) from None
        self.last = out
        return out

    def _round(
        self,
        rnd: int,
        weights: ArrayDict | None,
        transport: Transport,
        log: RunLog,
    ) -> dict[str, Any]:
        """The clients' own metrics (``evaluation.protocol: local``), then
        those of the global ``weights``."""
        out: dict[str, Any] = {}
        if self.cfg.evaluation.protocol == "local":
            per_client = {
                cid: dict(metrics)
                for cid, metrics in transport.client_metrics(rnd).items()
                if metrics
            }
            for cid, metrics in per_client.items():
                log.eval(rnd, "client", cid, metrics)
            out.update(summarize_clients(per_client))
        # consortium mode has no split to score, only the validation slides
        if weights is not None and (self.splits or self.selector is not None):
            out.update(self._global(rnd, weights, transport, log))
        return out

    def _global(
        self, rnd: int, weights: ArrayDict, transport: Transport, log: RunLog
    ) -> dict[str, Any]:
        """The global weights on the target and sources (or the probe), and
        the validation score that selects a round."""
        self.model.load(weights)
        module = self.model.module

        def record(kind: str, domain: str, metrics: Any) -> None:
            log.eval(rnd, kind, domain, metrics)

        if self.cfg.evaluation.protocol == "linear_probe":
            seed = derive_seed(self.seed, "probe")
            probed = evaluate_probe(
                self.task, module, self.splits, self.cfg, seed, record
            )
            return {"target": probed}
        # consortium mode (no split): only the validation block below
        out = (
            evaluate_classifier(self.task, module, self.splits, record)
            if self.splits
            else {}
        )
        if self.selector is not None:
            per_client = transport.validation_metrics(rnd, weights)
            val = self.selector.score(rnd, per_client, weights, record)
            out["validation"] = val
            log.append(
                "selection",
                rnd,
                {"validation": val["value"], **self.selector.summary()},
            )
        return out

    def add_round(self, rnd: int, weights: ArrayDict | None) -> None:
        """After round ``rnd``: its global weights join the running mean."""
        if self.averager is not None and weights is not None:
            self.averager.update(rnd, weights)

    # ------------------------------------------------------------------ the end

    def final(
        self, final: dict[str, Any], last: ArrayDict | None, transport: Transport
    ) -> dict[str, Any]:
        """The final ``evaluation``: the last evaluation round's metrics
        ``final`` with the selected round's, the averaged weights' and the
        adapted blocks (those the config asks for) of the last weights ``last``."""
        if last is None:
            return final
        predictions = transport.validation_predictions
        if self.selector is not None:
            final = final | self.selector.final(
                self.task,
                self.model.module,
                self.model.load,
                last,
                self.target,
                predictions,
            )
        if self.averager is not None:
            final = final | averaged_block(
                self.averager,
                last,
                self.task,
                self.model,
                self.target,
                self.selector,
                predictions,
            )
        target = self.target
        if self.cfg.evaluation.adapt_bn and target is not None:
            final = adapted_blocks(
                final,
                last,
                task=self.task,
                model=self.model,
                dataset=self.dataset,
                target=(self.fold.target, target),
                eval_split=self.cfg.lodo.eval_split,
                selector=self.selector,
                averager=self.averager,
            )
        return final
