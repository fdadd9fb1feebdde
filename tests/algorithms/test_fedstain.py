"""FedStain and its baselines: the statistics exchange, the views, the payload audit."""

from __future__ import annotations

import dataclasses
import importlib
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.algorithms.base import ProtocolError
from fedpath.algorithms.fedalign import selective_transfer
from fedpath.algorithms.fedccrl import FedCCRLClient
from fedpath.algorithms.fedstain import FedStainClient
from fedpath.algorithms.stats_exchange import StatsExchangeServer, audit_payload
from fedpath.config import ConfigError, load_config
from fedpath.data.partition import lodo_plan
from fedpath.models.backbones import FedModel
from fedpath.params.algorithms import FedAlignParams, FedCCRLParams
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun
from fedpath.runtime.suite import load_suite
from fedpath.stain import STAT_NAMES, channel_moments, to_space
from fedpath.types import Payload
from tests.conftest import tiny_overrides

EXCHANGE = ["fedstain", "fedccrl", "fedalign"]
#: what a FedStain client uploads by default: S_i, K_i (Alg. 2 lines 5-6)
DEFAULT_STATS = "skew_kurt"
#: FedStain Table V as shipped: one row per exchanged statistic setting
TABLE_V = (
    Path(__file__).parents[2] / "configs" / "ablations" / "fedstain_statistics.yaml"
)
TABLE_V_ROWS = [cfg.label for cfg in load_suite(TABLE_V)[1]]


def make_run(tmp_path: Path, *extra: str, target: str = "hospital_0") -> InProcessRun:
    cfg = load_config(None, tiny_overrides(tmp_path, *extra))
    ds = load_dataset(cfg.data)
    return InProcessRun(cfg, ds, lodo_plan(ds, [target])[0], 0, tmp_path / "run")


def spy_calls(run: InProcessRun) -> list[tuple[str, str, int, Payload, Payload]]:
    calls: list[tuple[str, str, int, Payload, Payload]] = []
    inner = run._call_client

    def wrapped(cid: str, stage: str, rnd: int, payload: Payload) -> Payload:
        reply = inner(cid, stage, rnd, payload)
        calls.append((cid, stage, rnd, payload.copy(), reply.copy()))
        return reply

    run._call_client = wrapped  # type: ignore[method-assign]
    return calls


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


def test_audit_catches_image_shaped_arrays() -> None:
    audit_payload(Payload({"stats": {"m": np.zeros((5, 3, 4))}}), image_size=64)
    with pytest.raises(AssertionError, match="looks like image data"):
        audit_payload(Payload({"stats": {"x": np.zeros((2, 3, 64, 64))}}), 64)
    with pytest.raises(AssertionError, match="looks like image data"):
        audit_payload(Payload({"stats": {"x": np.zeros((2, 16, 16, 3))}}), 64)
    with pytest.raises(AssertionError, match="looks like image data"):
        audit_payload(Payload({"x": {"flat": np.zeros((2, 64 * 64 * 3))}}), 64)


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


@pytest.mark.parametrize(
    ("switches", "versions"),
    [
        ((), 4),
        (("algorithm.params.randstain=false",), 3),
        (("algorithm.params.augmix=false", "algorithm.params.mixstyle=false"), 4),
    ],
)
def test_fedstain_views_and_loss_terms(
    tmp_path: Path, switches: tuple[str, ...], versions: int
) -> None:
    run = make_run(tmp_path, "algorithm.name=fedstain", *switches)
    calls = spy_calls(run)
    run.run()
    ctx_run = run.clients[0]
    client = run.client_half(ctx_run.client_id, 1)
    assert isinstance(client, FedStainClient)
    ctx = client.ctx
    fit = next(sent for c, s, _, sent, _ in calls if s == "fit" and c == ctx.client_id)
    model = run.task.build_model()
    client.begin(model, fit, run.states[ctx.client_id])
    x = ctx_run.train.load(np.arange(8)).float() / 255
    views = client.views(x)
    assert len(views) == versions
    for v in views:
        assert v.shape == x.shape and bool(torch.isfinite(v).all())
        assert float(v.min()) >= 0 and float(v.max()) <= 1
    if not switches:
        assert not torch.equal(views[1], x) and not torch.equal(views[2], views[3])
    out = client.loss(model, x, torch.from_numpy(ctx_run.train.labels[:8]))
    assert {"loss", "cls", "ra", "js"} <= set(out)
    assert float(out["ra"]) > 0 and float(out["js"]) >= 0


