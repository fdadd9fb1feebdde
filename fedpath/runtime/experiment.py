"""Experiments: a dataset, a leave-one-domain-out plan, seeds; one run per fold x seed.

Layout of the output (one directory per run, everything afterwards is computed from
the files in it)::

    {output_dir}/{name}/{algorithm}/{target}/seed{seed}/
        config.yaml      the fully resolved config
        results.jsonl    one flat JSON record per round / evaluation / timing
        checkpoint.pt    server + client state after the last completed round
        final.json       final metrics (written last: its presence means "done")
        model.fpm        the final global model (self-describing; evaluate/predict)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from fedpath.config import (
    ConfigError,
    DataConfig,
    ExperimentConfig,
    resolve_data_root,
    resolve_params,
)
from fedpath.data.base import DATASETS, DomainDataset
from fedpath.data.partition import LodoFold, lodo_plan
from fedpath.evaluation.tables import ResultRow
from fedpath.evaluation.units_file import is_units_file, read_units, rows_for
from fedpath.runtime.consortium import CONSORTIUM, validation_split
from fedpath.runtime.environment import fingerprint
from fedpath.runtime.inprocess import InProcessRun
from fedpath.runtime.persistence import FINAL
from fedpath.runtime.records import read_final
from fedpath.tasks import prepare_dataset
from fedpath.utils.progress import Reporter


def load_dataset(cfg: DataConfig) -> DomainDataset:
    """Instantiate the configured (registered) dataset."""
    schema = DATASETS.params(cfg.name)
    params = resolve_params(schema, cfg.params, "data.params") if schema else None
    return DATASETS.get(cfg.name)(params, resolve_data_root(cfg.root))


def run_dir_for(cfg: ExperimentConfig, target: str, seed: int) -> Path:
    safe = target.replace("/", "_")
    return Path(cfg.output_dir) / cfg.name / cfg.method / safe / f"seed{seed}"


def plan_runs(
    cfg: ExperimentConfig, dataset: DomainDataset
) -> list[tuple[LodoFold, int]]:
    """Every (fold, seed) of ``cfg``, in the order :func:`run_experiment` runs them
    (a suite counts its runs with it, before any has started: ``dataset`` may be
    the loaded one, not yet prepared, as the folds depend on its domains only)."""
    folds = lodo_plan(
        dataset, cfg.lodo.targets, cfg.evaluation.probe_train, cfg.lodo.sources
    )
    return [(fold, seed) for fold in folds for seed in cfg.seeds]


def run_experiment(
    cfg: ExperimentConfig,
    reporter: Reporter | None = None,
    resume: bool = False,
    dataset: DomainDataset | None = None,
    before_run: Callable[[Path], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every fold x seed of ``cfg``; return their final records.

    ``before_run``: called with each run's directory before it starts (the suite
    marks its lock ``running``)."""
    reporter = reporter or Reporter()
    if cfg.runtime.threads:
        torch.set_num_threads(cfg.runtime.threads)
    dataset = prepare_dataset(cfg, dataset or load_dataset(cfg.data), reporter)
    plan = plan_runs(cfg, dataset)
    reporter.start_runs(len(plan))
    config_hash = cfg.hash()  # once: every run of the plan has the same config
    records = []
    for fold, seed in plan:
        run_dir = run_dir_for(cfg, fold.target, seed)
        if before_run is not None:
            before_run(run_dir.absolute())
        run = InProcessRun(cfg, dataset, fold, seed, run_dir, reporter, config_hash)
        records.append(run.run(resume=resume))
    return records


def find_runs(paths: Iterable[Path]) -> list[Path]:
    """Every finished run directory (holding ``final.json``) under ``paths``
    (a units file among them holds none: :func:`units_files`)."""
    found: list[Path] = []
    for p in paths:
        if not p.exists():
            raise ConfigError(f"results path {str(p)!r} does not exist")
        if is_units_file(p):
            continue
        if (p / FINAL).is_file():
            found.append(p)
        else:
            found.extend(sorted(f.parent for f in p.rglob(FINAL)))
    return found


def units_files(paths: Iterable[Path]) -> list[Path]:
    """The units files (:mod:`fedpath.evaluation.units_file`) among ``paths``."""
    return [p for p in paths if p.exists() and is_units_file(p)]


#: the splits of ``fedpath table --split``, in the order one is picked by default
SPLITS = ("target", "clients", "source_mean", "source_worst", "adapted", "validation")
#: which weights of a run a table reads (``--select``), and what a run without
#: them was trained with
SELECTS = ("last", "selected", "averaged")
WHY_NOT = {"selected": "partition.validation=0", "averaged": "evaluation.swa_from=0"}


