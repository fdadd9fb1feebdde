"""The errors a user sees as one ``error:`` line (:mod:`fedpath.errors`)."""

from __future__ import annotations

import subprocess
import sys

from fedpath import errors
from fedpath.errors import USER_ERRORS, ArtifactError, ConfigError, DataError


def test_every_user_error_is_one_home_re_exported_where_it_was() -> None:
    from fedpath.artifact import ArtifactError as FromArtifact
    from fedpath.config import ConfigError as FromConfig
    from fedpath.data.base import DataError as FromData

    assert (FromArtifact, FromConfig, FromData) == (
        ArtifactError,
        ConfigError,
        DataError,
    )
    assert set(USER_ERRORS) == {getattr(errors, n) for n in errors.__all__} - {
        USER_ERRORS,
        errors.FedpathError,
    }


#: error classes that never reach a user or leave a node as they are: each is
#: caught where it is raised and turned into a FedpathError
INTERNAL = {
    # yaml_io's loader signal, re-raised as a ConfigError naming the key and lines
    "fedpath.utils.yaml_io.DuplicateKeyError",
    # the evaluator's signal, turned into RunError by fedpath.runtime.divergence
    "fedpath.evaluation.metrics.NonFiniteProbabilities",
}


def test_every_error_fedpath_defines_is_a_fedpath_error() -> None:
    # a fedpath error's text is written by fedpath and may leave a hospital's node
    # (runtime/flower/node_context.public_reason); an error class outside the
    # hierarchy would either lose its message there or be mistaken for a bug
    import ast
    import importlib
    from pathlib import Path

    root = Path(errors.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        mod = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                found.append(f"{mod}.{node.name}")
    assert len(found) >= 15
    outside = [
        name
        for name in found
        if name not in INTERNAL
        and not issubclass(
            getattr(
                importlib.import_module(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1]
            ),
            errors.FedpathError,
        )
    ]
    assert outside == []
    assert issubclass(errors.ConfigError, ValueError)  # the historical bases stay
    assert issubclass(errors.UnknownNameError, KeyError)


def test_the_errors_import_without_pytorch() -> None:
    code = "import sys, fedpath.errors; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
