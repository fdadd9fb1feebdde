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

``superlink`` and ``supernode`` replace themselves with the plain Flower command
(printed first, and only printed with ``--dry-run``), so what runs is exactly what
``docs/flower.md`` shows. :func:`register` adds the subcommands to the main
parser; :func:`run` dispatches a parsed namespace. Flower is imported only here
and below, so ``fedpath`` works without it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedpath.config import ConfigError
from fedpath.runtime.flower import (
    NC_CLIENT,
    NC_DATA_NAME,
    NC_DATA_PARAMS,
    NC_DATA_ROOT,
    NC_DEVICE,
    NC_DP_CLIP,
    NC_DP_DELTA,
    NC_DP_EPSILON,
    NC_DP_SENSITIVITY,
    NC_STATE_DIR,
    NC_THREADS,
    RC_CONFIG,
    RC_ON_FAILURE,
    RC_REGISTRY,
    RC_REPLY_TIMEOUT,
    RC_RESUME,
    RC_WAIT_NODES,
)
from fedpath.utils.cli_args import add_overrides

Handler = Callable[[argparse.Namespace], int]
#: A node option: its node-config key, how to parse its text, its help.
Option = tuple[str, Callable[[str], Any], str | None]

#: Node-config keys that ``fedpath flower supernode`` sets from its options: each
#: key is also the option's name (``--data-root`` sets ``data-root``), so one
#: table both declares the options and builds the node config, in this order.
NODE_OPTIONS: tuple[Option, ...] = (
    (NC_DATA_NAME, str, "dataset name (default: the run's)"),
    (NC_DATA_ROOT, str, "local data folder (default: the run's)"),
    (NC_DATA_PARAMS, str, "YAML mapping of dataset params"),
    (NC_DEVICE, str, "e.g. cuda:0 (default: the run's)"),
    (NC_THREADS, int, "torch threads on this node"),
    (
        NC_STATE_DIR,
        str,
        "also keep the client state (FedBN's local layers...) here, so that "
        "a resumed run restores it exactly (default: memory only)",
    ),
)
#: The same for local differential privacy (Flower's ``LocalDpMod``).
DP_OPTIONS: tuple[Option, ...] = (
    (NC_DP_CLIP, float, None),
    (NC_DP_SENSITIVITY, float, None),
    (NC_DP_EPSILON, float, None),
    (NC_DP_DELTA, float, None),
)
#: The DP options that must come together (the sensitivity defaults to the norm).
DP_REQUIRED = (NC_DP_CLIP, NC_DP_EPSILON, NC_DP_DELTA)


