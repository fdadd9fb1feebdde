"""Launchers: a suite's cells one after another, in N local processes, or on Ray.

``fedpath suite SUITE --jobs N`` (``--launcher local``) runs the cells of
:func:`~fedpath.runtime.cells.plan_cells` in ``N`` worker processes;
``--launcher ray --address ADDR`` submits each cell as a Ray task asking for
``runtime.threads`` CPUs (and a GPU where ``runtime.device`` is CUDA). Every cell
runs :func:`run_cell`: the same :class:`~fedpath.runtime.inprocess.InProcessRun`
as the serial suite, writing its run directory exactly as the serial suite does,
so with the same ``runtime.threads`` a cell's ``final.json`` is byte-identical
whichever launcher ran it (torch's CPU kernels may round differently with another
thread count, which is why the local launcher sets ``runtime.threads`` explicitly:
``cores // N`` unless the config says).

A cell that raises is reported (``failed.json`` in its run directory, a line at
the end, exit code 1) and the others go on; a worker process that dies takes only
the cell it was running with it. Progress comes back from the workers as small
events (:class:`ForwardingReporter`) and is drawn by one :class:`CellView`.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from fedpath.errors import ConfigError
from fedpath.runtime.cells import Cell, CellLocks, clear_failure, write_failure
from fedpath.utils.progress import PROGRESS_ENV, Reporter, plural, progress_mode, span

LAUNCHERS = ("serial", "local", "ray")
Event = tuple[Any, ...]
Send = Callable[[Event], None]


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


# ------------------------------------------------------------------- the worker


@dataclass(frozen=True)
class CellSpec:
    """What a worker needs to run one cell (plain values: it crosses processes)."""

    index: int
    config: dict[str, Any]
    target: str
    seed: int
    run_dir: str
    resume: bool
    cwd: str
    env: dict[str, str]
    threads: int
    gpus: float = 0.0


@dataclass(frozen=True)
class CellResult:
    index: int
    ok: bool
    seconds: float
    error: str = ""
    kind: str = ""
    trace: str = ""


def cell_spec(cell: Cell, opts: LaunchOptions, resume: bool) -> CellSpec:
    threads = cell_threads(cell, opts)
    raw = cell.config.to_dict()
    raw["runtime"]["threads"] = threads
    raw["output_dir"] = str(Path(cell.config.output_dir).absolute())
    env = {k: v for k, v in os.environ.items() if k.startswith("FEDPATH_")}
    gpus = 1.0 if str(cell.config.runtime.device).startswith("cuda") else 0.0
    return CellSpec(
        cell.index,
        raw,
        cell.target,
        cell.seed,
        str(cell.run_dir),
        resume,
        os.getcwd(),
        env,
        threads,
        gpus,
    )


class ForwardingReporter(Reporter):
    """The worker side of the progress: each event goes to ``send`` as a tuple
    ``(kind, cell index, ...)`` for the driver's :class:`CellView`."""

    def __init__(self, index: int, send: Send) -> None:
        self.index = index
        self.send = send
        self._round = 0

    def start_run(self, label: str, rounds: int, done: int = 0) -> None:
        self.send(("start", self.index, rounds, done))

    def skip_run(self, label: str, rounds: int) -> None:
        self.send(("skip", self.index))

    def start_round(self, rnd: int, clients: int) -> None:
        self._round = rnd

    def end_round(self, summary: str = "") -> None:
        self.send(("round", self.index, self._round))

    def end_run(self) -> None:
        self.send(("end", self.index))

    def start_job(self, kind: str, description: str, total: int) -> None:
        self.send(("job", self.index, f"{kind} {description}", total))

    def advance_job(self, n: int = 1, item: str = "") -> None:
        self.send(("advance", self.index, n))


#: datasets loaded by this worker process, by ``repr(cfg.data)`` (a worker runs
#: many cells of the same data)
_DATASETS: dict[str, Any] = {}
_KEPT = 2


