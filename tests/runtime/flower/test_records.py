"""Payload <-> Flower records: bit-exact through Flower's own wire serialization."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from flwr.supercore.inflatable.inflatable_object import (
    get_all_nested_objects,
)
from flwr.supercore.inflatable.inflatable_utils import (
    inflate_object_from_contents,
)

from fedpath.runtime.flower.records import (
    RecordError,
    clear_records,
    header_int,
    header_str,
    header_strs,
    payload_to_records,
    records_to_payload,
    unpack_records,
)
from fedpath.types import ClientState, Payload

DTYPES = [
    np.bool_,
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]
SHAPES = [(), (0,), (1,), (7,), (2, 3), (0, 3, 4), (2, 1, 3, 5)]


def wire(records: RecordDict) -> RecordDict:
    """Deflate every nested object and inflate them again, as Flower transmits."""
    contents = {oid: o.deflate() for oid, o in get_all_nested_objects(records).items()}
    out = inflate_object_from_contents(records.object_id, contents)
    assert isinstance(out, RecordDict)
    return out


def sample(dtype: type, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype is np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else None
    if info is not None:
        return np.asarray(
            rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
        )
    x: np.ndarray = np.asarray(rng.standard_normal(shape)).astype(dtype)
    if x.size:  # the awkward values must survive too
        flat = x.reshape(-1)
        flat[0] = np.nan
        flat[-1] = -0.0 if x.size > 1 else np.inf
    return x


def assert_same(a: Payload, b: Payload) -> None:
    assert list(a.arrays) == list(b.arrays)
    for g in a.arrays:
        assert list(a.arrays[g]) == list(b.arrays[g]), g
        for k, x in a.arrays[g].items():
            y = b.arrays[g][k]
            assert y.dtype == x.dtype and y.shape == x.shape, (g, k)
            assert y.tobytes() == np.ascontiguousarray(x).tobytes(), (g, k)
    assert a.scalars == b.scalars
    for k, v in a.scalars.items():
        assert type(b.scalars[k]) is type(v), k


def every_dtype_and_shape() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        f"{np.dtype(dt).name}_{'x'.join(map(str, sh)) or 'scalar'}": sample(dt, sh, rng)
        for dt in DTYPES
        for sh in SHAPES
    }


@pytest.mark.parametrize("pack", [False, True])
def test_every_dtype_and_shape_round_trips_bit_exactly(pack: bool) -> None:
    payload = Payload({"weights": every_dtype_and_shape()}, {"round": 3})
    back = records_to_payload(wire(payload_to_records(payload, pack=pack)))
    assert_same(payload, back)


def test_packing_cuts_the_objects_flower_moves_not_the_bytes() -> None:
    arrays = {f"layer{i}.weight": np.full((64, 64), i, np.float32) for i in range(100)}
    payload = Payload({"weights": arrays})
    plain = get_all_nested_objects(payload_to_records(payload))
    packed = get_all_nested_objects(payload_to_records(payload, pack=True))
    assert len(plain) > 200 and len(packed) <= 6  # records, array, chunk(s)
    size = sum(len(o.deflate()) for o in packed.values())
    assert size < 1.01 * sum(len(o.deflate()) for o in plain.values())
    assert size > 100 * 64 * 64 * 4


def test_unpack_records_gives_the_per_array_layout() -> None:
    payload = Payload({"weights": every_dtype_and_shape(), "pool": {}}, {"n": 1})
    records = wire(payload_to_records(payload, pack=True))
    unpack_records(records)
    assert not any("packed/" in k or "index/" in k for k in records)
    assert set(records.array_records) == {"arrays/weights", "arrays/pool"}
    assert_same(payload, records_to_payload(records))


def test_a_broken_pack_index_fails_naming_it() -> None:
    payload = Payload({"weights": {"w": np.zeros((4, 4), np.float32)}})
    records = payload_to_records(payload, pack=True)
    index = records["index/weights"]
    assert isinstance(index, ConfigRecord)
    index["shapes"] = ["40,4"]
    with pytest.raises(RecordError, match="'packed/weights': 'w' runs past the end"):
        records_to_payload(records)
    del records["index/weights"]
    with pytest.raises(RecordError, match="without its index 'index/weights'"):
        records_to_payload(records)


@pytest.mark.parametrize("pack", [False, True])
def test_groups_order_empty_groups_and_views(pack: bool) -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    payload = Payload(
        {
            "weights": {"z.weight": base[:, ::2], "a.bias": np.asfortranarray(base)},
            "pool": {},
            "stats/with/slashes": {"mean": np.zeros((0, 3, 4), np.float32)},
        }
    )
    back = records_to_payload(wire(payload_to_records(payload, pack=pack)))
    assert_same(payload, back)
    assert back.arrays["pool"] == {}
    assert back.arrays["weights"]["a.bias"].flags.writeable  # aggregation may write


def test_scalars_keep_type_and_value() -> None:
    scalars: dict[str, Any] = {
        "int": -(2**62),
        "float": 0.1 + 0.2,
        "tiny": 5e-324,
        "neg_zero": -0.0,
        "str": "hospital_0/c0 ünïcode",
        "empty": "",
        "true": True,
        "false": False,
        "np_float32": np.float32(1.1),
        "np_int": np.int64(7),
        "np_bool": np.bool_(True),
    }
    back = records_to_payload(wire(payload_to_records(Payload({}, scalars)))).scalars
    assert back["int"] == -(2**62) and type(back["int"]) is int
    assert back["float"] == 0.1 + 0.2 and back["tiny"] == 5e-324
    assert str(back["neg_zero"]) == "-0.0"
    assert back["str"] == scalars["str"] and back["empty"] == ""
    assert back["true"] is True and back["false"] is False
    assert back["np_float32"] == float(np.float32(1.1)) and type(back["np_int"]) is int
    assert back["np_bool"] is True


def test_empty_payload_and_prefixes_share_one_recorddict() -> None:
    state = RecordDict()
    one = ClientState({"local": {"bn.weight": np.ones(3, np.float32)}}, {"n": 1})
    two = ClientState({}, {"n": 2})
    payload_to_records(one, state, "state/a/0/")
    payload_to_records(two, state, "state/b/0/")
    state = wire(state)
    got = records_to_payload(state, ClientState, "state/a/0/")
    assert isinstance(got, ClientState)
    assert_same(one, got)
    assert_same(two, records_to_payload(state, ClientState, "state/b/0/"))
    assert_same(Payload(), records_to_payload(state, prefix="state/none/"))
    clear_records(state, "state/a/0/")
    assert_same(Payload(), records_to_payload(state, prefix="state/a/0/"))
    assert records_to_payload(state, prefix="state/b/0/").scalars == {"n": 2}


def test_other_records_are_ignored() -> None:
    records = payload_to_records(Payload({"w": {"x": np.ones(2)}}, {"a": 1}))
    records["fedpath"] = ConfigRecord({"stage": "fit", "sources": ["h0", "h1"]})
    records["foreign"] = ArrayRecord()
    back = records_to_payload(wire(records))
    assert list(back.arrays) == ["w"] and back.scalars == {"a": 1}
    header = wire(records).config_records["fedpath"]
    assert header_str(header, "stage") == "fit"
    assert header_strs(header, "sources") == ["h0", "h1"]
    with pytest.raises(RecordError, match="'stage': expected an integer"):
        header_int(header, "stage")


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (Payload({"g": {"s": np.array(["a"])}}), "g/s has dtype <U1"),
        (Payload({"g": {"c": np.ones(2, np.complex64)}}), "numeric or boolean"),
        (Payload({"g": {"o": np.array([None])}}), "dtype object"),
        (Payload({"g": {"l": [1, 2]}}), "g/l is a list"),  # type: ignore[dict-item]
        (Payload({}, {"x": [1, 2]}), "scalar 'x' is a list"),  # type: ignore[dict-item]
        (Payload({}, {"b": b"raw"}), "scalar 'b' is a bytes"),  # type: ignore[dict-item]
    ],
)
def test_what_cannot_travel_fails_naming_it(payload: Payload, match: str) -> None:
    with pytest.raises(RecordError, match=match):
        payload_to_records(payload)


def test_non_payload_scalars_in_records_fail() -> None:
    records = RecordDict({"scalars": ConfigRecord({"ids": ["a", "b"]})})
    with pytest.raises(RecordError, match="'ids' is list"):
        records_to_payload(records)
