"""Progress display: rich bars on a terminal, timestamped lines in a log, or nothing.

The runtime reports through a :class:`Reporter`; which one is
:func:`make_reporter`'s choice, so the algorithm code never checks a flag:

* :class:`RichReporter`: live bars (suite, runs, round, clients, epochs) when
  stderr is a terminal (or a Jupyter notebook);
* :class:`LineReporter`: plain ``[2026-12-01 13:05:12] run 3/8 ...`` lines,
  flushed as they are written, when stderr is not a terminal (a log file, CI, a
  cluster job). Rich's live bars cannot redraw there and render once, at exit:
  a 38-minute demo showed nothing but its header until it ended;
* :class:`Reporter`: nothing, with ``--quiet`` / ``FEDPATH_QUIET=1``.

``FEDPATH_PROGRESS=bars|lines|none`` overrides the terminal test (``bars`` draws
the bars even where stderr does not look like a terminal; ``lines`` writes lines
to a terminal too); ``--quiet`` still wins. Any other value is an error naming the
variable.

Remaining times come from :class:`Pace`, not from rich's own estimate: rich
averages over the last 30 s of updates, which a round or a run of minutes never
fills (its column stays ``-:--:--``), and finished runs skipped by ``--resume``
would look like instant progress. :class:`Pace` times only the rounds trained in
this process: mean seconds per timed round x rounds left.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, Self, TextIO

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

from fedpath.errors import ConfigError
from fedpath.utils.closing import Closing

#: the environment variable that picks the display, and its values
PROGRESS_ENV = "FEDPATH_PROGRESS"
PROGRESS_MODES = ("bars", "lines", "none")

Clock = Callable[[], float]
Level = Literal["run", "method", "all"]


def plural(n: int, word: str) -> str:
    """``1 run``, ``4 runs``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Reporter(Closing):
    """Silent reporter; the base of :class:`RichReporter` and :class:`LineReporter`.

    The calls, in the order the runtime makes them: ``start_suite`` once (a suite of
    methods), per method ``start_method``; per experiment ``start_runs`` (its folds
    x seeds); per run ``start_run`` ... ``end_run``, or ``skip_run`` for a run that
    ``--resume`` finds finished; per round ``start_round`` ... ``end_round``; per
    client ``start_client``, ``epoch``..., ``end_client``. ``start_job`` /
    ``advance_job``: a one-off job (encoding a dataset) between them.
    """

    console: Console = Console(stderr=True, quiet=True)

    def start_suite(self, runs: int, methods: int, rounds: int | None = None) -> None:
        """``runs``: over all ``methods``; ``rounds``: over all runs, if known."""

    def start_method(self, k: int, n: int, label: str) -> None:
        """Method ``k`` of ``n`` (1-based) of the suite starts."""

    def start_runs(self, total: int) -> None: ...
    def start_run(self, label: str, rounds: int, done: int = 0) -> None: ...
    def end_run(self) -> None: ...

    def skip_run(self, label: str, rounds: int) -> None:
        """A run finished before (``--resume``): it counts as done, untimed."""

    def start_round(self, rnd: int, clients: int) -> None: ...
    def end_round(self, summary: str = "") -> None: ...
    def start_client(self, client_id: str, epochs: int) -> None: ...
    def epoch(self, done: int, total: int) -> None: ...
    def end_client(self) -> None: ...
    def log(self, message: str) -> None: ...
    def start_job(self, kind: str, description: str, total: int) -> None: ...
    def advance_job(self, n: int = 1, item: str = "") -> None:
        """``n`` more items of the job done; ``item``: the last one's name."""


