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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

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
from fedpath.runtime.evaluate import Record
from fedpath.tasks import Task
from fedpath.types import ArrayDict, Payload


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
        task: Task,
        model: nn.Module,
        weights: ArrayDict,
        record: Record,
    ) -> dict[str, Any]:
        """Round ``rnd``'s global ``model`` (``weights``) on every client's
        validation slides; keeps it if it is the best so far."""
        per_client: dict[str, dict[str, Any]] = {}
        for cid, split in self.splits.items():
            per_client[cid] = task.evaluate(model, split)
            record("validation", cid, per_client[cid])
        value = mean_defined([m[self.metric] for m in per_client.values()])
        if better(value, self.best):
            self.best = Selected(rnd, value, {k: v.copy() for k, v in weights.items()})
        return {"metric": self.metric, "value": value, "clients": per_client}

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
        target: Split,
    ) -> dict[str, Any]:
        """The last weights' ``calibrated`` (and ``operating_point``) blocks and
        the ``selected`` block: the selected round's target metrics and its own
        calibration and operating point. ``load`` puts weights into ``model``."""
        if self.best is None:
            return {}
        load(last)
        blocks = self.decide(task, model, target)
        load(self.best.weights)
        selected = {
            "round": self.best.round,
            "metric": self.metric,
            "validation": self.best.value,
            "target": task.evaluate(model, target),
            **self.decide(task, model, target),
        }
        return {**blocks, "selected": selected}

    def decide(self, task: Task, model: nn.Module, target: Split) -> dict[str, Any]:
        """Temperature and operating point of ``model`` from the validation
        slides, applied to ``target``."""
        val = self.pooled()
        val_probs = task.predict(model, val)
        target_probs = task.predict(model, target)
        t = fit_temperature(val.labels, val_probs)
        cal_val = apply_temperature(val_probs, t)
        cal_target = apply_temperature(target_probs, t)
        out: dict[str, Any] = {
            "calibrated": {
                "temperature": t,
                "validation": {
                    "n": len(val),
                    "nll_uncalibrated": nll(val.labels, val_probs),
                    "nll": nll(val.labels, cal_val),
                    "ece_uncalibrated": expected_calibration_error(
                        val.labels, val_probs
                    ),
                    "ece": expected_calibration_error(val.labels, cal_val),
                },
                "target": {
                    **classification_metrics(target.labels, cal_target),
                    "nll": nll(target.labels, cal_target),
                    "n": len(target),
                },
            }
        }
        if self.sensitivity is not None:
            threshold = threshold_for_sensitivity(
                val.labels, cal_val[:, 1], self.sensitivity
            )
            out["operating_point"] = {
                "target_sensitivity": self.sensitivity,
                "threshold": threshold,
                "validation": threshold_metrics(val.labels, cal_val, threshold),
                "target": threshold_metrics(target.labels, cal_target, threshold),
            }
        return out


def exported_decision(evaluation: Mapping[str, Any], which: str) -> dict[str, Any]:
    """The :class:`~fedpath.artifact.ModelMeta` fields of the exported weights
    (``which``: ``last`` or ``selected``): their round, temperature and
    threshold; empty without validation."""
    block = evaluation.get("selected", {}) if which == "selected" else evaluation
    if "calibrated" not in block:
        return {}
    op = block.get("operating_point", {})
    return {
        "temperature": float(block["calibrated"]["temperature"]),
        "threshold": op.get("threshold"),
        "target_sensitivity": op.get("target_sensitivity"),
    }
