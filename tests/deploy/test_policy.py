"""The node policy: a hospital's node refuses what its policy does not allow, with
an error reply naming the rule (a test per rule), whatever the coordinator asks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict

from fedpath import catalog
from fedpath.config import ConfigError
from fedpath.deploy.policy import (
    NC_POLICY,
    NON_PRIVATE,
    UPLOADS,
    NodePolicy,
    PolicyError,
    check_reply,
    check_run,
    check_stage,
    load_policy,
    node_policy,
    parse_policy,
    plain_upload_refusal,
)
from fedpath.runtime.flower import RC_CONFIG
from fedpath.runtime.flower.client_app import app as client_app
from fedpath.types import Payload
from tests.runtime.test_flower_loopback import (  # noqa: F401  (fixture)
    config,
    nodes_for,
    records,
    run_over_grid,
    stage_message,
    task_identity,
)

REFUSED = "no node serves this run: their node policies refuse"


def test_every_registered_algorithm_is_classified() -> None:
    # a new algorithm must say what it uploads before a node will serve it
    assert set(UPLOADS) == set(catalog.load()["algorithms"])
    assert {"central_supervised", "central_simclr", "pooled_mil"} == NON_PRIVATE


def test_default_policy_serves_the_private_algorithms_only() -> None:
    p = NodePolicy()
    assert all(p.serves(n) for n in UPLOADS if n not in NON_PRIVATE)
    assert not any(p.serves(n) for n in NON_PRIVATE)
    assert not p.serves("someones_plugin")  # unknown: treated as non-private
    opted = parse_policy({"allow_non_private": ["central_supervised"]}, "x")
    assert opted.serves("central_supervised") and not opted.serves("pooled_mil")
    only = parse_policy({"algorithms": ["fedavg"]}, "x")
    assert only.serves("fedavg") and not only.serves("fedstain")


def test_policy_file_and_flags(tmp_path: Path) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text("algorithms: [fedavg, fedstain]\nmax_rounds: 5\n")
    p = load_policy(f, ["central_simclr"])
    assert p.algorithms == ("fedavg", "fedstain") and p.max_rounds == 5
    assert p.allow_non_private == ("central_simclr",)
    assert "NON-PRIVATE algorithms opted in: central_simclr uploads" in p.summary()
    # travels in the node config as one line, read back identically
    assert "\n" not in p.to_yaml() and node_policy({NC_POLICY: p.to_yaml()}) == p
    assert node_policy({}) == NodePolicy()
    for text, expected in [
        ("max_upload_ratio: 2", "'max_upload_ratio': expected a number in [0, 1]"),
        ("algorithm: [fedavg]", "unknown config key 'algorithm'"),
        ("algorithms: [fedavgg]", "unknown algorithm(s) ['fedavgg']"),
        ("[1, 2]", "expected a mapping of policy keys"),
    ]:
        f.write_text(text)
        with pytest.raises(ConfigError, match=r"policy\.yaml'?: .*" + _re(expected)):
            load_policy(f)
    with pytest.raises(ConfigError, match="does not exist"):
        load_policy(tmp_path / "nope.yaml")


def _re(text: str) -> str:
    import re

    return re.escape(text)


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
    from tests.algorithms.test_fedhd import FEDHD
    from tests.algorithms.test_fedhd import TINY as BAGS

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


def test_supernode_cli_puts_the_policy_in_the_node_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedpath.cli import main

    f = tmp_path / "policy.yaml"
    f.write_text("algorithms: [fedavg, fedstain]\nmax_rounds: 20\n")
    base = ["flower", "supernode", "--superlink", "10.0.0.1:9092", "--insecure"]
    base += ["--client-id", "hospital_0/c0", "--dry-run", "--no-worker"]
    assert main([*base, "--policy", str(f), "--allow-non-private", "pooled_mil"]) == 0
    out, err = capsys.readouterr()
    assert "NON-PRIVATE algorithms opted in: pooled_mil uploads every real" in err
    line = next(tok for tok in out.split(" policy=") if tok.startswith('"{'))
    text = line.split('"')[1]
    assert node_policy({NC_POLICY: text}) == NodePolicy(
        algorithms=("fedavg", "fedstain"),
        allow_non_private=("pooled_mil",),
        max_rounds=20,
    )
    f.write_text("max_upload_ratio: 3\n")
    assert main([*base, "--policy", str(f)]) == 2
    assert "'max_upload_ratio': expected a number in [0, 1]" in capsys.readouterr().err
