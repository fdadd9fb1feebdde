"""Remaining times of a job of runs and rounds, from the rounds timed so far.

Rich averages over the last 30 s of updates, which a round or a run of minutes
never fills (its column stays ``-:--:--``), and finished runs skipped by
``--resume`` would look like instant progress: :class:`Pace` times only the
rounds trained in this process, and a remaining time is their mean seconds x the
rounds left. Both progress displays (:mod:`fedpath.utils.progress_bars`,
:mod:`fedpath.utils.progress_lines`) read it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

Clock = Callable[[], float]
Level = Literal["run", "method", "all"]


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