#: ``fedpath flower run`` options for SecAgg+: option name = run-config key.
SECAGG_OPTIONS: tuple[Option, ...] = (
    ("secagg-num-shares", float, "share of the clients holding shares (1.0)"),
    (
        "secagg-reconstruction-threshold",
        float,
        "share of the shares that rebuild a secret (0.67)",
    ),
    ("secagg-clipping-range", float, "entries must lie in [-C, C] (8.0)"),
    ("secagg-quantization-range", int, "integers per entry, Q (2**22)"),
    ("secagg-modulus-range", int, "modulus of the masked sum, M (2**32)"),
    ("secagg-max-weight", float, "largest example count (0: the largest client)"),
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``fedpath flower`` and its subcommands to ``sub``."""
    flower = sub.add_parser(
        "flower",
        help="run fedpath over Flower's deployment engine (SuperLink / SuperNodes)",
        description="Federated runs across hospitals: one SuperLink at the "
        "coordinator, one SuperNode per hospital (one fedpath client each). See "
        "docs/flower.md.",
    )
    fsub = flower.add_subparsers(dest="flower_command", required=True)

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
    certs.add_argument("--days", type=int, default=365)
    certs.set_defaults(flower_handler=_cmd_certs)

    keys = fsub.add_parser(
        "keys",
        help="SuperNode key pair for node authentication",
        description="Write DIR/NAME (private key, stays on the node) and "
        "DIR/NAME.pub (register it: flwr supernode register DIR/NAME.pub).",
    )
    keys.add_argument("dir", type=Path)
    keys.add_argument("name")
    keys.set_defaults(flower_handler=_cmd_keys)

    app = fsub.add_parser("app", help="write the Flower app folder")
    app.add_argument("dir", type=Path)
    app.set_defaults(flower_handler=_cmd_app)

    conn = fsub.add_parser(
        "connect",
        help="add a SuperLink connection to the flwr CLI config",
        description="Add [superlink.NAME] to $FLWR_HOME/config.toml (~/.flwr).",
    )
    conn.add_argument("name")
    conn.add_argument("address", help="HOST:PORT of the SuperLink")
    _tls_args(conn)
    conn.add_argument("--no-default", action="store_true", help="keep the default")
    conn.set_defaults(flower_handler=_cmd_connect)

    link = fsub.add_parser(
        "superlink",
        help="start the SuperLink (coordinator)",
        description="Runs flower-superlink with fedpath's settings (apps run in "
        "this Python environment: no dependency installation).",
    )
    link.add_argument("--host", default="0.0.0.0", help="bind address (0.0.0.0)")
    link.add_argument("--port", type=int, default=9092)
    _tls_args(link, "--certs", "folder from `fedpath flower certs`")
    link.add_argument(
        "--node-auth",
        action="store_true",
        help="accept only SuperNodes whose public key was registered",
    )
    link.add_argument("--database", type=Path, help="state file (default: memory)")
    link.add_argument("--dry-run", action="store_true", help="print the command only")
    link.set_defaults(flower_handler=_cmd_superlink)

    node = fsub.add_parser(
        "supernode",
        help="start a SuperNode (one hospital = one fedpath client)",
        description="Runs flower-supernode at a hospital; the node config says "
        "which fedpath client it serves and where its data lives.",
    )
    node.add_argument("--superlink", required=True, help="HOST:PORT of the SuperLink")
    node.add_argument(
        "--client-id", required=True, help="fedpath client id, e.g. hospital_0/c0"
    )
    _add_options(node, NODE_OPTIONS)
    _tls_args(node)
    node.add_argument("--key", type=Path, help="private key (node authentication)")
    node.add_argument("--port", type=int, default=9094, help="local app API port")
    node.add_argument(
        "--no-worker",
        action="store_true",
        help="run every message in Flower's fresh ClientApp process (slower: "
        "PyTorch, fedpath and the data load per message) instead of the node's "
        "persistent worker",
    )
    node.add_argument(
        "--worker-socket",
        type=Path,
        help="the worker's Unix socket (default: <tmp>/fedpath-<uid>/node-<port>.sock)",
    )
    node.add_argument(
        "--poll-interval",
        type=float,
        default=0.2,
        help="cap on the SuperNode's idle waits in seconds (Flower's own: 3); "
        "0 or less keeps Flower's",
    )
    pol = node.add_argument_group(
        "node policy (what this node serves and what may leave it; "
        "see fedpath/deploy/policy.py)"
    )
    pol.add_argument(
        "--policy",
        type=Path,
        help="YAML policy file (default: every private algorithm, "
        "max_upload_ratio 0.1, max_tokens 1000)",
    )
    pol.add_argument(
        "--allow-non-private",
        action="append",
        default=[],
        metavar="ALGORITHM",
        help="also serve this non-private algorithm (it uploads images, labels or "
        "real embeddings); repeatable; the node's log states it",
    )
    dp = node.add_argument_group("local differential privacy (Flower's LocalDpMod)")
    _add_options(dp, DP_OPTIONS)
    node.add_argument("--dry-run", action="store_true", help="print the command only")
    node.set_defaults(flower_handler=_cmd_supernode)

    run = fsub.add_parser(
        "run",
        help="run a fedpath experiment on the federation",
        description="Resolve CONFIG (+ key=value overrides), put it in the run "
        "config and `flwr run` the fedpath app on a SuperLink connection. Results "
        "are written on the coordinator under the config's output_dir.",
    )
    run.add_argument("config", type=Path)
    add_overrides(run)
    run.add_argument("--connection", help="flwr SuperLink connection (default one)")
    run.add_argument("--resume", action="store_true", help="continue a crashed run")
    run.add_argument("--reply-timeout", type=float, default=600.0, help="s per stage")
    run.add_argument(
        "--wait-nodes", type=float, default=120.0, help="s to wait for the nodes"
    )
    run.add_argument("--on-failure", choices=["continue", "stop"], default="continue")
    run.add_argument(
        "--registry",
        type=Path,
        help="YAML 'client id: public key file' (each node must sign its hello "
        "with the key registered for the client id it claims; default: ids are "
        "self-declared)",
    )
    sec = run.add_argument_group(
        "secure aggregation (Flower's SecAgg+ on the fit stage; docs/flower.md)"
    )
    sec.add_argument(
        "--secure-aggregation",
        choices=["none", "secaggplus"],
        default="none",
        help="secaggplus: the coordinator sees only the sum of the masked, "
        "quantized uploads (weight-averaging algorithms)",
    )
    for key, kind, text in SECAGG_OPTIONS:
        sec.add_argument(f"--{key}", type=kind, help=text)
    run.add_argument("--app", type=Path, help="Flower app folder (default: written)")
    run.add_argument("--stream", action="store_true", help="follow the run's logs")
    run.add_argument("--dry-run", action="store_true", help="print the run config")
    run.set_defaults(flower_handler=_cmd_run)


def run(args: argparse.Namespace) -> int:
    """Dispatch a namespace parsed by a parser that :func:`register` extended."""
    from fedpath.deploy.processes import DeployError

    handler: Handler = args.flower_handler
    try:
        return handler(args)
    except DeployError as err:  # a Flower command failed: its output says why
        print(f"error: {err}", file=sys.stderr)
        return 2


def _tls_args(
    p: argparse.ArgumentParser,
    option: str = "--ca",
    help_text: str = "CA certificate of the SuperLink",
) -> None:
    """TLS files (``--ca`` for the nodes and the flwr CLI) or ``--insecure``."""
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument(option, type=Path, help=help_text)
    group.add_argument("--insecure", action="store_true", help="no TLS (trials only)")


def _add_options(p: argparse._ActionsContainer, options: tuple[Option, ...]) -> None:
    for key, kind, help_text in options:
        p.add_argument(f"--{key}", type=kind, help=help_text)


def _option(args: argparse.Namespace, key: str) -> Any:
    """The value of the option named after node-config ``key`` (None if not given)."""
    return getattr(args, key.replace("-", "_"))


def _flwr_home() -> Path:
    from flwr.supercore.utils import get_flwr_home

    return Path(get_flwr_home())


def _exec(cmd: list[str], dry_run: bool) -> int:
    from fedpath.deploy.processes import flower_env

    print(shlex.join(cmd), flush=True)
    if dry_run:
        return 0
    os.execvpe(cmd[0], cmd, flower_env(_flwr_home()))


def _existing(path: Path, what: str) -> Path:
    if not path.is_file():
        raise ConfigError(f"{what} {str(path)!r} does not exist")
    return path


def _cmd_certs(args: argparse.Namespace) -> int:
    from fedpath.deploy.pki import LOCALHOST, make_certificates

    files = make_certificates(args.dir, tuple(args.hosts or LOCALHOST), args.days)
    print(f"CA certificate (give to every node and flwr CLI): {files.ca_cert}")
    print(f"SuperLink certificate and key: {files.server_cert} {files.server_key}")
    return 0


def _cmd_keys(args: argparse.Namespace) -> int:
    from fedpath.deploy.pki import make_node_keys

    private, public = make_node_keys(args.dir, args.name)
    print(f"private key (stays on the node): {private}")
    print(f"public key (register it: flwr supernode register {public})")
    return 0


def _cmd_app(args: argparse.Namespace) -> int:
    from fedpath.deploy.flwr_cli import write_app

    print(write_app(args.dir) / "pyproject.toml")
    return 0


def _cmd_connect(args: argparse.Namespace) -> int:
    from fedpath.deploy.flwr_cli import write_connection

    ca = None if args.insecure else _existing(args.ca, "CA certificate").resolve()
    path = write_connection(
        _flwr_home(), args.name, args.address, ca, default=not args.no_default
    )
    print(f"connection {args.name!r} -> {args.address} in {path}")
    return 0


def _cmd_superlink(args: argparse.Namespace) -> int:
    from fedpath.deploy.pki import TlsFiles
    from fedpath.deploy.processes import superlink_command

    tls = None
    if not args.insecure:
        d = args.certs
        tls = TlsFiles(
            _existing(d / "ca.crt", "CA certificate"),
            _existing(d / "server.pem", "SuperLink certificate"),
            _existing(d / "server.key", "SuperLink key"),
        )
    if args.node_auth and tls is None:
        raise ConfigError("--node-auth needs TLS: pass --certs DIR, not --insecure")
    cmd = superlink_command(args.port, tls, args.node_auth, args.host, args.database)
    return _exec(cmd, args.dry_run)


def _cmd_supernode(args: argparse.Namespace) -> int:
    from fedpath.deploy.processes import supernode_command, worker_socket

    node_config: dict[str, Any] = {NC_CLIENT: args.client_id}
    for key, _, _ in (*NODE_OPTIONS, *DP_OPTIONS):
        if _option(args, key) is not None:
            node_config[key] = _option(args, key)
    dp = [_option(args, key) for key in DP_REQUIRED]
    if any(v is not None for v in dp) and not all(v is not None for v in dp):
        raise ConfigError(
            "local DP needs --dp-clipping-norm, --dp-epsilon and --dp-delta together"
        )
    from fedpath.deploy.policy import NC_POLICY, load_policy

    policy = load_policy(args.policy, args.allow_non_private)
    node_config[NC_POLICY] = policy.to_yaml()
    print(policy.summary(), file=sys.stderr)
    if args.data_root is not None and not Path(args.data_root).exists():
        raise ConfigError(f"--data-root {args.data_root!r} does not exist")
    ca = None if args.insecure else _existing(args.ca, "CA certificate")
    private = None if args.key is None else _existing(args.key, "private key")
    if private is not None:  # the same key signs the hellos (client-id binding)
        from fedpath.deploy.identity import NC_IDENTITY_KEY

        node_config[NC_IDENTITY_KEY] = str(private.resolve())
    worker = None
    if not args.no_worker:
        worker = args.worker_socket or worker_socket(args.port)
        if len(str(worker)) > 100:
            raise ConfigError(
                f"--worker-socket {str(worker)!r}: a Unix socket path must be "
                "shorter than 100 characters"
            )
    poll = args.poll_interval if args.poll_interval > 0 else None
    cmd = supernode_command(
        args.superlink,
        args.port,
        node_config,
        ca,
        private,
        worker=worker,
        poll_interval=poll,
    )
    return _exec(cmd, args.dry_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from fedpath.config import load_config
    from fedpath.deploy.flwr_cli import flwr, run_config_file, write_app

    cfg = load_config(args.config, args.overrides)
    if not Path(cfg.output_dir).is_absolute():
        print(
            f"note: output_dir {cfg.output_dir!r} is relative: results go there "
            "relative to the directory the SuperLink was started in",
            file=sys.stderr,
        )
    values = {
        RC_CONFIG: cfg.to_yaml(),
        RC_RESUME: bool(args.resume),
        RC_REPLY_TIMEOUT: float(args.reply_timeout),
        RC_WAIT_NODES: float(args.wait_nodes),
        RC_ON_FAILURE: args.on_failure,
    }
    if args.secure_aggregation != "none":
        from fedpath.runtime.secagg import RC_MODE, SecAggSettings, check_algorithm

        values[RC_MODE] = args.secure_aggregation
        for key, _, _ in SECAGG_OPTIONS:
            if _option(args, key) is not None:
                values[key] = _option(args, key)
        SecAggSettings.from_run_config(values)  # refuse bad values before the run
        check_algorithm(cfg)
    if args.registry is not None:
        import yaml

        from fedpath.deploy.identity import load_registry

        values[RC_REGISTRY] = yaml.safe_dump(load_registry(args.registry), width=10**6)
    with tempfile.TemporaryDirectory(prefix="fedpath-flower-") as tmp:
        app = args.app or write_app(Path(tmp) / "app")
        toml = run_config_file(values, Path(tmp))
        if args.dry_run:
            print(toml.read_text())
            return 0
        flwr_args = ["run", str(app)]
        if args.connection:
            flwr_args.append(args.connection)
        flwr_args += ["--run-config", str(toml)]
        if args.stream:
            from fedpath.deploy.processes import flower_bin, flower_env

            cmd = [flower_bin("flwr"), *flwr_args, "--stream"]
            return subprocess.run(
                cmd, env=flower_env(_flwr_home()), check=False
            ).returncode
        res = flwr(flwr_args, _flwr_home(), check=False)
        sys.stdout.write(res.stdout)
        sys.stderr.write(res.stderr)
        return res.returncode
