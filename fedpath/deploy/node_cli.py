"""``fedpath flower superlink`` and ``fedpath flower supernode``: start the
coordinator's SuperLink and a hospital's SuperNode.

Both replace themselves with the plain Flower command (printed first, and only
printed with ``--dry-run``), so what runs is exactly what ``docs/flower.md``
shows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fedpath.config import ConfigError
from fedpath.deploy.cli_common import (
    Option,
    add_options,
    exec_command,
    existing,
    flwr_home,
    option,
    tls_args,
)
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
)
from fedpath.utils.cli_args import SubParsers, int_at_least, positive_number

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
    (NC_DP_CLIP, positive_number, None),
    (NC_DP_SENSITIVITY, positive_number, None),
    (NC_DP_EPSILON, positive_number, None),
    (NC_DP_DELTA, positive_number, None),
)
#: The DP options that must come together (the sensitivity defaults to the norm).
DP_REQUIRED = (NC_DP_CLIP, NC_DP_EPSILON, NC_DP_DELTA)


def port(text: str) -> int:
    """An argparse ``type``: a TCP port (1-65535), else a usage error naming
    the option."""
    value = int_at_least(1, "a TCP port, at most 65535")(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer (a TCP port, at most 65535), got {text!r}"
        )
    return value


def register_superlink(fsub: SubParsers) -> None:
    """Add ``superlink`` to the ``fedpath flower`` subcommands ``fsub``."""
    link = fsub.add_parser(
        "superlink",
        help="start the SuperLink (coordinator)",
        description="Runs flower-superlink with fedpath's settings (apps run in "
        "this Python environment: no dependency installation).",
    )
    link.add_argument(
        "--host",
        default="127.0.0.1",
        help="bind address (default 127.0.0.1: this machine only); name the "
        "address the hospitals dial, e.g. --host 0.0.0.0 for every interface",
    )
    link.add_argument("--port", type=port, default=9092)
    tls_args(link, "--certs", "folder from `fedpath flower certs`")
    link.add_argument(
        "--node-auth",
        action="store_true",
        help="accept only SuperNodes whose public key was registered",
    )
    link.add_argument("--database", type=Path, help="state file (default: memory)")
    link.add_argument("--dry-run", action="store_true", help="print the command only")


def register_supernode(fsub: SubParsers) -> None:
    """Add ``supernode`` to the ``fedpath flower`` subcommands ``fsub``."""
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
    add_options(node, NODE_OPTIONS)
    tls_args(node)
    node.add_argument("--key", type=Path, help="private key (node authentication)")
    node.add_argument("--port", type=port, default=9094, help="local app API port")
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
    _add_policy(node)
    _add_approval(node)
    dp = node.add_argument_group("local differential privacy (Flower's LocalDpMod)")
    add_options(dp, DP_OPTIONS)
    node.add_argument("--dry-run", action="store_true", help="print the command only")


def _add_policy(node: argparse.ArgumentParser) -> None:
    """The node policy's options: what this node serves and what may leave it."""
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


def _add_approval(node: argparse.ArgumentParser) -> None:
    """Which apps this node runs (docs/flower.md, "Approving apps")."""
    app = node.add_argument_group("app approval (which apps this node runs)")
    app.add_argument(
        "--approved-apps",
        type=Path,
        help="the approved list (default: $FLWR_HOME/approved_apps.yaml); "
        "add to it with `fedpath flower approve`",
    )
    app.add_argument(
        "--no-app-approval",
        action="store_true",
        help="run ANY app the coordinator sends (trials only; the node logs it)",
    )


def register_approve(fsub: SubParsers) -> None:
    """Add ``approve`` to the ``fedpath flower`` subcommands ``fsub``."""
    ap = fsub.add_parser(
        "approve",
        help="approve an app (Flower FAB) for this hospital's node",
        description="Add an app's digest (SHA-256 of the FAB, Flower's fab_hash) "
        "to the node's approved list. Default: fedpath's own app, built here "
        "exactly as `fedpath flower run` builds it.",
    )
    src = ap.add_mutually_exclusive_group()
    src.add_argument("fab", nargs="?", type=Path, help="a .fab file to approve")
    src.add_argument("--app-dir", type=Path, help="an app folder to build and approve")
    ap.add_argument(
        "--approved-apps",
        type=Path,
        help="the node's list (default: $FLWR_HOME/approved_apps.yaml)",
    )


