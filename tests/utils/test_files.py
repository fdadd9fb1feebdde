"""The one check of a file a user names: :mod:`fedpath.utils.files`, and the
readers of configs and run records that use it (a FIFO named as a FIFO, never
as missing, and never opened: it would block)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fedpath.errors import DataError
from fedpath.schema import ConfigError
from fedpath.utils.files import check_file
from fedpath.utils.io import read_text_record
from fedpath.utils.yaml_io import read_yaml_mapping


def test_check_file_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"manifest '.*nope.csv' does not exist"):
        check_file(tmp_path / "nope.csv", "manifest")
    with pytest.raises(DataError, match=r"is a folder; expected a file"):
        check_file(tmp_path, "manifest")
    os.mkfifo(tmp_path / "pipe.csv")
    with pytest.raises(DataError, match=r"pipe.csv' is not a regular file \(a FIFO\)"):
        check_file(tmp_path / "pipe.csv", "manifest")
    (tmp_path / "ok.csv").write_text("x")
    assert check_file(tmp_path / "ok.csv", "manifest").st_size == 1


def test_the_caller_chooses_the_error_and_what_is_expected(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"config file .* is a folder; expected a YAML"
    ):
        check_file(tmp_path, "config file", ConfigError, "a YAML file")


def test_config_and_record_readers_name_a_fifo_as_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "run.yaml")
    with pytest.raises(
        ConfigError, match=r"run.yaml' is not a regular file \(a FIFO\)"
    ):
        read_yaml_mapping(tmp_path / "run.yaml")
    with pytest.raises(ConfigError, match=r"missing.yaml' does not exist"):
        read_yaml_mapping(tmp_path / "missing.yaml")
    os.mkfifo(tmp_path / "final.json")
    with pytest.raises(
        DataError, match=r"final.json' is not a regular file \(a FIFO\)"
    ):
        read_text_record(tmp_path / "final.json", "run record")
    with pytest.raises(DataError, match=r"is a folder; expected a file"):
        read_text_record(tmp_path, "run record")
