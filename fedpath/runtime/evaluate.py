"""How a run is judged: the global model on held-out data, a linear probe, or clients.

Pure functions over a model and splits, and the coordinator's one evaluation
model (:class:`EvalModel`), used by the run's evaluation piece
(:class:`fedpath.runtime.evaluator.Evaluator`) at every evaluation round
(``evaluation.protocol``, see :class:`fedpath.config.EvalConfig`). Each
evaluated split also becomes one ``kind: eval`` line of ``results.jsonl`` through
the ``record`` callback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from fedpath.config import ExperimentConfig
from fedpath.data.base import DomainDataset, Split
from fedpath.data.partition import LodoFold
from fedpath.evaluation.groups import worst_group
from fedpath.tasks import Task
from fedpath.types import ArrayDict

#: ``record(kind, domain, metrics)`` writes one evaluation line
Record = Callable[[str, str, Mapping[str, Any]], None]
Splits = dict[tuple[str, str], Split]


def load_weights(model: nn.Module, weights: ArrayDict) -> None:
    """Load the entries of ``weights`` that ``model`` has (global weights lack a
    client's local modules; a model may lack a server-only entry)."""
    own = model.state_dict()
    model.load_state_dict(
        {**own, **{k: torch.from_numpy(v) for k, v in weights.items() if k in own}}
    )


class EvalModel:
    """The coordinator's one evaluation model, into which weights are loaded."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def load(self, weights: ArrayDict) -> None:
        """Put ``weights`` into :attr:`module` (see :func:`load_weights`)."""
        load_weights(self.module, weights)


def eval_splits(
    cfg: ExperimentConfig, dataset: DomainDataset, fold: LodoFold
) -> Splits:
    """The splits a run evaluates on, keyed by (kind, domain).

    ``target``: the held-out domain (its ``lodo.eval_split``; for the linear probe
    its test split, with its train split as ``probe_train``); ``source``: each
    source domain's test split (``lodo.source_eval``). Empty when nothing is held
    out (``lodo.targets: none``).
    """
    t = fold.target
    if t == "none":
        return {}
    if cfg.evaluation.protocol == "linear_probe":
        return {
            ("probe_train", t): dataset.split(t, "train"),
            ("target", t): dataset.split(t, "test"),
        }
    splits: Splits = {("target", t): dataset.split(t, cfg.lodo.eval_split)}
    if cfg.lodo.source_eval:
        for d in fold.sources:
            s = dataset.split(d, "test")
            if len(s):
                splits[("source", d)] = s
    return splits


def evaluate_classifier(
    task: Task, model: nn.Module, splits: Splits, record: Record
) -> dict[str, Any]:
    """The global model's metrics on the target and on each source's test split."""
    out: dict[str, Any] = {"target": {}, "source": {}}
    for (kind, domain), split in splits.items():
        metrics = task.evaluate(model, split)
        record(kind, domain, metrics)
        if kind == "target":
            out["target"] = metrics
        else:
            out["source"][domain] = metrics
    if out["source"]:
        name, value = worst_group(out["source"], "accuracy")
        out["source_worst"] = {"domain": name, "accuracy": value}
        out["source_mean_accuracy"] = float(
            np.mean([m["accuracy"] for m in out["source"].values()])
        )
    return out


def evaluate_probe(
    task: Task,
    model: nn.Module,
    splits: Splits,
    cfg: ExperimentConfig,
    seed: int,
    record: Record,
) -> dict[str, Any]:
    """Freeze the global encoder; probe the target domain (FedAD, Section 5)."""
    from fedpath.evaluation.probe import linear_probe

    (t,) = {d for kind, d in splits if kind == "target"}
    train, test = splits[("probe_train", t)], splits[("target", t)]
    ev = cfg.evaluation
    metrics = linear_probe(
        task.encode(model, train),
        train.labels,
        task.encode(model, test),
        test.labels,
        folds=ev.probe_folds,
        max_iter=ev.probe_max_iter,
        cs=ev.probe_cs,
        l2=ev.probe_l2,
        seed=seed,
        where=f"domain {t!r} (lodo target)",
    )
    record("target", t, metrics)
    return dict(metrics)


def summarize_clients(per_client: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per-client metrics plus their unweighted mean (the Avg of FedHD's table)."""
    if not per_client:
        return {}
    keys = [
        k
        for k, v in next(iter(per_client.values())).items()
        if isinstance(v, int | float) and k != "n"
    ]
    mean = {
        k: float(np.mean([m[k] for m in per_client.values() if k in m])) for k in keys
    }
    return {"clients": dict(per_client), "clients_mean": mean}
