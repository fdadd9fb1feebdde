"""Opening the files and folders a user gives: the checks every data reader shares.

Each problem is one :class:`~fedpath.errors.DataError` naming the file or folder
and what was expected: missing, a folder where a file is expected (or the
reverse), not a regular file (a FIFO, socket or device would block a reader
forever), permission denied, or text that is not UTF-8. Messages never quote the
file's content: an error raised at a hospital's node may travel to the
coordinator, and the file may be anything a config names (``/etc/passwd``).
"""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path

from fedpath.errors import DataError
from fedpath.utils.files import check_file
from fedpath.utils.files import file_kind as _kind
from fedpath.utils.files import os_reason as _reason


def read_text(path: Path, what: str) -> str:
    """The text of the regular file ``path``, strictly UTF-8 (a leading byte-order
    mark, as Excel writes, is dropped); errors name ``what``, the file and, for
    bad encoding, the byte offset."""
    check_file(path, what)
    try:
        data = path.read_bytes()
    except PermissionError:
        raise DataError(f"{what} {str(path)!r}: permission denied") from None
    except OSError as err:
        raise DataError(
            f"{what} {str(path)!r} cannot be read: {_reason(err)}"
        ) from None
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"{what} {str(path)!r}: not UTF-8 text (byte 0x{data[bom + err.start]:02x} "
            f"at offset {bom + err.start}); save it as UTF-8"
        ) from None


def list_folder(folder: Path, what: str = "folder") -> list[os.DirEntry[str]]:
    """The entries of ``folder``; a DataError naming it when it is missing, not a
    folder, or cannot be read (``permission denied``)."""
    where = f"{what} {str(folder)!r}"
    try:
        with os.scandir(folder) as it:
            return list(it)
    except FileNotFoundError:
        raise DataError(f"{where} does not exist") from None
    except NotADirectoryError:
        try:
            mode = folder.stat().st_mode
        except OSError:
            mode = stat.S_IFREG
        found = "file" if stat.S_ISREG(mode) else _kind(mode)
        raise DataError(f"{where}: expected a folder, found a {found}") from None
    except PermissionError:
        raise DataError(
            f"{where} cannot be read: permission denied (its files would be left "
            "out without a word); grant read access or move it out of the data"
        ) from None
    except OSError as err:
        raise DataError(f"{where} cannot be read: {_reason(err)}") from None


def subfolders(folder: Path, what: str = "folder") -> list[Path]:
    """The folders in ``folder`` (symlinks to folders included), sorted."""
    return sorted(Path(e.path) for e in list_folder(folder, what) if _is_dir(e))


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:  # a broken entry is no folder; a file check names it later
        return False
