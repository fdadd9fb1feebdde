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
