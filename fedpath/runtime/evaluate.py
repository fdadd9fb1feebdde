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
    its test split); ``source``: each source domain's test split
    (``lodo.source_eval``). Empty when nothing is held out (``lodo.targets:
    none``).

    ``probe_train`` (the linear probe's training data): the target's own train
    split (FedAD Sec. 5.5, ``evaluation.probe_train: []``), or the train split of
    each domain listed in ``evaluation.probe_train`` (Sec. 5.3.2: hospitals that
    took no part in federated training, kept out of ``fold.sources`` by
    :func:`fedpath.data.partition.lodo_plan`). Their train splits, not all of
    their samples: the same labelled part that Sec. 5.5 fits on and that a
    source domain trains on, so the two protocols differ only in *whose* train
    split fits the probe; and no test split is ever fitted on, so a listed
    hospital's test split can still score a run that holds that hospital out.
    """
    t = fold.target
    if t == "none":
        return {}
    if cfg.evaluation.protocol == "linear_probe":
        fit_on = cfg.evaluation.probe_train or [t]
        return {
            **{("probe_train", d): dataset.split(d, "train") for d in fit_on},
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
    """Freeze the global encoder; probe the target domain (FedAD, Section 5).

    The probe is fitted on the ``probe_train`` splits (pooled, in the order of
    ``splits``; see :func:`eval_splits`) and tested on the target's. With
    ``evaluation.probe_train`` set, the metrics carry ``probe_train``, the
    domains it was fitted on (Sec. 5.3.2), so that a table can tell the two
    protocols apart; without it (Sec. 5.5) they are as they always were.
    """
    from fedpath.evaluation.probe import linear_probe

    (t,) = {d for kind, d in splits if kind == "target"}
    fit_on = [d for kind, d in splits if kind == "probe_train"]
    train = Split.concat([splits[("probe_train", d)] for d in fit_on])
    test = splits[("target", t)]
    ev = cfg.evaluation
    where = f"domain {t!r} (lodo target)"
    if ev.probe_train:
        where += f", probe trained on {', '.join(map(repr, fit_on))}"
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
        where=where,
    )
    if ev.probe_train:
        metrics = {**metrics, "probe_train": fit_on}
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
