"""The statistics exchange (fedpath.algorithms.stats_exchange): per-client pools
without the receiver's own entries, upload validation, refresh, the client's
upload and fallback, the leakage defences and the payload audit; at the end, the
same protocol through whole in-process runs of FedStain, FedCCRL and FedAlign.

FedStain's own use of the pool (its views, Table V) is in ``test_fedstain.py``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from fedpath.algorithms.base import ProtocolError
from fedpath.algorithms.names import FIT, POOL, STATS, WEIGHTS
from fedpath.algorithms.stats_exchange import (
    StatsExchangeServer,
    audit_payload,
    defend_statistics,
)
from fedpath.config import load_config
from fedpath.stain import image_statistics
from fedpath.types import ClientState, Payload
from tests.algorithms.halves import Halves, halves
from tests.conftest import tiny_overrides
from tests.fixtures import make_run, spy_calls


def exchange(tmp_path: Path, *params: str) -> Halves:
    over = ["algorithm.name=fedccrl", *(f"algorithm.params.{p}" for p in params)]
    return halves(load_config(None, tiny_overrides(tmp_path, *over)))


def upload(n: int, value: float) -> Payload:
    stats = np.full((n, 3, 2), value, np.float32)
    return Payload({STATS: {"mean_std": stats}}, {"num_images": n})


@pytest.fixture
def server(tmp_path: Path) -> StatsExchangeServer:
    s = exchange(tmp_path).server(["a", "b", "c"])
    s.aggregate(STATS, 1, {"a": upload(2, 1.0), "b": upload(3, 2.0), "c": upload(1, 3)})
    return s


def test_each_client_receives_the_others_entries_in_client_order(
    server: StatsExchangeServer,
) -> None:
    for me, expected in {
        "a": [2, 2, 2, 3],
        "b": [1, 1, 3],
        "c": [1, 1, 2, 2, 2],
    }.items():
        pool = server.pool_for(me)["mean_std"]
        assert pool[:, 0, 0].tolist() == expected
    msgs = server.configure(FIT, 1, ["a", "b"])
    assert set(msgs["a"].arrays) == {WEIGHTS, POOL}
    np.testing.assert_array_equal(
        msgs["a"].arrays[POOL]["mean_std"][:, 0, 0], [2] * 3 + [3]
    )
    # the stats stage carries no weights
    assert server.configure(STATS, 2, ["a"])["a"].arrays == {}


def test_a_lone_client_or_empty_uploads_give_an_empty_pool(tmp_path: Path) -> None:
    s = exchange(tmp_path).server(["a", "b"])
    s.aggregate(STATS, 1, {"a": upload(2, 1.0), "b": upload(0, 0.0)})
    assert s.pool_for("a") == {}  # b's upload is empty: nothing to send a
    assert len(s.pool_for("b")["mean_std"]) == 2


def test_shuffled_pool_is_a_seeded_permutation_per_round_and_client(
    tmp_path: Path,
) -> None:
    s = exchange(tmp_path, "shuffle_pool=true").server(["a", "b", "c"])
    ups = {c: upload(6, 0.0) for c in "abc"}
    for i, c in enumerate("abc"):
        ups[c].arrays[STATS]["mean_std"][:, 0, 0] = 10 * i + np.arange(6)
    s.aggregate(STATS, 1, ups)
    order = s.pool_for("a", 1)["mean_std"][:, 0, 0]
    assert sorted(order) == list(range(10, 16)) + list(range(20, 26))
    assert list(order) != sorted(order)
    np.testing.assert_array_equal(s.pool_for("a", 1)["mean_std"][:, 0, 0], order)
    assert not np.array_equal(s.pool_for("a", 2)["mean_std"][:, 0, 0], order)


def test_a_rejected_upload_drops_that_clients_earlier_entries(
    server: StatsExchangeServer,
) -> None:
    bad = upload(2, 0.0)
    bad.arrays[STATS]["mean_std"][0, 0, 0] = np.nan
    logs = server.aggregate(STATS, 2, {"a": upload(4, 1.0), "b": bad})
    assert logs == {"accepted": 1, "rejected": 1, "pool_entries": 4 + 1}
    assert sorted(server.pools) == ["a", "c"]


def test_upload_checks_name_each_problem(server: StatsExchangeServer) -> None:
    ok = np.zeros((2, 3, 2), np.float32)
    assert server.check_upload({"mean_std": ok}) == ""
    assert "no statistics" in server.check_upload({})
    assert "expected ['mean_std']" in server.check_upload({"moments": ok})
    assert "shape" in server.check_upload({"mean_std": np.zeros((2, 3, 4))})
    assert "dtype" in server.check_upload({"mean_std": ok.astype(bool)})
    assert "NaN" in server.check_upload({"mean_std": ok + np.inf})

    @dataclasses.dataclass(frozen=True)
    class TwoArrays:
        upload_ratio: float = 0.1
        refresh: Literal["round", "once"] = "round"
        empty_pool: Literal["own", "error"] = "own"
        bn_buffers: Literal["average", "pooled"] = "average"

        def stat_layout(self) -> dict[str, tuple[int, int]]:
            return {"m": (3, 2), "q": (3, 2)}

    two = StatsExchangeServer(TwoArrays(), server.ctx)
    msg = two.check_upload({"m": ok, "q": ok[:1]})
    assert "different numbers of entries [1, 2]" in msg


def test_refresh_once_collects_in_round_one_and_the_pools_survive_a_resume(
    tmp_path: Path,
) -> None:
    h = exchange(tmp_path, "refresh=once")
    s = h.server(["a", "b"])
    assert s.stages(1) == (STATS, FIT)
    assert s.stages(2) == (STATS, FIT)  # nothing collected yet
    s.aggregate(STATS, 1, {"a": upload(2, 1.0), "b": upload(1, 2.0)})
    assert s.stages(2) == (FIT,)
    twin = h.server(["a", "b"])
    twin.load_state(s.state())
    assert twin.stages(3) == (FIT,)
    np.testing.assert_array_equal(
        twin.pool_for("a")["mean_std"], s.pool_for("a")["mean_std"]
    )
    assert exchange(tmp_path / "r").server(["a"]).stages(5) == (STATS, FIT)


def own_statistics(h: Halves) -> set[bytes]:
    data = h.data()
    imgs = data.load(np.arange(len(data))).float() / 255
    flat = imgs.flatten(2).double()
    ref = np.stack([flat.mean(2).numpy(), flat.std(2, unbiased=False).numpy()], -1)
    assert np.allclose(ref, image_statistics(imgs, "mean_std").numpy(), atol=1e-5)
    return {r.astype(np.float32).round(4).tobytes() for r in ref}


def test_client_uploads_ceil_r_n_of_its_own_images(tmp_path: Path) -> None:
    h = exchange(tmp_path, "upload_ratio=0.3")
    reply = h.client().handle(STATS, Payload({}, {"round": 1}), ClientState())
    stats = reply.group(STATS)["mean_std"]
    n = len(h.data())
    assert len(stats) == math.ceil(0.3 * n) == reply.scalars["num_images"]
    mine = own_statistics(h)
    assert all(r.round(4).tobytes() in mine for r in stats)
    assert len({r.tobytes() for r in stats}) == len(stats)  # distinct images


def test_an_empty_pool_falls_back_to_own_statistics_or_errors(
    tmp_path: Path,
) -> None:
    h = exchange(tmp_path / "own")
    client = h.client()
    client.begin(client.ctx.build_model(), Payload(), ClientState())
    assert client.pool_is_own
    n = len(h.data())
    assert len(client.pool["mean_std"]) == math.ceil(0.1 * n)
    mine = own_statistics(h)
    assert all(r.round(4).tobytes() in mine for r in client.pool["mean_std"])
    strict = exchange(tmp_path / "err", "empty_pool=error").client(client_id="h9")
    with pytest.raises(ProtocolError, match="h9.*empty_pool=own"):
        strict.begin(strict.ctx.build_model(), Payload(), ClientState())


def test_decimals_round_the_upload_and_a_single_entry_gets_no_noise() -> None:
    rng = np.random.default_rng(0)
    one = {"m": np.array([[[0.123456, 0.5]]], np.float32)}
    same = defend_statistics(one, 1.0, None, rng)["m"]
    np.testing.assert_array_equal(same, one["m"])  # no spread to scale noise by
    rounded = defend_statistics(one, 0.0, 2, rng)["m"]
    np.testing.assert_allclose(rounded, [[[0.12, 0.5]]])
    assert rounded.dtype == np.float32


def test_audit_ignores_allowed_groups_and_passes_statistics() -> None:
    image = np.zeros((2, 3, 32, 32), np.float32)
    audit_payload(Payload({WEIGHTS: {"conv": image}}), image_size=32)
    audit_payload(Payload({STATS: {"m": np.zeros((100, 3, 4))}}), image_size=32)
    audit_payload(Payload({"pool": {"x": image}}), 32, allowed=("pool",))
    with pytest.raises(AssertionError, match="'pool' array 'x'"):
        audit_payload(Payload({"pool": {"x": image}}), 32)


def test_audit_catches_image_shaped_arrays() -> None:
    audit_payload(Payload({"stats": {"m": np.zeros((5, 3, 4))}}), image_size=64)
    with pytest.raises(AssertionError, match="looks like image data"):
        audit_payload(Payload({"stats": {"x": np.zeros((2, 3, 64, 64))}}), 64)
    with pytest.raises(AssertionError, match="looks like image data"):
        audit_payload(Payload({"stats": {"x": np.zeros((2, 16, 16, 3))}}), 64)
    with pytest.raises(AssertionError, match="looks like image data"):
        audit_payload(Payload({"x": {"flat": np.zeros((2, 64 * 64 * 3))}}), 64)


def test_statistics_defences_noise_round_and_shuffle() -> None:
    from fedpath.algorithms.stats_exchange import defend_statistics

    rng = np.random.default_rng(0)
    stats = {"moments": rng.normal(size=(200, 3, 4)).astype(np.float32)}
    same = defend_statistics(stats, 0.0, None, np.random.default_rng(1))
    np.testing.assert_array_equal(same["moments"], stats["moments"])
    rounded = defend_statistics(stats, 0.0, 1, np.random.default_rng(1))["moments"]
    np.testing.assert_array_equal(rounded, np.round(stats["moments"], 1))
    noisy = defend_statistics(stats, 0.5, None, np.random.default_rng(1))["moments"]
    # noise of 0.5 x each statistic's spread over the upload
    ratio = (noisy - stats["moments"]).std(0) / stats["moments"].std(0)
    assert np.allclose(ratio, 0.5, atol=0.1)
    assert noisy.dtype == np.float32 and noisy.shape == stats["moments"].shape


# ------------------------------------------------ through whole in-process runs

EXCHANGE = ["fedstain", "fedccrl", "fedalign"]
#: what a FedStain client uploads by default: S_i, K_i (Alg. 2 lines 5-6)
DEFAULT_STATS = "skew_kurt"


@pytest.mark.parametrize("algorithm", EXCHANGE)
def test_pool_excludes_own_entries_and_only_statistics_leave(
    tmp_path: Path, algorithm: str
) -> None:
    run = make_run(tmp_path, f"algorithm.name={algorithm}")
    calls = spy_calls(run)
    run.run()
    uploads = {(c, r): reply for c, s, r, _, reply in calls if s == "stats"}
    for (cid, _rnd), reply in uploads.items():
        n = len(run.by_id[cid].train)
        for arr in reply.arrays["stats"].values():
            assert arr.shape[0] == math.ceil(0.1 * n)  # ceil(r * n_i) images
    for cid, stage, rnd, sent, reply in calls:
        # nothing image-shaped leaves a client, in any stage
        audit_payload(reply, image_size=32)
        if stage != "fit":
            assert "weights" not in reply.arrays
            continue
        pool = sent.arrays["pool"]
        own = uploads[(cid, rnd)].arrays["stats"]
        others = [uploads[(o, rnd)].arrays["stats"] for o in run.by_id if o != cid]
        for key, arr in pool.items():
            expected = np.concatenate([o[key] for o in others])
            assert arr.shape == expected.shape
            # as sets of rows: exactly the others' entries, none of this client's
            rows = {tuple(r.ravel().round(5)) for r in arr}
            assert rows == {tuple(r.ravel().round(5)) for r in expected}
            assert not rows & {tuple(r.ravel().round(5)) for r in own[key]}


def test_refresh_once_runs_the_stats_stage_in_round_one_only(tmp_path: Path) -> None:
    run = make_run(
        tmp_path,
        "algorithm.name=fedstain",
        "algorithm.params.refresh=once",
        "train.rounds=3",
    )
    calls = spy_calls(run)
    run.run()
    assert {r for _, s, r, _, _ in calls if s == "stats"} == {1}
    assert {r for _, s, r, _, _ in calls if s == "fit"} == {1, 2, 3}
    # the pool survives to later rounds
    assert all(
        len(sent.arrays["pool"][DEFAULT_STATS]) > 0
        for _, s, _, sent, _ in calls
        if s == "fit"
    )


@pytest.mark.parametrize("bad", ["nan", "shape", "keys", "empty"])
def test_bad_uploads_are_rejected_by_name_and_the_round_goes_on(
    tmp_path: Path, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    run = make_run(tmp_path, "algorithm.name=fedstain", "train.rounds=1")
    inner = run._call_client

    def corrupt(cid: str, stage: str, rnd: int, payload: Payload) -> Payload:
        reply = inner(cid, stage, rnd, payload)
        if stage == "stats" and cid == "hospital_1/c1":
            m = reply.arrays["stats"][DEFAULT_STATS]
            if bad == "nan":
                m[0, 0, 0] = np.nan
            elif bad == "shape":
                reply.arrays["stats"][DEFAULT_STATS] = m[:, :, :1]
            elif bad == "keys":
                reply.arrays["stats"] = {"pixels": m}
            else:
                reply.arrays.pop("stats")
        return reply

    run._call_client = corrupt  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="fedpath"):
        record = run.run()
    assert "rejected statistics of client hospital_1/c1" in caplog.text
    assert isinstance(run.server, StatsExchangeServer)
    assert set(run.server.pools) == {"hospital_1/c0", "hospital_2/c0", "hospital_2/c1"}
    assert 0 <= record["evaluation"]["target"]["accuracy"] <= 1
    rounds = (tmp_path / "run" / "results.jsonl").read_text()
    assert '"stats/rejected": 1' in rounds


def test_empty_pool_falls_back_to_own_statistics_or_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 2 hospitals, 1 client per hospital: after holding one out, one client is left
    one = (
        "data.params.num_hospitals=2",
        "partition.clients_per_domain=1",
        "train.rounds=1",
        "algorithm.name=fedstain",
    )
    run = make_run(tmp_path / "own", *one)
    with caplog.at_level(logging.WARNING, logger="fedpath"):
        run.run()
    assert "received an empty statistics pool" in caplog.text
    strict = make_run(tmp_path / "err", *one, "algorithm.params.empty_pool=error")
    with pytest.raises(ProtocolError, match="pool it received is empty"):
        strict.run()


def test_defended_uploads_and_a_shuffled_pool_through_a_run(tmp_path: Path) -> None:
    plain = make_run(tmp_path / "a", "algorithm.name=fedstain", "train.rounds=1")
    calls_a = spy_calls(plain)
    plain.run()
    defended = make_run(
        tmp_path / "b",
        "algorithm.name=fedstain",
        "train.rounds=1",
        "algorithm.params.stats_noise=0.5",
        "algorithm.params.shuffle_pool=true",
    )
    calls_b = spy_calls(defended)
    defended.run()

    def uploads(calls):  # type: ignore[no-untyped-def]
        return {
            c: r.arrays["stats"][DEFAULT_STATS]
            for c, s, _, _, r in calls
            if s == "stats"
        }

    raw, noisy = uploads(calls_a), uploads(calls_b)
    assert raw.keys() == noisy.keys()
    for cid in raw:  # same images drawn, the values noised
        assert raw[cid].shape == noisy[cid].shape
        assert not np.allclose(raw[cid], noisy[cid])
    # the pool holds the others' (noised) entries, in a shuffled order
    cid, _, _, sent, _ = next(c for c in calls_b if c[1] == "fit")
    others = np.concatenate([noisy[o] for o in sorted(noisy) if o != cid])
    pool = sent.arrays["pool"][DEFAULT_STATS]
    assert not np.array_equal(pool, others)
    order = np.lexsort(pool.reshape(len(pool), -1).T)
    ref = np.lexsort(others.reshape(len(others), -1).T)
    np.testing.assert_array_equal(pool[order], others[ref])
