"""What a finished run exports: ``model.fpm`` and the clients' own models.

``runtime.export`` chooses the global weights that go into ``model.fpm``: the
``last`` round's, the ``selected`` round's (``partition.validation``) or the
``averaged`` ones (``evaluation.swa_from``); with them go the run's provenance
and the temperature and threshold chosen for them
(:func:`fedpath.runtime.selection.exported_decision`). With ``evaluation.protocol:
local`` every client's deployed model is exported too (``models/<client>.fpm``),
when the task exports client models. ``runtime.export_model: false`` exports
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fedpath.algorithms.base import ClientAlgorithm, ProtocolError, ServerAlgorithm
from fedpath.config import ExperimentConfig
from fedpath.data.partition import ClientData, LodoFold
from fedpath.runtime.evaluator import Evaluator
from fedpath.runtime.persistence import CLIENT_MODELS, MODEL
from fedpath.runtime.selection import exported_decision
from fedpath.types import ArrayDict, ClientState

log = logging.getLogger("fedpath")


def data_provenance(cfg: ExperimentConfig) -> dict[str, Any]:
    """The ``data`` entry of a model file: where its training data came from."""
    return {
        "name": cfg.data.name,
        "root": cfg.data.root,
        "params": dict(cfg.data.params),
    }


def export_global(
    run_dir: Path,
    cfg: ExperimentConfig,
    config_hash: str,
    fold: LodoFold,
    seed: int,
    evaluator: Evaluator,
    last: ArrayDict | None,
    evaluation: Mapping[str, Any],
) -> None:
    """``model.fpm``: the weights ``runtime.export`` chooses (``last``: the last
    global weights), if the task exports its models (MIL models: not yet)."""
    weights, rnd = last, cfg.train.rounds
    which = cfg.runtime.export
    selector, averager = evaluator.selector, evaluator.averager
    if which == "selected" and selector and selector.best:
        weights, rnd = selector.best.weights, selector.best.round
    if which == "averaged" and averager and weights is not None:
        weights = averager.weights(weights)
    if weights is None:
        return
    evaluator.model.load(weights)
    evaluator.task.export(
        run_dir / MODEL,
        evaluator.model.module,
        {
            "config_hash": config_hash,
            "method": cfg.method,
            "trained_on": list(fold.sources),
            "held_out": fold.target,
            "seed": seed,
            "data": data_provenance(cfg),
            "round": rnd,
            "selection": which,
            **exported_decision(evaluation, which),
            "validation": exported_validation(evaluation, which),
            "expected": evaluator.expected,
        },
    )


def exported_validation(evaluation: Mapping[str, Any], which: str) -> dict[str, Any]:
    """The ``validation`` entry of a model file: the exported weights' (``which``:
    ``last``, ``selected`` or ``averaged``) figures on the source validation
    slides: the selection score, n, NLL and ECE before and after the
    temperature, the operating point's rates; {} without validation."""
    block = evaluation.get(which, {}) if which != "last" else evaluation
    calibrated = block.get("calibrated", {}).get("validation")
    if not isinstance(calibrated, Mapping):
        return {}
    score = block.get("validation")  # last: the round's block; else its value
    if isinstance(score, Mapping):
        score = score.get("value")
    out = {
        "metric": evaluation.get("validation", {}).get("metric"),
        "value": score,
        **calibrated,
    }
    op = block.get("operating_point", {})
    if "validation" in op:
        out["operating_point"] = op["validation"]
    return out


def export_clients(
    run_dir: Path,
    cfg: ExperimentConfig,
    config_hash: str,
    fold: LodoFold,
    seed: int,
    evaluator: Evaluator,
    server: ServerAlgorithm[Any],
    clients: Mapping[str, ClientData],
    states: Mapping[str, ClientState],
    client_half: Callable[[str, int], ClientAlgorithm[Any]],
) -> None:
    """Every client's deployed model as ``models/<client>.fpm``, when the task
    exports client models (its ``export_client``: the slide-bag task,
    :mod:`fedpath.mil.export`). Clients without a model here are skipped (over
    Flower the client states live on the nodes)."""
    export = getattr(evaluator.task, "export_client", None)
    if export is None:
        return
    rounds = cfg.train.rounds
    written: dict[Path, str] = {}
    for cid in sorted(states):
        half = client_half(cid, rounds)
        try:
            model = half.deployed_model(server.evaluate_payload(cid), states[cid])
        except ProtocolError as err:
            log.warning("client %s: no model to export (%s)", cid, err)
            continue
        meta = {
            "domain": clients[cid].domain,
            "architecture": str(states[cid].scalars.get("architecture", "")),
            "config_hash": config_hash,
            "method": cfg.method,
            "federation": list(fold.sources),
            "seed": seed,
            "round": rounds,
            "data": data_provenance(cfg),
        }
        path = export(run_dir / CLIENT_MODELS, cid, model, meta)
        if path in written:
            raise RuntimeError(
                f"clients {written[path]!r} and {cid!r} map to one model file "
                f"{path}; rename one of them"
            )
        written[path] = cid