class Pace:
    """Where a job stands, in runs and rounds, and the remaining times that follow.

    A remaining time is the mean seconds per round timed so far x the rounds left:
    for the ``run``, this run's mean (its method's cost); for its ``method`` and
    ``all`` (the suite, or the experiment without one), the mean over every round
    timed in this process. A round is timed from the end of the previous one (or
    the start of its run) to its end, so loading data, encoding and building a run
    between runs do not count. Rounds that ``--resume`` restored, and whole runs it
    skipped, count as done but are not timed: they neither pad the mean nor hide in
    it. Rounds left beyond the current run: the suite's total when given, else the
    runs not yet started x the current run's rounds (one config per experiment, so
    exact within a method).
    """

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.suite = False
        self.runs = 0  # of the suite (or of the experiment)
        self.runs_done = 0  # finished or skipped
        self.rounds: int | None = None  # of the suite, when known
        self.rounds_done = 0  # trained, restored or skipped
        self.method_runs = 0
        self.method_runs_done = 0
        self.per_run = 0  # rounds of the current (last seen) run
        self.run_done = 0
        self.in_run = False
        self.seconds = 0.0  # every round timed in this process
        self.timed = 0
        self.run_seconds = 0.0  # the current run's
        self.run_timed = 0
        self.last_round = 0.0  # seconds of the last round
        self.run_start = self._mark = clock()

    def start_suite(self, runs: int, rounds: int | None) -> None:
        self.suite, self.runs, self.rounds = True, runs, rounds

    def start_runs(self, total: int) -> None:
        self.method_runs, self.method_runs_done = total, 0
        if not self.suite:
            self.runs = self.runs_done + total

    def start_run(self, rounds: int, done: int) -> None:
        self.per_run, self.run_done, self.in_run = rounds, done, True
        self.rounds_done += done
        self.run_seconds, self.run_timed = 0.0, 0
        self.run_start = self._mark = self.clock()

    def end_round(self) -> None:
        now = self.clock()
        self.last_round, self._mark = now - self._mark, now
        self.seconds += self.last_round
        self.run_seconds += self.last_round
        self.timed += 1
        self.run_timed += 1
        self.run_done += 1
        self.rounds_done += 1

    def end_run(self) -> None:
        self.in_run = False
        self.runs_done += 1
        self.method_runs_done += 1

    def skip_run(self, rounds: int) -> None:
        self.per_run = rounds
        self.rounds_done += rounds
        self.runs_done += 1
        self.method_runs_done += 1

    @property
    def run_number(self) -> int:
        """The 1-based number, over the suite, of the run now starting/running."""
        return self.runs_done + 1

    def left(self, level: Level) -> int:
        """Rounds not yet done in the current run, its method, or all runs."""
        run_left = self.per_run - self.run_done if self.in_run else 0
        if level == "run":
            return max(0, run_left)
        if level == "all" and self.rounds is not None:
            return max(0, self.rounds - self.rounds_done)
        runs, done = (
            (self.method_runs, self.method_runs_done)
            if level == "method"
            else (self.runs, self.runs_done)
        )
        pending = max(0, runs - done - int(self.in_run))
        return max(0, run_left) + pending * self.per_run

    def eta(self, level: Level) -> float | None:
        """Seconds left at ``level``; None before any round was timed."""
        seconds, timed = (
            (self.run_seconds, self.run_timed)
            if level == "run"
            else (self.seconds, self.timed)
        )
        if not timed:
            return None
        return seconds / timed * self.left(level)


