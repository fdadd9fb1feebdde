"""The checks every data reader shares (fedpath.data.inputs): missing files,
folders, FIFOs, permissions and encodings named, never the file's content."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fedpath.data.inputs import list_folder, read_text, subfolders
from fedpath.errors import DataError


def test_read_text_refuses_bytes_that_are_not_utf8_naming_the_offset(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "m.csv"
    bad.write_bytes(b"path,label\n\xe9t\xe9.png,a\n")  # Latin-1, as old Excel saves
    with pytest.raises(
        DataError, match=r"m.csv': not UTF-8 text \(byte 0xe9 at offset 11\); save"
    ):
        read_text(bad, "manifest")
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbfab\xff")  # the offset counts the byte-order mark
    with pytest.raises(DataError, match=r"byte 0xff at offset 5"):
        read_text(bom, "manifest")
    bom.write_bytes("\ufeffpath,label\n".encode())
    assert read_text(bom, "manifest") == "path,label\n"


def test_read_text_names_a_permission_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "m.csv"
    f.write_text("x")

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(DataError, match=r"m.csv': permission denied"):
        read_text(f, "manifest")


def test_a_folder_that_cannot_be_read_is_named_with_permission_denied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "f.txt").write_text("x")
    assert [p.name for p in subfolders(tmp_path)] == ["a", "b"]
    scandir = os.scandir

    def deny(path: os.PathLike[str]) -> object:
        if Path(path) == tmp_path / "a":
            raise PermissionError(13, "Permission denied")
        return scandir(path)

    monkeypatch.setattr(os, "scandir", deny)
    with pytest.raises(DataError, match=r"folder '.*/a' cannot be read: permission"):
        list_folder(tmp_path / "a")
    with pytest.raises(DataError, match=r"f.txt': expected a folder, found a file"):
        list_folder(tmp_path / "f.txt")
    with pytest.raises(DataError, match=r"does not exist"):
        list_folder(tmp_path / "gone")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
def test_a_folder_without_read_permission(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        with pytest.raises(DataError, match="permission denied"):
            list_folder(locked)
    finally:
        locked.chmod(0o755)
