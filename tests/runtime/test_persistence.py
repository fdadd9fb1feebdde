"""What a run leaves on disk: :mod:`fedpath.runtime.persistence`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.config import load_config
from fedpath.errors import ResumeError
from fedpath.runtime.experiment import run_dir_for, run_experiment
from fedpath.runtime.persistence import (
    CHECKPOINT,
    CLIENT_MODELS,
    FINAL,
    MODEL,
    RESULTS,
    TRAFFIC,
    Checkpoint,
    check_same_config,
    finished_record,
    load_checkpoint,
    open_run_dir,
    save_checkpoint,
    save_final,
    tree_digest,
    truncate_results,
)
from fedpath.types import ClientState, Payload
from tests.conftest import tiny_overrides


def _ckpt(rnd: int = 2, **extra: Payload | None) -> Checkpoint:
    w = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    return Checkpoint(
        round=rnd,
        server=Payload({"weights": w}, {"step": 4}),
        clients={"c0": ClientState({"local": {"b": np.ones(2, np.int64)}}, {"n": 3})},
        last_eval={"target": {"accuracy": 0.5}},
        **extra,
    )


def _lines(path: Path, rounds: list[int | None]) -> None:
    path.write_text(
        "".join(
            json.dumps({"kind": "x"} if r is None else {"kind": "x", "round": r}) + "\n"
            for r in rounds
        )
    )


def _rounds(path: Path) -> list[int | None]:
    return [json.loads(x).get("round") for x in path.read_text().splitlines()]


def test_a_checkpoint_round_trips_with_its_state(tmp_path: Path) -> None:
    sel = Payload({"weights": {"w": np.zeros(3, np.float64)}}, {"round": 1})
    ckpt = _ckpt(selected=sel, averaged=sel.copy())
    save_checkpoint(tmp_path, ckpt, "h1", "hospital_2", 0)
    back = load_checkpoint(tmp_path, "h1")
    assert back is not None and back.round == 2
    w = back.server.arrays["weights"]["w"]
    assert w.dtype == np.float32 and np.array_equal(w, np.arange(6).reshape(2, 3))
    assert back.server.scalars == {"step": 4}
    assert type(back.clients["c0"]) is ClientState
    assert back.clients["c0"].arrays["local"]["b"].dtype == np.int64
    assert back.last_eval == {"target": {"accuracy": 0.5}}
    assert back.selected is not None and back.averaged is not None
    assert np.array_equal(back.selected.arrays["weights"]["w"], np.zeros(3))
    assert back.selected.scalars == {"round": 1}
    # without validation or averaging the checkpoint holds neither
    save_checkpoint(tmp_path, _ckpt(), "h1", "hospital_2", 0)
    raw = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    assert "selected" not in raw and "averaged" not in raw
    assert (raw["fold"], raw["seed"], raw["config_hash"]) == ("hospital_2", 0, "h1")
    plain = load_checkpoint(tmp_path, "h1")
    assert plain is not None and plain.selected is None and plain.averaged is None


def test_the_digest_is_sha256_over_sorted_paths_values_and_tensor_bytes() -> None:
    t = torch.tensor([1.0, 2.0], dtype=torch.float32)
    tree = {"b": 3, "a": {"t": t, "digest": "kept"}, "digest": "dropped"}
    h = hashlib.sha256()
    h.update(b"/a/digest\0" + repr("kept").encode())  # nested: not the digest
    h.update(b"/a/t\0" + b"torch.float32(2,)" + t.numpy().tobytes())
    h.update(b"/b\0" + repr(3).encode())
    assert tree_digest(tree) == h.hexdigest()


def test_the_digest_sees_a_flipped_bit_a_dtype_and_a_shape() -> None:
    t = torch.arange(4, dtype=torch.int32)
    base = tree_digest({"t": t})
    flipped = t.clone()
    flipped[0] ^= 1 << 30
    assert tree_digest({"t": flipped}) != base
    assert tree_digest({"t": t.view(torch.float32)}) != base  # same bytes
    assert tree_digest({"t": t.reshape(2, 2)}) != base
    assert tree_digest({"t": t, "digest": "anything"}) == base
    assert tree_digest({"t": torch.zeros(0, 3)}) != tree_digest(
        {"t": torch.zeros(3, 0)}
    )


def test_a_corrupted_or_foreign_checkpoint_is_refused_naming_why(
    tmp_path: Path,
) -> None:
    save_checkpoint(tmp_path, _ckpt(), "h1", "t", 0)
    with pytest.raises(ResumeError, match=r"different config \(hash h1 != h2\)"):
        load_checkpoint(tmp_path, "h2")
    raw = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    raw["round"] = 5  # a value edited behind the digest's back
    torch.save(raw, tmp_path / CHECKPOINT)
    with pytest.raises(ResumeError, match="checkpoint.pt is corrupted"):
        load_checkpoint(tmp_path, "h1")
    (tmp_path / CHECKPOINT).write_bytes(b"not a checkpoint")
    with pytest.raises(ResumeError, match="cannot read checkpoint"):
        load_checkpoint(tmp_path, "h1")


def test_a_checkpoint_without_digest_is_refused(tmp_path: Path) -> None:
    save_checkpoint(tmp_path, _ckpt(), "h1", "t", 0)
    path = tmp_path / "checkpoint.pt"
    tree = torch.load(path, weights_only=True)
    del tree["digest"]
    torch.save(tree, path)
    with pytest.raises(ResumeError, match="has no digest"):
        load_checkpoint(tmp_path, "h1")
    torch.save([1, 2], path)  # not a fedpath checkpoint at all
    with pytest.raises(ResumeError, match="has no digest"):
        load_checkpoint(tmp_path, "h1")


def test_resume_refuses_a_different_config(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        tiny_overrides(
            tmp_path, "lodo.targets=[hospital_1]", "runtime.export_model=false"
        ),
    )
    run_experiment(cfg)
    (run_dir_for(cfg, "hospital_1", 0) / "final.json").unlink()
    other = cfg.replace(**{"train.lr": 0.5})
    with pytest.raises(ResumeError, match="different config"):
        run_experiment(other, resume=True)


def test_resuming_drops_the_records_of_rounds_after_the_checkpoint(
    tmp_path: Path,
) -> None:
    _lines(tmp_path / RESULTS, [1, 2, 3, None])
    _lines(tmp_path / TRAFFIC, [2, 3])
    save_checkpoint(tmp_path, _ckpt(rnd=2), "h", "t", 0)
    assert load_checkpoint(tmp_path, "h") is not None
    assert _rounds(tmp_path / RESULTS) == [1, 2, None]  # no round: round 0
    assert _rounds(tmp_path / TRAFFIC) == [2]


def test_without_a_checkpoint_the_run_starts_with_no_records(tmp_path: Path) -> None:
    _lines(tmp_path / RESULTS, [1])
    _lines(tmp_path / TRAFFIC, [1])
    assert load_checkpoint(tmp_path, "h") is None
    assert not (tmp_path / RESULTS).exists() and not (tmp_path / TRAFFIC).exists()
    truncate_results(tmp_path / "absent.jsonl", 1)  # nothing to truncate: no error
    assert not (tmp_path / "absent.jsonl").exists()


def test_open_run_dir_drops_torn_writes_and_for_a_fresh_run_every_output(
    tmp_path: Path,
) -> None:
    run = tmp_path / "a" / "b"
    open_run_dir(run, fresh=False)
    assert run.is_dir()
    outputs = [RESULTS, CHECKPOINT, FINAL, MODEL, TRAFFIC, "config.yaml"]
    for name in [*outputs, ".checkpoint.pt.x.tmp"]:
        (run / name).write_text("x")
    (run / CLIENT_MODELS).mkdir()
    (run / CLIENT_MODELS / "c0.fpm").write_text("x")
    open_run_dir(run, fresh=False)  # resuming: the outputs stay
    assert sorted(p.name for p in run.iterdir()) == sorted([*outputs, CLIENT_MODELS])
    open_run_dir(run, fresh=True)
    # config.yaml is rewritten by the run itself; the clients' folder stays, empty
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", CLIENT_MODELS]
    assert not list((run / CLIENT_MODELS).iterdir())


def test_a_finished_run_with_another_config_names_the_differing_keys(
    tmp_path: Path,
) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path))
    save_final(tmp_path, {"config_hash": cfg.hash(), "round": 2})
    assert json.loads((tmp_path / FINAL).read_text())["round"] == 2
    assert finished_record(tmp_path, cfg, cfg.hash()) == {
        "config_hash": cfg.hash(),
        "round": 2,
    }
    assert finished_record(tmp_path / "none", cfg, cfg.hash()) is None
    (tmp_path / "config.yaml").write_text(cfg.to_yaml())
    # output_dir is run-local (a moved run): not named as a difference
    other = cfg.replace(**{"train.lr": 0.5, "output_dir": str(tmp_path / "moved")})
    with pytest.raises(ResumeError, match=r"\(differing keys: train.lr\)"):
        finished_record(tmp_path, other, other.hash())
    with pytest.raises(ResumeError, match=r"differing keys: unknown"):
        check_same_config(tmp_path / "none", {}, other, other.hash())
