"""The node launcher: it caps the SuperNode's idle wait, restarts a worker that
dies but stops on a refused socket folder, refuses to run apps unchecked on
another Flower, and removes its socket files on SIGTERM and SIGINT."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from fedpath.deploy import node, processes
from fedpath.runtime.flower import worker_protocol


def test_poll_interval_caps_the_supernodes_idle_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flwr.supernode import start_client_internal as sci

    monkeypatch.setattr(sci, "time", time)  # restored after the test
    assert node.patch_poll_interval(0.05)
    t0 = time.perf_counter()
    sci.time.sleep(node.FLOWER_POLL_S)  # what the idle SuperNode calls
    assert time.perf_counter() - t0 < 1.0
    assert sci.time.monotonic is time.monotonic  # everything else is time's
    assert not node.patch_poll_interval(0.05)  # applied once; not twice


@pytest.mark.slow
def test_the_node_restarts_a_worker_that_dies(tmp_path: Path) -> None:
    sock = processes.worker_socket(processes.free_port())
    sup = node.WorkerSupervisor(sock, tmp_path / "worker.log").start()
    try:
        assert sup.wait_ready(120), (tmp_path / "worker.log").read_text()
        assert sup.proc is not None
        first = sup.proc.pid
        sup.proc.kill()  # e.g. the kernel's out-of-memory killer
        deadline = time.monotonic() + 60
        while sup.restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sup.restarts == 1
        assert sup.wait_ready(120), (tmp_path / "worker.log").read_text()
        assert worker_protocol.ping(sock) not in (first, 0)
    finally:
        sup.stop()
    assert sup.proc is not None and sup.proc.poll() is not None


@pytest.fixture
def node_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The node's log lines (``main`` adds a stderr handler: removed afterwards)."""
    handlers = list(node.log.handlers)
    with caplog.at_level("INFO", logger="fedpath"):
        yield caplog
    node.log.handlers[:] = handlers


def test_a_refused_socket_folder_stops_the_node(
    tmp_path: Path, node_log: pytest.LogCaptureFixture
) -> None:
    """Before: the worker failed, was restarted, failed... for ever. Now the node
    exits 2 with the reason before it starts the worker or Flower."""
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    assert node.main(["--socket", str(not_a_folder / "w.sock"), "--"]) == 2
    assert f"the worker's socket folder {not_a_folder}" in node_log.text
    assert "the node does not start" in node_log.text
    shared = Path(tempfile.mkdtemp(prefix="fpw"))
    try:
        shared.chmod(0o777)
        assert node.main(["--socket", str(shared / "w.sock"), "--"]) == 2
        assert "writable by group or others" in node_log.text
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_a_worker_that_refuses_its_folder_is_not_restarted(tmp_path: Path) -> None:
    sup = node.WorkerSupervisor(tmp_path / "w.sock")
    stopped: list[str | None] = []
    sup.on_fatal = lambda: stopped.append(sup.fatal)
    refusing = [sys.executable, "-c", f"raise SystemExit({node.REFUSED})"]
    sup.command = lambda: refusing  # type: ignore[method-assign]
    sup.start()
    try:
        assert not sup.wait_ready(30)
        assert sup.restarts == 0 and stopped == [sup.fatal] and sup.fatal
    finally:
        sup.stop()


def test_the_node_refuses_to_run_apps_unchecked_on_another_flower(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, node_log: pytest.LogCaptureFixture
) -> None:
    import flwr

    monkeypatch.setattr(flwr, "__version__", "1.43.0")
    assert node.main(["--approved-apps", str(tmp_path / "a.yaml"), "--"]) == 2
    assert "app approval is written for Flower 1.42.x, found 1.43.0" in node_log.text


_EARLY_STOP = """
import os, signal, sys, threading, time
from fedpath.deploy import node

class Supervisor:
    def stop(self):
        open(sys.argv[1], "w").write("stopped")

early = node.EarlyStop()
early.supervisor = Supervisor()
signal.signal(signal.SIGTERM, early)
# what Flower has running before it installs its own handlers: a non-daemon
# thread (its Runtime API server) that a plain SystemExit would wait for forever
threading.Thread(target=time.sleep, args=(3600,)).start()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(3600)
"""


def test_a_signal_before_flower_is_up_stops_the_worker_and_exits_at_once(
    tmp_path: Path,
) -> None:
    mark = tmp_path / "stopped"
    proc = subprocess.run(
        [sys.executable, "-c", _EARLY_STOP, str(mark)], timeout=60, capture_output=True
    )
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr.decode()
    assert mark.read_text() == "stopped"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_removes_the_nodes_socket_and_key(tmp_path: Path, sig: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="fpn"))
    sock = folder / "n.sock"
    nowhere = f"127.0.0.1:{processes.free_port()}"  # Flower keeps retrying it
    cmd = processes.supernode_command(
        nowhere, processes.free_port(), {"client-id": "h/c0"}, worker=sock
    )
    log = tmp_path / "node.log"
    with log.open("wb") as out:
        # Flower's own tools on PATH, as every fedpath launcher gives them: the
        # SuperNode starts flower-superexec by name and stops if it is missing
        env = processes.flower_env(tmp_path / "flwr")
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)

    def worker_up() -> bool:
        assert proc.poll() is None, f"the node exited early:\n{log.read_text()}"
        return worker_protocol.key_path(sock).exists() and _answers(sock)

    try:
        processes.wait_for(worker_up, 120, "the node's worker")
        proc.send_signal(sig)
        proc.wait(60)
        assert not sock.exists() and not worker_protocol.key_path(sock).exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        shutil.rmtree(folder, ignore_errors=True)


def _answers(sock: Path) -> bool:
    try:
        return worker_protocol.ping(sock) > 0
    except worker_protocol.WorkerError:
        return False
