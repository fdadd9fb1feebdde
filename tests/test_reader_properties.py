"""Property-based tests of the readers of user files and run records (issue 37,
item 4): generated garbage thrown at the config loader, the manifest reader and
the model-file reader gives a fedpath error (what the command line prints as one
``error:`` line) or a valid result, never another exception. The run-record
readers: ``test_reader_properties_records.py``; the strategies they share:
``tests/property_helpers.py``.

The example budget is the ``fedpath`` Hypothesis profile of ``tests/conftest.py``
(a fixed ``max_examples`` per test, derandomized under ``CI=true``); a test that
needs fewer says so in its own ``settings``.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hypothesis")

import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.model_file_helpers import seal_model_file, split_model_file
from tests.property_helpers import JSON, REUSES_FOLDER, TEXT, _write, outcome

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
    head, payload = split_model_file(model_blob)
    if drop:
        head.pop(key, None)
    else:
        head[key] = value
    text = json.dumps(head).encode()
    _load(_write(folder / "h.fpm", seal_model_file(text, payload)))


@REUSES_FOLDER
@given(head=JSON)
def test_a_sealed_model_file_with_a_generated_header(folder: Path, head: Any) -> None:
    _load(_write(folder / "j.fpm", seal_model_file(json.dumps(head).encode(), b"")))
