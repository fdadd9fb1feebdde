"""fedpath: federated domain generalization for computational pathology."""

from __future__ import annotations

from typing import Any

from fedpath.version import __version__

__all__ = ["__version__", "load_model"]


def __getattr__(name: str) -> Any:
    # Lazy: `import fedpath` stays cheap; torch loads when a model is first used.
    if name == "load_model":
        from fedpath.loading import load_model

        return load_model
    raise AttributeError(f"module 'fedpath' has no attribute {name!r}")
