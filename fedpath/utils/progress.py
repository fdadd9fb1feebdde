"""Progress display: rich bars on a terminal, timestamped lines in a log, or nothing.

The runtime reports through a :class:`Reporter`; which one is
:func:`~fedpath.utils.progress_display.make_reporter`'s choice, so the algorithm
code never checks a flag:

* :class:`~fedpath.utils.progress_bars.RichReporter`: live bars (suite, runs,
  round, clients, epochs) when stderr is a terminal (or a Jupyter notebook);
* :class:`~fedpath.utils.progress_lines.LineReporter`: plain
  ``[2026-12-01 13:05:12] run 3/8 ...`` lines, flushed as they are written, when
  stderr is not a terminal (a log file, CI, a cluster job);
* :class:`Reporter`: nothing, with ``--quiet`` / ``FEDPATH_QUIET=1``.

``FEDPATH_PROGRESS=bars|lines|none`` overrides the terminal test (``bars`` draws
the bars even where stderr does not look like a terminal; ``lines`` writes lines
to a terminal too); ``--quiet`` still wins. Any other value is an error naming the
variable (:func:`progress_mode`).

Remaining times come from :class:`~fedpath.utils.pace.Pace`, not from rich's own
estimate. This module holds what every display shares: the silent
:class:`Reporter` they extend, the choice of display, and the text of counts
(:func:`plural`) and durations (:func:`span`).
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

from fedpath.errors import ConfigError
from fedpath.utils.closing import Closing

#: the environment variable that picks the display, and its values
PROGRESS_ENV = "FEDPATH_PROGRESS"
PROGRESS_MODES = ("bars", "lines", "none")


def plural(n: int, word: str) -> str:
    """``1 run``, ``4 runs``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Reporter(Closing):
    """Silent reporter; the base of the bars
    (:class:`~fedpath.utils.progress_bars.RichReporter`) and the lines
    (:class:`~fedpath.utils.progress_lines.LineReporter`).

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


def span(seconds: float) -> str:
    """``42s``, ``4m10s``, ``1h02m``: a duration, as short as its magnitude allows."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


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
