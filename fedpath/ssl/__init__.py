"""Self-supervised building blocks: SimCLR views, heads, the ATSA controller, plots."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"fedpath.ssl.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fedpath.ssl' has no attribute {name!r}")


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
