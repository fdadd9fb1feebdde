"""Camelyon17-WILDS patches read from the standard on-disk layout (no wilds package).

Layout (``data.root`` is ``camelyon17_v1.0`` or the folder holding it)::

    camelyon17_v1.0/metadata.csv  patient,node,x_coord,y_coord,tumor,slide,center,split
    camelyon17_v1.0/patches/patient_004_node_4/patch_patient_004_node_4_x_3328_y_21792.png

Domains are the five hospitals (``center`` 0-4 -> ``hospital_0`` ... ``hospital_4``),
classes ``normal`` / ``tumor``, slides from ``slide``. ``split: lodo`` (default)
holds out whole slides per hospital for the in-distribution test split and lets
``lodo.targets`` pick the unseen hospitals (FedStain Table III: every hospital);
``split: wilds`` uses the official split column (1 = WILDS id_val as the test part
of the training hospitals); combine it with ``lodo.targets: [hospital_2]`` for the
official OOD test hospital.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from fedpath.config import ConfigError
from fedpath.data.base import DATASETS, DataError, DomainDataset
from fedpath.data.inputs import read_text
from fedpath.data.manifest import Records, build_file_dataset
from fedpath.params.data import Camelyon17Params

COLUMNS = ("patient", "node", "x_coord", "y_coord", "tumor", "slide", "center", "split")


def find_metadata(root: Path, name: str) -> Path:
    for candidate in (root / name, root / "camelyon17_v1.0" / name):
        if candidate.is_file():
            return candidate
    raise DataError(
        f"Camelyon17: no {name} under {str(root)!r} or "
        f"{str(root / 'camelyon17_v1.0')!r}"
    )


def read_metadata(csv_path: Path) -> tuple[Records, np.ndarray]:
    """Records of every patch and the official split flag (1 = id_val)."""
    text = read_text(csv_path, "Camelyon17 metadata")
    try:
        return _read_rows(csv_path, csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as err:  # its messages quote no content
        raise DataError(
            f"Camelyon17 metadata {str(csv_path)!r}: not valid CSV ({err})"
        ) from None


def _read_rows(
    csv_path: Path, reader: csv.DictReader[str]
) -> tuple[Records, np.ndarray]:
    """The records of the rows of ``reader`` (errors name the row and column)."""
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise DataError(
            f"Camelyon17 metadata {str(csv_path)!r} lacks columns {missing}; "
            f"expected {list(COLUMNS)}"
        )
    rec = Records([], [], [], [], [])
    split: list[int] = []
    for row in reader:
        row_no = reader.line_num
        ints = {}
        for col in COLUMNS:
            try:
                if col != "slide":
                    ints[col] = int(row[col])
            except (TypeError, ValueError):
                raise DataError(
                    f"{csv_path}:{row_no}: column {col!r} is not an integer"
                ) from None
        patient, node, x, y = (ints[c] for c in COLUMNS[:4])
        tumor, center = ints["tumor"], ints["center"]
        split.append(ints["split"])
        if tumor not in (0, 1):
            raise DataError(f"{csv_path}:{row_no}: tumor must be 0 or 1, got {tumor}")
        folder = f"patient_{patient:03d}_node_{node}"
        rec.paths.append(
            csv_path.parent / "patches" / folder / f"patch_{folder}_x_{x}_y_{y}.png"
        )
        rec.labels.append("tumor" if tumor else "normal")
        rec.domains.append(f"hospital_{center}")
        rec.slides.append(f"slide_{row['slide']}")
        rec.where.append(f"{csv_path}:{row_no}")
    if not rec.paths:
        raise DataError(f"Camelyon17 metadata {str(csv_path)!r} lists no patches")
    return rec, np.asarray(split)


@DATASETS.register("camelyon17", params=Camelyon17Params)
def camelyon17(params: Camelyon17Params, root: str | None) -> DomainDataset:
    """Camelyon17-WILDS: 5 hospitals, tumor vs normal 96 px patches."""
    if root is None:
        raise ConfigError("data.root: camelyon17 needs the camelyon17_v1.0 folder")
    rec, split = read_metadata(find_metadata(Path(root).expanduser(), params.path))
    if params.classes is None:
        params = _with_classes(params)
    is_test = (split == 1) if params.split == "wilds" else None
    return build_file_dataset("camelyon17", rec, params, is_test)


def _with_classes(p: Camelyon17Params) -> Camelyon17Params:
    from dataclasses import replace

    return replace(p, classes=["normal", "tumor"])
