"""``fedpath flower run``: the run config it would hand to ``flwr run``
(``--dry-run``), with SecAgg+'s settings and the client registry checked before
the run, and its exit status from the run's final status (the run itself:
tests/runtime/test_flower_processes_secagg.py)."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from fedpath.cli import main

pytest.importorskip("flwr")

CFG = str(Path(__file__).resolve().parents[2] / "configs/synthetic_fedavg.yaml")


def run_config(text: str) -> dict:
    return tomllib.loads(text)


def test_dry_run_prints_the_run_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["flower", "run", CFG, f"output_dir={tmp_path}", "train.rounds=3"]
    argv.append("--allow-self-declared-ids")
    assert (
        main([*argv, "--reply-timeout", "5", "--on-failure", "stop", "--dry-run"]) == 0
    )
    captured = capsys.readouterr()
    values = run_config(captured.out)
    assert "rounds: 3" in values["fedpath-config"]
    assert values["reply-timeout"] == 5.0 and values["on-failure"] == "stop"
    assert values["resume"] is False and values["wait-nodes"] == 120.0
    assert "secure-aggregation" not in values
    assert "is relative" not in captured.err  # an absolute output_dir


def test_a_relative_output_dir_is_noted(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["flower", "run", CFG, "output_dir=runs", "--dry-run"]
    assert main([*argv, "--allow-self-declared-ids"]) == 0
    assert "output_dir 'runs' is relative" in capsys.readouterr().err


def test_secure_aggregation_settings_are_checked_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["flower", "run", CFG, f"output_dir={tmp_path}", "--dry-run"]
    argv += ["--secure-aggregation", "secaggplus", "--allow-self-declared-ids"]
    assert main([*argv, "--secagg-clipping-range", "4"]) == 0
    values = run_config(capsys.readouterr().out)
    assert values["secure-aggregation"] == "secaggplus"
    assert values["secagg-clipping-range"] == 4.0
    assert main([*argv, "--secagg-num-shares", "-1"]) == 2
    assert "secagg-num-shares" in capsys.readouterr().err
    assert main([*argv, "algorithm.name=fedstain"]) == 2
    assert "'fedstain' uploads" in capsys.readouterr().err


def test_a_run_needs_a_registry_or_the_explicit_opt_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["flower", "run", CFG, f"output_dir={tmp_path}", "--dry-run"]
    assert main(argv) == 2  # it used to start with self-declared ids
    err = capsys.readouterr().err
    assert "--registry clients.yaml is required" in err
    assert "--allow-self-declared-ids" in err and len(err.strip().splitlines()) == 1
    assert main([*argv, "--allow-self-declared-ids"]) == 0
    captured = capsys.readouterr()
    assert run_config(captured.out)["allow-self-declared-ids"] is True
    assert "any node may claim any client id" in captured.err
    with pytest.raises(SystemExit):  # one or the other
        main([*argv, "--allow-self-declared-ids", "--registry", "x.yaml"])


def test_the_registry_is_read_and_checked_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedpath.deploy import pki

    _, public = pki.make_node_keys(tmp_path / "keys", "a")
    reg = tmp_path / "clients.yaml"
    reg.write_text("hospital_0/c0: keys/a.pub\n")
    argv = ["flower", "run", CFG, f"output_dir={tmp_path}", "--dry-run"]
    assert main([*argv, "--registry", str(reg)]) == 0
    values = run_config(capsys.readouterr().out)
    assert yaml.safe_load(values["client-registry"]) == {
        "hospital_0/c0": public.read_text().strip()
    }
    assert "allow-self-declared-ids" not in values
    for text, expected in [
        ("hospital_0/c0: keys/a.pub\nhospital_0/c0: keys/a.pub\n", "given twice"),
        ("hospital_0/c0: keys/none.pub\n", "none.pub' does not exist"),
        ("hospital_0/c0: clients.yaml\n", "not an OpenSSH public key"),
    ]:
        reg.write_text(text)
        assert main([*argv, "--registry", str(reg)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: client registry '{reg}'") and expected in err
        assert len(err.strip().splitlines()) == 1
    assert main([*argv, "--registry", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml' does not exist" in capsys.readouterr().err


class FakeFlwr:
    """The ``flwr`` CLI as fedpath calls it: ``run`` answers a run id, ``ls``
    the run's statuses in turn (the JSON of Flower 1.42's ``flwr ls``)."""

    def __init__(self, *statuses: tuple[str, str]) -> None:
        self.statuses = list(statuses)
        self.calls: list[list[str]] = []

    def __call__(
        self, args: list[str], home: Path, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(args))
        if args[0] == "run":
            assert Path(args[args.index("--run-config") + 1]).is_file()
            out = {"success": True, "run-id": "42", "fab-id": "fedpath/x"}
        else:
            status, details = self.statuses.pop(0)
            run = {"run-id": "42", "status": status, "status-details": details}
            out = {"success": True, "runs": [run]}
        text = "Successfully started run 42\n" + json.dumps(out)
        return subprocess.CompletedProcess(args, 0, text, "")


@pytest.mark.parametrize(
    ("statuses", "code", "said"),
    [
        ([("running", "N/A"), ("finished:completed", "N/A")], 0, "finished:completed"),
        (
            [
                ("running", "N/A"),
                (
                    "finished:failed",
                    "ServerApp failed with exception: no node serves this run: "
                    "their node policies refuse it: PolicyError: ...",
                ),
            ],
            1,
            "error: run 42 finished:failed: no node serves this run: their node "
            "policies refuse it: PolicyError: ...",
        ),
        ([("finished:stopped", "N/A")], 1, "error: run 42 finished:stopped ("),
    ],
)
def test_the_exit_status_is_the_runs_final_status(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    statuses: list[tuple[str, str]],
    code: int,
    said: str,
) -> None:
    """A run whose ServerApp failed used to exit 0 as soon as it was started."""
    from fedpath.deploy import flwr_cli

    fake = FakeFlwr(*statuses, statuses[-1])  # the last one asked for twice
    monkeypatch.setattr(flwr_cli, "flwr", fake)
    monkeypatch.setattr(flwr_cli.time, "sleep", lambda s: None)
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    argv = ["flower", "run", CFG, f"output_dir={tmp_path}", "--allow-self-declared-ids"]
    assert main([*argv, "--connection", "hospitals"]) == code
    assert said in capsys.readouterr().err
    assert fake.calls[0][:3] == ["run", fake.calls[0][1], "hospitals"]
    assert all(c[:2] == ["ls", "hospitals"] for c in fake.calls[1:])
    assert fake.statuses == []
    # --detach: started, not waited for
    fake = FakeFlwr()
    monkeypatch.setattr(flwr_cli, "flwr", fake)
    assert main([*argv, "--detach"]) == 0
    assert [c[0] for c in fake.calls] == ["run"]
    assert "run 42 started" in capsys.readouterr().out


def test_run_failure_reads_flowers_status_strings() -> None:
    from fedpath.deploy.flwr_cli import run_failure

    assert run_failure({"status": "finished:completed", "status-details": ""}) is None
    assert run_failure({"status": "finished:failed"}) == "finished:failed"
    failed = {
        "status": "finished:failed",
        "status-details": "ServerApp failed with exception: bad\n  thing",
    }
    assert run_failure(failed) == "finished:failed: bad thing"
    expired = {"status": "finished:failed", "status-details": "Task failed because "}
    assert run_failure(expired) == "finished:failed: Task failed because"


def test_ctrl_c_stops_waiting_not_the_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fedpath.deploy import flwr_cli

    def interrupted(*args: object, **kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(flwr_cli, "flwr", FakeFlwr())
    monkeypatch.setattr(flwr_cli, "wait_run", interrupted)
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    argv = ["flower", "run", CFG, f"output_dir={tmp_path}", "--allow-self-declared-ids"]
    assert main(argv) == 130
    assert "stopped waiting; run 42 goes on" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--reply-timeout", "0"),
        ("--reply-timeout", "nan"),
        ("--wait-nodes", "-5"),
        ("--wait-nodes", "inf"),
    ],
)
def test_a_meaningless_number_is_a_usage_error_naming_the_option(
    capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    from fedpath.cli import build_parser

    with pytest.raises(SystemExit) as err:
        build_parser().parse_args(["flower", "run", CFG, option, value])
    assert err.value.code == 2
    assert f"argument {option}: expected a finite number > 0" in (
        capsys.readouterr().err
    )
