"""The ClientApp: a stage message becomes the client half's reply; bad input, a
wrong header or a missing client id become an error reply naming client and
node; a resumed run finds the client state on the node's disk."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.app.user_config import UserConfig

from fedpath.runtime.flower import META, PROTOCOL, RC_CONFIG
from fedpath.runtime.flower.client_app import app as client_app
from fedpath.runtime.flower.client_app import (
    restore_state,
    stage_header,
    state_prefix,
)
from fedpath.runtime.flower.node_context import NodeError
from fedpath.runtime.flower.node_state import save_state
from fedpath.runtime.flower.records import payload_to_records
from fedpath.types import ClientState, Payload
from tests.flower_helpers import (
    config,
    nodes_for,
    records,
    run_over_grid,
    stage_message,
    wire,
)


@pytest.mark.parametrize(
    ("node_config", "header", "payload", "expected"),
    [
        ({"data-name": "manifest", "data-root": "/no/such/dir"}, {}, None, "no/such"),
        ({"data-params": "{image_size: [32"}, {}, None, "bad YAML"),
        ({"data-params": "[1, 2]"}, {}, None, "expected a YAML mapping"),
        ({}, {"classes": ["benign", "malignant"]}, None, "classes ['normal', 'tum"),
        ({}, {}, {"conv1.weight": np.zeros((3, 3))}, "entries the model lacks"),
        # torch's own error (not a fedpath one): its type only leaves the node
        ({}, {}, "wrong-shape", "RuntimeError (not a fedpath error"),
        ({}, {"client": "hospital_1/c0"}, None, "the message is for hospital_1/c0"),
        ({}, {"protocol": 99}, None, "coordinator speaks protocol 99"),
        ({}, {"stage": "distill"}, None, "has no stage 'distill'"),
    ],
)
def test_bad_input_on_a_node_is_an_error_reply_naming_it(
    tmp_path: Path,
    task_identity: None,
    node_config: dict[str, Any],
    header: dict[str, Any],
    payload: Any,
    expected: str,
) -> None:
    import fedpath.models.backbones as backbones
    from fedpath.config import ModelConfig

    cfg = config(tmp_path)
    model = backbones.build_model(
        ModelConfig("small_cnn", None, {"widths": [8, 16]}), 2
    )
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    if payload == "wrong-shape":
        name = next(k for k, v in weights.items() if v.ndim == 4)
        weights[name] = np.zeros((1, *weights[name].shape[1:]), np.float32)
    elif payload is not None:
        weights = payload
    msg = stage_message(cfg, Payload({"weights": weights}), **header)
    context = Context(
        1, 7, {"client-id": "hospital_0/c0", **node_config}, RecordDict(), {}
    )
    context.run_config[RC_CONFIG] = cfg.to_yaml()
    reply = client_app(msg, context)
    assert reply.has_error()
    reason = reply.error.reason or ""
    assert reason.startswith("client hospital_0/c0 (node 7): "), reason
    assert expected in reason, reason


def test_node_without_client_id_says_so(task_identity: None) -> None:
    hello = Message(
        RecordDict({META: ConfigRecord({"protocol": PROTOCOL})}),
        dst_node_id=9,
        message_type="query.hello",
    )
    hello.metadata.__dict__["_message_id"] = hello.object_id
    reply = client_app(wire(hello), Context(1, 9, {}, RecordDict(), {}))
    assert reply.has_error()
    assert "node 9: node config has no 'client-id'" in (reply.error.reason or "")


def _header(**fields: Any) -> RecordDict:
    base: dict[str, Any] = {
        "protocol": PROTOCOL,
        "client": "h/c0",
        "stage": "fit",
        "round": 1,
    }
    return RecordDict({META: ConfigRecord({**base, **fields})})


def test_stage_header_is_checked_before_anything_runs() -> None:
    ctx = Context(1, 7, {"client-id": "h/c0"}, RecordDict(), {})
    assert stage_header(_header(), ctx, "h/c0")["stage"] == "fit"
    with pytest.raises(NodeError, match="client h/c0: message without the 'fedpath'"):
        stage_header(RecordDict(), ctx, "h/c0")
    with pytest.raises(NodeError, match="coordinator speaks protocol 1, this node"):
        stage_header(_header(protocol=1), ctx, "h/c0")
    with pytest.raises(NodeError, match="node 7 serves client h/c0, but the message"):
        stage_header(_header(client="h/c1"), ctx, "h/c0")


def test_a_resumed_run_restores_the_state_from_the_nodes_disk(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    nc: UserConfig = {"client-id": "h/c0", "state-dir": str(tmp_path / "node")}
    disk = ClientState({"local": {"w": np.full(3, 2.0, np.float32)}}, {"s": 1.0})
    save_state(tmp_path / "node", cfg, "h/c0", "hospital_2", 0, 1, disk)
    fresh = Context(1, 7, nc, RecordDict(), {})
    got = restore_state(fresh, cfg, "h/c0", "hospital_2", 0, 2)
    np.testing.assert_array_equal(got.arrays["local"]["w"], disk.arrays["local"]["w"])
    assert got.scalars == {"s": 1.0}
    # round 1 starts fresh; a node without state-dir keeps nothing on disk
    assert restore_state(fresh, cfg, "h/c0", "hospital_2", 0, 1).arrays == {}
    plain = Context(1, 7, {"client-id": "h/c0"}, RecordDict(), {})
    assert restore_state(plain, cfg, "h/c0", "hospital_2", 0, 2).arrays == {}
    # the state of this Flower run (context.state) wins over the disk
    live = ClientState({"local": {"w": np.zeros(3, np.float32)}}, {})
    running = Context(1, 7, nc, RecordDict(), {})
    assert state_prefix("hospital_2", 0) == "state/hospital_2/0/"
    payload_to_records(live, running.state, state_prefix("hospital_2", 0))
    kept = restore_state(running, cfg, "h/c0", "hospital_2", 0, 2)
    np.testing.assert_array_equal(kept.arrays["local"]["w"], np.zeros(3))


SECRET = "root:x:0:0:TOP-SECRET-FIRST-LINE"


def test_a_nodes_data_error_reaches_the_coordinator_without_file_content(
    tmp_path: Path,
    task_identity: None,
) -> None:
    """A node whose manifest is some other file (here a passwd-like one): the
    coordinator learns which file and what is wrong with it, never its lines."""
    data = tmp_path / "node1"
    data.mkdir()
    (data / "passwd").write_text(f"{SECRET}\nbin:x:1:1::/bin:/usr/sbin/nologin\n")
    cfg = config(tmp_path / "flower", "train.min_replies=1")
    nodes = nodes_for("hospital_0/c0", "hospital_1/c0")
    nodes[101].update(
        {
            "data-name": "manifest",
            "data-root": str(data),
            "data-params": "{path: passwd}",
        }
    )
    run_over_grid(cfg, nodes)  # goes on with hospital_0 (min_replies=1)
    failures = records(cfg, "failure")
    assert failures and {f["client"] for f in failures} == {"hospital_1/c0"}
    for failure in failures:
        reason = failure["reason"]
        assert "DataError: manifest" in reason and "passwd" in reason, reason
        assert SECRET not in reason and "root:x" not in reason


def test_a_non_fedpath_error_leaves_the_node_as_its_type_only(
    tmp_path: Path,
    task_identity: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import fedpath.runtime.flower.client_app as client_app_module

    def leaky(cfg: Any) -> Any:
        secret = SECRET  # a local a traceback would show
        raise ValueError(f"cannot parse {secret!r}")

    monkeypatch.setattr(client_app_module, "node_dataset", leaky)
    cfg = config(tmp_path / "flower")
    nodes = nodes_for("hospital_0/c0", "hospital_1/c0")
    with pytest.raises(RuntimeError, match="on-failure=stop") as err:
        run_over_grid(cfg, nodes, on_failure="stop")
    assert "ValueError (not a fedpath error" in str(err.value)
    assert SECRET not in str(err.value)
    (failure,) = records(cfg, "failure")
    assert "ValueError (not a fedpath error" in failure["reason"]
    assert SECRET not in failure["reason"]
    assert SECRET in caplog.text  # on the node's own log only


DIVERGE = ("train.optimizer=sgd", "train.lr=1e12", "train.schedule=constant")


def test_a_diverging_node_sends_the_in_process_error_line(
    tmp_path: Path,
    task_identity: None,
) -> None:
    """A node whose local loss stops being finite answers with the in-process
    run's RunError line (round, client, loss, setting), not an anonymous
    FloatingPointError, and the coordinator stops with it."""
    cfg = config(tmp_path / "flower", *DIVERGE)
    nodes = nodes_for("hospital_0/c0", "hospital_1/c0")
    with pytest.raises(RuntimeError, match="on-failure=stop") as err:
        run_over_grid(cfg, nodes, on_failure="stop")
    text = str(err.value)
    expected = r"RunError: round 1: client hospital_\d/c0: local loss became "
    assert re.search(expected, text), text
    assert "the training diverged; lower train.lr (now 1e+12)" in text
    assert "FloatingPointError" not in text
    (failure,) = records(cfg, "failure")
    assert re.search(expected, failure["reason"])
