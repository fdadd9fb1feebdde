"""fedpath over Flower equals fedpath in-process, over :class:`LoopbackGrid`
(``tests/flower_helpers.py``): a Flower ``Grid`` that hands every message, through
Flower's wire serialization, to the real ClientApp with one Context per node
(FlowerRun, the records and the ClientApp, without processes or sockets); the
same over Flower's deployment engine is in ``test_flower_processes.py``.

Equality is bit-exact (``torch.equal`` on every entry of the final global state,
identical evaluation records): the client halves run the same code on the same
data with the same seeds and one torch thread, the arrays travel as raw ``np.save``
bytes, and the server aggregates the replies in sorted client order whatever order
they arrive in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("flwr")

from fedpath.config import ExperimentConfig
from fedpath.runtime.experiment import run_dir_for
from fedpath.utils.io import read_jsonl
from tests.flower_helpers import (
    DP,
    FOUR,
    assert_same_run,
    config,
    final_state,
    in_process,
    nodes_for,
    records,
    run_over_grid,
)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedstain", "fedbn"])
def test_grid_run_equals_in_process(
    tmp_path: Path, task_identity: None, algorithm: str
) -> None:
    extra = f"algorithm.name={algorithm}"
    cfg = config(tmp_path / "flower", extra)
    run_over_grid(cfg, nodes_for("hospital_0/c0", "hospital_1/c0", "hospital_2/c0"))
    assert_same_run(cfg, in_process(tmp_path, extra))


def test_grid_partitions_of_one_hospital_equal_in_process(
    tmp_path: Path, task_identity: None
) -> None:
    extra = ("partition.clients_per_domain=2", "train.client_fraction=0.5")
    cfg = config(tmp_path / "flower", *extra)
    ids = ["hospital_0/c0", "hospital_0/c1", "hospital_1/c0", "hospital_1/c1"]
    run_over_grid(cfg, nodes_for(*ids))
    assert_same_run(cfg, in_process(tmp_path, *extra))


#: training-domain validation with an operating point (test_inprocess_selection.py)
VALIDATE = ("partition.validation=0.3", "evaluation.target_sensitivity=0.9")
SHARE = {"policy": "{share_validation_predictions: true}"}


def final_evaluation(cfg: ExperimentConfig) -> dict[str, Any]:
    run_dir = run_dir_for(cfg, cfg.lodo.targets[0], 0)
    return dict(json.loads((run_dir / "final.json").read_text())["evaluation"])


def test_training_domain_validation_over_flower(
    tmp_path: Path, task_identity: None
) -> None:
    """Round selection from the nodes' validation metrics equals in-process; the
    temperature and the operating point come from the predictions of the nodes
    whose policy shares them, and only from those."""
    ids = ("hospital_0/c0", "hospital_1/c0")
    ref = in_process(tmp_path, *VALIDATE)
    expected = final_evaluation(ref)
    assert "operating_point" in expected["selected"]

    every = config(tmp_path / "every", *VALIDATE)
    run_over_grid(every, nodes_for(*ids, hospital_0=SHARE, hospital_1=SHARE))
    assert_same_run(every, ref)  # the validation lines are eval lines
    assert [r["split"] for r in records(every, "eval")].count("validation") == 4
    assert records(every, "selection") == records(ref, "selection")
    assert final_evaluation(every) == expected
    # what left the nodes for validation: metrics each round, then predictions
    traffic = read_jsonl(run_dir_for(every, "hospital_2", 0) / "traffic.jsonl")
    sent = [t["sent"] for t in traffic if t["stage"] == "fedpath.validate"]
    assert len(sent) == 2 * 2 + 2 * 2  # 2 rounds + last and selected, 2 clients
    assert sent[:4] == [[]] * 4  # metrics are scalars
    shared = [[(g, k) for g, k, *_ in s] for s in sent[4:]]
    assert shared == [[("validation", "labels"), ("validation", "probs")]] * 4

    one = config(tmp_path / "one", *VALIDATE)
    run_over_grid(one, nodes_for(*ids, hospital_0=SHARE))
    got = final_evaluation(one)
    assert got["selected"]["round"] == expected["selected"]["round"]
    assert got["target"] == expected["target"]
    val = got["calibrated"]["validation"]
    assert list(val["left_out"]) == ["hospital_1/c0"]
    assert "share_validation_predictions is false" in val["left_out"]["hospital_1/c0"]
    assert 0 < val["n"] < expected["calibrated"]["validation"]["n"]
    assert got["operating_point"]["validation"]["sensitivity"] >= 0.9

    none = config(tmp_path / "none", *VALIDATE)
    run_over_grid(none, nodes_for(*ids))  # the default policy shares nothing
    got = final_evaluation(none)
    assert got["selected"]["round"] == expected["selected"]["round"]
    assert "calibrated" not in got and "operating_point" not in got
    assert "share_validation_predictions" in got["calibration_skipped"]
    assert "calibration_skipped" in got["selected"]


def test_failed_and_silent_clients_are_logged_and_rounds_go_on(
    tmp_path: Path, task_identity: None, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config(tmp_path / "flower", "train.min_replies=1", base=FOUR)
    nodes = nodes_for(
        "hospital_0/c0",
        "hospital_1/c0",
        "hospital_2/c0",
        hospital_1={"data-params": "{num_hospitals: 4, image_size: [32"},
    )
    with caplog.at_level("ERROR", logger="fedpath"):
        run_over_grid(cfg, nodes, drop=[(102, 2)])
    failures = records(cfg, "failure")
    assert [(f["round"], f["client"], f["node"]) for f in failures] == [
        (1, "hospital_1/c0", 101),
        (2, "hospital_1/c0", 101),
        (2, "hospital_2/c0", 102),
    ]
    assert "client hospital_1/c0 (node 101): ConfigError" in failures[0]["reason"]
    assert "data-params" in failures[0]["reason"]
    assert "no reply within reply-timeout=0.5 s" in failures[2]["reason"]
    assert [r["failed"] for r in records(cfg, "round")] == [1, 2]
    assert (run_dir_for(cfg, "hospital_3", 0) / "final.json").is_file()
    assert "client hospital_2/c0 (node 102) failed" in caplog.text


def test_a_node_that_comes_back_takes_part_again(
    tmp_path: Path, task_identity: None
) -> None:
    cfg = config(tmp_path / "flower", "train.min_replies=1", "train.rounds=3")
    nodes = nodes_for("hospital_0/c0", "hospital_1/c0")
    run_over_grid(cfg, nodes, drop=[(101, 2)])  # hospital_1 is down in round 2 only
    assert [r["failed"] for r in records(cfg, "round")] == [0, 1, 0]
    assert [(f["round"], f["client"]) for f in records(cfg, "failure")] == [
        (2, "hospital_1/c0")
    ]
    assert [r["clients"] for r in records(cfg, "round")] == [2, 2, 2]  # sampled


def test_on_failure_stop_then_resume_equals_uninterrupted(
    tmp_path: Path, task_identity: None
) -> None:
    cfg = config(tmp_path / "flower", base=FOUR)
    ids = ("hospital_0/c0", "hospital_1/c0", "hospital_2/c0")
    with pytest.raises(RuntimeError, match=r"client hospital_2/c0 \(node 102\) failed"):
        run_over_grid(cfg, nodes_for(*ids), drop=[(102, 2)], on_failure="stop")
    assert not (run_dir_for(cfg, "hospital_3", 0) / "final.json").exists()
    run_over_grid(cfg, nodes_for(*ids), resume=True)
    assert_same_run(cfg, in_process(tmp_path, base=FOUR))


def test_node_state_dir_makes_a_resumed_fedbn_run_exact(
    tmp_path: Path, task_identity: None
) -> None:
    """FedBN's local BatchNorm layers survive a coordinator resume (new Flower run)."""
    ids = ("hospital_0/c0", "hospital_1/c0", "hospital_2/c0")
    finals = {}
    for keep in (True, False):
        cfg = config(tmp_path / f"flower{keep}", "algorithm.name=fedbn", base=FOUR)
        disk = {"state-dir": str(tmp_path / f"node-state{keep}")} if keep else {}
        nodes = nodes_for(*ids, **{c.split("/")[0]: disk for c in ids})
        with pytest.raises(RuntimeError, match="failed"):
            run_over_grid(cfg, nodes, drop=[(102, 2)], on_failure="stop")
        run_over_grid(cfg, nodes, resume=True)  # fresh node contexts: a new run
        finals[keep] = cfg
    reference = in_process(tmp_path, "algorithm.name=fedbn", base=FOUR)
    assert_same_run(finals[True], reference)
    kept = sorted(
        f"{p.parent.name}/{p.name}"
        for p in (tmp_path / "node-stateTrue").rglob("round*.pt")
    )
    assert kept == [f"{c.replace('/', '_')}/round{r}.pt" for c in ids for r in (1, 2)]
    a, b = final_state(finals[False]), final_state(reference)
    assert not all(torch.equal(a[k], b[k]) for k in b)  # without: restarts


