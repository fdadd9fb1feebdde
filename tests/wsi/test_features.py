"""Feature extraction from slides (fedpath.wsi.features)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedpath.config import ModelConfig
from fedpath.data.base import DataError
from fedpath.models.backbones import build_model
from fedpath.models.pretrained import state_digest
from fedpath.wsi.features import extract_features, extract_features_stage
from fedpath.wsi.slide import open_slide
from fedpath.wsi.tiling import tile_slides


def _weights(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    model = build_model(ModelConfig(params={"widths": [8, 16]}), 2)
    path = tmp_path / "enc.pt"
    torch.save(model.state_dict(), path)
    return path


def test_features_match_direct_encoding(
    tmp_path: Path, slide_file: tuple[Path, list]
) -> None:
    path, _ = slide_file
    tile_slides([path], tmp_path, patch_size=256, level=1)
    coords_h5 = tmp_path / "patches" / "slide_a.h5"
    weights = _weights(tmp_path)
    out = tmp_path / "h5_files" / "slide_a.h5"
    n = extract_features(
        path,
        coords_h5,
        out,
        "small_cnn",
        weights,
        input_size=64,
        batch_size=5,
        params={"widths": [8, 16]},
        pt_path=tmp_path / "pt_files" / "slide_a.pt",
    )
    model = build_model(
        ModelConfig(weights=str(weights), params={"widths": [8, 16]}), 2
    ).eval()
    with h5py.File(out) as fh:
        feats, coords = fh["features"][:], fh["coords"][:]
        assert fh["coords"].attrs["patch_level"] == 1
        assert fh.attrs["encoder_sha256"] == state_digest(model.encoder)
    assert feats.shape == (n, model.feature_dim) and feats.dtype == np.float32
    with h5py.File(coords_h5) as fh:
        assert np.array_equal(coords, fh["coords"][:])
    with open_slide(path) as s, torch.no_grad():
        patches = np.stack([s.read_region(x, y, 1, 256, 256) for x, y in coords])
        x = torch.from_numpy(patches).permute(0, 3, 1, 2).float() / 255
        x = F.interpolate(x, size=(64, 64), mode="bilinear", antialias=True)
        direct = model.encode(x).numpy()
    np.testing.assert_allclose(feats, direct, rtol=1e-4, atol=1e-5)
    pt = torch.load(tmp_path / "pt_files" / "slide_a.pt")
    assert torch.equal(pt, torch.from_numpy(feats))


def test_feature_stage_resumes_and_counts_bad(
    tmp_path: Path, slide_file: tuple[Path, list]
) -> None:
    path, _ = slide_file
    tile_slides([path], tmp_path / "t", patch_size=256, level=2)
    other = tmp_path / "no_coords.tif"  # a readable slide that was never tiled
    other.write_bytes(path.read_bytes())
    stage = partial(
        extract_features_stage, params={"widths": [8]}, input_size=32, save_pt=True
    )
    with pytest.raises(DataError, match=r"no_coords\.h5.*does not exist"):
        stage([path, other], tmp_path / "t", tmp_path / "f")
    rep = stage([path, other], tmp_path / "t", tmp_path / "f", skip_bad=True)
    # slide_a was finished before the failure on the second slide
    assert rep.resumed == ["slide_a"] and not rep.done and len(rep.bad) == 1
    assert "no_coords" in rep.bad[0]
    assert (tmp_path / "f" / "pt_files" / "slide_a.pt").is_file()
    again = stage([path], tmp_path / "t", tmp_path / "f")
    assert again.resumed == ["slide_a"] and not again.done


def test_a_coords_file_of_the_wrong_shape_or_kind_is_a_data_error(
    tmp_path: Path,
) -> None:
    from fedpath.wsi.features import read_coords

    with h5py.File(tmp_path / "odd.h5", "w") as fh:
        fh.create_dataset("coords", data=np.arange(5))  # not (N, 2)
    with pytest.raises(DataError, match=r"odd.h5' is unreadable or lacks"):
        read_coords(tmp_path / "odd.h5")
    with pytest.raises(DataError, match=r"coords file '.*' is a folder"):
        read_coords(tmp_path)
