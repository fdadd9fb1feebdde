"""The ``flwr`` CLI for fedpath: the Flower app folder, connections, runs.

``flwr run`` builds a FAB from the app folder (:data:`APP_PYPROJECT`, also shipped
as ``flower_app/``), which carries no code: both its components are modules of
the adapter (:mod:`fedpath.runtime.flower`), and the run config holds the
experiment. Every call gets ``FLWR_HOME=home``, where the CLI keeps its
connections (``config.toml``).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tomli_w

from fedpath.deploy.processes import DeployError, flower_bin, flower_env

#: The Flower app's ``pyproject.toml`` (``flower_app/`` is a copy, tested equal).
APP_PYPROJECT = """\
# The Flower app that runs fedpath over Flower's deployment engine.
# Written by `fedpath flower app DIR`; launch with `fedpath flower run CONFIG.yaml`
# (or `flwr run DIR CONNECTION --run-config run.toml`). fedpath itself must be
# installed wherever the SuperLink and the SuperNodes run.
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedpath-flower"
version = "1.0.0"
description = "fedpath algorithms over Flower's deployment engine"
license = "Apache-2.0"
dependencies = ["flwr>=1.42,<1.43"]

[tool.flwr.app]
publisher = "fedpath"

[tool.flwr.app.components]
serverapp = "fedpath.runtime.flower.server_app:app"
clientapp = "fedpath.runtime.flower.client_app:app"

[tool.flwr.app.config]
# the resolved experiment config (YAML); `fedpath flower run` fills it in
fedpath-config = ""
# continue from the coordinator's checkpoint (as `fedpath run --resume`)
resume = false
# seconds the coordinator waits for the replies of one stage
reply-timeout = 600.0
# seconds the coordinator waits at start for a node per client
wait-nodes = 120.0
# "continue": a failed client is left out of the stage; "stop": stop the run
on-failure = "continue"
# client id -> public key (YAML) that must sign the node's hello; required
# unless allow-self-declared-ids = true (then any node may claim any client id)
client-registry = ""
allow-self-declared-ids = false
# "secaggplus": the fit stage through Flower's SecAgg+ (docs/flower.md); "none"
secure-aggregation = "none"
# SecAgg+: share of the clients (or a count) holding shares of each secret
secagg-num-shares = 1.0
# SecAgg+: share of num-shares (or a count) needed to rebuild a secret
secagg-reconstruction-threshold = 0.67
# SecAgg+: entries must lie in [-C, C]
secagg-clipping-range = 8.0
# SecAgg+: each entry becomes an integer in [0, Q]
secagg-quantization-range = 4194304
# SecAgg+: the masked sum is taken modulo M (a power of 2, at most 2**32)
secagg-modulus-range = 4294967296
# SecAgg+: largest example count a client may upload (0: the largest client)
secagg-max-weight = 0.0
"""


def write_app(folder: Path) -> Path:
    """Write the Flower app (its ``pyproject.toml``) into ``folder``; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(APP_PYPROJECT)
    return folder


def write_connection(
    home: Path,
    name: str,
    address: str,
    root_cert: Path | None = None,
    default: bool = True,
) -> Path:
    """Add SuperLink connection ``name`` to ``home/config.toml`` (the flwr CLI's)."""
    path = home / "config.toml"
    data: dict[str, Any] = {}
    if path.is_file():
        import tomllib

        data = tomllib.loads(path.read_text())
    links = data.setdefault("superlink", {})
    entry: dict[str, Any] = {"address": address}
    if root_cert is None:
        entry["insecure"] = True
    else:
        entry["root-certificates"] = str(root_cert)
    links[name] = entry
    if default or "default" not in links:
        links["default"] = name
    home.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps(data))
    return path


def flwr(
    args: Sequence[str], home: Path, timeout: float = 120.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the ``flwr`` CLI with ``FLWR_HOME=home``."""
    env = flower_env(home)
    res = subprocess.run(
        [flower_bin("flwr"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and res.returncode != 0:
        raise DeployError(
            f"flwr {' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n"
            f"{res.stderr}"
        )
    return res


def run_config_file(values: Mapping[str, Any], folder: Path) -> Path:
    """A TOML file of run-config overrides (``flwr run --run-config FILE``)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="run-config-", suffix=".toml", dir=folder)
    with os.fdopen(fd, "w") as f:
        f.write(tomli_w.dumps(dict(values)))
    return Path(name)


def start_run(
    app: Path,
    connection: str | None,
    home: Path,
    run_config: Mapping[str, Any],
    folder: Path | None = None,
) -> int:
    """``flwr run APP [CONNECTION] --run-config FILE``; return the run id.

    ``connection``: None for the flwr CLI's default one; ``folder``: where the
    run-config file is written (default ``home/run-configs``).
    """
    cfg_file = run_config_file(run_config, folder or home / "run-configs")
    args = ["run", str(app), *_conn(connection), "--run-config", str(cfg_file)]
    res = flwr([*args, "--format", "json"], home)
    try:
        return int(json.loads(res.stdout[res.stdout.index("{") :])["run-id"])
    except (ValueError, KeyError, TypeError):
        raise DeployError(f"flwr run: no run id in its output:\n{res.stdout}") from None


def _conn(connection: str | None) -> list[str]:
    return [] if connection is None else [connection]


def run_info(run_id: int, connection: str | None, home: Path) -> dict[str, str]:
    """The run as ``flwr ls --run-id`` reports it: ``status`` (``pending``,
    ``starting``, ``running``, or ``finished:completed``, ``finished:failed``,
    ``finished:stopped``) and ``status-details`` (for a ServerApp that raised:
    ``ServerApp failed with exception: <its message>``)."""
    args = ["ls", *_conn(connection), "--run-id", str(run_id), "--format", "json"]
    res = flwr(args, home)
    try:
        data = json.loads(res.stdout[res.stdout.index("{") :])
        runs = data.get("runs", [])
    except (ValueError, AttributeError):
        raise DeployError(f"flwr ls: unreadable output:\n{res.stdout}") from None
    if not runs:
        raise DeployError(f"flwr ls: run {run_id} unknown:\n{res.stdout}")
    return {k: str(v) for k, v in runs[0].items()}


def run_status(run_id: int, connection: str | None, home: Path) -> str:
    """The run's status as ``flwr ls`` reports it (e.g. ``running``,
    ``finished:completed``; :func:`run_info`)."""
    return run_info(run_id, connection, home).get("status", "")


def wait_run(
    run_id: int,
    connection: str | None,
    home: Path,
    timeout: float | None,
    done: Callable[[], bool] | None = None,
    poll: float = 3.0,
) -> str:
    """Wait until the run leaves pending/starting/running (or ``done()`` holds);
    ``timeout`` None: as long as it takes."""
    deadline = None if timeout is None else time.monotonic() + timeout
    status = ""
    while deadline is None or time.monotonic() < deadline:
        if done is not None and done():
            return "done"
        status = run_status(run_id, connection, home)
        if status.startswith("finished"):
            return status
        time.sleep(poll)
    raise DeployError(f"run {run_id} still {status!r} after {timeout:g} s")


def run_failure(info: Mapping[str, str]) -> str | None:
    """Why a finished run did not complete (None: it completed): the ServerApp's
    error line where Flower recorded one, else the status."""
    status = info.get("status", "")
    if status == "finished:completed":
        return None
    details = " ".join(info.get("status-details", "").split())
    if details == "N/A":  # flwr ls's word for no details
        details = ""
    prefix = "ServerApp failed with exception: "
    if details.startswith(prefix):
        details = details[len(prefix) :]
    return f"{status}: {details}" if details else status
