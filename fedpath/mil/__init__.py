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

from __future__ import annotations

from typing import TYPE_CHECKING

from fedpath.utils.lazy import lazy_exports

if TYPE_CHECKING:  # what the lazy exports below resolve to
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

# Lazy, so that ``fedpath --help`` (which imports the command-line modules of this
# package) does not load PyTorch; the registry imports the model modules itself
# (MIL_MODELS's plugins).
_EXPORTS = {
    "BagDataset": "bags",
    "DistillOptions": "distill",
    "DistillResult": "distill",
    "GMM": "gmm",
    "MILModel": "models",
    "MILOutput": "models",
    "MIL_MODELS": "models",
    "SlideBag": "bags",
    "alignment_loss": "alignment",
    "build_mil_model": "models",
    "compress_slides": "distill",
    "distill_features": "distill",
    "distill_slide": "distill",
    "distill_slides": "distill",
    "evaluate_mil": "predict",
    "fit_gmm": "gmm",
    "fit_gmms": "gmm",
    "load_clam_bags": "bags",
    "read_bag_file": "bags",
    "synthetic_bags": "bags",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)


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
