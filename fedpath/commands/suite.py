"""``fedpath demo [NAME]`` and ``fedpath suite FILE`` (``ablate``): several
methods (or variants) run as one suite, then their tables."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fedpath.commands.common import add_common, console, only, packaged_config
from fedpath.commands.execute import execute, load_datasets
from fedpath.commands.table import print_table
from fedpath.config import ConfigError, ExperimentConfig
from fedpath.utils.cli_args import SubParsers, add_launcher, add_overrides, is_quiet

if TYPE_CHECKING:
    from fedpath.data.base import DomainDataset

#: the packaged demos: ``fedpath demo [NAME]``
DEMOS = ("stain", "fedhd", "fedad")


def register_demo(sub: SubParsers) -> None:
    """Add ``demo`` to ``sub``."""
    demo = sub.add_parser(
        "demo",
        help="train the methods on synthetic hospitals, print the table",
        description="Without NAME: leave-one-hospital-out on the synthetic "
        "stain-shift hospitals for every method of the demo suite "
        "(fedpath/configs/demo.yaml) and 2 seeds; prints the papers' table. "
        "NAME 'fedhd': FedHD and its baselines on synthetic slide bags with a "
        "different MIL model per hospital (clients x methods table). NAME 'fedad': "
        "federated self-supervised pre-training, then the linear probe on the "
        "held-out hospital. Overrides apply to every method.",
    )
    add_overrides(demo, "NAME: fedhd, fedad", metavar="[NAME] key=value")
    demo.add_argument("--methods", help="comma-separated subset of the demo's methods")
    demo.add_argument("--resume", action="store_true")
    add_launcher(demo)
    add_common(demo)


def register_suite(sub: SubParsers) -> None:
    """Add ``suite`` (alias ``ablate``) to ``sub``."""
    suite = sub.add_parser(
        "suite",
        aliases=["ablate"],
        help="run every variant of a suite file (ablations), print the table",
        description="A suite file lists labelled variants of one base config (e.g. "
        "configs/ablations/fedstain_components.yaml); each variant runs as its own "
        "experiment and becomes one row of the table.",
    )
    suite.add_argument("suite", type=Path, help="suite YAML file")
    add_overrides(suite, "overrides applied to every variant (e.g. seeds=[0])")
    suite.add_argument("--only", help="comma-separated subset of the variants")
    suite.add_argument(
        "--resume",
        action="store_true",
        help="skip finished cells, continue interrupted ones from their checkpoint",
    )
    add_launcher(suite)
    suite.add_argument(
        "--metric", help="metric to tabulate (default: the suite's, else accuracy)"
    )
    suite.add_argument(
        "--no-table",
        action="store_true",
        help="run only, print no table (for scripts that print their own, e.g. "
        "benchmarks/paper_table.py; fedpath table prints them later)",
    )
    add_common(suite)


def run_demo(args: argparse.Namespace) -> int:
    """Run a packaged demo (the first override word names it) and its tables."""
    from fedpath.runtime.suite import load_suite, suite_metrics

    overrides = list(args.overrides)
    name = overrides.pop(0) if overrides and "=" not in overrides[0] else "stain"
    files = {"stain": "demo", **{d: f"demo_{d}" for d in DEMOS if d != "stain"}}
    if name not in files:
        raise ConfigError(
            f"demo {name!r} does not exist; choices: {', '.join(DEMOS)} (no name: "
            "stain)"
        )
    path = packaged_config(files[name])
    description, configs = load_suite(path, overrides, only(args.methods))
    metrics = suite_metrics(path) or ["accuracy", "balanced_accuracy"]
    if name == "stain" and getattr(args, "launcher", None) is None:
        # its cells (one thread each, demo_base.yaml) in a worker per core (no
        # --jobs: the cores): the same numbers on any machine, and on 2 cores in
        # about 0.6x the time of one process on 2 threads
        args.launcher = "local"
    baseline = "fedavg" if name == "stain" else None
    return _run_configs(
        description, configs, is_quiet(args), args.resume, metrics, args, baseline
    )


def run_suite(args: argparse.Namespace) -> int:
    """Run the variants of a suite file and print their tables."""
    from fedpath.runtime.suite import load_suite, suite_metrics

    description, configs = load_suite(args.suite, args.overrides, only(args.only))
    metrics = [args.metric] if args.metric else suite_metrics(args.suite)
    # --no-table: no metric, so no table at all (the sources' neither)
    metrics = [] if args.no_table else metrics or ["accuracy"]
    return _run_configs(
        description, configs, is_quiet(args), args.resume, metrics, args
    )


def _what_it_shows(
    outs: Sequence[Path], labels: Sequence[str], metric: str, baseline: str
) -> str:
    """The lines under a demo's table: each method against ``baseline`` on
    ``metric`` at the unseen domain, paired over (hospital, seed) units, with
    the interval, the test and the verdict (empty when the runs cannot say)."""
    from fedpath.evaluation.paired import compare_all
    from fedpath.runtime.experiment import collect_rows

    rows = [r for r in collect_rows(outs, "target") if r.method in labels]
    if not rows or not all(metric in r.metrics for r in rows):
        return ""
    if len({r.method for r in rows}) < 2 or baseline not in {r.method for r in rows}:
        return ""
    comps = compare_all(rows, baseline, metric)
    head = (
        f"What this shows ({metric} at the unseen hospital, each method minus "
        f"{baseline} paired over (hospital, seed) units, bootstrap 95% interval):"
    )
    return "\n".join([head, *(f"- {c.line()}" for c in comps)])


def _shape(head: ExperimentConfig, dataset: DomainDataset) -> str:
    """What each method of a suite is evaluated on, for its header line: the
    first method's folds (:func:`fedpath.runtime.experiment.plan_runs`)."""
    from fedpath.runtime.experiment import plan_runs
    from fedpath.utils.progress import plural

    if _per_client(head):
        return f"{len(dataset.domains)} hospitals evaluated on their own test slides"
    folds = {fold.target for fold, _ in plan_runs(head, dataset)}
    return plural(len(folds), "unseen domain")


