"""Use an exported model at a hospital that never took part: evaluate and predict.

``evaluate``: any dataset fedpath can read (a manifest CSV, a folder per class, a
folder per domain and class, or a registered dataset and domain), metrics overall
and per domain, per-class sensitivity and specificity and bootstrap confidence
intervals (:mod:`fedpath.evaluation.clinical`). ``predict``: one CSV row per image
file. Images are resized exactly as the training data was
(:func:`fedpath.data.files.load_image`). A model file's temperature scales every
probability, and its operating point (a threshold on the positive class) makes the
predictions and an ``operating_point`` block of metrics.

A site names its folders as it likes: class folders (and manifest labels) match
the model's classes case-insensitively (``Normal/`` is ``normal``), and
``--class-map FOLDER=CLASS,...`` maps other names (``Mitosis=atypical``). A
registered dataset (``synthetic:hospital_3``) is rebuilt with the data settings the
model's run used, which the model file records, so its metrics are the run's.

A MIL model file (``models/<client>.fpm`` of a slide-bag run, ``kind: mil``:
:mod:`fedpath.mil.export`) is used the same way on slide bags (``.h5`` / ``.pt``
files of patch embeddings, :func:`fedpath.mil.bags.read_bag_file`): labelled by a
CSV of ``slide_id,label[,domain][,path]`` (:func:`open_bag_data`), by
``<class>/`` folders of bag files, or a registered bag dataset
(``synthetic_bags:hospital_1``); ``predict`` writes one row per slide
(:func:`predict_bags`).
"""

from __future__ import annotations

import copy
import csv
import io
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedpath.artifact import LoadedModel
from fedpath.config import (
    ConfigError,
    DataConfig,
    load_config,
    parse_override,
)
from fedpath.data.bags import BagStore, from_bag_dataset, split_bags
from fedpath.data.base import DataError, DomainDataset, Part, Split
from fedpath.data.files import IMAGE_SUFFIXES, image_files, load_image
from fedpath.data.manifest import (
    FileDatasetParams,
    Records,
    add_class_folders,
    build_file_dataset,
    read_manifest,
    scan_folders,
)
from fedpath.evaluation.calibration import threshold_metrics
from fedpath.evaluation.clinical import bootstrap_ci, per_class_rates
from fedpath.evaluation.metrics import confusion_matrix, metrics_with_confusion
from fedpath.mil.bags import BagDataset, SlideBag, read_bag_file
from fedpath.mil.export import (
    BAG_SUFFIXES,
    LoadedMILModel,
    bag_file_encoder,
    encoder_mismatch,
    scan_bag_files,
)
from fedpath.runtime.experiment import load_dataset
from fedpath.tasks.images import predict_probs
from fedpath.utils.io import atomic_write_text

log = logging.getLogger("fedpath")

Progress = Callable[[int, int], None]

#: a model file of either kind (:func:`fedpath.artifact.load_any`)
AnyModel = LoadedModel | LoadedMILModel

#: the labels CSV ``evaluate MODEL FOLDER`` reads from a folder of bags
BAG_LABELS = "slides.csv"

#: the parts of a dataset ``evaluate --split`` scores
SPLITS: tuple[str, ...] = ("all", "test", "train")

_MAP_SYNTAX = "FOLDER=CLASS[,FOLDER=CLASS...] (e.g. Mitosis=atypical,Normal=normal)"


@dataclass
class EvalData:
    """What :func:`open_data` opened: the dataset, the domains chosen (None: all),
    and for the report how its classes were matched and where a registered
    dataset's settings came from."""

    dataset: DomainDataset
    domains: list[str] | None
    #: folder / label / dataset class -> model class, where the names differ
    renamed: dict[str, str]
    #: a registered dataset's ``name``, ``root``, ``params`` and their ``source``
    settings: dict[str, Any] | None = None
    #: slide bags made by another encoder than the model's (their files say so)
    warnings: list[str] = field(default_factory=list)


