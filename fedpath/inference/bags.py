"""A site's slide bags for a MIL model: labels CSVs, class folders, bag files.

Bags are ``.h5`` / ``.pt`` files of patch embeddings
(:func:`fedpath.mil.bags.read_bag_file`), each checked against the model's
feature dimension and, when its file records the encoder that made it, against
the model's encoder (a warning).
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Mapping
from pathlib import Path

import torch

from fedpath.config import DataConfig
from fedpath.data.bags import BagStore, from_bag_dataset
from fedpath.data.base import DataError, DomainDataset
from fedpath.inference.classes import renamed, resolve_classes
from fedpath.mil.bags import BagDataset, SlideBag, read_bag_file
from fedpath.mil.export import (
    BAG_SUFFIXES,
    LoadedMILModel,
    bag_file_encoder,
    encoder_mismatch,
    scan_bag_files,
)
from fedpath.runtime.experiment import load_dataset

log = logging.getLogger("fedpath")

#: the labels CSV ``evaluate MODEL FOLDER`` reads from a folder of bags
BAG_LABELS = "slides.csv"


class BagReader:
    """Reads a site's bag files for a MIL model: each checked against the model's
    feature dimension (an error naming the file and the dimension expected) and,
    when its file records the encoder, against the model's encoder."""

    def __init__(self, model: LoadedMILModel, skip_bad: bool) -> None:
        self.model = model
        self.skip_bad = skip_bad
        self.skipped: list[str] = []
        self.warnings: list[str] = []

    def read(self, path: Path) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The features and coords of ``path``; None: unreadable, skipped."""
        try:
            feats, coords = read_bag_file(path)
        except DataError as err:
            if not self.skip_bad:
                raise DataError(f"{err} (use --skip-bad to skip and count)") from None
            self.skipped.append(str(path))
            return None
        self.model.check_dim(int(feats.shape[1]), str(path))
        for diff in encoder_mismatch(self.model.meta.encoder, bag_file_encoder(path)):
            text = f"bags made by another encoder than the model's ({diff})"
            if text not in self.warnings:
                log.warning("%s: %s", path, text)
                self.warnings.append(text)
        return feats, coords


def _bag_path(path: Path, line: int, sid: str, given: str) -> Path:
    """The bag file of slide ``sid`` (row ``line`` of labels CSV ``path``):
    ``given`` (relative to the CSV), else CLAM's layout beside the CSV."""
    base = path.parent
    if given:
        candidates = [Path(given) if Path(given).is_absolute() else base / given]
    else:
        candidates = [
            base / "h5_files" / f"{sid}.h5",
            base / "pt_files" / f"{sid}.pt",
            *(base / f"{sid}{suffix}" for suffix in BAG_SUFFIXES),
        ]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise DataError(
            f"{path!s}:{line}: slide {sid!r} has no bag file (looked for "
            f"{', '.join(str(c) for c in candidates)})"
        )
    return found


def _bag_csv(
    path: Path, reader: BagReader, class_map: Mapping[str, str]
) -> tuple[list[SlideBag], dict[str, str]]:
    """The slides of a labels CSV (:func:`open_bag_files`) and the labels renamed."""
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"{str(path)!r}: cannot read ({err})") from None
    cols = set(rows[0]) if rows else set()
    sid_col = "slide_id" if "slide_id" in cols else "slide"
    if not rows or sid_col not in cols or "label" not in cols:
        raise DataError(
            f"{str(path)!r}: a slide labels CSV needs the columns slide_id (or "
            f"slide) and label, optionally domain and path, and rows; has "
            f"{sorted(cols)}"
        )
    classes = reader.model.class_names
    labels = sorted({r["label"].strip() for r in rows})
    mapping = resolve_classes(labels, classes, class_map, str(path), "labels")
    bags: list[SlideBag] = []
    for line, row in enumerate(rows, start=2):
        sid = row[sid_col].strip()
        found = _bag_path(path, line, sid, (row.get("path") or "").strip())
        read = reader.read(found)
        if read is None:
            continue
        domain = (row.get("domain") or "").strip() or path.parent.name
        label = classes.index(mapping[row["label"].strip()])
        bags.append(SlideBag(sid, read[0], label, domain, read[1]))
    return bags, renamed(mapping)


