"""Start Flower's processes for fedpath: the SuperLink and SuperNode commands.

Each command is the plain Flower one (``flower-superlink``, ``flower-supernode``,
or :mod:`fedpath.deploy.node` wrapped around the latter), so ``docs/flower.md`` can
show the command itself. Every process gets its own ``FLWR_HOME`` (as on separate
machines) and is stopped with its descendants (Flower's SuperExec and app
processes), which Flower detaches from it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import tomli_w

from fedpath.deploy.pki import TlsFiles
from fedpath.errors import FedpathError
from fedpath.runtime.flower import NC_WORKER


class DeployError(FedpathError, RuntimeError):
    """A Flower process or command that did not do what was asked."""


def flower_bin(name: str) -> str:
    """The Flower executable ``name`` next to this Python, else from ``PATH``."""
    here = Path(sys.executable).parent / name
    if here.is_file():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise DeployError(
            f"{name!r} not found; install Flower: pip install 'flwr>=1.42,<1.43'"
        )
    return found


def flower_env(home: Path) -> dict[str, str]:
    """Environment for a Flower process: its home, and Flower's tools on ``PATH``.

    The SuperLink and SuperNodes start ``flower-superexec`` (and it the apps) by
    name, so the directory of the executables must be on ``PATH``.
    """
    env = {**os.environ, "FLWR_HOME": str(home)}
    bindir = str(Path(flower_bin("flower-superexec")).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
    env.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    # SuperExec looks for new tasks (app processes to start) every second by
    # default; a message waits for that poll, so poll more often.
    env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.1")
    return env


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    """A started Flower process (SuperLink or SuperNode) and its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    home: Path
    _log: IO[bytes] | None = field(default=None, repr=False)

    def log_text(self) -> str:
        return (
            self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_log(self, text: str, timeout: float) -> None:
        """Wait until ``text`` appears in the log (DeployError with the log tail)."""

        def seen() -> bool:
            if text in self.log_text():
                return True
            if not self.alive():
                raise DeployError(
                    f"{self.name} exited ({self.proc.returncode}) before logging "
                    f"{text!r}:\n{self.log_text()[-3000:]}"
                )
            return False

        wait_for(
            seen,
            timeout,
            f"{self.name}: {text!r} not in its log",
            self,
        )

    def stop(self, timeout: float = 10.0, kill: bool = False) -> None:
        """Stop the process and every process it started (SuperExec, apps)."""
        family = [*_descendants(self.proc.pid), self.proc.pid]
        sig = signal.SIGKILL if kill else signal.SIGTERM
        for pid in reversed(family):
            _signal(pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout)
        deadline = time.monotonic() + timeout
        for pid in family[:-1]:
            while _running(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _running(pid):
                _signal(pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; Flower detaches its children)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(k) for k in task.read_text().split()]
            except OSError:
                continue
            out.extend(kids)
            todo.extend(kids)
    return out


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _start(
    name: str, cmd: list[str], home: Path, log_path: Path, cwd: Path | None = None
) -> Service:
    home.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("wb")
    env = flower_env(home)
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd or home
    )
    return Service(name, proc, log_path, home, log)


def superlink_command(
    port: int,
    tls: TlsFiles | None = None,
    node_auth: bool = False,
    host: str = "127.0.0.1",
    database: Path | None = None,
) -> list[str]:
    """``flower-superlink`` for fedpath (apps run in fedpath's own environment)."""
    cmd = [
        flower_bin("flower-superlink"),
        "--host",
        host,
        "--port",
        str(port),
        "--disable-runtime-dependency-installation",
    ]
    if tls is None:
        cmd.append("--insecure")
    else:
        cmd += [
            "--ssl-ca-certfile",
            str(tls.ca_cert),
            "--ssl-certfile",
            str(tls.server_cert),
            "--ssl-keyfile",
            str(tls.server_key),
        ]
    if node_auth:
        cmd.append("--enable-supernode-auth")
    if database is not None:
        cmd += ["--database", str(database)]
    return cmd


#: Default cap (s) on the SuperNode's idle waits (Flower's own: 3 s; see .node).
POLL_INTERVAL = 0.2


def worker_socket(port: int) -> Path:
    """Default socket of the worker of the node whose app API is on ``port``.

    Short on purpose (a Unix socket path has at most 107 bytes), in the user's
    runtime directory (``$XDG_RUNTIME_DIR/fedpath``, private to the user by the
    login manager), else ``<tmp>/fedpath-<uid>``; either way the worker and the
    ClientApp refuse a folder that is not the user's alone
    (:func:`~fedpath.runtime.flower.worker_protocol.private_dir`).
    """
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        base = Path(runtime) / "fedpath"
    else:
        base = Path(tempfile.gettempdir()) / f"fedpath-{os.getuid()}"
    return base / f"node-{port}.sock"


