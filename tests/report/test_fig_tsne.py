"""The t-SNE figure's embedding (fedpath.report.fig_tsne) of a run's sampled
images: shaped, spread, and the same for the same seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpath.loading import load_model
from fedpath.report.fig_tsne import embed
from fedpath.report.runs import find_experiments
from fedpath.report.samples import run_samples


def test_tsne_is_shaped_and_deterministic(suite_dir: Path) -> None:
    (exp,) = find_experiments([suite_dir])
    run = exp.first_run("fedstain")
    assert run is not None and run.model_file is not None
    model = load_model(run.model_file)
    s = run_samples(run, per_domain=10, seed=0)
    a, b = embed("x", model, s, seed=0), embed("x", model, s, seed=0)
    assert a.xy.shape == (30, 2) and np.array_equal(a.xy, b.xy)
    assert np.isfinite(a.xy).all() and a.xy.std(0).min() > 0  # not collapsed
