"""MIDOG's COCO-style annotation JSON: slides, their scanner and their figure boxes.

:func:`load_annotations` reads ``images``, ``annotations`` and ``categories``
(mitotic figures and imposters, i.e. hard negatives) and assigns every image its
scanner, the MvMidog domain. Errors name the file and the entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpath.data.base import DataError
from fedpath.wsi.midog_params import MvMidogParams

_POSITIVE_NAMES = ("mitotic figure", "mitotic_figure", "mitosis")
_IMPOSTER_NAMES = (
    "hard negative",
    "non-mitotic figure",
    "not mitotic figure",  # MIDOG++
    "imposter",
    "mitotic figure lookalike",
    "nonmitotic",
)


@dataclass(frozen=True)
class Figure:
    """One annotated cell: its index in the JSON ``annotations`` list and box."""

    index: int
    box: tuple[float, float, float, float]  # x0, y0, x1, y1 at level 0
    mitotic: bool


@dataclass
class SlideEntry:
    """One ``images`` entry of the JSON with its scanner and annotated cells."""

    image_id: int
    file_name: str
    domain: str
    size: tuple[int, int] | None
    figures: list[Figure] = field(default_factory=list)


def _categories(data: dict[str, Any], where: str) -> dict[int, bool]:
    """Category id -> is mitotic (MIDOG: 1 mitotic figure, 2 hard negative)."""
    cats = data.get("categories")
    if not cats:
        return {1: True, 2: False}
    out: dict[int, bool] = {}
    for i, c in enumerate(cats):
        name = str(c.get("name", "")).strip().lower()
        if name in _POSITIVE_NAMES:
            out[int(c["id"])] = True
        elif name in _IMPOSTER_NAMES:
            out[int(c["id"])] = False
        else:
            raise DataError(
                f"{where}: categories[{i}] name {c.get('name')!r} is neither a "
                f"mitotic figure {_POSITIVE_NAMES} nor an imposter {_IMPOSTER_NAMES}"
            )
    return out


def _scanner(img: dict[str, Any], p: MvMidogParams) -> str | None:
    if img.get(p.scanner_field):
        return str(img[p.scanner_field])
    if p.scanners and str(img.get("file_name")) in p.scanners:
        return p.scanners[str(img["file_name"])]
    for lo, hi, name in p.scanner_ranges:
        if lo <= int(img["id"]) <= hi:
            return name
    return None


def _box(raw: Any, fmt: str) -> tuple[float, float, float, float] | None:
    try:
        a, b, c, d = (float(v) for v in raw)
    except (TypeError, ValueError):
        return None
    box = (a, b, a + c, b + d) if fmt == "xywh" else (a, b, c, d)
    return box if box[2] > box[0] and box[3] > box[1] else None


def load_annotations(
    json_path: Path, p: MvMidogParams, bad: list[str] | None = None
) -> list[SlideEntry]:
    """Slides and figures of a MIDOG (COCO-style) JSON.

    Errors name the file and the entry (``midog.json: annotations[17]: ...``).
    When ``bad`` is a list (``skip_bad``), a bad annotation or image is appended
    there and skipped instead.
    """
    where = str(json_path)
    try:
        data = json.loads(json_path.read_text())
        images = list(data["images"])
        anns = list(data.get("annotations", []))
    except FileNotFoundError:
        raise DataError(f"annotation file {where!r} does not exist") from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(
            f"{where}: not a MIDOG/COCO annotation JSON (needs 'images' and "
            f"'annotations'): {type(err).__name__}: {err}"
        ) from None
    cats = _categories(data, where)

    def fail(msg: str) -> None:
        if bad is None:
            raise DataError(f"{msg}; pass skip_bad to skip and count such entries")
        bad.append(msg)

    slides: dict[int, SlideEntry] = {}
    for i, img in enumerate(images):
        try:
            iid, fname = int(img["id"]), str(img["file_name"])
        except (KeyError, TypeError, ValueError):
            fail(f"{where}: images[{i}]: needs an integer 'id' and a 'file_name'")
            continue
        domain = _scanner(img, p)
        if domain is None:
            fail(
                f"{where}: images[{i}] ({fname}): no scanner (no "
                f"{p.scanner_field!r} field, not in the scanner mapping or ranges)"
            )
            continue
        if iid in slides:
            fail(f"{where}: images[{i}]: id {iid} is listed twice")
            continue
        w, h = img.get("width"), img.get("height")
        size = (int(w), int(h)) if w is not None and h is not None else None
        slides[iid] = SlideEntry(iid, fname, domain, size)
    for i, ann in enumerate(anns):
        ref = ann.get("image_id") if isinstance(ann, dict) else None
        if ref not in slides:
            fail(f"{where}: annotations[{i}]: image_id {ref!r} is not in 'images'")
            continue
        box = _box(ann.get("bbox"), p.bbox_format)
        if box is None:
            fail(
                f"{where}: annotations[{i}]: bbox {ann.get('bbox')!r} is not a valid "
                f"{p.bbox_format} box (bbox_format={p.bbox_format!r})"
            )
            continue
        cat = ann.get("category_id")
        if cat not in cats:
            fail(f"{where}: annotations[{i}]: unknown category_id {cat!r}")
            continue
        slides[ref].figures.append(Figure(i, box, cats[cat]))
    return list(slides.values())
