"""``fedpath audit``: the traffic each client received and sent, recorded while a
run runs, and the run-time check that nothing image-shaped leaves a client."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedpath.cli import main
from fedpath.config import ConfigError, load_config
from fedpath.runtime.audit import audit
from fedpath.runtime.experiment import run_dir_for, run_experiment
from fedpath.runtime.rules import PolicyError
from fedpath.types import Payload
from tests.conftest import tiny_overrides


def _run(tmp: Path, *extra: str) -> Path:
    cfg = load_config(None, tiny_overrides(tmp, "lodo.targets=[hospital_2]", *extra))
    run_experiment(cfg)
    return run_dir_for(cfg, "hospital_2", 0)


def test_fedstain_audit_lists_weights_and_statistics_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run(tmp_path, "algorithm.name=fedstain")
    rows, findings = audit(run_dir)
    assert findings == []
    stages = {(r[0], r[1]) for r in rows}
    assert stages == {("1", "stats"), ("1", "fit"), ("2", "stats"), ("2", "fit")}
    clients = {r[2] for r in rows}
    assert clients == {
        "hospital_0/c0",
        "hospital_0/c1",
        "hospital_1/c0",
        "hospital_1/c1",
    }
    stats = next(r for r in rows if r[1] == "stats")
    assert stats[4].startswith("stats: ") and "weights" not in stats[4]
    fit = next(r for r in rows if r[1] == "fit" and r[0] == "2")
    assert fit[3].startswith("pool: ") or "weights: " in fit[3]
    assert "weights: " in fit[4]
    assert main(["audit", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "nothing image-shaped or raw left any client" in out
    assert main(["audit", str(run_dir), "--detail"]) == 0
    assert "float32" in capsys.readouterr().out


def test_the_pooled_baseline_is_flagged(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "algorithm.name=central_supervised")
    _, findings = audit(run_dir)
    assert findings and all("carries images" in f for f in findings)
    assert any("round 1 upload client hospital_0/c0: pool/" in f for f in findings)


def test_an_image_shaped_reply_stops_an_in_process_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedpath.algorithms.fedavg import FedAvgClient

    real = FedAvgClient.handle

    def leaky(self, stage, payload, state):  # type: ignore[no-untyped-def]
        reply = real(self, stage, payload, state)
        leak = np.zeros((2, 3, 32, 32), np.uint8)  # two 32 px images
        return Payload({**reply.arrays, "extra": {"x": leak}}, reply.scalars)

    monkeypatch.setattr(FedAvgClient, "handle", leaky)
    with pytest.raises(PolicyError, match=r"\(images\): the 'fit' reply's array"):
        _run(tmp_path)


def test_audit_without_traffic_says_so(tmp_path: Path) -> None:
    assert main(["audit", str(tmp_path)]) == 2


def _traffic(run_dir: Path, tail: str = "") -> Path:
    """A run directory whose traffic.jsonl holds two records, plus ``tail``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text("data:\n  params:\n    image_size: 32\n")
    weights = [["weights", "w", "float32", [8, 3, 3, 3], 864]]
    lines = [
        {"round": 1, "stage": "fit", "client": c, "received": weights, "sent": weights}
        for c in ("h0", "h1")
    ]
    text = "".join(json.dumps(r) + "\n" for r in lines)
    (run_dir / "traffic.jsonl").write_text(text + tail)
    return run_dir


@pytest.mark.parametrize(
    ("tail", "said"),
    [
        ('{"round": 2, "stage": "fit"\n', "line 3 is not valid JSON"),
        ('{"round": 2, "stage": "fit", "cli', "line 3 is truncated"),  # mid-write
        ("[1, 2, 3]\n", "line 3 is a list; expected a JSON object"),
        ('{"round": "2", "stage": "fit", "client": "h0", "received": []}\n', "round"),
        (
            '{"round": 2, "stage": "fit", "client": "h0", "received": [], '
            '"sent": [["pool", "x", "uint8", "big", 1]]}\n',
            "line 3: 'sent' must be a list of",
        ),
    ],
)
def test_audit_cannot_say_clean_when_a_record_is_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tail: str, said: str
) -> None:
    clean = _traffic(tmp_path / "clean")
    assert audit(clean)[1] == []
    assert main(["audit", str(clean)]) == 0
    capsys.readouterr()
    run_dir = _traffic(tmp_path / "bad", tail)
    assert main(["audit", str(run_dir)]) == 2
    captured = capsys.readouterr()
    assert "traffic.jsonl'" in captured.err and said in captured.err
    assert "nothing image-shaped or raw left" not in captured.out


def test_audit_with_an_unreadable_run_config_is_an_error(tmp_path: Path) -> None:
    run_dir = _traffic(tmp_path)
    (run_dir / "config.yaml").write_text("data: [1\n")
    with pytest.raises(ConfigError, match="config.yaml' is not valid YAML"):
        audit(run_dir)
