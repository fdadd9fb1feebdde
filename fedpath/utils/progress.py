"""Progress display: rich bars for experiment, round, client and epoch; or nothing.

The runtime reports through a :class:`Reporter`; ``quiet`` (CI, ``--quiet``) swaps in
a reporter that prints nothing, so the algorithm code never checks a flag.
"""

from __future__ import annotations

import sys
from typing import Self

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

from fedpath.utils.closing import Closing


class Reporter(Closing):
    """Silent reporter; the base of :class:`RichReporter`."""

    console: Console = Console(stderr=True, quiet=True)

    def start_runs(self, total: int) -> None: ...
    def start_run(self, label: str, rounds: int, done: int = 0) -> None: ...
    def end_run(self) -> None: ...
    def start_round(self, rnd: int, clients: int) -> None: ...
    def end_round(self, summary: str = "") -> None: ...
    def start_client(self, client_id: str, epochs: int) -> None: ...
    def epoch(self, done: int, total: int) -> None: ...
    def end_client(self) -> None: ...
    def log(self, message: str) -> None: ...
    def start_job(self, kind: str, description: str, total: int) -> None: ...
    def advance_job(self, n: int = 1) -> None: ...


class RichReporter(Reporter):
    """Four bars: runs (folds x seeds), rounds, clients of the round, local epochs."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("[bold]{task.fields[kind]:>7}[/]"),
            TextColumn("{task.description}", justify="left"),
            BarColumn(bar_width=28),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
            refresh_per_second=8,
        )
        self._runs: TaskID | None = None
        self._round: TaskID | None = None
        self._client: TaskID | None = None
        self._epoch: TaskID | None = None
        self._job: TaskID | None = None

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def close(self) -> None:
        self.progress.stop()

    def _task(self, task: TaskID | None, kind: str, desc: str, total: int) -> TaskID:
        if task is None:
            return self.progress.add_task(desc, total=total, kind=kind)
        self.progress.reset(task, total=total, description=desc, visible=True)
        return task

    def start_runs(self, total: int) -> None:
        self._runs = self._task(self._runs, "runs", "experiment", total)

    def start_run(self, label: str, rounds: int, done: int = 0) -> None:
        if self._runs is not None:
            self.progress.update(self._runs, description=label)
        self._round = self._task(self._round, "round", label, rounds)
        self.progress.update(self._round, completed=done)

    def end_run(self) -> None:
        if self._runs is not None:
            self.progress.advance(self._runs)

    def start_round(self, rnd: int, clients: int) -> None:
        self._client = self._task(self._client, "client", f"round {rnd}", clients)

    def end_round(self, summary: str = "") -> None:
        if self._round is not None:
            self.progress.advance(self._round)
            if summary:
                desc = self.progress.tasks[self._round].description.split("  ")[0]
                self.progress.update(self._round, description=f"{desc}  {summary}")

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
        self._job = self.progress.add_task(description, total=total, kind=kind)

    def advance_job(self, n: int = 1) -> None:
        if self._job is not None:
            self.progress.advance(self._job, n)


def make_reporter(quiet: bool) -> Reporter:
    """Rich bars on a terminal-ish stderr, nothing when ``quiet``."""
    if quiet:
        return Reporter()
    return RichReporter(
        Console(stderr=True, force_terminal=sys.stderr.isatty() or None)
    )
