"""A hospital's node: Flower's SuperNode plus fedpath's persistent worker.

``python -m fedpath.deploy.node --socket PATH [--poll-interval S] --
<flower-supernode arguments>`` is what ``fedpath flower supernode`` runs. It

1. starts the worker (:mod:`.worker`) as a child process, which imports PyTorch and
   fedpath once, and restarts it if it dies (an out-of-memory kill, say);
2. runs Flower's own ``flower-supernode`` in this process, unchanged, with the
   node config key ``worker`` pointing the ClientApp at the worker's socket;
3. optionally shortens the SuperNode's idle wait: Flower 1.42's SuperNode sleeps
   3 s whenever it asks the SuperLink for a message and none is there, and 0.5 s
   between checks for the ClientApp's reply. Every stage of a round pays that wait
   once, because the coordinator sends the next stage only after the replies to
   the last one. ``--poll-interval S`` caps both sleeps at ``S`` seconds (the node
   asks the SuperLink ``1/S`` times a second while idle). It patches the ``time``
   name of ``flwr.supernode.start_client_internal`` and nothing else, and only on
   the Flower series fedpath pins (1.42); otherwise it warns and keeps Flower's wait;
4. with ``--approved-apps FILE`` runs only the apps approved there
   (:mod:`.approval`; it refuses to start on another Flower series); without it
   the node logs, loudly, that it runs any app the coordinator sends.

The node stops with the reason (exit 2), instead of restarting its worker in a
loop, when the worker's socket folder is refused; SIGTERM and SIGINT stop the
worker and remove the socket and its key file.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("fedpath")

#: Flower's idle wait (s) in ``start_client_internal`` of the 1.42 series.
FLOWER_POLL_S = 3.0


class _CappedSleep(types.ModuleType):
    """The ``time`` module with ``sleep`` capped at ``cap`` seconds."""

    def __init__(self, cap: float) -> None:
        super().__init__("time")
        self.cap = cap

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def sleep(self, seconds: float) -> None:
        time.sleep(min(seconds, self.cap))


def patch_poll_interval(seconds: float) -> bool:
    """Cap the SuperNode's idle sleeps at ``seconds``; False if not applicable."""
    import flwr
    from flwr.supernode import start_client_internal as sci

    if not flwr.__version__.startswith("1.42.") or sci.__dict__.get("time") is not time:
        log.warning(
            "fedpath: --poll-interval applies to Flower 1.42 only (found %s); "
            "keeping Flower's %.0f s idle wait",
            flwr.__version__,
            FLOWER_POLL_S,
        )
        return False
    sci.time = _CappedSleep(seconds)
    return True


class WorkerSupervisor:
    """Keep a worker process running on ``socket`` (restart it when it exits)."""

    def __init__(self, socket: Path, log_path: Path | None = None) -> None:
        self.socket = socket
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        #: why the worker cannot run at all (then it is not restarted)
        self.fatal: str | None = None
        #: called (from the watching thread) once ``fatal`` is set
        self.on_fatal: Callable[[], None] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "fedpath.deploy.worker",
            "--socket",
            str(self.socket),
            "--parent-pid",
            str(os.getpid()),
        ]

    def _spawn(self) -> None:
        out = None if self.log_path is None else self.log_path.open("ab")
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=out)
        if out is not None:
            out.close()

    def start(self) -> WorkerSupervisor:
        self._spawn()
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            assert self.proc is not None
            code = self.proc.poll()
            if code is not None and not self._stop.is_set():
                if code == REFUSED:
                    self._give_up()
                    return
                self.restarts += 1
                log.error(
                    "fedpath worker exited with code %s; restarting it (%d)",
                    code,
                    self.restarts,
                )
                self._spawn()

    def _give_up(self) -> None:
        """The worker refused its socket folder: restarting cannot help, so stop
        the node with the reason."""
        why = worker_refusal(self.socket) or "its socket folder was refused"
        log.error("fedpath worker cannot start: %s; stopping the node", why)
        self.fatal = why
        if self.on_fatal is not None:
            self.on_fatal()

    def wait_ready(self, timeout: float) -> bool:
        """True once the current worker process answers on the socket."""
        from fedpath.runtime.flower.worker_protocol import WorkerError, ping

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.proc is not None and ping(self.socket) == self.proc.pid:
                    return True
            except WorkerError:
                pass
            if self.fatal is not None:
                return False
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # the worker removes them itself; not if it was killed (or never started)
        from fedpath.runtime.flower.worker_protocol import key_path

        for path in (self.socket, key_path(self.socket)):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)


