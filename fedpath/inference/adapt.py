"""A model file with its BatchNorm statistics re-estimated on a site's images.

``fedpath adapt-bn``: AdaBN (:mod:`fedpath.tasks.adapt`) on the unlabelled images
of a hospital, written as a new model file that records it.
"""

from __future__ import annotations

import copy
import hashlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from fedpath.artifact import LoadedModel, save_model
from fedpath.data.base import DataError
from fedpath.errors import ArtifactError
from fedpath.inference.images import Progress, image_batches
from fedpath.mil.export import LoadedMILModel
from fedpath.tasks.adapt import adapt_batchnorm


def adapt_model_file(
    model: LoadedModel | LoadedMILModel,
    images: Path,
    out: Path,
    batch_size: int = 64,
    skip_bad: bool = False,
    progress: Progress | None = None,
    all_layers: bool = False,
) -> dict[str, Any]:
    """Write ``out``: ``model`` with its BatchNorm statistics re-estimated on the
    unlabelled images under ``images`` (AdaBN, :mod:`fedpath.tasks.adapt`; any
    folder layout, labels are never read), recorded in the file's
    ``adapted_bn``. Every other weight, the temperature, the threshold and the
    test-time augmentation stay as they were; so do the statistics of the
    layers training kept fixed (the file's ``bn_fixed``: the frozen first stages
    of a partly fine-tuned model), unless ``all_layers``. A MIL model is
    refused: it has no BatchNorm layers to adapt."""
    if not isinstance(model, LoadedModel):
        raise ArtifactError(
            f"model file {str(model.path)!r} holds a {model.kind} model (slide "
            "bags, not images); BatchNorm adaptation is for image models"
        )
    if model.path is not None and out.resolve() == model.path.resolve():
        raise DataError(
            f"--out {str(out)!r} is the model file itself; write the adapted "
            "model to a new file (the federation's model stays as it is)"
        )
    net = copy.deepcopy(model.model)
    skipped: list[str] = []
    batches = image_batches(model, images, batch_size, skip_bad, skipped, progress)
    keep = () if all_layers else model.meta.bn_fixed
    try:
        n = adapt_batchnorm(net, (model.to_tensor(x) for _, x in batches), keep)
    except ValueError as err:
        raise DataError(f"model file {str(model.path)!r}: {err}") from None
    source = hashlib.sha256(model.path.read_bytes()).hexdigest() if model.path else ""
    meta = replace(
        model.meta,
        adapted_bn={
            "images": n,
            "folder": images.resolve().name,
            "from_sha256": source,
            "layers": "trained" if keep else "all",
            "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    )
    save_model(out, net, meta)
    return {"images": n, "skipped": skipped, "kept": len(keep)}
