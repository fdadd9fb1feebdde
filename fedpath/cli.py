"""``fedpath``: run experiments, the demo, and turn run directories into tables.

Every subcommand is reachable through :func:`main` (``main(argv) -> exit code``), so
the tests drive the real command line in-process.

:data:`COMMANDS` is the one table of subcommands: each names the module whose
``register`` function adds the subcommand's parser and whose ``run`` function
runs it. :func:`build_parser` adds them in the table's order (the order of
``fedpath --help``) and :func:`main` runs the one the command line names. A new
subcommand is a module with those two functions and a row here.

Building the parser imports no PyTorch (``--help``, ``--version`` and ``list``
answer in well under a second): the command modules define their parsers with
light imports and import what they run inside their handlers, and ``list``
reads :mod:`fedpath.catalog`. A test keeps it that way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import cast

from rich.console import Console
from rich.markup import escape

from fedpath.errors import USER_ERRORS
from fedpath.utils.cli_args import SubParsers, parse_args_overrides_anywhere
from fedpath.version import __version__

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Command:
    """One ``fedpath`` subcommand.

    Attributes
    ----------
    name
        The subcommand, as typed after ``fedpath``.
    module
        The module defining it, imported when the parser is built (so it must
        import no PyTorch at module level).
    register
        The module's function that adds the subcommand's parser to the
        subparsers (``register(sub)``).
    run
        The module's function that runs a namespace parsed by that parser
        (``run(args) -> exit code``).
    aliases
        Other names the parser answers to (given to ``add_parser`` by
        ``register``; listed here so that :func:`main` finds them).
    """

    name: str
    module: str
    register: str = "register"
    run: str = "run"
    aliases: tuple[str, ...] = ()

    def add_to(self, sub: SubParsers) -> None:
        """Add the subcommand's parser to ``sub``."""
        getattr(import_module(self.module), self.register)(sub)

    def handler(self) -> Handler:
        """The function that runs the subcommand."""
        return cast(Handler, getattr(import_module(self.module), self.run))


_OWN = "fedpath.commands."
_DESCRIBE = _OWN + "describe"
_WSI = "fedpath.wsi.cli"

#: Every subcommand, in the order of ``fedpath --help``.
COMMANDS: tuple[Command, ...] = (
    Command("run", _OWN + "run"),
    Command("demo", _OWN + "suite", "register_demo", "run_demo"),
    Command("suite", _OWN + "suite", "register_suite", "run_suite", ("ablate",)),
    Command("table", _OWN + "table"),
    Command("compare", _OWN + "compare"),
    Command("evaluate", _OWN + "evaluate"),
    Command("predict", _OWN + "predict", "register_predict", "run_predict"),
    Command("adapt-bn", _OWN + "predict", "register_adapt_bn", "run_adapt_bn"),
    Command("ensemble", _OWN + "ensemble"),
    Command("info", _OWN + "info"),
    Command("list", _DESCRIBE, "register_list", "run_list"),
    Command("tile", _WSI, "register_tile"),
    Command("features", _WSI, "register_features"),
    Command("mvmidog", _WSI, "register_mvmidog"),
    Command("amibr", _WSI, "register_amibr"),
    Command("flower", "fedpath.deploy.cli"),
    Command("plot-ssl", "fedpath.ssl.cli", run="handler"),
    Command("fedhd-render", "fedpath.mil.render_cli", run="handler"),
    Command("report", "fedpath.report.cli", run="handler"),
    Command("stain-report", _DESCRIBE, "register_stain_report", "run_stain_report"),
    Command("audit", _DESCRIBE, "register_audit", "run_audit"),
    Command("data", _DESCRIBE, "register_data", "run_data"),
    Command("check", _DESCRIBE, "register_check", "run_check"),
)


def find_command(name: str) -> Command:
    """The row of :data:`COMMANDS` whose name or alias is ``name``."""
    for command in COMMANDS:
        if name == command.name or name in command.aliases:
            return command
    raise KeyError(f"no fedpath subcommand {name!r}")


def build_parser() -> argparse.ArgumentParser:
    """The ``fedpath`` parser with every subcommand of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="fedpath",
        description="Federated domain generalization for computational pathology.",
    )
    parser.add_argument("--version", action="version", version=f"fedpath {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_to(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = parse_args_overrides_anywhere(build_parser(), argv)
    err = Console(stderr=True, soft_wrap=True)
    try:
        return int(find_command(args.command).handler()(args))
    except USER_ERRORS as e:
        # the message is text, not markup: 'fedpath[ray]', seeds=[0,1] print as written
        err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        return 2
    except KeyboardInterrupt:
        err.print("interrupted; continue with --resume")
        return 130


if __name__ == "__main__":
    sys.exit(main())
