"""What a run leaves on disk: :mod:`fedpath.runtime.persistence`."""

from __future__ import annotations

import datetime
import errno
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.config import load_config
from fedpath.errors import ConfigError, ResumeError, RunError
from fedpath.runtime.experiment import run_dir_for, run_experiment
from fedpath.runtime.persistence import (
    CHECKPOINT,
    CLIENT_MODELS,
    FINAL,
    MODEL,
    RESULTS,
    TRAFFIC,
    check_same_config,
    disk_full,
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
from tests.runtime.conftest import make_checkpoint


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
    ckpt = make_checkpoint(selected=sel, averaged=sel.copy())
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
    save_checkpoint(tmp_path, make_checkpoint(), "h1", "hospital_2", 0)
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
    save_checkpoint(tmp_path, make_checkpoint(), "h1", "t", 0)
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
    save_checkpoint(tmp_path, make_checkpoint(), "h1", "t", 0)
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
    save_checkpoint(tmp_path, make_checkpoint(rnd=2), "h", "t", 0)
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
    final = {"config_hash": cfg.hash(), "method": "fedavg", "target": "t", "seed": 0}
    save_final(tmp_path, {**final, "round": 2})
    assert json.loads((tmp_path / FINAL).read_text())["round"] == 2
    assert finished_record(tmp_path, cfg, cfg.hash()) == {
        **final,
        "round": 2,
        "evaluation": {},
    }
    assert finished_record(tmp_path / "none", cfg, cfg.hash()) is None
    (tmp_path / "config.yaml").write_text(cfg.to_yaml())
    # output_dir is run-local (a moved run): not named as a difference
    other = cfg.replace(**{"train.lr": 0.5, "output_dir": str(tmp_path / "moved")})
    with pytest.raises(ResumeError, match=r"\(differing keys: train.lr\)"):
        finished_record(tmp_path, other, other.hash())
    with pytest.raises(ResumeError, match=r"differing keys: unknown"):
        check_same_config(tmp_path / "none", {}, other, other.hash())


def test_a_full_disk_names_the_file_the_errno_and_how_to_resume(
    tmp_path: Path,
) -> None:
    path = tmp_path / CHECKPOINT
    for code, words in ((errno.ENOSPC, "no space left on device (ENOSPC)"),
                        (errno.EDQUOT, "disk quota exceeded (EDQUOT)")):  # fmt: skip
        with pytest.raises(RunError) as err, disk_full(path, 4):
            raise OSError(code, "whatever the OS says")
        text = str(err.value)
        assert text.startswith(f"cannot write {path}: {words}")
        assert "the checkpoint of round 4, the last complete round, is kept" in text
        assert "--resume" in text
    with pytest.raises(RunError, match="no round had completed"), disk_full(path, 0):
        raise OSError(errno.ENOSPC, "full")
    with pytest.raises(PermissionError), disk_full(path, 1):  # not a full disk
        raise PermissionError(errno.EACCES, "denied")


def test_a_folder_where_a_run_file_goes_is_refused_at_the_start(
    tmp_path: Path,
) -> None:
    for name in (RESULTS, CHECKPOINT, FINAL):
        run_dir = tmp_path / name.replace(".", "_")
        (run_dir / name).mkdir(parents=True)
        for fresh in (True, False):
            with pytest.raises(ConfigError, match=f"{name} is a folder"):
                open_run_dir(run_dir, fresh=fresh)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        open_run_dir(tmp_path / "file" / "run", fresh=True)


# ------------------------------------------- damaged or crafted run files


def test_a_checkpoint_torch_cannot_read_is_one_line_naming_the_fix(
    tmp_path: Path,
) -> None:
    # a pickle of a class weights-only loading refuses: torch's text is several
    # lines advising an unsafe load
    torch.save({"when": datetime.date(2020, 1, 1)}, tmp_path / CHECKPOINT)
    with pytest.raises(ResumeError) as err:
        load_checkpoint(tmp_path, "h1")
    text = str(err.value)
    assert "\n" not in text and "weights_only" not in text
    assert text.startswith(f"cannot read checkpoint {tmp_path / CHECKPOINT}: ")
    assert "not a fedpath checkpoint, or damaged" in text and "delete it" in text


def _crafted(tmp_path: Path, key: str, value: object) -> None:
    """A checkpoint with ``key`` set to ``value`` (removed when None) and a
    digest recomputed to match: the digest cannot tell it from a real one."""
    save_checkpoint(tmp_path, make_checkpoint(selected=Payload()), "h1", "t", 0)
    raw = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    if value is None:
        del raw[key]
    else:
        raw[key] = value
    raw["digest"] = tree_digest(raw)
    torch.save(raw, tmp_path / CHECKPOINT)


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("round", None, "round"),
        ("round", "2", "round"),
        ("round", -1, "round"),
        ("clients", None, "clients"),
        ("clients", [1, 2], "clients"),
        ("clients", {"c0": 3}, "clients.c0"),
        ("last_eval", "{not json", "last_eval"),
        ("last_eval", "[1]", "last_eval"),
        ("last_eval", 5, "last_eval"),
        ("server", None, "server"),
        ("server", {"arrays": {"weights": {"w": 1}}}, "server"),
        ("server", {"arrays": [1]}, "server"),
        ("selected", {"scalars": [1]}, "selected"),
        (
            "averaged",
            {"arrays": {"g": {"w": torch.ones(2, dtype=torch.bfloat16)}}},
            "averaged",
        ),
    ],
)
def test_a_crafted_checkpoint_with_a_matching_digest_names_the_field(
    tmp_path: Path, key: str, value: object, named: str
) -> None:
    _crafted(tmp_path, key, value)
    with pytest.raises(
        ResumeError,
        match=rf"checkpoint .*: '{named}' must be .*; "
        "not a fedpath checkpoint, or damaged; delete it",
    ):
        load_checkpoint(tmp_path, "h1")


