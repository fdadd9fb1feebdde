"""MvMidog: mitotic-figure patches per scanner from MIDOG slides (FedStain, Sec. V-A).

The FedStain paper builds a multi-domain mitosis dataset from MIDOG (Aubreville et
al., Med. Image Anal. 2023), one domain per scanner: 128 x 128 patches holding a
mitotic figure (label ``mitotic_figure``) and patches without one (``negative``).
This builder reads the MIDOG whole-slide TIFFs lazily and writes the patches as PNG
plus a ``manifest.csv`` (``path, label, domain, slide``) that fedpath's
``manifest`` dataset reads.

* Positives are centred on each figure with a random offset (the figure is not
  always central but stays whole in the field); near the slide border three
  random offsets are tried, then the crop is anchored at the nearest edge/corner.
* Negatives are random tissue crops at least ``margin`` pixels from every figure;
  imposters (hard negatives) optionally add crops labelled ``negative``.
* A quality filter rejects background, structureless and colourless crops and
  counts each reason.
* Resumable: each finished slide leaves a ledger entry (written last, atomically);
  a re-run skips it. Deterministic: each slide draws from (seed, image id).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from rich.console import Console

from fedpath.config import ConfigError
from fedpath.data.base import DataError
from fedpath.utils.io import atomic_write_text
from fedpath.wsi import stage_progress, write_png
from fedpath.wsi.slide import Slide, open_slide
from fedpath.wsi.tiling import QualityThresholds, TissueMap, reject_reason

#: MIDOG 2021 training set: image id ranges per scanner (the Leica GT450 images
#: are unlabelled and are skipped unless ``include_unlabelled``).
MIDOG2021_SCANNERS: tuple[tuple[int, int, str], ...] = (
    (1, 50, "hamamatsu_xr"),
    (51, 100, "hamamatsu_s360"),
    (101, 150, "aperio_cs2"),
    (151, 200, "leica_gt450"),
)
POSITIVE, NEGATIVE = "mitotic_figure", "negative"
_POSITIVE_NAMES = ("mitotic figure", "mitotic_figure", "mitosis")
_IMPOSTER_NAMES = (
    "hard negative",
    "non-mitotic figure",
    "imposter",
    "mitotic figure lookalike",
    "nonmitotic",
)
QUALITY_REASONS = ("background", "flat", "colourless")


@dataclass(frozen=True)
class MvMidogParams:
    """Settings of the MvMidog builder (defaults: FedStain Sec. V-A on MIDOG 2021).

    ``negatives_per_slide``: random negatives per slide (None: as many as the
    slide has mitotic figures). ``margin``: level-0 pixels kept between a random
    negative and every figure box (and every imposter box unless imposters are
    negatives). ``bbox_format``: MIDOG stores ``[x0, y0, x1, y1]``; COCO's
    ``[x, y, w, h]`` is ``xywh``. Scanner of an image: its ``scanner_field``,
    else ``scanners[file_name]``, else the id ``scanner_ranges``.
    """

    patch_size: int = 128
    max_offset: int = 32
    border_attempts: int = 3
    negatives_per_slide: int | None = None
    margin: int = 64
    imposters_as_negatives: bool = True
    include_unlabelled: bool = False
    bbox_format: Literal["xyxy", "xywh"] = "xyxy"
    scanner_field: str = "scanner"
    scanner_ranges: tuple[tuple[int, int, str], ...] = MIDOG2021_SCANNERS
    scanners: Mapping[str, str] | None = None
    tissue_threshold: float = 0.5
    mask_size: int = 1024
    max_tries: int = 50
    quality: QualityThresholds = field(default_factory=QualityThresholds)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.bbox_format not in ("xyxy", "xywh"):
            raise ConfigError(
                f"bbox_format: expected 'xyxy' or 'xywh', got {self.bbox_format!r}"
            )
        if self.patch_size < 8 or self.max_offset < 0 or self.margin < 0:
            raise ConfigError(
                "patch_size must be >= 8 and max_offset, margin >= 0; got "
                f"{self.patch_size}, {self.max_offset}, {self.margin}"
            )

    def fingerprint(self) -> str:
        """Hash of every setting that changes which patches are written."""
        text = json.dumps(asdict(self), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


# ------------------------------------------------------------------ annotations


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


# ------------------------------------------------------------------ placement


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


# ------------------------------------------------------------------ the build

_MANIFEST_FIELDS = ("path", "label", "domain", "slide", "kind", "x", "y", "annotation")


def _ledger_ok(ledger: Path, out_dir: Path, fingerprint: str) -> dict[str, Any] | None:
    """The ledger entry of a finished slide, or None if it must be (re)built."""
    try:
        done = json.loads(ledger.read_text())
    except (OSError, ValueError):
        return None
    if done.get("fingerprint") != fingerprint:
        return None
    for row in done.get("rows", []):
        f = out_dir / row["path"]
        if not f.is_file() or f.stat().st_size == 0:
            return None
    return dict(done)


def _check_build_settings(state: Path, p: MvMidogParams) -> None:
    """Refuse to mix patches of different settings in one output directory."""
    settings = json.dumps(asdict(p), sort_keys=True, default=str, indent=1)
    path = state / "settings.json"
    if path.is_file() and path.read_text() != settings:
        raise ConfigError(
            f"{path.parent.parent}: this MvMidog directory was built with other "
            f"settings ({path}); use a new output directory or delete it"
        )
    atomic_write_text(path, settings)


def build_mvmidog(
    annotations: str | Path,
    slide_dir: str | Path,
    out_dir: str | Path,
    params: MvMidogParams | None = None,
    *,
    skip_bad: bool = False,
    quiet: bool = True,
) -> dict[str, Any]:
    """Build MvMidog: PNG patches per scanner and ``manifest.csv`` in ``out_dir``.

    Parameters
    ----------
    annotations : path
        MIDOG's COCO-style JSON (``images``, ``annotations``, ``categories``).
    slide_dir : path
        Folder of the slide files named by the images' ``file_name``.
    out_dir : path
        Receives ``patches/<domain>/<slide>/*.png``, ``manifest.csv`` and the
        ledger ``.mvmidog/`` that makes the build resumable.
    skip_bad : bool
        Skip and count bad annotations, absent or corrupt slides instead of
        raising :class:`DataError` (which names the file and entry).

    Returns
    -------
    dict
        The report: per domain the positives and negatives written and the
        crops rejected per quality reason; the slides built, resumed, skipped.
    """
    p = params or MvMidogParams()
    json_path, sdir, out = Path(annotations), Path(slide_dir), Path(out_dir)
    bad: list[str] | None = [] if skip_bad else None
    entries = load_annotations(json_path, p, bad)
    state = out / ".mvmidog"
    state.mkdir(parents=True, exist_ok=True)
    _check_build_settings(state, p)
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        "annotations": str(json_path),
        "domains": {},
        "built": 0,
        "resumed": 0,
        "unlabelled": 0,
    }
    with stage_progress("mvmidog", len(entries), quiet) as advance:
        for e in entries:
            dom = report["domains"].setdefault(e.domain, {"slides": 0})
            done = _slide_ledger(e, sdir, out, p, bad, report)
            advance(e.file_name)
            if done is not None:
                dom["slides"] += 1
                for k, v in done["counts"].items():
                    dom[k] = dom.get(k, 0) + v
                rows.extend(done["rows"])
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=_MANIFEST_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(out / "manifest.csv", buf.getvalue())
    report["bad"] = list(bad or [])
    report["manifest"] = str(out / "manifest.csv")
    atomic_write_text(state / "report.json", json.dumps(report, indent=1))
    if not quiet:
        Console(soft_wrap=True).print(format_report(report), highlight=False)
    return report


def _slide_ledger(
    e: SlideEntry,
    sdir: Path,
    out: Path,
    p: MvMidogParams,
    bad: list[str] | None,
    report: dict[str, Any],
) -> dict[str, Any] | None:
    """The ledger entry of slide ``e``: found finished, or built now (None: none)."""
    if not e.figures and not p.include_unlabelled:
        report["unlabelled"] += 1
        return None
    # the key covers settings and this slide's annotations: editing the JSON
    # (or fixing an entry skipped with skip_bad) rebuilds the slide
    figs = [(f.index, f.box, f.mitotic) for f in e.figures]
    key = hashlib.sha256(
        json.dumps([p.fingerprint(), e.file_name, figs]).encode()
    ).hexdigest()[:16]
    ledger = out / ".mvmidog" / f"{e.image_id}.json"
    done = _ledger_ok(ledger, out, key)
    if done is not None:
        report["resumed"] += 1
    else:
        slide_bad: list[str] | None = [] if bad is not None else None
        try:
            outcome = _build_one(e, sdir, out, p, slide_bad)
        except DataError as err:
            where = f"{report['annotations']}: image id {e.image_id} ({e.file_name})"
            if bad is None:
                raise DataError(f"{where}: {err}") from None
            bad.append(f"{where}: {err}")
            return None
        done = {"fingerprint": key, "file_name": e.file_name, **asdict(outcome)}
        done["bad"] = slide_bad or []
        atomic_write_text(ledger, json.dumps(done))  # written last: slide is done
        report["built"] += 1
    if bad is not None:  # entries skipped in this slide, also when resumed
        bad.extend(done.get("bad", []))
    return done


def _build_one(
    e: SlideEntry, sdir: Path, out: Path, p: MvMidogParams, bad: list[str] | None
) -> SlideOutcome:
    with open_slide(sdir / e.file_name) as slide:
        if e.size is not None and e.size != slide.dimensions:
            raise DataError(
                f"slide {str(slide.path)!r} is {slide.dimensions[0]}x"
                f"{slide.dimensions[1]} but the annotation JSON says "
                f"{e.size[0]}x{e.size[1]}"
            )
        # leftovers of an interrupted run are not in any ledger: start clean
        shutil.rmtree(out / "patches" / e.domain / Path(e.file_name).stem, True)
        return build_slide(e, slide, out, p, bad)


def format_report(report: dict[str, Any]) -> str:
    """Human-readable summary of :func:`build_mvmidog`'s report."""
    lines = [
        f"MvMidog: {report['built']} slides built, {report['resumed']} resumed, "
        f"{report['unlabelled']} without annotations skipped, "
        f"{len(report['bad'])} bad entries skipped -> {report['manifest']}"
    ]
    for dom, c in report["domains"].items():
        rej = {
            f"{lab}/{r}": c.get(f"rejected_{lab}_{r}", 0)
            for lab in (POSITIVE, NEGATIVE)
            for r in QUALITY_REASONS
        }
        rej_text = ", ".join(f"{k} {v}" for k, v in rej.items() if v) or "none"
        lines.append(
            f"  {dom}: {c['slides']} slides, {c.get('positives', 0)} positives, "
            f"{c.get('negatives', 0)} negatives, {c.get('anchored', 0)} anchored at "
            f"the border, {c.get('negatives_short', 0)} negatives short; "
            f"rejected: {rej_text}"
        )
    lines.extend(f"  skipped: {b}" for b in report["bad"])
    return "\n".join(lines)
