"""Multiple-instance learning on slide embeddings: the building blocks of FedHD.

- :mod:`~fedpath.mil.bags`: slides as bags (:class:`SlideBag`, :class:`BagDataset`),
  CLAM feature readers, and synthetic hospitals with a rare diagnostic cluster;
- :mod:`~fedpath.mil.models` (+ ``models_attention``, ``transmil``): ABMIL,
  CLAM-SB/MB, TransMIL and ACMIL behind one interface, registered in
  :data:`MIL_MODELS`;
- :mod:`~fedpath.mil.gmm`: per-slide Gaussian mixtures fitted by EM in torch;
- :mod:`~fedpath.mil.distill`: FedHD's one-to-one Gaussian-mixture feature
  alignment (design points 1-2) and the ablations (single Gaussian, mean only,
  many-to-one);
- :mod:`~fedpath.mil.predict`: a model's class probabilities on bags (local
  training, with FedHD's curriculum, is the slide-bag task's loop:
  :mod:`fedpath.tasks.bags`).
"""

from fedpath.mil import models_attention, transmil  # noqa: F401  (registration)
from fedpath.mil.alignment import alignment_loss
from fedpath.mil.bags import (
    BagDataset,
    SlideBag,
    load_clam_bags,
    read_bag_file,
    synthetic_bags,
)
from fedpath.mil.distill import (
    DistillOptions,
    DistillResult,
    compress_slides,
    distill_features,
    distill_slide,
    distill_slides,
)
from fedpath.mil.gmm import GMM, fit_gmm, fit_gmms
from fedpath.mil.models import MIL_MODELS, MILModel, MILOutput, build_mil_model
from fedpath.mil.predict import evaluate_mil

__all__ = [
    "GMM",
    "MIL_MODELS",
    "BagDataset",
    "DistillOptions",
    "DistillResult",
    "MILModel",
    "MILOutput",
    "SlideBag",
    "alignment_loss",
    "build_mil_model",
    "compress_slides",
    "distill_features",
    "distill_slide",
    "distill_slides",
    "evaluate_mil",
    "fit_gmm",
    "fit_gmms",
    "load_clam_bags",
    "read_bag_file",
    "synthetic_bags",
]
