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
        USER_ERRORS
    }


def test_the_errors_import_without_pytorch() -> None:
    code = "import sys, fedpath.errors; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
