"""Training-domain validation: select a round, calibrate, choose an operating point.

DomainBed's training-domain validation (Gulrajani & Lopez-Paz, 2021, Sec. 3):
with ``partition.validation`` > 0 every source client holds validation slides it
never trains on (:func:`fedpath.data.partition.make_clients`). At every
evaluation round the global model is scored on each client's validation slides
(one ``kind: eval, split: validation`` line per client, then a ``kind:
selection`` line); the mean over clients of ``evaluation.select_metric`` selects
a round (ties: the earlier one). The selected round's global weights travel in
the checkpoint, so a resumed run selects exactly as an uninterrupted one.

At the end, for the last and for the selected weights, a temperature is fitted
on the pooled validation slides and, for two classes with
``evaluation.target_sensitivity``, an operating point is chosen there
(:mod:`fedpath.evaluation.calibration`); both are then applied to the target.
The target domain enters no choice: it is only evaluated.

Where the validation slides are is the runtime's business: in-process the
coordinator scores them itself (:func:`validation_metrics`,
:func:`validation_predictions`); over Flower each node scores its own
(:func:`validation_reply`, stage ``fedpath.validate``) and only its metrics
leave it each round. The temperature and the threshold need the pooled
validation predictions (class probabilities and labels, never images): a node
sends its own only if its policy says ``share_validation_predictions: true``,
and they are fitted on the nodes that did (the ``left_out`` ones named in the
``calibrated`` block; none: no ``calibrated`` block, ``calibration_skipped``
says why). Both runtimes score client by client in client order with the same
model (the seeded initial model with the round's weights), so they agree
exactly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

from fedpath.algorithms.base import derive_seed
from fedpath.algorithms.names import WEIGHTS
from fedpath.config import ConfigError, ExperimentConfig
from fedpath.data.base import Split
from fedpath.data.partition import ClientData
from fedpath.evaluation.calibration import (
    apply_temperature,
    fit_temperature,
    nll,
    threshold_for_sensitivity,
    threshold_metrics,
)
from fedpath.evaluation.metrics import (
    BINARY_METRIC_NAMES,
    classification_metrics,
    expected_calibration_error,
)
from fedpath.runtime.consortium import check_consortium_validation
from fedpath.runtime.evaluate import Record, load_weights
from fedpath.tasks import Task
from fedpath.types import ArrayDict, Payload

log = logging.getLogger("fedpath")


@dataclass
class Selected:
    """The best round so far: its number, its validation score, its weights."""

    round: int
    value: float
    weights: ArrayDict


def better(value: float, best: Selected | None) -> bool:
    """Whether ``value`` beats ``best`` (strictly: ties keep the earlier round;
    an undefined ``nan`` score beats nothing and loses to any number)."""
    if best is None:
        return True
    if math.isnan(value):
        return False
    return math.isnan(best.value) or value > best.value


def mean_defined(values: Sequence[float]) -> float:
    """Mean of the finite values (``nan`` if there is none)."""
    ok = [float(v) for v in values if math.isfinite(float(v))]
    return float(np.mean(ok)) if ok else math.nan


class Selector:
    """Scores the global model on the source clients' validation slides and keeps
    the best round (module docstring)."""

    def __init__(
        self, cfg: ExperimentConfig, task: Task, clients: Sequence[ClientData]
    ) -> None:
        self.metric = cfg.evaluation.select_metric
        self.sensitivity = cfg.evaluation.target_sensitivity
        self.splits: dict[str, Split] = {
            c.client_id: c.validation
            for c in sorted(clients, key=lambda c: c.client_id)
            if c.validation is not None and len(c.validation)
        }
        check_consortium_validation(cfg, clients, self.splits)
        if not self.splits:
            raise ConfigError(
                f"config key 'partition.validation': {cfg.partition.validation:g} "
                "held out no slide of any source domain (a domain needs at least "
                "two training slides); raise it or set it to 0"
            )
        binary = task.num_classes == 2
        if self.metric in BINARY_METRIC_NAMES and not binary:
            raise ConfigError(
                f"config key 'evaluation.select_metric': {self.metric!r} is a "
                f"two-class metric, the dataset has {task.num_classes} classes; "
                "expected e.g. balanced_accuracy or macro_f1"
            )
        if self.sensitivity is not None:
            if not binary:
                raise ConfigError(
                    "config key 'evaluation.target_sensitivity': expected null for "
                    f"a task with {task.num_classes} classes (an operating point "
                    "is a threshold on the positive class's probability: two "
                    "classes only)"
                )
            if not (self.pooled().labels == 1).any():
                raise ConfigError(
                    "config key 'evaluation.target_sensitivity': the validation "
                    f"slides hold no sample of the positive class "
                    f"{task.classes[1]!r}; raise partition.validation"
                )
        self.best: Selected | None = None

    def pooled(self) -> Split:
        """Every client's validation slides, in client order."""
        return Split.concat(list(self.splits.values()))

    # ------------------------------------------------------------------ rounds

    def score(
        self,
        rnd: int,
        per_client: Mapping[str, Mapping[str, Any]],
        weights: ArrayDict,
        record: Record,
    ) -> dict[str, Any]:
        """Round ``rnd``'s global model (``weights``) from its metrics on each
        client's validation slides (:func:`validation_metrics`; a client
        missing from ``per_client``, e.g. a failed node, is left out); keeps it
        if it is the best so far."""
        scored = {c: dict(per_client[c]) for c in self.splits if c in per_client}
        for cid, metrics in scored.items():
            record("validation", cid, metrics)
        value = mean_defined([m[self.metric] for m in scored.values()])
        if better(value, self.best):
            self.best = Selected(rnd, value, {k: v.copy() for k, v in weights.items()})
        return {"metric": self.metric, "value": value, "clients": scored}

    def summary(self) -> dict[str, Any]:
        """The ``kind: selection`` fields after a round: the best round so far."""
        assert self.best is not None
        return {
            "metric": self.metric,
            "best_round": self.best.round,
            "best_validation": self.best.value,
        }

    # ------------------------------------------------------------------ state

    def state(self) -> Payload | None:
        """The best round as a checkpointable payload (None before any)."""
        if self.best is None:
            return None
        return Payload(
            {WEIGHTS: self.best.weights},
            {"round": self.best.round, "value": self.best.value},
        )

    def load_state(self, state: Payload | None) -> None:
        if state is None:
            self.best = None
            return
        self.best = Selected(
            int(state.scalars["round"]),
            float(state.scalars["value"]),
            state.group(WEIGHTS),
        )

    # ------------------------------------------------------------------ the end

    def final(
        self,
        task: Task,
        model: nn.Module,
        load: Callable[[ArrayDict], None],
        last: ArrayDict,
        target: Split | None,
        predictions: Callable[[ArrayDict], ValidationPredictions],
    ) -> dict[str, Any]:
        """The last weights' ``calibrated`` (and ``operating_point``) blocks and
        the ``selected`` block: the selected round's target metrics (none in
        consortium mode, ``target`` None) and its own calibration and operating
        point. ``load`` puts weights into ``model``;
        ``predictions`` gives the validation predictions of weights
        (:func:`validation_predictions`, or the nodes' over Flower)."""
        if self.best is None:
            return {}
        val = predictions(last)
        load(last)
        blocks = self.decide(task, model, target, val)
        best = self.best.weights
        val = predictions(best)
        load(best)
        selected = {
            "round": self.best.round,
            "metric": self.metric,
            "validation": self.best.value,
            **({} if target is None else {"target": task.evaluate(model, target)}),
            **self.decide(task, model, target, val),
        }
        return {**blocks, "selected": selected}

    def decide(
        self,
        task: Task,
        model: nn.Module,
        target: Split | None,
        val: ValidationPredictions,
    ) -> dict[str, Any]:
        """Temperature and operating point of ``model`` from its validation
        predictions ``val``, applied to ``target`` (None: consortium mode, no
        target block)."""
        if not val.clients:
            reasons = "; ".join(f"{c}: {r}" for c, r in val.left_out.items())
            log.warning("no calibration: no validation predictions (%s)", reasons)
            return {"calibration_skipped": reasons or "no validation slides"}
        labels, val_probs = val.labels, val.probs
        t = fit_temperature(labels, val_probs)
        cal_val = apply_temperature(val_probs, t)
        validation: dict[str, Any] = {
            "n": int(labels.size),
            "nll_uncalibrated": nll(labels, val_probs),
            "nll": nll(labels, cal_val),
            "ece_uncalibrated": expected_calibration_error(labels, val_probs),
            "ece": expected_calibration_error(labels, cal_val),
        }
        if val.left_out:
            validation["left_out"] = dict(val.left_out)
        out: dict[str, Any] = {
            "calibrated": {"temperature": t, "validation": validation}
        }
        cal_target = None
        if target is not None:
            cal_target = apply_temperature(task.predict(model, target), t)
            out["calibrated"]["target"] = {
                **classification_metrics(target.labels, cal_target),
                "nll": nll(target.labels, cal_target),
                "n": len(target),
            }
        if self.sensitivity is not None:
            if not (labels == 1).any():
                raise RuntimeError(
                    "evaluation.target_sensitivity: the validation predictions "
                    f"that came back (clients {val.clients}; left out: "
                    f"{dict(val.left_out)}) hold no positive sample"
                )
            threshold = threshold_for_sensitivity(
                labels, cal_val[:, 1], self.sensitivity
            )
            out["operating_point"] = {
                "target_sensitivity": self.sensitivity,
                "threshold": threshold,
                "validation": threshold_metrics(labels, cal_val, threshold),
            }
            if target is not None and cal_target is not None:
                out["operating_point"]["target"] = threshold_metrics(
                    target.labels, cal_target, threshold
                )
        return out


