"""A site's images for an image model: manifests, class folders, image files.

Images are resized exactly as the training data was
(:func:`fedpath.data.files.load_image`); folders and labels match the model's
classes by :func:`fedpath.inference.classes.resolve_classes`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from fedpath.artifact import LoadedModel
from fedpath.config import DataConfig
from fedpath.data.base import DataError, DomainDataset
from fedpath.data.files import IMAGE_SUFFIXES, image_files, load_image
from fedpath.data.inputs import subfolders
from fedpath.data.manifest import (
    FileDatasetParams,
    Records,
    add_class_folders,
    build_file_dataset,
    read_manifest,
    scan_folders,
)
from fedpath.inference.classes import MAP_SYNTAX, match_class, rename_records
from fedpath.runtime.experiment import load_dataset

Progress = Callable[[int, int], None]


def scan_class_folders(root: Path) -> Records:
    """``root/<class>/<image>`` (images at any depth below a class folder): one
    domain named after ``root``."""
    rec = Records([], [], [], [], [])
    add_class_folders(rec, root, root.name, recursive=True)
    if not rec.paths:
        raise DataError(
            f"no images under {str(root)!r}; expected <class>/<image> folders "
            f"({', '.join(IMAGE_SUFFIXES)})"
        )
    return rec


def _scan_site_folder(
    path: Path, classes: Sequence[str], class_map: Mapping[str, str]
) -> Records:
    """The records of a folder of ``<class>/`` or ``<domain>/<class>/`` folders:
    ``<class>/`` when one of its folders stands for a class of the model
    (:func:`match_class`), ``<domain>/<class>/`` when one of their subfolders
    does; else an error naming the folders seen and the classes expected."""
    subdirs = subfolders(path)  # a folder that cannot be read: named, not skipped
    if not subdirs and image_files(path, recursive=True):
        raise DataError(
            f"{str(path)!r} holds images but no class folders; use `fedpath "
            "predict` for unlabelled images, or put them in <class>/ folders"
        )
    top = [d.name for d in subdirs]
    if any(match_class(n, classes, class_map) for n in top):
        return scan_class_folders(path)
    inner = sorted({c.name for d in subdirs for c in subfolders(d)})
    if any(match_class(n, classes, class_map) for n in inner):
        return scan_folders(path)
    mapped = f"; --class-map maps {', '.join(class_map)}" if class_map else ""
    raise DataError(
        f"{str(path)!r}: no folder matches a class of the model "
        f"({', '.join(classes)}; compared case-insensitively); folders seen: "
        f"{', '.join(top) or 'none'}"
        + (f" (inside them: {', '.join(inner)})" if inner else "")
        + f"{mapped}; expected <class>/<image> or <domain>/<class>/<image> folders: "
        f"name them after the model's classes or map them with --class-map "
        f"{MAP_SYNTAX}"
    )


def open_image_files(
    path: Path, model: LoadedModel, skip_bad: bool, class_map: Mapping[str, str]
) -> tuple[DomainDataset, dict[str, str], list[str]]:
    """The images of a manifest CSV or a folder of ``<class>/`` or
    ``<domain>/<class>/`` folders at the model's input size, the class names
    renamed, and no warnings."""
    classes = model.class_names
    params = FileDatasetParams(
        image_size=model.image_size,
        zoom=model.meta.zoom,
        test_fraction=0.0,
        classes=classes,
        skip_bad=skip_bad,
    )
    if path.suffix.lower() == ".csv" and path.is_file():
        rec = read_manifest(path)
        names = rename_records(rec, classes, class_map, str(path), "labels")
        return build_file_dataset("manifest", rec, params), names, []
    rec = _scan_site_folder(path, classes, class_map)
    names = rename_records(rec, classes, class_map, str(path), "class folders")
    return build_file_dataset("folder", rec, params), names, []


def image_dataset(
    name: str, data_cfg: DataConfig, model: LoadedModel
) -> tuple[DomainDataset, DataConfig]:
    """Registered dataset ``name`` at the model's input size (when it has one to
    set) and the config it was built with; a dataset of slide bags is refused."""
    if "image_size" in data_cfg.params:
        size: dict[str, float] = {"image_size": model.image_size}
        if model.meta.zoom != 1.0 or "zoom" in data_cfg.params:
            size["zoom"] = model.meta.zoom  # the crop the model was trained on
        data_cfg = replace(data_cfg, params={**data_cfg.params, **size})
    ds = load_dataset(data_cfg)
    if ds.kind == "bags":
        raise DataError(
            f"dataset {name!r} holds slide bags, but {str(model.path)!r} is an "
            "image model; evaluate a MIL model file (models/<client>.fpm) on bags"
        )
    return ds, data_cfg


def image_batches(
    model: LoadedModel,
    target: Path,
    batch_size: int,
    skip_bad: bool,
    skipped: list[str],
    progress: Progress | None,
) -> Iterator[tuple[list[str], torch.Tensor]]:
    """Every image file of ``target`` (a file, or a folder searched
    recursively), ``batch_size`` at a time, as (paths, uint8 (B, 3, S, S)) at
    the model's input size; unreadable files fail, or are appended to
    ``skipped`` with ``skip_bad``."""
    if not target.exists():
        raise DataError(f"{str(target)!r} does not exist")
    files = [target] if target.is_file() else image_files(target, recursive=True)
    if not files:
        raise DataError(
            f"no images ({', '.join(IMAGE_SUFFIXES)}) under {str(target)!r}"
        )
    for start in range(0, len(files), batch_size):
        batch, names = [], []
        for f in files[start : start + batch_size]:
            try:
                batch.append(load_image(f, model.image_size, model.meta.zoom))
                names.append(str(f))
            except DataError as err:
                if not skip_bad:
                    raise DataError(
                        f"{err} (use --skip-bad to skip and count)"
                    ) from None
                skipped.append(str(f))
        if batch:
            yield names, torch.from_numpy(np.stack(batch))
        if progress is not None:
            progress(min(start + batch_size, len(files)), len(files))