def test_fedstain_params_validated() -> None:
    with pytest.raises(ConfigError, match="'algorithm.params.upload_ratio'"):
        load_config(
            None, ["algorithm.name=fedstain", "algorithm.params.upload_ratio=2"]
        )
    with pytest.raises(ConfigError, match="'algorithm.params.statistics'"):
        load_config(
            None,
            [
                "algorithm.name=fedstain",
                "algorithm.params.mixstyle_mode=paper",
                "algorithm.params.statistics=mean_iqr",
            ],
        )
    with pytest.raises(
        ConfigError, match="'algorithm.params.statistics': expected one"
    ):
        load_config(
            None, ["algorithm.name=fedstain", "algorithm.params.statistics=median"]
        )


def test_selective_transfer_is_cluster_proportional() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(0, 0.01, (90, 3, 2))
    b = rng.normal(5, 0.01, (10, 3, 2))
    stats = np.concatenate([a, b])
    keep = selective_transfer(stats, 2, 0.5, np.random.default_rng(1))
    assert len(set(keep)) == len(keep)
    in_b = np.sum(keep >= 90)
    assert 3 <= in_b <= 7 and 40 <= np.sum(keep < 90) <= 50  # ~45 / ~5 of 50
    # one entry still works (k clipped to the pool size)
    assert list(selective_transfer(stats[:1], 7, 0.5, np.random.default_rng(0))) == [0]


def test_strap_stylizes_colour_not_layout() -> None:
    from fedpath.algorithms.strap import rand_conv, random_styles, reinhard
    from fedpath.stain import to_space

    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, 32, 32) * 0.5 + 0.25
    styles = random_styles(6, g)
    y = reinhard(x, styles)
    lab = to_space(y, "lab")
    # the LAB mean moves to the drawn style (up to clamping at the gamut)
    err = (lab.mean((2, 3)) - styles[..., 0]).abs()
    assert float(err[:, 0].median()) < 8.0
    # layout kept: the L channel is still strongly correlated with the input's
    lx = to_space(x, "lab")[:, 0].flatten(1)
    ly = lab[:, 0].flatten(1)
    corr = torch.nn.functional.cosine_similarity(
        lx - lx.mean(1, keepdim=True), ly - ly.mean(1, keepdim=True)
    )
    assert float(corr.min()) > 0.5
    t = rand_conv(x, g, "full")
    assert t.shape == x.shape and bool(torch.isfinite(t).all())
    torch.testing.assert_close(t.mean((2, 3)), x.mean((2, 3)), atol=0.05, rtol=0)


def test_fedstain_loss_is_eq6_cls_plus_alpha_ra_plus_beta_js(tmp_path: Path) -> None:
    """FedStain Eq. 6: L = L_CLS + alpha L_RA + beta L_JS, on the same four views."""
    import dataclasses

    run = make_run(tmp_path, "algorithm.name=fedstain", "train.rounds=1")
    run.run()
    base = run.client_half(run.clients[0].client_id, 1)
    assert isinstance(base, FedStainClient)
    data = run.clients[0].train
    x = data.load(np.arange(8)).float() / 255
    y = torch.from_numpy(data.labels[:8])
    model = run.task.build_model()

    def loss_at(alpha: float, beta: float) -> dict[str, torch.Tensor]:
        client = FedStainClient(
            dataclasses.replace(base.params, alpha=alpha, beta=beta), base.ctx
        )
        client.begin(model, Payload(), run.states[base.ctx.client_id])
        torch.manual_seed(0)  # the same views (RandStain/AugMix draws) every call
        return client.loss(model, x, y)

    plain = loss_at(0.0, 0.0)
    assert float(plain["loss"].detach()) == pytest.approx(float(plain["cls"]))
    both = loss_at(0.3, 0.7)
    assert float(both["cls"]) == pytest.approx(float(plain["cls"]), rel=1e-6)
    assert float(both["ra"]) > 0 and float(both["js"]) > 0
    expected = float(both["cls"]) + 0.3 * float(both["ra"]) + 0.7 * float(both["js"])
    assert float(both["loss"].detach()) == pytest.approx(expected, rel=1e-6)
    only_js = loss_at(0.0, 0.7)  # alpha = 0 drops L_RA entirely
    assert float(only_js["ra"]) == 0.0
    assert float(only_js["loss"].detach()) == pytest.approx(
        float(only_js["cls"]) + 0.7 * float(only_js["js"]), rel=1e-6
    )


