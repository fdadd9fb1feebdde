"""What a node reads from its Flower Context: the run's experiment with the node's
data options applied, its client id, and error replies that name client and node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.app.user_config import UserConfig
from flwr.common.constant import ErrorCode

from fedpath.config import ConfigError, ExperimentConfig
from fedpath.errors import DataError
from fedpath.runtime.flower import META, PROTOCOL, RC_CONFIG
from fedpath.runtime.flower.node_context import (
    MAX_REASON,
    NodeError,
    error_reply,
    experiment_from_run_config,
    node_client_id,
    node_experiment,
    node_feature_cache,
    public_reason,
    yaml_mapping,
)
from fedpath.runtime.flower.worker_protocol import WorkerError
from tests.flower_helpers import config


def test_node_data_config_keeps_the_runs_params_for_the_same_dataset(
    tmp_path: Path,
) -> None:
    cfg = config(tmp_path, "data.params.image_size=24")

    def node(**nc: Any) -> ExperimentConfig:
        ctx = Context(1, 7, {"client-id": "h/c0", **nc}, RecordDict(), {})
        ctx.run_config[RC_CONFIG] = cfg.to_yaml()
        return node_experiment(ctx)

    same = node(**{"data-name": cfg.data.name, "data-root": "/srv/x", "threads": 3})
    assert same.data.params == cfg.data.params and same.data.root == "/srv/x"
    assert same.runtime.threads == 3
    other = node(**{"data-name": "manifest"})  # another dataset: its own defaults
    assert other.data.name == "manifest" and other.data.params != cfg.data.params
    # the coordinator does not choose where a node writes its feature cache
    steered = config(tmp_path, "runtime.feature_cache=/coordinator/says")
    ctx = Context(1, 7, {"client-id": "h/c0", "state-dir": "/var/h"}, RecordDict(), {})
    ctx.run_config[RC_CONFIG] = steered.to_yaml()
    assert node_experiment(ctx).runtime.feature_cache == "/var/h/feature_cache"
    assert str(node().runtime.feature_cache).endswith("fedpath/features")


def test_node_data_params_must_be_a_yaml_mapping(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    nc: UserConfig = {"client-id": "h/c0", "data-params": "[1, 2]"}
    ctx = Context(1, 7, nc, RecordDict(), {RC_CONFIG: cfg.to_yaml()})
    with pytest.raises(ConfigError, match="node config 'data-params': expected a"):
        node_experiment(ctx)


def test_node_threads_must_be_a_whole_number(tmp_path: Path) -> None:
    """A bad ``threads`` used to be int()'s ValueError (now a fedpath error, so
    its line may reach the coordinator)."""
    cfg = config(tmp_path)
    for bad in ("many", "-2", "1.5", True):
        nc: UserConfig = {"client-id": "h/c0", "threads": bad}
        ctx = Context(1, 7, nc, RecordDict(), {RC_CONFIG: cfg.to_yaml()})
        with pytest.raises(ConfigError, match="node config 'threads': expected a wh"):
            node_experiment(ctx)
    nc = {"client-id": "h/c0", "threads": 3}
    ctx = Context(1, 7, nc, RecordDict(), {RC_CONFIG: cfg.to_yaml()})
    assert node_experiment(ctx).runtime.threads == 3


def test_the_run_config_must_carry_the_experiment(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'fedpath-config' is empty"):
        experiment_from_run_config({})
    cfg = config(tmp_path)
    parsed = experiment_from_run_config({RC_CONFIG: cfg.to_yaml()})
    assert parsed.hash() == cfg.hash()
    # parsed once per process: the same frozen config for the same text
    assert experiment_from_run_config({RC_CONFIG: cfg.to_yaml()}) is parsed


def test_yaml_mapping_names_where_and_what() -> None:
    assert yaml_mapping("{a: 1}", "here", "a mapping", quote=True) == {"a": 1}
    with pytest.raises(ConfigError, match=r"^here: bad YAML '\{a: \[': "):
        yaml_mapping("{a: [", "here", "a mapping", quote=True)
    with pytest.raises(ConfigError, match=r"^here: expected a mapping, got '3'$"):
        yaml_mapping("3", "here", "a mapping", quote=True)
    with pytest.raises(ConfigError, match=r"^here: expected a mapping$"):
        yaml_mapping("3", "here", "a mapping", quote=False)  # no long echo


def test_node_client_id_is_required() -> None:
    assert node_client_id(Context(1, 9, {"client-id": "h/c1"}, RecordDict(), {})) == (
        "h/c1"
    )
    with pytest.raises(NodeError, match="node 9: node config has no 'client-id'"):
        node_client_id(Context(1, 9, {"client-id": ""}, RecordDict(), {}))


def test_feature_cache_is_the_nodes_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert node_feature_cache({"state-dir": "/s"}) == Path("/s/feature_cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert node_feature_cache({}) == tmp_path / "fedpath" / "features"


def _message() -> Message:
    msg = Message(
        RecordDict({META: ConfigRecord({"protocol": PROTOCOL})}),
        dst_node_id=9,
        message_type="train",
    )
    msg.metadata.__dict__["_message_id"] = msg.object_id
    return msg


def test_error_reply_names_client_and_node(
    task_identity: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = Context(1, 9, {"client-id": "h/c0"}, RecordDict(), {})
    reply = error_reply(_message(), ctx, DataError("manifest '/d/m.csv': no rows"))
    assert reply.has_error()
    assert reply.error.code == ErrorCode.CLIENT_APP_RAISED_EXCEPTION
    assert reply.error.reason == (
        "client h/c0 (node 9): DataError: manifest '/d/m.csv': no rows"
    )
    remote = error_reply(_message(), ctx, WorkerError("DataError: no 'x'"))
    assert remote.error.reason == "client h/c0 (node 9): DataError: no 'x'"
    nameless = Context(1, 9, {}, RecordDict(), {})
    reason = error_reply(_message(), nameless, NodeError("no id")).error.reason
    assert reason == "client ? (node 9): NodeError: no id"


SECRET = "root:x:0:0:TOP-SECRET"


def test_only_a_fedpath_errors_line_leaves_the_node(
    task_identity: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another exception's text may quote data (a parser's error shows the line
    it failed on): it leaves as its type only, its text and traceback stay in
    the node's log. A fedpath error leaves as one line, however it was written."""
    ctx = Context(1, 9, {"client-id": "h/c0"}, RecordDict(), {})

    def raised() -> ValueError:
        try:
            local = SECRET  # a local value a traceback would show
            raise ValueError(f"could not parse line 1: {local!r}")
        except ValueError as err:
            return err

    reason = error_reply(_message(), ctx, raised()).error.reason or ""
    assert reason == (
        "client h/c0 (node 9): ValueError (not a fedpath error: its text stays on "
        "the node; the node's log has the details)"
    )
    assert SECRET in caplog.text  # the node's own log keeps the detail
    assert public_reason(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")) == (
        "UnicodeDecodeError (not a fedpath error: its text stays on the node; the "
        "node's log has the details)"
    )
    assert public_reason(ConfigError("a\n  b")) == "ConfigError: a b"  # one line
    long = public_reason(DataError("x" * 5000))
    assert len(long) == MAX_REASON and long.endswith("...")
