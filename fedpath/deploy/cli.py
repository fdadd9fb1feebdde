"""``fedpath flower ...``: stand up a federation and launch runs from a fedpath config.

=========================  ===============================================
``fedpath flower certs``   a private CA + SuperLink certificate (trials)
``fedpath flower keys``    a SuperNode key pair for node authentication
``fedpath flower app``     write the Flower app folder (its pyproject.toml)
``fedpath flower connect`` add a SuperLink connection to the flwr CLI config
``fedpath flower superlink`` start the coordinator's SuperLink
``fedpath flower supernode`` start a hospital's SuperNode (one client)
``fedpath flower run``     run a fedpath experiment config on the federation
=========================  ===============================================

The first four live here; ``superlink`` and ``supernode`` in
:mod:`fedpath.deploy.node_cli`, ``run`` in :mod:`fedpath.deploy.run_cli`.
:func:`register` adds ``flower`` and, from :data:`SUBCOMMANDS`, its subcommands
to the main parser; :func:`run` runs a parsed namespace. Flower is imported only
when a subcommand runs, so ``fedpath`` works without it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from fedpath.deploy import node_cli, run_cli
from fedpath.deploy.cli_common import existing, flwr_home, tls_args
from fedpath.utils.cli_args import SubParsers, int_at_least

Handler = Callable[[argparse.Namespace], int]


def register(sub: SubParsers) -> None:
    """Add ``fedpath flower`` and its subcommands to ``sub``."""
    flower = sub.add_parser(
        "flower",
        help="run fedpath over Flower's deployment engine (SuperLink / SuperNodes)",
        description="Federated runs across hospitals: one SuperLink at the "
        "coordinator, one SuperNode per hospital (one fedpath client each). See "
        "docs/flower.md.",
    )
    fsub = flower.add_subparsers(dest="flower_command", required=True)
    for add, _ in SUBCOMMANDS.values():
        add(fsub)


def run(args: argparse.Namespace) -> int:
    """Run the ``fedpath flower`` subcommand ``args`` was parsed for."""
    from fedpath.deploy.processes import DeployError

    _, handler = SUBCOMMANDS[args.flower_command]
    try:
        return handler(args)
    except DeployError as err:  # a Flower command failed: its output says why
        print(f"error: {err}", file=sys.stderr)
        return 2


def _register_certs(fsub: SubParsers) -> None:
    certs = fsub.add_parser(
        "certs",
        help="private CA + SuperLink TLS certificate (for trials)",
        description="Write DIR/ca.crt, DIR/server.pem and DIR/server.key. The "
        "certificate is valid for the given hosts (the address nodes dial).",
    )
    certs.add_argument("dir", type=Path)
    certs.add_argument(
        "--host",
        action="append",
        dest="hosts",
        help="IP or DNS name of the SuperLink (repeat; default 127.0.0.1, localhost)",
    )
    certs.add_argument("--days", type=int_at_least(1), default=365)


def _cmd_certs(args: argparse.Namespace) -> int:
    from fedpath.deploy.pki import LOCALHOST, make_certificates

    files = make_certificates(args.dir, tuple(args.hosts or LOCALHOST), args.days)
    print(f"CA certificate (give to every node and flwr CLI): {files.ca_cert}")
    print(f"SuperLink certificate and key: {files.server_cert} {files.server_key}")
    return 0


def _register_keys(fsub: SubParsers) -> None:
    keys = fsub.add_parser(
        "keys",
        help="SuperNode key pair for node authentication",
        description="Write DIR/NAME (private key, stays on the node) and "
        "DIR/NAME.pub (register it: flwr supernode register DIR/NAME.pub).",
    )
    keys.add_argument("dir", type=Path)
    keys.add_argument("name")


def _cmd_keys(args: argparse.Namespace) -> int:
    from fedpath.deploy.pki import make_node_keys

    private, public = make_node_keys(args.dir, args.name)
    print(f"private key (stays on the node): {private}")
    print(f"public key (register it: flwr supernode register {public})")
    return 0


def _register_app(fsub: SubParsers) -> None:
    app = fsub.add_parser("app", help="write the Flower app folder")
    app.add_argument("dir", type=Path)


def _cmd_app(args: argparse.Namespace) -> int:
    from fedpath.deploy.flwr_cli import write_app

    print(write_app(args.dir) / "pyproject.toml")
    return 0


def _register_connect(fsub: SubParsers) -> None:
    conn = fsub.add_parser(
        "connect",
        help="add a SuperLink connection to the flwr CLI config",
        description="Add [superlink.NAME] to $FLWR_HOME/config.toml (~/.flwr).",
    )
    conn.add_argument("name")
    conn.add_argument("address", help="HOST:PORT of the SuperLink")
    tls_args(conn)
    conn.add_argument("--no-default", action="store_true", help="keep the default")


def _cmd_connect(args: argparse.Namespace) -> int:
    from fedpath.deploy.flwr_cli import write_connection

    ca = None if args.insecure else existing(args.ca, "CA certificate").resolve()
    path = write_connection(
        flwr_home(), args.name, args.address, ca, default=not args.no_default
    )
    print(f"connection {args.name!r} -> {args.address} in {path}")
    return 0


#: Each ``fedpath flower`` subcommand, in ``fedpath flower --help`` order: the
#: function that adds its parser, and its handler.
SUBCOMMANDS: dict[str, tuple[Callable[[SubParsers], None], Handler]] = {
    "certs": (_register_certs, _cmd_certs),
    "keys": (_register_keys, _cmd_keys),
    "app": (_register_app, _cmd_app),
    "connect": (_register_connect, _cmd_connect),
    "superlink": (node_cli.register_superlink, node_cli.run_superlink),
    "supernode": (node_cli.register_supernode, node_cli.run_supernode),
    "approve": (node_cli.register_approve, node_cli.run_approve),
    "run": (run_cli.register_run, run_cli.run),
}
