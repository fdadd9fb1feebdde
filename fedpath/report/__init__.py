"""``fedpath report``: one self-contained HTML page for runs and suites.

For each experiment under the given paths (``{output_dir}/{name}``): who ran what
(config, seeds, encoder and its sha256, fedpath version), the papers' table
(method x unseen domain, mean ± std over seeds, Avg and the worst domain, the
best of each column marked) with the sources' numbers beside it, per-round
curves, the data's stain statistics, what FedStain's augmentations do to a few
real patches, a t-SNE of every method's embeddings and Grad-CAM maps on
unseen-domain patches; FedAD's loss terms and ATSA trace; FedHD's clients x
methods table. Each figure is its own module (``fig_*.py``), callable from
Python; the stain figure is :func:`fedpath.stain.analysis.stain_figure` (also
``fedpath stain-report``'s) and the FedAD figure :func:`fedpath.ssl.plots.plot_ssl`
(also ``fedpath plot-ssl``'s).

Figures that need a model and images (t-SNE, Grad-CAM, augmentations, stain
statistics) read the runs' own data from their ``config.yaml``; where that data
is not on this machine the section says so and the rest of the page is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedpath.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from fedpath.report.build import write_report
    from fedpath.report.builder import ReportInfo

__all__ = ["ReportInfo", "write_report"]
__getattr__ = lazy_exports(__name__, {"ReportInfo": "builder", "write_report": "build"})
