"""The one data opener: a site's data for a model file of either kind.

:func:`open_data` reads what ``fedpath evaluate`` is given (a manifest or labels
CSV, a folder, or a registered dataset and its domains) for the model it scores:
images for an image model (:mod:`fedpath.inference.images`), slide bags for a
MIL model (:mod:`fedpath.inference.bags`). A registered dataset
(``synthetic:hospital_3``, ``synthetic_bags:hospital_1``) is rebuilt with the data
settings the model's run used, which the model file records, so its metrics are
the run's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpath.artifact import LoadedModel
from fedpath.config import ConfigError, DataConfig, load_config, parse_override
from fedpath.data.base import DataError, DomainDataset
from fedpath.inference.bags import bag_dataset, open_bag_files
from fedpath.inference.classes import renamed, resolve_classes
from fedpath.inference.images import image_dataset, open_image_files
from fedpath.mil.export import LoadedMILModel

#: a model file of either kind (:func:`fedpath.loading.load_model`)
AnyModel = LoadedModel | LoadedMILModel

#: the parts of a dataset ``evaluate --split`` scores
SPLITS: tuple[str, ...] = ("all", "test", "train")

#: what a site's CSV is called for each kind of model: in the ``--split`` error,
#: and in the error for a path that is neither a CSV nor a folder
_SITE_CSV: dict[str, tuple[str, str]] = {
    "image": ("manifest", "manifest"),
    "mil": ("labels CSV", "labels"),
}


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


def check_split(split: str) -> None:
    """Refuse an ``evaluate --split`` that is none of :data:`SPLITS`."""
    if split not in SPLITS:
        raise ConfigError(
            f"--split: expected one of {', '.join(SPLITS)}, got {split!r}"
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
    """The data named by ``spec`` for ``model`` (images at its input size, or
    slide bags of its feature dimension, by the model's kind), and its domains.

    ``spec``: a CSV (an image manifest; for a MIL model a labels CSV,
    :func:`fedpath.inference.bags.open_bag_files`); a folder (of ``<class>/`` or
    ``<domain>/<class>/`` image folders; of ``<class>/`` bag folders or with a
    ``slides.csv``); or ``NAME:DOMAIN[,DOMAIN...]`` / ``NAME`` for a registered
    dataset, configured by the model's run (:func:`_data_settings`), ``config``
    (an experiment YAML) and ``overrides``. Class names are matched by
    :func:`~fedpath.inference.classes.resolve_classes` with ``class_map``.
    ``split`` (``all``, ``test``, ``train``) is checked here: only a registered
    dataset has train/test parts.
    """
    check_split(split)
    cmap = dict(class_map or {})
    path = Path(spec)
    csv_name, csv_file = _SITE_CSV[model.kind]
    if (path.suffix.lower() == ".csv" and path.is_file()) or path.is_dir():
        if split != "all":
            raise ConfigError(
                f"--split {split}: {spec!r} is a folder or {csv_name}, which has no "
                f"train/test split (every {model.unit[:-1]} is scored); use --split "
                "all, or NAME:DOMAIN with --split test for a registered dataset"
            )
        if isinstance(model, LoadedMILModel):
            ds, names, warnings = open_bag_files(path, spec, model, skip_bad, cmap)
        else:
            ds, names, warnings = open_image_files(path, model, skip_bad, cmap)
        return EvalData(ds, None, names, warnings=warnings)
    if path.exists():
        raise DataError(f"{spec!r}: expected a {csv_file} .csv file or a folder")
    name, _, domains = spec.partition(":")
    data_cfg, source = _data_settings(name, model, config, overrides)
    if isinstance(model, LoadedMILModel):
        ds = bag_dataset(name, data_cfg, model)
    else:
        ds, data_cfg = image_dataset(name, data_cfg, model)
    return _registered(ds, domains, model.class_names, cmap, data_cfg, source)


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
    if renamed(mapping):  # a copy: registered datasets may be cached, shared
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
    return EvalData(ds, chosen, renamed(mapping), settings)
