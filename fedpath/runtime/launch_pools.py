"""The two parallel launchers' loops: local worker processes, and Ray tasks.

Each runs every :class:`~fedpath.runtime.launch_worker.CellSpec` through
:func:`~fedpath.runtime.launch_worker.run_cell`, hands the workers' progress
events to ``on_event`` as they come and each cell's result to ``on_result`` as
it ends, and returns the results in the order of the specs.
:func:`fedpath.runtime.launch.run_parallel` picks one and wires in the locks and
the display.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from fedpath.errors import ConfigError
from fedpath.runtime.launch_worker import (
    CellResult,
    CellSpec,
    Event,
    init_worker,
    pool_cell,
    ray_cell,
)

OnEvent = Callable[[Event], None]
OnResult = Callable[[CellResult], None]


def _drain(queue: Any, on_event: OnEvent) -> None:
    import queue as queue_mod

    while True:
        try:
            ev = queue.get_nowait()
        except queue_mod.Empty:
            return
        on_event(ev)


def run_local(
    specs: Sequence[CellSpec], jobs: int, on_event: OnEvent, on_result: OnResult
) -> list[CellResult]:
    """Run ``specs`` in ``jobs`` local worker processes.

    A cell whose worker died before it began is run once more (the pool breaks
    for every cell it held); one that had begun is reported as ``WorkerDied``.
    """
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
            initializer=init_worker,
            initargs=(queue,),
        )
        futures = {pool.submit(pool_cell, s): s for s in pending}
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


def import_ray() -> Any:
    """The ``ray`` module, or a :class:`ConfigError` naming what to install."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--launcher ray needs Ray: pip install 'fedpath[ray]' (or pip install ray)"
        ) from None
    return ray


def run_ray(
    specs: Sequence[CellSpec],
    address: str | None,
    num_cpus: int,
    on_event: OnEvent,
    on_result: OnResult,
) -> list[CellResult]:
    """Run ``specs`` as Ray tasks on the cluster at ``address`` (None or
    ``local``: a local instance with ``num_cpus`` CPUs), each asking for its
    threads as CPUs and its GPUs."""
    ray = import_ray()
    local = address in (None, "local")
    started = not ray.is_initialized()
    if started:
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            "logging_level": "ERROR",
        }
        if local:
            ray.init(num_cpus=num_cpus, **kwargs)
        else:
            ray.init(address=address, **kwargs)
    try:
        from ray.util.queue import Queue

        queue = Queue()
        task = ray.remote(ray_cell)
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
