"""Settings of the MvMidog builder (fedpath.wsi.midog_params)."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from fedpath.config import ConfigError
from fedpath.wsi.midog_params import MIDOG2021_SCANNERS, MvMidogParams
from fedpath.wsi.quality import QualityThresholds


def test_defaults_are_the_papers() -> None:
    p = MvMidogParams()
    assert (p.patch_size, p.max_offset, p.margin) == (128, 32, 64)
    assert p.negatives_per_slide is None and p.imposters_as_negatives
    # the four MIDOG 2021 scanners cover ids 1-200 without gap or overlap
    ids = [i for lo, hi, _ in MIDOG2021_SCANNERS for i in range(lo, hi + 1)]
    assert ids == list(range(1, 201))


def test_fingerprint_is_a_digest_of_every_setting() -> None:
    p = MvMidogParams()
    text = json.dumps(dataclasses.asdict(p), sort_keys=True, default=str)
    assert p.fingerprint() == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert MvMidogParams().fingerprint() == p.fingerprint()
    changed = [
        MvMidogParams(seed=1),
        MvMidogParams(margin=0),
        MvMidogParams(quality=QualityThresholds(min_edge=3.0)),
        MvMidogParams(scanners={"001.tiff": "a"}),
    ]
    assert len({c.fingerprint() for c in changed} | {p.fingerprint()}) == 5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bbox_format": "yxyx"}, "bbox_format: expected 'xyxy' or 'xywh'"),
        ({"patch_size": 4}, "patch_size must be >= 8"),
        ({"max_offset": -1}, "max_offset, margin >= 0"),
        ({"margin": -5}, "max_offset, margin >= 0"),
    ],
)
def test_bad_settings_name_the_setting(change: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MvMidogParams(**change)  # type: ignore[arg-type]
