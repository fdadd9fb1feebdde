"""The page a report's sections add to (fedpath.report.builder): a figure that
draws is embedded and counted, one that cannot becomes a note, never an error."""

from __future__ import annotations

import base64
from pathlib import Path

from fedpath.report.builder import Builder, ReportInfo

PNG = b"\x89PNG\r\n\x1a\n(not decoded: embedded as it is)"


def _builder(tmp_path: Path) -> Builder:
    return Builder(per_domain=5, seed=0, figures=True, info=ReportInfo(tmp_path))


def test_a_drawn_figure_is_embedded_and_counted(tmp_path: Path) -> None:
    b = _builder(tmp_path)
    b.figure("curves", "per-round <curves>", lambda: PNG)
    assert b.info.figures == ["curves"] and b.info.skipped == []
    assert b.body[0].startswith("<h3>per-round &lt;curves&gt;</h3>")
    assert base64.b64encode(PNG).decode() in b.body[0]


def test_a_figure_that_fails_becomes_a_note(tmp_path: Path) -> None:
    b = _builder(tmp_path)

    def draw() -> bytes:
        raise FileNotFoundError("no data <here>")

    b.figure("tsne", "t-SNE", draw)
    assert b.info.figures == [] and b.info.skipped == ["tsne: no data <here>"]
    assert b.body == ['<p class="note">t-SNE: not drawn (no data &lt;here&gt;).</p>']


def test_a_figure_with_nothing_to_draw_leaves_no_trace(tmp_path: Path) -> None:
    b = _builder(tmp_path)
    b.figure("probe_roc", "ROC", lambda: None)
    b.add("<p>x</p>")
    assert b.body == ["<p>x</p>"] and b.info.figures == b.info.skipped == []