def _bag_folders(
    root: Path, reader: BagReader, class_map: Mapping[str, str]
) -> tuple[list[SlideBag], dict[str, str]]:
    """The slides of ``root/<class>/`` folders of bag files (at any depth below
    a class folder; one domain named after ``root``) and the folders renamed."""
    subdirs = sorted(d for d in root.iterdir() if d.is_dir())
    names = [d.name for d in subdirs]
    if {"h5_files", "pt_files"} & set(names):
        raise DataError(
            f"{str(root)!r} is a features folder (h5_files/, pt_files/) without "
            f"labels: add {BAG_LABELS} (slide_id,label) to it, pass a labels CSV "
            "(slide_id,label[,domain][,path]) instead of the folder, or use "
            "`fedpath predict` for unlabelled slides"
        )
    if not subdirs:
        raise DataError(
            f"{str(root)!r} holds no class folders; expected <class>/<slide>.h5 (or "
            f".pt) folders, a {BAG_LABELS} labels CSV, or `fedpath predict` for "
            "unlabelled slides"
        )
    mapping = resolve_classes(
        names, reader.model.class_names, class_map, str(root), "class folders"
    )
    bags: list[SlideBag] = []
    for d in subdirs:
        label = reader.model.class_names.index(mapping[d.name])
        for f in scan_bag_files(d):
            read = reader.read(f)
            if read is not None:
                bags.append(SlideBag(f.stem, read[0], label, root.name, read[1]))
    if not bags and not reader.skipped:
        raise DataError(
            f"no bag files ({', '.join(BAG_SUFFIXES)}) under the class folders of "
            f"{str(root)!r}"
        )
    return bags, renamed(mapping)


def open_bag_files(
    path: Path,
    spec: str,
    model: LoadedMILModel,
    skip_bad: bool,
    class_map: Mapping[str, str],
) -> tuple[DomainDataset, dict[str, str], list[str]]:
    """The slides of a labels CSV or a folder (``spec``: as given), the labels
    renamed, and the warnings about their encoder.

    The CSV has the columns ``slide_id`` (or ``slide``) and ``label``,
    optionally ``domain`` (default: the CSV's folder name) and ``path`` (the bag
    file, relative to the CSV; default: ``h5_files/<id>.h5``,
    ``pt_files/<id>.pt``, ``<id>.h5`` or ``<id>.pt`` beside it: CLAM's layout as
    ``fedpath features`` writes it). A folder holds such a CSV as
    ``slides.csv``, or ``<class>/`` folders of bag files."""
    reader = BagReader(model, skip_bad)
    labels = path / BAG_LABELS if path.is_dir() else path
    if labels.is_file():
        bags, names = _bag_csv(labels, reader, class_map)
    else:
        bags, names = _bag_folders(path, reader, class_map)
    if not bags:
        raise DataError(f"every bag file of {spec!r} was unreadable")
    data = BagDataset(bags, model.class_names, model.embedding_space)
    name = "bags_csv" if labels.is_file() else "bag_folders"
    ds = from_bag_dataset(name, data, 0.0, 0)
    ds.skipped = reader.skipped
    return ds, names, reader.warnings


def bag_dataset(
    name: str, data_cfg: DataConfig, model: LoadedMILModel
) -> DomainDataset:
    """Registered dataset ``name`` of slide bags of the model's feature
    dimension; a dataset of another kind is refused."""
    ds = load_dataset(data_cfg)
    store = ds.store
    if not isinstance(store, BagStore):
        raise DataError(
            f"dataset {name!r} holds {ds.kind}, but {str(model.path)!r} is a MIL "
            "model of slide bags; evaluate an image model file (model.fpm) on it"
        )
    model.check_dim(store.dim, f"dataset {name!r}")
    return ds
