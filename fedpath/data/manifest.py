"""Datasets listed in a manifest CSV, or laid out one folder per domain and class.

``manifest``: a CSV with columns ``path, label, domain`` and optionally ``slide``
(paths relative to the CSV's folder unless absolute). Crops of one slide never land
in both train and test: the split is by slide (by image when there is no slide
column). The real AMi-Br crops load this way::

    data: {name: manifest, root: /path/to/amibr, params: {path: manifest.csv}}

``folder``: ``root/<domain>/<class>/<image>``, every image its own group.

Bad input never passes silently: a missing column or a listed image that is absent
or unreadable fails naming the file and row; with ``skip_bad: true`` such rows are
skipped, counted and reported in the log. One image listed twice (in one domain, or
in a training and the held-out domain) is an error naming both rows, never skipped
(:func:`check_unique_images`); a manifest must be UTF-8, and errors never quote
its content.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedpath.config import WHERE_TO_GET, ConfigError
from fedpath.data.base import (
    DATASETS,
    DataError,
    DomainDataset,
    ImageStore,
    TensorStore,
    assign_test_split,
)
from fedpath.data.files import IMAGE_SUFFIXES, FileStore, image_files, load_image
from fedpath.data.inputs import read_text, subfolders
from fedpath.losses.soft_targets import from_agreement
from fedpath.params.data import FileDatasetParams

log = logging.getLogger("fedpath")

REQUIRED = ("path", "label", "domain")


@dataclass
class Records:
    """Parallel lists describing the images of a file dataset (before decoding)."""

    paths: list[Path]
    labels: list[str]
    domains: list[str]
    slides: list[str]
    where: list[str]  # "file:row" of each record, for error messages
    #: each record's share of annotators agreeing with its label
    #: (``data.params.agreement``); None: not read
    agreement: list[float] | None = None


def read_manifest(csv_path: Path, agreement: str | None = None) -> Records:
    """Parse a manifest CSV; errors name the file, the row and the missing field.

    Errors never quote the file's content (not even its header: the path may
    name any file, and the message may travel from a hospital's node to the
    coordinator); they name the columns expected and how many were found.
    """
    if not csv_path.exists():
        raise DataError(
            f"manifest {str(csv_path)!r} does not exist (data.root + "
            f"data.params.path); {WHERE_TO_GET}"
        )
    reader = csv.reader(io.StringIO(read_text(csv_path, "manifest"), newline=""))
    try:
        rec = _records(csv_path, reader, agreement)
    except csv.Error as err:  # its messages quote no content (NUL, field limit)
        raise DataError(
            f"manifest {str(csv_path)!r}:{reader.line_num}: not valid CSV ({err}); "
            f"expected columns {', '.join(REQUIRED)} (+ optional slide)"
        ) from None
    if not rec.paths:
        raise DataError(f"manifest {str(csv_path)!r} lists no images")
    return rec


def _records(
    csv_path: Path, reader: Iterator[list[str]], agreement: str | None = None
) -> Records:
    header = [c.strip() for c in next(reader, [])]
    wanted = (*REQUIRED, "slide", *([agreement] if agreement else []))
    col = {c: header.index(c) for c in wanted if c in header}
    if agreement and agreement not in col:
        raise DataError(
            f"manifest {str(csv_path)!r} has no column {agreement!r} "
            "(data.params.agreement: the column holding each row's share of "
            "annotators agreeing with its label)"
        )
    missing = [c for c in REQUIRED if c not in col]
    twice = [c for c in col if header.count(c) > 1]
    if missing or twice:
        raise DataError(
            f"manifest {str(csv_path)!r}: expected a CSV whose first line names the "
            f"columns {', '.join(REQUIRED)} (+ optional slide); found "
            f"{len(header)} column(s), "
            + (f"lacking {', '.join(missing)}" if missing else f"{twice} twice")
        )
    rec = Records([], [], [], [], [], [] if agreement else None)
    for row in reader:
        line = getattr(reader, "line_num", 0)
        if not any(cell.strip() for cell in row):
            continue  # a blank line
        get = {c: (row[i] if i < len(row) else "").strip() for c, i in col.items()}
        empty = [c for c in REQUIRED if not get[c]]
        if empty:
            raise DataError(f"{csv_path}:{line}: empty field(s) {empty}")
        if "\0" in get["path"]:
            raise DataError(f"{csv_path}:{line}: the path holds a NUL character")
        p = Path(get["path"])
        rec.paths.append(p if p.is_absolute() else csv_path.parent / p)
        rec.labels.append(get["label"])
        rec.domains.append(get["domain"])
        slide = get.get("slide", "")
        rec.slides.append(f"{get['domain']}/{slide}" if slide else get["path"])
        rec.where.append(f"{csv_path}:{line}")
        if agreement and rec.agreement is not None:
            where = f"{csv_path}:{line}"
            rec.agreement.append(_share(get[agreement], where, agreement))
    return rec


def _share(text: str, where: str, column: str) -> float:
    """A share of annotators agreeing with a label: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= 1.0:
        raise DataError(
            f"{where}: column {column!r} (data.params.agreement) is {text!r}; "
            "expected the share of annotators agreeing with the label, in (0, 1]"
        )
    return value


