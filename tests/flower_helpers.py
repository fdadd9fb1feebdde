"""Helpers of the Flower tests: ``flwr`` CLI calls only the tests make (the package
keeps what the CLI and ``benchmarks/bench_flower.py`` use:
:mod:`fedpath.deploy.flwr_cli`), the tiny configs and the comparison of a run over
Flower with the same run in-process, :class:`LoopbackGrid` (Flower's wire format
and the real ClientApp, without processes or sockets) and a :class:`Federation`
of SuperLink and SuperNode processes.

Importing this module skips the importing test module when ``flwr`` is missing.
"""

from __future__ import annotations

from collections.abc import Iterable
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

from fedpath.config import ExperimentConfig, load_config
from fedpath.deploy import flwr_cli, pki, processes
from fedpath.deploy.flwr_cli import flwr
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
from tests import conftest


def run_logs(run_id: int, connection: str, home: Path) -> str:
    """The logs of a run so far (``flwr log RUN CONNECTION --show``)."""
    res = flwr(["log", str(run_id), connection, "--show"], home, check=False)
    return res.stdout + res.stderr


def register_node(public_key: Path, connection: str, home: Path) -> str:
    """``flwr supernode register KEY.pub CONNECTION``; return the CLI output."""
    res = flwr(["supernode", "register", str(public_key), connection], home)
    return res.stdout


# ------------------------------------------------- configs and run comparisons


#: the shared tiny federation, one client per hospital, one thread, one fold
TINY = [
    *conftest.TINY,
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


# ------------------------------------------------------------- the loopback grid


def wire(msg: Message) -> Message:
    """The message as the receiver gets it (deflated and inflated by Flower)."""
    contents = {oid: o.deflate() for oid, o in get_all_nested_objects(msg).items()}
    out = inflate_object_from_contents(msg.object_id, contents)
    assert isinstance(out, Message)
    return out


class OfflineGrid(Grid):
    """A Grid of this process: what fedpath's coordinator never calls raises."""

    def set_run(self, run: Any) -> None:
        raise NotImplementedError

    @property
    def run(self) -> Any:
        raise NotImplementedError

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        raise NotImplementedError

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        raise AssertionError("fedpath polls with its own short loop")


class LoopbackGrid(OfflineGrid):
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


#: a node config that turns on Flower's LocalDpMod
DP = {"dp-clipping-norm": 1.0, "dp-epsilon": 5.0, "dp-delta": 1e-5}


# ------------------------------------------------------- processes on loopback


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