def test_forward_views_is_one_pass_split_by_version() -> None:
    from fedpath.algorithms.views import forward_views

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Linear(12, 5)
            self.classifier = torch.nn.Linear(5, 3)

        def encode(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x.flatten(1))

    torch.manual_seed(0)
    net = Net()
    views = [torch.rand(4, 3, 2, 2) for _ in range(3)]
    out = forward_views(net, views)
    assert out.features.shape == (12, 5) and out.logits.shape == (12, 3)
    assert len(out.zs) == len(out.ls) == 3
    for v, z, lg in zip(views, out.zs, out.ls, strict=True):
        torch.testing.assert_close(z, net.encode(v))
        torch.testing.assert_close(lg, net.classifier(z))
    assert torch.equal(torch.cat(out.zs), out.features)


@pytest.mark.parametrize("algorithm", ["fedccrl", "fedalign"])
def test_fedccrl_and_fedalign_losses_follow_their_formulas(
    tmp_path: Path, algorithm: str
) -> None:
    """L = CE(x) + CE(v1) + CE(v2) + l1 RA + l2 JS (+ l3 MSE for FedAlign)."""
    from fedpath.algorithms.base import ALGORITHMS
    from fedpath.config import resolve_params
    from fedpath.types import ClientState
    from tests.fixtures import make_client_context

    over = tiny_overrides(
        tmp_path, f"algorithm.name={algorithm}", "algorithm.params.augmix=geometric"
    )
    cfg = load_config(None, over)
    schema = ALGORITHMS.params(algorithm)
    assert schema is not None and issubclass(schema, FedCCRLParams)
    params = resolve_params(schema, cfg.algorithm.params, "algorithm.params")
    ctx = make_client_context(cfg=cfg)
    client = ALGORITHMS.get(algorithm).client(params, ctx)
    assert isinstance(client, FedCCRLClient)  # FedAlign's client is one too
    model = ctx.task.images().build_model()
    client.begin(model, Payload(), ClientState())
    x = ctx.data.load(np.arange(8)).float() / 255
    y = torch.from_numpy(ctx.data.labels[:8])
    out = client.loss(model, x, y)
    expected = out["cls"] + params.lambda1 * out["ra"] + params.lambda2 * out["js"]
    if algorithm == "fedalign":
        assert isinstance(params, FedAlignParams)
        expected = expected + params.lambda3 * out["mse"]
        assert float(out["mse"]) > 0
    else:
        assert "mse" not in out
    assert float(out["ra"]) > 0 and float(out["js"]) >= 0
    torch.testing.assert_close(out["loss"].detach(), expected, rtol=1e-6, atol=0)
    # CE is summed over the three versions, as the released code does (eval
    # mode: BatchNorm statistics would otherwise cover the three versions)
    model.eval()
    client.generator.manual_seed(3)
    views = client.views(x)
    client.generator.manual_seed(3)
    ce = sum((ctx.cross_entropy(model(v), y) for v in views), torch.zeros(()))
    client.generator.manual_seed(3)
    torch.testing.assert_close(client.loss(model, x, y)["cls"], ce.detach())


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


# ----------------------------------------------------------------------------------
# Table V: each row exchanges and uses only its statistic pair


def table_v_run(tmp_path: Path, row: str) -> tuple[InProcessRun, str]:
    """One tiny round of a Table V row as the suite file builds it, and the
    statistic setting that row selects."""
    _, (cfg,) = load_suite(
        TABLE_V, tiny_overrides(tmp_path, "train.rounds=1"), only=[row]
    )
    ds = load_dataset(cfg.data)
    run = InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_0"])[0], 0, tmp_path / row)
    return run, str(cfg.algorithm.params["statistics"])