def test_too_few_replies_stop_the_run(tmp_path: Path, task_identity: None) -> None:
    cfg = config(tmp_path / "flower", "train.min_replies=2")
    with pytest.raises(RuntimeError, match="1 replies, fewer than train.min_replies=2"):
        run_over_grid(cfg, nodes_for("hospital_0/c0", "hospital_1/c0"), [(101, 1)])


def test_local_dp_noises_fedavg_replies(tmp_path: Path, task_identity: None) -> None:
    """Flower's LocalDpMod on the fit replies (GroupNorm: no running statistics)."""
    extra = "model.params.norm=group"
    cfg = config(tmp_path / "flower", extra)
    nodes = nodes_for("hospital_0/c0", "hospital_1/c0", hospital_0=DP, hospital_1=DP)
    run_over_grid(cfg, nodes)
    assert records(cfg, "failure") == []
    ref = in_process(tmp_path, extra)
    a, b = final_state(cfg), final_state(ref)
    assert not all(torch.equal(a[k], b[k]) for k in b)


def test_local_dp_refuses_multi_group_payloads(
    tmp_path: Path, task_identity: None
) -> None:
    """FedStain's fit message carries weights and the pool: two ArrayRecords."""
    cfg = config(tmp_path / "flower", "algorithm.name=fedstain")
    nodes = nodes_for("hospital_0/c0", "hospital_1/c0", hospital_0=DP)
    run_over_grid(cfg, nodes)
    failures = records(cfg, "failure")
    assert {(f["round"], f["stage"], f["client"]) for f in failures} == {
        (1, "fit", "hospital_0/c0"),
        (2, "fit", "hospital_0/c0"),
    }
    assert (
        "LocalDpMod expects exactly one ArrayRecord, but found 2"
        in (failures[0]["reason"])
    )


