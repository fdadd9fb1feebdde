"""The rich bars (fedpath.utils.progress_bars): the calls land on the right bars,
and the remaining times are :class:`~fedpath.utils.pace.Pace`'s."""

from __future__ import annotations

import io

from fedpath.utils.progress_bars import RichReporter
from tests.utils.progress_helpers import FakeClock, drive


def test_rich_reporter_takes_the_calls() -> None:
    """The bars: a suite bar over all runs (skipped ones done), Pace's ETA."""
    clock = FakeClock()
    from rich.console import Console

    buf = io.StringIO()
    rep = RichReporter(Console(file=buf, force_terminal=False), clock=clock)
    with rep:
        drive(rep, clock, resumed=True)
        rep.start_job("encode", "ds", 4)
        rep.advance_job(4, item="x")
    tasks = {t.fields["kind"]: t for t in rep.progress.tasks}
    assert tasks["suite"].completed == tasks["suite"].total == 4
    assert tasks["suite"].description == "method 2/2 fedprox"
    assert tasks["runs"].completed == 2
    assert tasks["encode"].description == "ds x"
    assert rep.progress.tasks.index(tasks["suite"]) == 0  # the top bar
    # rendered once at the end (not a terminal): the suite line has Pace's ETA
    suite_line = next(ln for ln in buf.getvalue().splitlines() if "suite" in ln)
    assert "method 2/2 fedprox" in suite_line and "4/4" in suite_line
    assert "0:00:00" in suite_line
