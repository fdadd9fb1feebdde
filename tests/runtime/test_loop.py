"""The round loop over a transport: :mod:`fedpath.runtime.loop`.

A transport that drops a client shows what the loop owes every runtime: the
transport's counters summed into the round record, ``train.min_replies``
enforced per stage, ``begin_round`` before each round, client states left to
the transport's side when it keeps them, and the config hash computed once.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from fedpath.config import ExperimentConfig, load_config
from fedpath.data.partition import lodo_plan
from fedpath.runtime.experiment import load_dataset, run_experiment
from fedpath.runtime.loop import Run
from fedpath.runtime.selection import ValidationPredictions
from fedpath.runtime.transport import Exchanged
from fedpath.types import ArrayDict, ClientState, Payload
from fedpath.utils.io import read_jsonl
from tests.conftest import tiny_overrides


class DropFirst:
    """Every client but the first of each stage answers (with a fresh state)."""

    keeps_client_states = False

    def __init__(self, run: Run) -> None:
        self.run = run
        self.began: list[int] = []

    def begin_round(self, rnd: int) -> None:
        self.began.append(rnd)

    def exchange(
        self, stage: str, rnd: int, messages: Mapping[str, Payload]
    ) -> Exchanged:
        cids = sorted(messages)
        replies = {
            c: self.run.client_half(c, rnd).handle(stage, messages[c], ClientState())
            for c in cids[1:]
        }
        return replies, {"sent": cids, "wire_bytes_up": 7, "failed": 1}

    def client_metrics(self, rnd: int) -> dict[str, Mapping[str, Any]]:
        return {}

    def validation_metrics(
        self, rnd: int, weights: ArrayDict
    ) -> dict[str, Mapping[str, Any]]:
        raise AssertionError("no validation in this run")

    def validation_predictions(self, weights: ArrayDict) -> ValidationPredictions:
        raise AssertionError("no validation in this run")


def _run(tmp_path: Path, *extra: str) -> tuple[Run, DropFirst]:
    cfg = load_config(
        None,
        tiny_overrides(
            tmp_path,
            "lodo.targets=[hospital_0]",
            "partition.clients_per_domain=2",
            "runtime.export_model=false",
            *extra,
        ),
    )
    ds = load_dataset(cfg.data)
    made: list[DropFirst] = []

    def transport(run: Run) -> DropFirst:
        made.append(DropFirst(run))
        return made[0]

    run = Run(
        cfg,
        ds,
        lodo_plan(ds, ["hospital_0"])[0],
        0,
        tmp_path / "run",
        transport=transport,
    )
    return run, made[0]


def test_the_transport_counters_go_into_the_round_records(tmp_path: Path) -> None:
    run, transport = _run(tmp_path)
    assert run.states == {}  # the transport keeps them
    record = run.run()
    assert transport.began == [1, 2]
    rounds = [
        r
        for r in read_jsonl(tmp_path / "run" / "results.jsonl")
        if r["kind"] == "round"
    ]
    stages = len(run.server.stages(1))
    assert [r["failed"] for r in rounds] == [stages, stages]
    assert [r["wire_bytes_up"] for r in rounds] == [7 * stages] * 2
    assert all(r["clients"] == 4 for r in rounds)
    assert record["evaluation"]["target"]["n"] > 0
    ckpt = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert ckpt["clients"] == {}


def test_too_few_replies_stop_the_round(tmp_path: Path) -> None:
    run, _ = _run(tmp_path, "train.min_replies=4")
    with pytest.raises(RuntimeError, match="3 replies, fewer than train.min_replies=4"):
        run.run()


def test_the_config_hash_is_computed_once_per_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_config(
        None, tiny_overrides(tmp_path, "lodo.targets=[hospital_0,hospital_1]")
    )
    real = ExperimentConfig.hash
    calls: list[int] = []

    def counted(self: ExperimentConfig) -> str:
        calls.append(1)
        return real(self)

    monkeypatch.setattr(ExperimentConfig, "hash", counted)
    records = run_experiment(cfg)
    assert len(calls) == 1
    assert {r["config_hash"] for r in records} == {real(cfg)}
    calls.clear()
    run_experiment(cfg, resume=True)  # both finished: checked against that hash
    assert len(calls) == 1
