"""What a tracker names: a record's scalars, and where a run's logs go.

One name per ``results.jsonl`` field, ``<kind>[/<split>/<domain>]/<field>``, in
the characters both backends accept; the TensorBoard folder and MLflow store of
a run (see :mod:`fedpath.runtime.tracking`). Imports no tracking backend.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedpath.config import ExperimentConfig

#: the TensorBoard log folder inside a run directory (no ``runtime.tracking_dir``)
TENSORBOARD_DIR = "tensorboard"
#: the MLflow file store under ``output_dir`` (no ``runtime.tracking_dir``)
MLFLOW_STORE = "mlruns"
#: in a run directory: the MLflow run that tracks it (reused by ``--resume``)
MLFLOW_RUN = "mlflow_run.json"
#: record fields that say which record it is, not what was measured
LABEL_FIELDS = ("method", "target", "seed", "kind", "round", "split", "domain")

_BAD_CHARS = re.compile(r"[^\w.\- /]")


def metric_name(*parts: Any) -> str:
    """Join name parts with ``/``, in the characters MLflow accepts (others: ``_``;
    no empty, ``.`` or ``..`` path components), so both backends use one name."""
    text = _BAD_CHARS.sub("_", "/".join(str(p) for p in parts))
    pieces = [p if p not in (".", "..") else "_" for p in text.split("/") if p]
    return "/".join(pieces)


def scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The numeric fields of one ``results.jsonl`` record under their tracker names.

    ``<kind>[/<split>/<domain>]/<field>``; the labels (:data:`LABEL_FIELDS`),
    strings, booleans, nulls (an undefined metric) and non-finite numbers are left
    out.
    """
    head = [record.get("kind", "record")]
    head += [record[k] for k in ("split", "domain") if k in record]
    out: dict[str, float] = {}
    for key, value in record.items():
        if key in LABEL_FIELDS or isinstance(value, bool):
            continue
        if isinstance(value, int | float) and math.isfinite(value):
            out[metric_name(*head, key)] = float(value)
    return out


def run_path(cfg: ExperimentConfig, labels: Mapping[str, Any]) -> Path:
    """``<name>/<method>/<target>/seed<seed>``: where a run is kept below
    ``output_dir`` (and its TensorBoard logs below ``runtime.tracking_dir``)."""
    target = str(labels["target"]).replace("/", "_")
    return Path(cfg.name, cfg.method, target, f"seed{labels['seed']}")


def tensorboard_dir(
    cfg: ExperimentConfig, run_dir: Path, labels: Mapping[str, Any]
) -> Path:
    """The TensorBoard log folder of one run."""
    if cfg.runtime.tracking_dir is None:
        return run_dir / TENSORBOARD_DIR
    return Path(cfg.runtime.tracking_dir) / run_path(cfg, labels)


def mlflow_store(cfg: ExperimentConfig) -> Path:
    """The MLflow file store of a config's runs (one per output_dir by default)."""
    root = cfg.runtime.tracking_dir
    return Path(root) if root is not None else Path(cfg.output_dir) / MLFLOW_STORE
