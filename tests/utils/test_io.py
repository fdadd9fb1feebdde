"""Atomic writes and JSON lines (fedpath.utils.io): nothing half-written is left,
strict JSON, and a torn last line ignored."""

from __future__ import annotations

import json
import logging
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from fedpath.errors import DataError
from fedpath.schema import ConfigError
from fedpath.utils.io import (
    append_jsonl,
    atomic_torch_save,
    atomic_write_bytes,
    atomic_write_text,
    check_output_file,
    dumps_json,
    json_safe,
    make_folder,
    read_json_lines,
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
    with pytest.raises(DataError, match="results.jsonl': line 2 is not valid JSON"):
        list(read_jsonl(path))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"round": 1}\n[1, 2]\n', "line 2 is a list; expected a JSON object"),
        ('{"round": 1}\n"secret"\n', "line 2 is a string; expected a JSON object"),
        # a complete last line (its newline written) is damage, not a write
        ('{"round": 1}\n{"secret": \n', "line 2 is not valid JSON"),
    ],
)
def test_jsonl_refuses_what_is_not_a_record_without_quoting_it(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(text)
    with pytest.raises(DataError, match=expected) as err:
        list(read_jsonl(path, "run record"))
    assert str(err.value).startswith(f"run record {str(path)!r}: ")
    assert "secret" not in str(err.value)


def test_jsonl_says_when_it_leaves_a_torn_last_line_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text('{"round": 1}\n{"rou')
    with caplog.at_level(logging.WARNING, logger="fedpath"):
        got = read_json_lines(path, "run record")
    assert got.records == [{"round": 1}] and got.torn == 2
    assert "line 2 is truncated" in caplog.text
    with pytest.raises(DataError, match="line 2 is truncated"):
        read_json_lines(path, "traffic record", torn_tail="refuse")


@pytest.mark.parametrize("make", ["folder", "missing", "latin-1"])
def test_jsonl_names_a_file_it_cannot_read(tmp_path: Path, make: str) -> None:
    path = tmp_path / "results.jsonl"
    if make == "folder":
        path.mkdir()
    elif make == "latin-1":
        path.write_bytes(b'{"a": "\xff"}\n')
    with pytest.raises(DataError, match=r"results.jsonl' (is a|does not|is not)"):
        list(read_jsonl(path))


# ------------------------------------------------- folders and files to write


def test_make_folder_creates_nested_folders(tmp_path: Path) -> None:
    make_folder(tmp_path / "a" / "b", "output_dir")
    assert (tmp_path / "a" / "b").is_dir()
    make_folder(tmp_path / "a" / "b", "output_dir")  # already there: fine


def test_make_folder_names_the_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    for target in (tmp_path / "f", tmp_path / "f" / "sub" / "deeper"):
        with pytest.raises(ConfigError) as err:
            make_folder(target, "output_dir 'x'")
        text = str(err.value)
        assert text.startswith(f"output_dir 'x': cannot create the folder {target}")
        assert f"{tmp_path / 'f'} is a file, not a folder" in text


def test_make_folder_gives_the_systems_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(
        ConfigError, match=r"--out: cannot create .*: permission denied"
    ):
        make_folder(tmp_path / "new", "--out")


def test_make_folder_refuses_a_folder_it_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(ConfigError, match="cannot be written"):
        make_folder(tmp_path, "output_dir")


def test_check_output_file_refuses_a_folder_and_a_file_as_parent(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match=r"^--out .*: is a folder; expected"):
        check_output_file(tmp_path, "--out")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        check_output_file(tmp_path / "f" / "p.csv", "--out")
    check_output_file(tmp_path / "new" / "p.csv", "--out")  # its folder is made
    assert (tmp_path / "new").is_dir()