def _split_metrics(ev: dict[str, Any], split: str) -> dict[str, Any] | None:
    """The metrics of ``split`` in a run's final ``evaluation``; None: the run has
    none (``target`` of a ``lodo.targets: none`` run, ``clients`` of a run without
    ``evaluation.protocol: local``, the sources of one without source_eval)."""
    if split == "target":
        return dict(ev["target"]) if ev.get("target") else None
    if split == "validation":  # the sources' validation slides (consortium mode)
        return validation_split(ev)
    if split == "adapted":  # evaluation.adapt_bn: BatchNorm adapted to the target
        block = ev.get("adapted", {}).get("target")
        return dict(block) if block else None
    if split == "source_mean":
        if "source_mean_accuracy" not in ev:
            return None
        return {"accuracy": ev["source_mean_accuracy"]}
    if split == "source_worst":
        if "accuracy" not in ev.get("source_worst", {}):
            return None
        return {"accuracy": ev["source_worst"]["accuracy"]}
    raise ConfigError(f"split: expected {', '.join(map(repr, SPLITS))}, got {split!r}")


def splits_of(paths: Sequence[Path]) -> list[str]:
    """The splits (:data:`SPLITS`, in that order) that at least one finished run
    under ``paths`` has metrics for: what ``fedpath table --split`` can show."""
    have: set[str] = set()
    for units in units_files(paths):
        have.update(split for split, _ in read_units(units))
    for run in find_runs(paths):
        ev = read_final(run)["evaluation"]  # checked: names a damaged file
        have.update(s for s in SPLITS if s != "clients" and _split_metrics(ev, s))
        if ev.get("clients"):
            have.add("clients")
    return [s for s in SPLITS if s in have]


def collect_rows(
    paths: Sequence[Path], split: str = "target", select: str = "last"
) -> list[ResultRow]:
    """Final metrics of every finished run under ``paths`` as table rows, and
    the units of any units file among them (a ``.csv`` path:
    :mod:`fedpath.evaluation.units_file`).

    ``split``: ``target`` (the unseen domain), ``source_mean`` (mean accuracy over
    the sources' test splits), ``source_worst`` (the worst source domain) or
    ``clients`` (each client's own test split, ``evaluation.protocol: local``: one
    row per client, so the table is clients x methods as in FedHD's) or
    ``adapted`` (the target with BatchNorm statistics re-estimated on its
    unlabelled images: runs with ``evaluation.adapt_bn``) or ``validation``
    (the mean over the clients of their validation metrics,
    ``partition.validation`` > 0: all a consortium run, ``lodo.targets: none``
    with ``evaluation.protocol: classifier``, has; its row is ``consortium``).
    ``select``: the ``last`` round's global model, the round ``selected`` on
    the sources' validation slides (``partition.validation`` > 0), or the
    ``averaged`` weights of the last rounds (``evaluation.swa_from``); the last
    two for the target split only (or adapted). A run without metrics for
    ``split`` gives no row; when no run has any, the error names the splits these
    runs have (:func:`splits_of`).
    """
    if select not in SELECTS:
        raise ConfigError(
            f"select: expected {', '.join(map(repr, SELECTS))}, got {select!r}"
        )
    if split not in SPLITS:
        raise ConfigError(
            f"split: expected {', '.join(map(repr, SPLITS))}, got {split!r}"
        )
    if select != "last" and split not in ("target", "adapted", "validation"):
        raise ConfigError(
            f"--select {select}: only --split target (or adapted, validation) has "
            f"{select} "
            f"metrics, got --split {split}"
        )
    rows = [r for f in units_files(paths) for r in rows_for(f, split, select, SPLITS)]
    metrics: Mapping[str, Any] | None
    runs = find_runs(paths)
    for run in runs:
        rec = read_final(run)
        ev = rec.get("evaluation", {})
        env = fingerprint(rec.get("environment"))
        if split == "clients":
            for cid, metrics in ev.get("clients", {}).items():
                rows.append(
                    ResultRow(rec["method"], cid, int(rec["seed"]), metrics, env)
                )
            continue
        if select != "last":
            if select not in ev:
                raise ConfigError(
                    f"--select {select}: run {str(run)!r} has no {select} weights "
                    f"(it was trained with {WHY_NOT[select]}); use --select last"
                )
            metrics = _split_metrics(ev[select], split)
        else:
            metrics = _split_metrics(ev, split)
        if metrics is not None:
            # a consortium run (lodo.targets: none) holds nothing out: its row
            # is the consortium's, scored on the hospitals' validation slides
            target = "consortium" if rec["target"] == CONSORTIUM else rec["target"]
            row = ResultRow(rec["method"], target, int(rec["seed"]), metrics, env)
            rows.append(row)
    where = ", ".join(map(str, paths))
    if rows and not runs:  # units files only: each checked in rows_for
        return rows
    if not runs:
        raise ConfigError(f"no finished runs (directories with {FINAL}) under {where}")
    if not rows:
        have = splits_of(paths)
        hint = (
            f"these runs have --split {' / '.join(have)}; use --split {have[0]}"
            if have
            else "these runs recorded no metrics"
        )
        raise ConfigError(
            f"--split {split}: none of the {len(runs)} finished runs under {where} "
            f"has metrics for it (runs with lodo.targets: none are scored per "
            f"client: --split clients); {hint}"
        )
    return rows
