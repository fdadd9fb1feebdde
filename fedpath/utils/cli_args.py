"""Arguments that several ``fedpath`` subcommands take, each spelled once."""

from __future__ import annotations

import argparse
import os


def add_overrides(
    parser: argparse.ArgumentParser,
    help: str | None = None,
    metavar: str = "key=value",
) -> None:
    """The positional dotted-key config overrides (``train.rounds=5``...)."""
    parser.add_argument("overrides", nargs="*", metavar=metavar, help=help)


def add_quiet(parser: argparse.ArgumentParser, help: str) -> None:
    """``--quiet`` / ``-q``; :func:`is_quiet` also honours ``FEDPATH_QUIET=1``."""
    parser.add_argument("--quiet", "-q", action="store_true", help=help)


def is_quiet(args: argparse.Namespace) -> bool:
    """``--quiet`` was given (on a subcommand that has it) or ``FEDPATH_QUIET=1``."""
    return bool(getattr(args, "quiet", False)) or os.environ.get("FEDPATH_QUIET") == "1"


def add_launcher(parser: argparse.ArgumentParser, status: bool = True) -> None:
    """``--launcher`` / ``--jobs`` / ``--address`` (and ``--status``): how the
    cells of a run or suite are run (:mod:`fedpath.runtime.launch`)."""
    group = parser.add_argument_group("launching the cells (run / fold x seed)")
    group.add_argument(
        "--launcher",
        choices=("serial", "local", "ray"),
        help="serial: one cell after another in this process (the default); "
        "local: --jobs worker processes; ray: one Ray task per cell",
    )
    group.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="worker processes of --launcher local (implies it; default: the "
        "cores); each cell gets runtime.threads = cores // N unless the config sets it",
    )
    group.add_argument(
        "--address",
        metavar="ADDR",
        help="--launcher ray: the Ray head (HOST:PORT, ray://HOST:PORT or auto); "
        "default: start a local Ray instance",
    )
    if status:
        group.add_argument(
            "--status",
            action="store_true",
            help="print which cells are done, running, queued, failed, interrupted "
            "or pending, and run nothing",
        )
