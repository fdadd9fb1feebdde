"""The parallel suite's display (fedpath.runtime.launch_view): its counts and ETA
from the workers' events, the lines it writes, the view each mode picks."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from fedpath.config import load_config
from fedpath.runtime.cells import Cell
from fedpath.runtime.launch_view import BarView, CellView, LineView, make_view
from fedpath.runtime.launch_worker import CellResult
from fedpath.utils.progress import PROGRESS_ENV
from tests.conftest import TINY


def _cell(tmp_path: Path, index: int = 1, rounds: int = 2) -> Cell:
    cfg = load_config(None, [*TINY, f"output_dir={tmp_path}", f"train.rounds={rounds}"])
    return Cell(index, cfg, "hospital_0", 0, tmp_path / f"c{index}")


def test_the_view_counts_cells_and_times_rounds(tmp_path: Path) -> None:
    now = [0.0]
    cells = [_cell(tmp_path, i, rounds=4) for i in (1, 2, 3)]
    view = CellView(cells, parallel=2, clock=lambda: now[0])
    assert view.eta() is None and view.rounds_left == 12
    view.event(("start", 1, 4, 0))
    view.event(("start", 2, 4, 1))  # resumed after round 1: 1 round less to do
    assert view.rounds_left == 11
    now[0] = 10.0
    view.event(("round", 1, 1))
    view.event(("round", 2, 2))
    # two rounds in 20 s: 10 s a round, 9 rounds left, 2 at a time
    assert view.rounds_left == 9 and view.eta() == pytest.approx(45.0)
    view.finished(CellResult(2, False, 1.0, "boom", "RuntimeError"))
    assert view.rounds_left == 7 and view.counts().startswith(
        "1/3 cells done (1 failed)"
    )
    view.event(("skip", 3))
    assert view.rounds_left == 3


def test_line_view_writes_starts_ends_and_throttled_rounds(tmp_path: Path) -> None:
    now = [0.0]
    stream = io.StringIO()
    cells = [_cell(tmp_path, i, rounds=3) for i in (1, 2)]
    view = LineView(cells, 2, clock=lambda: now[0], stream=stream)
    view.event(("start", 1, 3, 0))
    now[0] = 1.0
    view.event(("round", 1, 1))  # within 10 s of the last line: not written
    now[0] = 12.0
    view.event(("round", 1, 2))
    view.event(("round", 1, 3))  # the cell's last round: always written
    view.finished(CellResult(1, True, 12.0))
    view.finished(CellResult(2, False, 0.5, "no data\nmore", "DataError"))
    lines = stream.getvalue().splitlines()
    body = [ln.split("] ", 1)[1] for ln in lines]
    assert body[0] == "cell 1/2 fedavg -> hospital_0 (seed 0): started, 3 rounds"
    assert [b.split(" | ")[0] for b in body[1:3]] == [
        "cell 1/2 fedavg -> hospital_0 (seed 0): round 2/3",
        "cell 1/2 fedavg -> hospital_0 (seed 0): round 3/3",
    ]
    assert body[3].startswith("cell 1/2 fedavg -> hospital_0 (seed 0): done in 12s")
    assert "FAILED: DataError: no data | 2/2 cells done (1 failed)" in body[4]


def test_make_view_follows_the_progress_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cells = [_cell(tmp_path, i) for i in (1, 2)]
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    assert type(make_view(cells, 2, quiet=True)) is CellView
    monkeypatch.setenv(PROGRESS_ENV, "lines")
    assert type(make_view(cells, 2, quiet=False)) is LineView
    monkeypatch.setenv(PROGRESS_ENV, "bars")
    with make_view(cells, 2, quiet=False) as view:
        assert type(view) is BarView


def test_bar_view_keeps_a_bar_per_running_cell(tmp_path: Path) -> None:
    from rich.console import Console

    cells = [_cell(tmp_path, i, rounds=3) for i in (1, 2)]
    buf = io.StringIO()
    with BarView(cells, 2, console=Console(file=buf, force_terminal=False)) as view:
        view.event(("job", 1, "encode ds", 5))
        view.event(("advance", 1, 2))
        assert [t.completed for t in view.progress.tasks] == [0, 2]
        view.event(("log", 2, "waiting for another process to encode ds.h5"))
        view.event(("start", 1, 3, 1))  # the encoding bar gives way to the rounds
        view.event(("round", 1, 2))
        bars = {t.description.strip(): t for t in view.progress.tasks}
        assert bars["fedavg -> hospital_0 (seed 0)"].completed == 2
        assert len(view.progress.tasks) == 2
        view.finished(CellResult(1, True, 3.0))
        view.finished(CellResult(2, False, 0.1, "no data", "DataError"))
        suite = next(t for t in view.progress.tasks if t.id == view.suite)
        assert (suite.completed, suite.fields["note"].split()[0]) == (2, "1")
        assert len(view.progress.tasks) == 1  # only the suite's bar is left
    out = buf.getvalue()
    assert "cell 2 fedavg -> hospital_0 (seed 0) failed: DataError: no data" in out
    assert "cell 2 fedavg -> hospital_0 (seed 0): waiting for another process" in out


def test_line_view_writes_a_jobs_progress_throttled_and_its_end(
    tmp_path: Path,
) -> None:
    now = [0.0]
    stream = io.StringIO()
    view = LineView([_cell(tmp_path)], 1, clock=lambda: now[0], stream=stream)
    view.event(("job", 1, "encode manifest: lite0 maps", 100))
    view.event(("advance", 1, 30))  # within 10 s of the last line: not written
    now[0] = 11.0
    view.event(("advance", 1, 30))
    now[0] = 12.0
    view.event(("advance", 1, 40))  # the job's end: always written
    view.event(("advance", 1, 5))  # after the end: nothing
    now[0] = 13.0
    view.event(("log", 1, "waiting for another process to encode x.h5"))  # always
    body = [ln.split("] ", 1)[1] for ln in stream.getvalue().splitlines()]
    name = "cell 1/1 fedavg -> hospital_0 (seed 0)"
    assert body == [
        f"{name}: encode manifest: lite0 maps (100)",
        f"{name}: encode 60/100",
        f"{name}: encode 100/100",
        f"{name}: waiting for another process to encode x.h5",
    ]
