"""The Flower commands a deployment starts, and where a node's worker listens."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.deploy import processes


def test_supernode_command_with_and_without_worker(tmp_path: Path) -> None:
    plain = processes.supernode_command(
        "127.0.0.1:9", 9094, {"client-id": "h/c0"}, poll_interval=None
    )
    assert Path(plain[0]).name == "flower-supernode"
    sock = processes.worker_socket(9094)
    cmd = processes.supernode_command(
        "127.0.0.1:9", 9094, {"client-id": "h/c0"}, worker=sock
    )
    split = cmd.index("--")
    assert cmd[1:3] == ["-m", "fedpath.deploy.node"]
    assert cmd[cmd.index("--socket") + 1] == str(sock)
    assert cmd[cmd.index("--poll-interval") + 1] == str(processes.POLL_INTERVAL)
    assert cmd[split + 1 :] == [
        *plain[1:6],
        f'client-id="h/c0" worker="{sock}"',
        *plain[7:],
    ]
    assert len(str(sock)) < 100


def test_default_socket_is_in_the_users_runtime_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert processes.worker_socket(9094) == tmp_path / "fedpath" / "node-9094.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert processes.worker_socket(9094).parent.name.startswith("fedpath-")


def test_node_config_is_one_flower_argument() -> None:
    arg = processes.node_config_arg({"client-id": "h/c0", "threads": 2, "x": True})
    assert arg == 'client-id="h/c0" threads=2 x=true'
    with pytest.raises(processes.DeployError, match="cannot carry quotes"):
        processes.node_config_arg({"data-params": "{a: 'b'}"})


def test_app_approval_runs_the_node_through_fedpath(tmp_path: Path) -> None:
    listed = tmp_path / "approved_apps.yaml"
    cmd = processes.supernode_command(
        "127.0.0.1:9",
        9094,
        {"client-id": "h/c0"},
        poll_interval=None,
        approved_apps=listed,
    )
    assert cmd[1:3] == ["-m", "fedpath.deploy.node"]
    assert cmd[cmd.index("--approved-apps") + 1] == str(listed)
    assert cmd.index("--approved-apps") < cmd.index("--")
