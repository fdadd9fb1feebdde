"""Rendered slides: the plan, the pixels' embeddings, the CLAM folders."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from fedpath.config import ModelConfig
from fedpath.data.base import DataError
from fedpath.data.rendered_slides import (
    RenderedSlides,
    embed,
    slide_plan,
    write_bag_h5,
    write_rendered_bags,
    write_slides_csv,
)
from fedpath.data.synthetic_render import make_hospital_profiles, render_patches
from fedpath.mil.bags import load_clam_bags
from fedpath.models import efficientnet_lite as lite
from fedpath.models.backbones import build_model


def test_the_plan_balances_labels_and_puts_tumour_only_in_tumour_slides() -> None:
    spec = RenderedSlides(slides=40, patches=50, tumour=(0.1, 0.3))
    labels, patch = slide_plan(spec, 2)
    assert labels.tolist() == [0, 1] * 20
    assert patch.shape == (40, 50)
    assert patch[labels == 0].sum() == 0
    shares = patch[labels == 1].mean(axis=1)
    assert shares.min() >= 0.1 - 0.5 / 50 and shares.max() <= 0.3 + 0.5 / 50
    assert len(set(shares.tolist())) > 3  # drawn, not one fixed share
    again = slide_plan(spec, 2)[1]
    assert np.array_equal(again, patch)
    assert not np.array_equal(slide_plan(spec, 3)[1], patch)  # per hospital


def test_a_tiny_share_still_puts_one_tumour_patch_in_a_tumour_slide() -> None:
    labels, patch = slide_plan(
        RenderedSlides(slides=4, patches=4, tumour=(0.01, 0.01)), 0
    )
    assert patch[labels == 1].sum(axis=1).tolist() == [1, 1]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hospitals", 5),
        ("slides", 3),
        ("patches", 1),
        ("tumour", (0.4, 0.2)),
        ("tumour", (0.0, 0.2)),
        ("image_size", 8),
        ("seed", -1),
    ],
)
def test_a_bad_spec_names_its_field(field: str, value: object) -> None:
    with pytest.raises(DataError, match=f"{field} = .*expected"):
        RenderedSlides(**{field: value})  # type: ignore[arg-type]


def test_embed_pools_the_stage_maps_and_stage_7_is_the_models_own_features() -> None:
    torch.manual_seed(0)
    model = build_model(
        ModelConfig(backbone="efficientnet_lite0", params={"pretrained": False}), 2
    ).eval()
    x = np.random.default_rng(0).integers(0, 256, (3, 3, 32, 32), dtype=np.uint8)
    head, mid = embed(model, x, [7, 5])
    with torch.no_grad():
        t = torch.from_numpy(x).float() / 255
        want = model.encode(t).numpy()
        maps = model.feature_maps(t)
    assert head.shape == (3, 1280) and mid.shape == (3, 192)
    np.testing.assert_allclose(head, want, atol=1e-5)
    np.testing.assert_allclose(mid, maps[5].mean(dim=(2, 3)).numpy(), atol=1e-6)


def _needs_weights() -> None:
    pytest.importorskip(
        lite.VARIANTS["efficientnet_lite0"].module, reason="needs fedpath[pretrained]"
    )


def test_the_folders_hold_the_pixels_embeddings_and_load_as_clam_bags(
    tmp_path: Path,
) -> None:
    _needs_weights()
    spec = RenderedSlides(hospitals=2, slides=2, patches=3, image_size=32, seed=1)
    folders = write_rendered_bags(tmp_path, spec, ["lite0", "lite0_s5"])
    assert sorted(folders) == ["lite0", "lite0_s5"]
    rows = list(csv.DictReader((folders["lite0"] / "slides.csv").open()))
    assert [(r["label"], r["domain"]) for r in rows] == [
        ("normal", "hospital_0"),
        ("tumour", "hospital_0"),
        ("normal", "hospital_1"),
        ("tumour", "hospital_1"),
    ]
    # the tumour slide of hospital_1, re-rendered and encoded by hand
    _, patch = slide_plan(spec, 1)
    profile = make_hospital_profiles(2, 1)[1]
    pixels = render_patches(
        patch.ravel(), profile, 32, 1, slide_ids=np.repeat(np.arange(2), 3)
    )
    model = build_model(
        ModelConfig(backbone="efficientnet_lite0", params={"pretrained": True}), 2
    ).eval()
    with torch.no_grad():
        want = model.encode(torch.from_numpy(pixels[3:]).float() / 255).numpy()
    with h5py.File(folders["lite0"] / "h5_files" / f"{rows[3]['slide_id']}.h5") as fh:
        np.testing.assert_allclose(fh["features"][:], want, atol=1e-4)
        assert fh.attrs["backbone"] == "efficientnet_lite0"
        assert fh.attrs["input_size"] == 32
    with h5py.File(
        folders["lite0_s5"] / "h5_files" / f"{rows[3]['slide_id']}.h5"
    ) as fh:
        assert fh["features"].shape == (3, 192)
        assert fh.attrs["backbone"] == "efficientnet_lite0:stage5"
    s5 = folders["lite0_s5"]
    bags = load_clam_bags(s5, s5 / "slides.csv", embedding_space="s5")
    assert [b.label for b in bags.bags] == [0, 1, 0, 1]
    assert {b.dim for b in bags.bags} == {192}
    record = json.loads((folders["lite0"] / "rendered.json").read_text())
    assert record["tumour"] == [0.05, 0.2] and record["seed"] == 1


def test_a_finished_folder_is_kept_and_another_specs_is_refused(tmp_path: Path) -> None:
    _needs_weights()
    spec = RenderedSlides(hospitals=1, slides=2, patches=2, image_size=32)
    write_rendered_bags(tmp_path, spec, ["lite0"])
    done = tmp_path / "lite0" / "slides.csv"
    stamp = done.stat().st_mtime_ns
    write_rendered_bags(tmp_path, spec, ["lite0"])
    assert done.stat().st_mtime_ns == stamp
    with pytest.raises(DataError, match="another spec .*patches"):
        other = RenderedSlides(hospitals=1, slides=2, patches=3, image_size=32)
        write_rendered_bags(tmp_path, other, ["lite0"])


def test_an_unknown_extractor_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="unknown extractor.*resnet.*expected"):
        write_rendered_bags(tmp_path, RenderedSlides(), ["resnet"])


def test_a_written_folder_reads_back_as_clam_bags(tmp_path: Path) -> None:
    """write_bag_h5 + write_slides_csv give a folder clam_bags reads: the same
    features, labels and domains, the extractor recorded in each file."""
    (tmp_path / "h5_files").mkdir()
    rng = np.random.default_rng(0)
    feats = {f"s{i}": rng.normal(size=(5 + i, 3)) for i in range(4)}
    rows = []
    for i, (sid, z) in enumerate(feats.items()):
        write_bag_h5(tmp_path / "h5_files" / f"{sid}.h5", z, "lite0", "ab" * 32, 96)
        rows.append([sid, ["normal", "tumour"][i % 2], f"h{i // 2}"])
    write_slides_csv(tmp_path, rows)
    assert not (tmp_path / "slides.csv.tmp").exists()
    data = load_clam_bags(tmp_path, tmp_path / "slides.csv", embedding_space="x")
    got = {b.slide_id: b for b in data}
    assert sorted(got) == sorted(feats)
    for i, (sid, z) in enumerate(feats.items()):
        assert torch.allclose(
            got[sid].features, torch.as_tensor(z, dtype=torch.float32)
        )
        assert data.classes[got[sid].label] == ["normal", "tumour"][i % 2]
        assert got[sid].domain == f"h{i // 2}"
    with h5py.File(tmp_path / "h5_files" / "s0.h5") as fh:
        assert fh.attrs["backbone"] == "lite0" and fh.attrs["input_size"] == 96