def test_consortium_model_over_flower_equals_in_process(
    tmp_path: Path, task_identity: None
) -> None:
    """Consortium mode (every hospital trains, docs/ship.md): the model file
    trained over the loopback grid, the validation slides on the nodes, holds
    the same weights, temperature, threshold and validation figures as the
    in-process one."""
    from fedpath.artifact import read_model_file

    extra = ("lodo.targets=none", *VALIDATE, "runtime.export=selected")
    ref = in_process(tmp_path, *extra)
    cfg = config(tmp_path / "flower", *extra)
    ids = ("hospital_0/c0", "hospital_1/c0", "hospital_2/c0")
    every = {c.split("/")[0]: SHARE for c in ids}
    run_over_grid(cfg, nodes_for(*ids, **every))
    a, wa = read_model_file(run_dir_for(cfg, "none", 0) / "model.fpm")
    b, wb = read_model_file(run_dir_for(ref, "none", 0) / "model.fpm")
    assert list(wa) == list(wb)
    for k in wb:
        assert torch.equal(wa[k], wb[k]), k
    assert b.temperature is not None and b.threshold is not None
    assert (a.temperature, a.threshold, a.round) == (
        b.temperature,
        b.threshold,
        b.round,
    )
    assert a.validation == b.validation and a.trained_on == b.trained_on
