"""AMi-Br: crops of normal and atypical mitotic figures from MIDOG 2021 and TUPAC16.

AMi-Br (Bertram et al., BVM 2025) labels every mitotic figure of MIDOG 2021 and
TUPAC16 as normal or atypical (majority of three experts). Its public table
(``AMI-BR.csv``) gives for each figure ``slide`` (the image's file name),
``dataset`` (``MIDOG21`` or ``TUPAC16``), ``uid``, the figure's centre ``x, y`` in
full-resolution pixels of that image, and ``majority_atypical``. The other
columns (the experts' votes) are not needed. :func:`build_amibr` crops every
figure from the source images and writes

* ``OUT/patches/{normal,atypical}/<dataset>_<uid>.png``: a ``size`` x ``size``
  RGB crop. The folder is the class: ``majority_atypical`` True means atypical.
* ``OUT/manifest.csv`` with the columns ``path,label,domain,slide,majority_atypical``
  and ``agreement`` (the share of experts voting for the label)
  and one row per crop. Normal rows come first, each class is sorted by path, and
  lines end in ``\\r\\n`` (the csv module's default). It is written atomically at
  the end, and fedpath's ``manifest`` dataset reads it.

**Geometry.** The crop of a figure at ``(x, y)`` covers columns ``x - size // 2``
to ``x - size // 2 + size - 1``, and the same for rows. So the figure's pixel
``(x, y)`` is the crop's pixel ``[size // 2, size // 2]`` (row, column). For an
even size that is the lower right of the four central pixels. Fractional
coordinates are rounded down to the pixel that holds the point.

**Border.** Crop pixels that fall outside the image get the ``pad`` fill: black
(0) by default, what cropping with PIL's ``Image.crop`` gives and what the crops
of fedpath's AMi-Br results have (122 of 3,720 touch a border), or white (255),
how :meth:`~.slide_base.Slide.read_region` pads. A centre outside the image is an
error.

**Domains.** One per MIDOG 2021 scanner (by image number; the unlabelled Leica
GT450 images are rejected) and one for TUPAC16: :mod:`.amibr_annotations`, which
reads and checks the table.

**Images.** Each image is the file named in ``slide``, looked up in the ``midog``
or ``tupac`` folder, first directly and then anywhere below it. MIDOG 2021 files
are ``001.tiff`` ... ``150.tiff``. TUPAC16 files use AMi-Br's names:
``01_stitched1.tif`` ... ``23_stitched1.tif`` for cases 1-23, whose high-power
fields are stitched into one image, and ``24.tif`` ... ``73.tif`` for the others.
Either folder may be None; that dataset's rows are then left out and counted.

**Resumable.** A crop that already exists (non-empty) is kept. A slide whose
crops all exist is not even opened, so a rerun writes no crop and produces the
same manifest. ``OUT/.amibr.json`` records size and pad, and a rerun with other
settings in the same folder is refused.

**Bad input.** Without ``skip_bad``, the first bad row or image raises
:class:`DataError` (the message names the file, line and column). With it, bad
rows (unknown dataset, bad value, duplicate uid, centre outside the image) and
missing or unreadable images are counted and listed in the report instead.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fedpath.config import ConfigError
from fedpath.errors import DataError
from fedpath.utils.io import atomic_write_text
from fedpath.wsi import stage_progress, write_png
from fedpath.wsi.amibr_annotations import Figure, read_annotations
from fedpath.wsi.amibr_params import (
    DEFAULT_PAD,
    DEFAULT_SIZE,
    DOMAINS,
    LABELS,
    MANIFEST_FIELDS,
    MIDOG,
    MIN_SIZE,
    PAD_FILLS,
    TUPAC,
)
from fedpath.wsi.slide import open_slide
from fedpath.wsi.slide_base import Slide

__all__ = ["AmiBrReport", "build_amibr", "crop_figure"]

_OPTION = {MIDOG: "--midog", TUPAC: "--tupac"}


class _Finder:
    """Image files of one dataset's folder: ``root/name``, else one below root."""

    def __init__(self, root: Path, option: str) -> None:
        if not root.is_dir():
            raise DataError(f"{option} folder {str(root)!r} does not exist")
        self.root, self.option = root, option
        self._below: dict[str, list[Path]] | None = None

    def find(self, name: str) -> Path:
        direct = self.root / name
        if direct.is_file():
            return direct
        if self._below is None:  # listed once, the first time a name is not direct
            self._below = {}
            for f in sorted(self.root.rglob("*")):
                if f.is_file():
                    self._below.setdefault(f.name, []).append(f)
        hits = self._below.get(Path(name).name, [])
        if len(hits) > 1:
            raise DataError(
                f"{len(hits)} files named {Path(name).name!r} below the "
                f"{self.option} folder {str(self.root)!r} "
                f"({', '.join(str(h) for h in hits)}); keep one"
            )
        if not hits:
            raise DataError(
                f"no image file {name!r} in the {self.option} folder "
                f"{str(self.root)!r} or its subfolders"
            )
        return hits[0]