def test_resume_over_a_damaged_final_json_is_one_error(tmp_path: Path) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path))
    for text in ('{"method": "fedavg", "tar', "[1, 2]", '{"method": 3}'):
        (tmp_path / FINAL).write_text(text)
        with pytest.raises(ResumeError, match=r"final.json'.*delete .*final.json"):
            finished_record(tmp_path, cfg, cfg.hash())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"round": 1}\nnot json\n{"round": 3}\n', "line 2 is not valid JSON"),
        ('{"round": 1}\n[1, 2]\n', "line 2 is a list; expected a JSON object"),
        ('{"round": 1}\n{"round": "x"}\n', "record 2 has a 'round' that is not"),
    ],
)
def test_resume_over_damaged_records_is_one_error(
    tmp_path: Path, text: str, expected: str
) -> None:
    (tmp_path / RESULTS).write_text(text)
    with pytest.raises(ResumeError, match=rf"results.jsonl'.*{expected}.*without"):
        truncate_results(tmp_path / RESULTS, 2)


def test_a_torn_last_record_is_dropped_on_resume(tmp_path: Path) -> None:
    (tmp_path / RESULTS).write_text('{"round": 1}\n{"round": 2}\n{"rou')
    truncate_results(tmp_path / RESULTS, 2)
    assert _rounds(tmp_path / RESULTS) == [1, 2]


@pytest.mark.parametrize("saved", ["a: [1\n", "a: 1\na: 2\n", "\xff"])
def test_a_damaged_saved_config_still_gives_the_refusal(
    tmp_path: Path, saved: str
) -> None:
    cfg = load_config(None, tiny_overrides(tmp_path))
    (tmp_path / "config.yaml").write_bytes(saved.encode("latin-1"))
    with pytest.raises(ResumeError, match=r"differing keys: unknown"):
        check_same_config(tmp_path, {"config_hash": "old"}, cfg, cfg.hash())
