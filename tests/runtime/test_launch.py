"""Launchers (fedpath.runtime.launch): parallel cells give the serial suite's bytes,
resume after a kill, report failures and go on; locks refuse a second writer."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedpath.cli import main
from fedpath.config import ConfigError, load_config
from fedpath.runtime import cells as cells_mod
from fedpath.runtime import launch
from fedpath.runtime.cells import LOCK, Cell, CellLocks, LockError, cell_status
from fedpath.runtime.launch import LaunchOptions, launch_options, oversubscription
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]


def _suite(tmp_path: Path, rounds: int = 2) -> tuple[Path, list[str]]:
    (tmp_path / "base.yaml").write_text(
        "name: par\nlodo:\n  targets: [hospital_0, hospital_1]\nalgorithm:\n"
        "  name: fedavg\n"
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "description: tiny parallel\nbase: base.yaml\nvariants:\n  fedavg: []\n"
        "  fedprox: [algorithm.name=fedprox]\n"
    )
    over = [o for o in TINY if not o.startswith("runtime.threads")]
    return suite, [*over, f"train.rounds={rounds}", "runtime.threads=1"]


def _finals(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("final.json"))
    }


@pytest.fixture(scope="module")
def serial_finals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("serial")
    suite, over = _suite(tmp)
    assert main(["suite", str(suite), *over, f"output_dir={tmp / 'out'}", "-q"]) == 0
    finals = _finals(tmp / "out")
    assert len(finals) == 4
    return finals


def test_local_launcher_writes_the_serial_bytes(
    tmp_path: Path,
    serial_finals: dict[str, bytes],
    capsys: pytest.CaptureFixture[str],
) -> None:
    suite, over = _suite(tmp_path)
    out = tmp_path / "out"
    args = ["suite", str(suite), *over, f"output_dir={out}", "-q"]
    assert main([*args, "--jobs", "2"]) == 0
    assert _finals(out) == serial_finals
    assert not list(out.rglob(LOCK))  # every lock released
    assert "| fedprox |" in capsys.readouterr().out  # the table, as serially
    assert main([*args, "--status"]) == 0
    text = capsys.readouterr().out
    assert (
        "4 cells: 4 done" in text
        and "| 4 | fedprox -> hospital_1 (seed 0) | done" in text
    )


def test_ray_launcher_writes_the_serial_bytes(
    tmp_path: Path, serial_finals: dict[str, bytes]
) -> None:
    pytest.importorskip(
        "ray",
        reason="ray is not installed (pip install 'fedpath[ray]'): the Ray "
        "launcher is not tested here",
    )
    suite, over = _suite(tmp_path)
    out = tmp_path / "out"
    args = ["suite", str(suite), *over, f"output_dir={out}", "-q", "--launcher", "ray"]
    assert main(args) == 0
    assert _finals(out) == serial_finals


def test_killed_parallel_suite_resumes_and_completes(tmp_path: Path) -> None:
    suite, over = _suite(tmp_path, rounds=4)
    ref, out = tmp_path / "ref", tmp_path / "out"
    assert main(["suite", str(suite), *over, f"output_dir={ref}", "-q"]) == 0
    cmd = [sys.executable, "-m", "fedpath.cli", "suite", str(suite), *over]
    cmd += [f"output_dir={out}", "--jobs", "2", "-q"]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    deadline = time.monotonic() + 120
    try:
        while not list(out.rglob("checkpoint.pt")):
            assert proc.poll() is None, "the suite ended before it could be killed"
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers
        proc.wait()
    assert len(list(out.rglob("final.json"))) < 4
    # the dead driver's locks are stale: taken over, not refused
    resumed = ["suite", str(suite), *over, f"output_dir={out}", "-q", "--jobs", "2"]
    assert main([*resumed, "--resume"]) == 0
    assert _finals(out) == _finals(ref)


def test_a_failing_cell_is_reported_and_the_others_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite, over = _suite(tmp_path)
    out = tmp_path / "out"
    args = ["suite", str(suite), *over, f"output_dir={out}", "-q", "--jobs", "2"]
    assert main(args) == 0
    # the first cell's finished run now belongs to another config: --resume
    # refuses to hand it back (ResumeError in its worker)
    first = out / "par" / "fedavg" / "hospital_0" / "seed0"
    final = json.loads((first / "final.json").read_text())
    (first / "final.json").write_text(json.dumps({**final, "config_hash": "0" * 16}))
    for other in out.rglob("final.json"):
        if other.parent != first:
            other.unlink()
    capsys.readouterr()
    assert main([*args, "--resume"]) == 1
    text = capsys.readouterr().out
    assert "failed: cell 1 fedavg -> hospital_0 (seed 0): ResumeError" in text
    assert len(list(out.rglob("final.json"))) == 4  # the other three finished
    failure = json.loads((first / "failed.json").read_text())
    assert failure["type"] == "ResumeError" and "Traceback" in failure["traceback"]
    assert main([*args, "--status"]) == 0
    text = capsys.readouterr().out
    assert "| 1 | fedavg -> hospital_0 (seed 0) | failed | ResumeError:" in text
    assert "4 cells: 3 done, 1 failed" in text


def _cell(tmp_path: Path, index: int = 1, rounds: int = 2) -> Cell:
    cfg = load_config(None, [*TINY, f"output_dir={tmp_path}", f"train.rounds={rounds}"])
    return Cell(index, cfg, "hospital_0", 0, tmp_path / f"c{index}")


def test_a_second_writer_is_refused_naming_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = _cell(tmp_path)
    with cells_mod.hold_locks([cell]) as locks:
        locks.mark(cell.run_dir, "running")
        with pytest.raises(LockError, match=f"pid {os.getpid()} on "):
            CellLocks([cell]).acquire()
        assert cell_status(cell)[0] == "running"
    assert not (cell.run_dir / LOCK).exists()
    # a suite whose run directory a live process holds refuses with exit code 2
    suite, over = _suite(tmp_path)
    out = tmp_path / "out"
    held = out / "par" / "fedprox" / "hospital_1" / "seed0"
    held.mkdir(parents=True)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        info = {"pid": sleeper.pid, "host": socket.gethostname(), "since": "now"}
        (held / LOCK).write_text(json.dumps({**info, "command": "fedpath suite x"}))
        assert main(["suite", str(suite), *over, f"output_dir={out}", "-q"]) == 2
        err = capsys.readouterr().err
        assert (
            f"is being written by pid {sleeper.pid}" in err and "fedpath suite x" in err
        )
        assert not list(out.rglob("final.json"))  # refused before any cell ran
        assert [p.parent for p in out.rglob(LOCK)] == [held]  # its own taken back
    finally:
        sleeper.kill()
        sleeper.wait()
    # its holder is gone: the lock is stale and taken over
    assert main(["suite", str(suite), *over, f"output_dir={out}", "-q"]) == 0
    assert len(list(out.rglob("final.json"))) == 4


def test_launcher_options_are_checked(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert launch_options(None, None, None) == LaunchOptions("serial", 1, None)
    assert launch_options(None, 3, None) == LaunchOptions("local", 3, None)
    monkeypatch.setattr(launch, "cores", lambda: 6)
    assert launch_options("local", None, None).jobs == 6
    for bad, match in [
        ((None, 0, None), "--jobs: expected a positive number"),
        (("serial", 2, None), "--launcher local"),
        (("ray", 2, None), "--jobs applies to --launcher local"),
        (("local", 2, "h:1"), "--address applies to --launcher ray"),
        (("slurm", None, None), "--launcher: expected one of serial, local, ray"),
    ]:
        with pytest.raises(ConfigError, match=match):
            launch_options(*bad)
    suite, over = _suite(tmp_path)
    args = ["suite", str(suite), *over, f"output_dir={tmp_path / 'o'}", "-q"]
    with pytest.raises(SystemExit) as ex:  # refused by the parser, before loading
        main([*args, "--jobs", "0"])
    assert ex.value.code == 2
    assert "argument --jobs: expected a positive integer, got '0'" in (
        capsys.readouterr().err
    )
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if _have_ray():
        assert main([*args, "--launcher", "ray", "--address", f"127.0.0.1:{port}"]) == 2
        assert f"--address 127.0.0.1:{port}: cannot reach a Ray head" in (
            capsys.readouterr().err
        )
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        launch.check_reachable("no-port-here")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    assert main([*args, "--launcher", "ray"]) == 2
    assert "pip install 'fedpath[ray]'" in capsys.readouterr().err
    assert not list((tmp_path / "o").rglob("final.json"))


def _have_ray() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def test_more_jobs_than_cores_warns_with_the_factor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "cores", lambda: 2)
    cells = [_cell(tmp_path, i) for i in range(1, 6)]
    assert oversubscription(cells, LaunchOptions("local", 2)) is None
    warn = oversubscription(cells, LaunchOptions("local", 4))
    assert warn is not None and "4 threads on 2 cores (oversubscribed 2.0x)" in warn
    # threads left to the launcher: cores // jobs, never below one
    assert launch.cell_threads(cells[0], LaunchOptions("local", 4)) == 1
    monkeypatch.setattr(launch, "cores", lambda: 8)
    assert launch.cell_threads(cells[0], LaunchOptions("local", 2)) == 4
    assert launch.cell_threads(cells[0], LaunchOptions("ray", 1)) == 1
    pinned = cells[0].config.replace(**{"runtime.threads": 3})
    assert launch.cell_threads(Cell(1, pinned, "h", 0, tmp_path), LaunchOptions()) == 3
    # more jobs than cells: only as many workers as cells
    assert oversubscription(cells[:1], LaunchOptions("local", 16)) is None
