"""A parallel suite's worker (fedpath.runtime.launch_worker): the spec it gets,
the events it sends, and a failing cell reported, never raised."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from fedpath.config import build_config, load_config
from fedpath.runtime.cells import Cell
from fedpath.runtime.launch_worker import (
    CellSpec,
    Event,
    ForwardingReporter,
    cell_spec,
    run_cell,
)
from tests.conftest import TINY


def test_a_spec_carries_the_cell_in_plain_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEDPATH_SOMETHING", "x")
    monkeypatch.setenv("OTHER_SETTING", "y")
    cfg = load_config(None, [*TINY, "output_dir=rel/out"])
    cell = Cell(3, cfg, "hospital_1", 2, tmp_path / "run")
    spec = cell_spec(cell, threads=5, resume=True)
    assert (spec.index, spec.target, spec.seed, spec.resume) == (
        3,
        "hospital_1",
        2,
        True,
    )
    assert spec.threads == 5 and spec.config["runtime"]["threads"] == 5
    # relative paths resolved where the driver runs, for a worker elsewhere
    assert spec.config["output_dir"] == str(tmp_path / "rel" / "out")
    assert spec.cwd == str(tmp_path) and spec.run_dir == str(tmp_path / "run")
    assert spec.env.get("FEDPATH_SOMETHING") == "x" and "OTHER_SETTING" not in spec.env
    assert spec.gpus == 0.0  # a CPU config asks Ray for no GPU
    assert pickle.loads(pickle.dumps(spec)) == spec  # it crosses processes
    rebuilt = build_config(spec.config)
    assert rebuilt.train.rounds == cfg.train.rounds and rebuilt.runtime.threads == 5


def test_the_reporter_forwards_runs_rounds_jobs_and_messages_as_events() -> None:
    sent: list[Event] = []
    rep = ForwardingReporter(7, sent.append)
    rep.start_run("fedavg -> h0 (seed 0)", 4, done=1)
    rep.start_round(2, clients=3)
    rep.start_client("c0", 1)  # per-client calls stay in the worker
    rep.end_client()
    rep.end_round("acc 0.5")
    rep.start_job("encode", "ds", 10)
    rep.advance_job(3, item="slide_1")
    rep.log("waiting for another process to encode ds.h5")
    rep.skip_run("x", 4)
    rep.end_run()
    assert sent == [
        ("start", 7, 4, 1),
        ("round", 7, 2),
        ("job", 7, "encode ds", 10),
        ("advance", 7, 3),
        ("log", 7, "waiting for another process to encode ds.h5"),
        ("skip", 7),
        ("end", 7),
    ]


def test_a_failing_cell_is_a_result_not_an_exception(tmp_path: Path) -> None:
    spec = CellSpec(
        index=4,
        config={"algorithm": {"name": "no-such-method"}},
        target="hospital_0",
        seed=0,
        run_dir=str(tmp_path / "run"),
        resume=False,
        cwd=os.getcwd(),
        env={},
        threads=torch.get_num_threads(),  # the test process's own, unchanged
    )
    sent: list[Event] = []
    res = run_cell(spec, sent.append)
    assert res.index == 4 and not res.ok and res.seconds >= 0.0
    assert res.kind == "ConfigError" and "no-such-method" in res.error
    assert "Traceback" in res.trace
    assert sent[0][:2] == ("begin", 4) and sent[0][2] == os.getpid()