def add_class_folders(
    rec: Records, parent: Path, domain: str, *, recursive: bool = False
) -> None:
    """Append ``parent/<class>/<image>`` to ``rec``: label ``<class>``, domain
    ``domain``, every image its own slide. Classes and images in sorted order
    (deterministic); ``recursive``: images in subfolders of a class folder too.
    A folder that cannot be read is a DataError naming it."""
    for cls in subfolders(parent):
        for img in image_files(cls, recursive):
            rec.paths.append(img)
            rec.labels.append(cls.name)
            rec.domains.append(domain)
            rec.slides.append(str(img))
            rec.where.append(str(img))


def scan_folders(root: Path) -> Records:
    """``root/<domain>/<class>/<image>`` -> records (sorted, deterministic)."""
    if not root.is_dir():
        raise DataError(f"data.root {str(root)!r} is not a directory; {WHERE_TO_GET}")
    rec = Records([], [], [], [], [])
    for domain in subfolders(root, "data.root"):
        add_class_folders(rec, domain, domain.name)
    if not rec.paths:
        raise DataError(
            f"no images under {str(root)!r}; expected root/<domain>/<class>/<image> "
            f"with suffixes {', '.join(IMAGE_SUFFIXES)}"
        )
    return rec


def check_unique_images(rec: Records, keep: np.ndarray) -> None:
    """A DataError when two records of ``keep`` are one image (the same resolved
    path: symlinks and ``..`` followed): in one domain it would be trained and
    scored twice, in two a training domain would leak into the held-out one.

    A copy of a file under another name is not detected: that takes hashing
    every byte of every image, too slow to do on every run.
    """
    first: dict[str, int] = {}
    folders: dict[str, str] = {}  # resolved once per folder: one lstat per image
    for i in keep.tolist():
        folder, name = os.path.split(os.fspath(rec.paths[i]))
        if folder not in folders:
            folders[folder] = os.path.realpath(folder)
        image = os.path.join(folders[folder], name)
        if os.path.islink(image):
            image = os.path.realpath(image)
        j = first.setdefault(image, i)
        if j == i:
            continue
        if rec.domains[i] == rec.domains[j]:
            raise DataError(
                f"{rec.where[j]} and {rec.where[i]} list the same image {image!r} "
                f"(domain {rec.domains[i]!r}); remove one: a duplicate is trained "
                "and scored twice"
            )
        raise DataError(
            f"image {image!r} is listed under domain {rec.domains[j]!r} "
            f"({rec.where[j]}) and domain {rec.domains[i]!r} ({rec.where[i]}): an "
            "image in two domains leaks between training and the held-out domain; "
            "keep it in one"
        )


def build_file_dataset(
    name: str, rec: Records, p: FileDatasetParams, is_test: np.ndarray | None = None
) -> DomainDataset:
    """Validate records, decode or index the images, and split by slide.

    ``is_test``: a fixed test assignment per record (an official split) instead of
    the per-domain split by slide.
    """
    keep, classes = _selected(rec, p)
    check_unique_images(rec, keep)
    kept, images, skipped = _readable(name, rec, keep, p)
    present = {rec.labels[i] for i in kept}
    absent = [c for c in classes if c not in present]
    if absent:
        raise DataError(
            f"{name}: class(es) {absent} of data.params.classes have no image"
            f"{' left after skip_bad' if skipped else ''}; drop them from "
            "data.params.classes (an empty class would count as a zero in macro "
            "metrics)"
        )
    idx = np.asarray(kept)
    domains = np.array([rec.domains[i] for i in idx])
    slides = np.array([rec.slides[i] for i in idx])
    labels = np.array([classes.index(rec.labels[i]) for i in idx])
    store: ImageStore = (
        TensorStore(torch.from_numpy(np.stack(images)))
        if p.in_memory
        else FileStore(
            [rec.paths[i] for i in idx],
            p.image_size,
            p.workers,
            [rec.where[i] for i in idx],
            p.zoom,
        )
    )
    test = (
        np.asarray(is_test, dtype=bool)[idx]
        if is_test is not None
        else assign_test_split(domains, slides, p.test_fraction, p.seed)
    )
    if p.agreement is not None:
        if rec.agreement is None:
            raise ConfigError(
                f"config key 'data.params.agreement': dataset {name!r} has no "
                "annotator agreement to read; only a manifest names the column"
            )
        share = np.array([rec.agreement[i] for i in idx])
        store.soft_targets = from_agreement(labels, share, len(classes))
    order = p.domains or list(dict.fromkeys(domains.tolist()))
    ds = DomainDataset(name, store, classes, labels, domains, slides, test, order)
    ds.skipped = skipped
    return ds


