"""App approval over real processes: a SuperLink and two SuperNodes on loopback,
the nodes started as ``fedpath flower supernode`` starts them (approval on, the
persistent worker). An app whose client module writes a marker file when it is
imported is refused by both nodes (the marker never appears, the coordinator's
run fails and its log says why); the approved fedpath app still runs bit-exact
with in-process on the same nodes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from fedpath.deploy import approval, flwr_cli, processes
from fedpath.runtime.flower import (
    RC_CONFIG,
    RC_ON_FAILURE,
    RC_SELF_DECLARED,
    RC_WAIT_NODES,
)
from tests.flower_helpers import (
    Federation,
    assert_same_run,
    config,
    in_process,
    run_logs,
)

CLIENTS = ("hospital_0/c0", "hospital_1/c0")
#: no client registry here: the nodes' approval is what is tested
SELF_DECLARED = {RC_SELF_DECLARED: True}


def malicious_app(folder: Path, marker: Path) -> Path:
    """fedpath's app with its ``clientapp`` swapped for a module that writes
    ``marker`` as soon as a node imports it (what an attacker's code could do)."""
    flwr_cli.write_app(folder)
    pyproject = folder / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace(
            'clientapp = "fedpath.runtime.flower.client_app:app"',
            'clientapp = "planted:app"',
        )
    )
    (folder / "planted.py").write_text(
        "from pathlib import Path\n"
        "from flwr.clientapp import ClientApp\n"
        f"Path({str(marker)!r}).write_text('imported on a node')\n"
        "app = ClientApp()\n"
    )
    return folder


@pytest.fixture(scope="module")
def approving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    """SuperLink + two nodes that run only the apps in their approved lists,
    where each hospital approved fedpath's own app (`fedpath flower approve`)."""
    root = tmp_path_factory.mktemp("approval")
    link, address = processes.start_superlink(root / "link")
    fed = Federation(
        root, address, root / "cli", flwr_cli.write_app(root / "app"), "test", [link]
    )
    try:
        flwr_cli.write_connection(fed.home, "test", address)
        for i, cid in enumerate(CLIENTS):
            listed = approval.default_path(root / f"node{i}")
            approval.approve(listed, approval.shipped_app_digest(), "fedpath's app")
            fed.services.append(
                processes.start_supernode(
                    root, f"node{i}", address, {"client-id": cid}, approved_apps=listed
                )
            )
        for svc in fed.services[1:]:
            svc.wait_log("SuperNode ID", 60)
    except BaseException:
        fed.stop()
        raise
    yield fed
    fed.stop()


@pytest.mark.slow
def test_an_unapproved_app_is_refused_before_any_import(
    approving: Federation, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    app = malicious_app(tmp_path / "planted_app", marker)
    digest = approval.app_dir_digest(app)
    cfg = config(tmp_path / "flower", "train.rounds=1")
    values = {
        RC_CONFIG: cfg.to_yaml(),
        RC_WAIT_NODES: 10.0,
        RC_ON_FAILURE: "stop",
        **SELF_DECLARED,
    }
    run_id = flwr_cli.start_run(app, "test", approving.home, values)
    status = flwr_cli.wait_run(run_id, "test", approving.home, 180, poll=1.0)
    logs = run_logs(run_id, "test", approving.home)
    assert "failed" in status, f"{status}\n{logs[-3000:]}"
    # the coordinator's log says each node refused it, and why
    assert logs.count("cannot serve: The FAB could not be verified") == 2, logs
    for node in approving.services[1:]:
        assert f"app {digest} refused: not in" in node.log_text()
        assert "fedpath flower approve" in node.log_text()
    assert not marker.exists()  # no node imported the app's code


@pytest.mark.slow
def test_the_approved_app_runs_bit_exact(approving: Federation, tmp_path: Path) -> None:
    cfg = config(tmp_path / "flower", "train.rounds=1")
    approving.run(cfg, **SELF_DECLARED)
    assert_same_run(cfg, in_process(tmp_path, "train.rounds=1"))
    digest = approval.shipped_app_digest()
    for node in approving.services[1:]:
        assert f"app {digest} approved" in node.log_text()