#: the worker's exit code when its socket folder is refused (see worker.main)
REFUSED = 78


def worker_refusal(socket: Path) -> str | None:
    """Why a worker cannot serve on ``socket`` (its folder is refused), or None."""
    from fedpath.runtime.flower.worker_protocol import WorkerError, private_dir

    try:
        private_dir(socket.parent, create=True)
    except WorkerError as err:
        return str(err)
    except OSError as err:  # e.g. a file where a folder should be
        return f"the worker's socket folder {socket.parent}: {err.strerror}"
    return None


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m fedpath.deploy.node")
    ap.add_argument("--socket", type=Path, help="worker socket (none: no worker)")
    ap.add_argument("--worker-log", type=Path, help="worker log (default: stderr)")
    ap.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        help=f"cap the SuperNode's idle waits (Flower: {FLOWER_POLL_S:.0f} s)",
    )
    ap.add_argument(
        "--approved-apps",
        type=Path,
        help="run only the apps approved in this file (fedpath flower approve)",
    )
    return ap


#: what the node logs when it runs whatever app the coordinator sends
UNCHECKED = (
    "APP APPROVAL IS OFF: this node imports and runs ANY app the coordinator "
    "sends, as this user, and the node policy may never be consulted. Unless "
    "this is a trial, drop --no-app-approval (`fedpath flower approve` the app)"
)


class EarlyStop:
    """The node's SIGTERM/SIGINT handler until Flower installs its own (then the
    SuperNode stops gracefully and runs the supervisor's ``stop``): stop the
    worker, remove its socket files and exit at once with 128 + the signal.

    Raising ``SystemExit`` instead is not enough: by the time Flower installs its
    handlers it has started its Runtime API server on a non-daemon thread, and a
    process whose main thread exits early waits for that thread forever.
    """

    def __init__(self) -> None:
        self.supervisor: WorkerSupervisor | None = None

    def __call__(self, signum: int, _frame: Any) -> None:
        if self.supervisor is not None:
            self.supervisor.stop()
        log.info("fedpath: stopped by signal %d before the SuperNode was up", signum)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Start the worker (if any), install the hooks, run ``flower-supernode``.

    Returns 2, with the reason logged, when the node cannot run as asked: app
    approval on an unsupported Flower, or a refused worker socket folder.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: ... node --socket PATH [--poll-interval S] -- ARGS")
    split = argv.index("--")
    args = _parser().parse_args(argv[:split])
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s fedpath: %(message)s"))
    log.addHandler(handler)  # fedpath's lines only: Flower logs its own
    log.setLevel(logging.INFO)
    if args.approved_apps is None:
        log.warning(UNCHECKED)
    else:
        from fedpath.deploy.approval import install_approval
        from fedpath.schema import ConfigError

        try:
            install_approval(args.approved_apps)
        except ConfigError as err:
            log.error("%s", err)
            return 2
        log.info("fedpath: runs only the apps approved in %s", args.approved_apps)
    if args.poll_interval is not None:
        patch_poll_interval(args.poll_interval)
    if args.socket is not None and (why := worker_refusal(args.socket)) is not None:
        log.error("%s; the node does not start", why)
        return 2
    early = EarlyStop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, early)
    supervisor = None
    try:
        if args.socket is not None:
            supervisor = early.supervisor = WorkerSupervisor(
                args.socket, args.worker_log
            )
            supervisor.start()
            if not supervisor.wait_ready(120) and supervisor.fatal is None:
                log.warning("fedpath worker not listening after 120 s; starting anyway")
        return _run_flower(argv[split + 1 :], supervisor)
    finally:
        if supervisor is not None:
            supervisor.stop()


def _run_flower(flower_args: list[str], supervisor: WorkerSupervisor | None) -> int:
    """Flower's ``flower-supernode`` in this process; 2 if the worker gave up."""
    from flwr.supercore.exit import add_exit_handler
    from flwr.supernode.cli import flower_supernode

    if supervisor is not None:
        add_exit_handler(supervisor.stop)
        # Flower's SIGTERM handler stops the SuperNode; main then returns 2
        supervisor.on_fatal = lambda: os.kill(os.getpid(), signal.SIGTERM)
        if supervisor.fatal is not None:
            return 2
    sys.argv = ["flower-supernode", *flower_args]
    try:
        flower_supernode()
    except SystemExit:
        if supervisor is not None and supervisor.fatal is not None:
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
