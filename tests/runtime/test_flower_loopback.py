"""fedpath over Flower equals fedpath in-process.

Two layers:

- fast: :class:`LoopbackGrid`, a Flower ``Grid`` that hands every message, through
  Flower's wire serialization, to the real ClientApp with one Context per node
  (FlowerRun, the records and the ClientApp, without processes or sockets);
- slow: Flower's deployment engine itself, a SuperLink and SuperNodes started as
  subprocesses on free ports (insecure, nodes with fedpath's persistent worker and
  self-declared client ids; TLS + SuperNode authentication + the client registry,
  plain Flower nodes), runs launched with ``flwr run``, a node killed mid-run, a
  failed run's exit status through ``fedpath flower run``.

Equality is bit-exact (``torch.equal`` on every entry of the final global state,
identical evaluation records): the client halves run the same code on the same
data with the same seeds and one torch thread, the arrays travel as raw ``np.save``
bytes, and the server aggregates the replies in sorted client order whatever order
they arrive in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_object import (
    get_all_nested_objects,
)
from flwr.supercore.inflatable.inflatable_utils import (
    inflate_object_from_contents,
)
from flwr.supercore.task_identity import TaskIdentity

from fedpath.config import ExperimentConfig, load_config
from fedpath.deploy import flwr_cli, pki, processes
from fedpath.runtime.experiment import run_dir_for, run_experiment
from fedpath.runtime.flower import (
    META,
    PROTOCOL,
    RC_CONFIG,
    RC_REGISTRY,
    RC_REPLY_TIMEOUT,
    RC_SELF_DECLARED,
    RC_WAIT_NODES,
)
from fedpath.runtime.flower.client_app import app as client_app
from fedpath.runtime.flower.identity import NC_IDENTITY_KEY
from fedpath.runtime.flower.nodes import FlowerSettings
from fedpath.runtime.flower.records import payload_to_records
from fedpath.runtime.flower.server_app import run_federation
from fedpath.types import Payload
from fedpath.utils.io import read_jsonl
from tests.flower_helpers import register_node, run_logs

TINY = [
    "data.params.num_hospitals=3",
    "data.params.samples_per_hospital=48",
    "data.params.image_size=32",
    "data.params.slides_per_hospital=4",
    "model.params.widths=[8,16]",
    "train.rounds=2",
    "train.batch_size=16",
    "train.eval_batch_size=64",
    "seeds=[0]",
    "runtime.threads=1",
    "lodo.targets=[hospital_2]",
    "partition.clients_per_domain=1",
]
#: four hospitals, three source clients (the node-failure tests)
FOUR = [*TINY, "data.params.num_hospitals=4", "lodo.targets=[hospital_3]"]


def config(out: Path, *extra: str, base: list[str] = TINY) -> ExperimentConfig:
    return load_config(None, [*base, f"output_dir={out}", *extra])


def final_state(cfg: ExperimentConfig) -> dict[str, torch.Tensor]:
    ckpt = torch.load(
        run_dir_for(cfg, cfg.lodo.targets[0], 0) / "checkpoint.pt", weights_only=True
    )
    return dict(ckpt["server"]["arrays"]["weights"])


def records(cfg: ExperimentConfig, kind: str) -> list[dict[str, Any]]:
    path = run_dir_for(cfg, cfg.lodo.targets[0], 0) / "results.jsonl"
    return [r for r in read_jsonl(path) if r["kind"] == kind]


def assert_same_run(flower: ExperimentConfig, inproc: ExperimentConfig) -> None:
    a, b = final_state(flower), final_state(inproc)
    assert list(a) == list(b)
    for k in b:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    assert records(flower, "eval") == records(inproc, "eval")
    for ra, rb in zip(records(flower, "round"), records(inproc, "round"), strict=True):
        assert ra["failed"] == 0
        assert {k: ra[k] for k in rb} == rb  # same losses, pool sizes, payload bytes


def in_process(tmp: Path, *extra: str, base: list[str] = TINY) -> ExperimentConfig:
    cfg = config(tmp / "inproc", *extra, base=base)
    run_experiment(cfg)
    return cfg


# --------------------------------------------------------------------------- fast


def wire(msg: Message) -> Message:
    """The message as the receiver gets it (deflated and inflated by Flower)."""
    contents = {oid: o.deflate() for oid, o in get_all_nested_objects(msg).items()}
    out = inflate_object_from_contents(msg.object_id, contents)
    assert isinstance(out, Message)
    return out


class LoopbackGrid(Grid):
    """A Grid whose nodes are ClientApp calls in this process (one Context each)."""

    def __init__(
        self,
        node_configs: dict[int, dict[str, Any]],
        run_config: dict[str, Any],
        drop: Iterable[tuple[int, int]] = (),
    ) -> None:
        self.contexts = {
            n: Context(1, n, dict(nc), RecordDict(), dict(run_config))
            for n, nc in node_configs.items()
        }
        self.drop = set(drop)  # (node, round): no reply, as a dead node
        self.replies: dict[str, Message] = {}

    def set_run(self, run: Any) -> None:
        raise NotImplementedError

    @property
    def run(self) -> Any:
        raise NotImplementedError

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        raise NotImplementedError

    def get_node_ids(self) -> list[int]:
        return sorted(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = msg.object_id  # as Flower's grids
            ids.append(msg.metadata.message_id)
            node = msg.metadata.dst_node_id
            header = msg.content.config_records[META]
            if (node, header.get("round")) in self.drop:
                continue
            received = wire(msg)
            received.metadata.__dict__["_message_id"] = msg.metadata.message_id
            reply = client_app(received, self.contexts[node])
            self.replies[msg.metadata.message_id] = wire(reply)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        raise AssertionError("FlowerRun must not use the 3-second polling loop")


@pytest.fixture
def task_identity() -> Iterator[None]:
    """Messages built outside a Flower process need a run and node identity."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def run_over_grid(
    cfg: ExperimentConfig,
    nodes: dict[int, dict[str, Any]],
    drop: Iterable[tuple[int, int]] = (),
    **settings: Any,
) -> list[dict[str, Any]]:
    grid = LoopbackGrid(nodes, {RC_CONFIG: cfg.to_yaml()}, drop)
    opts = {"wait_nodes": 1.0, "reply_timeout": 0.5, **settings}
    return run_federation(grid, cfg, FlowerSettings(**opts))


