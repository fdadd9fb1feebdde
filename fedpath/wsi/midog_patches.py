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
    rel_dir = Path("patches") / entry.domain / Path(entry.file_name).stem
    (out_dir / rel_dir).mkdir(parents=True, exist_ok=True)
    writer = _PatchWriter(entry, out_dir, rel_dir, p)
    figures = _figures_inside(entry, slide, bad)
    _write_figures(writer, figures, slide, p)
    _write_negatives(writer, figures, slide, p)
    return writer.res


@dataclass
class _PatchWriter:
    """Writes the crops of one slide that pass the quality filter, with their
    manifest rows, into ``res``; counts the rejected ones per reason."""

    entry: SlideEntry
    out_dir: Path
    rel_dir: Path
    p: MvMidogParams
    res: SlideOutcome = field(default_factory=SlideOutcome)

    def emit(
        self,
        crop: np.ndarray,
        label: str,
        kind: str,
        name: str,
        xy: tuple[int, int],
        ann: int,
    ) -> bool:
        """Write ``crop`` as ``name`` if it passes the filter; True if written."""
        reason = reject_reason(crop, self.p.quality)
        if reason is not None:
            self.res.add(f"rejected_{label}_{reason}")
            return False
        write_png(self.out_dir / self.rel_dir / name, crop)
        self.res.rows.append(
            {
                "path": str(self.rel_dir / name),
                "label": label,
                "domain": self.entry.domain,
                "slide": self.entry.file_name,
                "kind": kind,
                "x": xy[0],
                "y": xy[1],
                "annotation": ann,
            }
        )
        self.res.add("positives" if label == POSITIVE else "negatives")
        return True


def _figures_inside(
    entry: SlideEntry, slide: Slide, bad: list[str] | None
) -> list[Figure]:
    """The slide's figures whose centre lies on it, boxes clipped to the slide.

    A figure whose centre is off the slide raises :class:`DataError`, or with
    ``bad`` a list, is listed there and left out.
    """
    w, h = slide.dimensions
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
    return figures


def _write_figures(
    writer: _PatchWriter, figures: list[Figure], slide: Slide, p: MvMidogParams
) -> None:
    """A crop of each mitotic figure (and imposter, if they are negatives)."""
    w, h = slide.dimensions
    s = p.patch_size
    crops_of = [f for f in figures if f.mitotic or p.imposters_as_negatives]
    for f in crops_of:
        stream = 0 if f.mitotic else 1  # imposters never shift the positives' draws
        rng = np.random.default_rng([p.seed, writer.entry.image_id, stream, f.index])
        x, y, anchored = place_positive(
            f.box, (w, h), s, p.max_offset, p.border_attempts, rng
        )
        writer.res.add("anchored", int(anchored))
        crop = slide.read_region(x, y, 0, s, s, pad=w < s or h < s)
        label, kind = (
            (POSITIVE, "mitotic_figure") if f.mitotic else (NEGATIVE, "imposter")
        )
        writer.emit(crop, label, kind, f"{kind}_a{f.index}.png", (x, y), f.index)


def _write_negatives(
    writer: _PatchWriter, figures: list[Figure], slide: Slide, p: MvMidogParams
) -> None:
    """Random tissue crops away from the figures, as many as asked (or as
    positives); the shortfall after ``max_tries`` draws each is counted."""
    w, h = slide.dimensions
    s = p.patch_size
    n_pos = sum(f.mitotic for f in figures)
    wanted = n_pos if p.negatives_per_slide is None else p.negatives_per_slide
    if not (wanted and w >= s and h >= s):
        return
    avoid = np.array(
        [f.box for f in figures if f.mitotic or not p.imposters_as_negatives],
        dtype=np.float64,
    ).reshape(-1, 4)
    tissue = TissueMap.from_slide(slide, p.mask_size)
    cells = np.flatnonzero(tissue.mask)
    rng = np.random.default_rng([p.seed, writer.entry.image_id, 2])
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
        if writer.emit(crop, NEGATIVE, "random", f"random_{got:04d}.png", (x, y), -1):
            got += 1
    writer.res.add("negatives_short", wanted - got)
