"""The calling side of a node's persistent worker, and what both sides share.

The ClientApp process (:func:`call`) and the node launcher (:func:`ping`) talk to
the worker (:mod:`fedpath.deploy.worker`) over a local Unix socket with
:mod:`multiprocessing.connection`, which authenticates every connection with the
key in :func:`key_path` (HMAC challenge) before anything is unpickled. This
module imports Flower's record types and nothing of the ClientApp, so the thin
ClientApp process can use it and the worker can import the ClientApp without a
circle.

A request is a stage (a dict: the message content, ``context.state``, the run and
node config, the node and run ids) or one of :data:`STOP` and :data:`PING`; the
answer is ``(status, value, extra)``: ``("ok", reply, state)`` or
``("error", reason, traceback)`` for a stage, ``("ok", pid, None)`` for a ping.
"""

from __future__ import annotations

from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection
from pathlib import Path

from flwr.app import Context, RecordDict

STOP = "stop"
PING = "ping"


class WorkerError(RuntimeError):
    """The worker could not be reached, or the message failed inside it.

    The text is the reason as it should reach the coordinator (already
    ``ExceptionType: message`` for a failure inside the worker).
    """


def key_path(socket: Path) -> Path:
    """Where the worker keeps the key that authenticates its clients."""
    return socket.with_name(socket.name + ".key")


def _connect(socket: Path) -> Connection:
    try:
        key = key_path(socket).read_bytes()
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
