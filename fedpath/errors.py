"""fedpath's errors: every error fedpath raises on purpose is a :class:`FedpathError`.

Importable without PyTorch (and without any other fedpath module), so the command
line can catch them before it loads any model code. The ones in :data:`USER_ERRORS`
are what a user sees as one ``error: ...`` line (exit code 2). Each is also
re-exported from its historical home (``fedpath.data.base.DataError``,
``fedpath.artifact.ArtifactError``, ``fedpath.config.ConfigError``,
``fedpath.registry.UnknownNameError``).

A :class:`FedpathError`'s message is written by fedpath: it names the file, key or
option and the problem, never a file's content, so it may leave a hospital's node
(any other exception's text may quote data and stays in the node's log).
"""

from __future__ import annotations


class FedpathError(Exception):
    """Base of every error fedpath raises on purpose (see the module docstring)."""


class ConfigError(FedpathError, ValueError):
    """A bad config key or value; the message names the key and what was expected."""


class UnknownNameError(FedpathError, KeyError):
    """Raised when a name is not registered; the message lists the known names."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class DataError(FedpathError, ValueError):
    """Bad or inconsistent data; the message names the file/field/domain involved."""


class ArtifactError(FedpathError, ValueError):
    """An unreadable, corrupted or incompatible model file (the message names it)."""


class ResumeError(FedpathError, RuntimeError):
    """A run that cannot be resumed: its checkpoint is unreadable, corrupted, or
    was written by another config (the message names the file and the fix)."""


class RunError(FedpathError, RuntimeError):
    """A run that stopped part-way for a reason the user can fix (its training
    diverged, the disk filled up); the message names the round, the file or the
    setting, and what was written up to the last complete round is kept."""


#: what ``fedpath``'s ``main`` reports as one ``error:`` line and exit code 2
USER_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    DataError,
    UnknownNameError,
    ArtifactError,
    ResumeError,
    RunError,
)

__all__ = [
    "USER_ERRORS",
    "ArtifactError",
    "ConfigError",
    "DataError",
    "FedpathError",
    "ResumeError",
    "RunError",
    "UnknownNameError",
]
