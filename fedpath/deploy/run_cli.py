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
    RC_WAIT_NODES,
)
from fedpath.utils.cli_args import SubParsers, add_overrides

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
    _add_secagg(run)
    run.add_argument("--app", type=Path, help="Flower app folder (default: written)")
    run.add_argument("--stream", action="store_true", help="follow the run's logs")
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
    """Write the app and the run config, then ``flwr run`` them (with
    ``--dry-run``: print the run config only); flwr's exit code."""
    from fedpath.deploy.flwr_cli import flwr, run_config_file, write_app

    values = _run_config(args)
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
                cmd, env=flower_env(flwr_home()), check=False
            ).returncode
        res = flwr(flwr_args, flwr_home(), check=False)
        sys.stdout.write(res.stdout)
        sys.stderr.write(res.stderr)
        return res.returncode


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
    if args.registry is not None:
        import yaml

        from fedpath.runtime.flower.identity import load_registry

        values[RC_REGISTRY] = yaml.safe_dump(load_registry(args.registry), width=10**6)
    return values
