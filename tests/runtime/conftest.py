"""Shared by the runtime tests: what a finished run directory holds, a checkpoint to
save and the server's global model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from fedpath.artifact import read_model_file
from fedpath.runtime.inprocess import InProcessRun
from fedpath.runtime.persistence import Checkpoint
from fedpath.types import ArrayDict, ClientState, Payload


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return read_model_file(run_dir / "model.fpm")[1]


def eval_lines(run_dir: Path) -> list[dict]:
    lines = [
        json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()
    ]
    return [r for r in lines if r["kind"] == "eval"]


def make_checkpoint(rnd: int = 2, **extra: Payload | None) -> Checkpoint:
    w = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    return Checkpoint(
        round=rnd,
        server=Payload({"weights": w}, {"step": 4}),
        clients={"c0": ClientState({"local": {"b": np.ones(2, np.int64)}}, {"n": 3})},
        last_eval={"target": {"accuracy": 0.5}},
        **extra,
    )


def global_weights(run: InProcessRun) -> ArrayDict:
    """The server's global model (every algorithm here keeps one)."""
    weights = run.server.global_weights()
    assert weights is not None
    return weights
