"""The node guard: a hospital's node refuses what its policy does not allow, with
an error reply naming the rule (a test per rule), whatever the coordinator asks.
Every decision comes from the algorithm's declared wire facts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict

from fedpath.algorithms.base import register_algorithm
from fedpath.algorithms.fedavg import FedAvgServer, WeightsClient
from fedpath.config import ConfigError
from fedpath.registry import ALGORITHMS
from fedpath.runtime.flower import RC_CONFIG
from fedpath.runtime.flower.client_app import app as client_app
from fedpath.runtime.guard import (
    CAP_RULES,
    audit_policy,
    check_reply,
    check_run,
    check_secure_aggregation,
    check_stage,
    image_shaped,
    non_private_upload,
    plain_upload_refusal,
)
from fedpath.runtime.rules import (
    NC_POLICY,
    NodePolicy,
    PolicyError,
    node_policy,
    parse_policy,
)
from fedpath.schema import Checked
from fedpath.types import Payload
from fedpath.wire import CAPS, Wire
from tests.flower_helpers import (
    config,
    nodes_for,
    records,
    run_over_grid,
    stage_message,
)

REFUSED = "no node serves this run: their node policies refuse"


@pytest.mark.parametrize(
    ("policy", "overrides", "rule"),
    [
        ({}, ["algorithm.name=central_supervised"], "allow_non_private"),
        ({}, ["algorithm.name=fedstain", "algorithm.params.upload_ratio=1.0"],
         "max_upload_ratio"),
        ({"algorithms": ["fedavg"]}, ["algorithm.name=fedprox"], "algorithms"),
        ({"max_rounds": 1}, ["train.rounds=2"], "max_rounds"),
        ({"min_stats_noise": 0.5}, ["algorithm.name=fedstain"], "min_stats_noise"),
    ],
)  # fmt: skip
def test_check_run_names_the_rule(
    tmp_path: Path, policy: dict[str, Any], overrides: list[str], rule: str
) -> None:
    cfg = config(tmp_path, *overrides)
    with pytest.raises(PolicyError, match=f"node policy refuses \\({rule}\\)"):
        check_run(parse_policy(policy, "x"), cfg)


def test_min_stats_noise_is_met_by_a_noised_run(tmp_path: Path) -> None:
    policy = parse_policy({"min_stats_noise": 0.5}, "x")
    check_run(policy, config(tmp_path, "algorithm.name=fedccrl",
                             "algorithm.params.stats_noise=0.5"))  # fmt: skip
    check_run(policy, config(tmp_path, "algorithm.name=fedavg"))  # no statistics


def test_fedhd_tokens_cap() -> None:
    from fedpath.config import load_config
    from tests.mil_helpers import FEDHD
    from tests.mil_helpers import TINY as BAGS

    cfg = load_config(None, [*BAGS, *FEDHD, "algorithm.params.tokens=64"])
    check_run(parse_policy({"max_tokens": 64}, "x"), cfg)
    with pytest.raises(PolicyError, match=r"\(max_tokens\): algorithm.params.tokens"):
        check_run(parse_policy({"max_tokens": 63}, "x"), cfg)


def test_stages_and_replies(tmp_path: Path) -> None:
    cfg = config(tmp_path, "algorithm.name=central_supervised")
    default, opted = (
        NodePolicy(),
        parse_policy({"allow_non_private": [cfg.algorithm.name]}, "x"),
    )
    with pytest.raises(PolicyError, match=r"\(allow_non_private\): stage 'upload'"):
        check_stage(default, cfg, "upload")
    check_stage(opted, cfg, "upload")
    with pytest.raises(PolicyError, match=r"\(stages\): stage 'exfiltrate'"):
        check_stage(opted, cfg, "exfiltrate")
    images = Payload({"pool": {"x": np.zeros((4, 3, 32, 32), np.uint8)}})
    check_reply(opted, cfg, "upload", images, 32)  # opted in: may leave
    for stage in ("fit", "stats"):  # anything else: an image never leaves
        with pytest.raises(PolicyError, match=r"\(images\): .* pool/x has shape"):
            check_reply(opted, cfg, stage, images, 32)
    hwc = Payload({"weights": {"w": np.zeros((2, 32, 32, 3), np.float32)}})
    with pytest.raises(PolicyError, match=r"\(images\)"):
        check_reply(default, cfg, "fit", hwc, 32)
    weights = Payload(
        {"weights": {"fc": np.zeros((32, 32)), "conv": np.zeros((8, 3, 3, 3))}}
    )
    check_reply(default, cfg, "fit", weights, 32)  # a 32 x 32 matrix is no image
    stats = Payload({"stats": {"moments": np.zeros((7, 12))}})
    check_reply(parse_policy({"max_statistics": 7}, "x"), cfg, "stats", stats, 32)
    with pytest.raises(PolicyError, match=r"\(max_statistics\): .* 7 rows"):
        check_reply(parse_policy({"max_statistics": 6}, "x"), cfg, "stats", stats, 32)
    slides = Payload({"synthetic": {"sizes": np.array([50, 80])}})
    with pytest.raises(PolicyError, match=r"\(max_tokens\): a synthetic slide of 80"):
        check_reply(parse_policy({"max_tokens": 64}, "x"), cfg, "distill", slides, None)


def test_validation_predictions_are_the_hospitals_choice() -> None:
    """The validation stage answers metrics in the clear even under SecAgg+;
    its predictions leave only with share_validation_predictions."""
    strict = parse_policy({"require_secure_aggregation": True}, "x")
    for stage in ("fedpath.evaluate", "fedpath.validate"):
        assert plain_upload_refusal(strict, stage) is None
    refusal = plain_upload_refusal(strict, "fit")
    assert refusal is not None and "require_secure_aggregation" in str(refusal)
    assert NodePolicy().share_validation_predictions is False
    sharing = parse_policy({"share_validation_predictions": True}, "x")
    assert "share_validation_predictions" in sharing.summary()
    assert "share_validation_predictions" not in NodePolicy().summary()
    assert node_policy({NC_POLICY: sharing.to_yaml()}) == sharing
    with pytest.raises(ConfigError, match="share_validation_predictions"):
        parse_policy({"share_validation_predictions": "sometimes"}, "x")


# ------------------------------------------------------------- through the ClientApp


@pytest.mark.usefixtures("task_identity")
def test_a_stage_message_for_a_refused_algorithm_is_an_error_reply(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path, "algorithm.name=central_supervised")
    msg = stage_message(cfg, Payload(), stage="upload")
    context = Context(1, 7, {"client-id": "hospital_0/c0"}, RecordDict(), {})
    context.run_config[RC_CONFIG] = cfg.to_yaml()
    reply = client_app(msg, context)
    assert reply.has_error()
    reason = reply.error.reason or ""
    assert reason.startswith("client hospital_0/c0 (node 7): PolicyError: node policy")
    assert "central_supervised' uploads every training image and its label" in reason


@pytest.mark.usefixtures("task_identity")
def test_loopback_refuses_a_non_private_run_and_serves_it_when_opted_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config(tmp_path / "refused", "algorithm.name=central_supervised")
    with pytest.raises(RuntimeError, match=REFUSED):
        run_over_grid(cfg, nodes_for("hospital_0/c0", "hospital_1/c0"), wait_nodes=0.5)
    refusals = [
        r.getMessage() for r in caplog.records if "policy refuses" in r.getMessage()
    ]
    assert len(refusals) >= 2 and "allow_non_private" in refusals[0]

    opted = {NC_POLICY: NodePolicy(allow_non_private=("central_supervised",)).to_yaml()}
    cfg = config(tmp_path / "opted", "algorithm.name=central_supervised")
    nodes = nodes_for(
        "hospital_0/c0", "hospital_1/c0", hospital_0=opted, hospital_1=opted
    )
    run_over_grid(cfg, nodes)
    assert records(cfg, "failure") == [] and records(cfg, "eval")


@pytest.mark.usefixtures("task_identity")
def test_loopback_refuses_a_raised_upload_ratio(tmp_path: Path) -> None:
    cfg = config(
        tmp_path, "algorithm.name=fedstain", "algorithm.params.upload_ratio=1.0"
    )
    with pytest.raises(RuntimeError, match=REFUSED):
        run_over_grid(cfg, nodes_for("hospital_0/c0", "hospital_1/c0"), wait_nodes=0.5)


# ------------------------------------------------------- decisions from the facts


@dataclass(frozen=True)
class CappedParams(Checked):
    config_section = "algorithm.params"

    upload_ratio: float = 0.1
    tokens: int = 10


@pytest.fixture
def capped() -> Iterator[str]:
    """A plugin algorithm registered at run time that declares statistics and
    binds two of its params to the node's caps."""
    name = "toy_capped"
    wire = Wire(
        "toy statistics",
        {"stats": "statistics", "fit": "weights"},
        caps={"upload_ratio": "max_upload_ratio", "tokens": "max_tokens"},
    )
    register_algorithm(name, WeightsClient, FedAvgServer, CappedParams, wire=wire)
    yield name
    ALGORITHMS.unregister(name)


