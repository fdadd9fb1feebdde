"""App approval at the node: the digest ``fedpath flower approve`` writes is the one
Flower computes, and the hook in Flower 1.42's SuperNode stores (so runs) only an
approved FAB; an unapproved one gets Flower's error reply and a logged reason.
Over real processes: tests/deploy/test_approval_loopback.py."""

from __future__ import annotations

import hashlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from flwr.app import Message, RecordDict
from flwr.supercore.fab import Fab
from flwr.supercore.task_identity import TaskIdentity
from flwr.supernode import start_client_internal as sci

from fedpath.cli import main
from fedpath.config import ConfigError
from fedpath.deploy import approval, flwr_cli

REPO = Path(__file__).resolve().parents[2]


def fab_of(folder: Path) -> bytes:
    from flwr.cli.build import build_fab_from_disk

    with warnings.catch_warnings():  # Flower's own build, not fedpath's call
        warnings.filterwarnings("ignore", "GitWildMatchPattern", DeprecationWarning)
        return build_fab_from_disk(folder)


def test_the_shipped_apps_digest_is_flowers_fab_hash(tmp_path: Path) -> None:
    """``flwr run`` hashes the FAB it builds with SHA-256; fedpath's app builds to
    the same bytes wherever it is written, so a hospital can approve it itself."""
    built = fab_of(flwr_cli.write_app(tmp_path / "elsewhere"))
    assert approval.shipped_app_digest() == hashlib.sha256(built).hexdigest()
    assert approval.shipped_app_digest() == approval.shipped_app_digest()
    assert approval.app_dir_digest(REPO / "flower_app") == approval.fab_digest(built)


def test_building_the_app_passes_on_no_dependency_deprecation(tmp_path: Path) -> None:
    """Flower 1.42 builds with pathspec's deprecated 'gitwildmatch' patterns; the
    node's build gives the same bytes and shows its operator none of those."""
    folder = flwr_cli.write_app(tmp_path / "app")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        built = approval.build_app(folder)
    assert built == fab_of(folder)
    assert [str(w.message) for w in seen] == []


def test_approve_writes_the_list_the_node_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = tmp_path / "node" / "approved_apps.yaml"
    argv = ["flower", "approve", "--approved-apps", str(listed)]
    assert main(argv) == 0
    digest = approval.shipped_app_digest()
    assert f"{digest} approved in {listed}" in capsys.readouterr().out
    assert main(argv) == 0
    assert "already approved" in capsys.readouterr().out
    other = tmp_path / "other"
    flwr_cli.write_app(other)
    (other / "pyproject.toml").write_text(
        (other / "pyproject.toml").read_text().replace("1.0.0", "1.0.1")
    )
    fab = tmp_path / "coordinator.fab"
    fab.write_bytes(fab_of(other))
    assert main([*argv, str(fab)]) == 0
    assert set(approval.load_approved(listed)) == {
        digest,
        hashlib.sha256(fab.read_bytes()).hexdigest(),
    }
    assert "coordinator.fab" in listed.read_text()


def test_approve_names_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listed = ["--approved-apps", str(tmp_path / "a.yaml")]
    assert main(["flower", "approve", str(tmp_path / "none.fab"), *listed]) == 2
    assert "none.fab' does not exist" in capsys.readouterr().err
    text = tmp_path / "app.fab"
    text.write_text("secret first line\n")
    assert main(["flower", "approve", str(text), *listed]) == 2
    err = capsys.readouterr().err
    assert "is not a FAB" in err and "secret" not in err
    assert main(["flower", "approve", "--app-dir", str(tmp_path), *listed]) == 2
    assert "no pyproject.toml there" in capsys.readouterr().err
    assert not (tmp_path / "a.yaml").exists()


def test_a_bad_approved_list_is_named(tmp_path: Path) -> None:
    path = tmp_path / "approved_apps.yaml"
    assert approval.load_approved(path) == {}  # none yet: every app is refused
    path.write_text("not-a-digest: x\n")
    with pytest.raises(ConfigError, match="approved apps .* is not a SHA-256"):
        approval.load_approved(path)
    path.write_text("- a\n")
    with pytest.raises(ConfigError, match="expected a mapping of digest: note"):
        approval.load_approved(path)


