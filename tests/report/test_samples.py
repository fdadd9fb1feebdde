"""The images the model figures look at (fedpath.report.samples): each domain's
test images of a run's fold, the unseen one marked, the same for the same seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedpath.report.runs import find_experiments
from fedpath.report.samples import run_dataset, run_samples


def test_samples_cover_every_domain_and_repeat_with_the_seed(suite_dir: Path) -> None:
    (exp,) = find_experiments([suite_dir])
    run = exp.first_run("fedstain")
    assert run is not None
    s = run_samples(run, per_domain=10, seed=0)
    assert len(s.images) == 30 and s.unseen.sum() == 10  # 3 hospitals x 10
    assert set(s.domains[s.unseen]) == {run.target} and s.target == run.target
    assert len(set(s.domains)) == 3 and s.images.dtype.is_floating_point is False
    assert len(s.labels) == 30 and set(s.labels) <= set(range(len(s.class_names)))
    assert np.array_equal(s.images, run_samples(run, 10, 0).images)
    assert not np.array_equal(s.images, run_samples(run, 10, 1).images)
    assert run_dataset(run) is run_dataset(run)  # loaded once per experiment
