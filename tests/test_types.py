"""What crosses between an algorithm's halves (:mod:`fedpath.types`)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from fedpath.types import (
    ClientState,
    Payload,
    as_numpy_dict,
    payload_from_tree,
    payload_to_tree,
)


def _payload() -> Payload:
    return Payload(
        {
            "weights": {"w": np.ones((2, 3), np.float32), "b": np.zeros(3, np.float64)},
            "mask": {"m": np.array([True, False])},
        },
        {"n": 4, "name": "x"},
    )


def test_nbytes_group_and_an_independent_copy() -> None:
    p = _payload()
    assert p.nbytes() == 2 * 3 * 4 + 3 * 8 + 2
    assert p.group("mask")["m"].tolist() == [True, False]
    with pytest.raises(KeyError, match=r"no array group 'stats'; present: \['mask'"):
        p.group("stats")
    c = p.copy()
    c.arrays["weights"]["w"][0, 0] = 9.0
    c.scalars["n"] = 5
    assert p.arrays["weights"]["w"][0, 0] == 1.0 and p.scalars["n"] == 4
    assert ClientState.empty() == ClientState({}, {})


def test_as_numpy_dict_copies_tensors_and_arrays() -> None:
    t, a = torch.arange(3.0), np.arange(2)
    out = as_numpy_dict({"t": t, "a": a})
    t[0], a[0] = 7.0, 7
    assert out["t"].tolist() == [0.0, 1.0, 2.0] and out["a"].tolist() == [0, 1]


def test_the_checkpoint_tree_round_trips_through_weights_only_loading() -> None:
    p = _payload()
    buf = io.BytesIO()
    torch.save(payload_to_tree(p), buf)
    buf.seek(0)
    back = payload_from_tree(torch.load(buf, weights_only=True), ClientState)
    assert isinstance(back, ClientState) and back.scalars == p.scalars
    for g, d in p.arrays.items():
        for k, v in d.items():
            assert back.arrays[g][k].dtype == v.dtype
            assert np.array_equal(back.arrays[g][k], v)
    bad = Payload({"ids": {"s": np.array(["a", "b"])}})
    with pytest.raises(TypeError, match="ids/s has dtype <U1"):
        payload_to_tree(bad)
