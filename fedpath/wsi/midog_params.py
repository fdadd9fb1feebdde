"""Settings of the MvMidog builder, MIDOG's scanner id ranges and the patch labels.

Defaults follow the FedStain paper (Sec. V-A) on MIDOG 2021 (Aubreville et al.,
Med. Image Anal. 2023); :meth:`MvMidogParams.fingerprint` is what a resumed build
compares, so that patches of different settings never mix.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Literal

from fedpath.config import ConfigError
from fedpath.wsi.quality import QualityThresholds

#: MIDOG 2021 training set: image id ranges per scanner (the Leica GT450 images
#: are unlabelled and are skipped unless ``include_unlabelled``).
MIDOG2021_SCANNERS: tuple[tuple[int, int, str], ...] = (
    (1, 50, "hamamatsu_xr"),
    (51, 100, "hamamatsu_s360"),
    (101, 150, "aperio_cs2"),
    (151, 200, "leica_gt450"),
)
#: The labels of the manifest rows.
POSITIVE, NEGATIVE = "mitotic_figure", "negative"


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
