"""What a run's numbers depend on besides its config: the software and the
arithmetic.

A run is bit-reproducible from its config and seed in one environment. The
same commit and config in another one may not be: on AMi-Br, FedAvg's Hamamatsu
XR seed-0 run gave 64.45 balanced accuracy in one session and 63.77 in the next
(a new checkout, its packages installed afresh; PyTorch's AVX2 and AVX-512
CPU kernels gave identical numbers, so the cause was elsewhere, and the earlier
run had recorded nothing to trace it by). ``final.json`` therefore records
:func:`environment`, the units files carry its :func:`fingerprint`, and
``fedpath compare`` says how many pairs join two environments.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

__all__ = ["PACKAGES", "environment", "fingerprint"]

#: the distributions whose release can move a run's numbers
PACKAGES = (
    "torch",
    "torchvision",
    "numpy",
    "scipy",
    "scikit-learn",
    "pillow",
    "timm",
    "efficientnet-lite-pytorch",
)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def environment() -> dict[str, Any]:
    """The software and arithmetic of this process: Python, the versions of
    :data:`PACKAGES`, PyTorch's CPU kernel set and threads, the machine and,
    where one is used, the GPU's name."""
    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "system": sys.platform,
        "packages": {name: _version(name) for name in PACKAGES},
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
    return env


def fingerprint(env: dict[str, Any] | None) -> str:
    """One short line naming what moves the numbers (the package versions, the
    kernel set, PyTorch's threads, the GPU): equal lines, equal arithmetic for
    the same config;
    ``""`` for a run that recorded no environment (fedpath before 2026-12-07)."""
    if not env:
        return ""
    packages = env.get("packages") or {}
    parts = [f"{name} {packages[name]}" for name in PACKAGES if name in packages]
    machine = f"{env.get('machine', '?')} {env.get('cpu_capability', '?')}"
    parts.append(f"{machine} x {env.get('threads', '?')} threads")
    if env.get("gpu"):
        parts.append(str(env["gpu"]))
    return "; ".join(parts)
