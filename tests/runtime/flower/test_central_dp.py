"""dp_fedavg over Flower with Flower's central-DP pieces
(:mod:`fedpath.runtime.flower.central_dp`): the node clips with Flower's
``fixedclipping_mod`` (whatever the client code returns), the node policy caps the
clip, and a run over Flower with the mod equals the run in-process. The clip, noise
and accountant against Flower's own functions are in ``test_central_dp_math.py``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("opacus")

import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore import differential_privacy as flwr_dp

import fedpath.algorithms.dp_fedavg as dp
from fedpath.config import ExperimentConfig
from fedpath.runtime.flower import META, RC_CONFIG, central_dp
from fedpath.runtime.flower.client_app import app as client_app
from fedpath.runtime.flower.records import payload_to_records, records_to_payload
from fedpath.runtime.guard import check_run
from fedpath.runtime.rules import NC_POLICY, NodePolicy, PolicyError
from fedpath.types import Payload
from tests.flower_helpers import (
    assert_same_run,
    config,
    final_state,
    in_process,
    nodes_for,
    records,
    run_over_grid,
    stage_message,
    wire,
)
from tests.runtime.flower.conftest import DP

CID = "hospital_0/c0"


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
