"""Units files: every (method, target, seed) unit's metrics as one small CSV.

A benchmark's verdict rests on paired units, and its run directories (models,
checkpoints, logs) are large and machine-local. A units file keeps what a table
or a paired comparison reads, one line per metric of one unit::

    method,target,seed,split,select,metric,value,environment
    fedstain,MIDOG21_HamamatsuXR,0,target,last,balanced_accuracy,0.6744...,torch ...

``fedpath table RUNS --units FILE`` writes it; ``fedpath table`` and
``fedpath compare`` read a ``.csv`` path among their paths in place of run
directories, so rows run on different machines or days meet in one paired
comparison, and a published table can be recomputed from the file it cites.
Values are stored as the runs recorded them (fractions, full precision); an
empty value is an undefined metric (``nan``). ``environment`` is the run's
software and arithmetic in one line
(:func:`fedpath.runtime.environment.fingerprint`; empty: not recorded), so a
comparison can say which pairs join two environments.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from fedpath.errors import ConfigError, DataError
from fedpath.evaluation.tables import ResultRow

__all__ = [
    "HEADER",
    "SUFFIX",
    "is_units_file",
    "read_units",
    "rows_for",
    "units_text",
    "write_units",
]

HEADER = (
    "method",
    "target",
    "seed",
    "split",
    "select",
    "metric",
    "value",
    "environment",
)
#: a results path with this suffix is a units file, not a run directory
SUFFIX = ".csv"


def is_units_file(path: Path) -> bool:
    """``path`` names a units file (a ``.csv`` file, not a run directory)."""
    return path.suffix.lower() == SUFFIX and not path.is_dir()


def units_text(rows: Iterable[ResultRow], split: str, select: str) -> str:
    """``rows`` (one ``split`` read with ``select``) as a units file's text,
    sorted by method, target, seed and metric so a rewrite diffs cleanly; the
    numbers and undefined metrics of each unit (a block's other entries, a
    confusion matrix or a label, are not metrics a table or a pair reads)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(HEADER)
    for r in sorted(rows, key=lambda r: (r.method, r.target, r.seed)):
        for metric in sorted(r.metrics):
            value = r.metrics[metric]
            if isinstance(value, bool) or not isinstance(value, int | float | None):
                continue
            text = "" if value is None or math.isnan(value) else repr(float(value))
            line = (r.method, r.target, r.seed, split, select, metric, text)
            out.writerow((*line, r.environment))
    return buf.getvalue()


def write_units(path: Path, rows: Iterable[ResultRow], split: str, select: str) -> None:
    """Write ``rows`` as the units file ``path`` (:func:`units_text`, atomically);
    a :class:`ConfigError` naming ``--units`` when ``path`` is not a ``.csv``
    name, the rule by which ``table`` and ``compare`` read it back."""
    from fedpath.utils.io import atomic_write_text  # torch: only when writing

    if not is_units_file(path):
        raise ConfigError(f"--units {path}: expected a {SUFFIX} file name")
    atomic_write_text(path, units_text(rows, split, select))


def read_units(path: Path) -> dict[tuple[str, str], list[ResultRow]]:
    """A units file's rows by ``(split, select)``; a :class:`DataError` naming
    the file, the line and the field for a wrong header, a seed that is not an
    integer, a value that is not a number or a metric given twice."""
    where = f"units file {str(path)!r}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{where}: cannot be read ({e})") from None
    lines = list(csv.reader(io.StringIO(text)))
    if not lines or tuple(lines[0]) != HEADER:
        got = ",".join(lines[0]) if lines else "an empty file"
        expected = ",".join(HEADER)
        raise DataError(f"{where}: the first line must be {expected}, got {got}")
    units: dict[tuple[str, str, str, int, str], dict[str, float | None]] = {}
    envs: dict[tuple[str, str, str, int, str], str] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line:
            continue
        if len(line) != len(HEADER):
            raise DataError(
                f"{where}, line {number}: expected {len(HEADER)} fields "
                f"({','.join(HEADER)}), got {len(line)}"
            )
        method, target, seed, split, select, metric, value, env = line
        for field, given in (("method", method), ("target", target), ("split", split)):
            if not given:
                raise DataError(f"{where}, line {number}: {field!r} is empty")
        key = (split, select or "last", method, _seed(seed, where, number), target)
        metrics = units.setdefault(key, {})
        if metric in metrics:
            raise DataError(
                f"{where}, line {number}: metric {metric!r} of method {method!r}, "
                f"target {target!r}, seed {seed} is given twice"
            )
        metrics[metric] = _value(value, where, number)
        if envs.setdefault(key, env) != env:
            raise DataError(
                f"{where}, line {number}: method {method!r}, target {target!r}, "
                f"seed {seed} has another environment than on its earlier lines "
                f"({env!r}, not {envs[key]!r}): one unit is one run"
            )
    rows: dict[tuple[str, str], list[ResultRow]] = {}
    for key, metrics in units.items():
        split, select, method, number, target = key
        rows.setdefault((split, select), []).append(
            ResultRow(method, target, number, metrics, envs[key])
        )
    return rows


def rows_for(
    path: Path, split: str, select: str, splits: Sequence[str]
) -> list[ResultRow]:
    """The rows of ``split`` read with ``select`` in the units file ``path``;
    a :class:`DataError` naming the file and what it has when it has none, or
    a split that is not one of ``splits``."""
    by = read_units(path)
    for have_split, _ in by:
        if have_split not in splits:
            raise DataError(
                f"units file {str(path)!r}: split {have_split!r} is not one of "
                f"{', '.join(map(repr, splits))}"
            )
    if (split, select) not in by:
        have = ", ".join(f"--split {s} --select {c}" for s, c in sorted(by))
        raise DataError(
            f"units file {str(path)!r} has no units for --split {split} --select "
            f"{select}; it has {have or 'no units at all'}"
        )
    return by[(split, select)]


def _seed(text: str, where: str, number: int) -> int:
    try:
        return int(text)
    except ValueError:
        raise DataError(
            f"{where}, line {number}: 'seed' must be an integer, got {text!r}"
        ) from None


def _value(text: str, where: str, number: int) -> float | None:
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise DataError(
            f"{where}, line {number}: 'value' must be a number (or empty for an "
            f"undefined metric), got {text!r}"
        ) from None
