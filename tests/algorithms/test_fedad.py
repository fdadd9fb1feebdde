"""FedAD: what crosses the network, the loss of Eq. 1-4, ATSA at the server."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedpath.algorithms.base import ALGORITHMS, ServerContext
from fedpath.algorithms.fedad import FedADClient, FedADParams, FedADServer
from fedpath.algorithms.ssl_common import LOCAL_HEADS, WEIGHTS, SSLNet
from fedpath.config import ConfigError, resolve_params
from fedpath.data.partition import lodo_plan
from fedpath.losses import nt_xent
from fedpath.models.backbones import FedModel
from fedpath.runtime.experiment import load_dataset
from fedpath.runtime.inprocess import InProcessRun
from fedpath.types import ClientState, Payload, as_numpy_dict
from tests.ssl_helpers import client_ctx, ssl_cfg


def broadcast(ctx, lam: float = 0.3) -> Payload:  # type: ignore[no-untyped-def]
    model = ctx.build_model()
    enc = {
        k: v for k, v in as_numpy_dict(model.state_dict()).items() if "encoder." in k
    }
    return Payload({WEIGHTS: enc}, {"round": 1, "lambda": lam})


def test_head_never_leaves_the_client_and_bytes_equal_the_encoder(
    tmp_path: Path,
) -> None:
    cfg = ssl_cfg(tmp_path, "fedad")
    ctx = client_ctx(cfg)
    params = resolve_params(FedADParams, {}, "algorithm.params")
    state = ClientState()
    msg = broadcast(ctx)
    reply = FedADClient(params, ctx).handle("fit", msg, state)
    assert set(reply.arrays) == {WEIGHTS}
    assert all(k.startswith("encoder.") for k in reply.arrays[WEIGHTS])
    assert not any("head" in k for g in reply.arrays.values() for k in g)
    head = state.arrays[LOCAL_HEADS]
    assert head and all(k.startswith("head.") for k in head)
    encoder_bytes = sum(v.nbytes for v in msg.arrays[WEIGHTS].values())
    assert reply.nbytes() == encoder_bytes  # the same bytes as FedAvg of the encoder
    assert {"cl", "align", "align_raw", "ortho", "loss"} <= set(reply.scalars)
    align_raw = reply.scalars["align_raw"]
    assert isinstance(align_raw, int | float)
    assert reply.scalars["align"] == pytest.approx(0.3 * align_raw)
    # the head persists: the next round starts from the state's head
    FedADClient(params, client_ctx(cfg, rnd=2)).handle("fit", msg, state)
    assert any(not np.array_equal(head[k], state.arrays[LOCAL_HEADS][k]) for k in head)


def test_runtime_bytes_per_round_are_the_encoders(tmp_path: Path) -> None:
    cfg = ssl_cfg(tmp_path, "fedad", "train.clients_per_round=3")
    ds = load_dataset(cfg.data)
    run = InProcessRun(cfg, ds, lodo_plan(ds, ["hospital_2"])[0], 0, tmp_path / "r")
    run.run()
    rec = next(
        json.loads(x)
        for x in (tmp_path / "r" / "results.jsonl").read_text().splitlines()
        if '"kind": "round"' in x
    )
    enc = sum(
        v.numel() * v.element_size()
        for k, v in run.task.build_model().state_dict().items()
        if k.startswith("encoder.")
    )
    assert rec["clients"] == 3
    assert rec["bytes_up"] == rec["bytes_down"] == 3 * enc
    assert rec["fit/lambda"] == pytest.approx(0.1)  # round 1: lambda_min
    assert rec["fit/delta"] > 0 and 0.1 <= rec["fit/lambda_next"] <= 1.0
    # what the controller used is in the record: round 1 is the reference, and
    # the default (literal) Eq. 6 is fed Delta itself
    assert rec["fit/delta_ref"] == pytest.approx(rec["fit/delta"])
    assert rec["fit/delta_norm"] == rec["fit/delta"]
    assert rec["fit/lambda_target"] == pytest.approx(
        0.1 + 0.9 * np.exp(-20 * rec["fit/delta_norm"]), rel=1e-9
    )
    assert rec["fit/lambda_next"] == pytest.approx(
        0.8 * rec["fit/lambda"] + 0.2 * rec["fit/lambda_target"], rel=1e-9
    )
    for key in ("fit/cl", "fit/align", "fit/ortho", "fit/loss"):
        assert np.isfinite(rec[key])


def test_loss_is_eq1_to_eq4(tmp_path: Path) -> None:
    cfg = ssl_cfg(tmp_path, "fedad")
    ctx = client_ctx(cfg)
    params = resolve_params(FedADParams, {"gamma": 2.0}, "algorithm.params")
    client = FedADClient(params, ctx)
    model = ctx.build_model()
    assert isinstance(model, FedModel)
    heads = torch.nn.ModuleDict(FedADClient.build_local(params, model.feature_dim))
    net = SSLNet(model, torch.nn.ModuleDict(), heads).eval()
    client.begin(net, broadcast(ctx, lam=0.7), ClientState())
    # the student drifts from the teacher, so the alignment term is not trivial
    with torch.no_grad():
        for p in net.model.encoder.parameters():
            p.add_(0.05 * torch.randn_like(p))
    a, b = torch.rand(6, 3, 16, 16), torch.rand(6, 3, 16, 16)
    with torch.no_grad():
        out = client.ssl_loss(net, a, b, a)
    with torch.no_grad():
        zs, zd = heads["head"](net.encode(torch.cat([a, b])))
        zg = client.p_g(client.teacher.encode(torch.cat([a, b])))  # type: ignore[operator]

    def cos(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.cosine_similarity(u, v, dim=1)

    n = 6
    align = sum(
        (1 - cos(zs[s], zg[s])) + (1 + cos(zd[s], zg[s]))
        for s in (slice(0, n), slice(n, 2 * n))
    )
    ortho = sum(cos(zs[s], zd[s]) ** 2 for s in (slice(0, n), slice(n, 2 * n)))
    want_align = 0.7 / 2 * torch.as_tensor(align).mean()
    want_ortho = 2.0 / 2 * torch.as_tensor(ortho).mean()
    want_cl = nt_xent(zs[:n], zs[n:], params.temperature)
    assert float(out["align"]) == pytest.approx(float(want_align), rel=1e-5)
    assert float(out["ortho"]) == pytest.approx(float(want_ortho), rel=1e-5)
    assert float(out["cl"]) == pytest.approx(float(want_cl), rel=1e-5)
    total = want_cl + want_align + want_ortho
    assert float(out["loss"]) == pytest.approx(float(total), rel=1e-5)
    assert not any(p.requires_grad for p in client.teacher.parameters())


def test_labels_are_never_used(tmp_path: Path) -> None:
    cfg = ssl_cfg(tmp_path, "fedad")
    ds = load_dataset(cfg.data)
    split = ds.split("hospital_0", "train")
    shuffled = type(split)(
        split.store, split.indices, split.labels[::-1].copy(), split.domains,
        split.slides,
    )  # fmt: skip
    params = resolve_params(FedADParams, {}, "algorithm.params")
    msg = broadcast(client_ctx(cfg))
    replies = [
        FedADClient(params, client_ctx(cfg, data)).handle("fit", msg, ClientState())
        for data in (split, shuffled)
    ]
    for k, v in replies[0].arrays[WEIGHTS].items():
        assert np.array_equal(v, replies[1].arrays[WEIGHTS][k]), k


def test_nt_xent_needs_pairs_error_names_option_and_client(tmp_path: Path) -> None:
    params = resolve_params(FedADParams, {}, "algorithm.params")
    cfg = ssl_cfg(tmp_path, "fedad", "train.batch_size=1")
    ctx = client_ctx(cfg, cid="hospital_0/c1")
    with pytest.raises(ConfigError, match=r"train\.batch_size.*hospital_0/c1"):
        FedADClient(params, ctx).handle("fit", broadcast(ctx), ClientState())
    cfg = ssl_cfg(tmp_path, "fedad")
    one = load_dataset(cfg.data).split("hospital_0", "train").subset([0])
    ctx = client_ctx(cfg, one, cid="lonely")
    with pytest.raises(ConfigError, match="lonely.*min_client_size"):
        FedADClient(params, ctx).handle("fit", broadcast(ctx), ClientState())


def test_server_atsa_static_lambda_and_checkpoint(tmp_path: Path) -> None:
    cfg = ssl_cfg(tmp_path, "fedad")
    task = client_ctx(cfg).task
    init = as_numpy_dict(task.build_model().state_dict())
    sctx = ServerContext(
        initial_weights=init,
        client_ids=["a", "b"],
        client_domains={"a": "x", "b": "y"},
        seed=0,
        task=task,
    )
    params = resolve_params(FedADParams, {}, "algorithm.params")
    server = FedADServer(params, sctx)
    assert set(server.global_weights()) == {k for k in init if k.startswith("encoder.")}
    msgs = server.configure("fit", 1, ["a", "b"])
    assert msgs["a"].scalars["lambda"] == pytest.approx(0.1)
    rng = np.random.default_rng(0)
    replies = {}
    for i, c in enumerate(("a", "b")):
        w = {
            k: (v + rng.normal(size=v.shape).astype(v.dtype) * 0.01)
            if v.dtype.kind == "f"
            else v
            for k, v in msgs[c].arrays[WEIGHTS].items()
        }
        replies[c] = Payload({WEIGHTS: w}, {"num_examples": 10 * (i + 1), "cl": 1.0})
    old = dict(server.weights)
    logs = server.aggregate("fit", 1, replies)
    keys = server.param_keys
    assert keys and all(k in old for k in keys)
    assert not any("running" in k for k in keys)  # Eq. 5 over parameters only
    new = {
        k: (replies["a"].arrays[WEIGHTS][k] * 10 + replies["b"].arrays[WEIGHTS][k] * 20)
        / 30
        for k in keys
    }
    num = np.sqrt(sum(((new[k] - old[k]).astype(np.float64) ** 2).sum() for k in keys))
    den = np.sqrt(sum((old[k].astype(np.float64) ** 2).sum() for k in keys))
    assert logs["delta"] == pytest.approx(num / (den + 1e-8), rel=1e-5)
    # the default is the paper's Eq. 6 on the raw Delta (issue 39)
    assert logs["delta_ref"] == logs["delta"] == logs["delta_norm"]
    target = 0.1 + 0.9 * np.exp(-20 * logs["delta"])
    assert logs["lambda_target"] == pytest.approx(target, rel=1e-12)
    assert logs["lambda_next"] == pytest.approx(0.8 * 0.1 + 0.2 * target, rel=1e-6)
    assert logs["lambda"] == pytest.approx(0.1)
    # fedpath's relative scale, selectable: D = 0.2 * Delta / (Delta_ref + eps),
    # the first round its own reference
    relative = resolve_params(
        FedADParams, {"atsa_scale": "relative"}, "algorithm.params"
    )
    rel_logs = FedADServer(relative, sctx).aggregate("fit", 1, replies)
    delta = logs["delta"]
    assert isinstance(delta, int | float)
    norm = 0.2 * delta / (delta + 1e-8)
    assert rel_logs["delta"] == pytest.approx(logs["delta"])
    assert rel_logs["delta_norm"] == pytest.approx(norm, rel=1e-12)
    rel_target = 0.1 + 0.9 * np.exp(-20 * norm)
    assert rel_logs["lambda_next"] == pytest.approx(
        0.8 * 0.1 + 0.2 * rel_target, rel=1e-6
    )
    restored = FedADServer(params, sctx)
    restored.load_state(server.state())
    assert restored.configure("fit", 2, ["a"])["a"].scalars["lambda"] == pytest.approx(
        logs["lambda_next"]
    )
    static = resolve_params(FedADParams, {"atsa": False}, "algorithm.params")
    s2 = FedADServer(static, sctx)
    assert s2.configure("fit", 1, ["a"])["a"].scalars["lambda"] == 0.5
    assert s2.aggregate("fit", 1, replies)["lambda_next"] == 0.5


def test_resume_restores_the_curriculum(tmp_path: Path) -> None:
    def rounds(sub: str, resume_after: int | None) -> list[float]:
        cfg = ssl_cfg(tmp_path / sub, "fedad", "train.rounds=2")
        ds = load_dataset(cfg.data)
        fold = lodo_plan(ds, ["hospital_2"])[0]
        out = tmp_path / sub / "run"
        if resume_after:
            short = ssl_cfg(tmp_path / sub, "fedad", "train.rounds=2")
            run = InProcessRun(short, ds, fold, 0, out)
            run.run_dir.mkdir(parents=True, exist_ok=True)
            run.run_round(1)
            InProcessRun(cfg, ds, fold, 0, out).run(resume=True)
        else:
            InProcessRun(cfg, ds, fold, 0, out).run()
        recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
        # lambda_next of round 2 needs round 1's Delta_ref back from the checkpoint
        keys = ("fit/lambda", "fit/lambda_next", "fit/delta_ref")
        return [r[k] for r in recs if r["kind"] == "round" for k in keys]

    assert rounds("a", None) == pytest.approx(rounds("b", 1))


def test_fedad_is_registered() -> None:
    assert "fedad" in ALGORITHMS.names()
