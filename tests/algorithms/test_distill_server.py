"""The distill-then-fit server shared by FedHD, FedDGM-approx and DESA: the round
shape, the space check, the pool of synthetic slides and its checkpoint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ProtocolError, ServerContext
from fedpath.algorithms.desa import DESAServer
from fedpath.algorithms.distill_server import (
    DistillFitServer,
    PoolServer,
    SyntheticPool,
)
from fedpath.algorithms.feddgm import FedDGMServer
from fedpath.algorithms.fedhd import FedHDServer
from fedpath.algorithms.mil_common import arrays_to_spaced, bags_to_arrays
from fedpath.config import ConfigError
from fedpath.mil.bags import SlideBag
from fedpath.params.mil_baselines import DESAParams, FedDGMParams
from fedpath.params.mil_train import FedHDParams
from fedpath.types import Payload, Scalar

IDS = ["a", "b", "c"]


def context(ids: Sequence[str] = IDS) -> ServerContext:
    """A server context without a task: these servers never build a model."""
    return ServerContext({}, list(ids), {c: c for c in ids}, 0, None)  # type: ignore[arg-type]


def distill_replies(
    spec: Mapping[str, tuple[str, int, float, int]],
) -> dict[str, Payload]:
    """``client -> (space, dim, value, slides)``: that many 3-token slides of
    ``value`` + slide index, labels alternating, with a token guard report."""
    out = {}
    for cid, (space, dim, value, n) in spec.items():
        bags = [
            SlideBag(f"{cid}{i}", torch.full((3, dim), value + i), i % 2, cid)
            for i in range(n)
        ]
        out[cid] = Payload(
            {"synthetic": bags_to_arrays(bags)},
            {
                "embedding_space": space,
                "dim": dim,
                "num_slides": n,
                "nn_ratio_min": value,
                "num_examples": 1,
            },
        )
    return out


class Recorder(DistillFitServer[FedHDParams]):
    """A minimal method: records what the base hands to its hooks."""

    method, title, why = "toy", "Toy", "toys do not mix"

    def __init__(self, params: FedHDParams, ctx: ServerContext) -> None:
        super().__init__(params, ctx)
        self.calls: list[tuple[str, object]] = []

    def configure_fit(self, rnd: int, clients: Sequence[str]) -> dict[str, Payload]:
        self.calls.append(("configure_fit", rnd))
        return {c: Payload({}, {"round": rnd, "fit": 1}) for c in clients}

    def accept_synthetic(
        self, replies: Mapping[str, Payload], spaces: Mapping[str, str]
    ) -> dict[str, Scalar]:
        self.calls.append(("accept_synthetic", dict(spaces)))
        return {"kept": len(replies)}

    def accept_fit(self, replies: Mapping[str, Payload]) -> None:
        self.calls.append(("accept_fit", sorted(replies)))

    def state(self) -> Payload:
        return Payload()

    def load_state(self, state: Payload) -> None:
        pass


def test_round_shape_and_stage_checks() -> None:
    server = Recorder(FedHDParams(), context())
    assert tuple(server.stages(1)) == ("distill", "fit")
    assert tuple(server.stages(2)) == ("fit",)
    sent = server.configure("distill", 1, ["a", "b"])
    assert {c: p.scalars for c, p in sent.items()} == {
        "a": {"round": 1},
        "b": {"round": 1},
    }
    assert all(not p.arrays for p in sent.values())
    assert server.configure("fit", 3, ["a"])["a"].scalars == {"round": 3, "fit": 1}
    assert server.calls == [("configure_fit", 3)]
    with pytest.raises(ProtocolError, match="toy has no stage 'stats'"):
        server.configure("stats", 1, ["a"])


def test_aggregate_checks_spaces_and_adds_the_guard_figures() -> None:
    server = Recorder(FedHDParams(spaces="same"), context())  # adapt: FedHD's default
    replies = distill_replies({"a": ("uni", 4, 1.0, 1), "b": ("uni", 4, 2.0, 2)})
    out = server.aggregate("distill", 1, replies)
    assert out == {"kept": 2, "nn_ratio_min/a": 1.0, "nn_ratio_min/b": 2.0}
    assert server.calls == [("accept_synthetic", {"a": "uni", "b": "uni"})]
    mixed = distill_replies({"a": ("uni", 4, 1.0, 1), "b": ("r50", 6, 2.0, 1)})
    with pytest.raises(ConfigError, match="Toy clients .*; toys do not mix"):
        server.aggregate("distill", 1, mixed)
    fit = {
        "a": Payload({}, {"num_examples": 1, "loss": 1.0}),
        "b": Payload({}, {"num_examples": 3, "loss": 3.0}),
    }
    out = server.aggregate("fit", 1, fit)
    assert out["loss"] == pytest.approx(2.5)  # example-weighted
    assert server.calls[-1] == ("accept_fit", ["a", "b"])


def test_pool_sends_each_client_only_the_others_slides() -> None:
    pool = SyntheticPool(IDS)
    replies = distill_replies(
        {"a": ("uni", 2, 0.0, 1), "b": ("uni", 2, 10.0, 2), "c": ("uni", 2, 20.0, 1)}
    )
    pool.accept(replies, dict.fromkeys(IDS, "uni"))
    assert pool.num_slides() == 4
    got = pool.received("b", adapt=False, rnd=1)
    assert got.scalars == {"round": 1}
    others = got.arrays["received"]
    assert others["sizes"].tolist() == [3, 3]
    assert sorted(set(others["features"][:, 0].tolist())) == [0.0, 20.0]


def test_pool_groups_by_space_and_survives_a_checkpoint() -> None:
    pool = SyntheticPool(IDS)
    spec = {"a": ("uni", 2, 0.0, 1), "b": ("uni", 2, 10.0, 2), "c": ("r50", 5, 20.0, 1)}
    pool.accept(distill_replies(spec), {c: s for c, (s, *_) in spec.items()})
    got = pool.received("a", adapt=True, rnd=1)
    parts = dict(arrays_to_spaced(got.arrays["received"], got.scalars))
    assert sorted(parts) == ["r50", "uni"]
    assert parts["uni"]["sizes"].tolist() == [3, 3]  # b's two slides
    assert parts["r50"]["features"].shape == (3, 5)  # c's slide
    one = SyntheticPool(IDS)  # one stack: one space, one dimension
    same = {c: ("uni", 2, v, n) for c, (_, _, v, n) in spec.items()}
    one.accept(distill_replies(same), dict.fromkeys(IDS, "uni"))
    for src, adapt in ((one, False), (pool, True)):
        again = SyntheticPool(IDS)
        again.load_state(src.state(adapt))
        assert again.spaces == (src.spaces if adapt else {})
        for c in IDS:
            for k in ("features", "sizes", "labels"):
                assert np.array_equal(again.slides[c][k], src.slides[c][k])
    assert SyntheticPool(IDS).state(adapt=False).arrays == {}


def test_pool_server_sends_slides_in_round_one_only() -> None:
    servers: list[PoolServer[Any]] = [
        FedHDServer(FedHDParams(spaces="same"), context()),
        FedDGMServer(FedDGMParams(), context()),
    ]
    for server in servers:
        spec = {"a": ("uni", 2, 0.0, 1), "b": ("uni", 2, 10.0, 2)}
        out = server.aggregate("distill", 1, distill_replies(spec))
        assert out["synthetic_slides"] == 3
        assert out["synthetic_bytes"] == sum(
            r.nbytes() for r in distill_replies(spec).values()
        )
        first = server.configure("fit", 1, ["a", "b"])
        assert first["a"].arrays["received"]["sizes"].tolist() == [3, 3]
        later = server.configure("fit", 2, ["a", "b"])
        assert later["a"].arrays == {} and later["a"].scalars == {"round": 2}
        copy = type(server)(server.params, context())
        copy.load_state(server.state())
        again = copy.configure("fit", 1, ["a"])["a"].arrays["received"]
        for k, v in first["a"].arrays["received"].items():
            assert np.array_equal(again[k], v)


def test_the_methods_name_themselves_in_errors() -> None:
    mixed = distill_replies({"a": ("uni", 4, 1.0, 1), "b": ("r50", 6, 2.0, 1)})
    servers: list[tuple[DistillFitServer[Any], str, str]] = [
        (FedHDServer(FedHDParams(spaces="same"), context()), "FedHD", "FedHD clients"),
        (FedDGMServer(FedDGMParams(), context()), "feddgm", "FedDGM clients"),
        (DESAServer(DESAParams(), context()), "desa", "DESA clients"),
    ]
    for server, method, title in servers:
        with pytest.raises(ProtocolError, match=f"^{method} has no stage 'x'"):
            server.configure("x", 1, ["a"])
        with pytest.raises(ConfigError, match=title):
            server.aggregate("distill", 1, mixed)
