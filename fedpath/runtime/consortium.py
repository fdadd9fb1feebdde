"""Consortium mode: ``lodo.targets: none`` with ``partition.validation`` > 0.

Every hospital trains and none is held out, so the model a consortium ships is
judged on the hospitals' validation slides only: the round is chosen there, the
temperature and the operating point are fitted there
(:mod:`fedpath.runtime.selection`), and ``final.json`` has no target block. This
module holds the checks of that mode's input and of the operating point's class,
and the ``validation`` split that ``fedpath table`` shows for such runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedpath.config import RUN_LOCAL_KEYS, ConfigError, ExperimentConfig, load_config
from fedpath.data.base import Split
from fedpath.data.partition import ClientData
from fedpath.runtime.persistence import FINAL
from fedpath.runtime.records import read_final
from fedpath.runtime.same_config import flat_keys
from fedpath.tasks import Task

#: the target name of a consortium run (its folder, its rows in tables)
CONSORTIUM = "none"


def check_consortium_validation(
    cfg: ExperimentConfig,
    clients: Sequence[ClientData],
    splits: Mapping[str, Split],
) -> None:
    """Consortium mode (``lodo.targets: none``): every hospital must hold
    validation slides, else its data would enter no choice of the shipped model
    and its validation figures would be missing without a word."""
    if cfg.lodo.targets != "none":
        return
    have = {c.domain for c in clients if c.client_id in splits}
    missing = sorted({c.domain for c in clients} - have)
    if missing:
        raise ConfigError(
            f"config key 'partition.validation': {cfg.partition.validation:g} "
            f"leaves {', '.join(map(repr, missing))} without a "
            "validation slide (a hospital needs two or more training slides, one "
            "held out: give it more slides, or per-image slide ids)"
        )


def check_positive_class(cfg: ExperimentConfig, task: Task) -> None:
    """``evaluation.positive_class`` must be a class of the model, and the one
    whose probability the operating point thresholds (the second listed)."""
    name = cfg.evaluation.positive_class
    if name is None:
        return
    classes = list(task.classes)
    listed = ", ".join(map(repr, classes))
    if name not in classes:
        raise ConfigError(
            f"config key 'evaluation.positive_class': {name!r} is not a class of "
            f"the model (its classes: {listed}); expected one of them"
        )
    if len(classes) == 2 and classes.index(name) != 1:
        raise ConfigError(
            f"config key 'evaluation.positive_class': {name!r} is listed first "
            f"(classes: {listed}); the operating point thresholds the second "
            "class's probability: list the classes with it second"
        )


def validation_split(ev: Mapping[str, Any]) -> dict[str, Any] | None:
    """The metrics ``fedpath table --split validation`` shows for a run's final
    ``evaluation`` (or its ``selected`` / ``averaged`` block): the mean over the
    clients of their validation metrics (None: the run scored no validation)."""
    block = ev.get("validation")
    if not isinstance(block, Mapping) or not block.get("clients"):
        clients = None
    else:
        clients = [m for m in block["clients"].values() if isinstance(m, Mapping)]
    if not clients:
        # a selected block carries only its validation score
        if isinstance(block, (int, float)) and "metric" in ev:
            return {str(ev["metric"]): float(block)}
        return None
    keys = [
        k
        for k, v in clients[0].items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "n"
    ]
    out: dict[str, Any] = {
        k: float(sum(m[k] for m in clients) / len(clients))
        for k in keys
        if all(k in m for m in clients)
    }
    out["n"] = int(sum(int(m.get("n", 0)) for m in clients))
    return out


#: config keys that may differ between a consortium run and the leave-one-out
#: runs of its recipe (where and under which name they ran, what is held out,
#: the method's label in tables; not ``lodo.sources``: which hospitals
#: train is the recipe); ``evaluation.adapt_bn`` only adds a score
#: with the held-out domain's BatchNorm statistics (a consortium has no held-out
#: domain), and the operating point (``target_sensitivity``, ``positive_class``)
#: is a threshold chosen on the validation slides after training: the weights
#: and the balanced accuracy the estimate carries are the same either way
NOT_RECIPE = (
    *RUN_LOCAL_KEYS,
    "name",
    "label",
    "seeds",
    "lodo.targets",
    "lodo.eval_split",
    "lodo.source_eval",
    "evaluation.expected",
    "evaluation.adapt_bn",
    "evaluation.target_sensitivity",
    "evaluation.positive_class",
)


#: how often rounds are scored: part of the recipe only through round selection
EVAL = "train.eval_every"


def recipe(cfg: ExperimentConfig) -> dict[str, Any]:
    """``cfg`` flattened to dotted keys, without :data:`NOT_RECIPE`; without
    ``train.eval_every`` too unless the exported weights are the ``selected``
    round's: the last round's and the round average's do not depend on which
    rounds were scored."""
    skip = NOT_RECIPE if cfg.runtime.export == "selected" else (*NOT_RECIPE, EVAL)
    return {
        dotted: value
        for dotted, value in flat_keys(cfg.to_dict()).items()
        if not any(dotted == k or dotted.startswith(f"{k}.") for k in skip)
    }


def expected_estimate(cfg: ExperimentConfig) -> dict[str, Any]:
    """The ``expected`` entry of a consortium model file: the leave-one-hospital
    -out runs under ``evaluation.expected`` (run folders, or folders above them)
    of the same recipe, their balanced accuracy per held-out hospital (mean over
    seeds, of the weights ``runtime.export`` exports), its mean, min and max;
    with ``evaluation.target_sensitivity`` and runs that all chose an operating
    point for that sensitivity, how it held at their held-out hospitals
    (``operating_point``, :func:`transferred_point`); {} without the key. A
    run of another recipe, a consortium run, or a folder without finished runs
    is a :class:`ConfigError` naming the key."""
    if not cfg.evaluation.expected:
        return {}
    key = "config key 'evaluation.expected'"
    if cfg.lodo.targets != CONSORTIUM:
        raise ConfigError(
            f"{key}: only for a consortium run (lodo.targets: none); this run "
            f"holds out {cfg.lodo.targets!r}"
        )
    which, mine = cfg.runtime.export, recipe(cfg)
    per: dict[str, list[float]] = {}
    points: dict[str, list[tuple[float, float]]] = {}
    all_pointed = True
    hashes, seeds = set(), set()
    for run in _finished(cfg.evaluation.expected, key):
        other = load_config(run / "config.yaml")
        theirs = recipe(other)
        diff = sorted(
            k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)
        )
        if diff:
            raise ConfigError(
                f"{key}: run {str(run)!r} is another recipe (differs in "
                f"{', '.join(diff[:5])}); expected the leave-one-out runs of this "
                "config (only lodo, name and seeds may differ)"
            )
        rec = read_final(run)
        if rec["target"] == CONSORTIUM:
            raise ConfigError(
                f"{key}: run {str(run)!r} is a consortium run (nothing held out); "
                "expected leave-one-hospital-out runs"
            )
        ev = rec["evaluation"]
        block = ev if which == "last" else ev.get(which, {})
        value = block.get("target", {}).get("balanced_accuracy")
        if not isinstance(value, (int, float)):
            raise ConfigError(
                f"{key}: run {str(run)!r} has no balanced accuracy of its "
                f"{which!r} weights on its held-out hospital"
            )
        per.setdefault(rec["target"], []).append(float(value))
        point = block.get("operating_point", {})
        at = point.get("target", {})
        if point.get("target_sensitivity") == cfg.evaluation.target_sensitivity and (
            "sensitivity" in at
        ):
            pair = (float(at["sensitivity"]), float(at["specificity"]))
            points.setdefault(rec["target"], []).append(pair)
        else:
            all_pointed = False
        hashes.add(other.hash())
        seeds.add(int(rec["seed"]))
    out: dict[str, Any] = {
        "metric": "balanced_accuracy",
        "weights": which,
        **over_hospitals(per),
        "hospitals": len(per),
        "seeds": sorted(seeds),
        "config_hash": sorted(hashes),
    }
    if cfg.evaluation.target_sensitivity is not None and all_pointed:
        out["operating_point"] = transferred_point(
            cfg.evaluation.target_sensitivity, points
        )
    return out


def transferred_point(
    target_sensitivity: float, points: Mapping[str, Sequence[tuple[float, float]]]
) -> dict[str, Any]:
    """How an operating point chosen on validation slides held at each held-out
    hospital: ``points`` maps a hospital to its runs' (sensitivity,
    specificity) at their own threshold; per hospital the mean over seeds, then
    the mean, min and max over hospitals."""
    out: dict[str, Any] = {"target_sensitivity": target_sensitivity}
    for i, name in enumerate(("sensitivity", "specificity")):
        out[name] = over_hospitals({t: [p[i] for p in v] for t, v in points.items()})
    return out


def over_hospitals(values: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """``values`` maps a hospital to its runs' figures: per hospital the mean
    over its runs (``per_hospital``, by name), then their ``mean``, ``min`` and
    ``max`` over hospitals."""
    per = {t: sum(v) / len(v) for t, v in sorted(values.items())}
    return {
        "per_hospital": per,
        "mean": sum(per.values()) / len(per),
        "min": min(per.values()),
        "max": max(per.values()),
    }


def _finished(paths: Sequence[str], key: str) -> list[Path]:
    """The finished run folders (with ``final.json``) under ``paths``."""
    runs: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            raise ConfigError(f"{key}: {raw!r} is not a folder")
        runs.extend(sorted(f.parent for f in p.rglob(FINAL)))
    if not runs:
        raise ConfigError(
            f"{key}: no finished runs (folders with {FINAL}) under "
            f"{', '.join(map(repr, paths))}"
        )
    return runs