def supernode_command(
    superlink: str,
    port: int,
    node_config: Mapping[str, str | int | float | bool],
    root_cert: Path | None = None,
    private_key: Path | None = None,
    max_wait: float | None = None,
    worker: Path | None = None,
    poll_interval: float | None = POLL_INTERVAL,
    worker_log: Path | None = None,
    approved_apps: Path | None = None,
) -> list[str]:
    """``flower-supernode`` serving one fedpath client (see client_app's keys).

    With a ``worker`` socket, a ``poll_interval`` or ``approved_apps`` the node
    runs through :mod:`fedpath.deploy.node` (``python -m fedpath.deploy.node ...
    -- <the same flower-supernode arguments>``), which starts the persistent
    worker, caps the SuperNode's idle waits and runs only the apps approved in
    ``approved_apps`` (:mod:`fedpath.deploy.approval`); with none of them it is
    the plain Flower command.
    """
    if worker is not None:
        node_config = {**node_config, NC_WORKER: str(worker)}
    args = [
        "--superlink",
        superlink,
        "--port",
        str(port),
        "--node-config",
        node_config_arg(node_config),
    ]
    args += (
        ["--insecure"] if root_cert is None else ["--root-certificates", str(root_cert)]
    )
    if private_key is not None:
        args += ["--auth-supernode-private-key", str(private_key)]
    if max_wait is not None:
        args += ["--max-wait-time", str(max_wait)]
    if worker is None and poll_interval is None and approved_apps is None:
        return [flower_bin("flower-supernode"), *args]
    node = [sys.executable, "-m", "fedpath.deploy.node"]
    if approved_apps is not None:
        node += ["--approved-apps", str(approved_apps)]
    if worker is not None:
        node += ["--socket", str(worker)]
        if worker_log is not None:
            node += ["--worker-log", str(worker_log)]
    if poll_interval is not None:
        node += ["--poll-interval", str(poll_interval)]
    return [*node, "--", *args]


def node_config_arg(node_config: Mapping[str, str | int | float | bool]) -> str:
    """``--node-config`` text: space-separated ``key=value`` with TOML values."""
    parts = []
    for key, value in node_config.items():
        if isinstance(value, str) and any(c in value for c in "\"'\n\\"):
            raise DeployError(
                f"node config {key}={value!r}: Flower's --node-config parser cannot "
                "carry quotes, backslashes or newlines; put the node config in a "
                "TOML file and pass --node-config FILE.toml"
            )
        text = tomli_w.dumps({"v": value}).strip()[len("v = ") :]
        parts.append(f"{key}={text}")
    return " ".join(parts)


def start_superlink(
    folder: Path,
    port: int | None = None,
    tls: TlsFiles | None = None,
    node_auth: bool = False,
    timeout: float = 60.0,
) -> tuple[Service, str]:
    """Start a SuperLink (home and log under ``folder``); return it and its address."""
    port = port or free_port()
    svc = _start(
        "superlink",
        superlink_command(port, tls, node_auth),
        folder / "home",
        folder / "superlink.log",
    )
    svc.wait_log("Uvicorn running on", timeout)
    return svc, f"127.0.0.1:{port}"


def start_supernode(
    folder: Path,
    name: str,
    superlink: str,
    node_config: Mapping[str, str | int | float | bool],
    root_cert: Path | None = None,
    private_key: Path | None = None,
    max_wait: float | None = None,
    worker: bool = True,
    poll_interval: float | None = POLL_INTERVAL,
    approved_apps: Path | None = None,
) -> Service:
    """Start a SuperNode (home ``folder/name``, log ``folder/name.log``).

    With ``worker`` (default) it runs with a persistent worker whose log is
    ``folder/name.worker.log``; ``worker=False, poll_interval=None`` is plain
    Flower; ``approved_apps`` turns on app approval (off here: trials and tests).
    """
    port = free_port()
    cmd = supernode_command(
        superlink,
        port,
        node_config,
        root_cert,
        private_key,
        max_wait,
        worker=worker_socket(port) if worker else None,
        poll_interval=poll_interval,
        worker_log=folder / f"{name}.worker.log",
        approved_apps=approved_apps,
    )
    return _start(name, cmd, folder / name, folder / f"{name}.log")


def wait_for(
    predicate: Callable[[], bool],
    timeout: float,
    what: str,
    services: Service | Iterable[Service] = (),
    interval: float = 0.2,
) -> None:
    """Poll ``predicate``; on timeout raise with the tails of the services' logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    svcs = [services] if isinstance(services, Service) else list(services)
    tails = "\n".join(f"--- {s.name}:\n{s.log_text()[-3000:]}" for s in svcs)
    raise DeployError(f"timed out after {timeout:g} s: {what}\n{tails}")