def _per_client(cfg: ExperimentConfig) -> bool:
    """The suite is scored on each client's own test split (no unseen domain)."""
    return cfg.evaluation.protocol == "local" and cfg.lodo.targets == "none"


def _run_configs(
    description: str,
    configs: Sequence[ExperimentConfig],
    quiet: bool,
    resume: bool,
    metrics: Sequence[str],
    args: argparse.Namespace | None = None,
    baseline: str | None = None,
) -> int:
    """Run ``configs`` and print their tables; with ``baseline``, the line that
    compares each method with it, paired over (hospital, seed) units
    (:func:`_what_it_shows`)."""
    from fedpath.runtime.experiment import find_runs, plan_runs, splits_of
    from fedpath.utils.progress import plural
    from fedpath.utils.progress_display import make_reporter

    args = args or argparse.Namespace()
    make_reporter(quiet)  # a bad FEDPATH_PROGRESS fails before any work
    head = configs[0]
    datasets = load_datasets(configs)
    # counted up front: a bad lodo.targets fails before anything trains
    for cfg in configs:
        plan_runs(cfg, datasets[repr(cfg.data)])
    shape = _shape(head, datasets[repr(head.data)])
    status = getattr(args, "status", False)
    console(quiet and not status).print(
        f"{description}: {plural(len(configs), 'method')} x {shape} x "
        f"{plural(len(head.seeds), 'seed')}"
    )
    start = time.perf_counter()
    code = execute(configs, args, quiet, resume, datasets, suite=True)
    if status:
        return code
    outs = sorted({Path(c.output_dir) / c.name for c in configs})
    console(quiet).print(
        f"finished in {time.perf_counter() - start:.0f} s; runs in "
        f"{', '.join(map(str, outs))}"
    )
    if not metrics or not any(find_runs([o]) for o in outs if o.exists()):
        return code
    labels = [c.method for c in configs]
    split = "clients" if _per_client(head) else "target"
    for metric in metrics:
        print_table(outs, metric, split, "markdown", None, quiet, labels)
    # sources' test splits: none when every source domain is a single slide
    if (
        head.lodo.source_eval
        and head.evaluation.protocol == "classifier"
        and "source_mean" in splits_of([o for o in outs if o.exists()])
    ):
        print_table(outs, "accuracy", "source_mean", "markdown", None, quiet, labels)
    if baseline is not None and not _per_client(head):
        existing = [o for o in outs if o.exists()]
        line = _what_it_shows(existing, labels, metrics[-1], baseline)
        if line:  # part of the tables, printed even when quiet (as they are)
            console(False).print(line, highlight=False, markup=False)
    return code
