"""Live rich bars of a run or suite, for a terminal or a Jupyter notebook."""

from __future__ import annotations

import time
from typing import Any, Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Task as RichTask
from rich.text import Text

from fedpath.utils.pace import Clock, Level, Pace
from fedpath.utils.progress import Reporter


class _EtaColumn(TimeRemainingColumn):
    """Rich's remaining-time column, from :class:`Pace` where a task carries a
    ``deadline`` field (a :class:`Pace` clock time; None: not known yet), counting
    down between updates; rich's own estimate for the other tasks."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self._clock = clock

    def render(self, task: RichTask) -> Text:
        if "deadline" not in task.fields:
            return super().render(task)
        deadline = task.fields["deadline"]
        if task.finished:
            left = 0.0
        elif deadline is None:
            return Text("-:--:--", style="progress.remaining")
        else:
            left = max(0.0, deadline - self._clock())
        m, s = divmod(int(left), 60)
        return Text(f"{m // 60:d}:{m % 60:02d}:{s:02d}", style="progress.remaining")


class RichReporter(Reporter):
    """Bars: the suite (all runs of all methods, "method k/n label"; only in a
    suite), the runs of the current method (folds x seeds), its rounds, the
    clients of the round, their local epochs. The suite, runs and round bars'
    remaining times come from :class:`Pace`."""

    def __init__(self, console: Console | None = None, clock: Clock = time.monotonic):
        self.console = console or Console(stderr=True)
        self.pace = Pace(clock)
        self.progress = Progress(
            TextColumn("[bold]{task.fields[kind]:>7}[/]"),
            TextColumn("{task.description}", justify="left"),
            BarColumn(bar_width=28),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            _EtaColumn(clock),
            console=self.console,
            transient=False,
            refresh_per_second=8,
        )
        self._suite: TaskID | None = None
        self._runs: TaskID | None = None
        self._round: TaskID | None = None
        self._client: TaskID | None = None
        self._epoch: TaskID | None = None
        self._job: TaskID | None = None
        self._job_desc = ""

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def close(self) -> None:
        self.progress.stop()

    def _task(
        self, task: TaskID | None, kind: str, desc: str, total: int, **fields: Any
    ) -> TaskID:
        if task is None:
            return self.progress.add_task(desc, total=total, kind=kind, **fields)
        self.progress.reset(task, total=total, description=desc, visible=True)
        self.progress.update(task, **fields)
        return task

    def _deadlines(self) -> None:
        """Refresh the Pace-based remaining times of the suite, runs, round bars."""
        now = self.pace.clock()
        bars: tuple[tuple[TaskID | None, Level], ...] = (
            (self._suite, "all"),
            (self._runs, "method"),
            (self._round, "run"),
        )
        for task, level in bars:
            if task is not None:
                eta = self.pace.eta(level)
                deadline = None if eta is None else now + eta
                self.progress.update(task, deadline=deadline)

    def start_suite(self, runs: int, methods: int, rounds: int | None = None) -> None:
        self.pace.start_suite(runs, rounds)
        self._suite = self._task(
            self._suite, "suite", f"{methods} methods", runs, deadline=None
        )

    def start_method(self, k: int, n: int, label: str) -> None:
        if self._suite is not None:
            self.progress.update(self._suite, description=f"method {k}/{n} {label}")

    def start_runs(self, total: int) -> None:
        self.pace.start_runs(total)
        self._runs = self._task(self._runs, "runs", "experiment", total, deadline=None)
        self._deadlines()

    def start_run(self, label: str, rounds: int, done: int = 0) -> None:
        self.pace.start_run(rounds, done)
        if self._runs is not None:
            self.progress.update(self._runs, description=label)
        self._round = self._task(self._round, "round", label, rounds, deadline=None)
        self.progress.update(self._round, completed=done)
        self._deadlines()

    def _run_finished(self) -> None:
        for task in (self._suite, self._runs):
            if task is not None:
                self.progress.advance(task)
        self._deadlines()

    def end_run(self) -> None:
        self.pace.end_run()
        self._run_finished()

    def skip_run(self, label: str, rounds: int) -> None:
        self.pace.skip_run(rounds)
        self._run_finished()

    def start_round(self, rnd: int, clients: int) -> None:
        self._client = self._task(self._client, "client", f"round {rnd}", clients)

    def end_round(self, summary: str = "") -> None:
        self.pace.end_round()
        if self._round is not None:
            self.progress.advance(self._round)
            if summary:
                desc = self.progress.tasks[self._round].description.split("  ")[0]
                self.progress.update(self._round, description=f"{desc}  {summary}")
        self._deadlines()

    def start_client(self, client_id: str, epochs: int) -> None:
        self._epoch = self._task(self._epoch, "epoch", client_id, epochs)

    def epoch(self, done: int, total: int) -> None:
        if self._epoch is not None:
            self.progress.update(self._epoch, completed=done, total=total)

    def end_client(self) -> None:
        if self._client is not None:
            self.progress.advance(self._client)

    def log(self, message: str) -> None:
        self.progress.console.print(message)

    def start_job(self, kind: str, description: str, total: int) -> None:
        """A one-off job before the runs (encoding a dataset): its own bar."""
        self._job_desc = description
        self._job = self.progress.add_task(description, total=total, kind=kind)

    def advance_job(self, n: int = 1, item: str = "") -> None:
        if self._job is not None:
            desc = f"{self._job_desc} {item}" if item else self._job_desc
            self.progress.update(self._job, advance=n, description=desc)
