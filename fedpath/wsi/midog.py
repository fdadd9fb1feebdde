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

This module runs the build over all slides (ledger, manifest, report); the
settings are :mod:`.midog_params`, the JSON reader :mod:`.midog_annotations` and
the crops of one slide :mod:`.midog_patches`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from fedpath.config import ConfigError
from fedpath.data.base import DataError
from fedpath.utils.io import atomic_write_text
from fedpath.wsi import stage_progress
from fedpath.wsi.midog_annotations import SlideEntry, load_annotations
from fedpath.wsi.midog_params import NEGATIVE, POSITIVE, MvMidogParams
from fedpath.wsi.midog_patches import SlideOutcome, build_slide
from fedpath.wsi.quality import QUALITY_REASONS
from fedpath.wsi.slide import open_slide

__all__ = ["MvMidogParams", "build_mvmidog", "format_report"]

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
    if path.is_file() and path.read_bytes() != settings.encode():
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
