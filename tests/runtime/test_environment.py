"""A run records the software and arithmetic it ran in; the fingerprint names
what moves the numbers, and tables read it back from the runs."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from fedpath.config import load_config
from fedpath.runtime.environment import PACKAGES, environment, fingerprint
from fedpath.runtime.experiment import collect_rows, run_dir_for, run_experiment
from tests.conftest import tiny_overrides


def test_the_environment_is_this_process_s() -> None:
    env = environment()
    assert env["packages"]["torch"] == metadata.version("torch")
    assert set(env["packages"]) == set(PACKAGES)
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["threads"] == torch.get_num_threads()
    assert ("gpu" in env) == torch.cuda.is_available()
    json.dumps(env)  # it goes into final.json as it is


def test_the_fingerprint_changes_with_what_moves_the_numbers() -> None:
    env: dict[str, Any] = {
        "packages": {"torch": "2.14.1", "numpy": "2.4.6"},
        "machine": "x86_64",
        "cpu_capability": "AVX512",
        "threads": 1,
    }
    line = fingerprint(env)
    assert line == "torch 2.14.1; numpy 2.4.6; x86_64 AVX512 x 1 threads"
    assert fingerprint({**env, "threads": 4}) != line  # a sum's order can change
    other = {**env, "packages": {"torch": "2.14.1", "numpy": "2.3.5"}}
    assert fingerprint(other) != line
    assert fingerprint({**env, "cpu_capability": "AVX2"}) != line
    assert fingerprint({**env, "gpu": "NVIDIA H100"}).endswith("; NVIDIA H100")
    assert fingerprint(None) == fingerprint({}) == ""  # an older run: unknown


def test_a_run_records_its_environment_and_tables_read_it(tmp_path: Path) -> None:
    over = ["lodo.targets=[hospital_0]", "train.rounds=1"]
    cfg = load_config(None, tiny_overrides(tmp_path, *over))
    (record,) = run_experiment(cfg)
    final = json.loads((run_dir_for(cfg, "hospital_0", 0) / "final.json").read_text())
    assert final["environment"] == record["environment"]
    assert final["environment"]["packages"] == environment()["packages"]
    (row,) = collect_rows([tmp_path], "target")
    assert row.environment == fingerprint(final["environment"]) != ""
