"""The SuperNode's persistent worker: same results, same errors, private socket.

The fast tests serve the worker in a thread of this process and run the Flower
ClientApp over :class:`~tests.runtime.test_flower_loopback.LoopbackGrid` with node
config ``worker`` set, so every stage crosses the worker's socket; the slow ones start
the worker as the node does (a supervised child process).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict

from fedpath.deploy import processes, worker
from fedpath.runtime.flower import RC_CONFIG, worker_protocol
from fedpath.runtime.flower.client_app import app as client_app
from fedpath.types import Payload
from tests.flower_helpers import (
    assert_same_run,
    config,
    in_process,
    nodes_for,
    run_over_grid,
    stage_message,
)


@pytest.fixture
def socket() -> Iterator[Path]:
    """A worker served by a thread of this process (short path: AF_UNIX limit)."""
    folder = Path(tempfile.mkdtemp(prefix="fpw"))
    sock = folder / "w.sock"
    ready = threading.Event()
    thread = threading.Thread(target=worker.serve, args=(sock, ready), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield sock
    worker_protocol.stop(sock)
    thread.join(10)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every request the worker answers (to show the stages went through it)."""
    seen: list[dict[str, Any]] = []
    answer = worker.answer

    def counting(request: dict[str, Any]) -> tuple[str, Any, Any]:
        seen.append(request)
        return answer(request)

    monkeypatch.setattr(worker, "answer", counting)
    return seen


@pytest.mark.parametrize("algorithm", ["fedavg", "fedstain", "fedbn"])
def test_run_through_the_worker_equals_in_process(
    tmp_path: Path,
    task_identity: None,
    socket: Path,
    served: list[dict[str, Any]],
    algorithm: str,
) -> None:
    extra = f"algorithm.name={algorithm}"
    cfg = config(tmp_path / "flower", extra)
    through = {"worker": str(socket)}
    nodes = nodes_for(
        "hospital_0/c0",
        "hospital_1/c0",
        **dict.fromkeys(["hospital_0", "hospital_1"], through),
    )
    run_over_grid(cfg, nodes)
    assert_same_run(cfg, in_process(tmp_path, extra))
    stages = 2 if algorithm == "fedstain" else 1  # statistics + fit
    assert len(served) == 2 * cfg.train.rounds * stages
    if algorithm == "fedbn":  # the private BatchNorm entries went there and back
        assert any(len(r["state"].array_records) for r in served)


def _reason(msg: Any, context: Context) -> str:
    reply = client_app(msg, context)
    assert reply.has_error()
    return reply.error.reason or ""


@pytest.mark.parametrize(
    ("node_config", "header", "expected"),
    [
        ({"data-name": "manifest", "data-root": "/no/such/dir"}, {}, "no/such"),
        ({}, {"classes": ["benign", "malignant"]}, "classes ['normal', 'tum"),
        ({}, {"stage": "distill"}, "has no stage 'distill'"),
    ],
)
def test_errors_in_the_worker_read_as_without_it(
    tmp_path: Path,
    task_identity: None,
    socket: Path,
    node_config: dict[str, Any],
    header: dict[str, Any],
    expected: str,
) -> None:
    cfg = config(tmp_path)
    msg = stage_message(cfg, Payload({"weights": {}}), **header)
    reasons = []
    for extra in ({}, {"worker": str(socket)}):
        nc = {"client-id": "hospital_0/c0", **node_config, **extra}
        context = Context(1, 7, nc, RecordDict(), {RC_CONFIG: cfg.to_yaml()})
        reasons.append(_reason(msg, context))
    assert reasons[0] == reasons[1]
    assert reasons[1].startswith("client hospital_0/c0 (node 7): "), reasons[1]
    assert expected in reasons[1]


def test_a_node_whose_worker_is_down_says_so(
    tmp_path: Path,
    task_identity: None,
) -> None:
    cfg = config(tmp_path)
    msg = stage_message(cfg, Payload({"weights": {}}))
    missing = tmp_path / "gone.sock"
    nc: dict[str, Any] = {"client-id": "hospital_0/c0", "worker": str(missing)}
    reason = _reason(msg, Context(1, 7, nc, RecordDict(), {RC_CONFIG: cfg.to_yaml()}))
    assert reason.startswith("client hospital_0/c0 (node 7): the node's worker at ")
    assert "is not running" in reason and "fedpath flower supernode" in reason


