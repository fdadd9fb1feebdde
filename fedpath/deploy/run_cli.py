"""``fedpath flower run CONFIG``: resolve a fedpath config into a run config and
``flwr run`` the fedpath app on a SuperLink connection."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fedpath.deploy.cli_common import Option, flwr_home, option
from fedpath.runtime.flower import (
    RC_CONFIG,
    RC_ON_FAILURE,
    RC_REGISTRY,
    RC_REPLY_TIMEOUT,
    RC_RESUME,
    RC_SELF_DECLARED,
    RC_WAIT_NODES,
)
from fedpath.schema import ConfigError
from fedpath.utils.cli_args import SubParsers, add_overrides, positive_number

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


def register_run(fsub: SubParsers) -> None:
    """Add ``run`` to the ``fedpath flower`` subcommands ``fsub``."""
    run = fsub.add_parser(
        "run",
        help="run a fedpath experiment on the federation",
        description="Resolve CONFIG (+ key=value overrides), put it in the run "
        "config, `flwr run` the fedpath app on a SuperLink connection and wait "
        "until the run ends: exit 0 if it completed, 1 (with the reason) if it "
        "failed or was stopped. Results are written on the coordinator under the "
        "config's output_dir.",
    )
    run.add_argument("config", type=Path)
    add_overrides(run)
    run.add_argument("--connection", help="flwr SuperLink connection (default one)")
    run.add_argument("--resume", action="store_true", help="continue a crashed run")
    run.add_argument(
        "--reply-timeout", type=positive_number, default=600.0, help="s per stage"
    )
    run.add_argument(
        "--wait-nodes",
        type=positive_number,
        default=120.0,
        help="s to wait for the nodes",
    )
    run.add_argument("--on-failure", choices=["continue", "stop"], default="continue")
    ids = run.add_mutually_exclusive_group()
    ids.add_argument(
        "--registry",
        type=Path,
        help="YAML 'client id: public key file' (required): each node must sign "
        "its hello with the key registered for the client id it claims",
    )
    ids.add_argument(
        "--allow-self-declared-ids",
        action="store_true",
        help="run without a registry: accept the client id each node declares "
        "(any node may claim any id; logged as a warning and in results.jsonl)",
    )
    _add_secagg(run)
    run.add_argument("--app", type=Path, help="Flower app folder (default: written)")
    run.add_argument("--stream", action="store_true", help="follow the run's logs")
    run.add_argument(
        "--detach", action="store_true", help="start the run and return at once"
    )
    run.add_argument("--dry-run", action="store_true", help="print the run config")


def _add_secagg(run: argparse.ArgumentParser) -> None:
    """``--secure-aggregation`` and the SecAgg+ settings, in their own group."""
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


def run(args: argparse.Namespace) -> int:
    """Write the app and the run config, start the run and wait for its end (with
    ``--dry-run``: print the run config only; ``--detach``: return once started).

    Exit 0 if the run completed, 1 if it failed or was stopped (the reason, the
    ServerApp's error line, goes to stderr).
    """
    from fedpath.deploy.flwr_cli import run_config_file, start_run, write_app

    values = _run_config(args)
    home = flwr_home()
    with tempfile.TemporaryDirectory(prefix="fedpath-flower-") as tmp:
        app = args.app or write_app(Path(tmp) / "app")
        if args.dry_run:
            print(run_config_file(values, Path(tmp)).read_text())
            return 0
        run_id = start_run(app, args.connection, home, values, folder=Path(tmp))
    if args.detach:
        print(f"run {run_id} started; `flwr ls --run-id {run_id}` says how it ends")
        return 0
    print(f"run {run_id} started; waiting for it to end", file=sys.stderr)
    try:
        return _outcome(run_id, args.connection, home, args.stream)
    except KeyboardInterrupt:  # the run itself goes on, on the SuperLink
        print(
            f"stopped waiting; run {run_id} goes on (`flwr ls --run-id {run_id}` "
            f"says how it ends, `flwr stop {run_id}` stops it)",
            file=sys.stderr,
        )
        return 130


def _outcome(run_id: int, connection: str | None, home: Path, stream: bool) -> int:
    """Wait for run ``run_id`` to finish (following its logs with ``stream``);
    0 if it completed, else 1 with the reason on stderr."""
    from fedpath.deploy.flwr_cli import run_failure, run_info, wait_run

    if stream:  # `flwr log` follows the logs until the run ends
        from fedpath.deploy.processes import flower_bin, flower_env

        cmd = [flower_bin("flwr"), "log", str(run_id)]
        subprocess.run(
            cmd + ([connection] if connection else []),
            env=flower_env(home),
            check=False,
        )
    wait_run(run_id, connection, home, timeout=None)
    reason = run_failure(run_info(run_id, connection, home))
    if reason is None:
        print(f"run {run_id} finished:completed", file=sys.stderr)
        return 0
    print(
        f"error: run {run_id} {reason} (its log: `flwr log {run_id} --show`)",
        file=sys.stderr,
    )
    return 1


def _run_config(args: argparse.Namespace) -> dict[str, Any]:
    """The run config: the resolved experiment config and the coordinator's
    settings, with SecAgg+'s and the client registry's when asked for (bad
    values are refused here, before the run)."""
    from fedpath.config import load_config

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
            if option(args, key) is not None:
                values[key] = option(args, key)
        SecAggSettings.from_run_config(values)  # refuse bad values before the run
        check_algorithm(cfg)
    values.update(_identity(args))
    return values


def _identity(args: argparse.Namespace) -> dict[str, Any]:
    """The run-config keys that say how nodes prove their client ids: the
    registry (read and checked here), or the explicit opt-out."""
    if args.registry is not None:
        import yaml

        from fedpath.runtime.flower.identity import load_registry

        registry = load_registry(args.registry)
        return {RC_REGISTRY: yaml.safe_dump(registry, width=10**6)}
    if not args.allow_self_declared_ids:
        raise ConfigError(
            "fedpath flower run: --registry clients.yaml is required (client id -> "
            "node public key; docs/flower.md, 'the client registry'): without it "
            "any node could claim any hospital's client id. To accept the ids the "
            "nodes declare, pass --allow-self-declared-ids"
        )
    print(
        "warning: --allow-self-declared-ids: any node may claim any client id",
        file=sys.stderr,
    )
    return {RC_SELF_DECLARED: True}
