"""A SuperNode's persistent worker: PyTorch, fedpath and the node's data stay loaded.

Flower 1.42 starts a fresh ``flwr-clientapp`` process for every message. Importing
PyTorch and fedpath and building the dataset in that process costs several seconds
per message, more than a small round's training. With a worker (what ``fedpath
flower supernode`` starts next to the SuperNode, see :mod:`.node`) the ClientApp
process stays thin: it imports Flower and the record code only, hands the stage
message and the node's ``context.state`` to the worker over a local Unix socket
(:func:`~fedpath.runtime.flower.worker_protocol.call`) and returns the worker's
reply. The worker runs exactly the code the ClientApp would run itself
(:func:`~fedpath.runtime.flower.client_app.handle_content`), so results do not
change (tested bit-exact against in-process).

Security: the socket and its key file (``<socket>.key``, 32 random bytes written
when the worker starts) are readable only by the user that runs the node, and
:mod:`multiprocessing.connection` authenticates every connection with that key
(HMAC challenge) before anything is unpickled. The worker serves one message at a
time, as the SuperNode does. Data read from disk is cached for the worker's
lifetime: restart the node after changing its data. SIGTERM and SIGINT remove the
socket and its key; a refused socket folder exits with
:data:`~fedpath.deploy.node.REFUSED` (the node then stops rather than restart it).
"""

from __future__ import annotations

import argparse
import logging
import os
import secrets
import signal
import socket as pysocket
import struct
import sys
import threading
import time
import traceback
from multiprocessing import AuthenticationError
from multiprocessing.connection import (
    Connection,
    Listener,
    answer_challenge,
    deliver_challenge,
)
from pathlib import Path
from typing import Any

from flwr.app import Context

from fedpath.runtime.flower.client_app import handle_content
from fedpath.runtime.flower.node_context import public_reason
from fedpath.runtime.flower.worker_protocol import PING, STOP, key_path, private_dir

log = logging.getLogger("fedpath")


def _write_key(socket: Path) -> bytes:
    key = secrets.token_bytes(32)
    path = key_path(socket)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key)
    return key


#: seconds a connection has to complete the HMAC handshake (a silent one would
#: otherwise block the worker, which serves one connection at a time)
AUTH_TIMEOUT = 5.0


def serve(
    socket: Path,
    ready: threading.Event | None = None,
    auth_timeout: float = AUTH_TIMEOUT,
) -> None:
    """Answer stage requests on ``socket`` until a :data:`STOP` request arrives.

    The socket's folder must be this user's alone (:func:`private_dir`); the
    socket and key files are removed when the worker stops, however it stops.
    """
    private_dir(socket.parent, create=True)
    socket.unlink(missing_ok=True)
    key = _write_key(socket)
    try:
        # the socket file is created with the process umask; keep it private
        old = os.umask(0o077)
        try:
            # authkey=None: the handshake runs below, under a timeout
            listener = Listener(str(socket), family="AF_UNIX")
        finally:
            os.umask(old)
        log.info("fedpath worker: serving on %s (pid %d)", socket, os.getpid())
        if ready is not None:
            ready.set()
        with listener:
            _serve(listener, key, auth_timeout)
    finally:
        socket.unlink(missing_ok=True)
        key_path(socket).unlink(missing_ok=True)


def _serve(listener: Listener, key: bytes, auth_timeout: float) -> None:
    while True:
        try:
            conn = listener.accept()
        except OSError as err:
            log.warning("fedpath worker: a broken connection: %s", err)
            continue
        with conn:
            try:
                _authenticate(conn, key, auth_timeout)
            except (OSError, EOFError, AuthenticationError) as err:
                log.warning("fedpath worker: refused a connection: %r", err)
                continue
            try:
                request = conn.recv()
            except (EOFError, OSError):
                continue
            if request == STOP:
                conn.send(("ok", None, None))
                return
            if request == PING:
                conn.send(("ok", os.getpid(), None))
                continue
            conn.send(answer(request))


def _authenticate(conn: Connection, key: bytes, timeout: float) -> None:
    """The HMAC challenge both ways (what ``Listener(authkey=...)`` does), each
    read limited to ``timeout`` seconds (SO_RCVTIMEO), then blocking again."""
    sock = pysocket.socket(fileno=os.dup(conn.fileno()))
    try:
        tv = struct.pack("ll", int(timeout), int((timeout % 1) * 1e6))
        sock.setsockopt(pysocket.SOL_SOCKET, pysocket.SO_RCVTIMEO, tv)
        deliver_challenge(conn, key)
        answer_challenge(conn, key)
        off = struct.pack("ll", 0, 0)
        sock.setsockopt(pysocket.SOL_SOCKET, pysocket.SO_RCVTIMEO, off)
    finally:
        sock.close()  # the duplicate descriptor only; the option stays on the socket


def answer(request: dict[str, Any]) -> tuple[str, Any, Any]:
    """Run one stage: ``("ok", reply, state)`` or ``("error", reason, traceback)``."""
    try:
        context = Context(
            run_id=int(request["run_id"]),
            node_id=int(request["node_id"]),
            node_config=dict(request["node_config"]),
            state=request["state"],
            run_config=dict(request["run_config"]),
        )
        reply = handle_content(request["content"], context)
    except Exception as err:
        log.error("fedpath worker: stage failed", exc_info=err)
        # only what may leave the node (node_context.public_reason)
        return "error", public_reason(err), traceback.format_exc()
    return "ok", reply, context.state


def _exit_with_parent(pid: int, socket: Path) -> None:
    """Exit when the node that started this worker is gone (even if it was killed)."""
    while os.getppid() == pid:
        time.sleep(1.0)
    socket.unlink(missing_ok=True)
    key_path(socket).unlink(missing_ok=True)
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m fedpath.deploy.worker", description=__doc__
    )
    ap.add_argument("--socket", type=Path, required=True)
    ap.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    args = ap.parse_args(argv)
    # SIGTERM (the node stopping it, or an operator) exits through serve's finally,
    # which removes the socket and its key file, as SIGINT does
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    if args.parent_pid is not None:
        threading.Thread(
            target=_exit_with_parent, args=(args.parent_pid, args.socket), daemon=True
        ).start()
    # what the first message would import anyway: pay it before any message arrives
    import torch  # noqa: F401

    import fedpath.algorithms  # noqa: F401
    from fedpath.deploy.node import REFUSED, worker_refusal

    if (why := worker_refusal(args.socket)) is not None:
        log.error("fedpath worker: %s", why)
        return REFUSED  # the node stops instead of restarting it
    serve(args.socket)
    return 0


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