@pytest.mark.parametrize("row", TABLE_V_ROWS)
def test_table_v_rows_send_and_receive_only_their_statistics(
    tmp_path: Path, row: str
) -> None:
    run, statistics = table_v_run(tmp_path, row)
    assert row == statistics  # the row's label is the statistics it exchanges
    # 4 moments per channel for FedStain, 2 numbers per channel for a pair
    per_channel = 4 if statistics == "moments" else 2
    assert len(STAT_NAMES[statistics]) == per_channel
    calls = spy_calls(run)
    run.run()
    uploads = [(c, reply) for c, s, _, _, reply in calls if s == "stats"]
    assert len(uploads) == len(run.by_id)
    for cid, reply in uploads:
        uploaded = reply.arrays["stats"]
        assert sorted(uploaded) == [statistics]  # nothing but this row's statistics
        n = math.ceil(0.1 * len(run.by_id[cid].train))
        assert uploaded[statistics].shape == (n, 3, per_channel)
    fits = [(c, sent) for c, s, _, sent, _ in calls if s == "fit"]
    assert fits
    for cid, sent in fits:
        pool = sent.arrays["pool"]
        assert sorted(pool) == [statistics]
        others = sum(math.ceil(0.1 * len(run.by_id[o].train)) for o in run.by_id)
        others -= math.ceil(0.1 * len(run.by_id[cid].train))
        assert pool[statistics].shape == (others, 3, per_channel)
    # what the client's RandStain and MixStyle draw from is that pool, no other
    cid, sent = fits[0]
    client = run.client_half(cid, 1)
    assert isinstance(client, FedStainClient)
    client.begin(run.task.build_model(), sent, run.states[cid])
    for pool_used in (client.rs_pool, client.ms_pool):
        assert pool_used.kind == statistics
        torch.testing.assert_close(
            pool_used.stats, torch.from_numpy(sent.arrays["pool"][statistics])
        )


def test_default_fedstain_exchanges_the_papers_skewness_and_kurtosis(
    tmp_path: Path,
) -> None:
    """Issue 39: the name alone runs Algorithm 2 lines 5-6, S_i and K_i only;
    the four moments are the option ``statistics: moments``."""
    run = make_run(tmp_path, "algorithm.name=fedstain", "train.rounds=1")
    calls = spy_calls(run)
    run.run()
    uploads = [reply.arrays["stats"] for _, s, _, _, reply in calls if s == "stats"]
    assert uploads and all(sorted(sent) == ["skew_kurt"] for sent in uploads)
    assert all(sent["skew_kurt"].shape[1:] == (3, 2) for sent in uploads)
    assert STAT_NAMES["skew_kurt"] == ("skewness", "excess_kurtosis")
    cid, sent = next((c, p) for c, s, _, p, _ in calls if s == "fit")
    client = run.client_half(cid, 1)
    assert isinstance(client, FedStainClient)
    client.begin(run.task.build_model(), sent, run.states[cid])
    assert client.rs_pool.kind == client.ms_pool.kind == "skew_kurt"


