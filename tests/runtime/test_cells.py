"""A suite's cells (fedpath.runtime.cells): their locks (taken all or none, a live
holder refused and named, a dead one's taken over), and the state ``--status``
reads from a run directory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from fedpath.config import load_config
from fedpath.runtime.cells import (
    FAILED,
    LOCK,
    Cell,
    CellLocks,
    LockError,
    cell_status,
    clear_failure,
    hold_locks,
    read_lock,
    rounds_done,
    status_table,
    write_failure,
)
from fedpath.runtime.persistence import CHECKPOINT, FINAL, RESULTS
from tests.conftest import TINY


def _cell(tmp_path: Path, index: int = 1) -> Cell:
    cfg = load_config(None, [*TINY, f"output_dir={tmp_path}", "train.rounds=3"])
    return Cell(index, cfg, "hospital_0", 0, tmp_path / f"c{index}")


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_locks_are_taken_queued_marked_and_released(tmp_path: Path) -> None:
    cells = [_cell(tmp_path, i) for i in (1, 2)]
    with hold_locks(cells) as locks:
        for cell in cells:
            info = read_lock(cell.run_dir)
            assert info is not None and info["pid"] == os.getpid()
            assert info["state"] == "queued"
        locks.mark(cells[0].run_dir, "running")
        assert (read_lock(cells[0].run_dir) or {})["state"] == "running"
        locks.release_one(cells[0].run_dir)
        assert read_lock(cells[0].run_dir) is None
        assert read_lock(cells[1].run_dir) is not None
    assert not list(tmp_path.rglob(LOCK)) and not list(tmp_path.rglob("*.part"))


def test_a_live_holder_refuses_all_and_a_dead_one_is_taken_over(
    tmp_path: Path,
) -> None:
    first, second = _cell(tmp_path, 1), _cell(tmp_path, 2)
    second.run_dir.mkdir(parents=True)
    live = {"pid": os.getpid(), "host": socket.gethostname(), "command": "other"}
    (second.run_dir / LOCK).write_text(json.dumps(live))
    with pytest.raises(LockError, match=r"being written by pid \d+ on .*\(other\)"):
        CellLocks([first, second]).acquire()
    assert read_lock(first.run_dir) is None  # all or none: the first given back
    dead = {**live, "pid": _dead_pid()}
    (second.run_dir / LOCK).write_text(json.dumps(dead))
    with hold_locks([first, second]):
        assert (read_lock(second.run_dir) or {}).get("pid") == os.getpid()
    elsewhere = {**live, "host": "another-machine", "pid": 1}  # cannot tell: live
    (second.run_dir / LOCK).write_text(json.dumps(elsewhere))
    with pytest.raises(LockError, match="another-machine"):
        CellLocks([second]).acquire()


def test_the_state_a_run_directory_shows(tmp_path: Path) -> None:
    cell = _cell(tmp_path)
    d = cell.run_dir
    assert cell_status(cell) == ("pending", "")
    d.mkdir(parents=True)
    (d / RESULTS).write_text(
        '{"kind": "round", "round": 1}\n{"kind": "eval", "round": 5}\n'
        '{"kind": "round", "round": 2}\n{"kind": "round", "ro'  # torn by a crash
    )
    assert rounds_done(d) == 2
    (d / CHECKPOINT).write_bytes(b"")
    assert cell_status(cell) == ("interrupted", "resumes after round 2/3")
    write_failure(d, "no data\nmore", "DataError", "Traceback ...")
    assert cell_status(cell) == ("failed", "DataError: no data")
    clear_failure(d)
    assert not (d / FAILED).exists()
    (d / FINAL).write_text("{}")
    assert cell_status(cell) == ("done", "")
    with hold_locks([cell]) as locks:
        locks.mark(d, "running")
        state, detail = cell_status(cell)
        assert state == "running" and detail.startswith("round 2/3, held by pid")
        table, counts = status_table([cell])
    assert counts["running"] == 1 and sum(counts.values()) == 1
    assert table.splitlines()[2].startswith(f"| 1 | {cell.label} | running |")
