"""Property-based tests of the readers of user files and run records (issue 37,
item 4): generated garbage thrown at the config loader, the manifest reader,
the model-file reader and the run-record readers (``final.json``,
``results.jsonl``, ``traffic.jsonl``, ``fedpath table``, ``audit`` and
``report``) gives a fedpath error (what the command line prints as one
``error:`` line) or a valid result, never another exception.

The example budget is the ``fedpath`` Hypothesis profile of ``tests/conftest.py``
(a fixed ``max_examples`` per test, derandomized under ``CI=true``); a test that
needs fewer says so in its own ``settings``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hypothesis")

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedpath import errors

#: what a reader may raise: fedpath's own errors, nothing else
FEDPATH_ERRORS = errors.FedpathError

#: each example rewrites files in one folder of the session: no function-scoped
#: fixture is shared across examples
REUSES_FOLDER = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

#: any JSON value, nested a little
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
#: text that is often almost right: JSON-ish and YAML-ish punctuation mixed in
TEXT = st.text(
    st.characters(codec="utf-8") | st.sampled_from(list('{}[]:,"\n\t -=#&*!|>')),
    max_size=200,
)
#: YAML values that PyYAML reads as something other than they look
YAML_ODD = st.sampled_from(
    [
        "2001-12-14",
        "!!binary aGk=",
        "1e400",
        ".nan",
        "-.inf",
        "~",
        "0x1F",
        "&a [*a]",
        "!!set {a}",
        "{? [a]: 1}",
        "!!python/name:os.system",
        "99999999999999999999999",
        "[.nan, [[]]]",
    ]
)


def outcome(read: Callable[[], Any]) -> Any:
    """``read()``'s result, or None when it raised a fedpath error (one line);
    any other exception fails the test."""
    try:
        return read()
    except FEDPATH_ERRORS as err:
        assert str(err), "a fedpath error with no message"
        return None


def _write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("garbage")


# --------------------------------------------------------------------- configs


def _config_keys() -> tuple[list[str], list[str]]:
    """The top-level keys of an experiment config and every section's keys."""
    from fedpath.config import ExperimentConfig

    top = [f.name for f in dataclasses.fields(ExperimentConfig)]
    inner: set[str] = {"params", "name"}
    for f in dataclasses.fields(ExperimentConfig):
        tp = f.default_factory if callable(f.default_factory) else None
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            inner.update(g.name for g in dataclasses.fields(tp))
    return top, sorted(inner)


TOP, INNER = _config_keys()
#: a config made of the real keys with generated values: the typed checks run
CONFIG = st.dictionaries(
    st.sampled_from(TOP),
    JSON | st.dictionaries(st.sampled_from(INNER), JSON, max_size=4),
    max_size=5,
)


@REUSES_FOLDER
@given(text=TEXT | st.binary(max_size=200))
def test_config_files_of_garbage(folder: Path, text: str | bytes) -> None:
    from fedpath.config import ExperimentConfig, load_config

    path = _write(folder / "c.yaml", text)
    got = outcome(lambda: load_config(path))
    assert got is None or isinstance(got, ExperimentConfig)


@REUSES_FOLDER
@given(raw=CONFIG.filter(lambda r: "seeds" not in r), odd=st.none() | YAML_ODD)
def test_configs_of_real_keys_and_generated_values(
    folder: Path, raw: dict[str, Any], odd: str | None
) -> None:
    from fedpath.config import ExperimentConfig, load_config

    text = yaml.safe_dump(raw)
    path = _write(folder / "c.yaml", text + (f"seeds: {odd}\n" if odd else ""))
    got = outcome(lambda: load_config(path))
    assert got is None or isinstance(got, ExperimentConfig)


@given(
    overrides=st.lists(
        st.builds(
            "{}={}".format,
            st.sampled_from(TOP)
            | st.sampled_from([f"{t}.{i}" for t in TOP for i in INNER]),
            TEXT | YAML_ODD,
        )
        | TEXT,
        max_size=4,
    )
)
def test_override_lists_of_garbage(overrides: list[str]) -> None:
    from fedpath.config import ExperimentConfig, load_config

    got = outcome(lambda: load_config(None, overrides))
    assert got is None or isinstance(got, ExperimentConfig)


# ------------------------------------------------------------------- manifests

CELL = st.text(
    st.characters(codec="utf-8") | st.sampled_from(list(',"\n\r\0')), max_size=12
)
ROWS = st.lists(st.lists(CELL, max_size=5), max_size=6)


