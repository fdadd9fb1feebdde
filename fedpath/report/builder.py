"""The page a report's sections add to, and what was written."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fedpath.report.html import esc, img


@dataclass
class ReportInfo:
    """What was written: the file, its figures, what could not be drawn, time."""

    path: Path
    figures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Builder:
    """The page being written: its HTML blocks, in order, and the options and
    :class:`ReportInfo` the sections share."""

    per_domain: int
    seed: int
    figures: bool
    info: ReportInfo
    body: list[str] = field(default_factory=list)

    def add(self, html: str) -> None:
        self.body.append(html)

    def figure(self, name: str, title: str, draw: Callable[[], bytes | None]) -> None:
        """Draw one figure; a failure (data not here, a model without a
        convolution...) becomes a note instead of an error."""
        try:
            png = draw()
        except Exception as err:  # the page is written anyway
            self.info.skipped.append(f"{name}: {err}")
            self.add(f'<p class="note">{esc(title)}: not drawn ({esc(err)}).</p>')
            return
        if png is None:
            return
        self.info.figures.append(name)
        self.add(f"<h3>{esc(title)}</h3>" + img(png, title))