def _selected(rec: Records, p: FileDatasetParams) -> tuple[np.ndarray, list[str]]:
    """The records of the configured domains, and the classes; a domain that is
    not in the data or a label outside the classes fails naming it."""
    keep = np.arange(len(rec.paths))
    if p.domains is not None:
        unknown = sorted(set(p.domains) - set(rec.domains))
        if unknown:
            raise ConfigError(
                f"config key 'data.params.domains': {unknown} not in the data; "
                f"found {sorted(set(rec.domains))}"
            )
        keep = np.array(
            [i for i in keep if rec.domains[i] in p.domains], dtype=np.int64
        )
    classes = list(p.classes) if p.classes is not None else sorted(set(rec.labels))
    bad_label = [i for i in keep if rec.labels[i] not in classes]
    if bad_label:
        i = bad_label[0]
        raise DataError(
            f"{rec.where[i]}: label {rec.labels[i]!r} is not one of the classes "
            f"{classes} (data.params.classes)"
        )
    return keep, classes


def _readable(
    name: str, rec: Records, keep: np.ndarray, p: FileDatasetParams
) -> tuple[list[int], list[np.ndarray], list[str]]:
    """The records of ``keep`` whose image can be used, their decoded images (in
    memory only) and the skipped rows' messages.

    A missing or unreadable image fails naming its row, or with ``skip_bad`` is
    skipped, counted and logged.
    """
    skipped: list[str] = []
    kept: list[int] = []
    images: list[np.ndarray] = []
    # in memory: decode everything now; lazily with skip_bad: decode (and drop)
    # every image once now, so a bad one is skipped here, not met mid-training
    check = p.in_memory or p.skip_bad
    decoded = (
        _decode_all([rec.paths[i] for i in keep], p, keep=p.in_memory)
        if check
        else None
    )
    for j, i in enumerate(keep):
        try:
            if decoded is not None:
                result = decoded[j]
                if isinstance(result, DataError):
                    raise result
                if result is not None:
                    images.append(result)
            elif not rec.paths[i].is_file():
                raise DataError(f"image file {str(rec.paths[i])!r} does not exist")
        except DataError as err:
            if not p.skip_bad:
                raise DataError(
                    f"{rec.where[i]}: {err}; set data.params.skip_bad=true to skip and "
                    "count such rows"
                ) from None
            skipped.append(f"{rec.where[i]}: {err}")
            continue
        kept.append(int(i))
    if skipped:
        log.warning(
            "%s: skipped %d unreadable or missing images (skip_bad): %s%s",
            name,
            len(skipped),
            "; ".join(skipped[:3]),
            " ..." if len(skipped) > 3 else "",
        )
    if not kept:
        raise DataError(f"{name}: no readable images left")
    return kept, images, skipped


def _decode_all(
    paths: Sequence[Path], p: FileDatasetParams, keep: bool = True
) -> list[np.ndarray | DataError | None]:
    """Decode every image in threads; failures are returned, not raised;
    ``keep=False``: only check them (None for a good one, nothing held)."""

    def one(path: Path) -> np.ndarray | DataError | None:
        try:
            image = load_image(path, p.image_size, p.zoom)
        except DataError as err:
            return err
        return image if keep else None

    with ThreadPoolExecutor(max(1, p.workers)) as pool:
        return list(pool.map(one, paths))


def _root(root: str | None, what: str) -> Path:
    if root is None:
        raise ConfigError(
            f"data.root: dataset {what!r} needs data.root (a directory): pass "
            f"data.root=/path/to/data; {WHERE_TO_GET}"
        )
    return Path(root).expanduser()


@DATASETS.register("manifest", params=FileDatasetParams)
def manifest_dataset(params: FileDatasetParams, root: str | None) -> DomainDataset:
    """Images listed in a CSV (path, label, domain[, slide]); split by slide."""
    csv_path = Path(params.path)
    if not csv_path.is_absolute():
        csv_path = _root(root, "manifest") / csv_path
    rec = read_manifest(csv_path, params.agreement)
    return build_file_dataset("manifest", rec, params)


@DATASETS.register("folder", params=FileDatasetParams)
def folder_dataset(params: FileDatasetParams, root: str | None) -> DomainDataset:
    """Images in root/<domain>/<class>/ folders."""
    return build_file_dataset("folder", scan_folders(_root(root, "folder")), params)
