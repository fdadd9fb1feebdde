"""The shared machinery of the slide stages (the ``fedpath.wsi`` package itself):
atomic outputs, completeness checks, resumable per-slide runs, lazy exports."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
from PIL import Image

import fedpath.wsi as wsi
from fedpath.errors import DataError
from fedpath.wsi import (
    StageReport,
    atomic_h5,
    check_unique_names,
    h5_complete,
    run_stage,
    write_png,
)


def test_atomic_h5_appears_complete_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "a.h5"
    with atomic_h5(path) as fh:
        fh.create_dataset("coords", data=np.zeros((3, 2)))
        fh.attrs["num_patches"] = 3
        assert not path.exists()  # written under a temporary name
    assert h5_complete(path, "coords")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # shared, not mkstemp's 0600
    with pytest.raises(RuntimeError), atomic_h5(tmp_path / "b.h5") as fh:
        fh.create_dataset("coords", data=np.zeros(2))
        raise RuntimeError("crash mid-write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]  # no b.h5, no tmp


def test_h5_complete_checks_the_dataset_and_its_size(tmp_path: Path) -> None:
    assert not h5_complete(tmp_path / "missing.h5", "coords")
    (tmp_path / "junk.h5").write_bytes(b"not an h5 file")
    assert not h5_complete(tmp_path / "junk.h5", "coords")
    with h5py.File(tmp_path / "short.h5", "w") as fh:
        fh.create_dataset("coords", data=np.zeros((2, 2)))
        fh.attrs["num_patches"] = 5  # an interrupted writer's promise
    assert not h5_complete(tmp_path / "short.h5", "coords")
    assert not h5_complete(tmp_path / "short.h5", "features")
    with h5py.File(tmp_path / "plain.h5", "w") as fh:
        fh.create_dataset("coords", data=np.zeros((2, 2)))  # no count to check
    assert h5_complete(tmp_path / "plain.h5", "coords")


def test_write_png_is_lossless_and_leaves_no_temporary(tmp_path: Path) -> None:
    img = np.random.default_rng(0).integers(0, 256, (9, 7, 3), dtype=np.uint8)
    write_png(tmp_path / "x.png", img)
    with Image.open(tmp_path / "x.png") as im:
        assert np.array_equal(np.asarray(im), img)
    assert [p.name for p in tmp_path.iterdir()] == ["x.png"]


def test_check_unique_names_refuses_two_slides_with_one_id(tmp_path: Path) -> None:
    check_unique_names([tmp_path / "a.tif", tmp_path / "b.tif"])
    with pytest.raises(DataError, match="share the id 'a'"):
        check_unique_names([tmp_path / "x" / "a.tif", tmp_path / "y" / "a.svs"])


def test_run_stage_resumes_counts_and_skips_bad_slides(tmp_path: Path) -> None:
    paths = [tmp_path / f"{n}.tif" for n in ("done", "new", "bad")]

    def process(p: Path) -> int:
        if p.stem == "bad":
            raise DataError(f"{p.name}: unreadable")
        return 7

    def finished(p: Path) -> bool:
        return p.stem == "done"

    with pytest.raises(DataError, match="bad.tif: unreadable"):
        run_stage("tile", paths, finished, process, skip_bad=False, quiet=True)
    rep = run_stage("tile", paths, finished, process, skip_bad=True, quiet=True)
    assert (rep.done, rep.resumed, rep.bad, rep.patches) == (
        ["new"],
        ["done"],
        ["bad.tif: unreadable"],
        7,
    )
    assert rep.summary("tiling") == (
        "tiling: 1 slides processed, 1 already done (skipped), 1 unreadable "
        "(skipped), 7 patches\n  bad.tif: unreadable"
    )
    assert "\n" not in StageReport(done=["a"]).summary("x")


def test_public_functions_load_lazily() -> None:
    from fedpath.wsi.slide import open_slide

    assert wsi.open_slide is open_slide
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        wsi.nope  # noqa: B018