def run_cell(spec: CellSpec, send: Send) -> CellResult:
    """Run one cell in this process (a worker's whole job); never raises."""
    t0 = time.perf_counter()
    try:
        import torch

        from fedpath.config import build_config
        from fedpath.data.partition import lodo_plan
        from fedpath.runtime.experiment import load_dataset
        from fedpath.runtime.inprocess import InProcessRun
        from fedpath.tasks import prepare_dataset

        for key, value in spec.env.items():
            os.environ.setdefault(key, value)  # a node's own setting wins
        if Path(spec.cwd).is_dir():
            os.chdir(spec.cwd)  # relative paths mean what they meant to the driver
        send(("begin", spec.index, os.getpid(), socket.gethostname()))
        torch.set_num_threads(spec.threads)
        cfg = build_config(spec.config)
        key = repr(cfg.data)
        if key not in _DATASETS:
            while len(_DATASETS) >= _KEPT:
                del _DATASETS[next(iter(_DATASETS))]
            _DATASETS[key] = load_dataset(cfg.data)
        reporter = ForwardingReporter(spec.index, send)
        dataset = prepare_dataset(cfg, _DATASETS[key], reporter)
        folds = [
            f for f in lodo_plan(dataset, cfg.lodo.targets) if f.target == spec.target
        ]
        if not folds:
            raise ConfigError(f"no fold holds out {spec.target!r} in this dataset")
        run = InProcessRun(
            cfg, dataset, folds[0], spec.seed, Path(spec.run_dir), reporter
        )
        run.run(resume=spec.resume)
    except Exception as err:  # reported as the cell's failure, the suite goes on
        return CellResult(
            spec.index,
            False,
            time.perf_counter() - t0,
            str(err) or repr(err),
            type(err).__name__,
            traceback.format_exc(),
        )
    return CellResult(spec.index, True, time.perf_counter() - t0)


_QUEUE: Any = None


def _init_worker(queue: Any) -> None:
    global _QUEUE
    _QUEUE = queue
    import threading

    parent = os.getppid()

    def watch() -> None:  # the driver was killed: stop, do not write on alone
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="fedpath-parent-watch").start()


def _pool_cell(spec: CellSpec) -> CellResult:
    return run_cell(spec, _QUEUE.put)


def _ray_cell(spec: CellSpec, queue: Any) -> CellResult:
    return run_cell(spec, lambda ev: queue.put(ev, block=False))


# ------------------------------------------------------------------ launchers


def run_parallel(
    cells: Sequence[Cell],
    opts: LaunchOptions,
    resume: bool,
    locks: CellLocks,
    view: CellView,
) -> list[CellResult]:
    """Run ``cells`` with the local or Ray launcher; one result per cell."""
    specs = [cell_spec(c, opts, resume) for c in cells]
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
        return _run_local(specs, opts.jobs, on_event, on_result)
    return _run_ray(specs, opts.address, on_event, on_result)


def _drain(queue: Any, on_event: Callable[[Event], None]) -> None:
    import queue as queue_mod

    while True:
        try:
            ev = queue.get_nowait()
        except queue_mod.Empty:
            return
        on_event(ev)


def _run_local(
    specs: Sequence[CellSpec],
    jobs: int,
    on_event: Callable[[Event], None],
    on_result: Callable[[CellResult], None],
) -> list[CellResult]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")  # fork would copy torch's thread pools
    queue = ctx.Queue()
    results: dict[int, CellResult] = {}
    begun: set[int] = set()
    breaks: dict[int, int] = {}
    pending = list(specs)

    def event(ev: Event) -> None:
        if ev[0] == "begin":
            begun.add(ev[1])
        on_event(ev)

    while pending:
        pool = ProcessPoolExecutor(
            max_workers=min(jobs, len(pending)),
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(queue,),
        )
        futures = {pool.submit(_pool_cell, s): s for s in pending}
        pending = []
        try:
            while futures:
                done, _ = wait(futures, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(queue, event)
                for fut in done:
                    spec = futures.pop(fut)
                    try:
                        res = fut.result()
                    except BrokenProcessPool:
                        breaks[spec.index] = breaks.get(spec.index, 0) + 1
                        if spec.index not in begun and breaks[spec.index] < 2:
                            pending.append(spec)  # never started: run it again
                            continue
                        res = CellResult(
                            spec.index,
                            False,
                            0.0,
                            "its worker process died (killed, or out of memory?)",
                            "WorkerDied",
                        )
                    results[spec.index] = res
                    on_result(res)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            raise
        pool.shutdown(wait=True)
        _drain(queue, event)
    return [results[s.index] for s in specs]


def check_launcher(opts: LaunchOptions) -> None:
    """Fail before anything starts: Ray missing, or its head unreachable."""
    if opts.launcher == "ray":
        _import_ray()
        if opts.address not in (None, "local"):
            assert opts.address is not None
            check_reachable(opts.address)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--launcher ray needs Ray: pip install 'fedpath[ray]' (or pip install ray)"
        ) from None
    return ray


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