def span(seconds: float) -> str:
    """``42s``, ``4m10s``, ``1h02m``: a duration, as short as its magnitude allows."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


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


class LineReporter(Reporter):
    """Timestamped plain lines on stderr (or ``stream``), each flushed at once.

    What it writes (``[YYYY-MM-DD HH:MM:SS]`` before each)::

        suite: 3 methods, 9 runs, 90 rounds
        method 2/3 fedprox
        run 4/9 fedprox -> hospital_0 (seed 0): 10 rounds
        run 4/9 round 3/10: acc 0.812 | 9.4s, clients hospital_1 3.1s, hospital_2 2.9s
            | eta run 1m06s, all 14m06s
        run 4/9 done in 1m34s
        run 5/9 fedprox -> hospital_1 (seed 0): finished before, skipped
        encode ds: resnet18 features: 1200/5000 (24%), 31s, eta 1m38s

    (the round line is one line). Runs are numbered over the whole suite; ``eta
    run`` / ``all``: see :class:`Pace`.

    Clients: their local-training times go on the round's line (summed per client
    over the round's stages; more than :attr:`listed` clients as the fastest-slowest
    range and the slowest's name), not one line each: 10 clients x 50 rounds x 24
    runs would be 12,000 lines burying the round lines and their ETAs. A client
    still gets a line of its own when it ends :attr:`interval` seconds or more
    after the last line written, so slow clients (a round of minutes) show the job
    is alive and where it is.

    Jobs (``start_job``/``advance_job``: encoding a dataset, per batch): a line at
    the start, then one when another 10 % of the total is done or ``interval``
    seconds have passed since the job's last line, whichever comes first, and one
    when it is done: at most ten lines for a quick job, one per ``interval`` for a
    slow one, never one per batch.

    ``clock``: monotonic seconds, for durations and ETAs (tests pass a fake);
    timestamps are the wall clock's.
    """

    listed = 4

    def __init__(
        self,
        stream: TextIO | None = None,
        clock: Clock = time.monotonic,
        interval: float = 10.0,
    ) -> None:
        self._stream = stream
        self.clock = clock
        self.interval = interval
        self.pace = Pace(clock)
        self._last_line = clock()
        self._run = ""
        self._rnd = 0
        self._round_clients = self._calls = 0
        self._clients: dict[str, float] = {}
        self._client = ""
        self._client_t0 = 0.0
        self._job_kind = self._job_desc = ""
        self._job_total = self._job_done = self._job_step = 0
        self._job_t0 = self._job_last = 0.0

    def _line(self, text: str) -> None:
        stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        # sys.stderr looked up per line: pytest's capture and redirections swap it
        print(f"[{stamp}] {text}", file=self._stream or sys.stderr, flush=True)
        self._last_line = self.clock()

    # ---------------------------------------------------------------- suite, runs

    def start_suite(self, runs: int, methods: int, rounds: int | None = None) -> None:
        self.pace.start_suite(runs, rounds)
        what = f", {plural(rounds, 'round')}" if rounds else ""
        self._line(f"suite: {plural(methods, 'method')}, {plural(runs, 'run')}{what}")

    def start_method(self, k: int, n: int, label: str) -> None:
        self._line(f"method {k}/{n} {label}")

    def start_runs(self, total: int) -> None:
        self.pace.start_runs(total)
        if not self.pace.suite:
            self._line(f"experiment: {plural(total, 'run')}")

    def start_run(self, label: str, rounds: int, done: int = 0) -> None:
        self.pace.start_run(rounds, done)
        self._run = self._number()
        resumed = f", resuming after round {done}" if done else ""
        self._line(f"{self._run} {label}: {plural(rounds, 'round')}{resumed}")

    def _number(self) -> str:
        """``run 3/8``; ``run 3`` where nobody said how many (``start_runs``)."""
        n, total = self.pace.run_number, self.pace.runs
        return f"run {n}/{total}" if total else f"run {n}"

    def end_run(self) -> None:
        took = self.clock() - self.pace.run_start
        self.pace.end_run()
        self._line(f"{self._run} done in {span(took)}")

    def skip_run(self, label: str, rounds: int) -> None:
        run = self._number()
        self.pace.skip_run(rounds)
        self._line(f"{run} {label}: finished before, skipped")

    # ---------------------------------------------------------------- rounds

    def start_round(self, rnd: int, clients: int) -> None:
        self._rnd, self._round_clients, self._calls = rnd, clients, 0
        self._clients = {}

    def start_client(self, client_id: str, epochs: int) -> None:
        self._client, self._client_t0 = client_id, self.clock()

    def end_client(self) -> None:
        took = self.clock() - self._client_t0
        self._clients[self._client] = self._clients.get(self._client, 0.0) + took
        self._calls += 1
        if self.clock() - self._last_line >= self.interval:
            self._line(
                f"{self._run} round {self._rnd}/{self.pace.per_run} client "
                f"{self._client} ({self._calls}/{self._round_clients}) {took:.1f}s"
            )

    def _clients_text(self) -> str:
        times = self._clients
        if not times:
            return ""
        if len(times) <= self.listed:
            return "clients " + ", ".join(f"{c} {t:.1f}s" for c, t in times.items())
        slowest = max(times, key=lambda c: times[c])
        return (
            f"{len(times)} clients {min(times.values()):.1f}-{times[slowest]:.1f}s "
            f"(slowest {slowest})"
        )

    def end_round(self, summary: str = "") -> None:
        self.pace.end_round()
        head = f"{self._run} round {self._rnd}/{self.pace.per_run}"
        took = f"{self.pace.last_round:.1f}s"
        clients = self._clients_text()
        parts = [
            summary,
            f"{took}, {clients}" if clients else took,
            f"eta run {self._eta('run')}, all {self._eta('all')}",
        ]
        self._line(f"{head}: " + " | ".join(p for p in parts if p))

    def _eta(self, level: Level) -> str:
        eta = self.pace.eta(level)
        return "?" if eta is None else span(eta)

    # ---------------------------------------------------------------- the rest

    def log(self, message: str) -> None:
        self._line(message)

    def start_job(self, kind: str, description: str, total: int) -> None:
        self._job_kind, self._job_desc = kind, description
        self._job_total, self._job_done, self._job_step = total, 0, 0
        self._job_t0 = self._job_last = self.clock()
        self._line(f"{kind} {description}: {total} items")

    def advance_job(self, n: int = 1, item: str = "") -> None:
        self._job_done += n
        done, total = self._job_done, self._job_total
        now = self.clock()
        step = 10 * done // total if total > 0 else 10
        finished = done >= total
        if not (
            finished or step > self._job_step or now - self._job_last >= self.interval
        ):
            return
        self._job_step, self._job_last = step, now
        took = now - self._job_t0
        head = f"{self._job_kind} {self._job_desc}: {done}/{total}"
        last = f" ({item})" if item else ""
        if finished:
            self._line(f"{head} done in {span(took)}{last}")
            return
        eta = took / done * (total - done) if done else None
        pct = f"{100 * done // total}%"
        self._line(
            f"{head} ({pct}), {span(took)}, eta {'?' if eta is None else span(eta)}"
            f"{last}"
        )


def _interactive() -> bool:
    """Live bars can redraw here: stderr is a terminal, or a Jupyter notebook."""
    return sys.stderr.isatty() or Console(stderr=True).is_jupyter


def progress_mode(quiet: bool) -> str:
    """``bars``, ``lines`` or ``none``: ``quiet``, else ``FEDPATH_PROGRESS``, else
    bars where stderr is interactive and lines where it is not."""
    raw = os.environ.get(PROGRESS_ENV, "")
    mode = raw.strip().lower()
    if mode and mode not in PROGRESS_MODES:
        raise ConfigError(
            f"environment variable {PROGRESS_ENV}={raw!r}: expected one of "
            f"{', '.join(PROGRESS_MODES)} (or unset: bars on a terminal, lines "
            "otherwise)"
        )
    if quiet:
        return "none"
    return mode or ("bars" if _interactive() else "lines")


def make_reporter(quiet: bool) -> Reporter:
    """The reporter :func:`progress_mode` picks (see the module's docstring)."""
    mode = progress_mode(quiet)
    if mode == "none":
        return Reporter()
    if mode == "lines":
        return LineReporter()
    forced = os.environ.get(PROGRESS_ENV, "").strip().lower() == "bars"
    return RichReporter(
        Console(stderr=True, force_terminal=forced or sys.stderr.isatty() or None)
    )


class JobProgress(Closing):
    """One long job's progress (``kind`` ``description``: ``done``/``total``) on
    the reporter :func:`make_reporter` picks: a bar on a terminal, throttled
    lines in a log, nothing when quiet. ``with job_progress(...) as job:
    job.advance(item=name)``."""

    def __init__(self, reporter: Reporter, kind: str, description: str, total: int):
        self.reporter = reporter
        reporter.__enter__()
        reporter.start_job(kind, description, total)

    def advance(self, n: int = 1, item: str = "") -> None:
        """``n`` more done; ``item``: the last one's name (a slide id)."""
        self.reporter.advance_job(n, item)

    def close(self) -> None:
        self.reporter.close()


def job_progress(kind: str, description: str, total: int, quiet: bool) -> JobProgress:
    """A :class:`JobProgress` for a stage outside the runtime (tiling slides,
    extracting features), e.g. ``fedpath.wsi.stage_progress``'s bar, which in a
    log renders only at exit."""
    return JobProgress(make_reporter(quiet), kind, description, total)