def test_the_socket_is_private_and_needs_the_key(socket: Path) -> None:
    assert socket.stat().st_mode & 0o077 == 0
    assert worker_protocol.key_path(socket).stat().st_mode & 0o777 == 0o600
    with pytest.raises(AuthenticationError):
        Client(str(socket), family="AF_UNIX", authkey=b"not the key")
    assert worker_protocol.ping(socket) > 0  # still serving


def test_a_failed_stage_leaves_the_node_state_alone(socket: Path) -> None:
    """Only a stage that succeeded replaces ``context.state`` (FedBN: test above)."""
    from flwr.app import Array, ArrayRecord

    context = Context(1, 7, {"client-id": "x"}, RecordDict(), {})
    context.state["stale"] = ArrayRecord({"a": Array(np.zeros(2))})
    with pytest.raises(
        worker_protocol.WorkerError, match="NodeError: client x: message"
    ):
        worker_protocol.call(socket, RecordDict(), context)
    assert "stale" in context.state  # a failed stage leaves the state alone


def test_cli_supernode_runs_with_a_worker_unless_told_not_to(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fedpath.cli import main

    base = ["flower", "supernode", "--superlink", "10.0.0.1:9092", "--insecure"]
    base += ["--client-id", "hospital_0/c0", "--port", "9111", "--dry-run"]
    assert main(base) == 0
    cmd = capsys.readouterr().out
    sock = processes.worker_socket(9111)
    assert "-m fedpath.deploy.node" in cmd
    assert f"--socket {sock} --poll-interval 0.2 --" in cmd
    assert f'worker="{sock}"' in cmd
    assert (
        main([*base, "--no-worker", "--poll-interval", "0", "--no-app-approval"]) == 0
    )
    plain = capsys.readouterr().out
    assert "flower-supernode --superlink 10.0.0.1:9092" in plain
    assert "worker" not in plain and "fedpath.deploy.node" not in plain
    assert main([*base, "--worker-socket", "/tmp/" + "x" * 120]) != 0
    assert "shorter than 100 characters" in capsys.readouterr().err


def test_a_socket_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="fpw"))
    try:
        folder.chmod(0o777)  # e.g. pre-created by another local user
        sock = folder / "w.sock"
        with pytest.raises(worker_protocol.WorkerError, match="writable by group"):
            worker.serve(sock)
        with pytest.raises(worker_protocol.WorkerError, match="writable by group"):
            worker_protocol.ping(sock)  # the calling side checks it as well
        folder.chmod(0o700)
        link = Path(tempfile.mkdtemp(prefix="fpl")) / "d"
        link.symlink_to(folder)
        with pytest.raises(worker_protocol.WorkerError, match="not a directory"):
            worker.serve(link / "w.sock")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_socket_folder_of_another_user_is_refused() -> None:
    import os

    if os.getuid() != 0:
        pytest.skip("chown to another user needs root")
    folder = Path(tempfile.mkdtemp(prefix="fpw"))
    try:
        os.chown(folder, 54321, -1)
        with pytest.raises(worker_protocol.WorkerError, match="belongs to uid 54321"):
            worker.serve(folder / "w.sock")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_silent_connection_does_not_block_the_worker() -> None:
    import socket as pysocket

    folder = Path(tempfile.mkdtemp(prefix="fpw"))
    sock = folder / "w.sock"
    ready = threading.Event()
    thread = threading.Thread(target=worker.serve, args=(sock, ready, 0.3), daemon=True)
    thread.start()
    assert ready.wait(10)
    silent = pysocket.socket(pysocket.AF_UNIX)
    silent.connect(str(sock))  # connects, never answers the challenge
    answered: list[int] = []
    pinger = threading.Thread(
        target=lambda: answered.append(worker_protocol.ping(sock)), daemon=True
    )
    try:
        pinger.start()  # the worker drops the silent one after 0.3 s, then answers
        pinger.join(10)
        assert answered and answered[0] > 0, "a silent connection blocked the worker"
    finally:
        silent.close()
    worker_protocol.stop(sock)
    thread.join(10)
    # stopping removes the socket and its key
    assert not sock.exists() and not worker_protocol.key_path(sock).exists()
    shutil.rmtree(folder, ignore_errors=True)


def test_a_worker_refused_its_folder_exits_with_the_code_the_node_stops_on(
    tmp_path: Path,
) -> None:
    """The node restarts a worker that exits, except with this code (its socket
    folder is refused: a restart cannot help)."""
    import signal

    from fedpath.deploy.node import REFUSED

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    before = signal.getsignal(signal.SIGTERM)
    try:
        assert worker.main(["--socket", str(not_a_folder / "w.sock")]) == REFUSED
    finally:
        signal.signal(signal.SIGTERM, before)
