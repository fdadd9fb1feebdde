"""A corrupted checkpoint is refused before a resume, naming the file (it used
to resume with rc 0 and export a garbage weight)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from fedpath.cli import main
from fedpath.config import load_config
from fedpath.errors import ResumeError, RunError
from fedpath.runtime.experiment import run_dir_for, run_experiment
from fedpath.runtime.persistence import load_checkpoint, tree_digest
from tests.conftest import tiny_overrides


def _run(tmp_path: Path) -> tuple[list[str], Path]:
    over = tiny_overrides(tmp_path, "lodo.targets=[hospital_2]", "train.rounds=1")
    cfg = load_config(None, over)
    run_experiment(cfg)
    return over, run_dir_for(cfg, "hospital_2", 0)


def test_a_flipped_weight_in_the_checkpoint_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    over, run_dir = _run(tmp_path)
    path = run_dir / "checkpoint.pt"
    cfg_hash = load_config(None, over).hash()
    assert load_checkpoint(run_dir, cfg_hash) is not None  # intact: loads
    tree = torch.load(path, weights_only=True)
    assert tree["digest"] == tree_digest(tree)
    weights = tree["server"]["arrays"]["weights"]
    name = next(k for k, v in weights.items() if v.is_floating_point() and v.numel())
    raw = weights[name].view(-1).view(torch.int32)
    raw[0] ^= 1 << 30  # one flipped bit of the exponent: a weight of ~1e38
    torch.save(tree, path)
    with pytest.raises(ResumeError, match="checkpoint.pt is corrupted"):
        load_checkpoint(run_dir, cfg_hash)
    (run_dir / "final.json").unlink()  # unfinished: --resume reads the checkpoint
    assert main(["run", str(_yaml(tmp_path, over)), "--resume", "--quiet"]) == 2
    assert "is corrupted" in capsys.readouterr().err


def _yaml(tmp: Path, over: list[str]) -> Path:
    cfg = load_config(None, over)
    f = tmp / "cfg.yaml"
    f.write_text(cfg.to_yaml())
    return f


def test_resume_of_a_finished_run_with_another_config_is_refused(
    tmp_path: Path,
) -> None:
    over, _ = _run(tmp_path)
    changed = load_config(None, [*over, "train.lr=0.01"])
    with pytest.raises(ResumeError, match=r"differing keys: train.lr\)"):
        run_experiment(changed, resume=True)
    # the same config: the finished run is skipped, its record returned
    assert run_experiment(load_config(None, over), resume=True)[0]["round"] == 1


def test_a_fresh_run_leaves_nothing_of_the_old_one(tmp_path: Path) -> None:
    over, run_dir = _run(tmp_path)
    assert (run_dir / "model.fpm").is_file()
    (run_dir / ".checkpoint.pt.abc123.tmp").write_bytes(b"half a write")
    run_experiment(load_config(None, [*over, "runtime.export_model=false"]))
    assert not (run_dir / "model.fpm").exists()  # not the old run's model
    assert not list(run_dir.glob(".*.tmp"))


def test_a_moved_run_directory_still_resumes(tmp_path: Path) -> None:
    over, run_dir = _run(tmp_path / "a")
    (run_dir / "final.json").unlink()  # as if killed before the end
    moved = tmp_path / "b"
    (tmp_path / "a").rename(moved)
    cfg = load_config(None, [*over, f"output_dir={moved}"])
    assert run_experiment(cfg, resume=True)[0]["round"] == 1  # resumed, not refused


def test_a_crash_before_the_checkpoint_loses_no_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedpath.runtime.persistence as persistence
    from fedpath.utils.io import read_jsonl

    over = tiny_overrides(tmp_path, "lodo.targets=[hospital_2]", "train.rounds=3")
    cfg = load_config(None, over)
    real = persistence.write_checkpoint
    calls = []

    def crash_on_round_2(run_dir: Path, blob: bytes) -> None:
        calls.append(1)
        real(run_dir, blob)
        if len(calls) == 2:  # killed right after round 2's checkpoint
            raise KeyboardInterrupt

    monkeypatch.setattr(persistence, "write_checkpoint", crash_on_round_2)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg)
    monkeypatch.setattr(persistence, "write_checkpoint", real)
    run_experiment(cfg, resume=True)
    rows = list(read_jsonl(run_dir_for(cfg, "hospital_2", 0) / "results.jsonl"))
    for kind in ("round", "timing"):
        assert [r["round"] for r in rows if r["kind"] == kind] == [1, 2, 3], kind


def test_a_full_disk_at_the_checkpoint_is_one_error_and_resumes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import fedpath.runtime.persistence as persistence
    from fedpath.utils.io import read_jsonl

    over = tiny_overrides(tmp_path, "lodo.targets=[hospital_2]", "train.rounds=3")
    cfg = load_config(None, over)
    real = persistence.write_checkpoint
    calls = []

    def full_on_round_2(run_dir: Path, blob: bytes) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(run_dir, blob)

    monkeypatch.setattr(persistence, "write_checkpoint", full_on_round_2)
    run_dir = run_dir_for(cfg, "hospital_2", 0)
    with pytest.raises(RunError) as err:
        run_experiment(cfg)
    text = str(err.value)
    assert text.startswith(f"cannot write {run_dir / 'checkpoint.pt'}: no space left")
    assert "round 1, the last complete round, is kept" in text and "--resume" in text
    assert load_checkpoint(run_dir, cfg.hash()).round == 1  # type: ignore[union-attr]
    # through the command line: one line, exit 2
    calls.clear()
    assert main(["run", str(_yaml(tmp_path, over)), "--quiet"]) == 2
    assert "error: cannot write" in capsys.readouterr().err
    monkeypatch.setattr(persistence, "write_checkpoint", real)
    run_experiment(cfg, resume=True)
    rows = list(read_jsonl(run_dir / "results.jsonl"))
    assert [r["round"] for r in rows if r["kind"] == "round"] == [1, 2, 3]


def test_run_names_must_stay_inside_output_dir() -> None:
    from fedpath.config import ConfigError

    for bad in ("name=../..", "name=a/b", "label=..", "name=.x"):
        with pytest.raises(ConfigError, match="usable as one folder"):
            load_config(None, [bad])


def test_results_are_strict_json_and_tables_read_nulls(tmp_path: Path) -> None:
    import json

    import numpy as np

    from fedpath.utils.io import append_jsonl, dumps_json

    rec = {"auroc": float("nan"), "x": np.float32(0.5), "a": np.array([1.0, np.inf])}
    assert dumps_json(rec) == '{"auroc": null, "x": 0.5, "a": [1.0, null]}'
    path = tmp_path / "r.jsonl"
    append_jsonl(path, rec)
    json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    # a one-class target has an undefined AUROC: written null, tabulated as NaN
    _, run_dir = _run(tmp_path)
    final = json.loads(
        (run_dir / "final.json").read_text(),
        parse_constant=lambda c: pytest.fail(f"bare {c} in final.json"),
    )
    final["evaluation"]["target"]["auroc"] = None
    (run_dir / "final.json").write_text(json.dumps(final))
    from fedpath.runtime.experiment import collect_rows

    assert collect_rows([tmp_path])[0].metrics["auroc"] is None
    assert main(["table", str(tmp_path), "--metric", "auroc", "--quiet"]) == 0


def test_min_replies_above_the_round_size_fails_at_the_start(tmp_path: Path) -> None:
    from fedpath.config import ConfigError

    over = tiny_overrides(tmp_path, "lodo.targets=[hospital_2]", "train.min_replies=5")
    with pytest.raises(ConfigError, match=r"'train.min_replies': 5, but a round"):
        run_experiment(load_config(None, over))
