"""Self-supervised building blocks: SimCLR views, heads, the ATSA controller, plots."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedpath.utils.lazy import lazy_exports

if TYPE_CHECKING:  # what the lazy exports below resolve to
    from fedpath.ssl.atsa import ATSA, check_atsa_bounds, instability
    from fedpath.ssl.augment import SimCLRAugment, simclr_augment
    from fedpath.ssl.heads import DisentanglingHead, ProjectionHead, teacher_projection

# Lazy, so that ``fedpath --help`` (which imports fedpath.ssl.cli) stays light.
_EXPORTS = {
    "ATSA": "atsa",
    "check_atsa_bounds": "atsa",
    "instability": "atsa",
    "SimCLRAugment": "augment",
    "simclr_augment": "augment",
    "DisentanglingHead": "heads",
    "ProjectionHead": "heads",
    "teacher_projection": "heads",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "ATSA",
    "DisentanglingHead",
    "ProjectionHead",
    "SimCLRAugment",
    "check_atsa_bounds",
    "instability",
    "simclr_augment",
    "teacher_projection",
]
