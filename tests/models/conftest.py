"""Shared by the tests of pretrained encoders (``test_pretrained.py``,
``test_efficientnet_lite.py``): no network, the optional packages, seeded images."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import torch

from fedpath.models import efficientnet_lite as lite


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every weight here comes from disk: any connection attempt fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a test tried to open a network connection: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def lite_packages(name: str) -> Any:
    """The reference EfficientNet class, or skip naming what is missing."""
    why = "needs the optional extra: pip install 'fedpath[pretrained]'"
    pytest.importorskip(lite.VARIANTS[name].module, reason=why)
    return pytest.importorskip("efficientnet_lite_pytorch", reason=why).EfficientNet


def seeded(size: int, n: int = 2) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(0))
