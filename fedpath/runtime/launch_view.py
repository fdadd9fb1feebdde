"""The driver's display of a parallel suite: cells done / total with an ETA.

:func:`make_view` picks, as :func:`~fedpath.utils.progress.progress_mode` says,
:class:`CellView` (nothing, ``--quiet``), :class:`LineView` (timestamped lines,
for a log) or :class:`BarView` (rich bars, on a terminal). Each is fed the
workers' progress events (:class:`~fedpath.runtime.launch_worker.ForwardingReporter`)
and each cell's :class:`~fedpath.runtime.launch_worker.CellResult`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Self

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from fedpath.runtime.cells import Cell
from fedpath.runtime.launch_worker import CellResult, Event
from fedpath.utils.progress import PROGRESS_ENV, plural, progress_mode, span


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

    def __enter__(self) -> Self:
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
        elif kind == "log":
            self.on_log(idx, str(ev[2]))

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
    def on_log(self, idx: int, message: str) -> None: ...
    def on_finished(self, res: CellResult) -> None: ...


class LineView(CellView):
    """Timestamped lines: a cell's start and end always, its rounds and the
    progress of its jobs (a one-off encoding) at most one line per ``interval``
    seconds over the whole suite (plus each cell's last round and a job's end)."""

    interval = 10.0

    def __init__(self, *args: Any, stream: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stream = stream
        self._line_at = -1e9
        self._jobs: dict[int, list[Any]] = {}  # cell -> [what, total, done]

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
        self._jobs[idx] = [what, total, 0]
        self._line(f"{self._name(idx)}: {what} ({total})")

    def on_advance(self, idx: int, n: int) -> None:
        if idx not in self._jobs:
            return
        job = self._jobs[idx]
        job[2] += n
        done, total = job[2], job[1]
        if done >= total or self.clock() - self._line_at >= self.interval:
            self._line(f"{self._name(idx)}: {job[0].split()[0]} {done}/{total}")
        if done >= total:
            del self._jobs[idx]

    def on_log(self, idx: int, message: str) -> None:
        self._line(f"{self._name(idx)}: {message}")

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

    def on_log(self, idx: int, message: str) -> None:
        text = f"cell {idx} {self.cells[idx].label}: {message}"
        self.progress.console.print(text, highlight=False, markup=False)

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
