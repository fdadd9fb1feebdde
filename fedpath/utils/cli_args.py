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
