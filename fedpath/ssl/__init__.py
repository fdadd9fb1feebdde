"""Self-supervised building blocks: SimCLR views, heads, the ATSA controller, plots."""

from fedpath.ssl.atsa import ATSA, check_atsa_bounds, instability
from fedpath.ssl.augment import SimCLRAugment, simclr_augment
from fedpath.ssl.heads import DisentanglingHead, ProjectionHead, teacher_projection

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
