"""Arguments that several ``fedpath`` subcommands take, each spelled once."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Sequence
from typing import TypeAlias

#: What ``parser.add_subparsers()`` returns: each command module's ``register``
#: functions add their subcommand's parser to it (a string: the class is generic
#: only to type checkers).
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def int_at_least(low: int, why: str = "") -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low``, else argparse's one-line
    usage error naming the option (``argument --batch-size: expected a positive
    integer, got '0'``) instead of a crash or a wrong message later."""
    expected = {1: "a positive integer", 0: "an integer >= 0"}.get(
        low, f"an integer >= {low}"
    )
    if why:
        expected += f" ({why})"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    parse.__name__ = expected  # what argparse would name in its own message
    return parse


def positive_number(text: str) -> float:
    """An argparse ``type``: a finite number > 0 (NaN and infinities refused)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def open_probability(text: str) -> float:
    """An argparse ``type``: a number strictly between 0 and 1 (an operating
    point)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def add_overrides(
    parser: argparse.ArgumentParser,
    help: str | None = None,
    metavar: str = "key=value",
) -> None:
    """The positional dotted-key config overrides (``train.rounds=5``...)."""
    parser.add_argument("overrides", nargs="*", metavar=metavar, help=help)


def is_override(word: str) -> bool:
    """``word`` reads as a ``key=value`` override (not an option, not a path)."""
    key, eq, _ = word.partition("=")
    return bool(eq) and bool(key) and not word.startswith("-") and "/" not in key


def parse_args_overrides_anywhere(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """``parser.parse_args``, except that ``key=value`` overrides may also come
    after the options (``fedpath suite S.yaml --only a,b seeds=[0]``): argparse
    stops filling a ``nargs="*"`` positional at the first option, so a late
    override would otherwise be an "unrecognized argument". Late overrides are
    appended in order (a later one wins, as on the command line); anything else
    left over is the usual error."""
    args, extra = parser.parse_known_args(argv)
    if hasattr(args, "overrides"):
        args.overrides = [*(args.overrides or []), *filter(is_override, extra)]
        extra = [w for w in extra if not is_override(w)]
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


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
        type=int_at_least(1),
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