def _run_ray(
    specs: Sequence[CellSpec],
    address: str | None,
    on_event: Callable[[Event], None],
    on_result: Callable[[CellResult], None],
) -> list[CellResult]:
    ray = _import_ray()
    local = address in (None, "local")
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": "ERROR",
        }
        if local:
            ray.init(num_cpus=cores(), **kwargs)
        else:
            ray.init(address=address, **kwargs)
    try:
        from ray.util.queue import Queue

        queue = Queue()
        task = ray.remote(_ray_cell)
        refs = {
            task.options(num_cpus=s.threads, num_gpus=s.gpus, max_retries=0).remote(
                s, queue
            ): s
            for s in specs
        }
        results: dict[int, CellResult] = {}
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.2)
            for ev in queue.get_nowait_batch(queue.qsize()):
                on_event(ev)
            for ref in ready:
                spec = refs.pop(ref)
                try:
                    res = ray.get(ref)
                except Exception as err:  # the task's worker died
                    res = CellResult(
                        spec.index, False, 0.0, str(err), type(err).__name__
                    )
                results[spec.index] = res
                on_result(res)
        for ev in queue.get_nowait_batch(queue.qsize()):
            on_event(ev)
        return [results[s.index] for s in specs]
    finally:
        if started:
            ray.shutdown()


# ----------------------------------------------------------------- the display


class CellView:
    """The driver's view of a parallel suite: cells done / total with an ETA,
    and where each running cell is. This base class draws nothing (``--quiet``).

    The ETA is the mean time of the rounds trained in this invocation x the rounds
    left, divided by the cells running at once.
    """

    def __init__(
        self, cells: Sequence[Cell], parallel: int, clock: Any = time.monotonic
    ):
        self.cells = {c.index: c for c in cells}
        self.total = len(cells)
        self.parallel = max(1, min(parallel, len(cells)))
        self.clock = clock
        self.done = self.failed = 0
        self.rounds_left = sum(c.rounds for c in cells)
        self.round_time = 0.0
        self.rounds_timed = 0
        self.round: dict[int, int] = {}
        self.rounds_of: dict[int, int] = {c.index: c.rounds for c in cells}
        self._last: dict[int, float] = {}

    def __enter__(self) -> CellView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    def eta(self) -> float | None:
        if not self.rounds_timed:
            return None
        running = min(self.parallel, self.total - self.done - self.failed) or 1
        return self.round_time / self.rounds_timed * self.rounds_left / running

    def event(self, ev: Event) -> None:
        kind, idx = ev[0], ev[1]
        now = self.clock()
        if kind == "start":
            rounds, done = int(ev[2]), int(ev[3])
            self.round[idx] = done
            self.rounds_left -= done
            self._last[idx] = now
            self.on_start(idx, rounds, done)
        elif kind == "round":
            rnd = int(ev[2])
            self.round_time += now - self._last.get(idx, now)
            self.rounds_timed += 1
            self._last[idx] = now
            self.rounds_left -= max(0, rnd - self.round.get(idx, 0))
            self.round[idx] = rnd
            self.on_round(idx, rnd)
        elif kind == "skip":
            self.rounds_left -= self.rounds_of[idx] - self.round.get(idx, 0)
            self.round[idx] = self.rounds_of[idx]
            self.on_skip(idx)
        elif kind == "job":
            self.on_job(idx, str(ev[2]), int(ev[3]))
        elif kind == "advance":
            self.on_advance(idx, int(ev[2]))

    def finished(self, res: CellResult) -> None:
        if res.ok:
            self.done += 1
        else:
            self.failed += 1
        # what a failed cell did not train is no longer left to do
        self.rounds_left -= self.rounds_of[res.index] - self.round.get(res.index, 0)
        self.round[res.index] = self.rounds_of[res.index]
        self.on_finished(res)

    def counts(self) -> str:
        eta = self.eta()
        text = f"{self.done + self.failed}/{self.total} cells done"
        if self.failed:
            text += f" ({self.failed} failed)"
        return text + (f", eta {span(eta)}" if eta is not None else "")

    # hooks the displays fill in
    def on_start(self, idx: int, rounds: int, done: int) -> None: ...
    def on_round(self, idx: int, rnd: int) -> None: ...
    def on_skip(self, idx: int) -> None: ...
    def on_job(self, idx: int, what: str, total: int) -> None: ...
    def on_advance(self, idx: int, n: int) -> None: ...
    def on_finished(self, res: CellResult) -> None: ...