# ------------------------------------------------- the hook in Flower's SuperNode


class Stored(Exception):
    """Raised by the fake node state when Flower stores the FAB (it would run)."""


class FakeState:
    """The few NodeState calls ``_pull_and_store_message`` makes before storing."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def get_run(self, run_id: int) -> None:
        return None  # an unknown run: the FAB is fetched and checked

    def get_node_id(self) -> int:
        return 1

    def get_run_series_context(self, series_id: int) -> None:
        return None

    def set_run_series_context(self, series_id: int, context: Any) -> None:
        pass

    def store_run(self, run: Any) -> None:
        pass

    def store_message(self, msg: Message) -> None:
        self.messages.append(msg)

    def store_fab(self, fab: Fab) -> None:
        raise Stored(fab.hash_str)


class FakeStore:
    def preregister(self, run_id: int, tree: Any) -> list[str]:
        return []

    def put(self, object_id: str, content: bytes) -> None:
        pass


@pytest.fixture
def hooked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Flower's module with the approval hook installed (restored afterwards)."""
    monkeypatch.setattr(sci, "_pull_and_store_message", sci._pull_and_store_message)
    monkeypatch.setattr(sci, "_verify_fab", sci._verify_fab)
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 5, 1, 1
    listed = tmp_path / "approved_apps.yaml"
    approval.install_approval(listed)
    yield listed
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def pull(fab: bytes) -> tuple[FakeState, Any]:
    """One message of an unknown run, whose FAB is ``fab``, through Flower's
    ``_pull_and_store_message``: the node state and what it returned or raised."""
    msg = Message(RecordDict(), dst_node_id=1, message_type="train")
    msg.metadata.__dict__["_message_id"] = msg.object_id
    run = type("Run", (), {"fab_hash": "x", "override_config": {}, "series_id": 0})
    state = FakeState()
    try:
        flower_pull: Any = sci._pull_and_store_message  # called with fakes
        out: Any = flower_pull(
            state=state,
            object_store=FakeStore(),
            node_config={},
            receive=lambda: (msg, None),
            get_run=lambda run_id: run,
            get_fab=lambda fab_hash, run_id: Fab(fab_hash, fab, {}),
            pull_object=None,
            confirm_message_received=None,
            trusted_entities=None,  # as flower-supernode passes it by default
        )
    except Stored as stored:
        out = stored
    return state, out


def test_only_an_approved_fab_is_stored(
    hooked: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fab = fab_of(flwr_cli.write_app(tmp_path / "app"))
    digest = approval.fab_digest(fab)
    with caplog.at_level(logging.ERROR, logger="fedpath"):
        state, out = pull(fab)
    assert out == 5  # handled: Flower's error reply is queued, the FAB is not stored
    [reply] = state.messages
    assert reply.has_error() and reply.error.reason == "The FAB could not be verified."
    assert f"app {digest} refused: not in {hooked}" in caplog.text
    assert "fedpath flower approve" in caplog.text

    approval.approve(hooked, digest, "test")  # no restart: the list is read per run
    state, out = pull(fab)
    assert isinstance(out, Stored) and state.messages == []
    state, out = pull(fab + b" ")  # any other bytes: another digest, refused
    assert out == 5 and state.messages[0].has_error()


def test_a_broken_list_refuses_every_app(
    hooked: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hooked.write_text("{broken")
    with caplog.at_level(logging.ERROR, logger="fedpath"):
        state, out = pull(fab_of(flwr_cli.write_app(tmp_path / "app")))
    assert out == 5 and state.messages[0].has_error()
    assert "is not valid YAML" in caplog.text


def test_another_flower_series_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import flwr

    monkeypatch.setattr(flwr, "__version__", "1.43.0")
    monkeypatch.setattr(sci, "_pull_and_store_message", sci._pull_and_store_message)
    with pytest.raises(ConfigError, match="found 1.43.0"):
        approval.install_approval(tmp_path / "approved_apps.yaml")
    assert not hasattr(sci._pull_and_store_message, "_fedpath_gated")
