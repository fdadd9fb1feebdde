"""``fedpath flower superlink`` / ``supernode``: the Flower command each would run
(``--dry-run``), and the bad combinations refused before anything starts (the
worker and policy options: tests/deploy/test_worker.py, test_policy.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import main

pytest.importorskip("flwr")

NODE = ["flower", "supernode", "--superlink", "10.0.0.1:9092", "--insecure"]
NODE += ["--client-id", "hospital_0/c0", "--no-worker", "--dry-run"]


def test_superlink_dry_run_prints_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["flower", "superlink", "--insecure", "--port", "9300", "--dry-run"]
    assert main(argv) == 0
    cmd = capsys.readouterr().out
    assert "flower-superlink" in cmd and "--insecure" in cmd and "9300" in cmd
    assert main([*argv, "--node-auth"]) == 2
    assert "--node-auth needs TLS" in capsys.readouterr().err
    certs = ["flower", "superlink", "--certs", str(tmp_path), "--dry-run"]
    assert main(certs) == 2
    assert f"CA certificate {str(tmp_path / 'ca.crt')!r} does not exist" in (
        capsys.readouterr().err
    )


def test_supernode_options_become_the_node_config(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*NODE, "--data-name", "synthetic", "--threads", "2"]) == 0
    captured = capsys.readouterr()
    assert 'client-id="hospital_0/c0"' in captured.out
    assert 'data-name="synthetic"' in captured.out and "threads=2" in captured.out
    assert "policy" in captured.err.lower()  # the policy's summary, on stderr


def test_supernode_refuses_bad_combinations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*NODE, "--dp-clipping-norm", "1.0"]) == 2
    assert "local DP needs --dp-clipping-norm, --dp-epsilon and --dp-delta" in (
        capsys.readouterr().err
    )
    assert main([*NODE, "--data-root", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main([*NODE, "--key", str(tmp_path / "no.key")]) == 2
    assert "private key" in capsys.readouterr().err


def test_the_superlink_binds_loopback_unless_told(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["flower", "superlink", "--insecure", "--dry-run"]
    assert main(argv) == 0
    assert "--host 127.0.0.1 " in capsys.readouterr().out  # before: 0.0.0.0
    assert main([*argv, "--host", "0.0.0.0"]) == 0
    assert "--host 0.0.0.0 " in capsys.readouterr().out


def test_the_supernode_runs_only_approved_apps_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    assert main(NODE) == 0
    captured = capsys.readouterr()
    listed = tmp_path / "approved_apps.yaml"
    assert f"-m fedpath.deploy.node --approved-apps {listed} " in captured.out
    assert f"no app approved in {listed} yet" in captured.err
    assert main([*NODE, "--no-app-approval"]) == 0
    captured = capsys.readouterr()
    assert "approved-apps" not in captured.out
    assert "WARNING: APP APPROVAL IS OFF" in captured.err
    both = [*NODE, "--no-app-approval", "--approved-apps", str(listed)]
    assert main(both) == 2
    assert "contradict" in capsys.readouterr().err
    listed.write_text("- not a mapping\n")
    assert main(NODE) == 2  # a broken list stops the node before it starts
    assert "approved apps" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "option", "value"),
    [
        (["flower", "superlink", "--insecure"], "--port", "0"),
        (["flower", "superlink", "--insecure"], "--port", "70000"),
        (NODE, "--port", "-1"),
        (NODE, "--dp-clipping-norm", "0"),
        (NODE, "--dp-epsilon", "nan"),
        (NODE, "--dp-delta", "-0.1"),
        (NODE, "--dp-sensitivity", "inf"),
    ],
)
def test_a_meaningless_number_is_a_usage_error_naming_the_option(
    capsys: pytest.CaptureFixture[str], argv: list[str], option: str, value: str
) -> None:
    from fedpath.cli import build_parser

    with pytest.raises(SystemExit) as err:
        build_parser().parse_args([*argv, option, value])
    assert err.value.code == 2
    assert f"argument {option}: expected" in capsys.readouterr().err
