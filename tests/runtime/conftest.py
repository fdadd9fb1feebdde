"""Shared by the runtime tests: what a finished run directory holds."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from fedpath.artifact import read_model_file


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return read_model_file(run_dir / "model.fpm")[1]


def eval_lines(run_dir: Path) -> list[dict]:
    lines = [
        json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()
    ]
    return [r for r in lines if r["kind"] == "eval"]
