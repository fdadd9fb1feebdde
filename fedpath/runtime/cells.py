"""The cells of a suite: one (variant, held-out domain, seed) each, one run directory.

A paper-style table is many independent runs. :func:`plan_cells` lists them in the
order the serial suite runs them; the launchers (:mod:`fedpath.runtime.launch`)
run them one after another or in parallel. What a cell leaves in its run
directory besides the run's own files:

``.fedpath.lock``
    held by the suite that will write the directory (taken for every cell before
    the first one starts, released at the end): a second suite writing into the
    same run directory refuses, naming the holder. A lock whose holder has died on
    this machine is stale and taken over. Its JSON says who holds it (``pid``,
    ``host``, ``since``, ``command``) and whether the cell is ``queued`` or
    ``running``.
``failed.json``
    written by a parallel launcher when the cell raised (its error and traceback);
    removed when the cell is run again.

:func:`cell_status` reads these and the run's own files for ``--status``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpath.errors import ConfigError
from fedpath.runtime.persistence import CHECKPOINT, FINAL, RESULTS
from fedpath.utils.io import atomic_write_text, dumps_json, make_folder

if TYPE_CHECKING:
    from fedpath.config import ExperimentConfig
    from fedpath.data.base import DomainDataset

LOCK = ".fedpath.lock"
FAILED = "failed.json"
STATES = ("done", "running", "queued", "failed", "interrupted", "pending")


class LockError(ConfigError):
    """A run directory another live process is writing (the message names it)."""


@dataclass(frozen=True)
class Cell:
    """One run of a suite: ``config`` (its variant's) x held-out ``target`` x
    ``seed``, written to ``run_dir``; ``index`` counts from 1 over the suite."""

    index: int
    config: ExperimentConfig
    target: str
    seed: int
    run_dir: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.config.method} -> {self.target} (seed {self.seed})"

    @property
    def rounds(self) -> int:
        return int(self.config.train.rounds)


def plan_cells(
    configs: Sequence[ExperimentConfig], datasets: dict[str, DomainDataset]
) -> list[Cell]:
    """Every cell of ``configs`` (variant order, then fold, then seed: the order
    of the serial suite); ``datasets``: each ``repr(cfg.data)``'s loaded dataset."""
    from fedpath.runtime.experiment import plan_runs, run_dir_for

    cells: list[Cell] = []
    seen: dict[Path, str] = {}
    for cfg in configs:
        for fold, seed in plan_runs(cfg, datasets[repr(cfg.data)]):
            run_dir = run_dir_for(cfg, fold.target, seed).absolute()
            if run_dir in seen:
                raise ConfigError(
                    f"two cells of this suite write to {run_dir} ({seen[run_dir]} and "
                    f"{cfg.method} -> {fold.target}); give the variants distinct labels"
                )
            seen[run_dir] = cfg.method
            cells.append(Cell(len(cells) + 1, cfg, fold.target, seed, run_dir))
    return cells


# ----------------------------------------------------------------------- locks


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def read_lock(run_dir: Path) -> dict[str, Any] | None:
    """The lock's JSON, or None when there is none (an unreadable lock: ``{}``)."""
    path = run_dir / LOCK
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return raw if isinstance(raw, dict) else {}


def lock_is_live(info: dict[str, Any]) -> bool:
    """Whether the lock's holder may still be running: on this machine, its
    process exists; on another machine we cannot tell, so it counts as live."""
    if info.get("host") != socket.gethostname():
        return True
    pid = info.get("pid")
    return isinstance(pid, int) and _alive(pid)


def _fresh_or_live(path: Path, info: dict[str, Any]) -> bool:
    """A lock that cannot be read counts as live for a minute (its holder may be
    writing it), then as stale."""
    if not info:
        try:
            return time.time() - path.stat().st_mtime < 60
        except FileNotFoundError:
            return False
    return lock_is_live(info)


def _holder(info: dict[str, Any]) -> str:
    return (
        f"pid {info.get('pid', '?')} on {info.get('host', '?')} since "
        f"{info.get('since', '?')} ({info.get('command', '?')})"
    )


class CellLocks:
    """The locks of a suite's cells, held by this process (:func:`hold_locks`)."""

    def __init__(self, cells: Sequence[Cell]) -> None:
        self.cells = list(cells)
        self.info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(Path(sys.argv[0]).name.split() + sys.argv[1:])[:300],
        }
        self.held: list[Path] = []

    def acquire(self) -> None:
        for cell in self.cells:
            try:
                self._take(cell)
            except BaseException:
                self.release()
                raise

    def _take(self, cell: Cell) -> None:
        run_dir = cell.run_dir
        make_folder(run_dir, f"output_dir {cell.config.output_dir!r}")
        path = run_dir / LOCK
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                info = read_lock(run_dir)
                if info is None:
                    continue  # released meanwhile
                if _fresh_or_live(path, info):
                    raise LockError(
                        f"run directory {run_dir} is being written by {_holder(info)}; "
                        f"wait for it to finish, or delete {path} if that process "
                        "is gone"
                    ) from None
                path.unlink(missing_ok=True)  # stale: its holder died here
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(dumps_json({**self.info, "state": "queued"}))
            self.held.append(run_dir)
            return
        raise LockError(f"could not take the lock {path}: another process races for it")

    def mark(self, run_dir: Path, state: str) -> None:
        """Record the cell's state (``queued`` / ``running``) in its lock (written
        beside it and renamed; not a ``.*.tmp`` name, which a starting run deletes)."""
        if run_dir in self.held:
            part = run_dir / f"{LOCK}.{os.getpid()}.part"
            part.write_text(dumps_json({**self.info, "state": state}))
            os.replace(part, run_dir / LOCK)

    def release_one(self, run_dir: Path) -> None:
        if run_dir in self.held:
            self.held.remove(run_dir)
            info = read_lock(run_dir)
            if info is not None and info.get("pid") == os.getpid():
                (run_dir / LOCK).unlink(missing_ok=True)

    def release(self) -> None:
        for run_dir in list(self.held):
            self.release_one(run_dir)


