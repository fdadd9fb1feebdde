"""The worker side of a parallel suite: one cell run in this process.

:func:`run_cell` is a worker's whole job, whichever launcher started it (a local
process of :mod:`fedpath.runtime.launch_pools`, or a Ray task): it rebuilds the
cell's config from the plain values of its :class:`CellSpec`, runs the same
:class:`~fedpath.runtime.inprocess.InProcessRun` as the serial suite, and sends
its progress back as small events (:class:`ForwardingReporter`).
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpath.errors import ConfigError
from fedpath.runtime.cells import Cell
from fedpath.utils.progress import Reporter

#: a progress event: ``(kind, cell index, ...)``
Event = tuple[Any, ...]
Send = Callable[[Event], None]


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
    """How one cell ended: ``ok``, its seconds, and for a failure the exception's
    message, type name and traceback."""

    index: int
    ok: bool
    seconds: float
    error: str = ""
    kind: str = ""
    trace: str = ""


def cell_spec(cell: Cell, threads: int, resume: bool) -> CellSpec:
    """The :class:`CellSpec` of ``cell`` run with ``threads`` torch threads."""
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
    ``(kind, cell index, ...)`` for the driver's
    :class:`~fedpath.runtime.launch_view.CellView`."""

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

    def log(self, message: str) -> None:
        self.send(("log", self.index, message))


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
        plan = lodo_plan(
            dataset, cfg.lodo.targets, cfg.evaluation.probe_train, cfg.lodo.sources
        )
        folds = [f for f in plan if f.target == spec.target]
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


def init_worker(queue: Any) -> None:
    """A local worker process's initializer: keep the event ``queue``, and exit
    when the driver is gone."""
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


def pool_cell(spec: CellSpec) -> CellResult:
    """A local worker's task: :func:`run_cell`, its events to the queue."""
    return run_cell(spec, _QUEUE.put)


def ray_cell(spec: CellSpec, queue: Any) -> CellResult:
    """A Ray task: :func:`run_cell`, its events to the Ray ``queue``."""
    return run_cell(spec, lambda ev: queue.put(ev, block=False))
