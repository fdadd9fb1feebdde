"""Stand up a Flower federation for fedpath: processes, certificates, keys, runs.

Used by the tests, the benchmark and ``fedpath flower ...``; each helper is a thin
wrapper around a plain Flower command (``flower-superlink``, ``flower-supernode``,
``flwr run``, ``flwr supernode register``), so ``docs/flower.md`` can show the
command itself. Every process gets its own ``FLWR_HOME`` (as on separate machines)
and is stopped with its descendants (Flower's SuperExec and app processes).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import tomli_w
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedpath.runtime.flower import NC_WORKER

#: The Flower app (a FAB is built from this folder): both components are fedpath
#: modules, so the app carries no code; the run config holds the experiment.
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
"""

LOCALHOST = ("127.0.0.1", "localhost")


class DeployError(RuntimeError):
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


def write_app(folder: Path) -> Path:
    """Write the Flower app (its ``pyproject.toml``) into ``folder``; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(APP_PYPROJECT)
    return folder


# --------------------------------------------------------------------------- TLS


@dataclass(frozen=True)
class TlsFiles:
    """A CA certificate and a server certificate + key signed by it (PEM files)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def make_certificates(
    folder: Path, hosts: Sequence[str] = LOCALHOST, days: int = 365
) -> TlsFiles:
    """A private CA and a SuperLink certificate for ``hosts`` (IPs or DNS names).

    For tests and first trials; a hospital would use certificates from its own
    PKI. The server certificate's subject alternative names must contain the
    address the SuperNodes and the ``flwr`` CLI use to reach the SuperLink.
    """
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedpath test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(folder / "ca.crt", folder / "server.pem", folder / "server.key")
    files.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(
        files.server_key,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    return files


def make_node_keys(folder: Path, name: str) -> tuple[Path, Path]:
    """An EC (NIST P-384) key pair for SuperNode authentication, OpenSSH format.

    Same as ``ssh-keygen -t ecdsa -b 384 -N "" -f FOLDER/NAME``: the private key
    stays on the node (``--auth-supernode-private-key``), the public key is
    registered at the SuperLink (``flwr supernode register NAME.pub``).
    """
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    private, public = folder / name, folder / f"{name}.pub"
    _write_private(
        private,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ),
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        + f" {name}\n".encode()
    )
    return private, public


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# --------------------------------------------------------------------------- processes


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

    Short on purpose (a Unix socket path has at most 107 bytes) and private to the
    user: ``<tmp>/fedpath-<uid>/node-<port>.sock``.
    """
    return Path(tempfile.gettempdir()) / f"fedpath-{os.getuid()}" / f"node-{port}.sock"


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
) -> list[str]:
    """``flower-supernode`` serving one fedpath client (see client_app's keys).

    With a ``worker`` socket or a ``poll_interval`` the node runs through
    :mod:`.node` (``python -m fedpath.runtime.flower.node ... -- <the same
    flower-supernode arguments>``), which starts the persistent worker and caps
    the SuperNode's idle waits; with neither it is the plain Flower command.
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
    if worker is None and poll_interval is None:
        return [flower_bin("flower-supernode"), *args]
    node = [sys.executable, "-m", "fedpath.runtime.flower.node"]
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
) -> Service:
    """Start a SuperNode (home ``folder/name``, log ``folder/name.log``).

    With ``worker`` (default) it runs with a persistent worker whose log is
    ``folder/name.worker.log``; ``worker=False, poll_interval=None`` is plain Flower.
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
    )
    return _start(name, cmd, folder / name, folder / f"{name}.log")


# --------------------------------------------------------------------------- flwr CLI


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
    app: Path, connection: str, home: Path, run_config: Mapping[str, Any]
) -> int:
    """``flwr run APP CONNECTION --run-config FILE``; return the run id."""
    cfg_file = run_config_file(run_config, home / "run-configs")
    res = flwr(
        [
            "run",
            str(app),
            connection,
            "--run-config",
            str(cfg_file),
            "--format",
            "json",
        ],
        home,
    )
    try:
        return int(json.loads(res.stdout[res.stdout.index("{") :])["run-id"])
    except (ValueError, KeyError, TypeError):
        raise DeployError(f"flwr run: no run id in its output:\n{res.stdout}") from None


def run_status(run_id: int, connection: str, home: Path) -> str:
    """The run's status as ``flwr ls`` reports it (e.g. ``running``, ``finished``)."""
    res = flwr(["ls", connection, "--run-id", str(run_id), "--format", "json"], home)
    data = json.loads(res.stdout[res.stdout.index("{") :])
    runs = data.get("runs", [])
    if not runs:
        raise DeployError(f"flwr ls: run {run_id} unknown:\n{res.stdout}")
    return str(runs[0].get("status", ""))


def run_logs(run_id: int, connection: str, home: Path) -> str:
    """The logs of a run so far (``flwr log RUN CONNECTION --show``)."""
    res = flwr(["log", str(run_id), connection, "--show"], home, check=False)
    return res.stdout + res.stderr


def wait_run(
    run_id: int,
    connection: str,
    home: Path,
    timeout: float,
    done: Callable[[], bool] | None = None,
    poll: float = 3.0,
) -> str:
    """Wait until the run leaves pending/starting/running (or ``done()`` holds)."""
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        if done is not None and done():
            return "done"
        status = run_status(run_id, connection, home)
        if status.startswith("finished"):
            return status
        time.sleep(poll)
    raise DeployError(f"run {run_id} still {status!r} after {timeout:g} s")


def register_node(public_key: Path, connection: str, home: Path) -> str:
    """``flwr supernode register KEY.pub CONNECTION``; return the CLI output."""
    res = flwr(["supernode", "register", str(public_key), connection], home)
    return res.stdout


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
