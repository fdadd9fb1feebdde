"""Clients in different embedding spaces: the space check, what a client keeps of
what arrived, and its input adapters (kept in its state, never deployed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ClientContext, derive_seed
from fedpath.algorithms.mil_common import bags_to_arrays, spaced_to_arrays
from fedpath.algorithms.mil_spaces import (
    ADAPTERS,
    check_spaces,
    keep_adapters,
    keep_spaced,
    spaced_bags,
    with_adapters,
)
from fedpath.config import ConfigError
from fedpath.mil.adapters import AdaptedMIL
from fedpath.mil.bags import SlideBag
from fedpath.mil.models import build_mil_model
from fedpath.params.mil_train import SpacesParams
from fedpath.types import ClientState, Payload


def declared(**spaces: tuple[str, int]) -> dict[str, Payload]:
    return {
        c: Payload({}, {"embedding_space": s, "dim": d}) for c, (s, d) in spaces.items()
    }


def stub_context(space: str = "uni", dim: int = 4) -> ClientContext:
    """The parts of a client context these helpers read: its space and seeds."""
    bags = SimpleNamespace(client_space=lambda client, domain: (space, dim))
    ctx: Any = SimpleNamespace(
        client_id="a",
        domain="h",
        task=SimpleNamespace(bags=lambda: bags),
        seed_for=lambda *tags: derive_seed(0, 1, "a", *tags),
        device="cpu",
    )
    return ctx


def slides(value: float, n: int, dim: int) -> list[SlideBag]:
    return [SlideBag(f"s{i}", torch.full((2, dim), value), i, "x") for i in range(n)]


def test_check_spaces_names_the_problem_and_the_option() -> None:
    same = declared(a=("uni", 4), b=("uni", 4))
    assert check_spaces(same, "M", "why", adapt=False) == {"a": "uni", "b": "uni"}
    two = declared(a=("uni", 4), b=("r50", 6))
    with pytest.raises(ConfigError, match="M clients .*different embedding spaces; "
                       "they differ.*spaces: adapt.*b: r50 \\(D=6\\)"):  # fmt: skip
        check_spaces(two, "M", "they differ", adapt=False)
    assert check_spaces(two, "M", "why", adapt=True) == {"a": "uni", "b": "r50"}
    clash = declared(a=("uni", 4), b=("uni", 6))
    with pytest.raises(ConfigError, match="one embedding space with different dim"):
        check_spaces(clash, "M", "why", adapt=True)


def test_kept_slides_come_back_tagged_with_their_foreign_space() -> None:
    ctx, state = stub_context("uni", 4), ClientState()
    assert spaced_bags(ctx, state, "received", "others", "p") == []
    arrays, names = spaced_to_arrays(
        [("r50", bags_to_arrays(slides(1.0, 2, 6))),
         ("uni", bags_to_arrays(slides(2.0, 1, 4)))]
    )  # fmt: skip
    keep_spaced(Payload({"received": arrays}, {"round": 1, **names}), state, "received")
    assert state.scalars == names  # the space names, not the round
    got = spaced_bags(ctx, state, "received", "others", "p")
    assert [(b.space, b.dim, b.slide_id) for b in got] == [
        ("r50", 6, "p0-0"),
        ("r50", 6, "p0-1"),
        (None, 4, "p1-0"),  # the receiver's own space: no adapter
    ]
    one = ClientState()
    keep_spaced(Payload({"g": bags_to_arrays(slides(3.0, 2, 4))}), one, "g", "kept")
    assert [b.space for b in spaced_bags(ctx, one, "kept", "d", "q")] == [None, None]
    keep_spaced(Payload(), one, "absent")
    assert sorted(one.arrays) == ["kept"]


def test_adapters_wrap_the_model_and_live_in_the_client_state() -> None:
    ctx, state = stub_context("uni", 4), ClientState()
    model = build_mil_model("abmil", 4, 2, {"hidden": 8, "attn_dim": 4})
    p = SpacesParams()
    own = slides(1.0, 2, 4)
    assert with_adapters(ctx, p, model, own, state) is model
    assert keep_adapters(state, model) == {} and ADAPTERS not in state.arrays
    foreign = [*own, SlideBag("f", torch.ones(2, 6), 0, "x", space="r50")]
    net = with_adapters(ctx, p, model, foreign, state)
    assert isinstance(net, AdaptedMIL) and net.model is model
    assert keep_adapters(state, net) == {"adapted_spaces": 1}
    assert not any(k.startswith("adapters") for k in model.state_dict())
    with torch.no_grad():  # a later round starts from the kept adapters
        for w in net.adapters.parameters():
            w.add_(1.0)
    keep_adapters(state, net)
    again = with_adapters(ctx, p, model, foreign, state)
    assert isinstance(again, AdaptedMIL)
    for k, v in again.adapters.state_dict().items():
        assert np.array_equal(v.numpy(), state.arrays[ADAPTERS][k])
