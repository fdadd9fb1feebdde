"""``flwr`` CLI calls only the Flower tests make (the package keeps what the CLI
and ``benchmarks/bench_flower.py`` use: :mod:`fedpath.deploy.flwr_cli`)."""

from __future__ import annotations

from pathlib import Path

from fedpath.deploy.flwr_cli import flwr


def run_logs(run_id: int, connection: str, home: Path) -> str:
    """The logs of a run so far (``flwr log RUN CONNECTION --show``)."""
    res = flwr(["log", str(run_id), connection, "--show"], home, check=False)
    return res.stdout + res.stderr


def register_node(public_key: Path, connection: str, home: Path) -> str:
    """``flwr supernode register KEY.pub CONNECTION``; return the CLI output."""
    res = flwr(["supernode", "register", str(public_key), connection], home)
    return res.stdout
