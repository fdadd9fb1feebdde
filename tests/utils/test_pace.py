"""Remaining times (fedpath.utils.pace): mean seconds per timed round x rounds
left, with restored and skipped work counted as done but never timed."""

from __future__ import annotations

import pytest

from fedpath.utils.pace import Pace
from tests.utils.progress_helpers import FakeClock


def test_eta_formula_mean_seconds_per_round_times_rounds_left() -> None:
    clock = FakeClock()
    pace = Pace(clock)
    pace.start_runs(2)  # an experiment: 2 runs of 5 rounds
    pace.start_run(5, 0)
    assert pace.eta("run") is None  # nothing timed yet
    for seconds in (10, 20, 30):
        clock.tick(seconds)
        pace.end_round()
    # mean 20 s per round; 2 rounds left in the run, 2 + 5 in the experiment
    assert pace.eta("run") == pytest.approx(40)
    assert pace.eta("all") == pytest.approx(140)
    assert pace.left("method") == 7


def test_a_suite_counts_its_known_rounds_and_skipped_runs() -> None:
    clock = FakeClock()
    pace = Pace(clock)
    pace.start_suite(runs=3, rounds=30)
    pace.start_runs(3)
    clock.tick(100)  # skipping is not a round's time
    pace.skip_run(10)
    pace.start_run(10, done=4)  # 4 rounds restored by --resume
    assert (pace.run_number, pace.left("run"), pace.left("all")) == (2, 6, 16)
    clock.tick(5)
    pace.end_round()
    # one round timed (5 s): 5 left in the run, 15 in the suite's 30
    assert pace.eta("run") == pytest.approx(25)
    assert pace.eta("all") == pytest.approx(75)
    assert pace.left("method") == 5 + 10  # and the third run, not started
    pace.end_run()
    assert pace.left("run") == 0 and pace.run_number == 3