@contextmanager
def hold_locks(cells: Sequence[Cell]) -> Iterator[CellLocks]:
    """Lock every cell's run directory for the duration (all or none)."""
    locks = CellLocks(cells)
    locks.acquire()
    try:
        yield locks
    finally:
        locks.release()


# ---------------------------------------------------------------------- status


def write_failure(run_dir: Path, error: str, kind: str, trace: str) -> None:
    atomic_write_text(
        run_dir / FAILED,
        dumps_json(
            {
                "error": error,
                "type": kind,
                "traceback": trace,
                "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            }
        ),
    )


def clear_failure(run_dir: Path) -> None:
    (run_dir / FAILED).unlink(missing_ok=True)


def rounds_done(run_dir: Path) -> int:
    """The last round recorded in ``results.jsonl`` (0: none)."""
    path = run_dir / RESULTS
    last = 0
    if not path.is_file():
        return 0
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line a crash cut short
        if isinstance(rec, dict) and rec.get("kind") == "round":
            last = max(last, int(rec.get("round", 0)))
    return last


def cell_status(cell: Cell) -> tuple[str, str]:
    """(state, detail): one of :data:`STATES`, and what to say about it."""
    d = cell.run_dir
    info = read_lock(d)
    if info is not None and lock_is_live(info):
        state = "running" if info.get("state") == "running" else "queued"
        where = f"round {rounds_done(d)}/{cell.rounds}, " if state == "running" else ""
        return state, f"{where}held by pid {info.get('pid')} on {info.get('host')}"
    if (d / FAILED).is_file():  # the last attempt (a finished run clears it)
        try:
            err = json.loads((d / FAILED).read_text())
            first = str(err.get("error", "")).splitlines()[0] if err else ""
            return "failed", f"{err.get('type', 'error')}: {first}"[:200]
        except (json.JSONDecodeError, IndexError, AttributeError):
            return "failed", ""
    if (d / FINAL).is_file():
        return "done", ""
    if (d / CHECKPOINT).is_file():
        return "interrupted", f"resumes after round {rounds_done(d)}/{cell.rounds}"
    return "pending", ""


def status_table(cells: Sequence[Cell]) -> tuple[str, dict[str, int]]:
    """A Markdown table of every cell's state, and the count per state."""
    counts = dict.fromkeys(STATES, 0)
    lines = ["| # | cell | state | detail |", "|---:|---|---|---|"]
    for cell in cells:
        state, detail = cell_status(cell)
        counts[state] += 1
        lines.append(f"| {cell.index} | {cell.label} | {state} | {detail} |")
    return "\n".join(lines), counts
