"""Finding and opening slides (fedpath.wsi.slide)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fedpath.data.base import DataError
from fedpath.wsi import slide as slide_module
from fedpath.wsi.slide import find_slides, open_slide


def test_bad_slides_raise_data_error_naming_the_file(
    tmp_path: Path, slide_file: tuple[Path, list]
) -> None:
    with pytest.raises(DataError, match=r"missing\.tif.*does not exist"):
        open_slide(tmp_path / "missing.tif")
    junk = tmp_path / "junk.tif"
    junk.write_bytes(b"this is not a tiff at all" * 40)
    with pytest.raises(DataError, match=r"junk\.tif"):
        open_slide(junk)
    cut = tmp_path / "cut.tif"
    data = slide_file[0].read_bytes()
    cut.write_bytes(data[: len(data) // 3])
    # the header may parse; the tiles cannot
    with pytest.raises(DataError, match=r"cut\.tif"), open_slide(cut) as s:
        s.read_region(0, 1900, 0, 3000, 100)


def test_find_slides_lists_slide_files_and_refuses_an_empty_folder(
    tmp_path: Path, slide_file: tuple[Path, list]
) -> None:
    slides = tmp_path / "in"
    slides.mkdir()
    os.symlink(slide_file[0], slides / "slide_a.tif")
    (slides / "notes.txt").write_text("not a slide")
    assert find_slides([slides]) == [slides / "slide_a.tif"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no slide files in"):
        find_slides([tmp_path / "empty"])


def test_open_slide_backend_choice(
    tmp_path: Path, slide_file: tuple[Path, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(DataError, match="backend must be auto, tifffile or openslide"):
        open_slide(slide_file[0], backend="pillow")
    with open_slide(slide_file[0], backend="tifffile") as s:
        assert type(s).__name__ == "TiffSlide"
    monkeypatch.setattr(slide_module, "openslide_available", lambda: False)
    with pytest.raises(DataError, match="openslide backend needs openslide-python"):
        open_slide(slide_file[0], backend="openslide")
    svs = tmp_path / "x.svs"
    svs.write_bytes(b"not a slide")
    # without OpenSlide only tifffile is tried, and its failure is named
    with pytest.raises(DataError, match=r"cannot read slide .*x\.svs.*tifffile: "):
        open_slide(svs)


def test_slide_errors_name_the_file_never_its_bytes(tmp_path: Path) -> None:
    secret = tmp_path / "secret.tif"
    secret.write_text("zebra:x:0:0:zebra:/home/zebra:/bin/bash\n")
    with pytest.raises(DataError) as err:
        open_slide(secret)
    assert "secret.tif" in str(err.value) and "zeb" not in str(err.value)
    with pytest.raises(DataError, match=r"slide '.*' is a folder; expected a file"):
        open_slide(tmp_path)


def test_a_fifo_named_like_a_slide_is_not_listed_or_opened(tmp_path: Path) -> None:
    (tmp_path / "a.svs").write_bytes(b"x")
    os.mkfifo(tmp_path / "b.svs")  # tifffile/OpenSlide would block reading it
    assert find_slides([tmp_path]) == [tmp_path / "a.svs"]
    with pytest.raises(DataError, match=r"b.svs' is not a regular file \(a FIFO\)"):
        open_slide(tmp_path / "b.svs")