def nodes_for(*clients: str, **extra: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {
        100 + i: {"client-id": c, **extra.get(c.split("/")[0], {})}
        for i, c in enumerate(clients)
    }


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


#: training-domain validation with an operating point (tests/runtime/test_inprocess.py)
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


def stage_message(cfg: ExperimentConfig, payload: Payload, **header: Any) -> Message:
    content = payload_to_records(payload)
    content[META] = ConfigRecord(
        {
            "protocol": PROTOCOL,
            "stage": "fit",
            "round": 1,
            "client": "hospital_0/c0",
            "seed": 0,
            "target": "hospital_2",
            "sources": ["hospital_0", "hospital_1"],
            "classes": ["normal", "tumour"],
            **header,
        }
    )
    msg = Message(content, dst_node_id=7, message_type="train")
    msg.metadata.__dict__["_message_id"] = msg.object_id
    return wire(msg)


DP = {"dp-clipping-norm": 1.0, "dp-epsilon": 5.0, "dp-delta": 1e-5}


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


# --------------------------------------------------------------------------- slow


@dataclass
class Federation:
    root: Path
    address: str
    home: Path
    app: Path
    connection: str
    services: list[processes.Service]
    #: client id -> public key line when the nodes sign their hellos (keys
    #: given to start_federation); None: the runs allow self-declared ids
    registry: dict[str, str] | None = None

    def run(
        self, cfg: ExperimentConfig, timeout: float = 300.0, **run_config: Any
    ) -> int:
        values = {
            RC_CONFIG: cfg.to_yaml(),
            RC_REPLY_TIMEOUT: 120.0,
            RC_WAIT_NODES: 60.0,
            **self.identity(),
            **run_config,
        }
        run_id = flwr_cli.start_run(self.app, self.connection, self.home, values)
        final = run_dir_for(cfg, cfg.lodo.targets[0], 0) / "final.json"
        try:
            flwr_cli.wait_run(
                run_id, self.connection, self.home, timeout, done=final.is_file
            )
        except processes.DeployError as err:
            logs = run_logs(run_id, self.connection, self.home)
            raise AssertionError(f"{err}\n--- run logs:\n{logs[-4000:]}") from None
        status = flwr_cli.run_status(run_id, self.connection, self.home)
        assert final.is_file(), (
            f"run {run_id} {status}:\n"
            f"{run_logs(run_id, self.connection, self.home)[-4000:]}"
        )
        return run_id

    def identity(self) -> dict[str, Any]:
        """The run-config keys of the client ids: the registry, or the opt-out."""
        if self.registry is None:
            return {RC_SELF_DECLARED: True}
        return {RC_REGISTRY: yaml.safe_dump(self.registry, width=10**6)}

    def stop(self) -> None:
        for svc in reversed(self.services):
            svc.stop()


def start_federation(
    root: Path,
    clients: Iterable[str],
    tls: pki.TlsFiles | None = None,
    keys: dict[str, tuple[Path, Path]] | None = None,
    worker: bool = True,
) -> Federation:
    """SuperLink + one SuperNode per client; ``worker=False``: plain Flower nodes."""
    link, address = processes.start_superlink(
        root / "link", tls=tls, node_auth=keys is not None
    )
    fed = Federation(
        root,
        address,
        root / "cli",
        flwr_cli.write_app(root / "app"),
        "test",
        [link],
    )
    try:
        flwr_cli.write_connection(
            fed.home, "test", address, tls.ca_cert if tls is not None else None
        )
        for i, cid in enumerate(clients):
            key = None
            node_config = {"client-id": cid}
            if keys is not None:
                key, public = keys[cid]
                register_node(public, "test", fed.home)
                # the node signs its hellos with its key: the runs use a registry
                node_config[NC_IDENTITY_KEY] = str(key)
                fed.registry = fed.registry or {}
                fed.registry[cid] = public.read_text().strip()
            fed.services.append(
                processes.start_supernode(
                    root,
                    f"node{i}",
                    address,
                    node_config,
                    tls.ca_cert if tls is not None else None,
                    key,
                    worker=worker,
                    poll_interval=processes.POLL_INTERVAL if worker else None,
                )
            )
        for svc in fed.services[1:]:
            svc.wait_log("SuperNode ID", 60)
    except BaseException:
        fed.stop()
        raise
    return fed


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    fed = start_federation(
        tmp_path_factory.mktemp("flower"), ["hospital_0/c0", "hospital_1/c0"]
    )
    yield fed
    fed.stop()


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["fedavg", "fedstain"])
def test_deployment_equals_in_process(
    federation: Federation, tmp_path: Path, algorithm: str
) -> None:
    extra = f"algorithm.name={algorithm}"
    cfg = config(tmp_path / "flower", extra)
    federation.run(cfg)
    assert_same_run(cfg, in_process(tmp_path, extra))


