"""dp_fedavg over Flower with Flower's central-DP pieces: the node clips with
Flower's ``fixedclipping_mod`` (whatever the client code returns), the clip
in-process is Flower's ``compute_clip_model_update`` bit for bit, the noise std
is Flower's ``compute_stdv``, the node policy caps the clip, and Flower's RDP
accountant agrees with Opacus's where both model the same mechanism."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("opacus")

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore import differential_privacy as flwr_dp
from flwr.supercore.privacy_accounting import rdp_accountant

import fedpath.algorithms.dp_fedavg as dp
from fedpath.config import ConfigError, ExperimentConfig
from fedpath.runtime.flower import META, RC_CONFIG, central_dp
from fedpath.runtime.flower.client_app import app as client_app
from fedpath.runtime.flower.records import payload_to_records, records_to_payload
from fedpath.runtime.guard import check_run
from fedpath.runtime.rules import NC_POLICY, NodePolicy, PolicyError
from fedpath.types import Payload
from fedpath.utils.io import read_jsonl
from tests.runtime.test_flower_loopback import (  # noqa: F401  (fixture)
    assert_same_run,
    config,
    final_state,
    in_process,
    nodes_for,
    records,
    run_over_grid,
    stage_message,
    task_identity,
    wire,
)

DP = ["algorithm.name=dp_fedavg", "model.params.norm=group"]
CID = "hospital_0/c0"


def _random_model(seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    shapes = [(16, 3, 3, 3), (16,), (2, 64), (2,)]
    old = [rng.normal(0, 0.1, s).astype(np.float32) for s in shapes]
    new = [o + rng.normal(0, 0.05, o.shape).astype(np.float32) for o in old]
    return new, old


# ------------------------------------------------------------------ the math


@pytest.mark.parametrize("clip", [0.01, 0.3, 100.0])
def test_clip_update_is_flowers_compute_clip_model_update_bit_for_bit(
    clip: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    new, old = _random_model(0)
    names = ["conv.weight", "conv.bias", "fc.weight", "fc.bias"]
    ref = list(new)
    flwr_dp.compute_clip_model_update(ref, old, clip)
    out, norm = dp.clip_update(
        dict(zip(names, new, strict=True)), dict(zip(names, old, strict=True)), clip
    )
    for k, r in zip(names, ref, strict=True):
        assert out[k].dtype == r.dtype and np.array_equal(out[k], r), k
    assert norm == pytest.approx(
        flwr_dp.get_norm([n - o for n, o in zip(new, old, strict=True)])
    )
    # without Flower: the same operations, the same bits
    monkeypatch.setitem(sys.modules, "flwr.supercore.differential_privacy", None)
    again, _ = dp.clip_update(
        dict(zip(names, new, strict=True)), dict(zip(names, old, strict=True)), clip
    )
    assert all(np.array_equal(again[k], out[k]) for k in names)
    assert dp.noise_std(1.3, clip, 3) == flwr_dp.compute_stdv(1.3, clip, 3)


def test_noise_std_is_flowers_compute_stdv() -> None:
    for z, c, m in [(1.0, 1.0, 3), (0.7, 0.05, 6), (0.0, 2.0, 1)]:
        assert dp.noise_std(z, c, m) == flwr_dp.compute_stdv(z, c, m)


def test_zero_update_passes_unchanged() -> None:
    old = {"w": np.ones(3, np.float32)}
    out, norm = dp.clip_update(dict(old), old, 1.0)  # Flower's clip divides by 0
    assert norm == 0.0 and np.array_equal(out["w"], old["w"])


def test_the_node_marker_is_the_client_halfs() -> None:
    assert central_dp.NODE_CLIPS == dp.NODE_CLIPS


# ------------------------------------------------------------ the node's mod


def _dp_context(cfg: ExperimentConfig, **node: Any) -> Context:
    return Context(
        1, 7, {"client-id": CID, **node}, RecordDict(), {RC_CONFIG: cfg.to_yaml()}
    )


def _model_weights(cfg: ExperimentConfig) -> dict[str, np.ndarray]:
    from fedpath.models.backbones import build_model

    model = build_model(cfg.model, 2)
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def _norm(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return math.sqrt(
        sum(
            float(np.square(a[k].astype(np.float64) - b[k].astype(np.float64)).sum())
            for k in b
            if b[k].dtype.kind == "f"
        )
    )


def _changed_client(delta: float, seen: list[Payload], tamper: str = "") -> Any:
    """A client code that ignores the clip: adds ``delta`` to every float entry."""

    def handler(msg: Message, ctx: Context) -> Message:
        got = records_to_payload(msg.content)
        seen.append(got)
        weights = {
            k: (v + np.float32(delta)) if v.dtype.kind == "f" else v
            for k, v in got.arrays["weights"].items()
        }
        groups = {"weights": weights}
        if tamper == "nan":
            k = next(iter(weights))
            weights[k] = weights[k].copy()
            weights[k].flat[0] = np.nan
        elif tamper == "extra":
            weights["smuggled"] = np.ones(4, np.float32)
        elif tamper == "group":
            groups["images"] = {"x": np.ones((2, 2), np.float32)}
        elif tamper == "integer":
            weights["count"] = np.array(99, np.int64)
        content = payload_to_records(
            Payload(groups, {"num_examples": 5, "loss": 0.25}), pack=True
        )
        content[META] = ConfigRecord({"client": CID, "stage": "fit", "round": 1})
        return Message(content, reply_to=msg)

    return handler


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.usefixtures("task_identity")
def test_the_mod_clips_an_unclipped_reply_at_the_node(
    tmp_path: Path, pack: bool
) -> None:
    cfg = config(tmp_path, *DP, "algorithm.params.clip=0.5")
    sent = {**_model_weights(cfg), "count": np.array(3, np.int64)}
    msg = stage_message(
        cfg, Payload({"weights": sent}, {"round": 1, dp.NODE_CLIPS: False})
    )
    if pack:  # as the coordinator sends it
        content = payload_to_records(records_to_payload(msg.content), pack=True)
        content[META] = msg.content.config_records[META]
        msg.content = content
    seen: list[Payload] = []
    reply = central_dp.node_clipping_mod(
        msg, _dp_context(cfg), _changed_client(0.05, seen)
    )
    assert not reply.has_error(), reply.error.reason
    # the node, not the coordinator, told the client code that the mod clips
    assert seen[0].scalars[dp.NODE_CLIPS] is True
    got = records_to_payload(wire(reply).content)  # what the server receives
    before = _norm({k: v + np.float32(0.05) for k, v in sent.items()}, sent)
    assert before > 1.0
    assert abs(_norm(got.arrays["weights"], sent) - 0.5) < 1e-6
    assert got.scalars == {"num_examples": 5, "loss": 0.25}
    assert got.arrays["weights"]["count"] == 3
    assert reply.content.config_records[META]["client"] == CID
    # the update is Flower's clip of the client's reply, bit for bit
    keys = [k for k, v in sent.items() if v.dtype.kind == "f"]
    ref = [sent[k] + np.float32(0.05) for k in keys]
    flwr_dp.compute_clip_model_update(ref, [sent[k] for k in keys], 0.5)
    assert all(
        np.array_equal(got.arrays["weights"][k], r)
        for k, r in zip(keys, ref, strict=True)
    )


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        ("nan", "is not finite"),
        ("extra", "fixedclipping_mod expects the keys in the ArrayRecord"),
        ("group", "the reply carries ['images', 'weights']"),
        ("integer", "changed the non-floating entry 'count'"),
    ],
)
@pytest.mark.usefixtures("task_identity")
def test_the_node_refuses_what_the_clip_cannot_cover(
    tmp_path: Path, tamper: str, expected: str
) -> None:
    cfg = config(tmp_path, *DP)
    sent = {**_model_weights(cfg), "count": np.array(3, np.int64)}
    msg = stage_message(cfg, Payload({"weights": sent}, {"round": 1}))
    reply = central_dp.node_clipping_mod(
        msg, _dp_context(cfg), _changed_client(0.05, [], tamper)
    )
    assert reply.has_error()
    reason = reply.error.reason or ""
    assert reason.startswith(f"client {CID} (node 7): "), reason
    assert expected in reason, reason


@pytest.mark.usefixtures("task_identity")
def test_other_algorithms_and_stages_pass_through(tmp_path: Path) -> None:
    cfg = config(tmp_path)  # fedavg
    sent = _model_weights(cfg)
    msg = stage_message(cfg, Payload({"weights": sent}, {"round": 1}))
    seen: list[Payload] = []
    reply = central_dp.node_clipping_mod(
        msg, _dp_context(cfg), _changed_client(0.05, seen)
    )
    assert dp.NODE_CLIPS not in seen[0].scalars
    got = records_to_payload(reply.content).arrays["weights"]
    assert _norm(got, sent) > 1.0  # not clipped: fedavg
    cfg = config(tmp_path, *DP)  # dp_fedavg, but the evaluation stage
    msg = stage_message(cfg, Payload({"weights": sent}), stage="fedpath.evaluate")
    reply = central_dp.node_clipping_mod(
        msg, _dp_context(cfg), _changed_client(0.05, seen)
    )
    assert dp.NODE_CLIPS not in seen[1].scalars
    assert _norm(records_to_payload(reply.content).arrays["weights"], sent) > 1.0


@pytest.mark.usefixtures("task_identity")
def test_a_real_node_clips_even_if_told_it_need_not(tmp_path: Path) -> None:
    """The ClientApp itself: the coordinator's ``NODE_CLIPS=False`` changes
    nothing; the fit reply leaves within the clip, on the node."""
    cfg = config(tmp_path, *DP, "algorithm.params.clip=0.01")
    sent = _model_weights(cfg)
    msg = stage_message(
        cfg, Payload({"weights": sent}, {"round": 1, dp.NODE_CLIPS: False})
    )
    reply = wire(client_app(msg, _dp_context(cfg)))
    assert not reply.has_error(), reply.error.reason
    got = records_to_payload(reply.content).arrays["weights"]
    assert abs(_norm(got, sent) - 0.01) < 1e-6


# ---------------------------------------------------------------- the policy


def test_policy_caps_the_clip_and_can_require_dp(tmp_path: Path) -> None:
    capped = NodePolicy(max_dp_clip=1.0)
    check_run(capped, config(tmp_path, *DP, "algorithm.params.clip=1.0"))
    check_run(capped, config(tmp_path))  # no clip to cap: fedavg
    with pytest.raises(
        PolicyError,
        match=r"refuses \(max_dp_clip\): algorithm.params.clip=2, a larger update "
        r"norm than the node allows \(1\)",
    ):
        check_run(capped, config(tmp_path, *DP, "algorithm.params.clip=2"))
    strict = NodePolicy(require_dp=True)
    check_run(strict, config(tmp_path, *DP))
    with pytest.raises(PolicyError, match=r"\(require_dp\): algorithm 'fedavg'"):
        check_run(strict, config(tmp_path))
    with pytest.raises(PolicyError, match=r"\(require_dp\): .*noise_multiplier=0"):
        check_run(strict, config(tmp_path, *DP, "algorithm.params.noise_multiplier=0"))
    assert "max_dp_clip 1" in capped.summary()
    assert "require_dp" in strict.summary()


@pytest.mark.usefixtures("task_identity")
def test_a_node_refuses_a_too_large_clip_at_hello_and_fit(tmp_path: Path) -> None:
    cfg = config(tmp_path / "flower", *DP, "algorithm.params.clip=2.0")
    policy = {NC_POLICY: NodePolicy(max_dp_clip=0.5).to_yaml()}
    with pytest.raises(RuntimeError, match=r"policies refuse it: .*\(max_dp_clip\)"):
        run_over_grid(cfg, nodes_for(CID, hospital_0=policy))
    msg = stage_message(cfg, Payload({"weights": _model_weights(cfg)}, {"round": 1}))
    reply = client_app(msg, _dp_context(cfg, **policy))
    assert reply.has_error()
    assert "PolicyError: node policy refuses (max_dp_clip)" in (
        reply.error.reason or ""
    )


# --------------------------------------------------- in-process equals Flower


@pytest.mark.usefixtures("task_identity")
def test_over_flower_with_the_mod_equals_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Clipping active (clip 0.05, below every update's norm), noise on: the
    node's mod clips once, with the function the client half uses in-process."""
    extra = [*DP, "algorithm.params.clip=0.05", "algorithm.params.noise_multiplier=1"]
    mod_calls: list[int] = []
    half_norms: list[float] = []
    flower_mod = central_dp.fixedclipping_mod
    half_clip = dp.clip_update

    def counted_mod(msg: Message, ctx: Context, call_next: Any) -> Message:
        mod_calls.append(1)
        return flower_mod(msg, ctx, call_next)

    def spied_clip(new: Any, old: Any, clip: float) -> Any:
        out = half_clip(new, old, clip)
        half_norms.append(out[1])
        return out

    monkeypatch.setattr(central_dp, "fixedclipping_mod", counted_mod)
    monkeypatch.setattr(dp, "clip_update", spied_clip)
    cfg = config(tmp_path / "flower", *extra)
    run_over_grid(cfg, nodes_for(CID, "hospital_1/c0"))
    assert records(cfg, "failure") == []
    assert len(mod_calls) == 2 * 2 and half_norms == []  # the nodes' mod clipped
    ref = in_process(tmp_path, *extra)
    assert len(half_norms) == 2 * 2 and min(half_norms) > 0.05  # clipping active
    assert_same_run(cfg, ref)  # bit for bit, noise included
    rnd = records(ref, "round")[-1]
    assert rnd["fit/noise_std"] == flwr_dp.compute_stdv(1.0, 0.05, 2)
    assert rnd["fit/epsilon"] == pytest.approx(dp.epsilon(1.0, 1.0, 2, 1e-5))
    assert all(torch.isfinite(v).all() for v in final_state(cfg).values())


