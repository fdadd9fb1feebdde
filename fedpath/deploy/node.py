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
   the Flower series fedpath pins (1.42); otherwise it warns and keeps Flower's wait.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import threading
import time
import types
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
                self.restarts += 1
                log.error(
                    "fedpath worker exited with code %s; restarting it (%d)",
                    code,
                    self.restarts,
                )
                self._spawn()

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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: ... node --socket PATH [--poll-interval S] -- ARGS")
    split = argv.index("--")
    ap = argparse.ArgumentParser(prog="python -m fedpath.deploy.node")
    ap.add_argument("--socket", type=Path, help="worker socket (none: no worker)")
    ap.add_argument("--worker-log", type=Path, help="worker log (default: stderr)")
    ap.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        help=f"cap the SuperNode's idle waits (Flower: {FLOWER_POLL_S:.0f} s)",
    )
    args = ap.parse_args(argv[:split])
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s fedpath: %(message)s"))
    log.addHandler(handler)  # fedpath's lines only: Flower logs its own
    log.setLevel(logging.INFO)
    if args.poll_interval is not None:
        patch_poll_interval(args.poll_interval)
    supervisor = None
    if args.socket is not None:
        supervisor = WorkerSupervisor(args.socket, args.worker_log).start()
        if not supervisor.wait_ready(120):
            log.warning("fedpath worker not listening after 120 s; starting anyway")
    from flwr.supercore.exit import add_exit_handler
    from flwr.supernode.cli import flower_supernode

    if supervisor is not None:
        add_exit_handler(supervisor.stop)
    sys.argv = ["flower-supernode", *argv[split + 1 :]]
    try:
        flower_supernode()
    finally:
        if supervisor is not None:
            supervisor.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
