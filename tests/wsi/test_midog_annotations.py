"""MIDOG annotation JSON (fedpath.wsi.midog_annotations)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fedpath.data.base import DataError
from fedpath.wsi.midog_annotations import Figure, load_annotations
from fedpath.wsi.midog_params import MvMidogParams


def test_category_names_of_midog_2021_and_midog_plus_plus() -> None:
    from fedpath.wsi.midog_annotations import _categories

    for imposter in ("hard negative", "not mitotic figure", "Non-mitotic figure"):
        cats = [{"id": 1, "name": "mitotic figure"}, {"id": 2, "name": imposter}]
        assert _categories({"categories": cats}, "x.json") == {1: True, 2: False}
    with pytest.raises(DataError, match=r"x.json: categories\[1\] name 'cells'"):
        _categories({"categories": [cats[0], {"id": 2, "name": "cells"}]}, "x.json")


def write_json(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "midog.json"
    path.write_text(json.dumps(data))
    return path


IMAGES = [
    {"id": 1, "file_name": "001.tiff", "width": 100, "height": 80},
    {"id": 51, "file_name": "051.tiff"},
    {"id": 7, "file_name": "x.tiff", "scanner": "custom"},
]


def test_slides_figures_and_scanners(tmp_path: Path) -> None:
    anns = [
        {"image_id": 1, "bbox": [10, 20, 30, 50], "category_id": 1},
        {"image_id": 1, "bbox": [0, 0, 5, 5], "category_id": 2},
        {"image_id": 7, "bbox": [1, 2, 3, 4], "category_id": 1},
    ]
    # no "categories": MIDOG's own numbering (1 mitotic figure, 2 hard negative)
    path = write_json(tmp_path, {"images": IMAGES, "annotations": anns})
    slides = load_annotations(path, MvMidogParams())
    assert [(s.image_id, s.domain, s.size) for s in slides] == [
        (1, "hamamatsu_xr", (100, 80)),  # by id range
        (51, "hamamatsu_s360", None),
        (7, "custom", None),  # the image's own scanner field wins
    ]
    assert slides[0].figures == [
        Figure(0, (10.0, 20.0, 30.0, 50.0), True),
        Figure(1, (0.0, 0.0, 5.0, 5.0), False),  # category 2: an imposter
    ]
    # COCO's [x, y, w, h] and a mapping by file name
    p = MvMidogParams(bbox_format="xywh", scanners={"051.tiff": "site_b"})
    xywh = load_annotations(path, p)
    assert xywh[0].figures[0].box == (10.0, 20.0, 40.0, 70.0)
    assert xywh[1].domain == "site_b"


def test_bad_entries_raise_or_are_listed(tmp_path: Path) -> None:
    images = [
        *IMAGES,
        {"id": 1, "file_name": "dup.tiff"},
        {"id": 999, "file_name": "z"},
    ]
    anns = [
        {"image_id": 1, "bbox": [10, 10, 5, 5], "category_id": 1},  # x1 < x0
        {"image_id": 3, "bbox": [0, 0, 1, 1], "category_id": 1},
        {"image_id": 1, "bbox": [0, 0, 1, 1], "category_id": 9},
        {"image_id": 1, "bbox": "oops", "category_id": 1},
    ]
    path = write_json(tmp_path, {"images": images, "annotations": anns})
    with pytest.raises(DataError, match=r"images\[3\]: id 1 is listed twice"):
        load_annotations(path, MvMidogParams())
    bad: list[str] = []
    slides = load_annotations(path, MvMidogParams(), bad)
    assert len(slides) == 3 and not any(s.figures for s in slides)
    assert [b.split(": ", 2)[1] for b in bad] == [
        "images[3]",
        "images[4] (z)",
        "annotations[0]",
        "annotations[1]",
        "annotations[2]",
        "annotations[3]",
    ]


def test_files_that_are_not_annotation_json(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_annotations(tmp_path / "absent.json", MvMidogParams())
    path = write_json(tmp_path, {"annotations": []})
    with pytest.raises(DataError, match="needs 'images' and 'annotations'"):
        load_annotations(path, MvMidogParams())
