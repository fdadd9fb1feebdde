"""Timestamped plain progress lines, for a log file, CI or a cluster job.

Rich's live bars cannot redraw where stderr is not a terminal and render once,
at exit: a 38-minute demo showed nothing but its header until it ended.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime
from typing import TextIO

from fedpath.utils.pace import Clock, Level, Pace
from fedpath.utils.progress import Reporter, plural, span


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
