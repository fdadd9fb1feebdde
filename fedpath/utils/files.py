"""The one check of a file a user names, before anything reads it.

Every reader of a user's file (manifests, images, slides, configs, run
records) first calls :func:`check_file`: missing, a folder where a file is
expected, not a regular file (a FIFO, socket or device would block a reader
forever), or permission denied is one error naming what the file is for and
the file, of the class the caller's layer raises (:class:`DataError` for data,
:class:`~fedpath.schema.ConfigError` for configs). Messages never quote the
file's content.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fedpath.errors import DataError, FedpathError


def check_file(
    path: Path,
    what: str,
    error: type[FedpathError] = DataError,
    expected: str = "a file",
) -> os.stat_result:
    """The ``stat`` of ``path`` if it is a regular file (symlinks followed);
    else ``error`` naming ``what`` (e.g. ``"manifest"``), the file and
    ``expected``."""
    where = f"{what} {str(path)!r}"
    try:
        st = path.stat()
    except FileNotFoundError:
        raise error(f"{where} does not exist") from None
    except PermissionError:
        raise error(f"{where}: permission denied") from None
    except (OSError, ValueError) as err:  # ValueError: a NUL in the path
        raise error(f"{where} cannot be read: {os_reason(err)}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{where} is a folder; expected {expected}")
    if not stat.S_ISREG(st.st_mode):
        raise error(
            f"{where} is not a regular file (a {file_kind(st.st_mode)}); "
            f"expected {expected}"
        )
    return st


def file_kind(mode: int) -> str:
    """What a special file is (FIFO, socket, device), for errors."""
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def os_reason(err: Exception) -> str:
    """The OS's reason without the path (already named by the caller)."""
    return getattr(err, "strerror", None) or type(err).__name__
