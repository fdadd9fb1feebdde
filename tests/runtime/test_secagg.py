"""Secure aggregation on the Flower path: Flower's SecAgg+ workflow and mod.

Loopback federations (:class:`LoopbackGrid`: every message through Flower's wire
serialization to the real ClientApp, one Context per node): the SecAgg+ aggregate
equals plain FedAvg within :func:`~fedpath.runtime.secagg.error_bound`, the
coordinator receives only masked vectors, a client that drops after sharing its
keys is unmasked out of the sum, and what SecAgg+ cannot carry is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import Message
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.secaggplus_constants import (
    RECORD_KEY_CONFIGS,
    Key,
    Stage,
)

import fedpath.runtime.flower.secagg as secagg
from fedpath.config import ConfigError, ExperimentConfig
from fedpath.runtime.experiment import run_dir_for
from fedpath.runtime.flower import RC_CONFIG
from fedpath.runtime.flower.client_app import app as client_app
from fedpath.runtime.flower.nodes import FlowerSettings
from fedpath.runtime.flower.server_app import run_federation
from fedpath.runtime.rules import NC_POLICY, NodePolicy, PolicyError
from fedpath.runtime.secagg import RC_MODE, SecAggSettings, error_bound
from fedpath.types import Payload
from tests.flower_helpers import (
    FOUR,
    LoopbackGrid,
    config,
    final_state,
    in_process,
    nodes_for,
    records,
    run_over_grid,
    stage_message,
)

#: Messages built outside a Flower process need a run and node identity.
pytestmark = pytest.mark.usefixtures("task_identity")

ONE_ROUND = (*FOUR, "train.rounds=1")
CLIENTS = ("hospital_0/c0", "hospital_1/c0", "hospital_2/c0")
REQUIRE = {NC_POLICY: NodePolicy(require_secure_aggregation=True).to_yaml()}


class SecAggGrid(LoopbackGrid):
    """Keeps every reply the coordinator pulls; drops (node, SecAgg+ stage)."""

    def __init__(self, *args: Any, drop_stage: Iterable[tuple[int, str]] = ()):
        super().__init__(*args)
        self.drop_stage = set(drop_stage)
        self.pulled: list[Message] = []

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = []
        for msg in messages:
            configs = msg.content.config_records.get(RECORD_KEY_CONFIGS)
            stage = configs.get(Key.STAGE) if configs is not None else None
            if (msg.metadata.dst_node_id, stage) in self.drop_stage:
                msg.metadata.__dict__["_message_id"] = msg.object_id
                ids.append(msg.metadata.message_id)  # the node is gone: no reply
                continue
            ids += super().push_messages([msg])
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        got = super().pull_messages(message_ids)
        self.pulled += got
        return got


def run_secure(
    cfg: ExperimentConfig,
    nodes: dict[int, dict[str, Any]],
    settings: SecAggSettings | None = None,
    drop_stage: Iterable[tuple[int, str]] = (),
) -> SecAggGrid:
    run_config = {RC_CONFIG: cfg.to_yaml(), RC_MODE: "secaggplus"}
    grid = SecAggGrid(nodes, run_config, drop_stage=drop_stage)
    opts = FlowerSettings(
        wait_nodes=1.0, reply_timeout=0.5, secagg=settings or SecAggSettings()
    )
    run_federation(grid, cfg, opts)
    return grid


@pytest.fixture
def uploads(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[Payload, float]]:
    """What each client would have uploaded in the clear, and max_weight."""
    seen: dict[str, tuple[Payload, float]] = {}
    real = secagg.fitres_content

    def spy(
        reply: Payload, cid: str, clipping_range: float, max_weight: float, equal: bool
    ) -> Any:
        seen[cid] = (reply, max_weight)
        return real(reply, cid, clipping_range, max_weight, equal)

    monkeypatch.setattr(secagg, "fitres_content", spy)
    return seen


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(
        float((a[k].double() - b[k].double()).abs().max())
        for k in b
        if b[k].is_floating_point()
    )


def bound_for(
    uploads: dict[str, tuple[Payload, float]], reference: dict[str, torch.Tensor]
) -> float:
    s = SecAggSettings()
    counts = [float(p.scalars["num_examples"]) for p, _ in uploads.values()]
    top = max(float(v.abs().max()) for v in reference.values() if v.is_floating_point())
    (weight,) = {w for _, w in uploads.values()}
    return error_bound(counts, weight, s.clipping_range, s.quantization_range, top)


def test_secagg_fedavg_equals_plain_within_the_bound_and_hides_uploads(
    tmp_path: Path, uploads: dict[str, tuple[Payload, float]]
) -> None:
    cfg = config(tmp_path / "flower", base=list(ONE_ROUND))
    # the hospitals' policies require SecAgg+: the run goes through them
    grid = run_secure(cfg, nodes_for(*CLIENTS, **{c[:10]: REQUIRE for c in CLIENTS}))
    assert records(cfg, "failure") == []
    reference = in_process(tmp_path, base=list(ONE_ROUND))
    secure, plain = final_state(cfg), final_state(reference)
    bound = bound_for(uploads, plain)
    assert sorted(uploads) == list(CLIENTS)
    diff = max_diff(secure, plain)
    print(f"SecAgg+ vs plain, 3 clients: max |diff| {diff:.3g}, bound {bound:.3g}")
    assert 0 < diff <= bound  # > 0: the aggregate came through the quantizer
    assert bound < 1e-5
    initial = {k: torch.from_numpy(v) for k, v in initial_weights(cfg).items()}
    moved = max_diff(plain, initial)
    assert moved > 1000 * bound  # the round did train and average something
    for cid, (reply, _) in uploads.items():  # the mean is no single upload
        mine = {k: torch.from_numpy(v) for k, v in reply.arrays["weights"].items()}
        assert max_diff(secure, mine) > 100 * bound, cid
    for k, v in plain.items():  # integer entries are not uploaded: kept
        if not v.is_floating_point():
            assert torch.equal(secure[k].reshape(-1), initial[k].reshape(-1)), k

    # what the coordinator received: no array in any reply, masked vectors only
    assert all(
        len(rec) == 0 for m in grid.pulled for rec in m.content.array_records.values()
    )
    collect = [m for m in grid.pulled if "secagg/index" in m.content.config_records]
    assert len(collect) == 3
    s = SecAggSettings()
    for msg in collect:
        cid = str(msg.content.config_records["fedpath"]["client"])
        reply, weight = uploads[cid]
        assert msg.content.metric_records["fitres.num_examples"]["num_examples"] == 0
        assert "num_examples" not in msg.content.config_records["scalars"]
        vectors = msg.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]
        assert isinstance(vectors, list)
        blobs = [b for b in vectors if isinstance(b, bytes)]
        assert len(blobs) == len(vectors)  # every masked vector arrives as bytes
        masked = np.concatenate([bytes_to_ndarray(b).ravel() for b in blobs])
        quantized = quantized_upload(reply, weight, s)
        assert masked.shape == quantized.shape
        # the plain quantized vector is floor(u) or ceil(u): a masked one is not
        offset = (masked - quantized) % s.modulus_range
        assert np.mean(offset <= 1) < 0.01, cid
        assert masked.max() > 2 * s.quantization_range  # spread over the modulus


def initial_weights(cfg: ExperimentConfig) -> dict[str, np.ndarray]:
    from fedpath.runtime.experiment import load_dataset, plan_runs
    from fedpath.runtime.inprocess import InProcessRun

    dataset = load_dataset(cfg.data)
    fold, seed = plan_runs(cfg, dataset)[0]
    run = InProcessRun(
        cfg, dataset, fold, seed, run_dir_for(cfg, fold.target, seed) / "init"
    )
    return dict(run.server.ctx.initial_weights)


def quantized_upload(reply: Payload, weight: float, s: SecAggSettings) -> np.ndarray:
    """Flower's quantization of one client's upload, before masking (floor)."""
    q = s.quantization_range
    q_ratio = round(float(reply.scalars["num_examples"]) / weight * q)
    entries = [
        v.astype(np.float64).ravel()
        for v in reply.arrays["weights"].values()
        if v.dtype.kind == "f"
    ]
    x = np.clip(
        np.concatenate(entries) * (q_ratio / q), -s.clipping_range, s.clipping_range
    )
    u = np.floor((x + s.clipping_range) * q / (2 * s.clipping_range))
    return np.concatenate([[q_ratio], u]).astype(np.int64)


def test_a_client_dropping_after_share_keys_is_unmasked_out_of_the_sum(
    tmp_path: Path, uploads: dict[str, tuple[Payload, float]]
) -> None:
    """hospital_2's node shares its keys, then is gone before the fit stage: the
    survivors' shares remove its pairwise masks; the result is FedAvg over the
    other two."""
    extra = "train.min_replies=1"
    cfg = config(tmp_path / "flower", extra, base=list(ONE_ROUND))
    dropped = (102, Stage.COLLECT_MASKED_VECTORS)
    run_secure(cfg, nodes_for(*CLIENTS), drop_stage=[dropped])
    failures = records(cfg, "failure")
    assert [(f["stage"], f["client"]) for f in failures] == [("fit", CLIENTS[2])]
    assert [r["failed"] for r in records(cfg, "round")] == [1]
    survivors = config(tmp_path / "plain", extra, base=list(ONE_ROUND))
    run_over_grid(survivors, nodes_for(*CLIENTS), drop=[(102, 1)])
    secure, plain = final_state(cfg), final_state(survivors)
    assert sorted(uploads) == list(CLIENTS[:2])
    bound = bound_for(uploads, plain)
    diff = max_diff(secure, plain)
    print(f"dropout: max |diff| {diff:.3g}, bound {bound:.3g}")
    assert 0 < diff <= bound


def test_what_secagg_cannot_carry_is_refused(tmp_path: Path) -> None:
    nodes = nodes_for(*CLIENTS)
    cfg = config(tmp_path / "stain", "algorithm.name=fedstain", base=list(ONE_ROUND))
    with pytest.raises(ConfigError, match="'secure-aggregation'.*'fedstain' uploads"):
        run_secure(cfg, nodes)
    pooled = config(tmp_path / "p", "algorithm.params.bn_buffers=pooled", base=FOUR)
    with pytest.raises(ConfigError, match="bn_buffers='pooled'"):
        run_secure(pooled, nodes)
    one = config(tmp_path / "one", "train.clients_per_round=1", base=FOUR)
    with pytest.raises(ConfigError, match="at least 2 clients per round"):
        run_secure(one, nodes)
    for key, value, expected in [
        (RC_MODE, "secagg", "one of"),
        ("secagg-modulus-range", 3 * 2**30, "a power of 2"),
        ("secagg-clipping-range", 0.0, "> 0"),
        ("secagg-reconstruction-threshold", 1.5, "a share of num-shares"),
        ("secagg-quantization-range", "big", "an integer"),
    ]:
        rc = {RC_MODE: "secaggplus", key: value}
        with pytest.raises(ConfigError, match=f"'{key}': expected {expected}"):
            FlowerSettings.from_run_config(rc)
    assert FlowerSettings.from_run_config({}).secagg is None
    s = FlowerSettings.from_run_config(
        {RC_MODE: "secaggplus", "secagg-num-shares": 3, "secagg-clipping-range": 4}
    ).secagg
    assert s == SecAggSettings(num_shares=3, clipping_range=4.0)
    with pytest.raises(ConfigError, match="would wrap around"):
        SecAggSettings(quantization_range=2**30).check_clients(4)


def test_a_node_requiring_secagg_refuses_plain_runs_and_stages(tmp_path: Path) -> None:
    cfg = config(tmp_path / "flower", base=list(ONE_ROUND))
    nodes = nodes_for(*CLIENTS, **{c[:10]: REQUIRE for c in CLIENTS})
    with pytest.raises(RuntimeError, match=r"policies refuse it.*require_secure_agg"):
        run_over_grid(cfg, nodes)  # every hello is refused
    # a plain fit message sent anyway gets an error reply naming the rule
    from flwr.app import Context, RecordDict

    context = Context(1, 7, {"client-id": CLIENTS[0], **REQUIRE}, RecordDict(), {})
    context.run_config[RC_CONFIG] = cfg.to_yaml()
    reply = client_app(stage_message(cfg, Payload({})), context)
    assert reply.has_error()
    assert "PolicyError: node policy refuses (require_secure_aggregation)" in (
        reply.error.reason or ""
    )
    assert "in the clear" in (reply.error.reason or "")
    from fedpath.runtime.guard import check_secure_aggregation

    stain = config(tmp_path, "algorithm.name=fedstain")
    policy = NodePolicy(require_secure_aggregation=True)
    with pytest.raises(PolicyError, match="secure aggregation cannot carry"):
        check_secure_aggregation(policy, stain, "secaggplus")
    assert "require_secure_aggregation" in policy.summary()


def test_a_node_requiring_secagg_answers_validation_in_the_clear(
    tmp_path: Path,
) -> None:
    """Round selection and calibration under SecAgg+: the weights leave masked,
    the validation metrics (and the shared predictions) in the clear."""
    over = ("partition.validation=0.3", "train.rounds=2")
    cfg = config(tmp_path / "flower", *over, base=list(FOUR))
    policy = NodePolicy(
        require_secure_aggregation=True, share_validation_predictions=True
    )
    strict = {NC_POLICY: policy.to_yaml()}
    run_secure(cfg, nodes_for(*CLIENTS, **{c[:10]: strict for c in CLIENTS}))
    assert records(cfg, "failure") == []
    assert len(records(cfg, "selection")) == 2
    run_dir = run_dir_for(cfg, "hospital_3", 0)
    final = json.loads((run_dir / "final.json").read_text())["evaluation"]
    assert final["calibrated"]["temperature"] > 0
    assert "left_out" not in final["calibrated"]["validation"]
    assert final["selected"]["round"] in (1, 2)


def test_error_bound_formula() -> None:
    # equal counts, W the largest: D = m, so 3 C / Q plus the float32 term
    c, q = 8.0, 2**22
    assert error_bound([48, 48, 48], 48, c, q) == pytest.approx(3 * c / q + 2**-23 * c)
    # a small weight next to a large W makes D small and the bound large
    assert error_bound([10, 10], 1000, c, q) > 50 * error_bound([10, 10], 10, c, q)


GROUP = "model.params.norm=group"  # DP: no BatchNorm running statistics


def test_dp_fedavg_sums_its_clipped_updates_with_equal_weights(
    tmp_path: Path, uploads: dict[str, tuple[Payload, float]]
) -> None:
    extra = ("algorithm.name=dp_fedavg", "algorithm.params.noise_multiplier=0", GROUP)
    cfg = config(tmp_path / "flower", *extra, base=list(ONE_ROUND))
    run_secure(cfg, nodes_for(*CLIENTS))
    assert records(cfg, "failure") == []
    plain = final_state(in_process(tmp_path, *extra, base=list(ONE_ROUND)))
    assert {w for _, w in uploads.values()} == {1.0}  # max_weight 1: equal
    top = max(float(v.abs().max()) for v in plain.values() if v.is_floating_point())
    s = SecAggSettings()
    bound = error_bound([1, 1, 1], 1, s.clipping_range, s.quantization_range, top)
    assert 0 < max_diff(final_state(cfg), plain) <= bound


def test_local_dp_noises_the_reply_that_secagg_masks(tmp_path: Path) -> None:
    from tests.flower_helpers import DP

    cfg = config(tmp_path / "flower", GROUP, base=list(ONE_ROUND))
    run_secure(cfg, nodes_for(*CLIENTS, hospital_0=DP, hospital_1=DP))
    assert records(cfg, "failure") == []
    plain = final_state(in_process(tmp_path, GROUP, base=list(ONE_ROUND)))
    assert max_diff(final_state(cfg), plain) > 1e-3  # noised, far beyond the bound