def test_caps_bind_the_params_an_algorithm_declares(
    tmp_path: Path, capped: str
) -> None:
    policy = NodePolicy()
    assert policy.serves(capped)  # private by its facts: served by default
    check_run(policy, config(tmp_path, f"algorithm.name={capped}"))
    big = config(tmp_path, f"algorithm.name={capped}", "algorithm.params.tokens=11")
    check_run(parse_policy({"max_tokens": 11}, "x"), big)
    with pytest.raises(PolicyError, match=r"\(max_tokens\): algorithm.params.tokens"):
        check_run(parse_policy({"max_tokens": 10}, "x"), big)
    many = config(
        tmp_path, f"algorithm.name={capped}", "algorithm.params.upload_ratio=0.5"
    )
    with pytest.raises(PolicyError, match=r"upload_ratio=0.5 asks for the stat"):
        check_run(policy, many)
    # a cap binds only the params an algorithm names: desa has tokens too
    assert _facts("desa")["caps"] == {} and _facts("fedhd")["caps"] == {
        "tokens": "max_tokens"
    }


def _facts(name: str) -> dict[str, Any]:
    facts = ALGORITHMS.facts(name)
    assert facts is not None
    return facts


def test_every_cap_has_a_rule() -> None:
    assert tuple(CAP_RULES) == CAPS


