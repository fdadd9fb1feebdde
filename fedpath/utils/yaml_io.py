"""Reading the YAML files a user writes (experiment configs, suites, node
policies, client registries): every problem is one error naming the file and
what was expected, never a traceback or a silent guess.

- a folder, a missing file, or a file that is not UTF-8 text is named as such;
- a key given twice in one mapping is an error naming the key and both lines
  (PyYAML keeps the last one without a word);
- the top level must be a mapping (empty: ``{}``, for the callers that allow it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fedpath.schema import ConfigError
from fedpath.utils.files import check_file


class DuplicateKeyError(yaml.YAMLError):
    """A mapping lists one key twice."""


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping."""

    def construct_mapping(
        self, node: yaml.MappingNode, deep: bool = False
    ) -> dict[Any, Any]:
        seen: dict[Any, tuple[int, int]] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            # line and column: a flow mapping ({a: 1, a: 2}) repeats a key on one line
            at = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            try:
                first = seen.setdefault(key, at)
            except TypeError:  # an unhashable key: PyYAML's own error follows
                continue
            if first != at:
                where = (
                    f"lines {first[0]} and {at[0]}"
                    if first[0] != at[0]
                    else f"line {at[0]}, columns {first[1]} and {at[1]}"
                )
                raise DuplicateKeyError(
                    f"key {key!r} is given twice ({where}); keep one"
                )
        return super().construct_mapping(node, deep=deep)


def yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's error as one line with its line and column, without the excerpt
    of the file PyYAML adds (an error may travel from a hospital's node to the
    coordinator: it names the place, never the content)."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        problem = err.problem or err.context or "unreadable"
        if mark is not None:
            return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
        return str(problem)
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def strict_load(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate keys (:class:`StrictLoader`)."""
    return yaml.load(text, Loader=StrictLoader)


def read_yaml_mapping(
    path: Path,
    what: str = "config file",
    expected: str = "a mapping at the top level",
) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping (empty: ``{}``); errors name
    ``what`` and the file."""
    where = f"{what} {str(path)!r}"
    check_file(path, what, ConfigError, "a YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{where} is not UTF-8 text (byte {err.start}); expected a YAML file"
        ) from None
    except OSError as err:
        raise ConfigError(f"{where} cannot be read: {err.strerror}") from None
    try:
        data = strict_load(text)
    except DuplicateKeyError as err:
        raise ConfigError(f"{where}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{where} is not valid YAML: {yaml_problem(err)}") from None
    except RecursionError:
        raise ConfigError(f"{where} is not valid YAML: nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected {expected}, got {type(data).__name__}")
    return data
