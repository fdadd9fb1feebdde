"""The slide-bag wire format and its helpers: stacking, spaces, pools, guard."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ProtocolError
from fedpath.algorithms.mil_common import (
    arrays_to_bags,
    arrays_to_spaced,
    bags_to_arrays,
    concat_bags,
    guard_scalars,
    spaced_to_arrays,
    stack_pool,
    unstack_pool,
)
from fedpath.mil.bags import SlideBag
from fedpath.types import Payload


def bags(value: float, sizes: tuple[int, ...], dim: int = 2) -> list[SlideBag]:
    return [
        SlideBag(f"s{i}", torch.full((n, dim), value + i), i % 2, "h")
        for i, n in enumerate(sizes)
    ]


def test_wire_format_round_trips() -> None:
    gen = torch.Generator().manual_seed(0)
    bags = [
        SlideBag(f"s{i}", torch.randn(n, 3, generator=gen), i % 2, "h")
        for i, n in enumerate((4, 7, 1))
    ]
    back = arrays_to_bags(bags_to_arrays(bags), "x", "p")
    assert [b.num_patches for b in back] == [4, 7, 1]
    assert [b.label for b in back] == [0, 1, 0]
    for a, b in zip(bags, back, strict=True):
        assert torch.equal(a.features, b.features)


def test_empty_and_inconsistent_stacks() -> None:
    empty = bags_to_arrays([])
    assert empty["features"].shape == (0, 0) and arrays_to_bags(empty, "x", "p") == []
    broken = bags_to_arrays(bags(0.0, (2, 3)))
    broken["sizes"] = np.array([2, 4], np.int64)
    with pytest.raises(ProtocolError, match="sizes sum to 6 but 5 feature rows"):
        arrays_to_bags(broken, "x", "p")
    joined = concat_bags([empty, bags_to_arrays(bags(1.0, (2,))), empty])
    assert joined["sizes"].tolist() == [2]


def test_spaced_groups_round_trip_and_skip_empty_parts() -> None:
    uni, r50 = bags_to_arrays(bags(1.0, (2, 1))), bags_to_arrays(bags(5.0, (3,), 4))
    arrays, scalars = spaced_to_arrays([("uni", uni), ("none", bags_to_arrays([])),
                                        ("r50", r50)])  # fmt: skip
    assert scalars == {"space/0": "uni", "space/1": "r50"}
    assert sorted(arrays) == sorted(
        f"{k}/{i}" for i in (0, 1) for k in ("features", "sizes", "labels")
    )
    parts = arrays_to_spaced(arrays, scalars)
    assert [s for s, _ in parts] == ["uni", "r50"]
    for (_, got), want in zip(parts, (uni, r50), strict=True):
        assert all(np.array_equal(got[k], want[k]) for k in want)


def test_pool_stacks_by_owner_position_and_unstacks() -> None:
    ids = ["a", "b", "c"]
    pool = {
        "c": bags_to_arrays(bags(1.0, (2,))),
        "a": bags_to_arrays(bags(7.0, (1, 3))),
    }
    stacked = stack_pool(pool, ["c", "a"], ids)
    assert stacked["owner"].tolist() == [2, 0, 0]  # per slide, no id in a key
    back = unstack_pool(stacked, ids)
    assert list(back) == ["c", "a"]
    for c, arrays in pool.items():
        assert all(np.array_equal(back[c][k], arrays[k]) for k in arrays)


def test_guard_scalars_are_per_client_and_sorted() -> None:
    replies = {
        "b": Payload({}, {"nn_ratio_min": 2.0, "slides_withheld": 1, "other": 5}),
        "a": Payload({}, {"nn_ratio_median": 3.0}),
    }
    assert list(guard_scalars(replies).items()) == [
        ("nn_ratio_median/a", 3.0),
        ("nn_ratio_min/b", 2.0),
        ("slides_withheld/b", 1),
    ]