class LineView(CellView):
    """Timestamped lines: a cell's start and end always, its rounds at most one
    line per ``interval`` seconds over the whole suite (plus each cell's last)."""

    interval = 10.0

    def __init__(self, *args: Any, stream: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stream = stream
        self._line_at = -1e9

    def _line(self, text: str) -> None:
        import sys

        stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        print(f"[{stamp}] {text}", file=self._stream or sys.stderr, flush=True)
        self._line_at = self.clock()

    def _name(self, idx: int) -> str:
        return f"cell {idx}/{self.total} {self.cells[idx].label}"

    def on_start(self, idx: int, rounds: int, done: int) -> None:
        resumed = f", resuming after round {done}" if done else ""
        self._line(f"{self._name(idx)}: started, {plural(rounds, 'round')}{resumed}")

    def on_round(self, idx: int, rnd: int) -> None:
        last = rnd == self.rounds_of[idx]
        if last or self.clock() - self._line_at >= self.interval:
            where = f"round {rnd}/{self.rounds_of[idx]}"
            self._line(f"{self._name(idx)}: {where} | {self.counts()}")

    def on_skip(self, idx: int) -> None:
        self._line(f"{self._name(idx)}: finished before, skipped")

    def on_job(self, idx: int, what: str, total: int) -> None:
        self._line(f"{self._name(idx)}: {what} ({total})")

    def on_finished(self, res: CellResult) -> None:
        what = (
            f"done in {span(res.seconds)}"
            if res.ok
            else f"FAILED: {res.kind}: {res.error.splitlines()[0] if res.error else ''}"
        )
        self._line(f"{self._name(res.index)}: {what} | {self.counts()}")


class BarView(CellView):
    """Rich bars: the suite's cells (done / total, ETA) and one per running cell."""

    def __init__(self, *args: Any, console: Console | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        forced = os.environ.get(PROGRESS_ENV, "").strip().lower() == "bars"
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            console=console or Console(stderr=True, force_terminal=forced or None),
        )
        self.progress.start()
        self.suite = self.progress.add_task("cells", total=self.total, note="")
        self.bars: dict[int, TaskID] = {}

    def close(self) -> None:
        self.progress.stop()

    def _note(self) -> None:
        eta = self.eta()
        note = f"eta {span(eta)}" if eta is not None else ""
        if self.failed:
            note = f"{self.failed} failed  {note}"
        self.progress.update(
            self.suite, completed=self.done + self.failed, note=note, refresh=True
        )

    def on_start(self, idx: int, rounds: int, done: int) -> None:
        if idx in self.bars:  # the cell's encoding job
            self.progress.remove_task(self.bars.pop(idx))
        label = f"  {self.cells[idx].label}"
        self.bars[idx] = self.progress.add_task(
            label, total=rounds, completed=done, note="rounds"
        )

    def on_round(self, idx: int, rnd: int) -> None:
        if idx in self.bars:
            self.progress.update(self.bars[idx], completed=rnd)
        self._note()

    def on_job(self, idx: int, what: str, total: int) -> None:
        if idx in self.bars:
            self.progress.remove_task(self.bars.pop(idx))
        self.bars[idx] = self.progress.add_task(f"  {what}", total=total, note="")

    def on_advance(self, idx: int, n: int) -> None:
        if idx in self.bars:
            self.progress.advance(self.bars[idx], n)

    def on_finished(self, res: CellResult) -> None:
        if res.index in self.bars:
            self.progress.remove_task(self.bars.pop(res.index))
        if not res.ok:
            self.progress.console.print(
                f"cell {res.index} {self.cells[res.index].label} failed: {res.kind}: "
                f"{res.error.splitlines()[0] if res.error else ''}",
                highlight=False,
                markup=False,
            )
        self._note()


def make_view(cells: Sequence[Cell], parallel: int, quiet: bool) -> CellView:
    """The display :func:`~fedpath.utils.progress.progress_mode` picks."""
    mode = progress_mode(quiet)
    if mode == "none":
        return CellView(cells, parallel)
    if mode == "lines":
        return LineView(cells, parallel)
    return BarView(cells, parallel)