@pytest.mark.slow
def test_a_failed_run_exits_1_with_the_servers_reason(
    federation: Federation,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``fedpath flower run`` over real processes: every node's policy refuses
    the run (the default policy serves no algorithm that uploads raw data), the
    ServerApp fails, and the command exits 1 with its reason (it used to exit 0
    as soon as the run was started)."""
    from fedpath.cli import main

    cfg = config(tmp_path / "flower", "algorithm.name=central_supervised")
    path = tmp_path / "refused.yaml"
    path.write_text(cfg.to_yaml())
    monkeypatch.setenv("FLWR_HOME", str(federation.home))
    argv = ["flower", "run", str(path), "--connection", "test", "--wait-nodes", "5"]
    assert main([*argv, "--allow-self-declared-ids", "--stream"]) == 1
    err = capsys.readouterr().err
    assert "finished:failed: no node serves this run: their node policies refuse" in (
        err
    ), err
    assert "central_supervised" in err


@pytest.mark.slow
def test_node_killed_mid_run(federation: Federation, tmp_path: Path) -> None:
    """The round completes with the remaining node after reply-timeout."""
    cfg = config(tmp_path / "flower", "train.min_replies=1")
    results = run_dir_for(cfg, "hospital_2", 0) / "results.jsonl"

    def round_one_done() -> bool:
        return (
            results.is_file() and '"kind": "round", "round": 1' in results.read_text()
        )

    values = {RC_CONFIG: cfg.to_yaml(), RC_REPLY_TIMEOUT: 45.0, RC_WAIT_NODES: 60.0}
    values.update(federation.identity())
    run_id = flwr_cli.start_run(federation.app, "test", federation.home, values)
    processes.wait_for(round_one_done, 240, "round 1 of the run", federation.services)
    doomed = federation.services[2]  # serves hospital_1/c0
    doomed.stop(kill=True)  # the hospital's machine goes down: no reply, no goodbye
    final = run_dir_for(cfg, "hospital_2", 0) / "final.json"
    try:
        flwr_cli.wait_run(run_id, "test", federation.home, 240, done=final.is_file)
    finally:  # the next test gets a federation of two again
        federation.services[2] = processes.start_supernode(
            federation.root,
            "node1-again",
            federation.address,
            {"client-id": "hospital_1/c0"},
        )
    rounds = [r for r in read_jsonl(results) if r["kind"] == "round"]
    assert [r["failed"] for r in rounds] == [0, 1]
    failures = [r for r in read_jsonl(results) if r["kind"] == "failure"]
    assert [(f["round"], f["client"]) for f in failures] == [(2, "hospital_1/c0")]
    # the SuperLink answers for a node it lost, or nothing arrives in time
    reason = failures[0]["reason"]
    assert "no reply within reply-timeout=45 s" in reason or "node" in reason.lower()
    node = failures[0]["node"]
    logs = run_logs(run_id, "test", federation.home)
    assert f"client hospital_1/c0 (node {node}) failed" in logs
    assert json.loads(final.read_text())["round"] == 2
    federation.services[2].wait_log("SuperNode ID", 60)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    root = tmp_path_factory.mktemp("secure")
    tls = pki.make_certificates(root / "certs")
    clients = ["hospital_0/c0", "hospital_1/c0"]
    keys = {
        c: pki.make_node_keys(root / "keys", f"h{i}") for i, c in enumerate(clients)
    }
    fed = start_federation(root, clients, tls, keys, worker=False)  # plain Flower
    yield fed
    fed.stop()


@pytest.mark.slow
def test_tls_and_authenticated_nodes_equal_in_process(
    secure: Federation, tmp_path: Path
) -> None:
    assert "Uvicorn running on https://" in secure.services[0].log_text()
    cfg = config(tmp_path / "flower", "train.rounds=1")
    secure.run(cfg)
    assert_same_run(cfg, in_process(tmp_path, "train.rounds=1"))


@pytest.mark.slow
def test_unregistered_node_is_refused(secure: Federation) -> None:
    key, _ = pki.make_node_keys(secure.root / "keys", "rogue")
    ca = secure.root / "certs" / "ca.crt"
    rogue = processes.start_supernode(
        secure.root,
        "rogue",
        secure.address,
        {"client-id": "hospital_0/c0"},
        ca,
        key,
        max_wait=5,
    )
    secure.services.append(rogue)
    processes.wait_for(
        lambda: not rogue.alive(), 60, "the rogue node to give up", rogue
    )
    assert rogue.proc.returncode != 0
    assert "Failed to activate SuperNode" in rogue.log_text()
    assert "No SuperNode found with the given public key" in (
        secure.services[0].log_text()
    )
    listed = flwr_cli.flwr(["supernode", "ls", "test", "--format", "json"], secure.home)
    assert listed.stdout.count('"node-id"') == 2, listed.stdout


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