@dataclass
class ValidationPredictions:
    """Pooled validation predictions: ``labels`` (N,), class ``probs`` (N, C),
    the ``clients`` they come from (in client order) and the ones ``left_out``
    (client -> why)."""

    labels: np.ndarray
    probs: np.ndarray
    clients: list[str]
    left_out: dict[str, str]

    @classmethod
    def pool(
        cls,
        order: Sequence[str],
        per_client: Mapping[str, tuple[np.ndarray, np.ndarray]],
        left_out: Mapping[str, str],
    ) -> ValidationPredictions:
        """Concatenate ``per_client`` (labels, probs) in ``order``."""
        clients = [c for c in order if c in per_client]
        if not clients:
            return cls(np.zeros(0, np.int64), np.zeros((0, 0)), [], dict(left_out))
        labels = np.concatenate([per_client[c][0] for c in clients]).astype(np.int64)
        probs = np.concatenate([per_client[c][1] for c in clients]).astype(np.float64)
        return cls(labels, probs, clients, dict(left_out))


def validation_model(task: Task, seed: int, weights: ArrayDict) -> nn.Module:
    """The model a run scores on validation slides: the run's seeded initial
    model (as the coordinator's evaluation model) with ``weights`` loaded."""
    import torch

    with torch.random.fork_rng(devices=[]):  # the caller's RNG stays as it was
        torch.manual_seed(derive_seed(seed, "init"))
        model = task.initial_model()
    load_weights(model, weights)
    return model


