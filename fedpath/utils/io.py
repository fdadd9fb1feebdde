"""Atomic writes (a crash never leaves a half-written file) and the one reader of
JSON-lines record files (:func:`read_json_lines`)."""

from __future__ import annotations

import io
import json
import logging
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from fedpath.errors import DataError
from fedpath.schema import ConfigError
from fedpath.utils.files import check_file

log = logging.getLogger("fedpath")


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def _file_in_the_way(path: Path) -> Path | None:
    """The first of ``path`` and its parents that exists and is not a folder."""
    for part in reversed([path, *path.parents]):
        if part.exists() and not part.is_dir():
            return part
    return None


def make_folder(path: Path, what: str) -> None:
    """Create the folder ``path`` (and its parents) or fail with one
    :class:`ConfigError` naming ``what`` (the key or option that chose it), the
    path and why: a file in the way, a missing permission, a read-only disk."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        writable = os.access(path, os.W_OK | os.X_OK)
    except OSError as err:
        blocker = _file_in_the_way(path)
        why = (
            f"{blocker} is a file, not a folder"
            if blocker is not None
            else (err.strerror or str(err)).lower()
        )
        raise ConfigError(
            f"{what}: cannot create the folder {path}: {why}; expected a folder "
            "that can be created and written"
        ) from None
    if not writable:
        raise ConfigError(
            f"{what}: the folder {path} cannot be written (permission denied); "
            "expected a folder that can be created and written"
        )


def check_output_file(path: Path, what: str) -> None:
    """Fail before any work when the file ``path`` (chosen by option ``what``)
    cannot be written: it names a folder, or a file stands where its folder
    would be (that folder is created otherwise)."""
    if path.is_dir():
        raise ConfigError(
            f"{what} {path}: is a folder; expected the name of a file to write "
            "(in an existing folder or one that can be created)"
        )
    make_folder(path.parent, f"{what} {path}")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; use normal permissions
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_torch_save(obj: Any, path: Path) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON object as a line (flushed, so a crash keeps earlier lines)."""
    with path.open("a") as fh:
        fh.write(dumps_json(record) + "\n")
        fh.flush()


def dumps_json(obj: Any, indent: int | None = None) -> str:
    """Strict JSON: NaN and infinities (an undefined AUROC...) become ``null``,
    numpy scalars and arrays plain numbers and lists (Python's ``json`` would
    write a bare ``NaN``, which other JSON readers reject)."""
    return json.dumps(json_safe(obj), indent=indent, allow_nan=False, default=str)


def json_safe(obj: Any) -> Any:
    """``obj`` with non-finite floats as None and numpy values as Python ones."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, torch tensors
        return json_safe(obj.tolist())
    if hasattr(obj, "item"):
        return json_safe(obj.item())
    return obj


def read_text_record(path: Path, what: str) -> str:
    """The UTF-8 text of a record file; a folder, a missing or unreadable file
    or one that is not UTF-8 is a :class:`DataError` naming ``what`` and it."""
    where = f"{what} {str(path)!r}"
    check_file(path, what)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"{where} is not UTF-8 text (byte {err.start}); the run record is damaged"
        ) from None
    except OSError as err:
        raise DataError(f"{where} cannot be read: {err.strerror}") from None


def json_kind(value: Any) -> str:
    """The JSON name of a decoded value's type, for errors."""
    names = {list: "a list", str: "a string", bool: "a boolean", dict: "an object"}
    return names.get(type(value), "null" if value is None else "a number")


@dataclass
class JsonLines:
    """The records of a JSON-lines file and the number of each one's line;
    ``torn``: the number of a truncated last line that was left out (a run
    still writing it), else None."""

    records: list[dict[str, Any]] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    torn: int | None = None


def read_json_lines(
    path: Path, what: str, torn_tail: Literal["skip", "refuse"] = "skip"
) -> JsonLines:
    """Every line of ``path`` as a JSON object (blank lines skipped); a line
    that is not one is a :class:`DataError` naming ``what``, the file and the
    line, never quoting it (a record may travel from a hospital's node).

    A truncated last line (no newline: every record is written with its newline
    in one write, so only a write in progress or a killed one lacks it) is left
    out with a warning when ``torn_tail`` is ``skip`` (a live run's curves are
    still worth seeing), an error when it is ``refuse`` (an audit must not vouch
    for a record it could not read). A complete line that is not JSON is damage.
    """
    where = f"{what} {str(path)!r}"
    lines = read_text_record(path, what).split("\n")  # last: "" after a newline
    out = JsonLines()
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last_unfinished = i == len(lines)
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if last_unfinished and torn_tail == "skip":
                log.warning(
                    "%s: line %d is truncated (the run is still writing it, or "
                    "was stopped mid-write); read without it",
                    where,
                    i,
                )
                out.torn = i
                break
            why = "truncated" if last_unfinished else "not valid JSON"
            raise DataError(
                f"{where}: line {i} is {why}; the record is damaged"
            ) from None
        if not isinstance(rec, dict):
            raise DataError(
                f"{where}: line {i} is {json_kind(rec)}; expected a JSON object"
            )
        out.records.append(rec)
        out.numbers.append(i)
    return out


def read_jsonl(path: Path, what: str = "record file") -> Iterator[dict[str, Any]]:
    """The records of a JSON-lines file (:func:`read_json_lines`: a torn last
    line left out with a warning, any other bad line a :class:`DataError`)."""
    yield from read_json_lines(path, what).records


def _default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return str(obj)
