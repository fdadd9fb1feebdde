"""The errors a user sees as ``error: ...`` lines (exit code 2), importable without
PyTorch so the command line can catch them before it loads any model code.

Each is re-exported from its historical home (``fedpath.data.base.DataError``,
``fedpath.artifact.ArtifactError``, ``fedpath.config.ConfigError``).
"""

from __future__ import annotations

from fedpath.registry import UnknownNameError
from fedpath.schema import ConfigError


class DataError(ValueError):
    """Bad or inconsistent data; the message names the file/field/domain involved."""


class ArtifactError(ValueError):
    """An unreadable, corrupted or incompatible model file (the message names it)."""


class ResumeError(RuntimeError):
    """A run that cannot be resumed: its checkpoint is unreadable, corrupted, or
    was written by another config (the message names the file and the fix)."""


#: what ``fedpath``'s ``main`` reports as one ``error:`` line and exit code 2
USER_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    DataError,
    UnknownNameError,
    ArtifactError,
    ResumeError,
)

__all__ = [
    "USER_ERRORS",
    "ArtifactError",
    "ConfigError",
    "DataError",
    "ResumeError",
    "UnknownNameError",
]
