"""The AMi-Br table (``AMI-BR.csv``) read and checked: one :class:`Figure` a row.

Each row gives a figure's image (``slide``), ``dataset`` (``MIDOG21`` or
``TUPAC16``), ``uid``, centre ``x, y`` in full-resolution pixels and
``majority_atypical``; the experts' votes (``expert<k>_atypical``), when the
table has them, give each figure's ``agreement``: the share of experts whose vote
matches the majority label. Fractional coordinates are rounded down to the pixel
that holds the point.

**Domains.** MIDOG 2021 images are numbered by scanner: 001-050 Hamamatsu XR,
051-100 Hamamatsu S360, 101-150 Aperio CS2. The Leica GT450 images (151-200)
are unlabelled in MIDOG 2021 and are rejected. TUPAC16 is one domain.

The crops themselves are built by :mod:`.amibr`.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

from fedpath.errors import DataError
from fedpath.wsi.amibr_params import (
    DATASETS,
    LABELS,
    MIDOG,
    MIDOG21_DOMAINS,
    MIDOG21_UNLABELLED,
    REQUIRED_COLUMNS,
    TUPAC16_DOMAIN,
)

__all__ = ["Figure", "midog21_domain", "read_annotations"]

_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TRUE, _FALSE = ("true", "1"), ("false", "0")
#: the experts' vote columns (AMI-BR.csv: expert1_atypical .. expert3_atypical)
_EXPERT = re.compile(r"expert\d+_atypical")


@dataclass(frozen=True)
class Figure:
    """One row of the AMi-Br table (``line``: its line in the CSV file)."""

    line: int
    slide: str
    dataset: str
    uid: str
    x: int
    y: int
    atypical: bool
    domain: str
    #: the share of experts voting for the label; None: the table has no votes
    agreement: float | None = None

    @property
    def label(self) -> str:
        return LABELS[int(self.atypical)]

    @property
    def path(self) -> str:
        """The crop's path relative to the output folder."""
        return f"patches/{self.label}/{self.dataset}_{self.uid}.png"


def midog21_domain(slide: str) -> str:
    """The scanner domain of a MIDOG 2021 image from its number (``002.tiff``)."""
    stem = Path(slide).stem
    if not stem.isdigit():
        raise DataError(
            f"MIDOG21 slide {slide!r}: expected a MIDOG 2021 image name like "
            "'001.tiff' (its number gives the scanner)"
        )
    n = int(stem)
    for lo, hi, domain in MIDOG21_DOMAINS:
        if lo <= n <= hi:
            return domain
    lo, hi = MIDOG21_UNLABELLED
    if lo <= n <= hi:
        raise DataError(
            f"MIDOG21 slide {slide!r} is a Leica GT450 image ({lo:03d}-{hi:03d}), "
            "which MIDOG 2021 leaves unlabelled; AMi-Br has no domain for it"
        )
    raise DataError(
        f"MIDOG21 slide {slide!r}: number {n} is outside MIDOG 2021's 001-{hi:03d}"
    )


def _value(row: dict[str, str | None], col: str) -> str:
    v = row.get(col)
    if v is None or not v.strip():
        raise DataError(f"column {col!r} is empty")
    return v.strip()


def _coord(row: dict[str, str | None], col: str) -> int:
    text = _value(row, col)
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0:
        raise DataError(f"column {col!r} is {text!r}; expected a pixel coordinate >= 0")
    return math.floor(v)


def _figure(row: dict[str, str | None], line: int) -> Figure:
    dataset = _value(row, "dataset")
    if dataset not in DATASETS:
        raise DataError(
            f"column 'dataset' is {dataset!r}; expected {' or '.join(DATASETS)}"
        )
    slide = _value(row, "slide")
    uid = _value(row, "uid")
    if not _UID.fullmatch(uid):
        raise DataError(
            f"column 'uid' is {uid!r}; expected an id of letters, digits, '_', "
            "'.' or '-' (it names the crop file)"
        )
    atypical = _flag(row, "majority_atypical")
    votes = [_flag(row, c) for c in sorted(row) if c and _EXPERT.fullmatch(c)]
    agree = sum(v == atypical for v in votes) / len(votes) if votes else None
    if agree is not None and agree < 0.5:
        raise DataError(
            f"majority_atypical is {_value(row, 'majority_atypical')!r} but "
            f"{sum(votes)} of {len(votes)} expert "
            "votes say atypical; expected the majority label to match the votes"
        )
    return Figure(
        line=line,
        slide=slide,
        dataset=dataset,
        uid=uid,
        x=_coord(row, "x"),
        y=_coord(row, "y"),
        atypical=atypical,
        domain=midog21_domain(slide) if dataset == MIDOG else TUPAC16_DOMAIN,
        agreement=agree,
    )


def _flag(row: dict[str, str | None], col: str) -> bool:
    """An expert's vote: True (atypical) or False."""
    text = _value(row, col)
    if text.lower() not in (*_TRUE, *_FALSE):
        raise DataError(f"column {col!r} is {text!r}; expected True or False")
    return text.lower() in _TRUE


def read_annotations(path: str | Path, bad: list[str] | None = None) -> list[Figure]:
    """The figures of an AMi-Br table, every row checked.

    A missing column raises :class:`DataError`. A bad row raises it too, naming
    the file, the line and the column, unless ``bad`` is a list: then the row's
    message is appended to it and the row is skipped. Two rows with one
    ``(dataset, uid)`` (they would write the same crop) count as a bad row.
    """
    p = Path(path)
    where = f"annotations {str(p)!r}"
    try:
        fh = p.open(newline="", encoding="utf-8-sig")
    except OSError as err:
        raise DataError(f"{where}: cannot read it ({err.strerror or err})") from None
    figures: list[Figure] = []
    seen: dict[tuple[str, str], int] = {}
    with fh:
        reader = csv.DictReader(fh)
        try:
            header = list(reader.fieldnames or [])
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise DataError(
                    f"{where}: missing column(s) {', '.join(map(repr, missing))}; "
                    f"expected the AMi-Br table with columns "
                    f"{', '.join(REQUIRED_COLUMNS)} "
                    # counted, not quoted: an error never carries file content
                    + (
                        f"(found {len(header)} column(s))"
                        if header
                        else "(no header line)"
                    )
                )
            for row in reader:
                line = reader.line_num
                try:
                    fig = _figure(row, line)
                    key = (fig.dataset, fig.uid)
                    if key in seen:
                        raise DataError(
                            f"{fig.dataset} uid {fig.uid} is also on line "
                            f"{seen[key]}; each (dataset, uid) names one crop"
                        )
                    seen[key] = line
                    figures.append(fig)
                except DataError as err:
                    if bad is None:
                        raise DataError(f"{where} line {line}: {err}") from None
                    bad.append(f"{where} line {line}: {err}")
        except (csv.Error, UnicodeDecodeError) as err:
            raise DataError(
                f"{where} line {reader.line_num}: not a readable CSV table ({err})"
            ) from None
    return figures
