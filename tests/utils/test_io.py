"""Atomic writes and JSON lines (fedpath.utils.io): nothing half-written is left,
strict JSON, and a torn last line ignored."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.utils.io import (
    append_jsonl,
    atomic_torch_save,
    atomic_write_bytes,
    atomic_write_text,
    dumps_json,
    json_safe,
    read_jsonl,
)


def test_an_atomic_write_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "f.txt"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["f.txt"]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask  # not mkstemp's 0600


def test_a_failed_write_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.bin"
    atomic_write_bytes(path, b"old")

    def broken(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_torch_objects_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "state.pt"
    atomic_torch_save({"w": torch.arange(3)}, path)
    assert torch.equal(torch.load(path)["w"], torch.arange(3))


def test_json_is_strict_and_plain() -> None:
    obj = {1: [math.nan, math.inf, 0.5], "a": np.float32(2.5), "b": np.arange(2)}
    assert json_safe(obj) == {"1": [None, None, 0.5], "a": 2.5, "b": [0, 1]}
    text = dumps_json({"x": float("nan"), "t": torch.tensor([1.5]), "p": Path("q")})
    assert json.loads(text) == {"x": None, "t": [1.5], "p": "q"}


def test_jsonl_appends_and_ignores_only_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append_jsonl(path, {"round": 1, "acc": math.nan})
    append_jsonl(path, {"round": 2})
    assert list(read_jsonl(path)) == [{"round": 1, "acc": None}, {"round": 2}]
    with path.open("a") as fh:
        fh.write('{"round": 3, "ac')  # a crash mid-write
    assert [r["round"] for r in read_jsonl(path)] == [1, 2]
    path.write_text('{"round": 1}\nnot json\n{"round": 3}\n')
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        list(read_jsonl(path))
