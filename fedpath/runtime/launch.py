"""Launchers: a suite's cells one after another, in N local processes, or on Ray.

``fedpath suite SUITE --jobs N`` (``--launcher local``) runs the cells of
:func:`~fedpath.runtime.cells.plan_cells` in ``N`` worker processes;
``--launcher ray --address ADDR`` submits each cell as a Ray task asking for
``runtime.threads`` CPUs (and a GPU where ``runtime.device`` is CUDA). Every cell
runs :func:`~fedpath.runtime.launch_worker.run_cell`: the same
:class:`~fedpath.runtime.inprocess.InProcessRun` as the serial suite, writing
its run directory exactly as the serial suite does, so with the same
``runtime.threads`` a cell's ``final.json`` is byte-identical whichever launcher
ran it (torch's CPU kernels may round differently with another
thread count, which is why the local launcher sets ``runtime.threads`` explicitly:
``cores // N`` unless the config says).

A cell that raises is reported (``failed.json`` in its run directory, a line at
the end, exit code 1) and the others go on; a worker process that dies takes only
the cell it was running with it. Progress comes back from the workers as small
events (:class:`~fedpath.runtime.launch_worker.ForwardingReporter`) and is drawn
by one :class:`~fedpath.runtime.launch_view.CellView`.

This module holds the options and checks and :func:`run_parallel`; the worker's
side is :mod:`~fedpath.runtime.launch_worker`, the local and Ray loops
:mod:`~fedpath.runtime.launch_pools`, the display
:mod:`~fedpath.runtime.launch_view`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from fedpath.errors import ConfigError
from fedpath.runtime.cells import Cell, CellLocks, clear_failure, write_failure
from fedpath.runtime.launch_pools import import_ray, run_local, run_ray
from fedpath.runtime.launch_view import CellView
from fedpath.runtime.launch_worker import CellResult, Event, cell_spec
from fedpath.utils.progress import plural

LAUNCHERS = ("serial", "local", "ray")


def cores() -> int:
    """The CPU cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class LaunchOptions:
    """``launcher``: one of :data:`LAUNCHERS`; ``jobs``: local worker processes;
    ``address``: the Ray cluster (None: start a local Ray instance)."""

    launcher: str = "serial"
    jobs: int = 1
    address: str | None = None

    @property
    def parallel(self) -> bool:
        return self.launcher != "serial"


def launch_options(
    launcher: str | None, jobs: int | None, address: str | None
) -> LaunchOptions:
    """Validated options of ``--launcher`` / ``--jobs`` / ``--address``; ``--jobs``
    alone means ``--launcher local``."""
    if launcher is None:
        launcher = "local" if jobs is not None else "ray" if address else "serial"
    if launcher not in LAUNCHERS:
        raise ConfigError(
            f"--launcher: expected one of {', '.join(LAUNCHERS)}, got {launcher!r}"
        )
    if jobs is not None and jobs < 1:
        raise ConfigError(
            f"--jobs: expected a positive number of worker processes, got {jobs}"
        )
    if launcher == "serial" and jobs not in (None, 1):
        raise ConfigError(
            f"--jobs {jobs} with --launcher serial: the serial launcher runs one "
            "cell at a time; use --launcher local"
        )
    if launcher == "ray" and jobs is not None:
        raise ConfigError(
            "--jobs applies to --launcher local; Ray runs as many cells at once as "
            "the cluster has CPUs for (each asks for runtime.threads CPUs)"
        )
    if address is not None and launcher != "ray":
        raise ConfigError(f"--address applies to --launcher ray, not {launcher}")
    if launcher == "local" and jobs is None:
        jobs = cores()
    return LaunchOptions(launcher, jobs or 1, address)


def cell_threads(cell: Cell, opts: LaunchOptions) -> int:
    """The torch threads a parallel cell runs with: ``runtime.threads`` where the
    config sets it; else ``cores // jobs`` (local) or 1 (Ray)."""
    if cell.config.runtime.threads:
        return int(cell.config.runtime.threads)
    if opts.launcher == "local":
        return max(1, cores() // opts.jobs)
    return 1


def oversubscription(cells: Sequence[Cell], opts: LaunchOptions) -> str | None:
    """A warning when the local workers' threads exceed the cores, else None."""
    if opts.launcher != "local" or not cells:
        return None
    jobs = min(opts.jobs, len(cells))
    threads = max(cell_threads(c, opts) for c in cells)
    have = cores()
    if jobs * threads <= have:
        return None
    return (
        f"warning: --jobs {jobs} x runtime.threads {threads} = {jobs * threads} "
        f"threads on {plural(have, 'core')} (oversubscribed "
        f"{jobs * threads / have:.1f}x); each cell will run slower"
    )


def check_launcher(opts: LaunchOptions) -> None:
    """Fail before anything starts: Ray missing, or its head unreachable."""
    if opts.launcher == "ray":
        import_ray()
        if opts.address not in (None, "local"):
            assert opts.address is not None
            check_reachable(opts.address)


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse a Ray ``--address`` whose head cannot be reached (``auto`` and a
    local instance are not checked); Ray itself would retry for minutes."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ConfigError(
            f"--address {address!r}: expected HOST:PORT (the Ray head's GCS "
            "address, e.g. 10.0.0.5:6379), ray://HOST:PORT, auto, or local"
        )
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise ConfigError(
            f"--address {address}: cannot reach a Ray head there ({err}); start one "
            "with `ray start --head` on the head machine, or check the address"
        ) from None


def run_parallel(
    cells: Sequence[Cell],
    opts: LaunchOptions,
    resume: bool,
    locks: CellLocks,
    view: CellView,
) -> list[CellResult]:
    """Run ``cells`` with the local or Ray launcher; one result per cell."""
    specs = [cell_spec(c, cell_threads(c, opts), resume) for c in cells]
    for cell in cells:
        clear_failure(cell.run_dir)
    by_index = {c.index: c for c in cells}

    def on_event(ev: Event) -> None:
        if ev[0] == "begin":
            locks.mark(by_index[ev[1]].run_dir, "running")
        view.event(ev)

    def on_result(res: CellResult) -> None:
        cell = by_index[res.index]
        if not res.ok:
            write_failure(cell.run_dir, res.error, res.kind, res.trace)
        locks.release_one(cell.run_dir)
        view.finished(res)

    if opts.launcher == "local":
        return run_local(specs, opts.jobs, on_event, on_result)
    return run_ray(specs, opts.address, cores(), on_event, on_result)
