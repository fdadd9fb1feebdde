"""Reading a run's records back (fedpath.runtime.records): a damaged
``final.json`` or JSON-lines file is one error naming the file and the line;
only a truncated last line of a run still writing is left out."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from fedpath.errors import DataError
from fedpath.runtime.records import read_final, read_json_lines

GOOD = {
    "method": "fedavg",
    "target": "h2",
    "seed": 0,
    "evaluation": {"target": {"accuracy": 0.5, "n": 4}, "source_mean_accuracy": 0.6},
}


def _final(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "final.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return tmp_path


def test_a_good_final_json_is_read(tmp_path: Path) -> None:
    assert read_final(_final(tmp_path, json.dumps(GOOD))) == GOOD
    bare = {k: GOOD[k] for k in ("method", "target", "seed")}
    assert read_final(_final(tmp_path, json.dumps(bare)))["evaluation"] == {}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (json.dumps(GOOD)[:40], r"not valid JSON \(.* at line 1, column \d+\)"),
        ("not json", r"not valid JSON \(.* line 1, column 1\)"),
        ("[1, 2]", "expected a JSON object, got a list"),
        (b"\xff\xfe{}", r"not UTF-8 text \(byte 0\)"),
        (json.dumps({**GOOD, "seed": "0x"}), "'seed' must be an integer, got a string"),
        (json.dumps({**GOOD, "method": None}), "'method' must be a string, got null"),
        (json.dumps({**GOOD, "evaluation": []}), "'evaluation' must be an object"),
        (
            json.dumps({**GOOD, "evaluation": {"target": {"accuracy": "high"}}}),
            "'evaluation.target.accuracy' must be a number or null, got a string",
        ),
        (
            json.dumps({**GOOD, "evaluation": {"clients": {"c0": [1]}}}),
            "'evaluation.clients.c0' must be an object, got a list",
        ),
        (
            json.dumps({**GOOD, "evaluation": {"selected": {"target": 3}}}),
            "'evaluation.selected.target' must be an object, got a number",
        ),
        (
            json.dumps({**GOOD, "evaluation": {"adapted": None}}),
            "'evaluation.adapted' must be an object, got null",
        ),
    ],
)
def test_a_damaged_final_json_names_the_file_and_the_problem(
    tmp_path: Path, text: str | bytes, said: str
) -> None:
    with pytest.raises(DataError, match=f"final.json'.*{said}"):
        read_final(_final(tmp_path, text))


def test_a_folder_named_final_json_is_named(tmp_path: Path) -> None:
    (tmp_path / "final.json").mkdir()
    with pytest.raises(DataError, match="final.json' is a folder"):
        read_final(tmp_path)


def test_json_lines_name_the_damaged_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text('{"round": 1}\n\n{"round": 2\n{"round": 3}\n')
    with pytest.raises(DataError, match=r"results.jsonl': line 3 is not valid JSON"):
        read_json_lines(path, "run record")
    path.write_text('{"round": 1}\n[1, 2]\n')
    with pytest.raises(DataError, match="line 2 is a list; expected a JSON object"):
        read_json_lines(path, "run record")
    # a complete last line that is not JSON is damage, not a write in progress
    path.write_text('{"round": 1}\n{"round": 2\n')
    with pytest.raises(DataError, match="line 2 is not valid JSON"):
        read_json_lines(path, "run record")


def test_a_truncated_last_line_is_left_out_with_a_note_or_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text('{"round": 1}\n\n{"round": 2}\n{"rou')
    with caplog.at_level(logging.WARNING, logger="fedpath"):
        got = read_json_lines(path, "run record")
    assert got.records == [{"round": 1}, {"round": 2}] and got.numbers == [1, 3]
    assert got.torn == 4 and "line 4 is truncated" in caplog.text
    with pytest.raises(DataError, match="results.jsonl': line 4 is truncated"):
        read_json_lines(path, "traffic record", torn_tail="refuse")


def test_one_json_lines_reader_for_every_record_file() -> None:
    """records re-exports the reader of fedpath.utils.io, which read_jsonl uses:
    one behaviour for run records, traffic, tracking and the SSL plots."""
    from fedpath.utils import io

    assert read_json_lines is io.read_json_lines
