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

Packed layout (``pack=True``, what the stage messages use)::

    "{prefix}packed/{group}"  ArrayRecord   one uint8 Array: the group's arrays'
                                            raw bytes, one after the other
    "{prefix}index/{group}"   ConfigRecord  names, dtypes ("<f4"...), shapes
                                            ("64,3,7,7"), byte offsets

Flower moves every Array (and every 5 MiB chunk of one) as a separate object with
its own request and hash at each hop; a ResNet-18 state is 122 arrays and about
200 objects one by one, packed it is 10. The bytes are the same, so a packed group
unpacks bit for bit. Reading accepts both layouts.
"""

from __future__ import annotations

from typing import TypeVar, overload

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedpath.errors import FedpathError
from fedpath.types import ArrayDict, Payload, Scalar

P = TypeVar("P", bound=Payload)

ARRAYS = "arrays/"
PACKED = "packed/"
INDEX = "index/"
SCALARS = "scalars"


class RecordError(FedpathError, TypeError):
    """A payload that cannot travel, or records that are not a payload."""


def payload_to_records(
    payload: Payload,
    into: RecordDict | None = None,
    prefix: str = "",
    pack: bool = False,
) -> RecordDict:
    """Store ``payload`` as records (in ``into`` if given); returns the RecordDict.

    ``pack``: each non-empty array group as one byte buffer (module docstring).
    """
    out = RecordDict() if into is None else into
    for group, arrays in payload.arrays.items():
        checked = {n: _checked_array(v, group, n) for n, v in arrays.items()}
        if pack and checked:
            _pack(checked, out, f"{prefix}{PACKED}{group}", f"{prefix}{INDEX}{group}")
            continue
        record = ArrayRecord()
        for name, value in checked.items():
            record[name] = Array(value)
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
    start, packed = f"{prefix}{ARRAYS}", f"{prefix}{PACKED}"
    arrays: dict[str, ArrayDict] = {}
    for key, record in records.array_records.items():
        if key.startswith(start):
            arrays[key[len(start) :]] = {
                name: array.numpy() for name, array in record.items()
            }
        elif key.startswith(packed):
            group = key[len(packed) :]
            index_key = f"{prefix}{INDEX}{group}"
            index = records.config_records.get(index_key)
            arrays[group] = _unpack(record, index, key, index_key)
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


def _pack(arrays: ArrayDict, out: RecordDict, key: str, index_key: str) -> None:
    names, dtypes, shapes, offsets = [], [], [], []
    offset = 0
    for name, value in arrays.items():
        names.append(name)
        dtypes.append(value.dtype.str)
        shapes.append(",".join(str(d) for d in value.shape))
        offsets.append(offset)
        offset += value.nbytes
    buffer = np.empty(offset, np.uint8)
    for start, value in zip(offsets, arrays.values(), strict=True):
        flat = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
        buffer[start : start + flat.size] = flat
    out[key] = ArrayRecord({"bytes": Array(buffer)})
    out[index_key] = ConfigRecord(
        {"names": names, "dtypes": dtypes, "shapes": shapes, "offsets": offsets}
    )


def _unpack(record: object, index: object, key: str, index_key: str) -> ArrayDict:
    if (
        not isinstance(record, ArrayRecord)
        or not isinstance(index, ConfigRecord)
        or "bytes" not in record
    ):
        raise RecordError(f"packed record {key!r} without its index {index_key!r}")
    buffer = record["bytes"].numpy()
    fields = [index.get(k) for k in ("names", "dtypes", "shapes", "offsets")]
    lists = [f for f in fields if isinstance(f, list)]
    if len(lists) != 4 or len({len(f) for f in lists}) != 1:
        raise RecordError(f"index {index_key!r}: names, dtypes, shapes and offsets")
    names, dtypes, shapes, offsets = lists
    out: ArrayDict = {}
    for name, dtype, shape, offset in zip(names, dtypes, shapes, offsets, strict=True):
        dims = tuple(int(d) for d in str(shape).split(",") if d)
        dt = np.dtype(str(dtype))
        size = dt.itemsize * int(np.prod(dims, dtype=np.int64))
        start = int(str(offset))
        chunk = buffer[start : start + size]
        if chunk.size != size:
            raise RecordError(f"packed record {key!r}: {name!r} runs past the end")
        out[str(name)] = chunk.view(dt).reshape(dims).copy()
    return out


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


def unpack_records(records: RecordDict) -> None:
    """Rewrite every packed group of ``records`` in the per-array layout, in place.

    For code that works on the arrays by name (Flower's ``LocalDpMod``). The order
    of the records is kept.
    """
    items = dict(records.items())
    if not any(PACKED in k for k in items):
        return
    for key in items:
        del records[key]
    for key, record in items.items():
        if PACKED in key:
            prefix, group = key.rsplit(PACKED, 1)
            index_key = f"{prefix}{INDEX}{group}"
            arrays = _unpack(record, items.get(index_key), key, index_key)
            records[f"{prefix}{ARRAYS}{group}"] = ArrayRecord(
                {name: Array(value) for name, value in arrays.items()}
            )
        elif not (INDEX in key and key.replace(INDEX, PACKED, 1) in items):
            records[key] = record


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
