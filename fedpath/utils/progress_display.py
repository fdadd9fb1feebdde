"""The progress display a command gets: bars, lines or nothing.

:func:`make_reporter` turns :func:`~fedpath.utils.progress.progress_mode`'s
choice into a reporter (:class:`~fedpath.utils.progress_bars.RichReporter`,
:class:`~fedpath.utils.progress_lines.LineReporter` or the silent
:class:`~fedpath.utils.progress.Reporter`); :func:`job_progress` is the same for
one long job outside the runtime (tiling slides, extracting features).
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

from fedpath.utils.closing import Closing
from fedpath.utils.progress import PROGRESS_ENV, Reporter, progress_mode
from fedpath.utils.progress_bars import RichReporter
from fedpath.utils.progress_lines import LineReporter


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
