"""Use an exported model at a hospital that never took part: evaluate and predict.

``evaluate``: any dataset fedpath can read (a manifest CSV, a folder per class, a
folder per domain and class, or a registered dataset and domain), metrics overall
and per domain, per-class sensitivity and specificity and bootstrap confidence
intervals (:mod:`~fedpath.inference.scoring`). ``predict``: one CSV row per image
file (:mod:`~fedpath.inference.predict`). Images are resized exactly as the
training data was (:func:`fedpath.data.files.load_image`). A model file's
temperature scales every probability, and its operating point (a threshold on the
positive class) makes the predictions and an ``operating_point`` block of metrics.

A site names its folders as it likes: class folders (and manifest labels) match
the model's classes case-insensitively (``Normal/`` is ``normal``), and
``--class-map FOLDER=CLASS,...`` maps other names (``Mitosis=atypical``):
:mod:`~fedpath.inference.classes`. A registered dataset (``synthetic:hospital_3``)
is rebuilt with the data settings the model's run used, which the model file
records, so its metrics are the run's.

A MIL model file (``models/<client>.fpm`` of a slide-bag run, ``kind: mil``:
:mod:`fedpath.mil.export`) is used the same way on slide bags (``.h5`` / ``.pt``
files of patch embeddings, :func:`fedpath.mil.bags.read_bag_file`): labelled by a
CSV of ``slide_id,label[,domain][,path]``, by ``<class>/`` folders of bag files,
or a registered bag dataset (``synthetic_bags:hospital_1``); one opener reads
either kind (:func:`~fedpath.inference.opening.open_data`); ``predict`` writes one
row per slide (:func:`~fedpath.inference.predict.predict_bags`).

The modules, by job: :mod:`~fedpath.inference.opening` (the one data opener),
:mod:`~fedpath.inference.images` and :mod:`~fedpath.inference.bags` (a site's
files of each kind), :mod:`~fedpath.inference.classes` (class names),
:mod:`~fedpath.inference.scoring` (metrics), :mod:`~fedpath.inference.predict`
(CSV of predictions), :mod:`~fedpath.inference.adapt` (``fedpath adapt-bn``).
"""

from __future__ import annotations

from fedpath.inference.adapt import adapt_model_file
from fedpath.inference.classes import parse_class_map, resolve_classes
from fedpath.inference.opening import SPLITS, AnyModel, EvalData, open_data
from fedpath.inference.predict import predict_bags, predict_files
from fedpath.inference.scoring import evaluate

__all__ = [
    "SPLITS",
    "AnyModel",
    "EvalData",
    "adapt_model_file",
    "evaluate",
    "open_data",
    "parse_class_map",
    "predict_bags",
    "predict_files",
    "resolve_classes",
]