# --------------------------------------------------------------- accountants


class _GaussianEvent:
    def __init__(self, sigma: float) -> None:
        self.sigma = sigma


class _StubRdp:
    """dp-accounting's ``RdpAccountant`` for plain Gaussian events, through
    Opacus's RDP formulas: checks what fedpath hands Flower's accountant."""

    events: ClassVar[list[tuple[float, int]]] = []

    def __init__(self, orders: Any = None, neighboring_relation: Any = None) -> None:
        from opacus.accountants import RDPAccountant

        self.orders = orders or RDPAccountant.DEFAULT_ALPHAS
        self.history: list[tuple[float, float, int]] = []

    def supports(self, event: Any) -> bool:
        return isinstance(event, _GaussianEvent)

    def compose(self, event: _GaussianEvent, count: int) -> None:
        _StubRdp.events.append((event.sigma, count))
        self.history.append((event.sigma, 1.0, count))

    def get_epsilon(self, delta: float) -> float:
        from opacus.accountants import RDPAccountant

        acc = RDPAccountant()
        acc.history = list(self.history)
        return float(acc.get_epsilon(delta, alphas=list(self.orders)))


@pytest.fixture
def stub_dp_accounting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    backend = (
        types.SimpleNamespace(GaussianDpEvent=_GaussianEvent),
        types.SimpleNamespace(
            NeighboringRelation=types.SimpleNamespace(ADD_OR_REMOVE_ONE="add/remove")
        ),
        types.SimpleNamespace(RdpAccountant=_StubRdp),
    )
    monkeypatch.setattr(rdp_accountant, "_load_dp_accounting", lambda: backend)
    _StubRdp.events = []
    return _StubRdp.events


