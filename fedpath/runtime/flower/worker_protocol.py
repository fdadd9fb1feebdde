"""The calling side of a node's persistent worker, and what both sides share.

The ClientApp process (:func:`call`) and the node launcher (:func:`ping`) talk to
the worker (:mod:`fedpath.deploy.worker`) over a local Unix socket with
:mod:`multiprocessing.connection`, which authenticates every connection with the
key in :func:`key_path` (HMAC challenge) before anything is unpickled. This
module imports Flower's record types and nothing of the ClientApp, so the thin
ClientApp process can use it and the worker can import the ClientApp without a
circle. It lives in the runtime because the ClientApp calls it; the deployment
side (the worker and the node launcher, :mod:`fedpath.deploy`) imports it from
here.

A request is a stage (a dict: the message content, ``context.state``, the run and
node config, the node and run ids) or one of :data:`STOP` and :data:`PING`; the
answer is ``(status, value, extra)``: ``("ok", reply, state)`` or
``("error", reason, traceback)`` for a stage, ``("ok", pid, None)`` for a ping.
"""

from __future__ import annotations

import os
import stat
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection
from pathlib import Path

from flwr.app import Context, RecordDict

from fedpath.errors import FedpathError

STOP = "stop"
PING = "ping"


class WorkerError(FedpathError, RuntimeError):
    """The worker could not be reached, or the message failed inside it.

    The text is the reason as it should reach the coordinator (already
    ``ExceptionType: message`` for a failure inside the worker).
    """


def key_path(socket: Path) -> Path:
    """Where the worker keeps the key that authenticates its clients."""
    return socket.with_name(socket.name + ".key")


def private_dir(folder: Path, create: bool = False) -> Path:
    """``folder`` if only this user can use it (created 0700 with ``create``).

    The socket's folder decides who can replace the socket and its key: a
    folder another local user owns, or one that group or others may write, would
    let that user put their own worker there and receive (and answer, with
    pickles) the node's stages. Such a folder is refused, not repaired.
    """
    if create:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        st = os.lstat(folder)
    except OSError as err:
        raise WorkerError(f"the worker's socket folder {folder}: {err}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise WorkerError(
            f"the worker's socket folder {folder} is not a directory (a symlink?); "
            "refused: remove it or pass --worker-socket in a folder of your own"
        )
    if st.st_uid != os.getuid():
        raise WorkerError(
            f"the worker's socket folder {folder} belongs to uid {st.st_uid}, not to "
            f"this node's user (uid {os.getuid()}); refused: another user could "
            "swap the socket. Remove it or pass --worker-socket elsewhere"
        )
    if st.st_mode & 0o022:
        raise WorkerError(
            f"the worker's socket folder {folder} is writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):o}); refused: chmod 700 it or pass "
            "--worker-socket elsewhere"
        )
    return folder


def _read_key(socket: Path) -> bytes:
    path = key_path(socket)
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise WorkerError(
            f"the worker's key {path} is not a private file of this user; refused"
        )
    return path.read_bytes()


def _connect(socket: Path) -> Connection:
    private_dir(socket.parent)
    try:
        key = _read_key(socket)
        return Client(str(socket), family="AF_UNIX", authkey=key)
    except OSError as err:
        raise WorkerError(
            f"the node's worker at {socket} is not running ({err}); `fedpath flower "
            "supernode` starts it (or drop the node config key 'worker')"
        ) from None


def call(socket: Path, content: RecordDict, context: Context) -> RecordDict:
    """Have the worker on ``socket`` run a stage; updates ``context.state``."""
    request = {
        "content": content,
        "state": context.state,
        "run_config": dict(context.run_config),
        "node_config": dict(context.node_config),
        "node_id": context.node_id,
        "run_id": context.run_id,
    }
    with _connect(socket) as conn:
        conn.send(request)
        try:
            status, reply, extra = conn.recv()
        except (EOFError, OSError) as err:
            raise WorkerError(
                f"the node's worker at {socket} died during the stage ({err!r}); "
                "its log says why (out of memory?); the node restarts it"
            ) from None
    if status != "ok":
        raise WorkerError(str(reply))
    state = context.state
    for key in list(state):
        del state[key]
    for key, record in extra.items():
        state[key] = record
    return reply


def stop(socket: Path) -> None:
    """Ask the worker on ``socket`` to exit (after the stage it is running)."""
    with _connect(socket) as conn:
        conn.send(STOP)
        conn.recv()


def ping(socket: Path) -> int:
    """The worker's process id if it answers on ``socket`` (WorkerError if not)."""
    try:
        with _connect(socket) as conn:
            conn.send(PING)
            return int(conn.recv()[1])
    except (EOFError, ConnectionError, AuthenticationError) as err:
        raise WorkerError(f"the worker at {socket} does not answer: {err!r}") from None
