"""The node launcher: it caps the SuperNode's idle wait and restarts a worker
that dies."""

from __future__ import annotations

import time
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