def parse_class_map(text: str | None, classes: Sequence[str]) -> dict[str, str]:
    """``--class-map`` (:data:`_MAP_SYNTAX`) -> {folder or label: model class}.

    A class may be named in any case (it becomes the model's spelling); several
    folders may map to one class. Errors name the option and the bad entry."""
    if text is None:
        return {}
    out: dict[str, str] = {}
    by_fold = {c.casefold(): c for c in classes}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        key, sep, value = (s.strip() for s in entry.partition("="))
        if not sep or not key or not value:
            raise ConfigError(
                f"--class-map: entry {entry!r} is not FOLDER=CLASS; expected "
                f"{_MAP_SYNTAX}"
            )
        if key in out:
            raise ConfigError(f"--class-map: {key!r} is mapped twice")
        cls = value if value in classes else by_fold.get(value.casefold())
        if cls is None:
            raise ConfigError(
                f"--class-map: {entry!r} maps to {value!r}, which is not a class of "
                f"the model; its classes: {', '.join(classes)}"
            )
        out[key] = cls
    if not out:
        raise ConfigError(f"--class-map: no FOLDER=CLASS entry; expected {_MAP_SYNTAX}")
    return out


def _match(
    name: str, classes: Sequence[str], class_map: Mapping[str, str]
) -> str | None:
    """The model class ``name`` stands for: by ``class_map`` (its key in any
    case), else the class of the same name, else of the same name in another case;
    None: none."""
    if name in class_map:
        return class_map[name]
    folded = name.casefold()
    mapped = [v for k, v in class_map.items() if k.casefold() == folded]
    if mapped:
        return mapped[0]
    if name in classes:
        return name
    same = [c for c in classes if c.casefold() == folded]
    return same[0] if len(same) == 1 else None