def test_flower_accountant_gets_the_gaussian_without_amplification(
    stub_dp_accounting: list[tuple[float, int]],
) -> None:
    eps = dp.epsilon_flower(1.0, 3, 3, 10, 1e-5)
    assert stub_dp_accounting == [(1.0, 10)]  # z, rounds; no sampling event
    assert eps == pytest.approx(dp.epsilon(1.0, 1.0, 10, 1e-5), rel=1e-12)
    # sampling 2 of 4 is not amplified: Opacus's Poisson bound is smaller
    assert dp.epsilon_flower(1.0, 2, 4, 10, 1e-5) == pytest.approx(eps)
    assert dp.epsilon(1.0, 0.5, 10, 1e-5) < eps
    assert math.isinf(dp.epsilon_flower(0.0, 3, 3, 10, 1e-5))


def test_a_run_can_account_with_flowers_accountant(
    tmp_path: Path, stub_dp_accounting: list[tuple[float, int]]
) -> None:
    from tests.algorithms.test_fedstain import make_run

    run = make_run(
        tmp_path, *DP, "train.rounds=1", "algorithm.params.accountant=flower"
    )
    run.run()
    rnd = next(r for r in read_jsonl(tmp_path / "run" / "results.jsonl")
               if r["kind"] == "round")  # fmt: skip
    n = len(run.clients)
    assert rnd["fit/epsilon"] == pytest.approx(dp.epsilon_flower(1.0, n, n, 1, 1e-5))


def test_flower_accountant_without_its_backend_is_a_config_error(
    tmp_path: Path,
) -> None:
    try:
        import dp_accounting  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("dp-accounting is installed")
    from tests.algorithms.test_fedstain import make_run

    with pytest.raises(ConfigError, match=r"'algorithm.params.accountant': 'flower'"):
        make_run(tmp_path, *DP, "algorithm.params.accountant=flower")


@pytest.mark.parametrize(
    ("z", "sampled", "population", "rounds"),
    [(1.0, 3, 3, 10), (0.5, 6, 6, 6), (2.0, 4, 4, 50)],
)
def test_flower_and_opacus_accountants_agree_at_full_participation(
    z: float, sampled: int, population: int, rounds: int
) -> None:
    pytest.importorskip("dp_accounting")
    flwr_eps = dp.epsilon_flower(z, sampled, population, rounds, 1e-5)
    assert flwr_eps == pytest.approx(dp.epsilon(z, 1.0, rounds, 1e-5), rel=1e-3)
