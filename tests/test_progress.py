"""The progress reporters: which one :func:`make_reporter` picks, what
:class:`LineReporter` writes (driven by a fake clock: no sleeps, no wall time), the
ETA formula of :class:`Pace`, and one real tiny suite's lines."""

from __future__ import annotations

import io
import re
from datetime import datetime
from pathlib import Path

import pytest

from fedpath.errors import ConfigError
from fedpath.utils.progress import (
    PROGRESS_ENV,
    LineReporter,
    Pace,
    Reporter,
    RichReporter,
    job_progress,
    make_reporter,
    progress_mode,
    span,
)
from tests.conftest import tiny_overrides

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (.*)$")


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def tick(self, seconds: float) -> None:
        self.t += seconds


def messages(text: str) -> list[str]:
    """The lines' text after their timestamps, each timestamp checked to parse."""
    out = []
    for line in text.splitlines():
        m = STAMP.match(line)
        assert m, f"no timestamp: {line!r}"
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
        out.append(m.group(2))
    return out


def stamped(text: str) -> list[str]:
    """As :func:`messages`, ignoring other lines (a library's warning)."""
    return messages("\n".join(ln for ln in text.splitlines() if STAMP.match(ln)))


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    monkeypatch.delenv("FEDPATH_QUIET", raising=False)


def test_span() -> None:
    assert span(42.4) == "42s"
    assert span(250) == "4m10s"
    assert span(3720) == "1h02m"
    assert span(-3) == "0s"


def test_mode_from_env_and_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    # under pytest's capture stderr is not a terminal: lines by default
    assert type(make_reporter(False)) is LineReporter
    assert type(make_reporter(True)) is Reporter
    for value, cls in (
        ("lines", LineReporter),
        ("bars", RichReporter),
        (" Bars ", RichReporter),
        ("none", Reporter),
    ):
        monkeypatch.setenv(PROGRESS_ENV, value)
        rep = make_reporter(False)
        assert type(rep) is cls, value
        rep.close()
    monkeypatch.setenv(PROGRESS_ENV, "lines")
    assert progress_mode(True) == "none"  # --quiet wins over the variable
    monkeypatch.setenv(PROGRESS_ENV, "fancy")
    with pytest.raises(ConfigError, match=PROGRESS_ENV) as err:
        make_reporter(False)
    assert "'fancy'" in str(err.value)
    assert "bars, lines, none" in str(err.value)


def test_quiet_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    with make_reporter(True) as rep:
        drive(rep, FakeClock())
        rep.start_job("encode", "ds", 10)
        rep.advance_job(10)
        rep.log("hello")
    out, err = capfd.readouterr()
    assert out == err == ""


def drive(rep: Reporter, clock: FakeClock, resumed: bool = False) -> None:
    """A suite of 2 methods x 2 runs x 3 rounds, 2 clients a round; each client
    trains 4 s, each round takes 10 s. With ``resumed``: the first run was
    finished before."""
    rep.start_suite(4, 2, 12)
    for k, method in enumerate(("fedavg", "fedprox"), 1):
        rep.start_method(k, 2, method)
        rep.start_runs(2)
        for target in ("h0", "h1"):
            label = f"{method} -> {target} (seed 0)"
            if resumed and k == 1 and target == "h0":
                rep.skip_run(label, 3)
                continue
            rep.start_run(label, 3)
            for rnd in (1, 2, 3):
                rep.start_round(rnd, 2)
                for cid in ("c0", "c1"):
                    rep.start_client(cid, 1)
                    rep.epoch(1, 1)
                    clock.tick(4)
                    rep.end_client()
                clock.tick(2)
                rep.end_round(f"acc 0.{rnd}00")
            rep.end_run()


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


def test_eta_formula_mean_seconds_per_round_times_rounds_left() -> None:
    clock = FakeClock()
    pace = Pace(clock)
    pace.start_runs(2)  # an experiment: 2 runs of 5 rounds
    pace.start_run(5, 0)
    assert pace.eta("run") is None  # nothing timed yet
    for seconds in (10, 20, 30):
        clock.tick(seconds)
        pace.end_round()
    # mean 20 s per round; 2 rounds left in the run, 2 + 5 in the experiment
    assert pace.eta("run") == pytest.approx(40)
    assert pace.eta("all") == pytest.approx(140)
    assert pace.left("method") == 7


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


def test_job_progress_helper(capfd: pytest.CaptureFixture[str]) -> None:
    with job_progress("tile", "slides", 3, quiet=False) as job:
        for name in ("a", "b", "c"):
            job.advance(item=name)
    lines = messages(capfd.readouterr().err)
    assert lines[0] == "tile slides: 3 items"
    assert lines[-1].startswith("tile slides: 3/3 done in ")
    assert lines[-1].endswith("(c)")
    with job_progress("tile", "slides", 3, quiet=True) as job:
        job.advance()
    assert capfd.readouterr() == ("", "")


def test_rich_reporter_takes_the_calls() -> None:
    """The bars: a suite bar over all runs (skipped ones done), Pace's ETA."""
    clock = FakeClock()
    from rich.console import Console

    buf = io.StringIO()
    rep = RichReporter(Console(file=buf, force_terminal=False), clock=clock)
    with rep:
        drive(rep, clock, resumed=True)
        rep.start_job("encode", "ds", 4)
        rep.advance_job(4, item="x")
    tasks = {t.fields["kind"]: t for t in rep.progress.tasks}
    assert tasks["suite"].completed == tasks["suite"].total == 4
    assert tasks["suite"].description == "method 2/2 fedprox"
    assert tasks["runs"].completed == 2
    assert tasks["encode"].description == "ds x"
    assert rep.progress.tasks.index(tasks["suite"]) == 0  # the top bar
    # rendered once at the end (not a terminal): the suite line has Pace's ETA
    suite_line = next(ln for ln in buf.getvalue().splitlines() if "suite" in ln)
    assert "method 2/2 fedprox" in suite_line and "4/4" in suite_line
    assert "0:00:00" in suite_line


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