def crop_figure(slide: Slide, x: int, y: int, size: int, fill: int) -> np.ndarray:
    """The ``size`` x ``size`` RGB crop whose pixel ``[size // 2, size // 2]`` is
    the slide's ``(x, y)``. Pixels outside the slide are ``fill``.

    ``(x, y)`` must lie inside the slide.
    """
    w, h = slide.dimensions
    x0, y0 = x - size // 2, y - size // 2
    ix0, iy0 = max(x0, 0), max(y0, 0)
    ix1, iy1 = min(x0 + size, w), min(y0 + size, h)
    out = np.full((size, size, 3), fill, dtype=np.uint8)
    out[iy0 - y0 : iy1 - y0, ix0 - x0 : ix1 - x0] = slide.read_region(
        ix0, iy0, 0, ix1 - ix0, iy1 - iy0
    )
    return out


@dataclass
class AmiBrReport:
    """What :func:`build_amibr` did. ``counts``: domain -> label -> crops in the
    manifest; ``slides``: domain -> slides with crops; ``left_out``: dataset ->
    rows not built because its folder was not given; ``bad``: skipped inputs."""

    manifest: Path
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    slides: dict[str, int] = field(default_factory=dict)
    written: int = 0
    existing: int = 0
    opened: int = 0
    left_out: dict[str, int] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(sum(c.values()) for c in self.counts.values())

    def summary(self) -> str:
        """The counts as text: a domain x class table like the AMi-Br README."""
        lines = [
            f"AMi-Br: {self.total} crops ({self.written} written, {self.existing} "
            f"already there; {self.opened} slides read) -> {self.manifest}",
            f"| domain | {' | '.join(LABELS)} | slides |",
            "|---" * (len(LABELS) + 2) + "|",
        ]
        for dom in self.counts:
            c = self.counts[dom]
            cells = " | ".join(str(c.get(lab, 0)) for lab in LABELS)
            lines.append(f"| {dom} | {cells} | {self.slides.get(dom, 0)} |")
        totals = " | ".join(
            str(sum(c.get(lab, 0) for c in self.counts.values())) for lab in LABELS
        )
        lines.append(f"| total | {totals} | {sum(self.slides.values())} |")
        for ds, n in self.left_out.items():
            lines.append(f"left out: {n} {ds} rows (no {_OPTION[ds]} folder given)")
        if self.bad:
            lines.append(f"skipped ({len(self.bad)}):")
            lines.extend(f"  {b}" for b in self.bad)
        return "\n".join(lines)