def test_require_dp_and_max_dp_clip(tmp_path: Path) -> None:
    dp = config(tmp_path, "algorithm.name=dp_fedavg", "algorithm.params.clip=2.0")
    check_run(parse_policy({"max_dp_clip": 2.0, "require_dp": True}, "x"), dp)
    with pytest.raises(PolicyError, match=r"\(max_dp_clip\): algorithm.params.clip=2,"):
        check_run(parse_policy({"max_dp_clip": 1.0}, "x"), dp)
    with pytest.raises(PolicyError, match=r"\(require_dp\): .* run one of dp_fedavg,"):
        check_run(parse_policy({"require_dp": True}, "x"), config(tmp_path))
    quiet = config(
        tmp_path, "algorithm.name=dp_fedavg", "algorithm.params.noise_multiplier=0"
    )
    with pytest.raises(PolicyError, match="clips but adds no noise"):
        check_run(parse_policy({"require_dp": True}, "x"), quiet)


def test_secure_aggregation_carries_what_declares_it(tmp_path: Path) -> None:
    strict = parse_policy({"require_secure_aggregation": True}, "x")
    check_secure_aggregation(strict, config(tmp_path), "secaggplus")
    with pytest.raises(PolicyError, match="sends its weights in the clear"):
        check_secure_aggregation(strict, config(tmp_path), "none")
    stain = config(tmp_path, "algorithm.name=fedstain")
    with pytest.raises(PolicyError, match=r"run one of dp_fedavg, fedavg, fedavg_mil"):
        check_secure_aggregation(strict, stain, "secaggplus")
    check_secure_aggregation(NodePolicy(), stain, "none")  # not required: no check


def test_raw_data_is_what_the_facts_say() -> None:
    assert non_private_upload("pooled_mil") == (
        "every real slide's patch embeddings and label"
    )
    assert non_private_upload("fedavg") is None
    assert non_private_upload("someones_plugin") is None
    assert audit_policy("central_simclr").allow_non_private == ("central_simclr",)
    assert audit_policy("fedstain").allow_non_private == ()
    assert image_shaped((2, 3, 8, 8), 8) and image_shaped((2, 8, 8, 3), 8)
    assert not image_shaped((8, 8), 8) and not image_shaped((2, 8, 8, 5), 8)
