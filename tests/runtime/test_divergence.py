"""A diverging run stops at the round where its loss or weights stopped being
finite, naming the round, the client, the value and ``train.lr``; the records
and checkpoint of the rounds before it stay (it used to end in ``ValueError:
probs must contain only finite values`` from the metrics)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from fedpath.cli import main
from fedpath.config import load_config
from fedpath.config_sections import TrainConfig
from fedpath.errors import RunError
from fedpath.runtime import inprocess
from fedpath.runtime.divergence import (
    check_global,
    check_replies,
    diverged,
    is_loss_key,
    local_loss_diverged,
    non_finite,
)
from fedpath.runtime.experiment import run_dir_for, run_experiment
from fedpath.runtime.persistence import load_checkpoint
from fedpath.runtime.transport import Exchanged
from fedpath.types import ArrayDict, Payload
from fedpath.utils.io import read_jsonl
from tests.conftest import tiny_overrides

TRAIN = TrainConfig(lr=0.5)


def _reply(loss: float, weight: float = 1.0) -> Payload:
    return Payload(
        {"weights": {"w": np.full(3, weight, np.float32), "n": np.ones(2, np.int64)}},
        {"num_examples": 4, "loss": loss},
    )


def test_loss_keys() -> None:
    assert is_loss_key("loss") and is_loss_key("ce_loss")
    assert not is_loss_key("num_examples") and not is_loss_key("lossy")


def test_a_non_finite_client_loss_names_round_client_value_and_setting() -> None:
    check_replies(TRAIN, "fit", 3, {"a": _reply(0.7), "b": _reply(2.0)})  # finite
    for bad in (math.nan, math.inf):
        with pytest.raises(RunError) as err:
            check_replies(TRAIN, "fit", 3, {"a": _reply(0.7), "b": _reply(bad)})
        text = str(err.value)
        assert text.startswith("round 3: client b reported the training loss")
        assert str(bad) in text and "train.lr (now 0.5)" in text
        assert "rounds 1-2 are kept" in text


def test_non_finite_global_weights_name_the_clients_that_sent_them() -> None:
    good: ArrayDict = {"w": np.ones(3, np.float32), "n": np.ones(2, np.int64)}
    check_global(TRAIN, 2, good, {"a": _reply(0.1)})
    check_global(TRAIN, 2, None, {"a": _reply(0.1)})  # no global model: nothing
    bad: ArrayDict = {**good, "w": np.array([1.0, np.nan, 2.0], np.float32)}
    assert non_finite(bad) == ["w"]
    replies = {"a": _reply(0.1), "b": _reply(0.1, weight=math.inf)}
    with pytest.raises(RunError, match=r"round 2: .*'w' \(sent by client b\)"):
        check_global(TRAIN, 2, bad, replies)


def test_the_first_round_says_nothing_was_kept() -> None:
    assert "no round had completed" in str(diverged(TRAIN, 1, "x"))


def _tiny(tmp_path: Path, *extra: str) -> list[str]:
    return tiny_overrides(tmp_path, "lodo.targets=[hospital_2]", *extra)


def test_a_huge_learning_rate_stops_at_round_1_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    over = _tiny(
        tmp_path, "train.optimizer=sgd", "train.lr=1e12", "train.schedule=constant"
    )
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(load_config(None, over).to_yaml())
    assert main(["run", str(cfg_file), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "round 1" in err and "train.lr (now 1e+12)" in err
    assert "Traceback" not in err and "probs must" not in err


def test_divergence_in_round_2_keeps_round_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_config(None, _tiny(tmp_path, "train.rounds=3"))
    real = inprocess.LocalTransport.exchange

    def nan_loss_in_round_2(
        self: inprocess.LocalTransport,
        stage: str,
        rnd: int,
        messages: Mapping[str, Payload],
    ) -> Exchanged:
        replies, info = real(self, stage, rnd, messages)
        if rnd == 2:
            cid = sorted(replies)[-1]
            replies[cid].scalars["loss"] = math.nan
        return replies, info

    monkeypatch.setattr(inprocess.LocalTransport, "exchange", nan_loss_in_round_2)
    with pytest.raises(RunError, match=r"^round 2: client hospital_\d/c\d "):
        run_experiment(cfg)
    run_dir = run_dir_for(cfg, "hospital_2", 0)
    rounds = {r["round"] for r in read_jsonl(run_dir / "results.jsonl")}
    assert rounds == {1}  # nothing of the diverged round was recorded
    ckpt = load_checkpoint(run_dir, cfg.hash())
    assert ckpt is not None and ckpt.round == 1  # not overwritten
    weights = ckpt.server.arrays["weights"]
    assert not non_finite(weights)


def test_a_local_loss_error_reads_the_same_in_process_and_on_a_node() -> None:
    # tasks.base.step's FloatingPointError: only the part before ';' is kept
    train = TrainConfig(lr=0.5)
    err = FloatingPointError("local loss became nan at round 2; internal detail")
    got = str(local_loss_diverged(train, 2, "h0/c1", err))
    assert got.startswith("round 2: client h0/c1: local loss became nan at round 2:")
    assert "internal detail" not in got and "lower train.lr (now 0.5)" in got
