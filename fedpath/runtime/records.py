"""Reading a run's records back: ``final.json`` and the JSON-lines files
(``results.jsonl``, ``traffic.jsonl``) that ``fedpath table``, ``compare``,
``report`` and ``audit`` read.

Every problem is a :class:`~fedpath.errors.DataError` naming the file and the
line (never quoting it: a record may travel from a hospital's node), so a
damaged run gives one clear line instead of a traceback or a silently wrong
table.

The JSON-lines files are read by :func:`fedpath.utils.io.read_json_lines`
(re-exported here), the one reader of JSON lines: a truncated last line of a
run still being written is left out with a warning (or refused, for the
audit); any other bad line is an error naming the file and the line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedpath.errors import DataError
from fedpath.utils.io import JsonLines, read_json_lines, read_text_record
from fedpath.utils.io import json_kind as _kind

#: the JSON-lines reader lives in :mod:`fedpath.utils.io` (one reader for every
#: JSON-lines file); re-exported here for the readers of run records
__all__ = ["FINAL_KEYS", "JsonLines", "read_final", "read_json_lines"]

#: the keys of ``final.json`` every reader relies on, and what each must be
FINAL_KEYS = {"method": str, "target": str, "seed": int}
#: the blocks of ``final.json``'s ``evaluation`` that hold one split's metrics,
#: those that hold one such block per client or domain, and those that hold
#: the metrics of other weights (``--select``) or adapted statistics
METRIC_BLOCKS = ("target", "source_worst")
PER_NAME = ("clients", "source")
PER_WEIGHTS = ("adapted", "selected", "averaged", "calibrated")
#: the metrics a table averages (``fedpath table --metric``): numbers or null
NUMERIC = [
    "accuracy",
    "balanced_accuracy",
    "macro_f1",
    "macro_precision",
    "macro_recall",
    "auroc",
    "mcc",
    "f1",
    "precision",
    "recall",
    "ece",
    "n",
    "source_mean_accuracy",
]


def _decode(text: str, where: str) -> Any:
    """``json.loads`` whose errors name ``where`` and the line, not the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(
            f"{where}: not valid JSON ({err.msg} at line {err.lineno}, column "
            f"{err.colno}); the run record is damaged"
        ) from None
    except RecursionError:
        raise DataError(f"{where}: not valid JSON (nested too deeply)") from None


def read_final(run_dir: Path) -> dict[str, Any]:
    """A finished run's ``final.json``, checked: a JSON object with ``method``
    and ``target`` (strings), ``seed`` (an integer) and an ``evaluation``
    object whose metric blocks are objects; errors name the file and the key."""
    path = run_dir / "final.json"
    where = f"run record {str(path)!r}"
    rec = _decode(read_text_record(path, "run record"), where)
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object, got {_kind(rec)}")
    for key, tp in FINAL_KEYS.items():
        value = rec.get(key)
        if tp is int and isinstance(value, str) and value.isdecimal():
            value = rec[key] = int(value)  # "3": as the readers always took it
        if not isinstance(value, tp) or isinstance(value, bool):
            expected = "an integer" if tp is int else "a string"
            raise DataError(f"{where}: {key!r} must be {expected}, got {_kind(value)}")
    ev = rec.setdefault("evaluation", {})
    _check_blocks(ev, "evaluation", where)
    for name in PER_NAME:
        for key, block in (ev.get(name) or {}).items():
            _check_metrics(block, f"evaluation.{name}.{key}", where)
    for name in PER_WEIGHTS:
        if ev.get(name) is not None:
            _check_blocks(ev[name], f"evaluation.{name}", where)
    return rec


def _check_blocks(ev: Any, key: str, where: str) -> None:
    """``ev`` (an ``evaluation`` or one of its per-weights blocks) is an object,
    its metric blocks are objects of metrics and its per-name blocks objects."""
    if not isinstance(ev, dict):
        raise DataError(f"{where}: {key!r} must be an object, got {_kind(ev)}")
    for name in (*METRIC_BLOCKS, *PER_NAME, *PER_WEIGHTS):
        # null only where a reader allows it: a run without a target domain
        if name not in ev or (name == "target" and ev[name] is None):
            continue
        if not isinstance(ev[name], dict):
            got = _kind(ev[name])
            raise DataError(f"{where}: '{key}.{name}' must be an object, got {got}")
    _check_metrics(ev, key, where)
    for name in METRIC_BLOCKS:
        if ev.get(name) is not None:
            _check_metrics(ev[name], f"{key}.{name}", where)


def _check_metrics(block: Any, key: str, where: str) -> None:
    """``block`` is an object whose metrics (:data:`NUMERIC`) are numbers or
    null (an undefined metric); its other entries are left to their readers."""
    if not isinstance(block, dict):
        raise DataError(f"{where}: {key!r} must be an object, got {_kind(block)}")
    for name in NUMERIC:
        value = block.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float)
        ):
            raise DataError(
                f"{where}: '{key}.{name}' must be a number or null, got {_kind(value)}"
            )
