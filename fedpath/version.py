"""The fedpath version, in a module of its own.

Every module that records the version (model files, run records, the CLI) reads it
here rather than from :mod:`fedpath` itself, whose lazy ``load_model`` sits above
them all: importing the package from below it would close an import circle.
"""

from __future__ import annotations

__version__ = "0.1.0"
