"""MvMidog patches of one slide: figure crops placed off-centre, random negatives.

* Positives are centred on each figure with a random offset (the figure is not
  always central but stays whole in the field); near the slide border three
  random offsets are tried, then the crop is anchored at the nearest edge/corner.
* Negatives are random tissue crops at least ``margin`` pixels from every figure;
  imposters (hard negatives) optionally add crops labelled ``negative``.
* Every crop passes the quality filter (:mod:`.quality`) or is counted per reason.

Each slide draws from its own generators seeded by (seed, image id, stream).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedpath.data.base import DataError
from fedpath.wsi import write_png
from fedpath.wsi.midog_annotations import Figure, SlideEntry
from fedpath.wsi.midog_params import NEGATIVE, POSITIVE, MvMidogParams
from fedpath.wsi.quality import reject_reason
from fedpath.wsi.slide_base import Slide
from fedpath.wsi.tissue import TissueMap


def place_positive(
    box: Sequence[float],
    slide_size: tuple[int, int],
    size: int,
    max_offset: int,
    attempts: int,
    rng: np.random.Generator,
) -> tuple[int, int, bool]:
    """Top-left corner of a crop holding ``box`` off-centre; True if anchored.

    Each attempt shifts the centred crop by a random offset of at most
    ``max_offset`` per axis, limited so the whole box stays in the field. If no
    attempt lies inside the slide (a figure near the border), the last crop is
    moved to the nearest slide edge/corner: it then lies inside the slide and,
    since it only moved toward the box, still holds the box.
    """

    def draw(lo_box: float, hi_box: float) -> int:
        centred = round((lo_box + hi_box) / 2 - size / 2)
        lo = max(int(np.ceil(hi_box)) - size, centred - max_offset)
        hi = min(int(np.floor(lo_box)), centred + max_offset)
        return centred if lo > hi else int(rng.integers(lo, hi + 1))

    w, h = slide_size
    x = y = 0
    for _ in range(max(1, attempts)):
        x, y = draw(box[0], box[2]), draw(box[1], box[3])
        if 0 <= x <= w - size and 0 <= y <= h - size:
            return x, y, False
    return (
        int(np.clip(x, 0, max(w - size, 0))),
        int(np.clip(y, 0, max(h - size, 0))),
        True,
    )


def _far_from(x: int, y: int, size: int, boxes: np.ndarray, margin: int) -> bool:
    """True if the crop grown by ``margin`` touches none of ``boxes`` (M x 4)."""
    if not len(boxes):
        return True
    hit = (
        (boxes[:, 0] < x + size + margin)
        & (boxes[:, 2] > x - margin)
        & (boxes[:, 1] < y + size + margin)
        & (boxes[:, 3] > y - margin)
    )
    return not bool(hit.any())


# ------------------------------------------------------------------ one slide


@dataclass
class SlideOutcome:
    """Rows written for a slide and its counts (stored in the ledger)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n


def build_slide(
    entry: SlideEntry,
    slide: Slide,
    out_dir: Path,
    p: MvMidogParams,
    bad: list[str] | None,
) -> SlideOutcome:
    """Crop, filter and write the patches of one slide (see the module docstring)."""
    res = SlideOutcome()
    w, h = slide.dimensions
    rel_dir = Path("patches") / entry.domain / Path(entry.file_name).stem
    (out_dir / rel_dir).mkdir(parents=True, exist_ok=True)
    s = p.patch_size
    figures: list[Figure] = []
    for f in entry.figures:
        cx, cy = (f.box[0] + f.box[2]) / 2, (f.box[1] + f.box[3]) / 2
        if 0 <= cx < w and 0 <= cy < h:
            clipped = (
                max(f.box[0], 0),
                max(f.box[1], 0),
                min(f.box[2], w),
                min(f.box[3], h),
            )
            figures.append(Figure(f.index, clipped, f.mitotic))
            continue
        msg = (
            f"slide {str(slide.path)!r}: annotations[{f.index}] box "
            f"{list(f.box)} lies outside the slide ({w}x{h})"
        )
        if bad is None:
            raise DataError(f"{msg}; pass skip_bad to skip and count such entries")
        bad.append(msg)

    def emit(
        crop: np.ndarray,
        label: str,
        kind: str,
        name: str,
        xy: tuple[int, int],
        ann: int,
    ) -> bool:
        reason = reject_reason(crop, p.quality)
        if reason is not None:
            res.add(f"rejected_{label}_{reason}")
            return False
        write_png(out_dir / rel_dir / name, crop)
        res.rows.append(
            {
                "path": str(rel_dir / name),
                "label": label,
                "domain": entry.domain,
                "slide": entry.file_name,
                "kind": kind,
                "x": xy[0],
                "y": xy[1],
                "annotation": ann,
            }
        )
        res.add("positives" if label == POSITIVE else "negatives")
        return True

    crops_of = [f for f in figures if f.mitotic or p.imposters_as_negatives]
    for f in crops_of:
        stream = 0 if f.mitotic else 1  # imposters never shift the positives' draws
        rng = np.random.default_rng([p.seed, entry.image_id, stream, f.index])
        x, y, anchored = place_positive(
            f.box, (w, h), s, p.max_offset, p.border_attempts, rng
        )
        res.add("anchored", int(anchored))
        crop = slide.read_region(x, y, 0, s, s, pad=w < s or h < s)
        label, kind = (
            (POSITIVE, "mitotic_figure") if f.mitotic else (NEGATIVE, "imposter")
        )
        emit(crop, label, kind, f"{kind}_a{f.index}.png", (x, y), f.index)

    n_pos = sum(f.mitotic for f in figures)
    wanted = n_pos if p.negatives_per_slide is None else p.negatives_per_slide
    if wanted and w >= s and h >= s:
        avoid = np.array(
            [f.box for f in figures if f.mitotic or not p.imposters_as_negatives],
            dtype=np.float64,
        ).reshape(-1, 4)
        tissue = TissueMap.from_slide(slide, p.mask_size)
        cells = np.flatnonzero(tissue.mask)
        rng = np.random.default_rng([p.seed, entry.image_id, 2])
        got = 0
        for _ in range(wanted * p.max_tries):
            if got == wanted:
                break
            if len(cells):  # a random point of a random tissue cell of the mask
                cy, cx = np.divmod(int(rng.choice(cells)), tissue.mask.shape[1])
                px, py = (
                    (cx + rng.random()) * tissue.sx,
                    (cy + rng.random()) * tissue.sy,
                )
            else:  # no tissue detected: sample anywhere, the filter decides
                px, py = rng.random() * w, rng.random() * h
            x = int(np.clip(round(px - s / 2), 0, w - s))
            y = int(np.clip(round(py - s / 2), 0, h - s))
            if not _far_from(x, y, s, avoid, p.margin):
                continue
            if (
                len(cells)
                and tissue.fraction(np.array([[x, y]]), s, s)[0] < p.tissue_threshold
            ):
                continue
            crop = slide.read_region(x, y, 0, s, s)
            if emit(crop, NEGATIVE, "random", f"random_{got:04d}.png", (x, y), -1):
                got += 1
        res.add("negatives_short", wanted - got)
    return res
