"""``fedpath``: run experiments, the demo, and turn run directories into tables.

Every subcommand is reachable through :func:`main` (``main(argv) -> exit code``), so
the tests drive the real command line in-process.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from rich.console import Console

from fedpath import __version__
from fedpath.config import ConfigError, load_config
from fedpath.data.base import DataError
from fedpath.registry import UnknownNameError

DEMO_METHODS = ("fedavg", "fedprox", "fedbn")


def _packaged_config(name: str) -> Path:
    return Path(str(resources.files("fedpath") / "configs" / f"{name}.yaml"))


def _console(quiet: bool) -> Console:
    return Console(quiet=quiet, soft_wrap=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedpath",
        description="Federated domain generalization for computational pathology.",
    )
    parser.add_argument("--version", action="version", version=f"fedpath {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--quiet",
            "-q",
            action="store_true",
            help="no progress bars or status lines (also FEDPATH_QUIET=1); tables and "
            "errors still print",
        )

    run = sub.add_parser(
        "run",
        help="run an experiment config (every LODO fold x seed)",
        description="Run an experiment: each target domain of lodo.targets is held out "
        "once, the other domains train together, for every seed. Overrides use "
        "dotted keys, e.g. train.rounds=5 algorithm.name=fedprox "
        "algorithm.params.mu=0.1.",
    )
    run.add_argument("config", type=Path, help="experiment YAML file")
    run.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config overrides (values parsed as YAML)",
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue interrupted runs from their last checkpoint and "
        "skip finished ones",
    )
    run.add_argument("--table", action="store_true", help="print the results table")
    common(run)

    demo = sub.add_parser(
        "demo",
        help="train every method on the synthetic hospitals, print the table",
        description="Leave-one-hospital-out on the synthetic stain-shift hospitals for "
        f"each method ({', '.join(DEMO_METHODS)}) and 2 seeds; prints the table.",
    )
    demo.add_argument("overrides", nargs="*", metavar="key=value")
    demo.add_argument(
        "--methods",
        default=",".join(DEMO_METHODS),
        help="comma-separated algorithms (default: %(default)s)",
    )
    demo.add_argument("--resume", action="store_true")
    common(demo)

    table = sub.add_parser(
        "table",
        help="turn run directories into the papers' table",
        description="Collect final.json of every finished run under the given paths "
        "and "
        "print method x target (mean ± std over seeds, Avg column).",
    )
    table.add_argument("paths", nargs="+", type=Path)
    table.add_argument(
        "--metric",
        default="accuracy",
        help="accuracy, balanced_accuracy, macro_f1, auroc or mcc",
    )
    table.add_argument(
        "--split", default="target", choices=["target", "source_mean", "source_worst"]
    )
    table.add_argument(
        "--format", default="markdown", choices=["markdown", "csv", "latex"]
    )
    table.add_argument("--out", type=Path, help="also write the table to this file")
    common(table)

    lst = sub.add_parser("list", help="list registered datasets, backbones, algorithms")
    lst.add_argument(
        "what",
        nargs="?",
        default="all",
        choices=["all", "datasets", "backbones", "algorithms"],
    )

    data = sub.add_parser("data", help="describe a dataset (domains, classes, counts)")
    data.add_argument(
        "--config", type=Path, help="experiment YAML (default: the demo's)"
    )
    data.add_argument("overrides", nargs="*", metavar="key=value")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = build_parser().parse_args(argv)
    quiet = (
        bool(getattr(args, "quiet", False)) or os.environ.get("FEDPATH_QUIET") == "1"
    )
    err = Console(stderr=True, soft_wrap=True)
    try:
        if args.command == "run":
            return _cmd_run(args, quiet)
        if args.command == "demo":
            return _cmd_demo(args, quiet)
        if args.command == "table":
            return _cmd_table(args, quiet)
        if args.command == "list":
            return _cmd_list(args)
        if args.command == "data":
            return _cmd_data(args)
    except (ConfigError, DataError, UnknownNameError) as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted; continue with --resume")
        return 130
    return 1


def _cmd_run(args: argparse.Namespace, quiet: bool) -> int:
    from fedpath.runtime.experiment import run_dir_for, run_experiment
    from fedpath.utils.progress import make_reporter

    cfg = load_config(args.config, args.overrides)
    with make_reporter(quiet) as rep:
        run_experiment(cfg, rep, resume=args.resume)
    out = run_dir_for(cfg, "x", 0).parent.parent
    _console(quiet).print(f"results in {out}")
    if args.table:
        _print_table([out], "accuracy", "target", "markdown", None, quiet)
    return 0


def _cmd_demo(args: argparse.Namespace, quiet: bool) -> int:
    from fedpath.runtime.experiment import load_dataset, run_experiment
    from fedpath.utils.progress import make_reporter

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    base = load_config(_packaged_config("demo"), args.overrides)
    configs = [
        base.replace(**{"algorithm.name": m, "algorithm.params": {}}) for m in methods
    ]
    console = _console(quiet)
    dataset = load_dataset(base.data)
    console.print(
        f"fedpath demo: {len(methods)} methods x {len(dataset.domains)} unseen "
        "hospitals "
        f"x {len(base.seeds)} seeds on the synthetic stain-shift hospitals"
    )
    start = time.perf_counter()
    with make_reporter(quiet) as rep:
        for cfg in configs:
            run_experiment(cfg, rep, resume=args.resume, dataset=dataset)
    out = Path(base.output_dir) / base.name
    console.print(f"finished in {time.perf_counter() - start:.0f} s; runs in {out}")
    for metric in ("accuracy", "balanced_accuracy"):
        _print_table([out], metric, "target", "markdown", None, quiet)
    _print_table([out], "accuracy", "source_mean", "markdown", None, quiet)
    return 0


def _cmd_table(args: argparse.Namespace, quiet: bool) -> int:
    _print_table(args.paths, args.metric, args.split, args.format, args.out, quiet)
    return 0


def _print_table(
    paths: Sequence[Path],
    metric: str,
    split: str,
    fmt: str,
    out: Path | None,
    quiet: bool,
) -> None:
    from fedpath.evaluation.metrics import METRIC_NAMES
    from fedpath.evaluation.tables import build_table, to_csv, to_latex, to_markdown
    from fedpath.runtime.experiment import collect_rows
    from fedpath.utils.io import atomic_write_text

    if metric not in METRIC_NAMES:
        raise ConfigError(
            f"--metric: expected one of {', '.join(METRIC_NAMES)}, got {metric!r}"
        )
    table = build_table(collect_rows(paths, split), metric=metric)
    text = {"markdown": to_markdown, "csv": to_csv, "latex": to_latex}[fmt](table)
    title = {
        "target": "unseen target domain",
        "source_mean": "source domains' test splits (mean)",
        "source_worst": "worst source domain",
    }[split]
    console = _console(False)  # the table is the output asked for, even when quiet
    if fmt == "markdown":
        console.print(
            f"\n{metric} (%) on the {title}, mean ± std over seeds\n", highlight=False
        )
    console.print(text, highlight=False, markup=False)
    if out is not None:
        atomic_write_text(out, text)


def _cmd_list(args: argparse.Namespace) -> int:
    from fedpath.algorithms.base import ALGORITHMS
    from fedpath.data.base import DATASETS
    from fedpath.models.backbones import BACKBONES
    from fedpath.registry import describe

    console = Console(soft_wrap=True)
    for title, reg in (
        ("datasets", DATASETS),
        ("backbones", BACKBONES),
        ("algorithms", ALGORITHMS),
    ):
        if args.what in ("all", title):
            console.print(f"[bold]{title}[/]")
            for name, doc in describe(reg):
                console.print(f"  {name:<14} {doc}", highlight=False)
    return 0


def _cmd_data(args: argparse.Namespace) -> int:
    from rich.table import Table

    from fedpath.runtime.experiment import load_dataset

    cfg = load_config(args.config or _packaged_config("demo"), args.overrides)
    ds = load_dataset(cfg.data)
    rows = ds.counts()
    table = Table(
        title=f"{ds.name}: {len(ds.domains)} domains, classes {ds.classes}, "
        f"{ds.image_size}px"
    )
    for col in rows[0]:
        table.add_column(col)
    for r in rows:
        table.add_row(*(str(v) for v in r.values()))
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
