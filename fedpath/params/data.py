"""The datasets' params dataclasses (``data.params``), without PyTorch.

Each is re-exported by its dataset's module (``fedpath.data.synthetic``,
``.bags``, ``.manifest``, ``.camelyon17``); see :mod:`fedpath.params` for why
they live here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

from fedpath.schema import Check, Checked, ConfigError, Ge, Range, require


@dataclass(frozen=True)
class SyntheticParams(Checked):
    """Size and shape of the synthetic federation (all deterministic from ``seed``)."""

    config_section = "data.params"

    num_hospitals: Annotated[int, Ge(1)] = 4
    samples_per_hospital: Annotated[int, Ge(2)] = 400
    image_size: Annotated[int, Range(16, 512)] = 64
    slides_per_hospital: Annotated[int, Ge(1)] = 8
    test_fraction: Annotated[float, Range(0, 1, hi_open=True)] = 0.25
    tumour_fraction: Annotated[float, Range(0, 1, lo_open=True, hi_open=True)] = 0.5
    seed: int = 0


#: share of the slides held out for testing
TestFraction = Annotated[float, Range(0, 1, hi_open=True)]


@dataclass(frozen=True)
class SyntheticBagsParams(Checked):
    """Synthetic hospitals of slide bags (see :func:`fedpath.mil.bags.synthetic_bags`).

    ``rare_fraction``: share of a positive slide's patches in the rare diagnostic
    cluster (the label's only evidence); ``domain_shift``/``domain_scale``/
    ``domain_rotation``: the hospital-specific map of the embedding space.
    """

    config_section = "data.params"

    num_hospitals: Annotated[int, Ge(1)] = 3
    slides_per_hospital: Annotated[int, Ge(4)] = 40
    dim: Annotated[int, Ge(2)] = 64
    min_patches: Annotated[int, Ge(1)] = 200
    max_patches: int = 400
    rare_fraction: Annotated[float, Range(0, 1, lo_open=True, hi_open=True)] = 0.03
    domain_shift: float = 0.5
    domain_scale: float = 0.2
    domain_rotation: float = 0.3
    test_fraction: TestFraction = 0.3
    seed: int = 0

    def validate(self) -> None:
        require(
            self.min_patches <= self.max_patches,
            "min_patches",
            "1 <= min_patches <= max_patches",
            (self.min_patches, self.max_patches),
        )


@dataclass(frozen=True)
class ClamBagsParams(Checked):
    """Bags in CLAM's layout under ``data.root``.

    ``csv``: ``slide_id,label,domain`` rows (relative to the root unless absolute);
    ``embedding_space``: the name of the feature extractor that wrote the bags
    (clients only exchange synthetic slides within one space); ``classes``: class
    order (default: sorted label names).
    """

    config_section = "data.params"

    csv: str = "slides.csv"
    embedding_space: str = "unknown"
    classes: list[str] | None = None
    prefer: Annotated[str, Check("'h5' or 'pt'", lambda v: v in ("h5", "pt"))] = "h5"
    test_fraction: TestFraction = 0.3
    seed: int = 0


@dataclass(frozen=True)
class FileDatasetParams:
    """How images on disk become a dataset (shared by ``manifest`` and ``folder``).

    ``image_size``: every image is resized to this (antialiased bilinear) when its
    size differs. ``in_memory``: decode everything once at start (fine up to a few
    hundred thousand small crops); otherwise decode per batch. ``classes``: class
    order (default: sorted labels found). ``domains``: keep only these, in this
    order (default: all, in order of appearance). ``agreement`` (manifest only):
    the column holding each row's share of annotators agreeing with its label,
    in (0, 1], for ``train.soft_labels: agreement``. ``zoom``: keep the central
    1/zoom of each image's side before resizing (1: the whole image), for crops
    centred on an object (AMi-Br's mitotic figures); recorded in ``model.fpm``,
    so ``evaluate`` and ``predict`` crop the same way.
    """

    path: str = "manifest.csv"
    image_size: int = 64
    test_fraction: float = 0.25
    classes: list[str] | None = None
    domains: list[str] | None = None
    in_memory: bool = True
    skip_bad: bool = False
    seed: int = 0
    workers: int = 4
    agreement: str | None = None
    zoom: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.zoom) and 1.0 <= self.zoom <= 8.0):
            raise ConfigError(
                "config key 'data.params.zoom': expected a number in [1, 8] (the "
                f"central 1/zoom of each image is kept; 1: all of it), got {self.zoom}"
            )
        if not 16 <= self.image_size <= 1024:
            raise ConfigError(
                "config key 'data.params.image_size': expected an integer in "
                f"[16, 1024], got {self.image_size}"
            )
        if not 0 <= self.test_fraction < 1:
            raise ConfigError(
                "config key 'data.params.test_fraction': expected a number in [0, 1), "
                f"got {self.test_fraction}"
            )


@dataclass(frozen=True)
class Camelyon17Params(FileDatasetParams):
    """Camelyon17-WILDS options (96 px native patches, decoded lazily by default)."""

    path: str = "metadata.csv"
    image_size: int = 96
    in_memory: bool = False
    workers: int = 8
    split: Literal["lodo", "wilds"] = "lodo"
