"""``fedpath run CONFIG``: every leave-one-domain-out fold x seed of one config."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpath.commands.common import add_common, console
from fedpath.commands.execute import execute
from fedpath.utils.cli_args import SubParsers, add_launcher, add_overrides, is_quiet


def register(sub: SubParsers) -> None:
    """Add ``run`` to ``sub``."""
    run = sub.add_parser(
        "run",
        help="run an experiment config (every LODO fold x seed)",
        description="Run an experiment: each target domain of lodo.targets is held out "
        "once, the other domains train together, for every seed. Overrides use "
        "dotted keys, e.g. train.rounds=5 algorithm.name=fedprox "
        "algorithm.params.mu=0.1.",
    )
    run.add_argument("config", type=Path, help="experiment YAML file")
    add_overrides(run, "config overrides (values parsed as YAML)")
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue interrupted runs from their last checkpoint and "
        "skip finished ones",
    )
    run.add_argument("--table", action="store_true", help="print the results table")
    add_launcher(run)
    add_common(run)


def run(args: argparse.Namespace) -> int:
    """Run every cell of the config; with ``--table``, print the results table."""
    from fedpath.commands.table import print_table
    from fedpath.config import load_config
    from fedpath.runtime.experiment import run_dir_for

    quiet = is_quiet(args)
    cfg = load_config(args.config, args.overrides)
    code = execute([cfg], args, quiet, args.resume)
    if getattr(args, "status", False):
        return code
    out = run_dir_for(cfg, "x", 0).parent.parent
    console(quiet).print(f"results in {out}")
    if args.table and code == 0:
        print_table([out], "accuracy", None, "markdown", None, quiet)
    return code
