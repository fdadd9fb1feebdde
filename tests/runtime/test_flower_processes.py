"""fedpath over Flower's SuperLink and SuperNode processes equals fedpath in-process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from fedpath.deploy import flwr_cli, pki, processes
from fedpath.runtime.experiment import run_dir_for
from fedpath.runtime.flower import RC_CONFIG, RC_REPLY_TIMEOUT, RC_WAIT_NODES
from fedpath.utils.io import read_jsonl
from tests.flower_helpers import (
    Federation,
    assert_same_run,
    config,
    in_process,
    run_logs,
    start_federation,
)


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    fed = start_federation(
        tmp_path_factory.mktemp("flower"), ["hospital_0/c0", "hospital_1/c0"]
    )
    yield fed
    fed.stop()


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["fedavg", "fedstain"])
def test_deployment_equals_in_process(
    federation: Federation, tmp_path: Path, algorithm: str
) -> None:
    extra = f"algorithm.name={algorithm}"
    cfg = config(tmp_path / "flower", extra)
    federation.run(cfg)
    assert_same_run(cfg, in_process(tmp_path, extra))


@pytest.mark.slow
def test_a_failed_run_exits_1_with_the_servers_reason(
    federation: Federation,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``fedpath flower run`` over real processes: every node's policy refuses
    the run (the default policy serves no algorithm that uploads raw data), the
    ServerApp fails, and the command exits 1 with its reason (it used to exit 0
    as soon as the run was started)."""
    from fedpath.cli import main

    cfg = config(tmp_path / "flower", "algorithm.name=central_supervised")
    path = tmp_path / "refused.yaml"
    path.write_text(cfg.to_yaml())
    monkeypatch.setenv("FLWR_HOME", str(federation.home))
    argv = ["flower", "run", str(path), "--connection", "test", "--wait-nodes", "5"]
    assert main([*argv, "--allow-self-declared-ids", "--stream"]) == 1
    err = capsys.readouterr().err
    assert "finished:failed: no node serves this run: their node policies refuse" in (
        err
    ), err
    assert "central_supervised" in err


@pytest.mark.slow
def test_node_killed_mid_run(federation: Federation, tmp_path: Path) -> None:
    """The round completes with the remaining node after reply-timeout."""
    cfg = config(tmp_path / "flower", "train.min_replies=1")
    results = run_dir_for(cfg, "hospital_2", 0) / "results.jsonl"

    def round_one_done() -> bool:
        return (
            results.is_file() and '"kind": "round", "round": 1' in results.read_text()
        )

    values = {RC_CONFIG: cfg.to_yaml(), RC_REPLY_TIMEOUT: 45.0, RC_WAIT_NODES: 60.0}
    values.update(federation.identity())
    run_id = flwr_cli.start_run(federation.app, "test", federation.home, values)
    processes.wait_for(round_one_done, 240, "round 1 of the run", federation.services)
    doomed = federation.services[2]  # serves hospital_1/c0
    doomed.stop(kill=True)  # the hospital's machine goes down: no reply, no goodbye
    final = run_dir_for(cfg, "hospital_2", 0) / "final.json"
    try:
        flwr_cli.wait_run(run_id, "test", federation.home, 240, done=final.is_file)
    finally:  # the next test gets a federation of two again
        federation.services[2] = processes.start_supernode(
            federation.root,
            "node1-again",
            federation.address,
            {"client-id": "hospital_1/c0"},
        )
    rounds = [r for r in read_jsonl(results) if r["kind"] == "round"]
    assert [r["failed"] for r in rounds] == [0, 1]
    failures = [r for r in read_jsonl(results) if r["kind"] == "failure"]
    assert [(f["round"], f["client"]) for f in failures] == [(2, "hospital_1/c0")]
    # the SuperLink answers for a node it lost, or nothing arrives in time
    reason = failures[0]["reason"]
    assert "no reply within reply-timeout=45 s" in reason or "node" in reason.lower()
    node = failures[0]["node"]
    logs = run_logs(run_id, "test", federation.home)
    assert f"client hospital_1/c0 (node {node}) failed" in logs
    assert json.loads(final.read_text())["round"] == 2
    federation.services[2].wait_log("SuperNode ID", 60)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    root = tmp_path_factory.mktemp("secure")
    tls = pki.make_certificates(root / "certs")
    clients = ["hospital_0/c0", "hospital_1/c0"]
    keys = {
        c: pki.make_node_keys(root / "keys", f"h{i}") for i, c in enumerate(clients)
    }
    fed = start_federation(root, clients, tls, keys, worker=False)  # plain Flower
    yield fed
    fed.stop()


@pytest.mark.slow
def test_tls_and_authenticated_nodes_equal_in_process(
    secure: Federation, tmp_path: Path
) -> None:
    assert "Uvicorn running on https://" in secure.services[0].log_text()
    cfg = config(tmp_path / "flower", "train.rounds=1")
    secure.run(cfg)
    assert_same_run(cfg, in_process(tmp_path, "train.rounds=1"))


@pytest.mark.slow
def test_unregistered_node_is_refused(secure: Federation) -> None:
    key, _ = pki.make_node_keys(secure.root / "keys", "rogue")
    ca = secure.root / "certs" / "ca.crt"
    rogue = processes.start_supernode(
        secure.root,
        "rogue",
        secure.address,
        {"client-id": "hospital_0/c0"},
        ca,
        key,
        max_wait=5,
    )
    secure.services.append(rogue)
    processes.wait_for(
        lambda: not rogue.alive(), 60, "the rogue node to give up", rogue
    )
    assert rogue.proc.returncode != 0
    assert "Failed to activate SuperNode" in rogue.log_text()
    assert "No SuperNode found with the given public key" in (
        secure.services[0].log_text()
    )
    listed = flwr_cli.flwr(["supernode", "ls", "test", "--format", "json"], secure.home)
    assert listed.stdout.count('"node-id"') == 2, listed.stdout