def _present(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _check_settings(out: Path, size: int, pad: str) -> None:
    """Refuse to mix crops of different sizes or fills in one output folder."""
    path = out / ".amibr.json"
    settings = json.dumps({"size": size, "pad": pad}, sort_keys=True)
    try:
        old = path.read_text()
    except OSError:
        old = None
    except UnicodeDecodeError:  # damaged: unknown settings, never overwritten
        old = "(not UTF-8)"
    if old is not None and old != settings:
        raise ConfigError(
            f"{out}: these crops were made with other settings ({path}: {old}); "
            f"use a new output folder or delete it"
        )
    if old is None:
        atomic_write_text(path, settings)


def build_amibr(
    annotations: str | Path,
    out_dir: str | Path,
    midog: str | Path | None = None,
    tupac: str | Path | None = None,
    *,
    size: int = DEFAULT_SIZE,
    pad: str = DEFAULT_PAD,
    skip_bad: bool = False,
    quiet: bool = True,
) -> AmiBrReport:
    """Build AMi-Br's crops and ``manifest.csv`` in ``out_dir`` (see the module).

    Parameters
    ----------
    annotations : path
        The AMi-Br table (``AMI-BR.csv``).
    out_dir : path
        Receives ``patches/{normal,atypical}/*.png``, ``manifest.csv`` and
        ``.amibr.json``.
    midog, tupac : path or None
        Folders of the MIDOG 2021 and TUPAC16 images. None leaves that
        dataset's rows out; at least one is needed.
    size : int
        Crop side in pixels (at least 16).
    pad : {"white", "black"}
        Fill of the crop pixels outside the image.
    skip_bad : bool
        Count and list bad rows and missing or unreadable images in the
        report, instead of raising :class:`DataError`.
    quiet : bool
        True: no progress bar; otherwise one on stderr, a step per slide.
    """
    if size < MIN_SIZE:
        raise ConfigError(f"size: crops must be at least {MIN_SIZE} px, got {size}")
    if pad not in PAD_FILLS:
        raise ConfigError(f"pad: expected one of {', '.join(PAD_FILLS)}, got {pad!r}")
    folders = {MIDOG: midog, TUPAC: tupac}
    if all(f is None for f in folders.values()):
        raise ConfigError(
            "give the MIDOG 2021 image folder (--midog), the TUPAC16 one (--tupac) "
            "or both"
        )
    finders = {
        ds: _Finder(Path(f), _OPTION[ds]) for ds, f in folders.items() if f is not None
    }
    ann, out = Path(annotations), Path(out_dir)
    bad: list[str] | None = [] if skip_bad else None
    figures = read_annotations(ann, bad)
    out.mkdir(parents=True, exist_ok=True)
    _check_settings(out, size, pad)
    for label in LABELS:
        (out / "patches" / label).mkdir(parents=True, exist_ok=True)
    report = AmiBrReport(manifest=out / "manifest.csv")
    by_slide: dict[tuple[str, str], list[Figure]] = {}
    for f in figures:
        if f.dataset in finders:
            by_slide.setdefault((f.dataset, f.slide), []).append(f)
        else:
            report.left_out[f.dataset] = report.left_out.get(f.dataset, 0) + 1
    kept: list[Figure] = []
    with stage_progress("amibr", len(by_slide), quiet) as advance:
        for (ds, slide), figs in sorted(by_slide.items()):
            kept.extend(
                _build_slide(
                    figs, finders[ds], ann, out, size, PAD_FILLS[pad], bad, report
                )
            )
            advance(slide)
    kept.sort(key=lambda f: (LABELS.index(f.label), f.path))
    buf = io.StringIO()
    writer = csv.writer(buf)  # lines end in \r\n, as the csv module writes them
    writer.writerow(MANIFEST_FIELDS)
    writer.writerows(
        (f.path, f.label, f.domain, f.slide, str(f.atypical), _share(f.agreement))
        for f in kept
    )
    atomic_write_text(report.manifest, buf.getvalue())
    slides: dict[str, set[str]] = {}
    for dom in DOMAINS:  # summary order: the domains found, in the README's order
        of_dom = [f for f in kept if f.domain == dom]
        if of_dom:
            report.counts[dom] = {
                lab: sum(f.label == lab for f in of_dom) for lab in LABELS
            }
            slides[dom] = {f.slide for f in of_dom}
    report.slides = {dom: len(s) for dom, s in slides.items()}
    report.bad = list(bad or [])
    return report


def _share(agreement: float | None) -> str:
    """The manifest's ``agreement`` cell (empty: no votes in the table)."""
    return "" if agreement is None else f"{agreement:.4f}"


def _build_slide(
    figs: list[Figure],
    finder: _Finder,
    ann: Path,
    out: Path,
    size: int,
    fill: int,
    bad: list[str] | None,
    report: AmiBrReport,
) -> list[Figure]:
    """The figures of one slide whose crops exist now; writes the missing ones."""
    present = [_present(out / f.path) for f in figs]
    done = [f for f, here in zip(figs, present, strict=True) if here]
    todo = [f for f, here in zip(figs, present, strict=True) if not here]
    report.existing += len(done)
    if not todo:
        return done
    first = figs[0]
    where = (
        f"annotations {str(ann)!r} line {first.line}: {first.dataset} slide "
        f"{first.slide!r} ({len(figs)} rows)"
    )

    def failed(err: DataError, left: list[Figure]) -> list[Figure]:
        msg = f"{where}: {err}"
        if bad is None:
            raise DataError(msg) from None
        bad.append(f"{msg} ({len(left)} crops not made)")
        return done

    try:
        slide = open_slide(finder.find(first.slide))
    except DataError as err:
        return failed(err, todo)
    report.opened += 1
    with slide:
        w, h = slide.dimensions
        for i, f in enumerate(todo):
            if not (f.x < w and f.y < h):
                msg = (
                    f"annotations {str(ann)!r} line {f.line}: {f.dataset} uid "
                    f"{f.uid} at x={f.x}, y={f.y} lies outside {str(slide.path)!r} "
                    f"({w}x{h} pixels)"
                )
                if bad is None:
                    raise DataError(msg)
                bad.append(msg)
                continue
            try:
                crop = crop_figure(slide, f.x, f.y, size, fill)
            except DataError as err:
                return failed(err, todo[i:])
            write_png(out / f.path, crop)
            # a relabelled figure (table edited) leaves no crop in the other class
            other = LABELS[1 - LABELS.index(f.label)]
            (out / "patches" / other / Path(f.path).name).unlink(missing_ok=True)
            report.written += 1
            done.append(f)
    return done
