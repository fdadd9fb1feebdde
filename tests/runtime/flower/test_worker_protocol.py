"""The calling side of a node's worker refuses folders and keys others could swap,
and says so when the worker is not running (the serving side:
tests/deploy/test_worker.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict

from fedpath.runtime.flower.worker_protocol import (
    WorkerError,
    call,
    key_path,
    ping,
    private_dir,
)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short folder (a socket path has at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="fpp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_key_sits_beside_the_socket() -> None:
    assert key_path(Path("/run/x/node.sock")) == Path("/run/x/node.sock.key")


def test_private_dir_creates_0700_and_refuses_shared_ones(short_dir: Path) -> None:
    made = private_dir(short_dir / "new", create=True)
    assert made.stat().st_mode & 0o777 == 0o700
    short_dir.chmod(0o770)
    with pytest.raises(WorkerError, match="writable by group or others"):
        private_dir(short_dir)
    short_dir.chmod(0o700)
    link = short_dir / "link"
    link.symlink_to(made)
    with pytest.raises(WorkerError, match="not a directory"):
        private_dir(link)
    with pytest.raises(WorkerError, match="socket folder"):
        private_dir(short_dir / "missing")


def test_a_missing_worker_is_named(short_dir: Path) -> None:
    sock = short_dir / "w.sock"
    context = Context(1, 7, {}, RecordDict(), {})
    with pytest.raises(WorkerError, match="is not running .*fedpath flower supernode"):
        call(sock, RecordDict(), context)


def test_a_key_others_can_read_is_refused(short_dir: Path) -> None:
    sock = short_dir / "w.sock"
    key = key_path(sock)
    key.write_bytes(b"k" * 32)
    os.chmod(key, 0o644)
    with pytest.raises(WorkerError, match="not a private file of this user"):
        ping(sock)