def run_approve(args: argparse.Namespace) -> int:
    """Add the app's digest to the approved list; print the digest and the list."""
    from fedpath.deploy import approval

    if args.fab is not None:
        digest, note = approval.fab_file_digest(args.fab), f"file {args.fab.name}"
    elif args.app_dir is not None:
        digest = approval.app_dir_digest(args.app_dir)
        note = f"app folder {args.app_dir}"
    else:
        import flwr

        import fedpath

        digest = approval.shipped_app_digest()
        note = f"fedpath {fedpath.__version__} app (flwr {flwr.__version__})"
    path = args.approved_apps or approval.default_path(flwr_home())
    added = approval.approve(path, digest, note)
    print(f"{digest} {'approved' if added else 'already approved'} in {path}")
    return 0


def run_superlink(args: argparse.Namespace) -> int:
    """Replace this process with ``flower-superlink`` (TLS unless ``--insecure``)."""
    from fedpath.deploy.pki import TlsFiles
    from fedpath.deploy.processes import superlink_command

    tls = None
    if not args.insecure:
        d = args.certs
        tls = TlsFiles(
            existing(d / "ca.crt", "CA certificate"),
            existing(d / "server.pem", "SuperLink certificate"),
            existing(d / "server.key", "SuperLink key"),
        )
    if args.node_auth and tls is None:
        raise ConfigError("--node-auth needs TLS: pass --certs DIR, not --insecure")
    cmd = superlink_command(args.port, tls, args.node_auth, args.host, args.database)
    return exec_command(cmd, args.dry_run)


def run_supernode(args: argparse.Namespace) -> int:
    """Replace this process with ``flower-supernode`` serving one fedpath client
    under the node policy, with the node config its options give."""
    from fedpath.deploy.processes import supernode_command, worker_socket

    node_config = _node_config(args)
    if args.data_root is not None and not Path(args.data_root).exists():
        raise ConfigError(f"--data-root {args.data_root!r} does not exist")
    ca = None if args.insecure else existing(args.ca, "CA certificate")
    private = None if args.key is None else existing(args.key, "private key")
    if private is not None:  # the same key signs the hellos (client-id binding)
        from fedpath.runtime.flower.identity import NC_IDENTITY_KEY

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
    if args.insecure and not args.dry_run:
        _refuse_tls_superlink(args.superlink)
    cmd = supernode_command(
        args.superlink,
        args.port,
        node_config,
        ca,
        private,
        worker=worker,
        poll_interval=poll,
        approved_apps=_approved_apps(args),
    )
    return exec_command(cmd, args.dry_run)


def _approved_apps(args: argparse.Namespace) -> Path | None:
    """The node's approved list (None: approval off, said loudly on stderr)."""
    from fedpath.deploy.node import UNCHECKED

    if args.no_app_approval:
        if args.approved_apps is not None:
            raise ConfigError("--approved-apps and --no-app-approval contradict")
        print(f"WARNING: {UNCHECKED}", file=sys.stderr)
        return None
    from fedpath.deploy.approval import default_path, load_approved

    path = (args.approved_apps or default_path(flwr_home())).resolve()
    if not load_approved(path):  # also checks that the file reads
        print(
            f"fedpath: no app approved in {path} yet: every run is refused until "
            "the hospital approves one (`fedpath flower approve`)",
            file=sys.stderr,
        )
    return path


def _refuse_tls_superlink(address: str) -> None:
    """A plaintext node must not start against a TLS SuperLink: Flower would
    retry forever without a word."""
    from fedpath.deploy.tls_probe import speaks_tls

    if speaks_tls(address):
        raise ConfigError(
            f"--superlink {address} expects TLS (it completed a TLS handshake): "
            "pass --ca CA.crt (the coordinator's certificate) instead of --insecure"
        )


def _node_config(args: argparse.Namespace) -> dict[str, Any]:
    """The node config of the options (client, data, DP) and the node policy,
    whose summary goes to stderr."""
    from fedpath.deploy.policy import load_policy
    from fedpath.runtime.rules import NC_POLICY

    node_config: dict[str, Any] = {NC_CLIENT: args.client_id}
    for key, _, _ in (*NODE_OPTIONS, *DP_OPTIONS):
        if option(args, key) is not None:
            node_config[key] = option(args, key)
    dp = [option(args, key) for key in DP_REQUIRED]
    if any(v is not None for v in dp) and not all(v is not None for v in dp):
        raise ConfigError(
            "local DP needs --dp-clipping-norm, --dp-epsilon and --dp-delta together"
        )
    policy = load_policy(args.policy, args.allow_non_private)
    node_config[NC_POLICY] = policy.to_yaml()
    print(policy.summary(), file=sys.stderr)
    return node_config
