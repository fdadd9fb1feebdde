"""What the ``fedpath flower`` subcommands share: options declared as tables of
``(key, type, help)``, the TLS options, checked input files, and handing over to
a Flower command. Imports no Flower until a command runs."""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedpath.config import ConfigError

#: A node option: its node-config key, how to parse its text, its help.
Option = tuple[str, Callable[[str], Any], str | None]


def tls_args(
    p: argparse.ArgumentParser,
    option: str = "--ca",
    help_text: str = "CA certificate of the SuperLink",
) -> None:
    """TLS files (``--ca`` for the nodes and the flwr CLI) or ``--insecure``."""
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument(option, type=Path, help=help_text)
    group.add_argument("--insecure", action="store_true", help="no TLS (trials only)")


def add_options(p: argparse._ActionsContainer, options: tuple[Option, ...]) -> None:
    """One ``--KEY`` option per row of ``options``, named after its key."""
    for key, kind, help_text in options:
        p.add_argument(f"--{key}", type=kind, help=help_text)


def option(args: argparse.Namespace, key: str) -> Any:
    """The value of the option named after node-config ``key`` (None if not given)."""
    return getattr(args, key.replace("-", "_"))


def flwr_home() -> Path:
    """The flwr CLI's home folder (``$FLWR_HOME``, else ``~/.flwr``)."""
    from flwr.supercore.utils import get_flwr_home

    return Path(get_flwr_home())


def exec_command(cmd: list[str], dry_run: bool) -> int:
    """Print ``cmd``, then (unless ``dry_run``) replace this process with it."""
    from fedpath.deploy.processes import flower_env

    print(shlex.join(cmd), flush=True)
    if dry_run:
        return 0
    os.execvpe(cmd[0], cmd, flower_env(flwr_home()))


def existing(path: Path, what: str) -> Path:
    """``path``, which must be a file (else an error naming ``what``)."""
    if not path.is_file():
        raise ConfigError(f"{what} {str(path)!r} does not exist")
    return path