def resolve_classes(
    names: Sequence[str],
    classes: Sequence[str],
    class_map: Mapping[str, str],
    where: str,
    what: str = "class folders",
) -> dict[str, str]:
    """{name: model class} for every one of ``names`` (folders, labels or a
    dataset's classes) by :func:`_match`; a name that matches no class, or a
    ``class_map`` entry that names none of ``names``, is an error that lists the
    names seen and the classes expected."""
    out: dict[str, str] = {}
    unknown: list[str] = []
    for name in names:
        cls = _match(name, classes, class_map)
        if cls is None:
            unknown.append(name)
        else:
            out[name] = cls
    seen = ", ".join(sorted(names)) or "none"
    folded = {n.casefold() for n in names}
    unused = [k for k in class_map if k.casefold() not in folded]
    if unused:
        raise ConfigError(
            f"--class-map: {unused} name(s) none of the {what} of {where}; {what} "
            f"seen: {seen}"
        )
    if unknown:
        raise DataError(
            f"{where}: {what} {unknown} are not classes of the model {list(classes)} "
            f"(compared case-insensitively); {what} seen: {seen}; rename them or "
            f"map them to the model's classes with --class-map {unknown[0]}=CLASS"
            f"{',...' if len(unknown) > 1 else ''} ({_MAP_SYNTAX})"
        )
    return out


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
    (:func:`_match`), ``<domain>/<class>/`` when one of their subfolders does;
    else an error naming the folders seen and the classes expected."""
    subdirs = sorted(d for d in path.iterdir() if d.is_dir())
    if not subdirs and image_files(path, recursive=True):
        raise DataError(
            f"{str(path)!r} holds images but no class folders; use `fedpath "
            "predict` for unlabelled images, or put them in <class>/ folders"
        )
    top = [d.name for d in subdirs]
    if any(_match(n, classes, class_map) for n in top):
        return scan_class_folders(path)
    inner = sorted({c.name for d in subdirs for c in d.iterdir() if c.is_dir()})
    if any(_match(n, classes, class_map) for n in inner):
        return scan_folders(path)
    mapped = f"; --class-map maps {', '.join(class_map)}" if class_map else ""
    raise DataError(
        f"{str(path)!r}: no folder matches a class of the model "
        f"({', '.join(classes)}; compared case-insensitively); folders seen: "
        f"{', '.join(top) or 'none'}"
        + (f" (inside them: {', '.join(inner)})" if inner else "")
        + f"{mapped}; expected <class>/<image> or <domain>/<class>/<image> folders: "
        f"name them after the model's classes or map them with --class-map "
        f"{_MAP_SYNTAX}"
    )


def _data_settings(
    name: str,
    model: AnyModel,
    config: Path | None,
    overrides: Sequence[str],
) -> tuple[DataConfig, str]:
    """The data config of registered dataset ``name`` and where it came from.

    Without ``config``, a model whose file records its run's data settings (same
    dataset) is evaluated on them, with the ``data.*`` keys of ``overrides`` on
    top: ``synthetic:hospital_3`` is the run's hospital, not the defaults'. Else
    ``config`` (or the dataset's defaults) and ``overrides``."""
    user = load_config(config, [f"data.name={name}", *overrides]).data
    run = model.meta.data
    if config is not None or not run or run.get("name") != name:
        if config is not None:
            source = f"--config {config} and the overrides"
        elif run:
            source = (
                f"the defaults of {name!r} and the overrides (the model's run used "
                f"dataset {run.get('name')!r})"
            )
        else:
            source = (
                f"the defaults of {name!r} and the overrides (the model file records "
                "no data settings of its run; pass them as data.params.KEY=VALUE)"
            )
        return user, source
    given = [parse_override(o)[0] for o in overrides]
    params = dict(run.get("params") or {})
    for key, value in user.params.items():
        if any(
            g == f"data.params.{key}" or g.startswith(f"data.params.{key}.")
            for g in given
        ):
            params[key] = value
    root = user.root if "data.root" in given else run.get("root")
    changed = [g for g in given if g.startswith("data.")]
    source = "the model's run" + (f", with {', '.join(changed)}" if changed else "")
    return DataConfig(name=name, root=root, params=params), source


def open_data(
    spec: str,
    model: AnyModel,
    config: Path | None = None,
    overrides: Sequence[str] = (),
    skip_bad: bool = False,
    class_map: Mapping[str, str] | None = None,
    split: str = "all",
) -> EvalData:
    """The dataset named by ``spec`` at the model's input size, and its domains.

    ``spec``: a manifest CSV; a folder of ``<class>/`` or ``<domain>/<class>/``
    folders; or ``NAME:DOMAIN[,DOMAIN...]`` / ``NAME`` for a registered dataset,
    configured by the model's run (:func:`_data_settings`), ``config`` (an
    experiment YAML) and ``overrides``. Class names are matched by
    :func:`resolve_classes` with ``class_map``. ``split`` (``all``, ``test``,
    ``train``) is checked here: only a registered dataset has train/test parts.
    A MIL model opens slide bags instead (:func:`open_bag_data`).
    """
    if split not in SPLITS:
        raise ConfigError(
            f"--split: expected one of {', '.join(SPLITS)}, got {split!r}"
        )
    if isinstance(model, LoadedMILModel):
        return open_bag_data(spec, model, config, overrides, skip_bad, class_map, split)
    cmap = dict(class_map or {})
    classes = model.class_names
    path = Path(spec)
    params = FileDatasetParams(
        image_size=model.image_size,
        test_fraction=0.0,
        classes=classes,
        skip_bad=skip_bad,
    )
    is_file_data = (path.suffix.lower() == ".csv" and path.is_file()) or path.is_dir()
    if is_file_data and split != "all":
        raise ConfigError(
            f"--split {split}: {spec!r} is a folder or manifest, which has no "
            "train/test split (every image is scored); use --split all, or "
            "NAME:DOMAIN with --split test for a registered dataset"
        )
    if path.suffix.lower() == ".csv" and path.is_file():
        rec = read_manifest(path)
        renamed = _rename(rec, classes, cmap, str(path), "labels")
        return EvalData(build_file_dataset("manifest", rec, params), None, renamed)
    if path.is_dir():
        rec = _scan_site_folder(path, classes, cmap)
        renamed = _rename(rec, classes, cmap, str(path), "class folders")
        return EvalData(build_file_dataset("folder", rec, params), None, renamed)
    if path.exists():
        raise DataError(f"{spec!r}: expected a manifest .csv file or a folder")
    name, _, domains = spec.partition(":")
    data_cfg, source = _data_settings(name, model, config, overrides)
    if "image_size" in data_cfg.params:
        data_cfg = replace(
            data_cfg, params={**data_cfg.params, "image_size": model.image_size}
        )
    ds = load_dataset(data_cfg)
    if ds.kind == "bags":
        raise DataError(
            f"dataset {name!r} holds slide bags, but {str(model.path)!r} is an "
            "image model; evaluate a MIL model file (models/<client>.fpm) on bags"
        )
    return _registered(ds, domains, classes, cmap, data_cfg, source)


def _registered(
    ds: DomainDataset,
    domains: str,
    classes: Sequence[str],
    cmap: Mapping[str, str],
    data_cfg: DataConfig,
    source: str,
) -> EvalData:
    """A registered dataset ``ds`` with its classes matched to the model's, its
    ``domains`` (``a,b``; empty: all) checked, and the settings it was built
    with."""
    mapping = resolve_classes(
        ds.classes, classes, cmap, f"dataset {data_cfg.name!r}", "dataset classes"
    )
    if _renamed(mapping):  # a copy: registered datasets may be cached, shared
        ds = copy.copy(ds)
        ds.classes = [mapping[c] for c in ds.classes]
    chosen = [d for d in domains.split(",") if d] or None
    for d in chosen or []:
        ds.check_domain(d)
    settings = {
        "name": data_cfg.name,
        "root": data_cfg.root,
        "params": dict(data_cfg.params),
        "source": source,
    }
    return EvalData(ds, chosen, _renamed(mapping), settings)


def _renamed(mapping: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in mapping.items() if k != v}


def _rename(
    rec: Records,
    classes: Sequence[str],
    class_map: Mapping[str, str],
    where: str,
    what: str,
) -> dict[str, str]:
    """Relabel ``rec`` with the model's class names (:func:`resolve_classes`);
    return the names that changed."""
    mapping = resolve_classes(sorted(set(rec.labels)), classes, class_map, where, what)
    rec.labels = [mapping[label] for label in rec.labels]
    return _renamed(mapping)


class _BagReader:
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


def _bag_csv(
    path: Path, reader: _BagReader, class_map: Mapping[str, str]
) -> tuple[list[SlideBag], dict[str, str]]:
    """The slides of a labels CSV (:func:`open_bag_data`) and the labels renamed."""
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
    base = path.parent
    bags: list[SlideBag] = []
    for line, row in enumerate(rows, start=2):
        sid = row[sid_col].strip()
        given = (row.get("path") or "").strip()
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
        read = reader.read(found)
        if read is None:
            continue
        domain = (row.get("domain") or "").strip() or base.name
        label = classes.index(mapping[row["label"].strip()])
        bags.append(SlideBag(sid, read[0], label, domain, read[1]))
    return bags, _renamed(mapping)


def _bag_folders(
    root: Path, reader: _BagReader, class_map: Mapping[str, str]
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
    return bags, _renamed(mapping)


def open_bag_data(
    spec: str,
    model: LoadedMILModel,
    config: Path | None = None,
    overrides: Sequence[str] = (),
    skip_bad: bool = False,
    class_map: Mapping[str, str] | None = None,
    split: str = "all",
) -> EvalData:
    """The slide bags named by ``spec`` for a MIL model, and their domains.

    ``spec``: a labels CSV with the columns ``slide_id`` (or ``slide``) and
    ``label``, optionally ``domain`` (default: the CSV's folder name) and
    ``path`` (the bag file, relative to the CSV; default: ``h5_files/<id>.h5``,
    ``pt_files/<id>.pt``, ``<id>.h5`` or ``<id>.pt`` beside it: CLAM's layout as
    ``fedpath features`` writes it); a folder holding such a CSV as
    ``slides.csv``; a folder of ``<class>/`` folders of bag files; or
    ``NAME:DOMAIN[,DOMAIN...]`` for a registered bag dataset, configured like an
    image dataset's (:func:`_data_settings`: the model's run by default).
    Labels and folders match the model's classes by :func:`resolve_classes`.
    """
    cmap = dict(class_map or {})
    path = Path(spec)
    is_file_data = (path.suffix.lower() == ".csv" and path.is_file()) or path.is_dir()
    if is_file_data and split != "all":
        raise ConfigError(
            f"--split {split}: {spec!r} is a folder or labels CSV, which has no "
            "train/test split (every slide is scored); use --split all, or "
            "NAME:DOMAIN with --split test for a registered dataset"
        )
    if is_file_data:
        reader = _BagReader(model, skip_bad)
        labels = path / BAG_LABELS if path.is_dir() else path
        if labels.is_file():
            bags, renamed = _bag_csv(labels, reader, cmap)
        else:
            bags, renamed = _bag_folders(path, reader, cmap)
        if not bags:
            raise DataError(f"every bag file of {spec!r} was unreadable")
        data = BagDataset(bags, model.class_names, model.embedding_space)
        name = "bags_csv" if labels.is_file() else "bag_folders"
        ds = from_bag_dataset(name, data, 0.0, 0)
        ds.skipped = reader.skipped
        return EvalData(ds, None, renamed, warnings=reader.warnings)
    if path.exists():
        raise DataError(f"{spec!r}: expected a labels .csv file or a folder")
    name, _, domains = spec.partition(":")
    data_cfg, source = _data_settings(name, model, config, overrides)
    ds = load_dataset(data_cfg)
    store = ds.store
    if not isinstance(store, BagStore):
        raise DataError(
            f"dataset {name!r} holds {ds.kind}, but {str(model.path)!r} is a MIL "
            "model of slide bags; evaluate an image model file (model.fpm) on it"
        )
    model.check_dim(store.dim, f"dataset {name!r}")
    return _registered(ds, domains, model.class_names, cmap, data_cfg, source)


def evaluate(
    model: AnyModel,
    ds: DomainDataset,
    domains: Sequence[str] | None = None,
    per_domain: bool = False,
    batch_size: int = 256,
    split: str = "all",
    bootstrap: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """The metrics of :func:`~fedpath.evaluation.metrics.metrics_with_confusion`
    (``confusion``: rows true, columns predicted, in the order of ``classes``),
    overall and per domain, of the model's (temperature-scaled) probabilities and
    argmax on the ``split`` part (``all``, ``test``, ``train``) of ``domains``.

    Each report also holds ``per_class`` (``n``, ``sensitivity``,
    ``specificity`` one-vs-rest: :func:`~fedpath.evaluation.clinical.
    per_class_rates`) and, unless ``bootstrap`` is 0, ``bootstrap``: 95%
    intervals of ``balanced_accuracy`` and ``auroc`` over ``bootstrap``
    resamples of the images, seeded by ``seed``
    (:func:`~fedpath.evaluation.clinical.bootstrap_ci`). With an operating point
    also ``operating_point``: the metrics at its threshold (with ``sensitivity``,
    ``specificity`` and that decision's ``confusion``). A MIL model scores the
    slides of a bag dataset the same way, one slide per sample
    (:meth:`~fedpath.mil.export.LoadedMILModel.predict_proba`)."""
    if bootstrap < 0:
        raise ConfigError(
            f"--bootstrap: expected 0 (off) or more resamples, got {bootstrap}"
        )
    if split not in SPLITS:
        raise ConfigError(
            f"--split: expected one of {', '.join(SPLITS)}, got {split!r}"
        )
    part: Part = "test" if split == "test" else ("train" if split == "train" else "all")
    chosen = list(domains) if domains else list(ds.domains)
    parts = [s for s in (ds.split(d, part) for d in chosen) if len(s)]
    unit = "slides" if isinstance(model, LoadedMILModel) else "images"
    if not parts:
        raise DataError(
            f"--split {split}: dataset {ds.name!r} has no {split} {unit} in "
            f"{', '.join(chosen)}"
        )
    data = Split.concat(parts)
    # map the dataset's class indices onto the model's
    remap = np.array([model.class_names.index(c) for c in ds.classes])
    labels = remap[data.labels]
    if isinstance(model, LoadedMILModel):
        probs = model.predict_proba(split_bags(data))
    else:
        cpu = torch.device("cpu")
        raw = predict_probs(model.model, data, batch_size, cpu, model.meta.tta)
        probs = model.calibrate(raw.numpy())
    classes = model.class_names

    def report(m: np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = {"n": int(m.sum())}
        out.update(metrics_with_confusion(labels[m], probs[m]))
        out["per_class"] = per_class_rates(np.asarray(out["confusion"]), classes)
        if bootstrap:
            out["bootstrap"] = bootstrap_ci(labels[m], probs[m], None, bootstrap, seed)
        t = model.meta.threshold
        if t is not None:
            op = threshold_metrics(labels[m], probs[m], t)
            cm = confusion_matrix(labels[m], model.decide(probs[m]), 2)
            out["operating_point"] = {**op, "confusion": cm.tolist()}
        return out

    out: dict[str, Any] = {"classes": classes, "split": split}
    out.update(report(np.ones(len(data), dtype=bool)))
    if model.meta.temperature is not None:
        out["temperature"] = model.meta.temperature
    if per_domain:
        present = [d for d in chosen if np.any(data.domains == d)]
        out["per_domain"] = {d: report(data.domains == d) for d in present}
    return out


def _image_batches(
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
                batch.append(load_image(f, model.image_size))
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


def adapt_model_file(
    model: LoadedModel,
    images: Path,
    out: Path,
    batch_size: int = 64,
    skip_bad: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write ``out``: ``model`` with its BatchNorm statistics re-estimated on the
    unlabelled images under ``images`` (AdaBN, :mod:`fedpath.tasks.adapt`; any
    folder layout, labels are never read), recorded in the file's
    ``adapted_bn``. Every other weight, the temperature, the threshold and the
    test-time augmentation stay as they were."""
    import hashlib
    import time

    from fedpath.artifact import save_model
    from fedpath.tasks.adapt import adapt_batchnorm

    if model.path is not None and out.resolve() == model.path.resolve():
        raise DataError(
            f"--out {str(out)!r} is the model file itself; write the adapted "
            "model to a new file (the federation's model stays as it is)"
        )
    net = copy.deepcopy(model.model)
    skipped: list[str] = []
    batches = _image_batches(model, images, batch_size, skip_bad, skipped, progress)
    try:
        n = adapt_batchnorm(net, (model.to_tensor(x) for _, x in batches))
    except ValueError as err:
        raise DataError(f"model file {str(model.path)!r}: {err}") from None
    source = hashlib.sha256(model.path.read_bytes()).hexdigest() if model.path else ""
    meta = replace(
        model.meta,
        adapted_bn={
            "images": n,
            "folder": images.resolve().name,
            "from_sha256": source,
            "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    )
    save_model(out, net, meta)
    return {"images": n, "skipped": skipped}


def predict_files(
    model: LoadedModel,
    target: Path,
    out: Path,
    batch_size: int = 64,
    skip_bad: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write ``out`` (CSV: path, predicted, prob_<class>...) for every image:
    ``predicted`` by the model's operating point when it has one, else the argmax;
    the (temperature-scaled) probabilities."""
    rows: list[list[str]] = []
    skipped: list[str] = []
    for names, batch in _image_batches(
        model, target, batch_size, skip_bad, skipped, progress
    ):
        probs = model.predict_proba(batch)
        decided = model.decide(probs)
        for name, p, c in zip(names, probs, decided, strict=True):
            rows.append([name, model.class_names[c], *(f"{v:.6f}" for v in p)])
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["path", "predicted", *(f"prob_{c}" for c in model.class_names)])
    writer.writerows(rows)
    if not rows:
        raise DataError(f"every image under {str(target)!r} was unreadable")
    atomic_write_text(out, buf.getvalue())
    return {"images": len(rows), "skipped": skipped}


def predict_bags(
    model: LoadedMILModel,
    target: Path,
    out: Path,
    skip_bad: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Write ``out`` (CSV: slide, path, predicted, prob_<class>...) for every bag
    file (``.h5``, ``.pt``) of ``target`` (a bag file, or a folder searched at
    any depth; of a CLAM ``h5_files``/``pt_files`` pair only the ``.h5``):
    ``slide`` is the file's stem, ``predicted`` the argmax, the probabilities at
    full precision (``repr``: they read back as the same floats). A bag of
    another feature dimension than the model's is an error naming it."""
    if not target.exists():
        raise DataError(f"{str(target)!r} does not exist")
    if target.is_file() and target.suffix not in BAG_SUFFIXES:
        raise DataError(
            f"{str(target)!r} is not a bag file ({', '.join(BAG_SUFFIXES)}); the "
            f"model {str(model.path)!r} is a MIL model of slide bags"
        )
    files = [target] if target.is_file() else scan_bag_files(target)
    if not files:
        raise DataError(
            f"no bag files ({', '.join(BAG_SUFFIXES)}) under {str(target)!r}"
        )
    reader = _BagReader(model, skip_bad)
    rows: list[list[str]] = []
    for i, f in enumerate(files):
        read = reader.read(f)
        if read is not None:
            bag = SlideBag(f.stem, read[0], 0, "", read[1])
            probs = model.predict_proba([bag])
            c = int(model.decide(probs)[0])
            rows.append(
                [
                    f.stem,
                    str(f),
                    model.class_names[c],
                    *(repr(float(v)) for v in probs[0]),
                ]
            )
        if progress is not None:
            progress(i + 1, len(files))
    if not rows:
        raise DataError(f"every bag file under {str(target)!r} was unreadable")
    buf = io.StringIO()
    writer = csv.writer(buf)
    header = ["slide", "path", "predicted", *(f"prob_{c}" for c in model.class_names)]
    writer.writerow(header)
    writer.writerows(rows)
    atomic_write_text(out, buf.getvalue())
    return {"slides": len(rows), "skipped": reader.skipped, "warnings": reader.warnings}