def _csv(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    import csv

    csv.writer(buf).writerows(rows)
    return buf.getvalue()


@REUSES_FOLDER
@given(text=TEXT | st.binary(max_size=200) | ROWS.map(_csv))
def test_manifests_of_garbage(folder: Path, text: str | bytes) -> None:
    from fedpath.data.manifest import Records, read_manifest

    path = _write(folder / "m.csv", text)
    got = outcome(lambda: read_manifest(path))
    assert got is None or (isinstance(got, Records) and got.paths)


@REUSES_FOLDER
@given(rows=ROWS, order=st.permutations(["path", "label", "domain", "slide"]))
def test_manifests_with_the_right_header_and_generated_rows(
    folder: Path, rows: list[list[str]], order: list[str]
) -> None:
    from fedpath.data.manifest import Records, read_manifest

    path = _write(folder / "m.csv", _csv([order, *rows]))
    got = outcome(lambda: read_manifest(path))
    assert got is None or (
        isinstance(got, Records) and len(got.paths) == len(got.labels) > 0
    )


# ----------------------------------------------------------------- model files


@pytest.fixture(scope="module")
def model_blob(folder: Path) -> bytes:
    """The bytes of a small, valid image model file."""
    import torch

    from fedpath.artifact import ModelMeta, save_model
    from fedpath.config import ModelConfig
    from fedpath.models.backbones import build_model

    torch.manual_seed(0)
    net = build_model(ModelConfig(backbone="small_cnn", params={"widths": [4]}), 2)
    meta = ModelMeta("small_cnn", {"widths": [4]}, ["a", "b"], 16, [0.5] * 3, [0.2] * 3)
    return save_model(folder / "valid.fpm", net, meta).read_bytes()


def _load(path: Path) -> Any:
    from fedpath.artifact import LoadedModel
    from fedpath.loading import load_model
    from fedpath.mil.export import LoadedMILModel

    got = outcome(lambda: load_model(path))
    assert got is None or isinstance(got, LoadedModel | LoadedMILModel)
    return got


def _split(blob: bytes) -> tuple[dict[str, Any], bytes]:
    from fedpath.model_file import MAGIC

    n = struct.unpack("<Q", blob[len(MAGIC) : len(MAGIC) + 8])[0]
    return json.loads(blob[len(MAGIC) + 8 : len(MAGIC) + 8 + n]), blob[
        len(MAGIC) + 8 + n : -32
    ]


def _seal(head: bytes, payload: bytes) -> bytes:
    """A file around ``head`` whose checksums hold (a writer's, not a tamperer's)."""
    from fedpath.model_file import MAGIC

    body = MAGIC + struct.pack("<Q", len(head)) + head + payload
    return body + hashlib.sha256(body).digest()


@REUSES_FOLDER
@given(data=st.binary(max_size=300))
def test_model_files_of_garbage_bytes(folder: Path, data: bytes) -> None:
    from fedpath.model_file import MAGIC

    _load(_write(folder / "g.fpm", data))
    _load(_write(folder / "g.fpm", MAGIC + data))  # past the magic check


@REUSES_FOLDER
@given(data=st.data())
def test_a_valid_model_file_truncated_or_with_a_byte_flipped(
    folder: Path, model_blob: bytes, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(0, len(model_blob) - 1), label="cut")
    assert _load(_write(folder / "t.fpm", model_blob[:cut])) is None
    at = data.draw(st.integers(0, len(model_blob) - 1), label="at")
    bit = data.draw(st.integers(0, 7), label="bit")
    flipped = bytearray(model_blob)
    flipped[at] ^= 1 << bit
    assert _load(_write(folder / "f.fpm", bytes(flipped))) is None


@REUSES_FOLDER
@given(
    key=st.sampled_from(
        [
            "backbone",
            "backbone_params",
            "class_names",
            "image_size",
            "mean",
            "std",
            "format",
            "kind",
            "temperature",
            "threshold",
            "tta",
            "input_size",
            "round",
            "payload_bytes",
        ]
    ),
    value=JSON,
    drop=st.booleans(),
)
def test_a_valid_model_file_with_a_header_field_mutated(
    folder: Path, model_blob: bytes, key: str, value: Any, drop: bool
) -> None:
    head, payload = _split(model_blob)
    if drop:
        head.pop(key, None)
    else:
        head[key] = value
    text = json.dumps(head).encode()
    _load(_write(folder / "h.fpm", _seal(text, payload)))


@REUSES_FOLDER
@given(head=JSON)
def test_a_sealed_model_file_with_a_generated_header(folder: Path, head: Any) -> None:
    _load(_write(folder / "j.fpm", _seal(json.dumps(head).encode(), b"")))


# ----------------------------------------------------------------- run records

FINAL = st.fixed_dictionaries(
    {"method": st.text(max_size=6) | JSON, "target": st.text(max_size=6) | JSON},
    optional={
        "seed": st.integers(0, 3) | JSON,
        "evaluation": st.dictionaries(
            st.sampled_from(
                [
                    "target",
                    "source_worst",
                    "clients",
                    "adapted",
                    "selected",
                    "averaged",
                    "source_mean_accuracy",
                    "source",
                ]
            ),
            JSON
            | st.dictionaries(st.sampled_from(["accuracy", "target", "n", "h0"]), JSON),
        ),
    },
).map(json.dumps)


def _table(run_dir: Path, split: str | None) -> Any:
    from fedpath.commands.table import print_table

    with contextlib.redirect_stdout(io.StringIO()):
        return outcome(
            lambda: print_table([run_dir], "accuracy", split, "csv", None, True)
        )


@REUSES_FOLDER
@given(
    text=TEXT | st.binary(max_size=100) | FINAL,
    split=st.sampled_from([None, "target", "clients", "adapted", "source_worst"]),
)
def test_final_json_of_garbage_in_the_table_and_report(
    folder: Path, text: str | bytes, split: str | None
) -> None:
    from fedpath.report.runs import find_experiments
    from fedpath.runtime.records import read_final

    run_dir = folder / "exp" / "m" / "t" / "seed0"
    run_dir.mkdir(parents=True, exist_ok=True)
    _write(run_dir / "config.yaml", "algorithm: {name: fedavg}\n")
    _write(run_dir / "final.json", text)
    got = outcome(lambda: read_final(run_dir))
    assert got is None or isinstance(got, dict)
    _table(run_dir, split)
    outcome(lambda: find_experiments([run_dir]))


RESULT = st.fixed_dictionaries(
    {},
    optional={
        "round": st.integers(0, 3) | JSON,
        "kind": st.sampled_from(["round", "eval"]) | JSON,
        "split": st.sampled_from(["target", "source", "client"]) | JSON,
        "accuracy": st.floats() | JSON,
        "fit/loss": st.floats() | JSON,
        "domain": JSON,
    },
).map(json.dumps)
LINES = st.lists(
    TEXT.filter(lambda t: "\n" not in t) | JSON.map(json.dumps) | RESULT, max_size=5
)


@REUSES_FOLDER
@given(lines=LINES, newline=st.booleans())
def test_results_jsonl_of_garbage(
    folder: Path, lines: list[str], newline: bool
) -> None:
    from fedpath.report.runs import find_experiments
    from fedpath.runtime.records import read_json_lines

    run_dir = folder / "live" / "m" / "t" / "seed0"
    run_dir.mkdir(parents=True, exist_ok=True)
    _write(run_dir / "config.yaml", "algorithm: {name: fedavg}\n")
    text = "\n".join(lines) + ("\n" if newline else "")
    path = _write(run_dir / "results.jsonl", text)
    got = outcome(lambda: read_json_lines(path, "run record"))
    assert got is None or all(isinstance(r, dict) for r in got.records)
    experiments = outcome(lambda: find_experiments([run_dir]))
    if experiments:  # the report's curves of what was read
        from fedpath.report.fig_curves import collect_curves

        collect_curves(experiments[0].runs)


ENTRY = st.lists(JSON, max_size=6) | st.tuples(
    st.sampled_from(["weights", "pool", "stats"]),
    st.text(max_size=4),
    st.sampled_from(["float32", "uint8"]),
    st.lists(st.integers(-1, 64), max_size=4),
    st.integers(-1, 10**6),
).map(list)
TRAFFIC = st.fixed_dictionaries(
    {},
    optional={
        "round": st.integers(0, 3) | JSON,
        "stage": st.sampled_from(["fit", "stats"]) | JSON,
        "client": st.text(max_size=4) | JSON,
        "received": st.lists(ENTRY, max_size=3) | JSON,
        "sent": st.lists(ENTRY, max_size=3) | JSON,
    },
).map(json.dumps)


@REUSES_FOLDER
@given(
    lines=st.lists(TRAFFIC | TEXT.filter(lambda t: "\n" not in t), max_size=4),
    config=TEXT | st.just("data: {params: {image_size: 32}}\n"),
)
def test_traffic_jsonl_of_garbage_in_the_audit(
    folder: Path, lines: list[str], config: str
) -> None:
    from fedpath.runtime.audit import audit

    run_dir = folder / "traffic"
    run_dir.mkdir(exist_ok=True)
    _write(run_dir / "config.yaml", config)
    _write(run_dir / "traffic.jsonl", "".join(f"{line}\n" for line in lines))
    got = outcome(lambda: audit(run_dir, detail=True))
    assert got is None or (isinstance(got, tuple) and len(got) == 2)
