"""Payload <-> Flower ``RecordDict``, bit-exact.

Layout (under an optional ``prefix``, so several payloads can share one RecordDict,
e.g. the ClientStates of several folds in ``context.state``)::

    "{prefix}arrays/{group}"  ArrayRecord   one per array group, keys = array names
    "{prefix}scalars"         ConfigRecord  the payload's scalars

Arrays travel as ``flwr.app.Array`` (``np.save`` bytes without pickle), so dtype,
shape and every bit survive; an empty group is an empty ArrayRecord and comes back
as an empty group. Scalars are ``int | float | str | bool``; NumPy scalars become
the Python number of the same value. Records outside the prefix (the message
header) are ignored when reading.
"""

from __future__ import annotations

from typing import TypeVar, overload

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedpath.types import ArrayDict, Payload, Scalar

P = TypeVar("P", bound=Payload)

ARRAYS = "arrays/"
SCALARS = "scalars"


class RecordError(TypeError):
    """A payload that cannot travel, or records that are not a payload."""


def payload_to_records(
    payload: Payload, into: RecordDict | None = None, prefix: str = ""
) -> RecordDict:
    """Store ``payload`` as records (in ``into`` if given); returns the RecordDict."""
    out = RecordDict() if into is None else into
    for group, arrays in payload.arrays.items():
        record = ArrayRecord()
        for name, value in arrays.items():
            record[name] = Array(_checked_array(value, group, name))
        out[f"{prefix}{ARRAYS}{group}"] = record
    out[f"{prefix}{SCALARS}"] = ConfigRecord(
        {k: _checked_scalar(v, k) for k, v in payload.scalars.items()}
    )
    return out


@overload
def records_to_payload(records: RecordDict, *, prefix: str = "") -> Payload: ...


@overload
def records_to_payload(records: RecordDict, cls: type[P], prefix: str = "") -> P: ...


def records_to_payload(
    records: RecordDict, cls: type[Payload] = Payload, prefix: str = ""
) -> Payload:
    """The payload stored under ``prefix`` (empty if nothing is stored there)."""
    start = f"{prefix}{ARRAYS}"
    arrays: dict[str, ArrayDict] = {}
    for key, record in records.array_records.items():
        if key.startswith(start):
            arrays[key[len(start) :]] = {
                name: array.numpy() for name, array in record.items()
            }
    scalars: dict[str, Scalar] = {}
    config = records.config_records.get(f"{prefix}{SCALARS}")
    if config is not None:
        for k, v in config.items():
            if not isinstance(v, int | float | str | bool):
                raise RecordError(
                    f"record {prefix}{SCALARS!s}: value of {k!r} is "
                    f"{type(v).__name__}, expected int, float, str or bool"
                )
            scalars[k] = v
    return cls(arrays, scalars)


def header_int(header: ConfigRecord, key: str) -> int:
    """Integer ``key`` of a message header (a ConfigRecord); errors name the key."""
    value = header.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"message header {key!r}: expected an integer, got {value!r}")
    return value


def header_str(header: ConfigRecord, key: str) -> str:
    """String ``key`` of a message header."""
    value = header.get(key)
    if not isinstance(value, str):
        raise RecordError(f"message header {key!r}: expected a string, got {value!r}")
    return value


def header_strs(header: ConfigRecord, key: str) -> list[str]:
    """List-of-strings ``key`` of a message header."""
    value = header.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RecordError(
            f"message header {key!r}: expected a list of strings, got {value!r}"
        )
    return [str(v) for v in value]


def clear_records(records: RecordDict, prefix: str) -> None:
    """Remove every record whose key starts with ``prefix``."""
    for key in [k for k in records if k.startswith(prefix)]:
        del records[key]


def _checked_array(value: object, group: str, name: str) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise RecordError(
            f"payload array {group}/{name} is a {type(value).__name__}, expected a "
            "numpy array"
        )
    if value.dtype.kind not in "biuf":
        raise RecordError(
            f"payload array {group}/{name} has dtype {value.dtype}; payload arrays "
            "must be numeric or boolean"
        )
    return value


def _checked_scalar(value: object, key: str) -> Scalar:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool | int | float | str):
        return value
    raise RecordError(
        f"payload scalar {key!r} is a {type(value).__name__}, expected int, float, "
        "str or bool"
    )
