"""What :class:`LineReporter` writes (fedpath.utils.progress_lines), driven by a
fake clock (no sleeps, no wall time), and one real tiny suite's lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedpath.utils.progress_lines import LineReporter
from tests.conftest import tiny_overrides
from tests.utils.progress_helpers import FakeClock, drive, messages, stamped


def test_line_reporter_lines(capfd: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock()
    with LineReporter(clock=clock) as rep:
        drive(rep, clock)
    out, err = capfd.readouterr()
    assert out == ""
    lines = messages(err)
    assert lines[0] == "suite: 2 methods, 4 runs, 12 rounds"
    assert lines[1] == "method 1/2 fedavg"
    starts = [ln for ln in lines if ln.endswith(": 3 rounds")]
    assert starts == [
        "run 1/4 fedavg -> h0 (seed 0): 3 rounds",
        "run 2/4 fedavg -> h1 (seed 0): 3 rounds",
        "run 3/4 fedprox -> h0 (seed 0): 3 rounds",
        "run 4/4 fedprox -> h1 (seed 0): 3 rounds",
    ]
    rounds = [ln for ln in lines if " round " in ln]
    assert len(rounds) == 12  # one per round; clients (8 s) under the 10 s interval
    # every round 10 s: run 1 round 1 leaves 2 rounds (20 s) and 11 in all (110 s)
    assert rounds[0] == (
        "run 1/4 round 1/3: acc 0.100 | 10.0s, clients c0 4.0s, c1 4.0s "
        "| eta run 20s, all 1m50s"
    )
    assert rounds[4].startswith("run 2/4 round 2/3: acc 0.200 |")
    assert rounds[-1].endswith("eta run 0s, all 0s")
    assert "method 2/2 fedprox" in lines
    assert lines.index("method 2/2 fedprox") == lines.index(starts[2]) - 1
    assert lines.count("run 4/4 done in 30s") == 1


def test_resumed_work_counts_as_done_untimed(capfd: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock()
    rep = LineReporter(clock=clock)
    rep.start_suite(3, 1, 30)
    rep.start_method(1, 1, "fedavg")
    rep.start_runs(3)
    clock.tick(500)  # whatever skipping takes is not a round's time
    rep.skip_run("fedavg -> h0 (seed 0)", 10)
    rep.start_run("fedavg -> h1 (seed 0)", 10, done=4)  # 4 rounds restored
    rep.start_round(5, 1)
    clock.tick(6)
    rep.end_round("")
    lines = messages(capfd.readouterr().err)
    assert lines[-3] == "run 1/3 fedavg -> h0 (seed 0): finished before, skipped"
    assert lines[-2] == (
        "run 2/3 fedavg -> h1 (seed 0): 10 rounds, resuming after round 4"
    )
    # 30 - 10 skipped - 4 restored - 1 trained = 15 rounds left at 6 s: 90 s
    assert lines[-1] == "run 2/3 round 5/10: 6.0s | eta run 30s, all 1m30s"


def test_slow_clients_get_lines_and_many_are_summarised(
    capfd: pytest.CaptureFixture[str],
) -> None:
    clock = FakeClock()
    rep = LineReporter(clock=clock, interval=10)
    rep.start_runs(1)
    rep.start_run("x", 1)
    rep.start_round(1, 6)
    for i in range(6):
        rep.start_client(f"c{i}", 1)
        clock.tick(12 if i == 2 else 1)
        rep.end_client()
    rep.end_round("acc 0.5")
    lines = messages(capfd.readouterr().err)
    assert lines[0] == "experiment: 1 run"
    assert lines[2] == "run 1/1 round 1/1 client c2 (3/6) 12.0s"
    assert lines[3].startswith(
        "run 1/1 round 1/1: acc 0.5 | 17.0s, 6 clients 1.0-12.0s (slowest c2) |"
    )


def test_job_lines_are_throttled(capfd: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock()
    rep = LineReporter(clock=clock, interval=10)
    rep.start_job("encode", "ds: resnet18 features", 1000)
    for _ in range(1000):  # a quick job: 1000 batches in 1 s -> at the 10 % steps
        clock.tick(0.001)
        rep.advance_job(1)
    lines = messages(capfd.readouterr().err)
    assert lines[0] == "encode ds: resnet18 features: 1000 items"
    assert len(lines) == 1 + 9 + 1  # start, 10 % ... 90 %, done
    assert lines[1].startswith("encode ds: resnet18 features: 100/1000 (10%), 0s, eta")
    assert lines[-1] == "encode ds: resnet18 features: 1000/1000 done in 1s"
    rep.start_job("encode", "slow", 1000)
    for _ in range(100):  # a slow one: 1 item per 3 s -> a line per 10 s
        clock.tick(3)
        rep.advance_job(1, item="slide_x")
    lines = messages(capfd.readouterr().err)[1:]
    # every 4th item (12 s); the one 10 % step (item 100) falls on such a line
    assert len(lines) == 300 // 12
    assert lines[0] == "encode slow: 4/1000 (0%), 12s, eta 49m48s (slide_x)"


def test_real_tiny_suite_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedpath.cli import main

    over = tiny_overrides(tmp_path, "train.rounds=2")
    # the serial launcher's lines (the demo's default is one worker per core)
    argv = ["demo", "--methods", "fedavg,fedprox", "--launcher", "serial", *over]
    assert main(argv) == 0
    err = capsys.readouterr().err
    lines = stamped(err)
    assert lines[0] == "suite: 2 methods, 6 runs, 12 rounds"
    assert "method 1/2 fedavg" in lines and "method 2/2 fedprox" in lines
    starts = [ln for ln in lines if ln.endswith(": 2 rounds")]
    assert [s.split()[1] for s in starts] == [f"{i}/6" for i in range(1, 7)]
    assert starts[3].startswith("run 4/6 fedprox -> hospital_0")
    rounds = [ln for ln in lines if re.match(r"run \d/6 round \d/2: ", ln)]
    assert len(rounds) == 12
    assert all("eta run" in r and ", all " in r for r in rounds)
    assert all("acc " in r for r in rounds[1::2])  # evaluated in the last round
    assert rounds[-1].endswith("eta run 0s, all 0s")
    # resumed: every run finished before, skipped and counted
    assert main([*argv, "--resume"]) == 0
    lines = stamped(capsys.readouterr().err)
    skipped = [ln for ln in lines if ln.endswith("finished before, skipped")]
    assert [s.split()[1] for s in skipped] == [f"{i}/6" for i in range(1, 7)]
    assert not any(" round " in ln for ln in lines)
