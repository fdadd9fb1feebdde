"""The YAML reader of user files: one clear error per problem, naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedpath.cli import main
from fedpath.config import ConfigError, load_config
from fedpath.utils.yaml_io import read_yaml_mapping, strict_load


def _file(tmp_path: Path, text: str | bytes, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_a_mapping_is_read_and_an_empty_file_is_empty(tmp_path: Path) -> None:
    text = "a: 1\nb:\n  a: 2\n  c: [x, y]\n"
    assert read_yaml_mapping(_file(tmp_path, text)) == {
        "a": 1,
        "b": {"a": 2, "c": ["x", "y"]},
    }
    assert read_yaml_mapping(_file(tmp_path, "# only a comment\n", "e.yaml")) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "seeds: [0]\ntrain:\n  lr: 1\nseeds: [1]\n",
            "key 'seeds' is given twice (lines 1 and 4)",
        ),
        (
            "train:\n  lr: 1\n  rounds: 2\n  lr: 3\n",
            "key 'lr' is given twice (lines 2 and 4)",
        ),
        # a flow mapping repeats a key on one line (a node policy travels so)
        ("train: {lr: 1, lr: 3}\n", "key 'lr' is given twice (line 1, columns 9"),
    ],
)
def test_a_key_given_twice_names_the_key_and_both_lines(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError, match=r"config file '.*c\.yaml': ") as err:
        read_yaml_mapping(path)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a: \xff\xfe\n", "is not UTF-8 text (byte 3)"),
        ("a: [1, 2\n", "is not valid YAML"),
        ("- a\n- b\n", "expected a mapping at the top level, got list"),
    ],
)
def test_bad_files_are_named(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    with pytest.raises(ConfigError, match="config file '") as err:
        read_yaml_mapping(_file(tmp_path, content))
    assert message in str(err.value)


def test_a_folder_and_a_missing_file_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a folder; expected a YAML file"):
        read_yaml_mapping(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        read_yaml_mapping(tmp_path / "nope.yaml")


def test_strict_load_is_safe_load_without_duplicates() -> None:
    assert strict_load("a: {b: 1}\nc: !!str 2\n") == {"a": {"b": 1}, "c": "2"}
    with pytest.raises(Exception, match="could not determine a constructor"):
        strict_load("a: !!python/object:os.system {}\n")


def test_an_empty_experiment_config_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, "\n# nothing yet\n")
    with pytest.raises(ConfigError, match="is empty; expected at least data"):
        load_config(path)
    assert main(["check", str(path)]) == 2
    assert "is empty" in capsys.readouterr().err
    assert main(["run", str(tmp_path)]) == 2
    assert "is a folder; expected a YAML file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        "password: hunter2\nkey: [1\n",  # a scanner error
        "a: b: c: hunter2\n",
        "? [hunter2]\n: 1\n",  # an unhashable key
        "a: !!python/object:os.system hunter2\n",
    ],
)
def test_a_yaml_error_is_one_line_that_never_quotes_the_file(
    tmp_path: Path, text: str
) -> None:
    with pytest.raises(ConfigError, match="not valid YAML") as err:
        read_yaml_mapping(_file(tmp_path, text))
    assert "hunter2" not in str(err.value) and "\n" not in str(err.value)


def test_yaml_nested_too_deeply_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        read_yaml_mapping(_file(tmp_path, "a: " + "[" * 5000 + "]" * 5000))