def randstain_before_clamp(
    tmp_path: Path, row: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[torch.Tensor, torch.Tensor]:
    """(input, RandStain output) in the row's colour space, from the client's own
    views with randstain_p = 1: the output is what RandStain hands to
    ``from_space``, before the gamut clamp to RGB [0, 1] (which every row shares
    and which is not part of the statistic transfer)."""
    run, _ = table_v_run(tmp_path, row)
    calls = spy_calls(run)
    run.run()
    data = run.clients[0]
    base = run.client_half(data.client_id, 1)
    assert isinstance(base, FedStainClient)
    fit = next(p for c, s, _, p, _ in calls if s == "fit" and c == data.client_id)
    client = FedStainClient(dataclasses.replace(base.params, randstain_p=1.0), base.ctx)
    client.begin(run.task.build_model(), fit, run.states[data.client_id])
    module = importlib.import_module("fedpath.stain.randstain")
    seen: list[torch.Tensor] = []
    real = module.from_space

    def spy(y: torch.Tensor, space: str) -> torch.Tensor:
        seen.append(y.detach().clone())
        return real(y, space)

    monkeypatch.setattr(module, "from_space", spy)
    x = data.train.load(np.arange(16)).float() / 255
    client.views(x)
    assert len(seen) == 1 and seen[0].shape == x.shape  # every image restained
    return to_space(x, client.params.space), seen[0]


# Float32 tolerance for a statistic that the row must leave as it is: each is a
# mean over the 1024 pixels of a channel, computed two-pass in float32
# (epsilon 1.2e-7); the transfer and the re-measurement move it by about 1e-6 of
# (1 + |value|). 1e-4 of (1 + |value|) leaves a margin of ~10x over that, and is
# ~1000x below what the excluded step moves (the shape step moves skewness by
# ~0.4 at the median, the mean/std step moves the LAB means by ~10 units).
KEEP = 1e-4


def assert_kept(before: torch.Tensor, after: torch.Tensor) -> None:
    assert bool(((after - before).abs() <= KEEP * (1 + before.abs())).all()), float(
        (after - before).abs().max()
    )


def test_table_v_mean_std_randstain_leaves_skewness_and_kurtosis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mean/std only: RandStain is an affine map per channel (RandStainNA), and
    standardized skewness and kurtosis are invariant under one."""
    y, out = randstain_before_clamp(tmp_path, "mean_std", monkeypatch)
    a, b = channel_moments(y), channel_moments(out)
    assert_kept(a.skewness, b.skewness)
    assert_kept(a.kurtosis, b.kurtosis)
    # affine per channel: out = (y - mean) / std * std' + mean' exactly
    z = (y - a.mean[..., None, None]) / a.std[..., None, None]
    affine = z * b.std[..., None, None] + b.mean[..., None, None]
    torch.testing.assert_close(out, affine, rtol=1e-4, atol=1e-3)
    # and it did move the colour (the row is not a no-op)
    assert float((b.mean - a.mean).abs().median()) > 1.0


def test_table_v_skew_kurt_randstain_leaves_mean_and_std(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """skewness/kurtosis only: RandStain reshapes each channel with a monotone map
    and keeps its mean and std."""
    y, out = randstain_before_clamp(tmp_path, "skew_kurt", monkeypatch)
    a, b = channel_moments(y), channel_moments(out)
    assert_kept(a.mean, b.mean)
    assert_kept(a.std, b.std)
    assert float((b.skewness - a.skewness).abs().median()) > 0.05
    # pixel order within each channel kept (the shape step is monotone)
    order = y.flatten(2).argsort(dim=-1)
    assert bool((out.flatten(2).gather(-1, order).diff(dim=-1) >= -1e-4).all())


def test_table_v_moments_randstain_moves_all_four(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default row (FedStain) still moves mean/std and skewness/kurtosis."""
    y, out = randstain_before_clamp(tmp_path, "moments", monkeypatch)
    a, b = channel_moments(y), channel_moments(out)
    assert float((b.mean - a.mean).abs().median()) > 1.0
    assert float((b.skewness - a.skewness).abs().median()) > 0.05


def test_table_v_settings_that_randstain_cannot_apply_are_config_errors() -> None:
    def fedstain(*params: str) -> None:
        load_config(
            None,
            ["algorithm.name=fedstain", *(f"algorithm.params.{p}" for p in params)],
        )

    # Eq. 1's literal reading needs a template std: moments or mean_std only
    fedstain("randstain_reading=paper", "statistics=mean_std")
    with pytest.raises(ConfigError, match="'algorithm.params.statistics'"):
        fedstain("randstain_reading=paper", "statistics=skew_kurt")
    # skewness/kurtosis only: without the shape step RandStain would do nothing
    with pytest.raises(ConfigError, match="'algorithm.params.higher_order'"):
        fedstain("statistics=skew_kurt", "higher_order=false")
    fedstain("statistics=skew_kurt", "higher_order=false", "randstain=false")
    fedstain("statistics=mean_std", "higher_order=false")


# ---------------------------------------------------------------------------------
# MixStyle level: pixels (Algorithm 2, default) or features (Sec. III-D2)

FEATURES = ("algorithm.name=fedstain", "algorithm.params.mixstyle_level=features")


def spy_encoder(
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[bool, int | None, bool]]:
    """Record every encoder pass: (training, hooked stage or None, changed?).

    An unhooked pass is recorded once as ``(training, None, False)``; a hooked
    pass once per stage, with whether the hook changed that stage's output.
    """
    from fedpath.models.backbones import Encoder

    seen: list[tuple[bool, int | None, bool]] = []
    inner = Encoder.forward

    def forward(
        self: Encoder,
        x: torch.Tensor,
        hook: object = None,
        maps: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        if hook is None:
            seen.append((self.training, None, False))
            return inner(self, x, None, maps)

        def watched(stage: int, fmap: torch.Tensor) -> torch.Tensor:
            out = hook(stage, fmap)  # type: ignore[operator]
            seen.append((self.training, stage, not torch.equal(out, fmap)))
            return out

        return inner(self, x, watched, maps)

    monkeypatch.setattr(Encoder, "forward", forward)
    return seen


@pytest.mark.parametrize("layers", [None, "[1]"])
def test_feature_mixstyle_changes_training_activations_never_evaluation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layers: str | None
) -> None:
    extra = () if layers is None else (f"algorithm.params.mixstyle_layers={layers}",)
    run = make_run(tmp_path, *FEATURES, "train.rounds=1", *extra)
    seen = spy_encoder(monkeypatch)
    run.run()
    want = {0, 1} if layers is None else {1}  # default [0, 1]; tiny CNN: 2 stages
    hooked = [(t, s, c) for t, s, c in seen if s is not None]
    assert hooked and all(t for t, _, _ in hooked)  # hooked in training only
    assert {s for _, s, c in hooked if c} == want  # the configured stages change
    assert not any(c for _, s, c in hooked if s not in want)
    # evaluation happened, always without the hook
    assert any(not t for t, s, _ in seen if s is None)
    assert all(s is None for t, s, _ in seen if not t)


def test_pixel_mixstyle_never_hooks_the_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = make_run(tmp_path, "algorithm.name=fedstain", "train.rounds=1")
    assert run.server.params.mixstyle_level == "pixels"  # the default
    seen = spy_encoder(monkeypatch)
    run.run()
    assert seen and all(s is None for _, s, _ in seen)


def test_feature_mixstyle_mixes_the_views_with_their_randstain_rows(
    tmp_path: Path,
) -> None:
    """Inside one training pass: after stage 0 the original and RandStain rows
    are untouched; every X1/X2 channel mean becomes a convex combination of its
    own and its image's RandStain row's (lambda-mixing of the statistics)."""
    run = make_run(
        tmp_path, *FEATURES, "train.rounds=1", "algorithm.params.mixstyle_layers=[0]"
    )
    run.run()
    base = run.client_half(run.clients[0].client_id, 1)
    assert isinstance(base, FedStainClient)
    data = run.clients[0].train
    b = 8
    x = data.load(np.arange(b)).float() / 255
    y = torch.from_numpy(data.labels[:b])
    model = run.task.build_model()
    assert isinstance(model, FedModel)
    model.train()
    base.begin(model, Payload(), run.states[base.ctx.client_id])
    stage = model.encoder.stages
    got: dict[str, torch.Tensor] = {}
    h0 = stage[0].register_forward_hook(
        lambda _m, _i, out: got.__setitem__("out0", out.detach().clone())
    )
    h1 = stage[1].register_forward_pre_hook(
        lambda _m, args: got.__setitem__("in1", args[0].detach().clone())
    )
    base.loss(model, x, y)
    h0.remove()
    h1.remove()
    before, after = got["out0"], got["in1"]
    assert before.shape[0] == 4 * b  # [X, X_stain, X1, X2]
    assert torch.equal(after[: 2 * b], before[: 2 * b])
    assert not torch.equal(after[2 * b :], before[2 * b :])
    own = before[2 * b :].mean(dim=(2, 3))
    partner = before[b : 2 * b].repeat(2, 1, 1, 1).mean(dim=(2, 3))
    mixed = after[2 * b :].mean(dim=(2, 3))
    lo, hi = torch.minimum(own, partner), torch.maximum(own, partner)
    tol = 1e-4 * (1 + own.abs())
    assert bool(((mixed >= lo - tol) & (mixed <= hi + tol)).all())
    # at evaluation the same model runs with no mixing: stage 1 sees stage 0
    model.eval()
    with torch.no_grad():
        maps = model.feature_maps(x)
        stage1 = stage[1](maps[0])
    torch.testing.assert_close(stage1, maps[1])


def test_feature_level_views_are_not_pixel_mixed(tmp_path: Path) -> None:
    """With AugMix off, feature level leaves X1 = X2 = X at the pixels (MixStyle
    acts inside the encoder); pixel level restyles them."""
    off = "algorithm.params.augmix=false"
    outs = {}
    for level in ("pixels", "features"):
        run = make_run(
            tmp_path / level,
            "algorithm.name=fedstain",
            f"algorithm.params.mixstyle_level={level}",
            "train.rounds=1",
            off,
        )
        run.run()
        client = run.client_half(run.clients[0].client_id, 1)
        assert isinstance(client, FedStainClient)
        client.begin(
            run.task.build_model(), Payload(), run.states[client.ctx.client_id]
        )
        x = run.clients[0].train.load(np.arange(8)).float() / 255
        outs[level] = (x, client.views(x))
    x, views = outs["features"]
    assert len(views) == 4 and torch.equal(views[2], x) and torch.equal(views[3], x)
    x, views = outs["pixels"]
    assert not torch.equal(views[2], x)


def test_mixstyle_level_config_errors(tmp_path: Path) -> None:
    def fedstain(*params: str) -> None:
        load_config(
            None,
            ["algorithm.name=fedstain", *(f"algorithm.params.{p}" for p in params)],
        )

    fedstain("mixstyle_level=features", "mixstyle_layers=[0,2]")
    with pytest.raises(
        ConfigError, match="'algorithm.params.mixstyle_layers': expected null"
    ):
        fedstain("mixstyle_layers=[0]")  # pixel level (the default)
    with pytest.raises(ConfigError, match="'algorithm.params.mixstyle_layers'"):
        fedstain("mixstyle_level=features", "mixstyle_layers=[-1]")
    with pytest.raises(ConfigError, match="'algorithm.params.mixstyle_layers'"):
        fedstain("mixstyle_level=features", "mixstyle_layers=[1,1]")
    with pytest.raises(ConfigError, match="'algorithm.params.randstain'"):
        fedstain("mixstyle_level=features", "randstain=false")
    with pytest.raises(ConfigError, match="'algorithm.params.mixstyle_mode'"):
        fedstain("mixstyle_level=features", "mixstyle_mode=paper")
    # a stage the configured backbone lacks: named with its valid range, before
    # any client trains (the tiny small_cnn has widths [8, 16]: stages 0-1)
    with pytest.raises(ConfigError, match=r"mixstyle_layers.*\[2\].*valid indices 0-1"):
        make_run(tmp_path, *FEATURES, "algorithm.params.mixstyle_layers=[0,2]")


@pytest.mark.parametrize(("backbone", "stages"), [("resnet18", 4), ("small_cnn", 3)])
def test_mixstyle_layer_range_follows_the_backbone(backbone: str, stages: int) -> None:
    from fedpath.algorithms.fedstain import check_mixstyle_layers
    from fedpath.config import ModelConfig
    from fedpath.models.backbones import build_model
    from fedpath.params.algorithms import FedStainParams

    params = {"small_cnn": {"widths": [4, 8, 8]}, "resnet18": {}}[backbone]
    model = build_model(ModelConfig(backbone=backbone, params=params), 2)
    last = FedStainParams(mixstyle_level="features", mixstyle_layers=[stages - 1])
    check_mixstyle_layers(last, model, backbone)
    beyond = FedStainParams(mixstyle_level="features", mixstyle_layers=[0, stages])
    with pytest.raises(ConfigError, match=f"valid indices 0-{stages - 1}"):
        check_mixstyle_layers(beyond, model, backbone)