def validation_metrics(
    task: Task, model: nn.Module, splits: Mapping[str, Split]
) -> dict[str, dict[str, Any]]:
    """Each client's metrics of ``model`` on its validation split."""
    return {cid: task.evaluate(model, split) for cid, split in splits.items()}


def validation_predictions(
    task: Task, model: nn.Module, splits: Mapping[str, Split]
) -> ValidationPredictions:
    """Every client's validation predictions of ``model``, client by client."""
    per = {c: (s.labels, task.predict(model, s)) for c, s in splits.items()}
    return ValidationPredictions.pool(list(splits), per, {})


#: ``mode`` scalar of a ``fedpath.validate`` message
VALIDATE_METRICS, VALIDATE_PREDICTIONS = "metrics", "predictions"
#: array group of a ``fedpath.validate`` reply that carries predictions
VALIDATION = "validation"
#: scalar of a ``fedpath.validate`` reply: why the node sent no predictions
REFUSED = "refused"


def validation_reply(
    task: Task,
    seed: int,
    split: Split | None,
    payload: Payload,
    share_predictions: bool,
) -> Payload:
    """A node's answer to ``fedpath.validate``: the global weights of the
    payload on its validation ``split``, as metrics (``mode: metrics``) or as
    predictions (``mode: predictions``, only if ``share_predictions``; else a
    ``refused`` scalar)."""
    mode = payload.scalars.get("mode")
    if mode not in (VALIDATE_METRICS, VALIDATE_PREDICTIONS):
        raise ValueError(
            f"fedpath.validate: mode {mode!r}, expected {VALIDATE_METRICS!r} or "
            f"{VALIDATE_PREDICTIONS!r}"
        )
    if split is None or len(split) == 0:
        return Payload({}, {REFUSED: "no validation slides on this client"})
    if mode == VALIDATE_PREDICTIONS and not share_predictions:
        return Payload(
            {},
            {
                REFUSED: "node policy share_validation_predictions is false "
                "(set it to true in the node's policy file to let its validation "
                "predictions leave for temperature scaling and the operating point)"
            },
        )
    if WEIGHTS not in payload.arrays:
        raise ValueError("fedpath.validate: the message carries no global weights")
    model = validation_model(task, seed, payload.arrays[WEIGHTS])
    if mode == VALIDATE_METRICS:
        return Payload({}, task.evaluate(model, split))
    probs = task.predict(model, split)
    arrays = {"labels": np.asarray(split.labels, np.int64), "probs": probs}
    return Payload({VALIDATION: arrays}, {"n": len(split)})


def exported_decision(evaluation: Mapping[str, Any], which: str) -> dict[str, Any]:
    """The :class:`~fedpath.artifact.ModelMeta` fields of the exported weights
    (``which``: ``last``, ``selected`` or ``averaged``): their temperature and
    threshold; empty without validation."""
    block = evaluation.get(which, {}) if which != "last" else evaluation
    if "calibrated" not in block:
        return {}
    op = block.get("operating_point", {})
    return {
        "temperature": float(block["calibrated"]["temperature"]),
        "threshold": op.get("threshold"),
        "target_sensitivity": op.get("target_sensitivity"),
    }
